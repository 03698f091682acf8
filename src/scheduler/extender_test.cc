// The extender over real HTTP, with JSON as kube-scheduler sends it, and an in-memory
// API server standing in for the Kubernetes side of bind.
#include "src/scheduler/extender.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "src/scheduler/extender_http.h"
#include "src/scheduler/test_nodes.h"
#include "tests/wait_until.h"

namespace gs::scheduler {
namespace {

using gs::testing::WaitUntil;
using nlohmann::json;
using testing::Node;

// Pods by "ns/name"; annotations and binding applied to the stored JSON.
class FakeApi : public KubeBinder {
 public:
  void AddPod(const json& pod) {
    std::lock_guard<std::mutex> l(mu_);
    pods_[Key(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod;
  }
  json Pod(const std::string& ns, const std::string& name) {
    std::lock_guard<std::mutex> l(mu_);
    return pods_.at(Key(ns, name));
  }
  std::vector<std::string> AllPods() {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<std::string> out;
    for (auto& [k, p] : pods_) out.push_back(p.dump());
    return out;
  }
  Status BindPod(const std::string& ns, const std::string& name, const std::string& uid, const std::string& node,
                 const hami::Annotations& a) override {
    std::lock_guard<std::mutex> l(mu_);
    if (fail_binding) return Unavailable("binding refused by the test");
    auto it = pods_.find(Key(ns, name));
    if (it == pods_.end()) return NotFound("pod " + name);
    if (it->second["metadata"]["uid"] != uid) return FailedPrecondition("uid mismatch");
    it->second["spec"]["nodeName"] = node;
    for (auto& [k, v] : a) it->second["metadata"]["annotations"][k] = v;
    ++bindings;
    return Status::Ok();
  }
  StatusOr<std::string> GetPod(const std::string& ns, const std::string& name) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = pods_.find(Key(ns, name));
    if (it == pods_.end()) return NotFound("pod " + ns + "/" + name);
    ++gets;
    return it->second.dump();
  }
  bool fail_binding = false;
  int bindings = 0, gets = 0;

 private:
  static std::string Key(const std::string& ns, const std::string& name) { return ns + "/" + name; }
  std::mutex mu_;
  std::map<std::string, json> pods_;
};

json GpuPod(const std::string& name, const std::string& mem, const std::string& cores, int gpus = 1) {
  json limits = {{"nvidia.com/gpu", std::to_string(gpus)}, {"nvidia.com/gpumem", mem}, {"nvidia.com/gpucores", cores}};
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", name}, {"namespace", "default"}, {"uid", "uid-" + name}, {"annotations", json::object()}}},
      {"spec",
       {{"schedulerName", "gpuslice"},
        {"containers", json::array({{{"name", "c"}, {"image", "x"}, {"resources", {{"limits", limits}}}}})}}}};
}

// ExtenderArgs as kube-scheduler 1.20 sends it with nodeCacheCapable: Go field names.
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

// Binds `pod` to `node` through the extender; the bind's error ("" when bound).
std::string BindError(Extender& e, const json& pod, const std::string& node) {
  return json::parse(e.Bind(BindArgs(pod, node)))["Error"].get<std::string>();
}

// What the node agent's claim does to a bound pod, as the extender's pod watch sees it.
void ReportAllocated(Extender& e, FakeApi& api, const std::string& name, const std::string& ns = "default") {
  json pod = api.Pod(ns, name);
  pod["metadata"]["annotations"]["hami.io/bind-phase"] = "success";
  e.ObservePod(pod);
}

// After a relist, pods missing from it are released, but only those reserved before the
// list began: one bound while the list was on its way may be newer than the list.
TEST(Extender, ReleaseAbsentReleasesOnlyPodsReservedBeforeTheMark) {
  FakeApi api;
  ExtenderOptions o;
  o.now_unix_seconds = [] { return int64_t{1790000000}; };
  Extender e(o, &api);
  ASSERT_TRUE(e.UpsertNode(Node("node-a", 4, 40000)).ok());
  json old = GpuPod("old", "1000", "10"), listed = GpuPod("listed", "1000", "10"),
       fresh = GpuPod("fresh", "1000", "10");
  for (const json* p : {&old, &listed, &fresh}) api.AddPod(*p);
  auto bind = [&](const json& pod) { return BindError(e, pod, "node-a"); };
  auto allocated = [&](const char* name) { ReportAllocated(e, api, name); };
  ASSERT_EQ(bind(old), "");
  allocated("old");
  ASSERT_EQ(bind(listed), "");
  allocated("listed");
  const uint64_t mark = e.ReservationMark();  // the list begins
  ASSERT_EQ(bind(fresh), "");                 // bound while it is on its way
  auto released = e.ReleaseAbsent({"uid-listed"}, mark);
  EXPECT_EQ(released, std::vector<std::string>{"uid-old"});
  EXPECT_EQ(e.pod_count(), 2u) << "listed and fresh keep their cards";
  EXPECT_TRUE(e.ReleaseAbsent({"uid-listed"}, mark).empty()) << "nothing twice";
  EXPECT_TRUE(e.CheckConsistency().ok());
}

// kube-scheduler calls Filter and Prioritize for several pods at once, each with the node
// names in some order. The name lookups share their order hints (node_index.h) between
// those calls: concurrent calls in different orders must still get exactly the answers
// one call alone gets.
TEST(Extender, ConcurrentCallsWithNamesInDifferentOrdersGetTheSameAnswers) {
  FakeApi api;
  ExtenderOptions o;
  Extender e(o, &api);
  std::vector<std::string> names;
  std::set<std::string> fits;
  for (int i = 0; i < 300; ++i) {
    names.push_back("node-" + std::to_string(i));
    const int64_t mib = i % 3 == 0 ? 8000 : 20000 + 1000 * (i % 7);  // 10000 MiB fits only the larger cards
    ASSERT_TRUE(e.UpsertNode(Node(names.back(), 4, mib)).ok());
    if (i % 3 != 0) fits.insert(names.back());
  }
  std::map<std::string, int> want_score;
  for (const json& h : json::parse(e.Prioritize(Args(GpuPod("ref", "10000", "30"), names))))
    want_score[h["Host"]] = h["Score"];
  std::atomic<int> wrong{0};
  auto caller = [&](int k) {
    std::mt19937 rng(static_cast<unsigned>(k));
    json pod = GpuPod("p" + std::to_string(k), "10000", "30");
    std::vector<std::string> order = names;
    for (int round = 0; round < 60; ++round) {
      if (round % 3 == 0) std::shuffle(order.begin(), order.end(), rng);  // else: the same order again
      json f = json::parse(e.Filter(Args(pod, order)));
      std::vector<std::string> feasible = f["NodeNames"];
      std::set<std::string> got(feasible.begin(), feasible.end());
      if (got != fits || f["FailedNodes"].size() != names.size() - fits.size()) ++wrong;
      for (const json& h : json::parse(e.Prioritize(Args(pod, feasible))))
        if (!want_score.count(h["Host"]) || want_score[h["Host"]] != h["Score"]) ++wrong;
    }
  };
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) threads.emplace_back(caller, k);
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// The node agent tells pods apart only by the card count kubelet's Allocate asks for
// (handoff.h): bind never leaves two pods pending on a node that it could confuse.
TEST(ExtenderHandoff, ABindWaitsOnlyForAPodItCouldBeMistakenForAndOnlyUntilItIsAllocated) {
  FakeApi api;
  ExtenderOptions o;
  o.now_unix_seconds = [] { return int64_t{1790000000}; };
  o.handoff_wait = std::chrono::milliseconds(1000);
  Extender e(o, &api);
  ASSERT_TRUE(e.UpsertNode(Node("node-a", 4, 40000)).ok());
  json a = GpuPod("a", "3000", "30"), twin = GpuPod("twin", "3000", "30"), two = GpuPod("two", "3000", "30", 2),
       other = GpuPod("other", "5000", "30");
  for (const json* p : {&a, &twin, &two, &other}) api.AddPod(*p);
  auto bind = [&](const json& pod) { return BindError(e, pod, "node-a"); };
  EXPECT_EQ(bind(a), "");
  EXPECT_EQ(bind(twin), "") << "the same request: either pod may take either decision";
  EXPECT_EQ(bind(two), "") << "two cards: Allocate tells it apart";
  EXPECT_EQ(e.pending_count(), 3u);

  auto start = std::chrono::steady_clock::now();
  std::string refused = bind(other);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
  EXPECT_NE(refused.find("still waits for kubelet's Allocate"), std::string::npos) << refused;
  EXPECT_EQ(e.pod_count(), 3u) << "nothing reserved for the refused bind";

  // A bind that waits goes on as soon as the watch reports the others allocated.
  std::string waited;
  start = std::chrono::steady_clock::now();
  std::thread binder([&] { waited = bind(other); });
  EXPECT_TRUE(WaitUntil([&] { return e.stats().handoff.waiting == 1; })) << "the bind never waited";
  for (const char* name : {"a", "twin"}) {
    json pod = api.Pod("default", name);
    EXPECT_EQ(pod["metadata"]["annotations"]["hami.io/bind-phase"], "allocating");
    pod["metadata"]["annotations"]["hami.io/bind-phase"] = "success";
    e.ObservePod(pod);
  }
  binder.join();
  EXPECT_EQ(waited, "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(900));
  Extender::Stats st = e.stats();
  EXPECT_EQ(st.handoff.refused, 1u);
  EXPECT_EQ(st.handoff.waited, 1u);
  EXPECT_GE(st.handoff.wait_seconds_max, 1.0);
  EXPECT_EQ(st.binds, 4u);
  EXPECT_EQ(st.bind_failures, 1u);
  EXPECT_EQ(e.pod_count(), 4u);
  EXPECT_TRUE(e.CheckConsistency().ok());
  // A deleted pod is not pending any more either.
  EXPECT_TRUE(e.ReleasePod("uid-two"));
  EXPECT_EQ(e.pending_count(), 1u);  // `other`
}

// A bind that waits holds back later binds it could be confused with: a stream of pods
// identical to the one pending cannot keep a pod of another shape waiting until it runs
// out of time (they are served in the order they came).
TEST(ExtenderHandoff, AWaitingBindIsNotOvertakenByPodsItCouldBeMistakenFor) {
  FakeApi api;
  ExtenderOptions o;
  o.now_unix_seconds = [] { return int64_t{1790000000}; };
  o.handoff_wait = std::chrono::milliseconds(3000);
  Extender e(o, &api);
  ASSERT_TRUE(e.UpsertNode(Node("node-a", 4, 40000)).ok());
  json a = GpuPod("a", "3000", "30"), other = GpuPod("other", "5000", "30"), twin = GpuPod("twin", "3000", "30");
  for (const json* p : {&a, &other, &twin}) api.AddPod(*p);
  auto bind = [&](const json& pod) { return BindError(e, pod, "node-a"); };
  auto allocated = [&](const char* name) { ReportAllocated(e, api, name); };
  ASSERT_EQ(bind(a), "");
  std::mutex mu;
  std::vector<std::string> order;
  auto in_turn = [&](const json& pod) {
    std::string error = bind(pod);
    std::lock_guard<std::mutex> l(mu);
    order.push_back(pod["metadata"]["name"].get<std::string>() + (error.empty() ? "" : ": " + error));
  };
  std::thread waits([&] { in_turn(other); });  // waits for a's Allocate
  EXPECT_TRUE(WaitUntil([&] { return e.stats().handoff.waiting == 1; }));
  std::thread behind([&] { in_turn(twin); });  // identical to a, but `other` came first
  EXPECT_TRUE(WaitUntil([&] { return e.stats().handoff.waiting == 2; })) << "twin did not wait behind other";
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_TRUE(order.empty()) << "twin overtook the waiting bind";
  }
  allocated("a");
  waits.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(order, std::vector<std::string>{"other"}) << "twin must wait for other's Allocate now";
  }
  allocated("other");
  behind.join();
  EXPECT_EQ(order, (std::vector<std::string>{"other", "twin"}));
  // Each waiting bind went on when the pod ahead was allocated, not when its wait ran
  // out (3 s): a fraction of the shortest wait here (200 ms).
  Extender::Stats st = e.stats();
  EXPECT_EQ(st.handoff.waited, 2u);
  EXPECT_GE(st.handoff.wait_seconds_max, 0.2);
  EXPECT_LT(st.handoff.after_release_seconds_max, 0.2);
  EXPECT_TRUE(e.CheckConsistency().ok());
}

// With binpack every pod prefers the fullest node; a pod whose bind there would wait for
// another pod's Allocate (a different request, pending) is steered elsewhere: that node
// scores 0 while the other is pending, and its binpack score again once it is allocated.
TEST(ExtenderHandoff, PrioritizeSteersAwayFromANodeWhereBindWouldWait) {
  FakeApi api;
  ExtenderOptions o;
  o.now_unix_seconds = [] { return int64_t{1790000000}; };
  Extender e(o, &api);
  ASSERT_TRUE(e.UpsertNode(Node("node-a", 4, 40000)).ok());
  ASSERT_TRUE(e.UpsertNode(Node("node-b", 4, 40000)).ok());
  json first = GpuPod("first", "20000", "50");
  api.AddPod(first);
  ASSERT_EQ(json::parse(e.Bind(BindArgs(first, "node-a")))["Error"], "");  // pending on node-a
  auto scores = [&](const json& pod) {
    json r = json::parse(e.Prioritize(Args(pod, {"node-a", "node-b"})));
    return std::make_pair(r[0]["Score"].get<int>(), r[1]["Score"].get<int>());
  };
  auto [same_a, same_b] = scores(GpuPod("same", "20000", "50"));
  EXPECT_GT(same_a, same_b) << "an identical request never waits: binpack prefers the fuller node";
  auto [other_a, other_b] = scores(GpuPod("other", "1000", "10"));
  EXPECT_EQ(other_a, 0) << "its bind would wait for `first`'s Allocate";
  EXPECT_GT(other_b, 0);
  json allocated = api.Pod("default", "first");
  allocated["metadata"]["annotations"]["hami.io/bind-phase"] = "success";
  e.ObservePod(allocated);
  auto [after_a, after_b] = scores(GpuPod("other", "1000", "10"));
  EXPECT_GT(after_a, after_b) << "allocated: the fuller node first again";
}

// An event from before the bind (no decision annotations yet) must not end the pending
// state bind recorded; the watch's own report of the decision replaces it.
TEST(ExtenderHandoff, StaleEventsDoNotEndAPendingPod) {
  FakeApi api;
  ExtenderOptions o;
  o.handoff_wait = std::chrono::milliseconds(50);
  Extender e(o, &api);
  ASSERT_TRUE(e.UpsertNode(Node("node-a", 2, 40000)).ok());
  json a = GpuPod("a", "3000", "30"), other = GpuPod("other", "5000", "30");
  api.AddPod(a);
  api.AddPod(other);
  ASSERT_EQ(json::parse(e.Bind(BindArgs(a, "node-a")))["Error"], "");
  e.ObservePod(a);  // as created: no annotations, no node
  EXPECT_EQ(e.pending_count(), 1u);
  json seen = api.Pod("default", "a");
  seen["metadata"]["resourceVersion"] = "12";
  e.ObservePod(seen);
  EXPECT_EQ(e.pending_count(), 1u);
  EXPECT_NE(json::parse(e.Bind(BindArgs(other, "node-a")))["Error"].get<std::string>().find("default/a"),
            std::string::npos);
}

class ExtenderHttpTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }
  // Serves an extender with these pod-spec options (SetUp: HAMi's).
  void Start(const PodSpecOptions& pod_spec) {
    if (server_) TearDown();
    ExtenderOptions o;
    o.pod_spec = pod_spec;
    o.now_unix_seconds = [] { return int64_t{1790000000}; };
    extender_ = std::make_unique<Extender>(o, &api_);
    ASSERT_TRUE(extender_->UpsertNode(Node("node-a", 2, 40000)).ok());
    ASSERT_TRUE(extender_->UpsertNode(Node("node-b", 2, 40000)).ok());
    server_ = std::make_unique<ExtenderHttpServer>(extender_.get());
    auto port = server_->Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status().message();
    port_ = *port;
    thread_ = std::thread([this] { server_->Serve(); });
  }
  void TearDown() override {
    server_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  json Post(const std::string& path, const std::string& body) {
    httplib::Client c("127.0.0.1", port_);
    auto res = c.Post(path.c_str(), body, "application/json");
    EXPECT_TRUE(res) << "no answer on " << path;
    if (!res) return nullptr;
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
    return json::parse(res->body);
  }

  FakeApi api_;
  std::unique_ptr<Extender> extender_;
  std::unique_ptr<ExtenderHttpServer> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(ExtenderHttpTest, FilterReturnsEveryFeasibleNodeAndReasonsForTheRest) {
  json pod = GpuPod("p", "30000", "20");
  api_.AddPod(pod);
  ASSERT_EQ(Post("/gpuslice/bind", BindArgs(pod, "node-a"))["Error"], "");
  ASSERT_EQ(
      Post("/gpuslice/bind", BindArgs(GpuPod("p2", "30000", "20"), "node-a"))["Error"].get<std::string>().find("bind"),
      0u)
      << "p2 was never created in the API";
  json big = GpuPod("big", "20000", "10", 2);
  json r = Post("/gpuslice/filter", Args(big, {"node-a", "node-b", "node-c"}));
  EXPECT_EQ(r["NodeNames"], json::array({"node-b"}));
  ASSERT_TRUE(r["FailedNodes"].contains("node-a"));
  EXPECT_NE(r["FailedNodes"]["node-a"].get<std::string>().find("too little free memory"), std::string::npos)
      << r["FailedNodes"]["node-a"];
  EXPECT_NE(r["FailedNodes"]["node-c"].get<std::string>().find("no GPU inventory"), std::string::npos);
  EXPECT_EQ(r["Error"], "");
  EXPECT_EQ(extender_->pod_count(), 1u) << "filter reserves nothing";
}

// HAMi's index examples and an annotation gpuslice does not implement, over HTTP as
// kube-scheduler calls: node-a and node-b have cards with indexes 0 and 1.
TEST_F(ExtenderHttpTest, IndexAnnotationsPlaceOnTheNamedCardsAndUnsupportedOnesAreRefused) {
  auto pod = [&](const std::string& name, const std::string& key, const std::string& value) {
    json p = GpuPod(name, "1000", "10");
    p["metadata"]["annotations"][key] = value;
    api_.AddPod(p);
    return p;
  };
  auto card_of = [&](const std::string& name) {
    std::string devices = api_.Pod("default", name)["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"];
    return devices.substr(0, devices.find(','));
  };
  // An index no card has: refused on every node with the reason, and by bind.
  json five = pod("five", "nvidia.com/use-gpuindexes", "5");
  json r = Post("/filter", Args(five, {"node-a", "node-b"}));
  EXPECT_EQ(r["Error"], "");
  EXPECT_TRUE(r["NodeNames"].empty()) << r.dump();
  for (const char* node : {"node-a", "node-b"})
    EXPECT_EQ(r["FailedNodes"][node], "GPUs for container #0: excluded by index") << r.dump();
  std::string err = Post("/bind", BindArgs(five, "node-a"))["Error"];
  EXPECT_NE(err.find("2 excluded by index"), std::string::npos) << err;

  json one = pod("one", "nvidia.com/use-gpuindexes", "1");
  EXPECT_EQ(Post("/filter", Args(one, {"node-a", "node-b"}))["NodeNames"], json::array({"node-a", "node-b"}));
  ASSERT_EQ(Post("/bind", BindArgs(one, "node-a"))["Error"], "");
  EXPECT_EQ(card_of("one"), "node-a-gpu1");
  ReportAllocated(*extender_, api_, "one");
  // Spread (the default) would take the empty card 0; the pod excludes it.
  json not0 = pod("not0", "nvidia.com/nouse-gpuindexes", "0");
  ASSERT_EQ(Post("/bind", BindArgs(not0, "node-a"))["Error"], "");
  EXPECT_EQ(card_of("not0"), "node-a-gpu1");
  ReportAllocated(*extender_, api_, "not0");

  json mig = pod("mig", "nvidia.com/vgpu-mode", "mig");
  r = Post("/filter", Args(mig, {"node-a", "node-b"}));
  EXPECT_EQ(r["Error"], "");
  EXPECT_TRUE(r["NodeNames"].empty()) << r.dump();
  for (const char* node : {"node-a", "node-b"})
    EXPECT_EQ(r["FailedNodes"][node], "nvidia.com/vgpu-mode 'mig' is not supported by gpuslice") << r.dump();
  EXPECT_EQ(Post("/prioritize", Args(mig, {"node-a"}))[0]["Score"], 0);
  err = Post("/bind", BindArgs(mig, "node-b"))["Error"];
  EXPECT_NE(err.find("nvidia.com/vgpu-mode 'mig' is not supported by gpuslice"), std::string::npos) << err;
  EXPECT_EQ(extender_->pod_count(), 2u) << "only one and not0 hold cards";

  json garbage = pod("garbage", "nvidia.com/use-gpuindexes", "first");
  err = Post("/filter", Args(garbage, {"node-a"}))["Error"];
  EXPECT_NE(err.find("nvidia.com/use-gpuindexes"), std::string::npos) << err;
}

// The chart's settings as `gpuslice scheduler` passes them (--resource-count-name,
// --default-memory, --memory-factor, ...): what a pod gets in its decision follows them,
// over HTTP as kube-scheduler calls; node-a and node-b have 2 cards of 40000 MiB.
TEST_F(ExtenderHttpTest, ChartSettingsDecideWhatAPodGets) {
  auto decided = [&](const std::string& name) {
    return api_.Pod("default", name)["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].get<std::string>();
  };
  auto pod = [&](const std::string& name, const json& limits) {
    json p = GpuPod(name, "1", "1");
    p["spec"]["containers"][0]["resources"]["limits"] = limits;
    api_.AddPod(p);
    return p;
  };
  // HAMi's defaults: a bare card count is the whole card, exclusively.
  json whole = pod("whole", {{"nvidia.com/gpu", "1"}});
  ASSERT_EQ(Post("/bind", BindArgs(whole, "node-a"))["Error"], "");
  EXPECT_EQ(decided("whole"), "node-a-gpu0,NVIDIA,40000,100:;");

  PodSpecOptions o;
  o.count_name = "example.com/vgpu";
  o.memory_name = "example.com/vgpu-memory";
  o.memory_percent_name = "example.com/vgpu-memory-percentage";
  o.cores_name = "example.com/vgpu-cores";
  o.default_memory_mib = 5000;
  o.default_cores = 15;
  o.default_gpu_num = 2;
  o.memory_factor = 1000;
  Start(o);
  json bare = pod("bare", {{"example.com/vgpu", "1"}});
  ASSERT_EQ(Post("/bind", BindArgs(bare, "node-b"))["Error"], "");
  EXPECT_EQ(decided("bare"), "node-b-gpu0,NVIDIA,5000,100:;") << "defaultMemory, still exclusive";
  ReportAllocated(*extender_, api_, "bare");
  json mem = pod("mem", {{"example.com/vgpu-memory", "3"}});
  json r = Post("/filter", Args(mem, {"node-a", "node-b"}));
  EXPECT_EQ(r["NodeNames"], json::array({"node-a"})) << "two cards each, and one of node-b's is taken: " << r.dump();
  ASSERT_EQ(Post("/bind", BindArgs(mem, "node-a"))["Error"], "");
  EXPECT_EQ(decided("mem"), "node-a-gpu0,NVIDIA,3000,15:node-a-gpu1,NVIDIA,3000,15:;")
      << "defaultGPUNum cards, memoryFactor MiB per unit, defaultCores";
  // HAMi's names are no GPU resources then: the pod passes through without a decision.
  json plain = pod("plain", {{"nvidia.com/gpu", "1"}});
  EXPECT_EQ(Post("/filter", Args(plain, {"node-a"}))["NodeNames"], json::array({"node-a"}));
  ASSERT_EQ(Post("/bind", BindArgs(plain, "node-a"))["Error"], "");
  EXPECT_FALSE(api_.Pod("default", "plain")["metadata"]["annotations"].contains("hami.io/vgpu-devices-allocated"));
}

TEST_F(ExtenderHttpTest, MetricsCountBindsAndPendingPods) {
  json pod = GpuPod("m", "3000", "30");
  api_.AddPod(pod);
  ASSERT_EQ(Post("/bind", BindArgs(pod, "node-a"))["Error"], "");
  Post("/bind", BindArgs(GpuPod("ghost", "1", "1"), "node-a"));  // not in the API: fails
  httplib::Client c("127.0.0.1", port_);
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  for (const char* line : {"gpuslice_scheduler_binds_total 1\n", "gpuslice_scheduler_bind_failures_total 1\n",
                           "gpuslice_scheduler_pods 1\n", "gpuslice_scheduler_pending_pods 1\n",
                           "# TYPE gpuslice_scheduler_handoff_waits_total counter\n"})
    EXPECT_NE(res->body.find(line), std::string::npos) << line << res->body;
}

TEST_F(ExtenderHttpTest, PodsWithoutGpusPassThrough) {
  json pod = GpuPod("cpu", "1", "1");
  pod["spec"]["containers"][0]["resources"] = {{"requests", {{"cpu", "1"}}}};
  json r = Post("/filter", Args(pod, {"node-a", "x"}));
  EXPECT_EQ(r["NodeNames"], json::array({"node-a", "x"}));
}

TEST_F(ExtenderHttpTest, PrioritizeScoresZeroToTenBinpackFirst) {
  json first = GpuPod("first", "20000", "50");
  api_.AddPod(first);
  ASSERT_EQ(Post("/bind", BindArgs(first, "node-a"))["Error"], "");
  json allocated = api_.Pod("default", "first");  // the node agent took its decision
  allocated["metadata"]["annotations"]["hami.io/bind-phase"] = "success";
  extender_->ObservePod(allocated);
  json r = Post("/prioritize", Args(GpuPod("q", "1000", "10"), {"node-a", "node-b"}));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0]["Host"], "node-a");
  int a = r[0]["Score"], b = r[1]["Score"];
  EXPECT_GT(a, b) << "default node policy binpack: the fuller node first";
  EXPECT_GE(b, 0);
  EXPECT_LE(a, 10);
}

