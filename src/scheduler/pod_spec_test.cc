#include "src/scheduler/pod_spec.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gs::scheduler {
namespace {

using nlohmann::json;

TEST(PodSpec, KubernetesQuantities) {
  EXPECT_EQ(*ParseKubeQuantity("3000"), 3000);
  EXPECT_EQ(*ParseKubeQuantity("3k"), 3000);
  EXPECT_EQ(*ParseKubeQuantity("1Gi"), 1073741824);
  EXPECT_EQ(*ParseKubeQuantity("5e3"), 5000);
  EXPECT_EQ(*ParseKubeQuantity("1.5k"), 1500);
  EXPECT_EQ(*ParseKubeQuantity("2000m"), 2);
  EXPECT_FALSE(ParseKubeQuantity("500m").ok());
  EXPECT_FALSE(ParseKubeQuantity("1.5").ok());
  EXPECT_FALSE(ParseKubeQuantity("12q").ok());
  EXPECT_FALSE(ParseKubeQuantity("").ok());
  EXPECT_FALSE(ParseKubeQuantity("99E").ok()) << "overflow";
  EXPECT_FALSE(ParseKubeQuantity("9223372036854775808").ok()) << "overflow without a suffix";
  EXPECT_FALSE(ParseKubeQuantity("-9223372036854775808").ok()) << "fuzz/regressions/quantity";
  EXPECT_EQ(*ParseKubeQuantity("9223372036854775807"), INT64_MAX);
}

// The shape HAMi's examples use, as the API server serialises it (quantities as strings,
// 3000 canonicalised to "3k").
json ExamplePod() {
  return json::parse(R"({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "gpu-pod", "namespace": "default", "uid": "0b6d-11",
                 "annotations": {"nvidia.com/use-gputype": "A100", "hami.io/vgpu-node": "forged"}},
    "spec": {
      "initContainers": [{"name": "init", "image": "busybox"}],
      "containers": [
        {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3k", "nvidia.com/gpucores": "30"}}},
        {"name": "b", "resources": {"requests": {"cpu": "1"}}},
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}}},
        {"name": "d", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        {"name": "e", "resources": {"requests": {"nvidia.com/gpumem": "1024"}}}
      ]}})");
}

TEST(PodSpec, ReadsEveryContainerInHamisOrderWithItsDefaults) {
  auto r = PodRequestFromJson(ExamplePod());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->uid, "0b6d-11");
  EXPECT_EQ(r->name, "gpu-pod");
  EXPECT_EQ(r->namespace_name, "default");
  ASSERT_EQ(r->containers.size(), 6u);
  EXPECT_EQ(r->containers[0].gpus, 0) << "init container first";
  EXPECT_EQ(r->containers[1].gpus, 2);
  EXPECT_EQ(r->containers[1].memory_mib, 3000);
  EXPECT_EQ(r->containers[1].cores, 30);
  EXPECT_EQ(r->containers[2].gpus, 0);
  EXPECT_EQ(r->containers[3].memory_percent, 50);
  EXPECT_EQ(r->containers[3].cores, 0);
  EXPECT_EQ(r->containers[4].cores, 100) << "a bare nvidia.com/gpu is a whole card";
  EXPECT_EQ(r->containers[5].gpus, 1) << "gpumem alone means one GPU";
  EXPECT_EQ(r->containers[5].memory_mib, 1024);
  EXPECT_EQ(r->use_types, (std::vector<std::string>{"A100"}));
}

