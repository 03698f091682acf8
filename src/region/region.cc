#include "src/region/region.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "src/common/proc_identity.h"
#include "src/common/robust_mutex.h"
#include "src/region/shared_pieces.h"

namespace gs::region {
namespace {

void InitRegion(Region* r) {
  r->magic = kRegionMagic;
  r->abi_major = kRegionAbiMajor;
  r->abi_minor = kRegionAbiMinor;
  r->size = sizeof(Region);
  InitRobustMutex(&r->mutex);
}

void Recompute(Region* r) {
  for (int d = 0; d < kMaxDevices; ++d) {
    uint64_t used = 0, spilled = 0;
    for (const auto& s : r->procs) {
      if (s.pid.load() == 0) continue;
      used += s.memory[d].load();
      spilled += s.spilled[d].load();
    }
    r->devices[d].memory_used.store(used);
    r->devices[d].spilled.store(spilled);
  }
}

Region* Map(const char* path, bool writable, OpenError* error, char* msg, size_t msg_size) {
  *error = OpenError::kNone;
  int fd = writable ? open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666)
                    : open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    *error = OpenError::kIo;
    snprintf(msg, msg_size, "cannot open region %s: %s", path, strerror(errno));
    return nullptr;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *error = OpenError::kForeign;
    snprintf(msg, msg_size, "region %s is not a regular file", path);
    close(fd);
    return nullptr;
  }
  if (writable && st.st_size == 0) {
    // Creating: size it; concurrent creators agree because all write the same zeroes and
    // the initialisation below runs under an flock. Allocated, not sparse: a page of a
    // sparse file that cannot be had later (a full disk or tmpfs) is a SIGBUS in every
    // process that maps the region; here it is an error, once, before anyone maps it.
    if (int err = posix_fallocate(fd, 0, sizeof(Region)); err != 0) {
      *error = OpenError::kIo;
      snprintf(msg, msg_size, "cannot size region %s: %s", path, strerror(err));
      close(fd);
      return nullptr;
    }
    st.st_size = sizeof(Region);
  }
  if (static_cast<size_t>(st.st_size) < sizeof(Region)) {
    *error = OpenError::kTooSmall;
    snprintf(msg, msg_size, "region %s is %lld bytes, expected %zu: not a gpuslice region of this version", path,
             static_cast<long long>(st.st_size), sizeof(Region));
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, sizeof(Region), writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *error = OpenError::kIo;
    snprintf(msg, msg_size, "cannot map region %s: %s", path, strerror(errno));
    close(fd);
    return nullptr;
  }
  auto* r = static_cast<Region*>(p);
  if (writable && r->magic == 0) {
    // flock makes "first process initialises" safe when many start at once.
    flock(fd, LOCK_EX);
    bool zero = r->magic == 0;
    if (zero) {
      for (size_t i = 0; i < sizeof(Region); i += 4096)
        if (reinterpret_cast<const uint8_t*>(r)[i] != 0) zero = false;
      if (zero) InitRegion(r);
    }
    flock(fd, LOCK_UN);
  }
  close(fd);
  if (r->magic != kRegionMagic) {
    *error = OpenError::kForeign;
    snprintf(msg, msg_size, "%s is not a gpuslice region (bad magic %016llx); refusing to use it", path,
             static_cast<unsigned long long>(r->magic));
  } else if (r->abi_major != kRegionAbiMajor || r->size != sizeof(Region)) {
    *error = OpenError::kVersion;
    snprintf(msg, msg_size, "region %s has layout %u.%u (%llu bytes); this enforcer needs %u.x (%zu bytes)", path,
             r->abi_major, r->abi_minor, static_cast<unsigned long long>(r->size), kRegionAbiMajor, sizeof(Region));
  }
  if (*error != OpenError::kNone) {
    munmap(p, sizeof(Region));
    return nullptr;
  }
  return r;
}

}  // namespace

Region* OpenRegion(const char* path, OpenError* error, char* msg, size_t msg_size) {
  return Map(path, true, error, msg, msg_size);
}

Region* OpenRegionReadOnly(const char* path, OpenError* error, char* msg, size_t msg_size) {
  return Map(path, false, error, msg, msg_size);
}

