#include "src/scheduler/hami_format.h"

#include <gtest/gtest.h>

#include "src/scheduler/test_nodes.h"

namespace gs::scheduler::hami {
namespace {

// As HAMi's device plugin writes it (Go encoding/json, omitempty: index 0, numa 0 left out).
const char kRegister[] =
    R"([{"id":"GPU-0a1b","count":10,"devmem":81559,"devcore":100,"type":"NVIDIA-NVIDIA H100 80GB HBM3","mode":"hami-core","health":true},)"
    R"({"id":"GPU-2c3d","index":1,"count":10,"devmem":81559,"devcore":100,"type":"NVIDIA-NVIDIA H100 80GB HBM3","numa":1,"mode":"hami-core"}])";

TEST(HamiFormat, DecodesTheRegisterAnnotationWithGoZeroValues) {
  auto n = DecodeNodeRegister("node-a", kRegister);
  ASSERT_TRUE(n.ok()) << n.status().message();
  ASSERT_EQ(n->gpus.size(), 2u);
  EXPECT_EQ(n->name, "node-a");
  EXPECT_EQ(n->gpus[0].uuid, "GPU-0a1b");
  EXPECT_EQ(n->gpus[0].index, 0);
  EXPECT_EQ(n->gpus[0].slots, 10);
  EXPECT_EQ(n->gpus[0].memory_mib, 81559);
  EXPECT_EQ(n->gpus[0].cores, 100);
  EXPECT_EQ(n->gpus[0].model, "NVIDIA-NVIDIA H100 80GB HBM3");
  EXPECT_EQ(n->gpus[0].numa, 0);
  EXPECT_TRUE(n->gpus[0].healthy);
  EXPECT_EQ(n->gpus[1].index, 1);
  EXPECT_EQ(n->gpus[1].numa, 1);
  EXPECT_FALSE(n->gpus[1].healthy) << "omitted health is Go's false";
}

TEST(HamiFormat, EncodesTheRegisterAnnotationExactlyAsGoDoes) {
  auto n = DecodeNodeRegister("node-a", kRegister);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(EncodeNodeRegister(n->gpus), kRegister);
}

TEST(HamiFormat, ReadsTheOlderColonForm) {
  auto n = DecodeNodeRegister(
      "n", "GPU-a,10,40960,100,NVIDIA-A100,0,true:GPU-b,10,40960,100,NVIDIA-A100,1,false,1,hami-core:");
  ASSERT_TRUE(n.ok()) << n.status().message();
  ASSERT_EQ(n->gpus.size(), 2u);
  EXPECT_EQ(n->gpus[1].index, 1);
  EXPECT_FALSE(n->gpus[1].healthy);
}

TEST(HamiFormat, MalformedRegisterNamesTheField) {
  auto n = DecodeNodeRegister("n", R"([{"id":"GPU-a","count":10,"devmem":"lots","devcore":100}])");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("\"devmem\""), std::string::npos) << n.status().message();
  n = DecodeNodeRegister("n", R"([{"id":"GPU-a","count":10,"devcore":100,"health":true}])");
  EXPECT_NE(n.status().message().find("memory"), std::string::npos) << n.status().message();
  n = DecodeNodeRegister("n", "[{");
  EXPECT_NE(n.status().message().find("hami.io/node-nvidia-register"), std::string::npos);
  n = DecodeNodeRegister("n", "GPU-a,x,1,100,T,0,true:");
  EXPECT_NE(n.status().message().find("count"), std::string::npos) << n.status().message();
}

TEST(HamiFormat, MigCardsAreNotOffered) {
  auto n = DecodeNodeRegister(
      "n",
      R"([{"id":"GPU-a","count":1,"devmem":1,"devcore":100,"mode":"mig","health":true},{"id":"GPU-b","count":1,"devmem":1,"devcore":100,"mode":"hami-core","health":true}])");
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(n->gpus.size(), 1u);
  EXPECT_EQ(n->gpus[0].uuid, "GPU-b");
}

TEST(HamiFormat, PodDevicesRoundTripInHamisFormat) {
  PodDecision d;
  d.node = "n";
  d.containers = {{DeviceShare{"GPU-a", "x", 3000, 30}, DeviceShare{"GPU-b", "x", 3000, 30}},
                  {},
                  {DeviceShare{"GPU-c", "x", 100, 0}}};
  std::string s = EncodePodDevices(d);
  EXPECT_EQ(s, "GPU-a,NVIDIA,3000,30:GPU-b,NVIDIA,3000,30:;;GPU-c,NVIDIA,100,0:;");
  auto back = DecodePodDevices(s);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, d.containers);
  EXPECT_EQ((*back)[0][0].model, "NVIDIA");
}

