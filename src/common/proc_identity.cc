#include "src/common/proc_identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gs {

namespace {
// Reads the file at path into buf, NUL-terminated; the bytes read, 0 when unreadable.
size_t ReadSmallFile(const char* path, char* buf, size_t size) {
  if (size == 0) return 0;
  buf[0] = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  return static_cast<size_t>(n);
}
}  // namespace

size_t ReadProcFile(pid_t pid, const char* name, char* buf, size_t size) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/%s", static_cast<int>(pid), name);
  return ReadSmallFile(path, buf, size);
}

namespace {
// Field 22 of a /proc/<pid>/stat text; 0 when it is not there.
uint64_t StartTimeOfStat(char* buf) {
  // The command name (field 2) may contain spaces and parentheses: skip past the last ')'.
  char* p = strrchr(buf, ')');
  if (p == nullptr) return 0;
  ++p;
  // Fields after the name start at field 3; start time is field 22.
  int field = 2;
  while (*p && field < 22) {
    if (*p == ' ') {
      ++field;
      while (*p == ' ') ++p;
      continue;
    }
    ++p;
  }
  uint64_t v = 0;
  for (; *p >= '0' && *p <= '9'; ++p) v = v * 10 + static_cast<uint64_t>(*p - '0');
  return v;
}
}  // namespace

uint64_t ProcessStartTime(pid_t pid) {
  char buf[1024];
  if (ReadProcFile(pid, "stat", buf, sizeof(buf)) == 0) return 0;
  return StartTimeOfStat(buf);
}

bool ProcessIsAlive(pid_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  char buf[1024];
  if (ReadProcFile(pid, "stat", buf, sizeof(buf)) == 0) return false;
  uint64_t now = StartTimeOfStat(buf);
  if (now == 0 || now != start_time) return false;
  // Field 3, the state, follows the command name: Z (zombie) or X/x (dead) is the thread
  // group's leader; the process has exited only when no other thread of it is left (a
  // leader that called pthread_exit shows Z while its threads run on).
  const char* name_end = strrchr(buf, ')');
  const bool leader_gone =
      name_end != nullptr && name_end[1] == ' ' && (name_end[2] == 'Z' || name_end[2] == 'X' || name_end[2] == 'x');
  if (!leader_gone) return true;
  char status[4096];
  if (ReadProcFile(pid, "status", status, sizeof(status)) == 0) return false;
  const char* threads = strstr(status, "\nThreads:");
  return threads != nullptr && strtol(threads + 9, nullptr, 10) > 1;
}

namespace {
uint32_t PidNamespaceAt(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 ? static_cast<uint32_t>(st.st_ino) : 0;
}
}  // namespace

uint32_t PidNamespaceOf(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/ns/pid", static_cast<int>(pid));
  return PidNamespaceAt(path);
}

uint32_t OwnPidNamespace() {
  return PidNamespaceAt("/proc/self/ns/pid");
}

namespace {
// A /proc/<pid>/status (`who`: "self" or a pid): its NSpid line's pids, outermost first (at
// most `max` of them kept in `pids`), and its PPid. Returns how many the line has: 0 when
// the file or the line is absent.
int ReadNsPids(const char* who, pid_t* pids, int max, pid_t* parent) {
  char path[64], buf[4096];
  snprintf(path, sizeof(path), "/proc/%s/status", who);
  *parent = 0;
  if (ReadSmallFile(path, buf, sizeof(buf)) == 0) return 0;
  if (const char* line = strstr(buf, "\nPPid:")) *parent = static_cast<pid_t>(strtol(line + 6, nullptr, 10));
  const char* line = strstr(buf, "\nNSpid:");
  if (line == nullptr) return 0;
  int levels = 0;
  for (const char* p = line + 7; *p && *p != '\n';) {
    if (*p < '0' || *p > '9') {
      ++p;
      continue;
    }
    long v = 0;
    for (; *p >= '0' && *p <= '9'; ++p) v = v * 10 + (*p - '0');
    if (levels < max) pids[levels] = static_cast<pid_t>(v);
    ++levels;
  }
  return levels;
}

// The NSpid line's first pid (0 when absent) and how many there are, and the PPid.
pid_t FirstNsPid(const char* who, int* levels, pid_t* parent) {
  pid_t first = 0;
  *levels = ReadNsPids(who, &first, 1, parent);
  return *levels > 0 ? first : 0;
}

// The namespace whose pids /proc shows, for a caller in a namespace below it (`parent`: the
// caller's PPid there): that of the nearest ancestor that lives in it (one NSpid entry). An
// ancestor rather than /proc's pid 1, whose namespace link a process of another user (or a
// container's root, for a node's init) may not read. kUnknownPidNamespace when none can be.
uint32_t AncestorsPidNamespace(pid_t parent) {
  for (int hops = 0; hops < 64 && parent > 0; ++hops) {
    char who[16];
    snprintf(who, sizeof(who), "%d", static_cast<int>(parent));
    int levels = 0;
    pid_t next = 0;
    if (FirstNsPid(who, &levels, &next) == 0) break;
    if (levels == 1) {
      const uint32_t ns = PidNamespaceOf(parent);
      return ns == 0 ? kUnknownPidNamespace : ns;
    }
    parent = next;
  }
  return kUnknownPidNamespace;
}

uint64_t OwnStartTime() {
  char buf[1024];
  return ReadSmallFile("/proc/self/stat", buf, sizeof(buf)) == 0 ? 0 : StartTimeOfStat(buf);
}
}  // namespace

bool OwnProcView(ProcView* out) {
  int levels = 0;
  pid_t parent = 0;
  const pid_t first = FirstNsPid("self", &levels, &parent);
  out->start_time = OwnStartTime();
  if (first <= 0 || out->start_time == 0) {
    *out = ProcView{};
    return false;
  }
  out->pid = first;
  out->pid_namespace = levels == 1 ? OwnPidNamespace() : AncestorsPidNamespace(parent);
  return true;
}

uint32_t ProcPidNamespace() {
  int levels = 0;
  pid_t parent = 0;
  if (FirstNsPid("self", &levels, &parent) <= 0 || levels == 1) return OwnPidNamespace();
  return AncestorsPidNamespace(parent);
}

int ProcessNsPids(pid_t pid, pid_t* pids, int max, pid_t* parent) {
  char who[16];
  snprintf(who, sizeof(who), "%d", static_cast<int>(pid));
  return ReadNsPids(who, pids, max, parent);
}

bool ProcessHasNsPid(pid_t pid, pid_t ns_pid) {
  pid_t pids[kMaxPidNamespaceLevels], parent = 0;
  const int levels = std::min(ProcessNsPids(pid, pids, kMaxPidNamespaceLevels, &parent), kMaxPidNamespaceLevels);
  for (int i = 0; i < levels; ++i)
    if (pids[i] == ns_pid) return true;
  return false;
}

}  // namespace gs
