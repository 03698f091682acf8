#include "src/node/scheduler_decisions.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "src/kube/testing/fake_api_server.h"
#include "src/node/claimed_allocation.h"
#include "src/node/node_registrar.h"
#include "src/node/pending_pods.h"
#include "src/scheduler/hami_format.h"
#include "tests/wait_until.h"

namespace gs::node {
namespace {

using gs::testing::WaitUntil;
using kube::testing::FakeApiServer;
using nlohmann::json;

// A pod the extender bound to `node`: one container asking `cards` cards of `mib` MiB.
json BoundPod(const std::string& name, const std::string& node, const std::string& devices, int64_t bind_time,
              int cards = 1) {
  return {
      {"metadata",
       {{"name", name},
        {"namespace", "default"},
        {"annotations",
         {{"hami.io/vgpu-node", node},
          {"hami.io/bind-phase", "allocating"},
          {"hami.io/bind-time", std::to_string(bind_time)},
          {"hami.io/vgpu-devices-allocated", devices},
          {"hami.io/vgpu-devices-to-allocate", devices}}}}},
      {"spec",
       {{"nodeName", node},
        {"containers",
         json::array({{{"name", "c"}, {"resources", {{"limits", {{"nvidia.com/gpu", std::to_string(cards)}}}}}}})}}},
      {"status", {{"phase", "Pending"}}}};
}

std::unique_ptr<kube::Client> ClientFor(const FakeApiServer& api) {
  kube::ClientConfig config;
  config.server = api.url();
  auto c = kube::Client::Create(config);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return std::move(*c);
}

std::string Annotation(FakeApiServer& api, const std::string& name, const char* key) {
  auto pod = api.Find("pods", "default", name);
  return pod ? (*pod)["metadata"]["annotations"].value(key, "") : "<gone>";
}

TEST(SchedulerDecisions, AllocateClaimsTheOldestDecisionWithThatManyCardsOnThisNode) {
  FakeApiServer api;
  api.Put("pods", BoundPod("newer", "n1", "GPU-b,NVIDIA,2000,20:;", 200));
  api.Put("pods", BoundPod("older", "n1", "GPU-a,NVIDIA,3000,30:;", 100));
  api.Put("pods", BoundPod("elsewhere", "n2", "GPU-x,NVIDIA,1000,10:;", 50));
  api.Put("pods", BoundPod("pair", "n1", "GPU-a,NVIDIA,1000,0:GPU-b,NVIDIA,1000,0:;", 10, 2));
  auto client = ClientFor(api);
  ApiDecisionSource source(client.get(), "n1");

  auto first = source.Claim(1);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->pod, "default/older");
  ASSERT_EQ(first->cards.size(), 1u);
  EXPECT_EQ(first->cards[0].uuid, "GPU-a");
  EXPECT_EQ(first->cards[0].memory_mib, 3000);
  EXPECT_EQ(first->cards[0].cores, 30);
  EXPECT_EQ(Annotation(api, "older", "hami.io/bind-phase"), "success");
  EXPECT_EQ(Annotation(api, "older", "hami.io/vgpu-devices-to-allocate"), ";");
  EXPECT_EQ(Annotation(api, "older", "hami.io/vgpu-devices-allocated"), "GPU-a,NVIDIA,3000,30:;") << "kept";

  auto second = source.Claim(1);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->pod, "default/newer");
  auto pair = source.Claim(2);
  ASSERT_TRUE(pair.ok());
  EXPECT_EQ(pair->pod, "default/pair");

  // Each claim looked at the API server's cache first (resourceVersion 0), and went to
  // etcd (no resourceVersion) only when that showed nothing to claim.
  auto lists = [&] {
    std::vector<std::string> versions;
    for (const auto& r : api.requests())
      if (r.method == "GET" && r.path == "/api/v1/pods")
        versions.push_back(r.params.count("resourceVersion") ? r.params.at("resourceVersion") : "quorum");
    return versions;
  };
  EXPECT_EQ(lists(), (std::vector<std::string>{"0", "0", "0"}));
  auto none = source.Claim(1);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(lists(), (std::vector<std::string>{"0", "0", "0", "0", "quorum"}));
  EXPECT_EQ(Annotation(api, "elsewhere", "hami.io/bind-phase"), "allocating") << "another node's pod is untouched";
}