TEST(PodSpec, BadValuesAreNamed) {
  json p = ExamplePod();
  p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = "150";
  auto r = PodRequestFromJson(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nvidia.com/gpucores"), std::string::npos) << r.status().message();
  p = ExamplePod();
  p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "lots";
  r = PodRequestFromJson(p);
  EXPECT_NE(r.status().message().find("limits[nvidia.com/gpumem]"), std::string::npos) << r.status().message();
  p = ExamplePod();
  p["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1";
  EXPECT_NE(PodRequestFromJson(p).status().message().find("init containers"), std::string::npos);
}

// One container with these limits, read with `o`.
StatusOr<ContainerRequest> OneContainer(const json& limits, const PodSpecOptions& o = {}) {
  json pod = {{"metadata", {{"name", "p"}}},
              {"spec", {{"containers", json::array({{{"name", "c"}, {"resources", {{"limits", limits}}}}})}}}};
  auto r = PodRequestFromJson(pod, o);
  if (!r.ok()) return r.status();
  return r->containers.at(0);
}

// HAMi's exclusive-card rule, exactly as its webhook applies it (defaultExclusiveCoreIfNeeded):
// a card count with no gpucores is exclusive when no memory resource is stated at all, or
// gpumem-percentage is 100. A stated gpumem (even 0) or another percentage is not.
TEST(PodSpec, AWholeCardIsExclusiveExactlyWhenHamisWebhookMakesItSo) {
  struct Case {
    json limits;
    int cores;
  } cases[] = {
      {{{"nvidia.com/gpu", "1"}}, 100},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "100"}}, 100},
      {{{"nvidia.com/gpumem-percentage", "100"}}, 100},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "50"}}, 0},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "0"}}, 0},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "0"}}, 0},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}, 0},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "0"}}, 0},
      {{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "20"}}, 20},
  };
  for (const Case& c : cases) {
    auto r = OneContainer(c.limits);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->cores, c.cores) << c.limits.dump();
  }
}

// The chart's defaultMemory, defaultCores, defaultGPUNum and memoryFactor, each changing
// what a container gets; HAMi's values (0, 0, 1, 1) when not set.
TEST(PodSpec, ChartDefaultsChangeWhatAContainerGets) {
  PodSpecOptions hami;
  auto bare = OneContainer({{"nvidia.com/gpu", "1"}}, hami);
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(*bare, (ContainerRequest{.gpus = 1, .memory_mib = 0, .memory_percent = 0, .cores = 100}));

  // defaultMemory: MiB for a container stating neither gpumem nor a percentage (or 0);
  // a bare card count is still exclusive, as HAMi's webhook adds gpucores 100 first.
  PodSpecOptions o;
  o.default_memory_mib = 4096;
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}}, o)->memory_mib, 4096);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}}, o)->cores, 100);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "0"}}, o)->memory_mib, 4096);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "0"}}, o)->memory_mib, 4096);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "30"}}, o)->memory_mib, 4096);
  auto pct = OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "25"}}, o);
  EXPECT_EQ(pct->memory_mib, 0) << "a stated percentage wins over the default";
  EXPECT_EQ(pct->memory_percent, 25);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}, o)->memory_mib, 1000);
  EXPECT_EQ(MemoryOnCard(*OneContainer({{"nvidia.com/gpu", "1"}}, o), 40000), 4096);
  EXPECT_EQ(MemoryOnCard(*OneContainer({{"nvidia.com/gpu", "1"}}, hami), 40000), 40000);

  // defaultCores: for a container that states memory and no cores; never for one that
  // asks a whole card, nor over what it states.
  o = {};
  o.default_cores = 20;
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}, o)->cores, 20);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpumem-percentage", "50"}}, o)->cores, 20);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}}, o)->cores, 100);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "100"}}, o)->cores, 100);
  EXPECT_EQ(
      OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}, {"nvidia.com/gpucores", "0"}}, o)->cores,
      0);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}, hami)->cores, 0);

  // defaultGPUNum: the cards of a container stating memory or cores without a count.
  o = {};
  o.default_gpu_num = 2;
  EXPECT_EQ(OneContainer({{"nvidia.com/gpumem", "1000"}}, o)->gpus, 2);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpucores", "10"}}, o)->gpus, 2);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}, o)->gpus, 1);
  EXPECT_EQ(OneContainer({{"cpu", "1"}}, o)->gpus, 0);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpumem", "1000"}}, hami)->gpus, 1);
  o.default_gpu_num = 0;  // HAMi then adds no card and ignores the rest: refused here
  auto none = OneContainer({{"nvidia.com/gpumem", "1000"}}, o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("nvidia.com/gpumem without nvidia.com/gpu"), std::string::npos)
      << none.status().message();
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}, o)->gpus, 1);

  // memoryFactor: gpumem in units of that many MiB; percentages and defaultMemory are not
  // scaled.
  o = {};
  o.memory_factor = 1024;
  o.default_memory_mib = 2048;
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3"}}, o)->memory_mib, 3072);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "30"}}, o)->memory_percent, 30);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}}, o)->memory_mib, 2048);
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3"}}, hami)->memory_mib, 3);
  auto huge = OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "9223372036854775807"}}, o);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("too large"), std::string::npos) << huge.status().message();
}