TEST(HamiFormat, MalformedPodDevicesNameTheContainerAndField) {
  auto d = DecodePodDevices("GPU-a,NVIDIA,3000,30:;GPU-b,NVIDIA,lots,30:;");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("container #1"), std::string::npos) << d.status().message();
  EXPECT_NE(d.status().message().find("memory"), std::string::npos);
  EXPECT_FALSE(DecodePodDevices("GPU-a,NVIDIA,3000:;").ok());
  EXPECT_FALSE(DecodePodDevices("GPU-a,NVIDIA,1,101:;").ok());
}

TEST(HamiFormat, DecisionAnnotationsCarryNodeDevicesTimesAndPhase) {
  PodDecision d;
  d.node = "node-7";
  d.containers = {{DeviceShare{"GPU-a", "m", 2048, 25}}};
  Annotations a = DecisionAnnotations(d, 1790000000);
  EXPECT_EQ(a.at("hami.io/vgpu-node"), "node-7");
  EXPECT_EQ(a.at("hami.io/vgpu-time"), "1790000000");
  EXPECT_EQ(a.at("hami.io/bind-time"), "1790000000");
  EXPECT_EQ(a.at("hami.io/bind-phase"), "allocating");
  EXPECT_EQ(a.at("hami.io/vgpu-devices-to-allocate"), "GPU-a,NVIDIA,2048,25:;");
  EXPECT_EQ(a.at("hami.io/vgpu-devices-allocated"), "GPU-a,NVIDIA,2048,25:;");
  auto r = RecordFromAnnotations("uid-1", a);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->decision, d);
  auto none = RecordFromAnnotations("uid-2", {{"hami.io/vgpu-node", "n"}});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(HamiFormat, Handshake) {
  EXPECT_EQ(EncodeRequestingHandshake("2026-11-15 10:00:00"), "Requesting_2026-11-15 10:00:00");
  auto h = DecodeHandshake("Requesting_2026-11-15 10:00:00");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->state, HandshakeState::kRequesting);
  EXPECT_EQ(h->time, "2026-11-15 10:00:00");
  EXPECT_EQ(DecodeHandshake("Reported 2026-11-15 10:00:01")->state, HandshakeState::kReported);
  EXPECT_EQ(DecodeHandshake("Deleted_2026-11-15 10:00:02")->state, HandshakeState::kDeleted);
  auto bad = DecodeHandshake("hello");
  EXPECT_NE(bad.status().message().find("hami.io/node-handshake"), std::string::npos);
}

TEST(HamiFormat, RequestAnnotations) {
  PodRequest r;
  Annotations a = {{"nvidia.com/use-gputype", "A100, H100"},   {"nvidia.com/nouse-gputype", "V100"},
                   {"nvidia.com/use-gpuuuid", "GPU-a,GPU-b"},  {"nvidia.com/nouse-gpuuuid", " GPU-c "},
                   {"nvidia.com/numa-bind", "true"},           {"hami.io/gpu-scheduler-policy", "binpack"},
                   {"hami.io/node-scheduler-policy", "spread"}};
  ASSERT_TRUE(ApplyRequestAnnotations(a, &r).ok());
  EXPECT_EQ(r.use_types, (std::vector<std::string>{"A100", "H100"}));
  EXPECT_EQ(r.nouse_types, (std::vector<std::string>{"V100"}));
  EXPECT_EQ(r.use_uuids, (std::vector<std::string>{"GPU-a", "GPU-b"}));
  EXPECT_EQ(r.nouse_uuids, (std::vector<std::string>{"GPU-c"}));
  EXPECT_TRUE(r.numa_bind);
  EXPECT_EQ(r.gpu_policy, Policy::kBinpack);
  EXPECT_EQ(r.node_policy, Policy::kSpread);
  EXPECT_EQ(r.refused, "");
  PodRequest r2;
  ASSERT_TRUE(ApplyRequestAnnotations({{"nvidia.com/numa-bind", "0"}}, &r2).ok());
  EXPECT_FALSE(r2.numa_bind);
  ASSERT_TRUE(ApplyRequestAnnotations({{"hami.io/gpu-scheduler-policy", " spread , binpack "}}, &r2).ok());
  EXPECT_EQ(r2.gpu_policy, Policy::kSpread) << "the first policy named wins";
}