// Filter remembers each node's score for Prioritize of the same pod; a bind, a release
// or an inventory change in between must never let a stale score through. `twin` asks
// the same but was never filtered, so its scores are always computed afresh.
TEST_F(ExtenderHttpTest, ScoresRememberedByFilterNeverOutliveAChange) {
  json q = GpuPod("q", "4000", "20"), twin = GpuPod("twin", "4000", "20");
  std::vector<std::string> nodes = {"node-a", "node-b", "node-c"};
  auto scores = [&](const json& pod) { return Post("/prioritize", Args(pod, nodes)); };
  EXPECT_EQ(Post("/filter", Args(q, nodes))["NodeNames"].size(), 2u);
  json before = scores(q);
  EXPECT_EQ(before, scores(twin));
  json a = GpuPod("a", "30000", "60", 2);
  api_.AddPod(a);
  ASSERT_EQ(Post("/bind", BindArgs(a, "node-a"))["Error"], "");
  json after_bind = scores(q);
  EXPECT_EQ(after_bind, scores(twin));
  EXPECT_NE(after_bind[0]["Score"], before[0]["Score"]) << "node-a is fuller now";
  ASSERT_TRUE(extender_->ReleasePod("uid-a"));
  EXPECT_EQ(scores(q), scores(twin));
  EXPECT_EQ(scores(q), before);
  Post("/filter", Args(q, nodes));
  ASSERT_TRUE(extender_->UpsertNode(Node("node-b", 1, 8000)).ok());
  json after_upsert = scores(q);
  EXPECT_EQ(after_upsert, scores(twin));
  EXPECT_NE(after_upsert[1]["Score"], before[1]["Score"]) << "node-b is one small card now";
  extender_->RemoveNode("node-a");
  ASSERT_TRUE(extender_->UpsertNode(Node("node-c", 2, 40000)).ok());
  EXPECT_EQ(scores(q), scores(twin));
  EXPECT_EQ(scores(q)[0]["Score"], 0) << "node-a has no inventory any more";
  EXPECT_GT(scores(q)[2]["Score"], -1);
}

