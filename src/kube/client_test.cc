// kube::Client against the fake API server (testing/fake_api_server.h) over real HTTP
// and HTTPS.
#include "src/kube/client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "src/kube/testing/fake_api_server.h"
#include "tests/temp_dir.h"
#include "tests/wait_until.h"

namespace gs::kube {
namespace {

using gs::testing::WaitUntil;

using nlohmann::json;
using testing::FakeApiServer;

json Pod(const std::string& name, const std::string& ns = "default") {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"labels", {{"app", "gpu"}}}}},
          {"spec", {{"containers", json::array()}}}};
}

std::unique_ptr<Client> Connect(const FakeApiServer& api, ClientOptions options = {}) {
  ClientConfig c;
  c.server = api.url();
  c.source = "test";
  auto client = Client::Create(c, std::move(options));
  EXPECT_TRUE(client.ok()) << client.status().message();
  return std::move(*client);
}

TEST(ClientTest, GetReturnsTheObjectAndMapsHttpErrorsToCodes) {
  FakeApiServer api;
  api.Put("pods", Pod("a"));
  auto client = Connect(api);
  auto pod = client->Get("/api/v1/namespaces/default/pods/a");
  ASSERT_TRUE(pod.ok()) << pod.status().message();
  EXPECT_EQ((*pod)["metadata"]["uid"], "uid-a");

  auto missing = client->Get("/api/v1/namespaces/default/pods/b");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("GET /api/v1/namespaces/default/pods/b: HTTP 404"), std::string::npos)
      << missing.status().message();
  EXPECT_NE(missing.status().message().find("\"default/b\" not found"), std::string::npos);

  struct {
    int http;
    StatusCode code;
  } cases[] = {
      {409, StatusCode::kAborted},     {410, StatusCode::kOutOfRange},         {500, StatusCode::kUnavailable},
      {429, StatusCode::kUnavailable}, {403, StatusCode::kFailedPrecondition}, {422, StatusCode::kInvalidArgument}};
  for (auto c : cases) {
    api.FailNext(c.http, "the test says " + std::to_string(c.http));
    auto r = client->Get("/api/v1/namespaces/default/pods/a");
    EXPECT_EQ(r.status().code(), c.code) << c.http << " " << r.status().message();
    EXPECT_NE(r.status().message().find("the test says " + std::to_string(c.http)), std::string::npos);
  }
}

TEST(ClientTest, ListsInPagesWithSelectorsEscaped) {
  FakeApiServer api;
  for (const char* n : {"p1", "p2", "p3", "p4", "p5"}) api.Put("pods", Pod(n));
  auto client = Connect(api);
  ListOptions o;
  o.limit = 2;
  o.label_selector = "app=gpu";
  std::vector<std::string> names;
  int pages = 0;
  std::string first_rv;
  do {
    auto page = client->List("/api/v1/pods", o);
    ASSERT_TRUE(page.ok()) << page.status().message();
    ++pages;
    for (auto& item : (*page)["items"]) names.push_back(item["metadata"]["name"]);
    if (first_rv.empty()) first_rv = (*page)["metadata"]["resourceVersion"];
    o.continue_token = (*page)["metadata"].value("continue", "");
  } while (!o.continue_token.empty());
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(names, (std::vector<std::string>{"p1", "p2", "p3", "p4", "p5"}));
  EXPECT_EQ(first_rv, std::to_string(api.resource_version()));
  auto seen = api.requests();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].params["labelSelector"], "app=gpu");
  EXPECT_EQ(seen[0].params["limit"], "2");
  EXPECT_EQ(seen[1].params.count("continue"), 1u);

  api.Put("pods", Pod("p6"));
  api.Compact();  // the continue token is older than the server's history now
  o.continue_token = seen[1].params["continue"];
  EXPECT_EQ(client->List("/api/v1/pods", o).status().code(), StatusCode::kOutOfRange);
}