// A value that cannot be read refuses the pod with a message naming the annotation: HAMi
// would drop it (numa-bind 'yes') or treat it as the default, and the pod would be placed
// without the constraint it asked for.
TEST(HamiFormat, UnreadableRequestAnnotationsAreErrorsNamingThem) {
  struct Case {
    const char* key;
    const char* value;
    const char* names;  // in the error besides the key
  } cases[] = {
      {"nvidia.com/numa-bind", "yes", "'yes'"},
      {"hami.io/node-scheduler-policy", "fullest", "'fullest'"},
      {"hami.io/gpu-scheduler-policy", "binpack,densest", "'densest'"},
      {"hami.io/node-scheduler-policy", "mutex", "'mutex'"},  // a GPU policy only
      {"nvidia.com/use-gpuindexes", "one", "'one'"},
      {"nvidia.com/use-gpuindexes", "0,x", "'x'"},
      {"nvidia.com/use-gpuindexes", "1;2", "'1;2'"},
      {"nvidia.com/use-gpuindexes", "-1", "'-1'"},
      {"nvidia.com/use-gpuindexes", "+1", "'+1'"},
      {"nvidia.com/use-gpuindexes", "01", "'01'"},
      {"nvidia.com/use-gpuindexes", "1.0", "'1.0'"},
      {"nvidia.com/use-gpuindexes", "0x1", "'0x1'"},
      {"nvidia.com/use-gpuindexes", "1 2", "'1 2'"},
      {"nvidia.com/use-gpuindexes", "9999999999", "'9999999999'"},
      {"nvidia.com/nouse-gpuindexes", "0,GPU-a", "'GPU-a'"},
  };
  for (const Case& c : cases) {
    PodRequest r;
    Status s = ApplyRequestAnnotations({{c.key, c.value}}, &r);
    EXPECT_FALSE(s.ok()) << c.key << "=" << c.value;
    EXPECT_NE(s.message().find(c.key), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.names), std::string::npos) << s.message();
  }
}