TEST_F(ExtenderHttpTest, BindWritesHamisAnnotationsAndTheBinding) {
  json pod = GpuPod("p", "3k", "30");
  api_.AddPod(pod);
  Post("/filter", Args(pod, {"node-a", "node-b"}));
  json r = Post("/bind", BindArgs(pod, "node-b"));
  ASSERT_EQ(r["Error"], "");
  json stored = api_.Pod("default", "p");
  EXPECT_EQ(stored["spec"]["nodeName"], "node-b");
  auto& an = stored["metadata"]["annotations"];
  EXPECT_EQ(an["hami.io/vgpu-node"], "node-b");
  EXPECT_EQ(an["hami.io/vgpu-time"], "1790000000");
  EXPECT_EQ(an["hami.io/bind-phase"], "allocating");
  std::string devices = an["hami.io/vgpu-devices-allocated"];
  EXPECT_EQ(devices.substr(0, 11), "node-b-gpu0");
  EXPECT_EQ(devices.substr(11), ",NVIDIA,3000,30:;");
  EXPECT_EQ(an["hami.io/vgpu-devices-to-allocate"], devices);
  EXPECT_EQ(api_.gets, 0) << "the pod seen by filter needs no API read";
}

TEST_F(ExtenderHttpTest, BindRechecksSoTwoPodsNeverShareTheLastCapacity) {
  // Both pods pass filter against the same state; only one may win node-a's memory.
  ASSERT_TRUE(extender_->UpsertNode(Node("node-a", 1, 40000)).ok());
  json p1 = GpuPod("p1", "30000", "10"), p2 = GpuPod("p2", "30000", "10");
  api_.AddPod(p1);
  api_.AddPod(p2);
  EXPECT_EQ(Post("/filter", Args(p1, {"node-a"}))["NodeNames"].size(), 1u);
  EXPECT_EQ(Post("/filter", Args(p2, {"node-a"}))["NodeNames"].size(), 1u);
  EXPECT_EQ(Post("/bind", BindArgs(p1, "node-a"))["Error"], "");
  std::string err = Post("/bind", BindArgs(p2, "node-a"))["Error"];
  EXPECT_NE(err.find("too little free memory"), std::string::npos) << err;
  EXPECT_FALSE(api_.Pod("default", "p2")["spec"].contains("nodeName"));
  EXPECT_TRUE(extender_->CheckConsistency().ok());
}

