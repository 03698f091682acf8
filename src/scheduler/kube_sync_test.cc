// The extender against a fake Kubernetes API server (src/kube/testing): inventories from
// node annotations, bind writing annotations and a Binding through the API, the ledger
// rebuilt from pods after a restart, capacity given back when pods go.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "src/kube/client.h"
#include "src/kube/testing/fake_api_server.h"
#include "src/scheduler/cluster_sync.h"
#include "src/scheduler/extender.h"
#include "src/scheduler/hami_format.h"
#include "src/scheduler/kube_binder.h"
#include "src/scheduler/test_nodes.h"
#include "tests/wait_until.h"

namespace gs::scheduler {
namespace {

using gs::testing::WaitUntil;
using kube::testing::FakeApiServer;
using nlohmann::json;

json NodeObject(const std::string& name, int cards, int64_t memory_mib = 40000) {
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name},
            {"annotations",
             {{hami::kNodeRegister, hami::EncodeNodeRegister(testing::Node(name, cards, memory_mib).gpus)}}}}}};
}

json GpuPod(const std::string& name, const std::string& mem, const std::string& cores) {
  json limits = {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", mem}, {"nvidia.com/gpucores", cores}};
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"uid", "uid-" + name}}},
          {"spec",
           {{"schedulerName", "gpuslice"},
            {"containers", json::array({{{"name", "c"}, {"image", "x"}, {"resources", {{"limits", limits}}}}})}}},
          {"status", {{"phase", "Pending"}}}};
}

std::string Args(const json& pod, const std::vector<std::string>& nodes) {
  return json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", nodes}}.dump();
}

std::string BindArgs(const json& pod, const std::string& node) {
  return json{{"PodName", pod["metadata"]["name"]},
              {"PodNamespace", pod["metadata"]["namespace"]},
              {"PodUID", pod["metadata"]["uid"]},
              {"Node", node}}
      .dump();
}

// One extender process: client, binder, extender, sync.
struct Scheduler {
  explicit Scheduler(FakeApiServer* api, bool start = true) {
    kube::ClientConfig c;
    c.server = api->url();
    client = std::move(*kube::Client::Create(c));
    binder = std::make_unique<ApiBinder>(client.get());
    ExtenderOptions o;
    o.now_unix_seconds = [] { return int64_t{1790000000}; };
    ClusterSyncOptions so;
    so.backoff_initial = std::chrono::milliseconds(10);
    so.backoff_max = std::chrono::milliseconds(50);
    so.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      log.push_back(line);
    };
    gated = std::make_unique<SyncedBinder>(binder.get());
    extender = std::make_unique<Extender>(o, gated.get());
    sync = std::make_unique<ClusterSync>(client.get(), extender.get(), so);
    gated->set_sync(sync.get());
    if (start) {
      sync->Start();
      EXPECT_TRUE(sync->WaitSynced(std::chrono::seconds(10)));
    }
  }
  ~Scheduler() { sync->Stop(); }
  std::vector<std::string> Log() {
    std::lock_guard<std::mutex> lock(mu);
    return log;
  }

  std::unique_ptr<kube::Client> client;
  std::unique_ptr<ApiBinder> binder;
  std::unique_ptr<SyncedBinder> gated;
  std::unique_ptr<Extender> extender;
  std::unique_ptr<ClusterSync> sync;
  std::mutex mu;
  std::vector<std::string> log;
};

json Filter(Scheduler& s, const json& pod, const std::vector<std::string>& nodes) {
  return json::parse(s.extender->Filter(Args(pod, nodes)));
}