TEST(HamiFormat, IndexListsAreTheRegistersIndexes) {
  struct Case {
    const char* value;
    std::vector<int> want;
  } cases[] = {
      {"0,1", {0, 1}}, {" 5 ", {5}}, {"3,1,3", {1, 3}}, {"0,,2,", {0, 2}},
      {"10", {10}},    {"", {}},     {" , ", {}},       {"7, 0", {0, 7}},
  };
  for (const Case& c : cases) {
    PodRequest use, nouse;
    ASSERT_TRUE(ApplyRequestAnnotations({{"nvidia.com/use-gpuindexes", c.value}}, &use).ok()) << c.value;
    EXPECT_EQ(use.use_indexes, c.want) << "'" << c.value << "'";
    EXPECT_TRUE(use.nouse_indexes.empty());
    ASSERT_TRUE(ApplyRequestAnnotations({{"nvidia.com/nouse-gpuindexes", c.value}}, &nouse).ok()) << c.value;
    EXPECT_EQ(nouse.nouse_indexes, c.want) << "'" << c.value << "'";
    EXPECT_TRUE(nouse.use_indexes.empty());
    EXPECT_EQ(use.refused, "");
  }
  PodRequest both;
  ASSERT_TRUE(
      ApplyRequestAnnotations({{"nvidia.com/use-gpuindexes", "0,1,2"}, {"nvidia.com/nouse-gpuindexes", "1"}}, &both)
          .ok());
  EXPECT_EQ(both.use_indexes, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(both.nouse_indexes, (std::vector<int>{1})) << "both lists are kept: both apply";
}

// What HAMi lets a pod state and gpuslice does not implement is recorded as a refusal
// naming it (the pod then fits nowhere, placement_test.cc); what it implements is not.
TEST(HamiFormat, UnsupportedRequestAnnotationsAreRefusedByName) {
  struct Case {
    Annotations annos;
    std::string refused;  // "" = nothing refused
  } cases[] = {
      {{{"nvidia.com/vgpu-mode", "mig"}}, "nvidia.com/vgpu-mode 'mig' is not supported by gpuslice"},
      {{{"nvidia.com/vgpu-mode", "mps"}}, "nvidia.com/vgpu-mode 'mps' is not supported by gpuslice"},
      {{{"nvidia.com/vgpu-mode", "hami-core"}}, ""},
      {{{"nvidia.com/vgpu-mode", "hami-core,mig"}}, ""},  // hami-core cards match, as in HAMi
      {{{"hami.io/gpu-scheduler-policy", "mutex"}},
       "hami.io/gpu-scheduler-policy 'mutex' is not supported by gpuslice"},
      {{{"hami.io/gpu-scheduler-policy", "topology-aware"}},
       "hami.io/gpu-scheduler-policy 'topology-aware' is not supported by gpuslice"},
      {{{"hami.io/gpu-scheduler-policy", "binpack,numa"}},
       "hami.io/gpu-scheduler-policy 'numa' is not supported by gpuslice"},
      {{{"hami.io/gpu-scheduler-policy", "binpack"}}, ""},
      {{{"hami.io/device-scoring-weights", "slot=1,core=1,memory=3"}},
       "hami.io/device-scoring-weights is not supported by gpuslice"},
      {{{"nvidia.com/use-gpuindex", "0"}}, "nvidia.com/use-gpuindex is not supported by gpuslice"},
      {{{"nvidia.com/nouse-gpumodel", "T4"}}, "nvidia.com/nouse-gpumodel is not supported by gpuslice"},
      {{{"nvidia.com/use-gpuindexes", "0"}, {"nvidia.com/nouse-gpuuuid", "GPU-a"}, {"nvidia.com/use-gputype", "A"}},
       ""},
      {{{"nvidia.com/vgpu-mode", "mig"}, {"hami.io/device-scoring-weights", "slot=1,core=1,memory=1"}},
       "nvidia.com/vgpu-mode 'mig' is not supported by gpuslice; "
       "hami.io/device-scoring-weights is not supported by gpuslice"},
      {{{"example.com/anything", "x"}, {"nvidia.com/gpu.product", "A100"}}, ""},
  };
  for (const Case& c : cases) {
    PodRequest r;
    ASSERT_TRUE(ApplyRequestAnnotations(c.annos, &r).ok()) << c.refused;
    EXPECT_EQ(r.refused, c.refused) << (c.annos.empty() ? "" : c.annos.begin()->first);
  }
  PodRequest r;
  ASSERT_TRUE(ApplyRequestAnnotations({{"hami.io/gpu-scheduler-policy", "binpack,numa"}}, &r).ok());
  EXPECT_EQ(r.gpu_policy, Policy::kBinpack) << "the policy is still read; the pod is refused for the rest";
}

TEST(HamiFormat, DeviceCordonMarksTheCardsItNamesAndIgnoresTheRest) {
  NodeInventory n = testing::Node("n1", 3);
  ApplyDeviceCordon(" n1-gpu2,,n1-gpu0 , GPU-not-here", &n);
  EXPECT_TRUE(n.gpus[0].cordoned);
  EXPECT_FALSE(n.gpus[1].cordoned);
  EXPECT_TRUE(n.gpus[2].cordoned);
  NodeInventory m = testing::Node("n1", 2);
  ApplyDeviceCordon("", &m);
  ApplyDeviceCordon(" , ", &m);
  EXPECT_FALSE(m.gpus[0].cordoned || m.gpus[1].cordoned);
}

}  // namespace
}  // namespace gs::scheduler::hami
