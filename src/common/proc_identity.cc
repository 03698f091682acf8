#include "src/common/proc_identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace gs {

size_t ReadProcFile(pid_t pid, const char* name, char* buf, size_t size) {
  if (size == 0) return 0;
  buf[0] = 0;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/%s", static_cast<int>(pid), name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  return static_cast<size_t>(n);
}

uint64_t ProcessStartTime(pid_t pid) {
  char buf[1024];
  if (ReadProcFile(pid, "stat", buf, sizeof(buf)) == 0) return 0;
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

bool ProcessIsAlive(pid_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  uint64_t now = ProcessStartTime(pid);
  return now != 0 && now == start_time;
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

}  // namespace gs
