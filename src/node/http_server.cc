#include "src/node/http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace gs::node {
namespace {

constexpr size_t kMaxRequest = 8192;
constexpr int kRequestTimeoutMs = 5000;
constexpr int kMaxConnections = 16;

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

void WriteAll(int fd, const std::string& data) {
  for (size_t off = 0; off < data.size();) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away or stalled past SO_SNDTIMEO
    off += static_cast<size_t>(n);
  }
}

void Respond(int fd, const HttpResponse& r, bool head) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + Reason(r.status) +
                    "\r\nContent-Type: " + r.content_type + "\r\nContent-Length: " + std::to_string(r.body.size()) +
                    "\r\nConnection: close\r\n\r\n";
  if (!head) out += r.body;
  WriteAll(fd, out);
}

// Reads up to the end of the headers; 0 on success, else the status to answer with.
int ReadRequest(int fd, std::string* req) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestTimeoutMs);
  char buf[2048];
  while (req->find("\r\n\r\n") == std::string::npos) {
    if (req->size() > kMaxRequest) return 431;
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) return 408;
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 400;
    req->append(buf, static_cast<size_t>(n));
  }
  return 0;
}

// Closing with unread request bytes makes the kernel reset the connection, and the client
// may then lose the answer (a 431 for an oversized request): finish sending, then read
// what is left for a moment before closing.
void LingeringClose(int fd) {
  shutdown(fd, SHUT_WR);
  char buf[4096];
  size_t drained = 0;
  pollfd p{fd, POLLIN, 0};
  while (drained < (64u << 10) && poll(&p, 1, 200) > 0) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
  close(fd);
}

}  // namespace

HttpServer::~HttpServer() {
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) close(fd);
}

void HttpServer::Handle(const std::string& path, Handler h) {
  handlers_[path] = std::move(h);
}

StatusOr<int> HttpServer::Bind(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("listen address '" + address + "' is not host:port");
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = host.empty() ? AF_INET6 : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) return InvalidArgument("listen address '" + address + "': " + gai_strerror(rc));
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int on = 1, off = 0;
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    // ":port" means every address, IPv4 included.
    if (res->ai_family == AF_INET6 && host.empty()) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
  }
  if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 64) != 0) {
    int e = errno;
    freeaddrinfo(res);
    if (fd >= 0) close(fd);
    return Unavailable("cannot listen on " + address + ": " + strerror(e));
  }
  freeaddrinfo(res);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  int bound_port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                     : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (pipe2(wake_, O_CLOEXEC) != 0) {
    close(fd);
    return Internal(std::string("pipe: ") + strerror(errno));
  }
  listen_fd_ = fd;
  return bound_port;
}

void HttpServer::Serve() {
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Worker> workers;
  auto reap = [&](bool all) {
    for (auto it = workers.begin(); it != workers.end();) {
      if (all || it->done->load()) {
        it->thread.join();
        it = workers.erase(it);
      } else {
        ++it;
      }
    }
  };
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents) break;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    reap(false);
    if (workers.size() >= kMaxConnections) {
      close(fd);  // busy: the client retries (Prometheus at its next scrape)
      continue;
    }
    timeval tv{kRequestTimeoutMs / 1000, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    auto done = std::make_shared<std::atomic<bool>>(false);
    workers.push_back({std::thread([this, fd, done] {
                         Answer(fd);
                         LingeringClose(fd);
                         *done = true;
                       }),
                       done});
  }
  reap(true);
}

void HttpServer::Answer(int fd) {
  std::string req;
  if (int status = ReadRequest(fd, &req); status != 0) {
    if (status != 400) Respond(fd, {status, "text/plain; charset=utf-8", std::string(Reason(status)) + "\n"}, false);
    return;
  }
  // Request line: METHOD SP target SP HTTP/1.x
  std::string line = req.substr(0, req.find("\r\n"));
  auto sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1 || line.compare(sp2 + 1, 5, "HTTP/") != 0)
    return Respond(fd, {400, "text/plain; charset=utf-8", "malformed request line\n"}, false);
  std::string method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  bool head = method == "HEAD";
  if (method != "GET" && !head) return Respond(fd, {405, "text/plain; charset=utf-8", "only GET and HEAD\n"}, false);
  std::string path = target.substr(0, target.find('?'));
  auto h = handlers_.find(path);
  if (h == handlers_.end()) return Respond(fd, {404, "text/plain; charset=utf-8", "not found\n"}, head);
  Respond(fd, h->second(), head);
}

void HttpServer::Stop() {
  if (wake_[1] >= 0) {
    char c = 1;
    (void)!write(wake_[1], &c, 1);
  }
}

}  // namespace gs::node