// Concurrent Allocates (kubelet serialises them, but a restarted kubelet or two agents
// must not be trusted to): every claim is guarded by the pod's resourceVersion, so no
// decision is ever handed out twice.
TEST(SchedulerDecisions, ConcurrentClaimsNeverTakeOneDecisionTwice) {
  FakeApiServer api;
  constexpr int kPods = 8;
  for (int i = 0; i < kPods; ++i)
    api.Put("pods", BoundPod("p" + std::to_string(i), "n1", "GPU-a,NVIDIA,1000,10:;", 100));
  auto client = ClientFor(api);
  ApiDecisionSource source(client.get(), "n1");
  std::vector<std::string> got(kPods + 2);
  std::vector<std::thread> threads;
  for (int i = 0; i < kPods + 2; ++i)
    threads.emplace_back([&, i] {
      auto c = source.Claim(1);
      got[static_cast<size_t>(i)] = c.ok() ? c->pod : "refused: " + c.status().message();
    });
  for (auto& t : threads) t.join();
  std::set<std::string> claimed;
  int refused = 0;
  for (const auto& g : got) {
    if (g.rfind("refused", 0) == 0) {
      ++refused;
      continue;
    }
    EXPECT_TRUE(claimed.insert(g).second) << g << " claimed twice";
  }
  EXPECT_EQ(claimed.size(), static_cast<size_t>(kPods));
  EXPECT_EQ(refused, 2);
  EXPECT_GT(api.CountRequests("PATCH", "/api/v1/namespaces/default/pods/"), kPods) << "some claims lost a race";
}

// With the pod watch, a claim of a pod the watch has seen is one API call, the claim: no
// list. The watch's copies are only hints: pods claimed behind its back (another agent, a
// copy that is behind) are never claimed twice, and a pod it has not seen yet is still
// found by listing.
TEST(SchedulerDecisions, WithThePodWatchAClaimIsOneCallAndNeverTakesADecisionTwice) {
  FakeApiServer api;
  api.Put("pods", BoundPod("older", "n1", "GPU-a,NVIDIA,3000,30:;", 100));
  api.Put("pods", BoundPod("newer", "n1", "GPU-b,NVIDIA,2000,20:;", 200));
  api.Put("pods", BoundPod("elsewhere", "n2", "GPU-x,NVIDIA,1000,10:;", 50));
  auto client = ClientFor(api);
  std::mutex mu;  // the watch's errors come from its thread
  std::vector<std::string> errors;
  ApiDecisionSource source(client.get(), "n1");
  source.StartWatching([&](const std::string& e) {
    std::lock_guard<std::mutex> l(mu);
    errors.push_back(e);
  });
  ASSERT_TRUE(WaitUntil([&] { return source.watching(); }, std::chrono::seconds(5))) << "the watch never started";
  auto lists = [&] {
    int n = 0;
    for (const auto& r : api.requests())
      if (r.method == "GET" && r.path == "/api/v1/pods" && !(r.params.count("watch") && r.params.at("watch") == "true"))
        ++n;
    return n;
  };
  const int listed = lists();  // the watch's own first list
  auto first = source.Claim(1);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->pod, "default/older");
  auto second = source.Claim(1);  // the first claim's answer updated the copy: no conflict
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(second->pod, "default/newer");
  EXPECT_EQ(lists(), listed) << "claims of pods the watch had seen needed no list";
  EXPECT_EQ(api.CountRequests("PATCH", "/api/v1/namespaces/default/pods/"), 2);

  // Another agent (no watch) claims behind this one's back, and pods come while claims
  // go on: every decision is handed out exactly once, whichever way each claim went.
  ApiDecisionSource other(client.get(), "n1");
  std::multiset<std::string> claimed;
  for (int round = 0; round < 20; ++round) {
    for (int k = 0; k < 2; ++k)
      api.Put("pods", BoundPod("p" + std::to_string(round) + "-" + std::to_string(k), "n1", "GPU-a,NVIDIA,1000,10:;",
                               300 + round));
    for (ApiDecisionSource* s : {&other, &source}) {
      auto c = s->Claim(1);
      ASSERT_TRUE(c.ok()) << c.status().message();
      claimed.insert(c->pod);
    }
  }
  EXPECT_EQ(claimed.size(), 40u);
  for (const auto& pod : claimed) EXPECT_EQ(claimed.count(pod), 1u) << pod << " claimed twice";
  auto none = source.Claim(1);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound) << none.status().message();
  EXPECT_EQ(Annotation(api, "elsewhere", "hami.io/bind-phase"), "allocating") << "another node's pod is untouched";
  std::lock_guard<std::mutex> l(mu);
  EXPECT_TRUE(errors.empty()) << errors.front();
}