TEST_F(ExtenderHttpTest, FailedBindingGivesTheReservationBack) {
  json pod = GpuPod("p", "30000", "10");
  api_.AddPod(pod);
  api_.fail_binding = true;
  std::string err = Post("/bind", BindArgs(pod, "node-a"))["Error"];
  EXPECT_NE(err.find("binding refused"), std::string::npos) << err;
  EXPECT_EQ(extender_->pod_count(), 0u);
  EXPECT_EQ(api_.gets, 1) << "a pod filter did not see is read from the API";
}

TEST_F(ExtenderHttpTest, MalformedArgsAreAnsweredWithAnError) {
  EXPECT_NE(Post("/filter", "{not json")["Error"].get<std::string>().find("ExtenderArgs"), std::string::npos);
  json nodes_only = {{"Pod", GpuPod("p", "1", "1")}, {"Nodes", {{"items", json::array()}}}};
  EXPECT_NE(Post("/filter", nodes_only.dump())["Error"].get<std::string>().find("nodeCacheCapable"), std::string::npos);
  json bad = GpuPod("p", "lots", "1");
  EXPECT_NE(Post("/filter", Args(bad, {"node-a"}))["Error"].get<std::string>().find("nvidia.com/gpumem"),
            std::string::npos);
  EXPECT_NE(Post("/bind", R"({"PodName":"p"})")["Error"].get<std::string>().find("PodNamespace"), std::string::npos);
  EXPECT_EQ(Post("/prioritize", "[]"), json::array());
}

