#include "src/scheduler/webhook.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "src/kube/base64.h"
#include "src/kube/testing/fake_api_server.h"
#include "src/scheduler/webhook_http.h"
#include "tests/temp_dir.h"
#include "tests/wait_until.h"

namespace gs::scheduler {
namespace {

using gs::testing::WaitUntil;
using nlohmann::json;

json Pod(const json& limits, const json& annotations = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", "p"}, {"namespace", "default"}, {"annotations", annotations}}},
          {"spec", {{"containers", json::array({{{"name", "c"}, {"resources", {{"limits", limits}}}}})}}}};
}

json Review(const json& pod, const std::string& operation = "CREATE", const json& old = nullptr,
            const std::string& user = "alice") {
  json request = {{"uid", "705ab4f5-6393-11e8-b7cc-42010a800002"},
                  {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                  {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
                  {"operation", operation},
                  {"userInfo", {{"username", user}}},
                  {"object", pod}};
  if (!old.is_null()) request["oldObject"] = old;
  return {{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"request", request}};
}

const json kForged = {{"hami.io/vgpu-node", "n1"},
                      {"hami.io/vgpu-devices-allocated", "GPU-a,NVIDIA,40000,100:;"},
                      {"hami.io/bind-phase", "success"},
                      {"team", "ml"}};

// The review's response, and the pod after its patch.
struct Result {
  json response;
  json pod;
};
Result Mutate(const json& review, const WebhookOptions& o = {}) {
  json out = json::parse(MutatePodReview(review.dump(), o));
  EXPECT_EQ(out["apiVersion"], "admission.k8s.io/v1");
  EXPECT_EQ(out["kind"], "AdmissionReview");
  Result r{out["response"], review["request"].value("object", json())};
  EXPECT_EQ(r.response["allowed"], true);
  if (r.response.contains("patch")) {
    EXPECT_EQ(r.response["patchType"], "JSONPatch");
    auto text = kube::Base64Decode(r.response["patch"].get<std::string>());
    EXPECT_TRUE(text.ok());
    r.pod = r.pod.patch(json::parse(*text));
  }
  return r;
}

TEST(WebhookTest, AGpuPodGoesToTheSchedulerWithoutForgedDecisions) {
  WebhookOptions o;
  o.scheduler_name = "gpuslice";
  Result r = Mutate(Review(Pod({{"nvidia.com/gpumem", "3000"}}, kForged)), o);
  EXPECT_EQ(r.response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
  EXPECT_EQ(r.pod["spec"]["schedulerName"], "gpuslice");
  EXPECT_EQ(r.pod["metadata"]["annotations"], json({{"team", "ml"}}));
}

TEST(WebhookTest, EachGpuResourceInLimitsOrRequestsOfAnyContainerCounts) {
  for (const char* name :
       {"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"}) {
    json pod = Pod(json::object());
    pod["spec"]["initContainers"] = json::array({{{"name", "i"}, {"resources", {{"requests", {{name, "1"}}}}}}});
    EXPECT_EQ(Mutate(Review(pod)).pod["spec"]["schedulerName"], "gpuslice-scheduler") << name;
  }
  Result cpu = Mutate(Review(Pod({{"cpu", "1"}, {"nvidia.com/other", "1"}})));
  EXPECT_FALSE(cpu.response.contains("patch"));
  EXPECT_FALSE(cpu.pod["spec"].contains("schedulerName"));
}

// HAMi's default: memory or cores without a card count mean one card, and kubelet calls
// the device plugin only for containers with nvidia.com/gpu.
TEST(WebhookTest, MemoryOrCoresWithoutACardCountAskForOneCard) {
  json pod = Pod({{"nvidia.com/gpumem", "3000"}, {"nvidia.com/gpucores", "30"}});
  pod["spec"]["containers"][0]["resources"]["requests"] = {{"nvidia.com/gpumem", "3000"}};
  pod["spec"]["containers"].push_back(
      {{"name", "pct"}, {"resources", {{"limits", {{"nvidia.com/gpumem-percentage", "50"}}}}}});
  pod["spec"]["containers"].push_back(
      {{"name", "two"}, {"resources", {{"limits", {{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem", "1000"}}}}}});
  pod["spec"]["containers"].push_back({{"name", "cpu"}, {"resources", {{"limits", {{"cpu", "1"}}}}}});
  json after = Mutate(Review(pod)).pod["spec"]["containers"];
  EXPECT_EQ(after[0]["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(after[0]["resources"]["requests"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(after[1]["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(after[1]["resources"]["requests"], json({{"nvidia.com/gpu", "1"}}));
  EXPECT_EQ(after[2]["resources"]["limits"]["nvidia.com/gpu"], "2") << "an explicit count stays";
  EXPECT_FALSE(after[3]["resources"]["limits"].contains("nvidia.com/gpu"));
  // Resources cannot change on UPDATE; nothing is added then.
  Result update = Mutate(Review(pod, "UPDATE", pod));
  EXPECT_FALSE(update.pod["spec"]["containers"][0]["resources"]["limits"].contains("nvidia.com/gpu"));
}

// The chart's defaultGPUNum: the count added; 0 adds none (the extender then refuses the
// container, pod_spec.h).
TEST(WebhookTest, DefaultGpuNumIsTheCountAdded) {
  json pod = Pod({{"nvidia.com/gpumem", "3000"}});
  WebhookOptions o;
  o.resources.default_gpu_num = 3;
  json after = Mutate(Review(pod), o).pod;
  EXPECT_EQ(after["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "3");
  EXPECT_EQ(after["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"], "3");
  o.resources.default_gpu_num = 0;
  after = Mutate(Review(pod), o).pod;
  EXPECT_FALSE(after["spec"]["containers"][0]["resources"]["limits"].contains("nvidia.com/gpu"));
  EXPECT_FALSE(after["spec"]["containers"][0]["resources"].contains("requests"));
  EXPECT_EQ(after["spec"]["schedulerName"], "gpuslice-scheduler") << "still the extender's to judge";
}

// The chart's resource names: the webhook routes pods and adds the card count by the
// configured names only.
TEST(WebhookTest, CustomResourceNamesRouteThePodAndNameTheCountAdded) {
  WebhookOptions o;
  o.resources.count_name = "example.com/vgpu";
  o.resources.memory_name = "example.com/vgpu-memory";
  o.resources.memory_percent_name = "example.com/vgpu-memory-percentage";
  o.resources.cores_name = "example.com/vgpu-cores";
  for (const char* name :
       {"example.com/vgpu", "example.com/vgpu-memory", "example.com/vgpu-memory-percentage", "example.com/vgpu-cores"})
    EXPECT_EQ(Mutate(Review(Pod({{name, "1"}})), o).pod["spec"]["schedulerName"], "gpuslice-scheduler") << name;
  json after = Mutate(Review(Pod({{"example.com/vgpu-memory", "3000"}})), o).pod;
  EXPECT_EQ(after["spec"]["containers"][0]["resources"]["limits"],
            json({{"example.com/vgpu-memory", "3000"}, {"example.com/vgpu", "1"}}));
  EXPECT_EQ(after["spec"]["containers"][0]["resources"]["requests"], json({{"example.com/vgpu", "1"}}));
  // HAMi's default names are then no GPU resources: such a pod is left alone.
  Result hami = Mutate(Review(Pod({{"nvidia.com/gpumem", "3000"}})), o);
  EXPECT_FALSE(hami.response.contains("patch"));
  EXPECT_FALSE(hami.pod["spec"].contains("schedulerName"));
}

TEST(WebhookTest, OnlyTheDefaultSchedulerAndHamisAreReplaced) {
  json pod = Pod({{"nvidia.com/gpu", "1"}});
  pod["spec"]["schedulerName"] = "default-scheduler";
  EXPECT_EQ(Mutate(Review(pod)).pod["spec"]["schedulerName"], "gpuslice-scheduler");
  pod["spec"]["schedulerName"] = "hami-scheduler";  // a HAMi pod spec
  EXPECT_EQ(Mutate(Review(pod)).pod["spec"]["schedulerName"], "gpuslice-scheduler");
  pod["spec"]["schedulerName"] = "volcano";
  Result r = Mutate(Review(pod));
  EXPECT_EQ(r.pod["spec"]["schedulerName"], "volcano");
  EXPECT_FALSE(r.response.contains("patch"));
}

TEST(WebhookTest, AnyPodLosesDecisionAnnotationsItWasCreatedWith) {
  Result r = Mutate(Review(Pod({{"cpu", "1"}}, kForged)));
  EXPECT_EQ(r.pod["metadata"]["annotations"], json({{"team", "ml"}}));
  EXPECT_FALSE(r.pod["spec"].contains("schedulerName"));
}

TEST(WebhookTest, AnUpdateByAnUntrustedUserCannotChangeDecisions) {
  json old = Pod({{"nvidia.com/gpu", "1"}}, {{"hami.io/vgpu-node", "n1"}, {"hami.io/bind-phase", "allocating"}});
  json changed = Pod({{"nvidia.com/gpu", "1"}},
                     {{"hami.io/vgpu-node", "n2"}, {"hami.io/bind-time", "1"}, {"team", "ml"}});  // phase dropped
  WebhookOptions o;
  o.trusted_users = {"system:serviceaccount:gpuslice-system:gpuslice"};
  Result r = Mutate(Review(changed, "UPDATE", old), o);
  EXPECT_EQ(r.pod["metadata"]["annotations"],
            json({{"hami.io/vgpu-node", "n1"}, {"hami.io/bind-phase", "allocating"}, {"team", "ml"}}));
  EXPECT_FALSE(r.pod["spec"].contains("schedulerName")) << "no scheduler change on update";

  json stripped = changed;
  stripped["metadata"].erase("annotations");
  r = Mutate(Review(stripped, "UPDATE", old), o);
  EXPECT_EQ(r.pod["metadata"]["annotations"],
            json({{"hami.io/vgpu-node", "n1"}, {"hami.io/bind-phase", "allocating"}}));

  r = Mutate(Review(changed, "UPDATE", old, "system:serviceaccount:gpuslice-system:gpuslice"), o);
  EXPECT_FALSE(r.response.contains("patch"));
}

TEST(WebhookTest, WhatItCannotReadIsAllowedWithAWarning) {
  json out = json::parse(MutatePodReview("{not json", {}));
  EXPECT_EQ(out["response"]["allowed"], true);
  EXPECT_EQ(out["response"]["uid"], "");
  EXPECT_NE(out["response"]["warnings"][0].get<std::string>().find("not JSON"), std::string::npos);
  json review = Review(Pod(json::object()));
  review["request"].erase("object");
  out = json::parse(MutatePodReview(review.dump(), {}));
  EXPECT_EQ(out["response"]["allowed"], true);
  EXPECT_EQ(out["response"]["uid"], review["request"]["uid"]);
  EXPECT_FALSE(out["response"].contains("patch"));
  EXPECT_EQ(out["response"]["warnings"].size(), 1u);
  review = Review(Pod({{"nvidia.com/gpu", "1"}}, kForged));
  review["request"]["operation"] = "DELETE";
  EXPECT_FALSE(json::parse(MutatePodReview(review.dump(), {}))["response"].contains("patch"));
  // Fields of the wrong type (found by fuzz/webhook_fuzzer.cc): answered, never thrown.
  for (const char* field : {"uid", "operation", "subResource", "kind", "userInfo"}) {
    review = Review(Pod({{"nvidia.com/gpu", "1"}}, kForged), "UPDATE", Pod(json::object()));
    review["request"][field] = json::array({1, 2});
    std::string reply;
    EXPECT_NO_THROW(reply = MutatePodReview(review.dump(), {})) << field;
    EXPECT_EQ(json::parse(reply)["response"]["allowed"], true) << field;
  }
  review = Review(Pod({{"nvidia.com/gpu", "1"}}), "UPDATE", Pod(json::object()));
  review["request"]["userInfo"]["username"] = 7;
  EXPECT_NO_THROW(MutatePodReview(review.dump(), {}));
}

TEST(WebhookTest, AnnotationKeysAreEscapedAsJsonPointers) {
  EXPECT_EQ(AnnotationPointer("hami.io/vgpu-node"), "/metadata/annotations/hami.io~1vgpu-node");
  EXPECT_EQ(AnnotationPointer("a~b"), "/metadata/annotations/a~0b");
}

TEST(WebhookTest, ServedOverHttps) {
  gs::testing::TempDir dir("gs-webhook");
  kube::testing::TestCerts certs;
  ASSERT_TRUE(kube::testing::MakeTestCerts(dir.path(), &certs));
  WebhookHttpsServer server(WebhookOptions{});
  auto port = server.Bind("127.0.0.1", 0, certs.server_cert, certs.server_key);
  ASSERT_TRUE(port.ok()) << port.status().message();
  std::thread serving([&] { server.Serve(); });
  httplib::SSLClient client("127.0.0.1", *port);
  client.set_ca_cert_path(certs.ca_cert.c_str());
  client.enable_server_certificate_verification(true);
  auto res = client.Post("/mutate?timeout=10s", Review(Pod({{"nvidia.com/gpu", "1"}})).dump(), "application/json");
  server.Stop();
  serving.join();
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["response"]["patchType"], "JSONPatch");

  EXPECT_EQ(WebhookHttpsServer({}).Bind("127.0.0.1", 0, dir.path() + "/none.crt", certs.server_key).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(WebhookHttpsServer({}).Bind("127.0.0.1", 0, certs.server_key, certs.server_cert).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
// cert-manager renews the serving certificate in place: the webhook serves the new one
// without a restart (a client that trusts only the new CA gets through once the files
// changed), and files that do not hold a matching pair leave the current one in service.
TEST(WebhookTest, ARotatedCertificateIsServedWithoutARestart) {
  gs::testing::TempDir dir("gs-webhook-rotate");
  std::filesystem::create_directories(dir.path() + "/old");
  std::filesystem::create_directories(dir.path() + "/new");
  kube::testing::TestCerts before, after;
  ASSERT_TRUE(kube::testing::MakeTestCerts(dir.path() + "/old", &before));
  ASSERT_TRUE(kube::testing::MakeTestCerts(dir.path() + "/new", &after));
  const std::string cert = dir.path() + "/tls.crt", key = dir.path() + "/tls.key";
  auto install = [&](const std::string& c, const std::string& k) {
    // As the kubelet updates a mounted Secret: new files renamed over the old ones.
    std::filesystem::copy_file(c, cert + ".tmp", std::filesystem::copy_options::overwrite_existing);
    std::filesystem::copy_file(k, key + ".tmp", std::filesystem::copy_options::overwrite_existing);
    std::filesystem::rename(cert + ".tmp", cert);
    std::filesystem::rename(key + ".tmp", key);
  };
  install(before.server_cert, before.server_key);
  WebhookHttpsServer server(WebhookOptions{});
  auto port = server.Bind("127.0.0.1", 0, cert, key);
  ASSERT_TRUE(port.ok()) << port.status().message();
  std::thread serving([&] { server.Serve(); });
  auto healthy_for = [&](const std::string& ca) {
    httplib::SSLClient client("127.0.0.1", *port);
    client.set_ca_cert_path(ca.c_str());
    client.enable_server_certificate_verification(true);
    auto res = client.Get("/healthz");
    return res && res->status == 200;
  };
  EXPECT_TRUE(healthy_for(before.ca_cert));
  EXPECT_FALSE(healthy_for(after.ca_cert));

  install(after.server_cert, after.server_key);
  EXPECT_TRUE(
      WaitUntil([&] { return healthy_for(after.ca_cert); }, std::chrono::seconds(4), std::chrono::milliseconds(100)))
      << "the renewed certificate was not served within 4 s";
  EXPECT_FALSE(healthy_for(before.ca_cert));

  // A half-written renewal (the old CA's certificate with the new key) is not taken.
  // The server looks at its files at a handshake at most once a second: a sleep past that
  // second, not a wait for an event, makes the next handshake look at the changed pair.
  install(before.server_cert, after.server_key);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  EXPECT_TRUE(healthy_for(after.ca_cert));
  server.Stop();
  serving.join();
}

}  // namespace gs::scheduler