TEST(ClientTest, WatchDeliversEventsWrittenInPiecesAsTheyArrive) {
  FakeApiServer api;
  api.SetSplitWatchEvents(true);
  auto client = Connect(api);
  std::string from = std::to_string(api.resource_version());
  std::vector<std::string> events;
  std::mutex mu;
  std::stop_source stop;
  Status result;
  std::thread watcher([&] {
    WatchOptions w;
    w.resource_version = from;
    result = client->Watch(
        "/api/v1/namespaces/default/pods", w,
        [&](std::string_view type, const json& object) {
          std::lock_guard<std::mutex> lock(mu);
          events.push_back(std::string(type) + " " + object["metadata"]["name"].get<std::string>());
          return Status::Ok();
        },
        stop.get_token());
  });
  api.Put("pods", Pod("a"));
  api.Put("pods", Pod("b", "other"));  // another namespace: not in this watch
  json a = Pod("a");
  a["metadata"]["labels"]["x"] = "y";
  api.Put("pods", a);
  api.Delete("pods", "default", "a");
  WaitUntil([&] {
    std::lock_guard<std::mutex> lock(mu);
    return events.size() >= 3;
  });
  auto asked = std::chrono::steady_clock::now();
  stop.request_stop();
  watcher.join();
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(3));
  EXPECT_TRUE(result.ok()) << result.message();
  EXPECT_EQ(events, (std::vector<std::string>{"ADDED a", "MODIFIED a", "DELETED a"}));
  auto seen = api.requests();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0].params["watch"], "true");
  EXPECT_EQ(seen[0].params["resourceVersion"], from);
  EXPECT_EQ(seen[0].params["allowWatchBookmarks"], "true");
}

TEST(ClientTest, WatchFromACompactedVersionEndsWithOutOfRange) {
  FakeApiServer api;
  api.Put("nodes", {{"metadata", {{"name", "n1"}}}});
  std::string old = std::to_string(api.resource_version() - 1);
  api.Compact();
  auto client = Connect(api);
  int events = 0;
  WatchOptions w;
  w.resource_version = old;
  Status s = client->Watch("/api/v1/nodes", w, [&](std::string_view, const json&) {
    ++events;
    return Status::Ok();
  });
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.message();
  EXPECT_NE(s.message().find("too old resource version"), std::string::npos);
  EXPECT_EQ(events, 0);
}

TEST(ClientTest, WatchEndsWithTheHandlersError) {
  FakeApiServer api;
  api.Put("nodes", {{"metadata", {{"name", "n1"}}}});
  auto client = Connect(api);
  Status s = client->Watch("/api/v1/nodes", WatchOptions{}, [&](std::string_view type, const json&) {
    return type == "ADDED" ? Internal("handler refused") : Status::Ok();
  });
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "handler refused");
}

TEST(ClientTest, PatchSendsTheContentTypeOfEachKind) {
  FakeApiServer api;
  api.Put("pods", Pod("a"));
  auto client = Connect(api);
  const std::string path = "/api/v1/namespaces/default/pods/a";
  auto merged = client->Patch(path, R"({"metadata":{"annotations":{"k":"v"}}})", PatchType::kMerge);
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  EXPECT_EQ((*merged)["metadata"]["annotations"]["k"], "v");
  auto strategic = client->Patch(path, R"({"metadata":{"annotations":{"k2":"v2"}}})", PatchType::kStrategicMerge);
  ASSERT_TRUE(strategic.ok()) << strategic.status().message();
  EXPECT_EQ((*strategic)["metadata"]["annotations"]["k"], "v");
  EXPECT_EQ((*strategic)["metadata"]["annotations"]["k2"], "v2");
  auto patched = client->Patch(path, R"([{"op":"remove","path":"/metadata/annotations/k"}])", PatchType::kJson);
  ASSERT_TRUE(patched.ok()) << patched.status().message();
  EXPECT_FALSE((*patched)["metadata"]["annotations"].contains("k"));
  auto bad = client->Patch(path, R"([{"op":"remove","path":"/metadata/annotations/none"}])", PatchType::kJson);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  auto seen = api.requests();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].content_type, "application/merge-patch+json");
  EXPECT_EQ(seen[1].content_type, "application/strategic-merge-patch+json");
  EXPECT_EQ(seen[2].content_type, "application/json-patch+json");
  EXPECT_EQ(seen[0].method, "PATCH");
}

