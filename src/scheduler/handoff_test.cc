#include "src/scheduler/handoff.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "src/scheduler/pod_spec.h"

namespace gs::scheduler {
namespace {

using nlohmann::json;

json Container(int gpus, int mem = 0, int cores = 0) {
  json limits = json::object();
  if (gpus > 0) limits["nvidia.com/gpu"] = std::to_string(gpus);
  if (mem > 0) limits["nvidia.com/gpumem"] = std::to_string(mem);
  if (cores > 0) limits["nvidia.com/gpucores"] = std::to_string(cores);
  return json{{"name", "c"}, {"resources", {{"limits", limits}}}};
}

// A pod bound to node "n1" by the extender, with `devices` as both decision annotations.
json BoundPod(const std::string& name, const json& containers, const std::string& devices, int64_t bind_time,
              const std::string& to_allocate = "") {
  return json{{"metadata",
               {{"name", name},
                {"namespace", "default"},
                {"uid", "uid-" + name},
                {"resourceVersion", "7"},
                {"annotations",
                 {{"hami.io/vgpu-node", "n1"},
                  {"hami.io/bind-phase", "allocating"},
                  {"hami.io/bind-time", std::to_string(bind_time)},
                  {"hami.io/vgpu-devices-allocated", devices},
                  {"hami.io/vgpu-devices-to-allocate", to_allocate.empty() ? devices : to_allocate}}}}},
              {"spec", {{"nodeName", "n1"}, {"containers", containers}}},
              {"status", {{"phase", "Pending"}}}};
}

PendingPod Pending(const json& pod) {
  auto p = PendingPodFromJson(pod, "n1");
  EXPECT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->has_value());
  return **p;
}

TEST(Handoff, PendingPodReadsTheDecisionLeftToAllocate) {
  PendingPod p = Pending(BoundPod("a", json::array({Container(1, 3000, 30), Container(0), Container(2, 1000)}),
                                  "GPU-a,NVIDIA,3000,30:;;GPU-b,NVIDIA,1000,0:GPU-c,NVIDIA,1000,0:;", 100));
  EXPECT_EQ(p.uid, "uid-a");
  EXPECT_EQ(p.resource_version, "7");
  EXPECT_EQ(p.bind_time, 100);
  ASSERT_EQ(p.to_allocate.size(), 3u);
  EXPECT_EQ(p.next_container(), 0);
  EXPECT_TRUE(p.to_allocate[1].empty());
  EXPECT_EQ(p.to_allocate[2].size(), 2u);
  EXPECT_FALSE(p.started);
}

TEST(Handoff, PodsThatAreNotWaitingHereAreNotPending) {
  json pod = BoundPod("a", json::array({Container(1, 3000)}), "GPU-a,NVIDIA,3000,0:;", 100);
  auto not_pending = [&](const json& p, const std::string& node = "n1") {
    auto r = PendingPodFromJson(p, node);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_FALSE(r->has_value()) << p.dump();
  };
  not_pending(pod, "n2");
  json unbound = pod;  // decision annotations written by a user on an unbound pod
  unbound["spec"].erase("nodeName");
  not_pending(unbound);
  json done = pod;
  done["metadata"]["annotations"]["hami.io/bind-phase"] = "success";
  not_pending(done);
  json failed = pod;
  failed["status"]["phase"] = "Failed";
  not_pending(failed);
  json deleting = pod;
  deleting["metadata"]["deletionTimestamp"] = "2026-11-23T10:00:00Z";
  not_pending(deleting);
  json claimed = pod;
  claimed["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"] = ";";
  not_pending(claimed);
}

TEST(Handoff, MalformedDecisionIsAnErrorNamingThePod) {
  json pod = BoundPod("bad", json::array({Container(1)}), "GPU-a,NVIDIA,lots,0:;", 100);
  auto r = PendingPodFromJson(pod, "n1");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("default/bad"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("hami.io/vgpu-devices-to-allocate"), std::string::npos);
}

TEST(Handoff, OldestBindWithTheRightCardCountIsClaimed) {
  std::vector<PendingPod> pods = {
      Pending(BoundPod("newer", json::array({Container(1, 3000)}), "GPU-a,NVIDIA,3000,0:;", 200)),
      Pending(
          BoundPod("two-cards", json::array({Container(2, 3000)}), "GPU-a,NVIDIA,3000,0:GPU-b,NVIDIA,3000,0:;", 50)),
      Pending(BoundPod("older", json::array({Container(1, 3000)}), "GPU-b,NVIDIA,3000,0:;", 100)),
  };
  auto c = ChooseClaim(pods, 1);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(pods[c->pod].name, "older");
  ASSERT_EQ(c->cards.size(), 1u);
  EXPECT_EQ(c->cards[0].uuid, "GPU-b");
  EXPECT_EQ(c->patch.at("hami.io/vgpu-devices-to-allocate"), ";");
  EXPECT_EQ(c->patch.at("hami.io/bind-phase"), "success");

  auto two = ChooseClaim(pods, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(pods[two->pod].name, "two-cards");

  auto none = ChooseClaim(pods, 3);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("default/older (1)"), std::string::npos) << none.status().message();
}

TEST(Handoff, APodHalfwayThroughItsContainersGoesOnFirst) {
  // kubelet allocates every container of one pod before the next pod.
  std::string devices = "GPU-a,NVIDIA,1000,0:;GPU-b,NVIDIA,2000,0:;";
  std::vector<PendingPod> pods = {
      Pending(BoundPod("other", json::array({Container(1, 1000), Container(1, 2000)}), devices, 10)),
      Pending(BoundPod("halfway", json::array({Container(1, 1000), Container(1, 2000)}), devices, 20,
                       ";GPU-b,NVIDIA,2000,0:;")),
  };
  EXPECT_TRUE(pods[1].started);
  auto c = ChooseClaim(pods, 1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(pods[c->pod].name, "halfway");
  EXPECT_EQ(c->container, 1u);
  EXPECT_EQ(c->cards[0].memory_mib, 2000);
  EXPECT_EQ(c->patch.at("hami.io/bind-phase"), "success");

  // The first container of the other pod: one entry left, phase stays allocating.
  pods.pop_back();
  auto first = ChooseClaim(pods, 1);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->container, 0u);
  EXPECT_EQ(first->patch.at("hami.io/vgpu-devices-to-allocate"), ";GPU-b,NVIDIA,2000,0:;");
  EXPECT_EQ(first->patch.count("hami.io/bind-phase"), 0u);
}

TEST(Handoff, SignatureSeparatesRequestsThatAreNotInterchangeable) {
  auto request = [](const json& containers, const json& annos = json::object()) {
    json pod = {{"metadata", {{"name", "p"}, {"namespace", "d"}, {"uid", "u"}, {"annotations", annos}}},
                {"spec", {{"containers", containers}}}};
    auto r = PodRequestFromJson(pod);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return *r;
  };
  std::string base = RequestSignature(request(json::array({Container(1, 3000, 30)})));
  EXPECT_EQ(base, RequestSignature(request(json::array({Container(1, 3000, 30)}))));
  EXPECT_EQ(base, RequestSignature(
                      request(json::array({Container(1, 3000, 30)}), {{"hami.io/gpu-scheduler-policy", "binpack"}})));
  EXPECT_NE(base, RequestSignature(request(json::array({Container(1, 3001, 30)}))));
  EXPECT_NE(base, RequestSignature(request(json::array({Container(1, 3000, 31)}))));
  EXPECT_NE(base, RequestSignature(request(json::array({Container(1, 3000, 30), Container(1)}))));
  EXPECT_NE(base,
            RequestSignature(request(json::array({Container(1, 3000, 30)}), {{"nvidia.com/use-gputype", "H100"}})));
  EXPECT_EQ(RequestSignature(request(json::array({Container(1)}), {{"nvidia.com/use-gpuuuid", "b,a"}})),
            RequestSignature(request(json::array({Container(1)}), {{"nvidia.com/use-gpuuuid", "a,b"}})));
  // Card indexes: two pods bound to other cards by their index lists are not interchangeable.
  auto indexes = [&](const char* key, const char* value) {
    return RequestSignature(request(json::array({Container(1)}), {{key, value}}));
  };
  std::string plain = RequestSignature(request(json::array({Container(1)})));
  EXPECT_NE(plain, indexes("nvidia.com/use-gpuindexes", "0"));
  EXPECT_NE(plain, indexes("nvidia.com/nouse-gpuindexes", "0"));
  EXPECT_NE(indexes("nvidia.com/use-gpuindexes", "0"), indexes("nvidia.com/use-gpuindexes", "1"));
  EXPECT_NE(indexes("nvidia.com/use-gpuindexes", "1"), indexes("nvidia.com/nouse-gpuindexes", "1"));
  EXPECT_NE(indexes("nvidia.com/use-gpuindexes", "1,2"), indexes("nvidia.com/use-gpuindexes", "12"));
  EXPECT_EQ(indexes("nvidia.com/use-gpuindexes", "2,1,2"), indexes("nvidia.com/use-gpuindexes", " 1, 2"));
}

TEST(Handoff, ABindWaitsOnlyForAPendingPodItCouldBeMistakenFor) {
  std::vector<PendingPod> pending = {
      Pending(BoundPod("small", json::array({Container(1, 1000)}), "GPU-a,NVIDIA,1000,0:;", 10)),
  };
  auto request = [](const std::string& uid, const json& containers) {
    json pod = {{"metadata", {{"name", uid}, {"namespace", "default"}, {"uid", uid}}},
                {"spec", {{"containers", containers}}}};
    return *PodRequestFromJson(pod);
  };
  // Same request: interchangeable, no wait.
  EXPECT_EQ(Confusable(pending, request("u1", json::array({Container(1, 1000)}))), std::nullopt);
  // Another card count: kubelet's Allocate tells them apart.
  EXPECT_EQ(Confusable(pending, request("u2", json::array({Container(2, 1000)}))), std::nullopt);
  // Same card count, other memory: an Allocate for one could take the other's entry.
  EXPECT_EQ(Confusable(pending, request("u3", json::array({Container(1, 5000)}))), "default/small");
  // The pod itself (a retried bind) never waits for itself.
  EXPECT_EQ(Confusable(pending, request("uid-small", json::array({Container(1, 5000)}))), std::nullopt);
  // A pod without GPUs never waits.
  EXPECT_EQ(Confusable(pending, request("u4", json::array({Container(0)}))), std::nullopt);

  // Every entry still to hand out counts, on both sides: a two-container pod (1 card, then
  // 2) pending, and a request whose only container asks 2 cards — an Allocate for the
  // pending pod's second container, by an agent whose copy missed its first claim, could
  // take the request's entry.
  std::vector<PendingPod> two = {
      Pending(BoundPod("two", json::array({Container(1, 1000), Container(2, 1000)}),
                       "GPU-a,NVIDIA,1000,0:;GPU-a,NVIDIA,1000,0:GPU-b,NVIDIA,1000,0:;", 10)),
  };
  EXPECT_EQ(Confusable(two, request("u5", json::array({Container(2, 3000)}))), "default/two");
  EXPECT_EQ(Confusable(pending, request("u6", json::array({Container(2, 1000), Container(1, 3000)}))), "default/small")
      << "the request's second container asks as many cards as small's entry";
  EXPECT_EQ(Confusable(two, request("u7", json::array({Container(3, 3000)}))), std::nullopt);
}

}  // namespace
}  // namespace gs::scheduler
