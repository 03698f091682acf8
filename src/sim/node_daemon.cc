#include "src/sim/node_daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/fsuid.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/common/clock.h"
#include "src/common/fd_passing.h"
#include "src/common/proc_identity.h"
#include "src/common/raw_log.h"
#include "src/sim/node.h"
#include "src/sim/registration.h"

namespace gs::sim {
namespace {

// A process registers once per simulated library it loads (libcuda and libnvidia-ml):
// more connections than this from one process are refused, so no tenant can exhaust the
// daemon's descriptors.
constexpr int kMaxConnectionsPerProcess = 8;
constexpr size_t kMaxConnections = size_t{4} * kMaxProcesses;
constexpr int kHousekeepingMs = 1000;
// Descriptors the daemon may hold at once: its connections, the descriptor backings it
// keeps (one per share at most) and a few of its own.
constexpr rlim_t kDescriptorsNeeded = kMaxConnections + kMaxShared + 64;

// Raises the soft limit on open files to what the daemon may hold (as far as the hard limit
// allows): with the usual soft limit of 1,024, the connections of about 500 processes
// would use it up before the daemon's own cap on connections refuses any.
void AllowDescriptorsNeeded() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= kDescriptorsNeeded) return;
  limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? kDescriptorsNeeded : std::min(limit.rlim_max, kDescriptorsNeeded);
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) GS_LOG(kWarn, "cannot raise the open-file limit: %s", strerror(errno));
}

using Identity = std::pair<pid_t, uint64_t>;

class Daemon {
 public:
  Daemon(State* state, const char* state_path, ino_t ino, dev_t dev)
      : node_(state, RealClock::Get(), getpid(), 0), state_path_(state_path), ino_(ino), dev_(dev) {}

  int Serve(int listen_fd, int signal_fd);

 private:
  void Accept(int listen_fd, int epoll_fd);
  void Hangup(int fd);
  void Goodbye(int fd);
  // Bytes a connection sent: a connection whose first byte asks for a backing carries
  // BackingRequests (gathered until whole) and nothing else; on any other a goodbye.
  void Received(int fd, const char* bytes, size_t n);
  void ServeBacking(int fd, const BackingRequest& request);
  // The owner's descriptor of the share's backing, through the node's /proc (-1: none);
  // `as_asker`: with the file credentials of the process on connection fd.
  int OpenOwnersBacking(int fd, const ShareInfo& info, bool as_asker) const;
  // Closes the kept backings of shares that are gone.
  void ForgetGoneBackings();
  bool StateStillOurs() const;

  Node node_;
  const char* state_path_;
  ino_t ino_;
  dev_t dev_;
  std::unordered_map<int, Identity> connections_;
  std::unordered_map<int, std::string> requests_;  // backing connections: bytes of a request so far
  std::map<Identity, int> per_process_;
  // (index, id) of a POSIX descriptor's share -> its backing, kept from the first time it
  // was served until the share is gone: importers that come later get it even once the
  // owner freed its memory or exited, as long as some process still holds the share.
  std::map<std::pair<int, uint64_t>, int> backings_;
};

bool Daemon::StateStillOurs() const {
  struct stat st;
  return stat(state_path_, &st) == 0 && st.st_ino == ino_ && st.st_dev == dev_;
}

void Daemon::Accept(int listen_fd, int epoll_fd) {
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN: all taken; anything else: the next event retries
    ucred cred{};
    socklen_t len = sizeof(cred);
    RegistrationReply reply{kRegistrationMagic, kRegistrationVersion, 0, 0, 0, {}};
    // pid 0: the peer is in a PID namespace this daemon's cannot see into from above.
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0)
      reply.start_time = ProcessStartTime(cred.pid);
    Identity id{cred.pid, reply.start_time};
    if (reply.start_time == 0 || connections_.size() >= kMaxConnections ||
        per_process_[id] >= kMaxConnectionsPerProcess) {
      GS_LOG(kWarn, "refused a registration (pid %d as this node sees it)", static_cast<int>(cred.pid));
      if (per_process_[id] == 0) per_process_.erase(id);
      (void)!send(fd, &reply, sizeof(reply), MSG_NOSIGNAL);
      close(fd);
      continue;
    }
    reply.host_pid = static_cast<uint32_t>(cred.pid);
    if (!ReadPidNamespaces(cred.pid, &reply.namespaces)) {
      reply.namespaces = {};
      reply.namespaces.levels = 1;
      reply.namespaces.pid[0] = static_cast<uint32_t>(cred.pid);
      reply.namespaces.ns[0] = OwnPidNamespace();
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    // A fresh socket's buffer always takes the whole reply. A process that connected and
    // exited before this answer (a thread registering as its process ends) gets nothing:
    // MSG_NOSIGNAL, or its EPIPE would kill the driver under every process on the node.
    if (send(fd, &reply, sizeof(reply), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(reply)) ||
        epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      continue;
    }
    connections_[fd] = id;
    ++per_process_[id];
    GS_LOG(kDetail, "process %d registered", static_cast<int>(cred.pid));
  }
}