Region* CreatePrivateRegion() {
  void* p = mmap(nullptr, sizeof(Region), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  InitRegion(static_cast<Region*>(p));
  return static_cast<Region*>(p);
}

void CloseRegion(Region* r) {
  if (r) munmap(r, sizeof(Region));
}

void Lock(Region* r) {
  if (LockRobust(&r->mutex)) {
    // The owner died mid-update: slots are the truth, totals are derived.
    Recompute(r);
    if (r->seq.load() & 1) r->seq.fetch_add(1);
    MarkConsistent(&r->mutex);
  }
}

void Unlock(Region* r) {
  pthread_mutex_unlock(&r->mutex);
}

void WriteBegin(Region* r) {
  r->seq.fetch_add(1, std::memory_order_acq_rel);
}
void WriteEnd(Region* r) {
  r->seq.fetch_add(1, std::memory_order_acq_rel);
}

// Frees the slots of processes that are gone. `thorough` also compares start times, which
// catches a pid already reused by another process but reads /proc once per live slot;
// otherwise one kill(pid, 0) per slot tells the processes that are simply gone (the
// common case) — cheap enough for every process to do when it joins, so a container of
// hundreds of processes starting at once does not serialise on /proc reads under the
// mutex. The thorough sweep runs when an allocation would fail and in the node agent.
// A joining process (self, self_start) also frees a slot holding its own pid with another
// start time: that pid is now its own, so the slot's process is gone.
// `judged`: the PID namespace whose pids the caller's /proc shows (ProcPidNamespace()); only
// slots of it (or of none recorded) are judged, each by /proc, or by kill(pid, 0) when that
// is the caller's own namespace. A slot without a start time is judged only by whether its
// pid exists: an identity that cannot be checked is never taken for a dead one.
int SweepDeadLocked(Region* r, uint32_t judged, bool thorough, pid_t self = 0, uint64_t self_start = 0) {
  int swept = 0;
  const bool signals_reach = judged == OwnPidNamespace();
  for (auto& s : r->procs) {
    uint32_t pid = s.pid.load();
    if (pid == 0) continue;
    uint32_t pid_namespace = s.pid_namespace.load();
    if (pid_namespace != 0 && pid_namespace != judged) continue;
    const auto p = static_cast<pid_t>(pid);
    const bool exists = signals_reach ? !(kill(p, 0) != 0 && errno == ESRCH) : ProcessStartTime(p) != 0;
    bool gone = s.start_time == 0                    ? !exists
                : thorough                           ? !ProcessIsAlive(p, s.start_time)
                : pid == static_cast<uint32_t>(self) ? s.start_time != self_start
                                                     : !exists;
    if (!gone) continue;
    WriteBegin(r);
    LeavePiecesLocked(r, &s);
    for (int d = 0; d < kMaxDevices; ++d) {
      r->devices[d].memory_used.fetch_sub(s.memory[d].exchange(0));
      r->devices[d].spilled.fetch_sub(s.spilled[d].exchange(0));
    }
    s.pid.store(0);
    s.host_pid.store(0);
    WriteEnd(r);
    ++swept;
  }
  return swept;
}

int SweepDead(Region* r) {
  const uint32_t judged = ProcPidNamespace();
  Lock(r);
  int n = SweepDeadLocked(r, judged, true);
  Unlock(r);
  return n;
}

ProcessSlot* ClaimSlot(Region* r, pid_t pid, uint64_t start_time, uint32_t pid_namespace) {
  Lock(r);
  SweepDeadLocked(r, pid_namespace, false, pid, start_time);
  ProcessSlot* free_slot = nullptr;
  for (int pass = 0; pass < 2 && free_slot == nullptr; ++pass) {
    if (pass == 1 && SweepDeadLocked(r, pid_namespace, true) == 0) break;  // full: look harder for the dead
    for (auto& s : r->procs) {
      uint32_t p = s.pid.load();
      uint32_t ns = s.pid_namespace.load();
      // Two pid 1s of different namespaces may share a start time (10 ms ticks).
      if (p == static_cast<uint32_t>(pid) && s.start_time == start_time && (ns == 0 || ns == pid_namespace)) {
        Unlock(r);
        return &s;
      }
      if (p == 0 && free_slot == nullptr) free_slot = &s;
    }
  }
  if (free_slot) {
    WriteBegin(r);
    free_slot->start_time = start_time;
    for (int d = 0; d < kMaxDevices; ++d) {
      free_slot->memory[d].store(0);
      free_slot->spilled[d].store(0);
    }
    free_slot->host_pid.store(0);
    ClearSlotPiecesLocked(r, free_slot);
    free_slot->pid_namespace.store(pid_namespace);
    free_slot->pid.store(static_cast<uint32_t>(pid));
    WriteEnd(r);
  }
  Unlock(r);
  return free_slot;
}

void ReleaseSlot(Region* r, ProcessSlot* slot) {
  Lock(r);
  WriteBegin(r);
  LeavePiecesLocked(r, slot);
  for (int d = 0; d < kMaxDevices; ++d) {
    r->devices[d].memory_used.fetch_sub(slot->memory[d].exchange(0));
    r->devices[d].spilled.fetch_sub(slot->spilled[d].exchange(0));
  }
  slot->pid.store(0);
  WriteEnd(r);
  Unlock(r);
}

bool Reserve(Region* r, ProcessSlot* slot, int dev, uint64_t bytes, bool spilled, uint64_t limit) {
  if (bytes == 0) return true;  // nothing to charge, even when over a lowered limit
  Device& d = r->devices[dev];
  Lock(r);
  uint64_t used = d.memory_used.load();
  auto fits = [&] { return limit == 0 || (bytes <= limit && used <= limit - bytes); };
  if (!fits() && SweepDeadLocked(r, ProcPidNamespace(), true) > 0)
    used = d.memory_used.load();  // a dead process may hold it
  if (!fits()) {
    Unlock(r);
    return false;
  }
  WriteBegin(r);
  slot->memory[dev].fetch_add(bytes);
  d.memory_used.fetch_add(bytes);
  if (spilled) {
    slot->spilled[dev].fetch_add(bytes);
    uint64_t s = d.spilled.fetch_add(bytes) + bytes;
    if (s > d.spilled_peak.load()) d.spilled_peak.store(s);
  }
  uint64_t now = used + bytes;
  if (now > d.memory_peak.load()) d.memory_peak.store(now);
  WriteEnd(r);
  Unlock(r);
  return true;
}

void Unreserve(Region* r, ProcessSlot* slot, int dev, uint64_t bytes, bool spilled) {
  Device& d = r->devices[dev];
  Lock(r);
  WriteBegin(r);
  // Never below zero: a free of something counted before a limit change still balances.
  uint64_t mine = slot->memory[dev].load();
  uint64_t n = bytes < mine ? bytes : mine;
  slot->memory[dev].fetch_sub(n);
  d.memory_used.fetch_sub(n);
  if (spilled) {
    uint64_t s = slot->spilled[dev].load();
    uint64_t k = bytes < s ? bytes : s;
    slot->spilled[dev].fetch_sub(k);
    d.spilled.fetch_sub(k);
  }
  WriteEnd(r);
  Unlock(r);
}

MemoryView ViewMemory(const Region* r, int dev, uint64_t limit, uint64_t physical_total) {
  const Device& d = r->devices[dev];
  // With oversubscription a limit may exceed the card: the virtual card is that large.
  uint64_t total = limit == 0 ? physical_total : limit;
  uint64_t used = d.memory_used.load();
  if (used > total) used = total;
  return {total, used, total - used};
}

void Snapshot(const Region* r, Region* out) {
  // A writer killed mid-update leaves seq odd until the next locker repairs it: after a
  // bounded number of tries take the copy as it is (totals are re-derived on repair).
  for (int attempt = 0;; ++attempt) {
    uint64_t s1 = r->seq.load(std::memory_order_acquire);
    if ((s1 & 1) && attempt < 1000) continue;
    memcpy(static_cast<void*>(out), r, sizeof(Region));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (r->seq.load(std::memory_order_acquire) == s1 || attempt >= 1000) return;
  }
}

}  // namespace gs::region