TEST(ClientTest, ABindingWithAnotherUidIsAConflict) {
  FakeApiServer api;
  api.Put("pods", Pod("a"));
  auto client = Connect(api);
  json binding = {{"apiVersion", "v1"},
                  {"kind", "Binding"},
                  {"metadata", {{"name", "a"}, {"uid", "uid-old"}}},
                  {"target", {{"kind", "Node"}, {"name", "n1"}}}};
  auto r = client->Post("/api/v1/namespaces/default/pods/a/binding", binding.dump());
  EXPECT_EQ(r.status().code(), StatusCode::kAborted);
  EXPECT_NE(r.status().message().find("HTTP 409 Conflict"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("Precondition failed"), std::string::npos);
  binding["metadata"]["uid"] = "uid-a";
  ASSERT_TRUE(client->Post("/api/v1/namespaces/default/pods/a/binding", binding.dump()).ok());
  EXPECT_EQ((*api.Find("pods", "default", "a"))["spec"]["nodeName"], "n1");
  EXPECT_EQ(api.requests().back().content_type, "application/json");
}

TEST(ClientTest, RereadsTheTokenFileOnEveryRequest) {
  gs::testing::TempDir dir("gs-kube-token");
  std::string token = dir.path() + "/token";
  std::ofstream(token) << "first\n";
  FakeApiServer api;
  api.Put("pods", Pod("a"));
  api.SetRequiredToken("first");
  ClientConfig c;
  c.server = api.url();
  c.token_file = token;
  auto client = Client::Create(c);
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE((*client)->Get("/api/v1/namespaces/default/pods/a").ok());
  EXPECT_EQ(api.requests().back().authorization, "Bearer first");
  std::ofstream(token) << "second\n";  // the kubelet rotated it
  api.SetRequiredToken("second");
  EXPECT_TRUE((*client)->Get("/api/v1/namespaces/default/pods/a").ok());
  api.SetRequiredToken("third");
  auto refused = (*client)->Get("/api/v1/namespaces/default/pods/a");
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("401"), std::string::npos);
}

TEST(ClientTest, AServerThatNeverAnswersRunsIntoTheDeadline) {
  FakeApiServer api;
  api.SetHang(true);
  auto client = Connect(api);
  auto start = std::chrono::steady_clock::now();
  auto r = client->Get("/api/v1/nodes/n1", std::chrono::milliseconds(300));
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("within 300 ms"), std::string::npos) << r.status().message();
  EXPECT_GE(took, std::chrono::milliseconds(290));
  EXPECT_LT(took, std::chrono::seconds(3));
  api.SetHang(false);
}

TEST(ClientTest, ListsAskForCompressionAndWatchesDoNot) {
  FakeApiServer api;
  for (int i = 0; i < 50; ++i) api.Put("pods", Pod("p" + std::to_string(i)));
  auto client = Connect(api);
  auto list = client->List("/api/v1/namespaces/default/pods", {});
  ASSERT_TRUE(list.ok()) << list.status().message();
  EXPECT_EQ((*list)["items"].size(), 50u);  // the fake compresses what gzip is accepted for
  EXPECT_EQ(api.requests().back().accept_encoding, "gzip");
  api.EndWatches();
  std::stop_source stop;
  std::thread watcher([&] {
    WatchOptions w;
    w.resource_version = std::to_string(api.resource_version());
    (void)client->Watch(
        "/api/v1/namespaces/default/pods", w, [](auto, const json&) { return Status::Ok(); }, stop.get_token());
  });
  WaitUntil([&] { return api.CountRequests("GET", "/api/v1/namespaces/default/pods", true) == 1; });
  stop.request_stop();
  watcher.join();
  EXPECT_EQ(api.requests().back().accept_encoding, "identity");  // every event as it is sent
}

