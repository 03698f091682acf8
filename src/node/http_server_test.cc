#include "src/node/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace gs::node {
namespace {

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

std::string Exchange(int port, const std::string& request) {
  int fd = Connect(port);
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Handle("/metrics", [] { return HttpResponse{200, "text/plain; version=0.0.4", "gpuslice_up 1\n"}; });
    server_.Handle("/healthz", [] { return HttpResponse{503, "text/plain", "not registered\n"}; });
    auto port = server_.Bind(":0");
    ASSERT_TRUE(port.ok()) << port.status().message();
    port_ = *port;
    thread_ = std::thread([this] { server_.Serve(); });
  }
  void TearDown() override {
    server_.Stop();
    thread_.join();
  }
  HttpServer server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(HttpServerTest, ServesGetAndHeadWithLengthAndClose) {
  std::string r = Exchange(port_, "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4\r\n"), std::string::npos);
  EXPECT_NE(r.find("Content-Length: 14\r\n"), std::string::npos);
  EXPECT_NE(r.find("Connection: close\r\n"), std::string::npos);
  EXPECT_EQ(r.substr(r.size() - 14), "gpuslice_up 1\n");
  std::string h = Exchange(port_, "HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_NE(h.find("Content-Length: 14\r\n"), std::string::npos);
  EXPECT_EQ(h.find("gpuslice_up"), std::string::npos);  // no body for HEAD
  EXPECT_EQ(Exchange(port_, "GET /healthz HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 503 ", 0), 0u);
}

TEST_F(HttpServerTest, RefusesWhatItDoesNotServe) {
  EXPECT_EQ(Exchange(port_, "GET /nope HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 ", 0), 0u);
  EXPECT_EQ(Exchange(port_, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").rfind("HTTP/1.1 405 ", 0), 0u);
  EXPECT_EQ(Exchange(port_, "garbage\r\n\r\n").rfind("HTTP/1.1 400 ", 0), 0u);
  std::string huge = "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n";
  EXPECT_EQ(Exchange(port_, huge).rfind("HTTP/1.1 431 ", 0), 0u);
}

TEST_F(HttpServerTest, ASilentClientDoesNotHoldUpOthers) {
  int silent = Connect(port_);  // connects and never sends a byte
  auto t0 = std::chrono::steady_clock::now();
  std::string r = Exchange(port_, "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK", 0), 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  close(silent);
}

TEST(HttpServer, BadAddressesAreNamed) {
  HttpServer s;
  EXPECT_NE(s.Bind("9396").status().message().find("not host:port"), std::string::npos);
  EXPECT_NE(s.Bind("nohost.invalid:9396").status().message().find("nohost.invalid:9396"), std::string::npos);
}

}  // namespace
}  // namespace gs::node
