#include "src/node/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <vector>

namespace gs::node {
namespace {

constexpr size_t kMaxRequest = 8192;
// After the answer, what the client still sends is drained this long at most (inside the
// connection's deadline), so it receives the answer instead of a reset.
constexpr int64_t kLingerNs = 500'000'000;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Waits until fd is ready for `events` or the deadline passes (false).
bool WaitReady(int fd, short events, int64_t deadline_ns) {
  for (;;) {
    int64_t left_ns = deadline_ns - NowNs();
    if (left_ns <= 0) return false;
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, static_cast<int>((left_ns + 999'999) / 1'000'000));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

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

// Sends all of data before the deadline; stops early when the client goes away or reads
// too slowly to take it in time.
void WriteAll(int fd, const std::string& data, int64_t deadline_ns) {
  for (size_t off = 0; off < data.size();) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && WaitReady(fd, POLLOUT, deadline_ns)) continue;
    return;
  }
}

void Respond(int fd, const HttpResponse& r, bool head, int64_t deadline_ns) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + Reason(r.status) +
                    "\r\nContent-Type: " + r.content_type + "\r\nContent-Length: " + std::to_string(r.body.size()) +
                    "\r\nConnection: close\r\n\r\n";
  if (!head) out += r.body;
  WriteAll(fd, out, deadline_ns);
}

// Reads up to the end of the headers; 0 on success, else the status to answer with.
int ReadRequest(int fd, std::string* req, int64_t deadline_ns) {
  char buf[2048];
  for (HttpFraming f; (f = FrameHttpRequest(*req)) != HttpFraming::kComplete;) {
    if (f == HttpFraming::kTooLarge) return 431;
    if (!WaitReady(fd, POLLIN, deadline_ns)) return 408;
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) return 400;
    req->append(buf, static_cast<size_t>(n));
  }
  return 0;
}

// Closing with unread request bytes makes the kernel reset the connection, and the client
// may then lose the answer (a 431 for an oversized request): finish sending, then read
// what is left for a moment (never past the connection's deadline) before closing.
void LingeringClose(int fd, int64_t deadline_ns) {
  shutdown(fd, SHUT_WR);
  int64_t until = std::min(deadline_ns, NowNs() + kLingerNs);
  char buf[4096];
  size_t drained = 0;
  while (drained < (64u << 10) && WaitReady(fd, POLLIN, until)) {
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
  close(fd);
}

// The peer's address without its port; an IPv4 address reached through an IPv6 socket
// (::ffff:a.b.c.d) counts as the IPv4 address.
std::string PeerKey(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&a)->sin_addr, text, sizeof(text));
  } else if (a.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&v6))
      inet_ntop(AF_INET, &v6.s6_addr[12], text, sizeof(text));
    else
      inet_ntop(AF_INET6, &v6, text, sizeof(text));
  }
  return text;
}

}  // namespace

HttpFraming FrameHttpRequest(std::string_view received) {
  if (received.find("\r\n\r\n") != std::string_view::npos) return HttpFraming::kComplete;
  return received.size() > kMaxRequest ? HttpFraming::kTooLarge : HttpFraming::kMore;
}

HttpRequest ParseHttpRequest(std::string_view request) {
  HttpRequest r;
  // Request line: METHOD SP target SP HTTP/1.x
  std::string_view line = request.substr(0, request.find("\r\n"));
  auto sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1 || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
    r.status = 400;
    r.error = "malformed request line\n";
    return r;
  }
  std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  r.head = method == "HEAD";
  if (method != "GET" && !r.head) {
    r.status = 405;
    r.error = "only GET and HEAD\n";
    return r;
  }
  r.path = std::string(target.substr(0, target.find('?')));
  return r;
}

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
    std::string peer;
  };
  std::vector<Worker> workers;
  std::map<std::string, int> per_peer;  // live connections per peer address (this thread only)
  auto reap = [&](bool all) {
    for (auto it = workers.begin(); it != workers.end();) {
      if (all || it->done->load()) {
        it->thread.join();
        if (--per_peer[it->peer] == 0) per_peer.erase(it->peer);
        it = workers.erase(it);
      } else {
        ++it;
      }
    }
  };
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    // While connections are open, wake now and then to reap the finished ones, so their
    // peers' counts go down even when nobody new connects.
    if (poll(p, 2, workers.empty() ? -1 : 100) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents) break;
    reap(false);
    if (!(p[0].revents & POLLIN)) continue;
    sockaddr_storage peer_addr{};
    socklen_t peer_len = sizeof(peer_addr);
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer_addr), &peer_len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    int64_t deadline = NowNs() + static_cast<int64_t>(options_.deadline_ms) * 1'000'000;
    std::string peer = PeerKey(peer_addr);
    if (static_cast<int>(workers.size()) >= options_.max_connections ||
        (per_peer.count(peer) && per_peer[peer] >= options_.max_per_peer)) {
      close(fd);  // busy: the client retries (Prometheus at its next scrape, the kubelet at its next probe)
      continue;
    }
    ++per_peer[peer];
    auto done = std::make_shared<std::atomic<bool>>(false);
    workers.push_back({std::thread([this, fd, done, deadline] {
                         Answer(fd, deadline);
                         LingeringClose(fd, deadline);
                         *done = true;
                       }),
                       done, peer});
  }
  reap(true);
}

void HttpServer::Answer(int fd, int64_t deadline_ns) {
  std::string req;
  if (int status = ReadRequest(fd, &req, deadline_ns); status != 0) {
    if (status != 400)
      Respond(fd, {status, "text/plain; charset=utf-8", std::string(Reason(status)) + "\n"}, false, deadline_ns);
    return;
  }
  HttpRequest r = ParseHttpRequest(req);
  if (r.status != 0) return Respond(fd, {r.status, "text/plain; charset=utf-8", r.error}, false, deadline_ns);
  auto h = handlers_.find(r.path);
  if (h == handlers_.end()) return Respond(fd, {404, "text/plain; charset=utf-8", "not found\n"}, r.head, deadline_ns);
  Respond(fd, h->second(), r.head, deadline_ns);
}

void HttpServer::Stop() {
  if (wake_[1] >= 0) {
    char c = 1;
    (void)!write(wake_[1], &c, 1);
  }
}

}  // namespace gs::node
