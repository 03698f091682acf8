// A container's region as the host side (the node agent) reads it. The region file is
// writable by the container, so it is evidence, never authority (docs/enforcer.md, "Threat model"):
// ContainerRegion opens only a regular file (no link followed, no FIFO or device opened),
// reads a private copy with pread (never mapped: a container that truncates its file
// cannot fault the reader with SIGBUS), validates every field it hands out (a UUID must be
// NUL-terminated and printable, pids in range, the layout this version's), takes no lock
// (a container can hold or forge the robust mutex and the file lock), and writes only one
// field at a time with pwrite (host pids).
//
// Who uses it: host-pid resolution and the metrics snapshot (src/node). Identity, limits
// and policy never come from here: they come from the agent's own records.
//
// Thread-compatible: one handle per thread. Cost: an open and a ~290 KiB pread per Read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/common/status.h"

namespace gs::host {

struct RegionDevice {
  int index = 0;              // the device's entry in the region (the container's device order)
  std::string uuid;           // "GPU-..." as the container's enforcer wrote it (validated)
  uint64_t memory_limit = 0;  // bytes; 0 = none
  uint64_t memory_used = 0;
  uint64_t spilled = 0;
  uint64_t card_tenant_id = 0;  // the container's tenant on the card region; 0 = none yet
};

struct RegionProcess {
  int slot = 0;
  uint32_t pid = 0;            // inside the container's PID namespace
  uint32_t host_pid = 0;       // as the node sees it; 0 = unknown
  uint64_t start_time = 0;     // clock ticks since boot (the same in every PID namespace)
  uint32_t pid_namespace = 0;  // inode of its PID namespace; 0 = unknown
};

class ContainerRegion {
 public:
  // Opens the region file and reads a first copy. NotFound when there is no file (the
  // container's first process has not made it yet); Unavailable while it is being made;
  // InvalidArgument naming the problem when it is not a region this version reads.
  static StatusOr<ContainerRegion> Open(const std::string& path);
  ContainerRegion(ContainerRegion&& o) noexcept;
  ContainerRegion& operator=(ContainerRegion&& o) noexcept;
  ContainerRegion(const ContainerRegion&) = delete;
  ContainerRegion& operator=(const ContainerRegion&) = delete;
  ~ContainerRegion();

  // Reads a fresh copy (replacing devices() and processes()).
  Status Read();
  // False when writers kept the copy from being one consistent snapshot (the seqlock
  // moved or stayed odd over every attempt): each field is still validated, but fields
  // may come from different moments.
  bool consistent() const { return consistent_; }
  // Fields that failed validation in the last copy (a container writing garbage).
  int rejected() const { return rejected_; }
  const std::vector<RegionDevice>& devices() const { return devices_; }
  const std::vector<RegionProcess>& processes() const { return processes_; }

  // Writes the host pid of the process in `slot`, if the slot still holds `pid` (a new
  // process may have claimed it since the copy): one pwrite of that field alone.
  Status WriteHostPid(int slot, uint32_t pid, uint32_t host_pid);

  // The largest pid Linux hands out (PID_MAX_LIMIT); a larger one is garbage.
  static constexpr uint32_t kMaxPid = 4'194'304;

 private:
  ContainerRegion(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  int fd_ = -1;
  std::string path_;
  bool consistent_ = false;
  int rejected_ = 0;
  std::vector<RegionDevice> devices_;
  std::vector<RegionProcess> processes_;
};

}  // namespace gs::host