void Daemon::Hangup(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Identity id = it->second;
  connections_.erase(it);
  requests_.erase(fd);
  close(fd);  // also leaves the epoll set
  if (--per_process_[id] > 0) return;
  per_process_.erase(id);
  // The process closed its last connection: it exited, was killed or exec'd. The driver
  // tears down everything it held.
  if (node_.ForgetProcess(id.first, id.second))
    GS_LOG(kDetail, "process %d is gone: its memory and work are freed", static_cast<int>(id.first));
}

void Daemon::Goodbye(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  const Identity id = it->second;
  // The process is exiting: its driver frees what it held before the exit completes.
  if (node_.ReleaseHoldings(id.first, id.second))
    GS_LOG(kDetail, "process %d said goodbye: its memory and work are freed", static_cast<int>(id.first));
  (void)!send(fd, &kGoodbyeDone, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void Daemon::Received(int fd, const char* bytes, size_t n) {
  auto pending = requests_.find(fd);
  if (pending == requests_.end() && bytes[0] != kBackingRequest) {
    if (memchr(bytes, kGoodbye, n) != nullptr) Goodbye(fd);
    return;
  }
  std::string& request = requests_[fd];
  request.append(bytes, n);
  while (request.size() >= sizeof(BackingRequest)) {
    BackingRequest r;
    memcpy(&r, request.data(), sizeof(r));
    request.erase(0, sizeof(r));
    if (r.kind == kBackingRequest) ServeBacking(fd, r);
  }
}

void Daemon::ServeBacking(int fd, const BackingRequest& request) {
  // Only for a process that holds the share (it joined the share's entry first).
  auto it = connections_.find(fd);
  const bool holds =
      it != connections_.end() &&
      node_.HoldsShare(request.index, request.id, static_cast<uint32_t>(it->second.first), it->second.second);
  int backing = -1;
  ShareInfo info;
  // A POSIX descriptor's importer holds the export itself, which is all a card asks of it:
  // its backing is opened with the daemon's credentials and kept for the importers after
  // it. Legacy IPC and pool pointers are opened from their owner each time, with the
  // asker's credentials.
  const bool known = holds && node_.ShareOf(request.index, request.id, &info);
  const bool keep = known && info.way == ShareWay::kDescriptor;
  const auto key = std::make_pair(request.index, request.id);
  auto kept = keep ? backings_.find(key) : backings_.end();
  if (kept != backings_.end()) {
    backing = fcntl(kept->second, F_DUPFD_CLOEXEC, 0);
  } else if (known) {
    backing = OpenOwnersBacking(fd, info, /*as_asker=*/!keep);
    int copy = keep && backing >= 0 ? fcntl(backing, F_DUPFD_CLOEXEC, 0) : -1;
    if (copy >= 0) backings_[key] = copy;
  }
  const char answer = backing >= 0 ? kBackingOk : kBackingRefused;
  SendWithDescriptor(fd, &answer, 1, backing, /*dont_wait=*/true);
  if (backing >= 0) close(backing);
}

int Daemon::OpenOwnersBacking(int fd, const ShareInfo& info, bool as_asker) const {
  // Reached through this node's /proc: an importer in a PID namespace with a /proc of its
  // own cannot see the owner there. With the asker's file credentials when asked (the
  // kernel checks them as if it opened /proc/<owner>/fd itself), and only a memfd of the
  // simulated driver: the node's state is writable by every process of the node, so its
  // entry may name any descriptor of any process.
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || info.owner_pid == 0 || info.owner_fd <= 0) return -1;
  char path[64], self_path[64], target[64] = {};
  snprintf(path, sizeof(path), "/proc/%u/fd/%d", info.owner_pid, info.owner_fd);
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  if (as_asker) {
    setfsgid(cred.gid);
    setfsuid(cred.uid);
  }
  const int found = open(path, O_PATH | O_CLOEXEC);
  struct stat st;
  int backing = -1;
  snprintf(self_path, sizeof(self_path), "/proc/self/fd/%d", found);
  if (found >= 0 && fstat(found, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 0 &&
      static_cast<uint64_t>(st.st_ino) == info.inode && static_cast<uint64_t>(st.st_dev) == info.fs_dev &&
      readlink(self_path, target, sizeof(target) - 1) > 0 && strncmp(target, kBackingName, strlen(kBackingName)) == 0)
    backing = open(self_path, O_RDWR | O_CLOEXEC);
  if (found >= 0) close(found);
  setfsuid(uid);
  setfsgid(gid);
  return backing;
}

void Daemon::ForgetGoneBackings() {
  ShareInfo info;
  for (auto it = backings_.begin(); it != backings_.end();) {
    if (node_.ShareOf(it->first.first, it->first.second, &info)) {
      ++it;
      continue;
    }
    close(it->second);
    it = backings_.erase(it);
  }
}

int Daemon::Serve(int listen_fd, int signal_fd) {
  int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return 1;
  for (int fd : {listen_fd, signal_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }
  int64_t next_housekeeping = MonotonicNowNs();
  epoll_event events[64];
  for (;;) {
    int n = epoll_wait(epoll_fd, events, 64, kHousekeepingMs);
    if (n < 0 && errno != EINTR) break;
    bool accept = false, stop = false;
    // Hang-ups first: an exec closes the old image's connection before the new image
    // registers, and its teardown must come before the new registration.
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == listen_fd) {
        accept = true;
      } else if (fd == signal_fd) {
        stop = true;
      } else {
        char got_bytes[256];
        ssize_t got = 0;
        if ((events[i].events & EPOLLIN) != 0) got = read(fd, got_bytes, sizeof(got_bytes));
        if (got > 0) Received(fd, got_bytes, static_cast<size_t>(got));
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) Hangup(fd);
      }
    }
    if (stop) break;
    if (accept) Accept(listen_fd, epoll_fd);
    if (MonotonicNowNs() >= next_housekeeping) {
      if (!StateStillOurs()) break;  // sim down, --replace, or the root was deleted
      if (int swept = node_.SweepDeadProcesses(); swept > 0) GS_LOG(kDetail, "swept %d dead process(es)", swept);
      ForgetGoneBackings();
      next_housekeeping = MonotonicNowNs() + kHousekeepingMs * 1'000'000LL;
    }
  }
  for (auto& [fd, id] : connections_) close(fd);
  for (auto& [share, fd] : backings_) close(fd);
  close(epoll_fd);
  return 0;
}

}  // namespace