TEST(ClientTest, AServerUrlWithAPathPutsItBeforeEveryApiPath) {
  httplib::Server server;  // a cluster behind a proxy's path, e.g. Rancher's
  server.Get("/k8s/clusters/c1/api/v1/nodes/n1", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"metadata":{"name":"n1"}})", "application/json");
  });
  int port = server.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { server.listen_after_bind(); });
  ClientConfig c;
  c.server = "http://127.0.0.1:" + std::to_string(port) + "/k8s/clusters/c1/";
  auto client = Client::Create(c);
  ASSERT_TRUE(client.ok()) << client.status().message();
  auto got = (*client)->Get("/api/v1/nodes/n1");
  client->reset();  // its kept-alive connection would hold the server's stop
  server.stop();
  serving.join();
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ((*got)["metadata"]["name"], "n1");
}

TEST(ClientTest, AClosedPortIsUnavailableAndNamesTheServer) {
  int port = 0;
  {  // a port the kernel handed out and took back: nothing listens there
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
    close(fd);
  }
  ClientConfig c;
  c.server = "http://127.0.0.1:" + std::to_string(port);
  auto got = (*Client::Create(c))->Get("/api/v1/nodes/n1");
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("GET /api/v1/nodes/n1: " + c.server), std::string::npos)
      << got.status().message();
}

TEST(ClientTest, RefusesABadConfig) {
  ClientConfig c;
  EXPECT_EQ(Client::Create(c).status().code(), StatusCode::kInvalidArgument);
  c.server = "127.0.0.1:6443";
  EXPECT_EQ(Client::Create(c).status().code(), StatusCode::kInvalidArgument);
  c.server = "https://127.0.0.1:bad";
  EXPECT_EQ(Client::Create(c).status().code(), StatusCode::kInvalidArgument);
  c.server = "https://127.0.0.1:6443";
  c.ca_file = "/nonexistent/ca.crt";
  auto r = Client::Create(c);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/ca.crt"), std::string::npos);
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new gs::testing::TempDir("gs-kube-tls");
    ok_ = testing::MakeTestCerts(dir_->path(), &certs_);
  }
  static void TearDownTestSuite() { delete dir_; }
  void SetUp() override { ASSERT_TRUE(ok_) << "openssl could not make the test certificates"; }
  static gs::testing::TempDir* dir_;
  static testing::TestCerts certs_;
  static bool ok_;
};
gs::testing::TempDir* TlsTest::dir_ = nullptr;
testing::TestCerts TlsTest::certs_;
bool TlsTest::ok_ = false;

TEST_F(TlsTest, ClientCertificatesFromFilesOrData) {
  FakeApiServer api({certs_.server_cert, certs_.server_key, certs_.ca_cert});
  api.Put("nodes", {{"metadata", {{"name", "n1"}}}});
  ClientConfig files;
  files.server = api.url();
  files.ca_file = certs_.ca_cert;
  files.cert_file = certs_.client_cert;
  files.key_file = certs_.client_key;
  auto a = Client::Create(files);
  ASSERT_TRUE(a.ok());
  auto got = (*a)->Get("/api/v1/nodes/n1");
  EXPECT_TRUE(got.ok()) << got.status().message();

  ClientConfig data;
  data.server = api.url();
  data.ca_data = testing::ReadFileForTest(certs_.ca_cert);
  data.cert_data = testing::ReadFileForTest(certs_.client_cert);
  data.key_data = testing::ReadFileForTest(certs_.client_key);
  auto b = Client::Create(data);
  ASSERT_TRUE(b.ok());
  got = (*b)->Get("/api/v1/nodes/n1");
  EXPECT_TRUE(got.ok()) << got.status().message();

  ClientConfig no_cert = data;  // the server wants a client certificate
  no_cert.cert_data.clear();
  no_cert.key_data.clear();
  EXPECT_EQ((*Client::Create(no_cert))->Get("/api/v1/nodes/n1").status().code(), StatusCode::kUnavailable);
}