// The watch lags behind the agent's own claims: a pod whose first container was just
// claimed must not look untouched again when the watch brings the version before the
// claim (a two-container pod in the middle of kubelet's Allocates would otherwise let the
// next Allocate take another pod's decision). The watch's copy counts again once it brings
// the claim's own version, or a list begun after the claim shows the pod.
TEST(SchedulerDecisions, TheWatchNeverTakesBackWhatAClaimAnswered) {
  json bound = BoundPod("two", "n1", "GPU-a,NVIDIA,1000,10:;GPU-b,NVIDIA,1000,10:GPU-c,NVIDIA,1000,10:;", 100);
  bound["metadata"]["uid"] = "uid-two";
  bound["metadata"]["resourceVersion"] = "10";
  json claimed = bound;  // the answer to the claim of container 0
  claimed["metadata"]["resourceVersion"] = "11";
  claimed["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"] =
      ";GPU-b,NVIDIA,1000,10:GPU-c,NVIDIA,1000,10:;";
  json done = claimed;  // both containers claimed
  done["metadata"]["resourceVersion"] = "12";
  done["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"] = ";;";
  done["metadata"]["annotations"]["hami.io/bind-phase"] = "success";
  auto next = [](const PendingPodCopies& copies) {
    auto p = copies.Pending();
    if (p.size() != 1) return "pods: " + std::to_string(p.size());
    for (size_t c = 0; c < p[0].to_allocate.size(); ++c)
      if (!p[0].to_allocate[c].empty()) return "container " + std::to_string(c);
    return std::string("none");
  };

  PendingPodCopies copies("n1");
  copies.FromWatch(bound);
  EXPECT_EQ(next(copies), "container 0");
  copies.FromClaim(claimed);
  EXPECT_EQ(next(copies), "container 1");
  copies.FromWatch(bound);  // the watch, late: version 10 again
  EXPECT_EQ(next(copies), "container 1") << "an older version must not undo the claim";
  copies.FromWatch(claimed);  // the watch brings the claim's own version...
  copies.FromWatch(done);     // ...and from then on what it brings counts
  EXPECT_EQ(next(copies), "pods: 0");
  copies.Deleted(done);
  copies.FromWatch(bound);
  EXPECT_EQ(next(copies), "container 0") << "a deleted pod's UID is new again";

  // Lists: one begun before a claim may show the pod as it was; one begun after shows it
  // as claimed, and the watch's copies count again.
  PendingPodCopies listed("n1");
  listed.FromWatch(bound);
  listed.ListStarted();
  listed.FromClaim(claimed);  // answered while the list was on its way
  listed.Listed({bound});
  EXPECT_EQ(next(listed), "container 1") << "a list begun before the claim is older than it";
  listed.ListStarted();
  listed.Listed({claimed});
  listed.FromWatch(done);
  EXPECT_EQ(next(listed), "pods: 0") << "after a list begun after the claim, the watch counts again";
}