TEST_F(ExtenderHttpTest, RestartRebuildsTheLedgerWithNoDoubleAllocation) {
  for (int i = 0; i < 6; ++i) {
    json p = GpuPod("p" + std::to_string(i), "12000", "30");
    api_.AddPod(p);
    ASSERT_EQ(Post("/bind", BindArgs(p, i % 2 ? "node-a" : "node-b"))["Error"], "");
  }
  // A pod whose decision annotations were written by hand, never bound: not counted.
  json forged = GpuPod("forged", "40000", "100");
  forged["metadata"]["annotations"]["hami.io/vgpu-node"] = "node-a";
  forged["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "node-a-gpu0,NVIDIA,40000,100:;";
  api_.AddPod(forged);

  Extender restarted(ExtenderOptions{}, &api_);
  ASSERT_TRUE(restarted.UpsertNode(Node("node-a", 2, 40000)).ok());
  ASSERT_TRUE(restarted.UpsertNode(Node("node-b", 2, 40000)).ok());
  RebuildReport r = restarted.RebuildFromPods(api_.AllPods());
  EXPECT_EQ(r.applied, 6);
  ASSERT_EQ(r.refused.size(), 1u);
  EXPECT_NE(r.refused[0].find("forged"), std::string::npos) << r.refused[0];
  EXPECT_TRUE(restarted.CheckConsistency().ok());
  // Each card holds 12000+12000 or so; a 30000 MiB pod must now fit nowhere, as before.
  json more = GpuPod("more", "30000", "10");
  api_.AddPod(more);
  json f = json::parse(restarted.Filter(Args(more, {"node-a", "node-b"})));
  json before = json::parse(extender_->Filter(Args(more, {"node-a", "node-b"})));
  EXPECT_EQ(f["NodeNames"], before["NodeNames"]);
  // Fill the cluster through the restarted extender: never over capacity.
  for (int i = 0; i < 20; ++i) {
    json p = GpuPod("fill" + std::to_string(i), "4000", "10");
    api_.AddPod(p);
    restarted.Bind(BindArgs(p, i % 2 ? "node-a" : "node-b"));
    ASSERT_TRUE(restarted.CheckConsistency().ok());
  }
}

// A pod with `limits` on its one container, in namespace `ns`.
json PodWith(const std::string& name, const std::string& ns, json limits) {
  json pod = GpuPod(name, "1", "0");
  pod["metadata"]["namespace"] = ns;
  pod["spec"]["containers"][0]["resources"]["limits"] = std::move(limits);
  return pod;
}

// The reason Filter gave for `node`, "" when the node passed.
std::string FilterReason(Extender& e, const json& pod, const std::vector<std::string>& nodes, const std::string& node) {
  json r = json::parse(e.Filter(Args(pod, nodes)));
  EXPECT_EQ(r["Error"], "");
  return r["FailedNodes"].contains(node) ? r["FailedNodes"][node].get<std::string>() : "";
}

// HAMi counts a percentage or a whole card as the MiB of the card chosen, per namespace,
// for every pod placed; Filter fails the nodes where the pod would go past the quota.
TEST(ExtenderQuota, FilterCountsTheMemoryOfTheCardsChosenAgainstTheNamespaceQuota) {
  FakeApi api;
  ExtenderOptions o;
  o.now_unix_seconds = [] { return int64_t{1790000000}; };
  Extender e(o, &api);
  ASSERT_TRUE(e.UpsertNode(Node("small", 2, 16000)).ok());
  ASSERT_TRUE(e.UpsertNode(Node("big", 2, 40000)).ok());
  e.SetQuota("team-a", "gpu", {16000, 100});
  const std::vector<std::string> both = {"small", "big"};

  json half = PodWith("half", "team-a", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "50"}});
  EXPECT_EQ(FilterReason(e, half, both, "small"), "") << "50 % of 16000 MiB fits 16000";
  EXPECT_EQ(FilterReason(e, half, both, "big"),
            "ResourceQuota team-a/gpu: limits.nvidia.com/gpumem used 0 + requested 20000 > hard 16000");
  json whole = PodWith("whole", "team-a", {{"nvidia.com/gpu", "1"}});
  EXPECT_EQ(FilterReason(e, whole, both, "small"), "") << "a whole card counts all its memory";
  EXPECT_NE(FilterReason(e, whole, both, "big"), "");

  api.AddPod(half);
  ASSERT_EQ(BindError(e, half, "small"), "");
  ReportAllocated(e, api, "half", "team-a");
  EXPECT_EQ(e.QuotaUsed("team-a"), (QuotaUsage{8000, 0}));

  json fixed = PodWith("fixed", "team-a", {{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem", "5000"}});
  json r = json::parse(e.Filter(Args(fixed, both)));
  EXPECT_TRUE(r["NodeNames"].empty());
  EXPECT_EQ(r["FailedNodes"]["small"],
            "ResourceQuota team-a/gpu: limits.nvidia.com/gpumem used 8000 + requested 10000 > hard 16000");
  EXPECT_EQ(r["FailedNodes"]["big"], r["FailedNodes"]["small"]);
  EXPECT_EQ(FilterReason(e, PodWith("elsewhere", "team-b", fixed["spec"]["containers"][0]["resources"]["limits"]), both,
                         "small"),
            "")
      << "another namespace has no quota";
  json cores = PodWith("cores", "team-a",
                       {{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem", "1000"}, {"nvidia.com/gpucores", "60"}});
  EXPECT_EQ(FilterReason(e, cores, both, "big"),
            "ResourceQuota team-a/gpu: limits.nvidia.com/gpucores used 0 + requested 120 > hard 100");

  // The pod's usage goes when the pod does.
  EXPECT_TRUE(e.ReleasePod("uid-half"));
  EXPECT_EQ(e.QuotaUsed("team-a"), QuotaUsage{});
  EXPECT_EQ(FilterReason(e, fixed, both, "small"), "");
  // A quota removed holds no more.
  e.RemoveQuota("team-a", "gpu");
  EXPECT_EQ(FilterReason(e, cores, both, "big"), "");
}

// Two pods filtered side by side both fit the quota alone; bind counts again, so only
// one gets the room, and the other's bind names the quota.
TEST(ExtenderQuota, BindChecksTheQuotaOnTheUsageOfTheMoment) {
  FakeApi api;
  ExtenderOptions o;
  o.now_unix_seconds = [] { return int64_t{1790000000}; };
  Extender e(o, &api);
  ASSERT_TRUE(e.UpsertNode(Node("node-a", 2, 40000)).ok());
  ASSERT_TRUE(e.UpsertNode(Node("node-b", 2, 40000)).ok());
  e.SetQuota("team-a", "gpu", {10000, std::nullopt});
  json a = PodWith("a", "team-a", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "6000"}});
  json b = PodWith("b", "team-a", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "6000"}});
  api.AddPod(a);
  api.AddPod(b);
  EXPECT_EQ(FilterReason(e, a, {"node-a"}, "node-a"), "");
  EXPECT_EQ(FilterReason(e, b, {"node-b"}, "node-b"), "");
  EXPECT_EQ(BindError(e, a, "node-a"), "");
  std::string refused = BindError(e, b, "node-b");
  EXPECT_NE(refused.find("ResourceQuota team-a/gpu: limits.nvidia.com/gpumem used 6000 + requested 6000 > hard 10000"),
            std::string::npos)
      << refused;
  EXPECT_EQ(e.pod_count(), 1u) << "nothing reserved for the refused bind";
  EXPECT_EQ(e.QuotaUsed("team-a"), (QuotaUsage{6000, 0}));

  // A binding the API refuses gives the quota back with the cards.
  EXPECT_TRUE(e.ReleasePod("uid-a"));
  api.fail_binding = true;
  EXPECT_NE(BindError(e, b, "node-b"), "");
  EXPECT_EQ(e.QuotaUsed("team-a"), QuotaUsage{});
}

// After a restart the pods already placed count again, in their own namespaces.
TEST(ExtenderQuota, ARestartedExtenderCountsThePodsAlreadyPlaced) {
  FakeApi api;
  ExtenderOptions o;
  o.now_unix_seconds = [] { return int64_t{1790000000}; };
  {
    Extender first(o, &api);
    ASSERT_TRUE(first.UpsertNode(Node("node-a", 2, 40000)).ok());
    json a = PodWith("a", "team-a", {{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem-percentage", "25"}});
    json b = PodWith("b", "team-b", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3000"}});
    api.AddPod(a);
    api.AddPod(b);
    ASSERT_EQ(BindError(first, a, "node-a"), "");
    ReportAllocated(first, api, "a", "team-a");
    ASSERT_EQ(BindError(first, b, "node-a"), "");
  }
  Extender second(o, &api);
  ASSERT_TRUE(second.UpsertNode(Node("node-a", 2, 40000)).ok());
  EXPECT_EQ(second.RebuildFromPods(api.AllPods()).applied, 2);
  EXPECT_EQ(second.QuotaUsed("team-a"), (QuotaUsage{20000, 0}));
  EXPECT_EQ(second.QuotaUsed("team-b"), (QuotaUsage{3000, 0}));
  second.SetQuota("team-a", "gpu", {20000, std::nullopt});
  EXPECT_EQ(FilterReason(second, PodWith("c", "team-a", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1"}}),
                         {"node-a"}, "node-a"),
            "ResourceQuota team-a/gpu: limits.nvidia.com/gpumem used 20000 + requested 1 > hard 20000");
}

}  // namespace
}  // namespace gs::scheduler