// The chart's resourceCountName, resourceMemoryName, resourceMemoryPercentageName and
// resourceCoreName: a pod is read by the configured names only, and errors name them.
TEST(PodSpec, CustomResourceNamesAreTheOnesRead) {
  PodSpecOptions o;
  o.count_name = "example.com/vgpu";
  o.memory_name = "example.com/vgpu-memory";
  o.memory_percent_name = "example.com/vgpu-memory-percentage";
  o.cores_name = "example.com/vgpu-cores";
  auto r = OneContainer(
      {{"example.com/vgpu", "2"}, {"example.com/vgpu-memory", "3000"}, {"example.com/vgpu-cores", "30"}}, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, (ContainerRequest{.gpus = 2, .memory_mib = 3000, .memory_percent = 0, .cores = 30}));
  r = OneContainer({{"example.com/vgpu-memory-percentage", "40"}}, o);
  EXPECT_EQ(*r, (ContainerRequest{.gpus = 1, .memory_mib = 0, .memory_percent = 40, .cores = 0}));
  EXPECT_EQ(OneContainer({{"example.com/vgpu", "1"}}, o)->cores, 100);
  // HAMi's default names mean nothing then, as in HAMi with those settings.
  EXPECT_EQ(OneContainer({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}, o)->gpus, 0);
  EXPECT_EQ(OneContainer({{"example.com/vgpu", "1"}, {"nvidia.com/gpumem", "1000"}}, o)->memory_mib, 0);
  auto bad = OneContainer({{"example.com/vgpu", "1"}, {"example.com/vgpu-cores", "150"}}, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("example.com/vgpu-cores = 150"), std::string::npos) << bad.status().message();
  bad = OneContainer({{"example.com/vgpu", "65"}}, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("example.com/vgpu = 65"), std::string::npos) << bad.status().message();
}

TEST(PodSpec, ExtendedResourceNamesAreCheckedAsKubernetesDoes) {
  for (const char* good : {"nvidia.com/gpu", "nvidia.com/gpumem-percentage", "example.com/vgpu_mem.v2", "a/B"})
    EXPECT_TRUE(CheckExtendedResourceName(good).ok()) << good << ": " << CheckExtendedResourceName(good).message();
  for (const char* bad : {"gpumem", "/gpu", "nvidia.com/", "Nvidia.com/gpu", "nvidia..com/gpu", "-nvidia.com/gpu",
                          "nvidia.com/-gpu", "nvidia.com/gpu-", "nvidia.com/g pu", "nvidia.com/a/b",
                          "kubernetes.io/gpu", "node.kubernetes.io/gpu", "requests.example.com/gpu", ""}) {
    Status s = CheckExtendedResourceName(bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("is not a Kubernetes extended resource name"), std::string::npos) << s.message();
  }
  EXPECT_FALSE(CheckExtendedResourceName("example.com/" + std::string(64, 'a')).ok());
  EXPECT_TRUE(CheckExtendedResourceName("example.com/" + std::string(63, 'a')).ok());
}

// The pods of HAMi's index examples (specify_index_to_use, specify_index_not_use), as the
// API server serialises them.
TEST(PodSpec, HamisIndexExamplesAreRead) {
  json use = json::parse(R"({
    "metadata": {"name": "gpu-pod", "annotations": {"nvidia.com/use-gpuindexes": "0,1"}},
    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})");
  auto r = PodRequestFromJson(use);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->use_indexes, (std::vector<int>{0, 1}));
  EXPECT_EQ(r->refused, "");
  json nouse = json::parse(R"({
    "metadata": {"name": "gpu-pod", "annotations": {"nvidia.com/nouse-gpuindexes": "0"}},
    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}})");
  r = PodRequestFromJson(nouse);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->nouse_indexes, (std::vector<int>{0}));
  EXPECT_EQ(r->containers[0].gpus, 2);
  nouse["metadata"]["annotations"]["nvidia.com/nouse-gpuindexes"] = "zero";
  r = PodRequestFromJson(nouse);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nvidia.com/nouse-gpuindexes"), std::string::npos) << r.status().message();
}