TEST(SchedulerKubeTest, NodeAnnotationsReachFilter) {
  FakeApiServer api;
  api.Put("nodes", NodeObject("n1", 1));
  api.Put("nodes", {{"metadata", {{"name", "cpu-only"}}}});
  Scheduler s(&api);
  json pod = GpuPod("p", "10000", "10");
  json r = Filter(s, pod, {"n1", "n2", "cpu-only"});
  EXPECT_EQ(r["NodeNames"], json::array({"n1"}));
  EXPECT_TRUE(r["FailedNodes"].contains("n2"));

  api.Put("nodes", NodeObject("n2", 2));
  EXPECT_TRUE(WaitUntil([&] { return Filter(s, pod, {"n1", "n2"})["NodeNames"].size() == 2; }));

  json leaving = NodeObject("n1", 1);
  leaving["metadata"]["annotations"][hami::kNodeHandshake] = "Deleted_2026-11-23 10:00:00";
  api.Put("nodes", leaving);
  EXPECT_TRUE(WaitUntil([&] { return Filter(s, pod, {"n1", "n2"})["NodeNames"] == json::array({"n2"}); }));
  api.Delete("nodes", "", "n2");
  EXPECT_TRUE(WaitUntil([&] { return Filter(s, pod, {"n1", "n2"})["NodeNames"].empty(); }));
  json garbled = NodeObject("n3", 1);
  garbled["metadata"]["annotations"][hami::kNodeRegister] = "not a register";
  api.Put("nodes", garbled);
  EXPECT_TRUE(WaitUntil([&] {
    for (const std::string& line : s.Log())
      if (line.rfind("node n3:", 0) == 0) return true;
    return false;
  }));
  EXPECT_TRUE(Filter(s, pod, {"n3"})["NodeNames"].empty());
}

// hami.io/device-cordon takes a node's cards out of new placements the moment the node
// watch brings it, and puts them back when it goes; what runs on them is not touched.
TEST(SchedulerKubeTest, CordonedCardsGetNoNewContainersUntilTheCordonIsLifted) {
  FakeApiServer api;
  api.Put("nodes", NodeObject("n1", 2));
  json pod = GpuPod("p", "30000", "10");
  api.Put("pods", pod);
  Scheduler s(&api);
  ASSERT_EQ(Filter(s, pod, {"n1"})["NodeNames"], json::array({"n1"}));
  json cordoned = NodeObject("n1", 2);
  cordoned["metadata"]["annotations"][hami::kDeviceCordon] = " n1-gpu0 ,, n1-gpu1";
  api.Put("nodes", cordoned);
  EXPECT_TRUE(WaitUntil([&] { return Filter(s, pod, {"n1"})["NodeNames"].empty(); }));
  std::string why = Filter(s, pod, {"n1"})["FailedNodes"]["n1"];
  EXPECT_NE(why.find("cordoned"), std::string::npos) << why;
  cordoned["metadata"]["annotations"][hami::kDeviceCordon] = "n1-gpu1";  // one card back
  api.Put("nodes", cordoned);
  EXPECT_TRUE(WaitUntil([&] { return Filter(s, pod, {"n1"})["NodeNames"] == json::array({"n1"}); }));
  ASSERT_EQ(json::parse(s.extender->Bind(BindArgs(pod, "n1")))["Error"], "");
  json stored = *api.Find("pods", "default", "p");
  EXPECT_EQ(stored["metadata"]["annotations"][hami::kDevicesAllocated].get<std::string>().rfind("n1-gpu0,", 0), 0u)
      << "the card that is not cordoned";
}

