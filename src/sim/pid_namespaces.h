// Which pid a process has in each PID namespace above it, and which of them a given
// process can see: NVML answers in the caller's PID namespace
// (docs/measurements/h200-driver.md, "Pids"). The driver knows every process by its
// identity on the node; a process list asked for from inside a namespace carries each
// process's pid there and leaves out the processes that namespace cannot see.
//
// Injected code (the simulated libraries): libc only, no allocation.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace gs::sim {

// Deeper nesting than this is recorded as its outermost levels only: a process deeper
// than that is not seen from its own namespace (a caller there finds it in no list).
inline constexpr int kMaxPidNamespaceLevels = 8;

// A process's pid at each level of namespaces, from the node's (the daemon's, level 0)
// down to the process's own (levels - 1), and each level's namespace as the inode of its
// /proc/<pid>/ns/pid link. An inode of 0: not known at that level.
struct PidNamespaces {
  uint32_t levels;
  uint32_t pid[kMaxPidNamespaceLevels];
  uint64_t ns[kMaxPidNamespaceLevels];
};
static_assert(sizeof(PidNamespaces) == 4 + 4 * 8 + 4 + 8 * 8);

// The node's side: reads `pid`'s levels from /proc/<pid>/status (NSpid) and the
// namespaces by walking NS_GET_PARENT up from /proc/<pid>/ns/pid; level 0 is the
// reader's own namespace. False when the process cannot be read at all; namespaces the
// reader may not open are left 0.
bool ReadPidNamespaces(pid_t pid, PidNamespaces* out);

// The pid `of` has in namespace `viewer_ns`, or 0 when that namespace cannot see it.
uint32_t PidSeenFrom(const PidNamespaces& of, uint64_t viewer_ns);

}  // namespace gs::sim
