#include "src/sim/registration.h"

#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "src/common/fd_passing.h"
#include "src/common/proc_identity.h"

namespace gs::sim {

bool DriverSocketPath(const char* state_path, char* out, size_t out_size) {
  const char* slash = strrchr(state_path, '/');
  int n = slash == nullptr
              ? snprintf(out, out_size, "%s", kDriverSocketName)
              : snprintf(out, out_size, "%.*s/%s", static_cast<int>(slash - state_path), state_path, kDriverSocketName);
  return n > 0 && static_cast<size_t>(n) < out_size;
}

namespace {
// A connection to the daemon that has read its RegistrationReply; -1 with a reason in err.
int ConnectToNode(const char* socket_path, RegistrationReply* reply, char* err, size_t err_size) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (strlen(socket_path) >= sizeof(addr.sun_path)) {
    snprintf(err, err_size, "the node's driver socket path %s is longer than a unix socket allows (%zu bytes)",
             socket_path, sizeof(addr.sun_path) - 1);
    return -1;
  }
  memcpy(addr.sun_path, socket_path, strlen(socket_path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, err_size, "cannot create a unix socket: %s", strerror(errno));
    return -1;
  }
  int rc;
  do rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    snprintf(err, err_size, "cannot reach the simulated node's driver at %s: %s (is the node up? gpuslice sim up)",
             socket_path, strerror(errno));
    close(fd);
    return -1;
  }
  size_t got = 0;
  while (got < sizeof(*reply)) {
    pollfd p{fd, POLLIN, 0};
    rc = poll(&p, 1, 5000);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) {
      snprintf(err, err_size, "the simulated node's driver at %s did not answer within 5 s", socket_path);
      close(fd);
      return -1;
    }
    ssize_t n = read(fd, reinterpret_cast<char*>(reply) + got, sizeof(*reply) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      snprintf(err, err_size, "the simulated node's driver at %s closed the connection (%s)", socket_path,
               n == 0 ? "it refused this process" : strerror(errno));
      close(fd);
      return -1;
    }
    got += static_cast<size_t>(n);
  }
  return fd;
}
}  // namespace

int RegisterWithNode(const char* socket_path, NodeIdentity* id, char* err, size_t err_size) {
  RegistrationReply reply{};
  int fd = ConnectToNode(socket_path, &reply, err, err_size);
  if (fd < 0) return -1;
  if (reply.magic != kRegistrationMagic || reply.version != kRegistrationVersion || reply.host_pid == 0) {
    snprintf(err, err_size, "the simulated node's driver at %s answered %s", socket_path,
             reply.host_pid == 0 && reply.magic == kRegistrationMagic ? "that it cannot identify this process"
                                                                      : "in a protocol this library does not speak");
    close(fd);
    return -1;
  }
  id->pid = static_cast<pid_t>(reply.host_pid);
  id->start_time = reply.start_time;
  id->namespaces = reply.namespaces;
  // The daemon may not open our namespace; we always can.
  const uint32_t own = reply.namespaces.levels;
  if (own > 0 && own < kMaxPidNamespaceLevels && id->namespaces.ns[own - 1] == 0)
    id->namespaces.ns[own - 1] = OwnPidNamespace();
  return fd;
}

namespace {
int FetchShareBackingLocked(const char* socket_path, int index, uint64_t id) {
  RegistrationReply reply{};
  char err[256];
  int fd = ConnectToNode(socket_path, &reply, err, sizeof(err));
  if (fd < 0) return -1;
  BackingRequest request;
  request.index = index;
  request.id = id;
  bool asked = reply.magic == kRegistrationMagic && reply.version == kRegistrationVersion && reply.host_pid != 0 &&
               SendWithDescriptor(fd, &request, sizeof(request), -1);
  pollfd p{fd, POLLIN, 0};
  int ready = 0;
  while (asked && (ready = poll(&p, 1, 5000)) < 0 && errno == EINTR) {
  }
  int backing = -1;
  char answer = 0;
  const bool answered = asked && ready > 0 && ReceiveWithDescriptor(fd, &answer, 1, &backing);
  close(fd);
  if (answered && answer == kBackingOk) return backing;
  if (backing >= 0) close(backing);
  return -1;
}
}  // namespace

int FetchShareBacking(const char* socket_path, int index, uint64_t id) {
  // One request at a time per process: the daemon allows a process few connections.
  static pthread_mutex_t one_at_a_time = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&one_at_a_time);
  const int backing = FetchShareBackingLocked(socket_path, index, id);
  pthread_mutex_unlock(&one_at_a_time);
  return backing;
}

bool SayGoodbye(int fd, int timeout_ms) {
  if (send(fd, &kGoodbye, 1, MSG_NOSIGNAL) != 1) return false;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int rc = poll(&p, 1, timeout_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return false;
    char answer = 0;
    ssize_t n = read(fd, &answer, 1);
    if (n < 0 && errno == EINTR) continue;
    return n == 1 && answer == kGoodbyeDone;
  }
}

}  // namespace gs::sim
