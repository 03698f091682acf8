#include "src/sim/state.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "src/common/robust_mutex.h"

namespace gs::sim {

void InitState(State* s) {
  memset(static_cast<void*>(s), 0, sizeof(State));
  s->magic = kSimMagic;
  s->abi_major = kSimAbiMajor;
  s->abi_minor = kSimAbiMinor;
  s->size = sizeof(State);
  InitRobustMutex(&s->mutex);
  s->timing = {kDefaultSamplePeriodNs, kDefaultTimesliceNs};
  for (auto& live : s->live) {
    live.lost_at_ns.store(kNever);
    InitTimeline(&live.timeline);
  }
}

State* MapState(const char* path, char* err, size_t err_size) {
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, err_size, "cannot open simulator state %s: %s", path, strerror(errno));
    return nullptr;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(State)) {
    snprintf(err, err_size, "simulator state %s is too short (%lld bytes, want %zu)", path,
             static_cast<long long>(st.st_size), sizeof(State));
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, sizeof(State), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    snprintf(err, err_size, "cannot map simulator state %s: %s", path, strerror(errno));
    return nullptr;
  }
  auto* s = static_cast<State*>(p);
  if (s->magic != kSimMagic || s->abi_major != kSimAbiMajor || s->size != sizeof(State)) {
    snprintf(err, err_size, "%s is not a gpuslice simulator state of this version (magic %llx abi %u size %llu)", path,
             static_cast<unsigned long long>(s->magic), s->abi_major, static_cast<unsigned long long>(s->size));
    munmap(p, sizeof(State));
    return nullptr;
  }
  return s;
}

void LockState(State* s) {
  // The node state's invariants hold between single atomic updates: nothing to repair.
  if (LockRobust(&s->mutex)) MarkConsistent(&s->mutex);
}

void UnlockState(State* s) {
  pthread_mutex_unlock(&s->mutex);
}

int ParsePciBusId(const char* id, unsigned* domain, unsigned* bus, unsigned* device) {
  unsigned* fields[3] = {domain, bus, device};
  const char* p = id;
  for (int i = 0; i < 3; ++i) {
    char* end = nullptr;
    errno = 0;
    unsigned long v = strtoul(p, &end, 16);
    if (end == p || errno != 0 || v > 0xFFFFFFFFul || (i < 2 && *end != ':')) return i;
    *fields[i] = static_cast<unsigned>(v);
    p = end + 1;
  }
  return 3;
}

}  // namespace gs::sim