int RunNodeDaemon(const char* state_path, const char* socket_path, int ready_fd, char* err, size_t err_size) {
  SetRawLogPrefix("gpuslice-sim-daemon");
  AllowDescriptorsNeeded();
  State* state = MapState(state_path, err, err_size);
  if (state == nullptr) return 1;
  struct stat st;
  if (stat(state_path, &st) != 0) {
    snprintf(err, err_size, "cannot stat %s: %s", state_path, strerror(errno));
    return 1;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (strlen(socket_path) >= sizeof(addr.sun_path)) {
    snprintf(err, err_size, "%s: longer than a unix socket path may be (%zu bytes); use a shorter --root", socket_path,
             sizeof(addr.sun_path) - 1);
    return 1;
  }
  memcpy(addr.sun_path, socket_path, strlen(socket_path) + 1);
  int listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  unlink(socket_path);
  if (listen_fd < 0 || bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd, 512) != 0) {
    snprintf(err, err_size, "cannot listen on %s: %s", socket_path, strerror(errno));
    return 1;
  }
  chmod(socket_path, 0666);  // processes of containers running as other users register too
  struct stat bound;
  if (stat(socket_path, &bound) != 0) bound.st_ino = 0;
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  int signal_fd = signalfd(-1, &mask, SFD_CLOEXEC);
  if (signal_fd < 0) {
    snprintf(err, err_size, "signalfd: %s", strerror(errno));
    return 1;
  }
  if (ready_fd >= 0) {
    (void)!write(ready_fd, "1", 1);
    close(ready_fd);
  }
  Daemon daemon(state, state_path, st.st_ino, st.st_dev);
  int rc = daemon.Serve(listen_fd, signal_fd);
  // Remove the socket only if it is still ours (a replacing node may have bound anew).
  struct stat now;
  if (stat(socket_path, &now) == 0 && now.st_ino == bound.st_ino) unlink(socket_path);
  close(listen_fd);
  close(signal_fd);
  return rc;
}

}  // namespace gs::sim