json QuotaObject(const std::string& ns, const std::string& name, json hard) {
  return {{"apiVersion", "v1"},
          {"kind", "ResourceQuota"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec", {{"hard", hard}}}};
}

// ResourceQuota objects come through their own watch: a namespace's pods are held to
// `limits.nvidia.com/gpumem` with what its placed pods hold, a restarted scheduler counts
// those pods again, and a quota raised, a quota deleted or a pod gone lets the next in.
TEST(SchedulerKubeTest, ResourceQuotasHoldANamespaceToWhatItsPlacedPodsUse) {
  FakeApiServer api;
  api.Put("nodes", NodeObject("n1", 2));
  api.Put("resourcequotas", QuotaObject("default", "gpu", {{"limits.nvidia.com/gpumem", "15000"}, {"pods", "10"}}));
  json first = GpuPod("first", "10000", "10"), second = GpuPod("second", "10000", "10");
  api.Put("pods", first);
  api.Put("pods", second);
  const std::string refused =
      "ResourceQuota default/gpu: limits.nvidia.com/gpumem used 10000 + requested 10000 > hard 15000";
  {
    Scheduler s(&api);
    EXPECT_GE(api.CountRequests("GET", "/api/v1/resourcequotas"), 1);
    ASSERT_EQ(Filter(s, first, {"n1"})["NodeNames"], json::array({"n1"}));
    ASSERT_EQ(json::parse(s.extender->Bind(BindArgs(first, "n1")))["Error"], "");
    json r = Filter(s, second, {"n1"});
    EXPECT_TRUE(r["NodeNames"].empty());
    EXPECT_EQ(r["FailedNodes"]["n1"], refused);
  }
  Scheduler s(&api);  // restarted: the bound pod counts again
  EXPECT_EQ(Filter(s, second, {"n1"})["FailedNodes"]["n1"], refused);

  api.Put("resourcequotas", QuotaObject("default", "gpu", {{"limits.nvidia.com/gpumem", "20000"}}));
  EXPECT_TRUE(WaitUntil([&] { return Filter(s, second, {"n1"})["NodeNames"] == json::array({"n1"}); }));
  api.Put("resourcequotas", QuotaObject("default", "gpu", {{"limits.nvidia.com/gpumem", "15000"}}));
  EXPECT_TRUE(WaitUntil([&] { return Filter(s, second, {"n1"})["NodeNames"].empty(); }));
  api.Delete("resourcequotas", "default", "gpu");
  EXPECT_TRUE(WaitUntil([&] { return Filter(s, second, {"n1"})["NodeNames"] == json::array({"n1"}); }));
  api.Put("resourcequotas", QuotaObject("default", "gpu", {{"limits.nvidia.com/gpumem", "15000"}}));
  EXPECT_TRUE(WaitUntil([&] { return Filter(s, second, {"n1"})["NodeNames"].empty(); }));
  api.Delete("pods", "default", "first");
  EXPECT_TRUE(WaitUntil([&] { return Filter(s, second, {"n1"})["NodeNames"] == json::array({"n1"}); }));

  // A value that is not a whole number is logged, naming the quota and the key.
  api.Put("resourcequotas", QuotaObject("default", "odd", {{"limits.nvidia.com/gpucores", "1.5"}}));
  EXPECT_TRUE(WaitUntil([&] {
    for (const std::string& line : s.Log())
      if (line.find("ResourceQuota default/odd: spec.hard limits.nvidia.com/gpucores '1.5'") != std::string::npos)
        return true;
    return false;
  }));
}

TEST(SchedulerKubeTest, BindWritesTheDecisionWithTheBindingInOneWrite) {
  FakeApiServer api;
  api.Put("nodes", NodeObject("n1", 2));
  json pod = GpuPod("p", "10000", "30");
  api.Put("pods", pod);
  Scheduler s(&api);
  ASSERT_EQ(Filter(s, pod, {"n1"})["NodeNames"], json::array({"n1"}));
  EXPECT_EQ(json::parse(s.extender->Bind(BindArgs(pod, "n1")))["Error"], "");

  json stored = *api.Find("pods", "default", "p");
  EXPECT_EQ(stored["spec"]["nodeName"], "n1");
  const json& a = stored["metadata"]["annotations"];
  EXPECT_EQ(a[hami::kAssignedNode], "n1");
  EXPECT_EQ(a[hami::kBindPhase], "allocating");
  EXPECT_EQ(a[hami::kAssignedTime], "1790000000");
  std::string devices = a[hami::kDevicesAllocated];
  EXPECT_EQ(a[hami::kDevicesToAllocate], devices);
  EXPECT_NE(devices.find(",NVIDIA,10000,30:"), std::string::npos) << devices;
  EXPECT_EQ(s.extender->pod_count(), 1u);

  // One write: the Binding carries the decision, which the API server puts on the pod
  // together with the node (no patch before it).
  auto seen = api.requests();
  int patches = 0, bindings = 0;
  for (const auto& r : seen) {
    if (r.method == "PATCH") ++patches;
    if (r.method == "POST") {
      ++bindings;
      EXPECT_EQ(r.path, "/api/v1/namespaces/default/pods/p/binding");
      json b = json::parse(r.body);
      EXPECT_EQ(b["kind"], "Binding");
      EXPECT_EQ(b["metadata"]["uid"], "uid-p");
      EXPECT_EQ(b["metadata"]["annotations"][hami::kDevicesAllocated], devices);
      EXPECT_EQ(b["target"], json({{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "n1"}}));
    }
  }
  EXPECT_EQ(patches, 0);
  EXPECT_EQ(bindings, 1);
}

TEST(SchedulerKubeTest, ABindTheApiRefusesGivesTheCapacityBack) {
  FakeApiServer api;
  api.Put("nodes", NodeObject("n1", 1));
  json pod = GpuPod("p", "40000", "100");
  api.Put("pods", pod);
  Scheduler s(&api);
  json stale = pod;
  stale["metadata"]["uid"] = "uid-old";  // the pod was recreated under the same name
  Filter(s, stale, {"n1"});
  std::string error = json::parse(s.extender->Bind(BindArgs(stale, "n1")))["Error"];
  EXPECT_NE(error.find("409 Conflict"), std::string::npos) << error;
  EXPECT_EQ(s.extender->pod_count(), 0u);
  EXPECT_EQ(Filter(s, pod, {"n1"})["NodeNames"], json::array({"n1"}));
}

TEST(SchedulerKubeTest, BindIsRefusedUntilTheFirstSync) {
  FakeApiServer api;
  api.Put("nodes", NodeObject("n1", 1));
  json pod = GpuPod("p", "10000", "10");
  api.Put("pods", pod);
  Scheduler s(&api, /*start=*/false);
  ASSERT_TRUE(s.extender->UpsertNode(testing::Node("n1", 1, 40000)).ok());
  Filter(s, pod, {"n1"});
  std::string error = json::parse(s.extender->Bind(BindArgs(pod, "n1")))["Error"];
  EXPECT_NE(error.find("not synced"), std::string::npos) << error;
  EXPECT_EQ(s.extender->pod_count(), 0u);
  EXPECT_EQ(api.CountRequests("POST", "/"), 0);
  s.sync->Start();
  ASSERT_TRUE(s.sync->WaitSynced(std::chrono::seconds(10)));
  EXPECT_EQ(json::parse(s.extender->Bind(BindArgs(pod, "n1")))["Error"], "");
}

TEST(SchedulerKubeTest, ARestartedSchedulerRebuildsFromPodsAndNeverHandsCapacityOutTwice) {
  FakeApiServer api;
  api.Put("nodes", NodeObject("n1", 2, 40000));
  std::vector<json> pods;
  {
    Scheduler first(&api);
    for (int i = 0; i < 4; ++i) {  // 4 x 20000 MiB: both cards full
      json pod = GpuPod("p" + std::to_string(i), "20000", "50");
      api.Put("pods", pod);
      ASSERT_EQ(Filter(first, pod, {"n1"})["NodeNames"], json::array({"n1"}));
      ASSERT_EQ(json::parse(first.extender->Bind(BindArgs(pod, "n1")))["Error"], "");
    }
  }
  // Decision annotations written by hand on a pod that was never bound count for nothing
  // (HAMi #3041), and a finished pod's decision is not capacity in use.
  json forged = GpuPod("forged", "20000", "50");
  forged["metadata"]["annotations"] = (*api.Find("pods", "default", "p0"))["metadata"]["annotations"];
  api.Put("pods", forged);
  json done = GpuPod("done", "20000", "50");
  done["metadata"]["annotations"] = forged["metadata"]["annotations"];
  done["spec"]["nodeName"] = "n1";
  done["status"]["phase"] = "Succeeded";
  api.Put("pods", done);

  Scheduler second(&api);
  EXPECT_EQ(second.extender->pod_count(), 4u);
  EXPECT_TRUE(second.extender->CheckConsistency().ok()) << second.extender->CheckConsistency().message();
  json more = GpuPod("more", "1000", "1");
  api.Put("pods", more);
  EXPECT_TRUE(Filter(second, more, {"n1"})["NodeNames"].empty());
  EXPECT_NE(json::parse(second.extender->Bind(BindArgs(more, "n1")))["Error"].get<std::string>().find("bind"),
            std::string::npos);
  EXPECT_FALSE(api.Find("pods", "default", "more")->at("spec").contains("nodeName"));
}

TEST(SchedulerKubeTest, ADeletedOrFinishedPodsCapacityComesBack) {
  FakeApiServer api;
  api.Put("nodes", NodeObject("n1", 1, 40000));
  Scheduler s(&api);
  json a = GpuPod("a", "40000", "100");
  api.Put("pods", a);
  Filter(s, a, {"n1"});
  ASSERT_EQ(json::parse(s.extender->Bind(BindArgs(a, "n1")))["Error"], "");
  json b = GpuPod("b", "40000", "100");
  api.Put("pods", b);
  EXPECT_TRUE(Filter(s, b, {"n1"})["NodeNames"].empty());
  api.Delete("pods", "default", "a");
  EXPECT_TRUE(WaitUntil([&] { return Filter(s, b, {"n1"})["NodeNames"].size() == 1; }));
  ASSERT_EQ(json::parse(s.extender->Bind(BindArgs(b, "n1")))["Error"], "");

  json c = GpuPod("c", "40000", "100");
  api.Put("pods", c);
  EXPECT_TRUE(Filter(s, c, {"n1"})["NodeNames"].empty());
  json finished = *api.Find("pods", "default", "b");
  finished["status"]["phase"] = "Failed";
  api.Put("pods", finished);
  EXPECT_TRUE(WaitUntil([&] { return Filter(s, c, {"n1"})["NodeNames"].size() == 1; }));
  EXPECT_TRUE(s.extender->CheckConsistency().ok());
}

// The pod watch is gone while a pod is deleted and the server forgets that history: the
// relist notices the pod is missing and its capacity still comes back.
TEST(SchedulerKubeTest, APodDeletedWhileTheWatchWasDownIsReleasedAfterTheRelist) {
  FakeApiServer api;
  api.Put("nodes", NodeObject("n1", 1, 40000));
  Scheduler s(&api);
  json a = GpuPod("a", "40000", "100");
  api.Put("pods", a);
  Filter(s, a, {"n1"});
  ASSERT_EQ(json::parse(s.extender->Bind(BindArgs(a, "n1")))["Error"], "");
  ASSERT_TRUE(WaitUntil([&] { return api.CountRequests("GET", "/api/v1/pods", true) >= 1; }));
  int watches = api.CountRequests("GET", "/api/v1/", true);
  api.SetHang(true);
  api.EndWatches();
  ASSERT_TRUE(WaitUntil([&] { return api.CountRequests("GET", "/api/v1/", true) >= watches + 2; }));
  api.Delete("pods", "default", "a");
  api.Compact();
  api.SetHang(false);
  json b = GpuPod("b", "40000", "100");
  // The informer retries with a backoff that doubled with every attempt the hang failed
  // (0.5 s, 1 s, 2 s, ...): on a loaded machine (sanitizers, ctest -j) the relist may come
  // several seconds after the server answers again.
  EXPECT_TRUE(
      WaitUntil([&] { return Filter(s, b, {"n1"})["NodeNames"].size() == 1; }, std::chrono::milliseconds(30000)));
  EXPECT_EQ(s.extender->pod_count(), 0u);
}

// The same when the pod watch never saw the pod at all: bound (by this extender), deleted
// and compacted away while the watch was down. The informer has nothing to report gone,
// so the relist itself is compared with the ledger. (Seen first as a rare failure of the
// test above on a loaded machine, when its watch ended before it had sent the bind.)
TEST(SchedulerKubeTest, APodTheWatchNeverSawIsReleasedWhenARelistMissesIt) {
  FakeApiServer api;
  api.Put("nodes", NodeObject("n1", 1, 40000));
  Scheduler s(&api);
  ASSERT_TRUE(WaitUntil([&] { return api.CountRequests("GET", "/api/v1/pods", true) >= 1; }));
  const int watches = api.CountRequests("GET", "/api/v1/", true);
  api.SetHangWatches(true);
  api.EndWatches();
  ASSERT_TRUE(WaitUntil([&] { return api.CountRequests("GET", "/api/v1/", true) >= watches + 2; }));
  json a = GpuPod("a", "40000", "100");
  api.Put("pods", a);
  Filter(s, a, {"n1"});
  ASSERT_EQ(json::parse(s.extender->Bind(BindArgs(a, "n1")))["Error"], "");
  EXPECT_EQ(s.extender->pod_count(), 1u);
  json b = GpuPod("b", "40000", "100");
  api.Put("pods", b);
  EXPECT_TRUE(Filter(s, b, {"n1"})["NodeNames"].empty()) << "a holds the card";
  api.Delete("pods", "default", "a");
  api.Compact();
  api.SetHangWatches(false);  // the held watch gets 410, the informer lists again
  EXPECT_TRUE(
      WaitUntil([&] { return Filter(s, b, {"n1"})["NodeNames"].size() == 1; }, std::chrono::milliseconds(30000)));
  EXPECT_EQ(s.extender->pod_count(), 0u);
  // b, bound now, keeps its card (pods a list shows, or that may be newer than it, stay:
  // Extender.ReleaseAbsentReleasesOnlyPodsReservedBeforeTheMark).
  ASSERT_EQ(json::parse(s.extender->Bind(BindArgs(b, "n1")))["Error"], "");
  EXPECT_EQ(s.extender->pod_count(), 1u);
  EXPECT_TRUE(s.extender->CheckConsistency().ok());
}

}  // namespace
}  // namespace gs::scheduler