TEST_F(TlsTest, TheServerMustBeSignedByTheCaUnlessVerificationIsOff) {
  FakeApiServer api({certs_.server_cert, certs_.server_key, ""});
  api.Put("nodes", {{"metadata", {{"name", "n1"}}}});
  ClientConfig c;
  c.server = api.url();
  c.ca_data = testing::ReadFileForTest(certs_.client_cert);  // not the CA
  auto wrong = (*Client::Create(c))->Get("/api/v1/nodes/n1");
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(wrong.status().message().find("certificate"), std::string::npos) << wrong.status().message();
  c.insecure_skip_tls_verify = true;
  EXPECT_TRUE((*Client::Create(c))->Get("/api/v1/nodes/n1").ok());
}

TEST_F(TlsTest, ACaTheConfigNamesIsTheOnlyOneTrusted) {
  FakeApiServer api({certs_.server_cert, certs_.server_key, ""});
  api.Put("nodes", {{"metadata", {{"name", "n1"}}}});
  // The machine's own roots hold the CA that signed the server ...
  setenv("SSL_CERT_FILE", certs_.ca_cert.c_str(), 1);
  ClientConfig system_roots;
  system_roots.server = api.url();
  auto trusted = (*Client::Create(system_roots))->Get("/api/v1/nodes/n1");
  EXPECT_TRUE(trusted.ok()) << trusted.status().message();
  // ... but a kubeconfig that names another CA trusts that one alone.
  ClientConfig named = system_roots;
  named.ca_data = testing::ReadFileForTest(certs_.client_cert);
  auto refused = (*Client::Create(named))->Get("/api/v1/nodes/n1");
  unsetenv("SSL_CERT_FILE");
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("certificate"), std::string::npos) << refused.status().message();
}

TEST_F(TlsTest, TheServerMustBeNamedInItsCertificate) {
  FakeApiServer api({certs_.server_cert, certs_.server_key, ""});
  api.Put("nodes", {{"metadata", {{"name", "n1"}}}});
  ClientConfig c;
  c.ca_file = certs_.ca_cert;
  c.server = "https://localhost:" + std::to_string(api.port());  // in the certificate
  auto named = (*Client::Create(c))->Get("/api/v1/nodes/n1");
  EXPECT_TRUE(named.ok()) << named.status().message();
  // The same socket by another name the certificate does not hold (127.0.0.1 as IPv6).
  c.server = "https://[::ffff:127.0.0.1]:" + std::to_string(api.port());
  auto unnamed = (*Client::Create(c))->Get("/api/v1/nodes/n1");
  EXPECT_EQ(unnamed.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(unnamed.status().message().find("does not name ::ffff:127.0.0.1"), std::string::npos)
      << unnamed.status().message();
  c.insecure_skip_tls_verify = true;
  EXPECT_TRUE((*Client::Create(c))->Get("/api/v1/nodes/n1").ok());
}

TEST_F(TlsTest, PemThatDoesNotParseIsRefusedWhenTheClientIsMade) {
  ClientConfig c;
  c.server = "https://127.0.0.1:6443";
  c.source = "kubeconfig";
  c.cert_data = "not a certificate";
  c.key_data = testing::ReadFileForTest(certs_.client_key);
  auto bad_cert = Client::Create(c);
  EXPECT_EQ(bad_cert.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_cert.status().message().find("client certificate is not PEM"), std::string::npos)
      << bad_cert.status().message();
  c.cert_data = testing::ReadFileForTest(certs_.server_cert);  // another certificate's key
  auto mismatch = Client::Create(c);
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("does not belong"), std::string::npos) << mismatch.status().message();
  c.cert_data.clear();
  c.key_data.clear();
  c.ca_data = "garbage";
  auto bad_ca = Client::Create(c);
  EXPECT_EQ(bad_ca.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_ca.status().message().find("no PEM certificate"), std::string::npos) << bad_ca.status().message();
}

}  // namespace
}  // namespace gs::kube
