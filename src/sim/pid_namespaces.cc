#include "src/sim/pid_namespaces.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "src/common/proc_identity.h"

namespace gs::sim {
namespace {

uint64_t InodeOf(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// The NSpid line of /proc/<pid>/status, the pid in the reader's namespace first: stores
// the first `max` and returns how many levels there are.
int ReadNsPids(pid_t pid, uint32_t* out, int max) {
  char buf[4096];
  if (ReadProcFile(pid, "status", buf, sizeof(buf)) == 0) return 0;
  const char* line = strstr(buf, "\nNSpid:");
  if (line == nullptr) return 0;
  const char* p = line + 7;
  int levels = 0;
  for (;;) {
    char* end = nullptr;
    unsigned long v = strtoul(p, &end, 10);
    if (end == p || v == 0) break;
    if (levels < max) out[levels] = static_cast<uint32_t>(v);
    ++levels;
    p = end;
    if (*p == '\n' || *p == 0) break;
  }
  return levels;
}

}  // namespace

bool ReadPidNamespaces(pid_t pid, PidNamespaces* out) {
  memset(out, 0, sizeof(*out));
  uint32_t pids[kMaxPidNamespaceLevels];
  const int levels = ReadNsPids(pid, pids, kMaxPidNamespaceLevels);
  if (levels == 0) return false;
  const int kept = levels < kMaxPidNamespaceLevels ? levels : kMaxPidNamespaceLevels;
  out->levels = static_cast<uint32_t>(kept);
  memcpy(out->pid, pids, sizeof(uint32_t) * static_cast<size_t>(kept));
  out->ns[0] = OwnPidNamespace();
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/ns/pid", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  // From the process's own namespace up to the level below the reader's. A process
  // deeper than kMaxPidNamespaceLevels has its outermost levels recorded only.
  for (int level = levels - 1; fd >= 0 && level > 0;) {
    if (level < kMaxPidNamespaceLevels) out->ns[level] = InodeOf(fd);
    int parent = ioctl(fd, NS_GET_PARENT);
    close(fd);
    fd = parent;
    --level;
  }
  if (fd >= 0) close(fd);
  return true;
}

uint32_t PidSeenFrom(const PidNamespaces& of, uint64_t viewer_ns) {
  if (viewer_ns == 0) return 0;
  for (uint32_t level = 0; level < of.levels && level < kMaxPidNamespaceLevels; ++level)
    if (of.ns[level] == viewer_ns) return of.pid[level];
  return 0;
}

}  // namespace gs::sim