// What a GPU container states that HAMi acts on and gpuslice does not: HAMi's priority
// resource, and env that HAMi lets loosen the container's limits (its own env wins over
// the device plugin's there; here the limits file wins). A container without GPUs is
// never refused for them; values HAMi does not act on, and ones that only tighten, pass.
TEST(PodSpec, ContainerSettingsGpusliceDoesNotImplementAreRefused) {
  auto env = [](const char* name, const char* value) { return json{{"env", {{{"name", name}, {"value", value}}}}}; };
  struct Case {
    int container;  // in ExamplePod: 1 has GPUs, 2 has none
    json set;       // merged into that container
    std::string refused;
  } cases[] = {
      {1, env("CUDA_DISABLE_CONTROL", "true"), "CUDA_DISABLE_CONTROL=true (container #1) is not supported by gpuslice"},
      {1, env("CUDA_DISABLE_CONTROL", "1"), "CUDA_DISABLE_CONTROL=1 (container #1) is not supported by gpuslice"},
      {1, env("CUDA_DISABLE_CONTROL", "false"), ""},
      {1, env("CUDA_DISABLE_CONTROL", "yes"), ""},  // Go's ParseBool rejects it: HAMi keeps the limits
      {1, {{"env", {{{"name", "CUDA_DISABLE_CONTROL"}, {"valueFrom", {{"configMapKeyRef", {{"name", "x"}}}}}}}}}, ""},
      {2, env("CUDA_DISABLE_CONTROL", "true"), ""},
      {1, env("GPU_CORE_UTILIZATION_POLICY", "disable"),
       "GPU_CORE_UTILIZATION_POLICY=disable (container #1) is not supported by gpuslice"},
      {1, env("GPU_CORE_UTILIZATION_POLICY", "DISABLE"),
       "GPU_CORE_UTILIZATION_POLICY=DISABLE (container #1) is not supported by gpuslice"},
      {1, env("GPU_CORE_UTILIZATION_POLICY", "force"), ""},
      {1, env("GPU_CORE_UTILIZATION_POLICY", "default"), ""},
      {1, env("CUDA_TASK_PRIORITY", "0"), "CUDA_TASK_PRIORITY=0 (container #1) is not supported by gpuslice"},
      {1, env("CUDA_TASK_PRIORITY", "high"), "CUDA_TASK_PRIORITY=high (container #1) is not supported by gpuslice"},
      {1, env("CUDA_TASK_PRIORITY", "1"), ""},
      {1, env("CUDA_TASK_PRIORITY", "5"), ""},
      {2, env("CUDA_TASK_PRIORITY", "0"), ""},
      {1,
       {{"resources", {{"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "0"}}}}}},
       "nvidia.com/priority (container #1) is not supported by gpuslice"},
      {2, {{"resources", {{"limits", {{"nvidia.com/priority", "1"}}}}}}, ""},
  };
  for (const Case& c : cases) {
    json p = ExamplePod();
    p["spec"]["containers"][c.container - 1].update(c.set);
    auto r = PodRequestFromJson(p);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->refused, c.refused) << c.set.dump();
  }
}

// Outside input with members of the wrong type (found by fuzz/pod_spec_fuzzer.cc): read as
// absent, never thrown.
TEST(PodSpec, MembersOfTheWrongTypeAreNeverThrown) {
  json p = ExamplePod();
  p["metadata"]["uid"] = 42;
  p["metadata"]["name"] = json::array();
  p["metadata"]["namespace"] = nullptr;
  StatusOr<PodRequest> r = InvalidArgument("not run");
  EXPECT_NO_THROW(r = PodRequestFromJson(p));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->uid, "");
  EXPECT_EQ(StringField(json::array({1}), "uid"), "");
  EXPECT_EQ(StringField(json{{"uid", "u"}}, "uid"), "u");
}

}  // namespace
}  // namespace gs::scheduler