TEST(SchedulerDecisions, AllocationForClaimChecksTheCardsAgainstThisNode) {
  std::vector<model::Gpu> gpus = {{"GPU-a", 0, "H100", 80ull << 30, 0, 0, true},
                                  {"GPU-b", 1, "H100", 80ull << 30, 1, 1, false}};
  ClaimedCards claim{"default/p", 0, {{"GPU-a", "NVIDIA", 3000, 30}}};
  auto a = AllocationForClaim(gpus, claim, false);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_EQ(a->devices.size(), 1u);
  EXPECT_EQ(a->devices[0].memory_limit, 3000ull << 20);
  EXPECT_EQ(a->devices[0].sm_share, 30u);
  claim.cards[0].cores = 100;
  EXPECT_EQ(AllocationForClaim(gpus, claim, false)->devices[0].sm_share, 0u) << "the whole card: no compute limit";

  claim.cards[0].uuid = "GPU-zzz";
  auto unknown = AllocationForClaim(gpus, claim, false);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("GPU-zzz is not on this node"), std::string::npos);
  claim.cards[0].uuid = "GPU-b";
  EXPECT_NE(AllocationForClaim(gpus, claim, false).status().message().find("unhealthy"), std::string::npos);
  claim.cards[0] = {"GPU-a", "NVIDIA", 90000, 0};
  EXPECT_FALSE(AllocationForClaim(gpus, claim, false).ok());
  EXPECT_TRUE(AllocationForClaim(gpus, claim, true).ok()) << "virtual device memory may exceed the card";
}

TEST(SchedulerDecisions, TheRegistrarPublishesTheCardsAndRepublishesOnAPoke) {
  FakeApiServer api;
  api.Put("nodes", {{"metadata", {{"name", "n1"}}}});
  auto client = ClientFor(api);
  std::vector<model::Gpu> gpus = {{"GPU-a", 0, "NVIDIA H100 80GB HBM3", 80ull << 30, 0, 0, true},
                                  {"GPU-b", 1, "NVIDIA H100 80GB HBM3", 80ull << 30, 1, 1, true}};
  std::mutex mu;
  model::SplitPolicy policy;
  policy.split_count = 4;
  NodeRegistrar registrar(
      client.get(), "n1",
      [&] {
        std::lock_guard<std::mutex> l(mu);
        return gpus;
      },
      policy, std::chrono::seconds(3600), nullptr);
  ASSERT_TRUE(registrar.Start().ok());
  auto published = [&] {
    auto node = api.Find("nodes", "", "n1");
    std::string reg = (*node)["metadata"]["annotations"].value(scheduler::hami::kNodeRegister, "");
    auto inv = scheduler::hami::DecodeNodeRegister("n1", reg);
    EXPECT_TRUE(inv.ok()) << reg;
    return *inv;
  };
  auto inv = published();
  ASSERT_EQ(inv.gpus.size(), 2u);
  EXPECT_EQ(inv.gpus[1].uuid, "GPU-b");
  EXPECT_EQ(inv.gpus[1].memory_mib, 80 * 1024);
  EXPECT_EQ(inv.gpus[1].slots, 4);
  EXPECT_EQ(inv.gpus[1].numa, 1);
  EXPECT_EQ(inv.gpus[1].model, "NVIDIA-NVIDIA H100 80GB HBM3");
  EXPECT_TRUE(inv.gpus[1].healthy);
  auto node = api.Find("nodes", "", "n1");
  EXPECT_EQ(
      (*node)["metadata"]["annotations"][scheduler::hami::kNodeHandshake].get<std::string>().rfind("Reported ", 0), 0u);

  {
    std::lock_guard<std::mutex> l(mu);
    gpus[1].healthy = false;
  }
  registrar.Poke();
  EXPECT_TRUE(WaitUntil([&] { return !published().gpus[1].healthy; }, std::chrono::seconds(2)))
      << "the unhealthy card was not republished";
  registrar.Stop();
}

}  // namespace
}  // namespace gs::node
