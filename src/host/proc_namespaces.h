// What the host's /proc says about a process's namespaces, for the node agent's memory
// watchdog (src/node/memory_watchdog.h), which attributes GPU processes to containers by
// what a process cannot shed:
// - the mount table of its whole mount namespace (ReadNamespaceMounts), seen from the
//   namespace's root. chroot(2) moves a process's root, and with it what its own
//   /proc/<pid>/mountinfo lists (src/host/proc_mounts.h), but not its mount namespace, which
//   still holds the container's mounts;
// - its PID namespace and that namespace's ancestors (ReadPidNamespaces). A process never
//   leaves its PID namespace: one it makes is a child of it, and only its children enter it.
//
// Everything is read from /proc. ReadNamespaceMounts enters the process's mount namespace
// on a short-lived thread of its own (the caller needs CAP_SYS_ADMIN and CAP_SYS_CHROOT; the
// rest of the caller stays where it is) and opens the table through the host's /proc,
// opened before entering: no path of the container's making is ever resolved.
// Thread-safe; no state.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <vector>

#include "src/common/status.h"
#include "src/host/proc_mounts.h"

namespace gs::host {

// The mount table of the mount namespace of process `pid`, from the namespace's root: every
// mount of the namespace, whatever the process's own root. `expected` is the namespace the
// caller read for the process (ProcessMounts::mount_namespace): a table is returned only
// when the process, still the one that started at `start_time`, is in it. Unavailable when
// the process is gone or is no longer in that namespace; FailedPrecondition when the caller
// cannot enter it (no privilege).
StatusOr<std::vector<MountEntry>> ReadNamespaceMounts(pid_t pid, uint64_t start_time, const NamespaceId& expected);

struct PidNamespaces {
  // The process's PID namespace, then its parent and so on, up to (not including) the
  // reader's own PID namespace. Empty for a process in the reader's namespace.
  std::vector<NamespaceId> chain;
  uint32_t ns_pid = 0;      // its pid in its own PID namespace (the last of NSpid)
  uint64_t start_time = 0;  // ProcessStartTime, the same before and after the reads
};

// Reads /proc/<pid>/ns/pid and its ancestors (ioctl NS_GET_PARENT) and NSpid from
// /proc/<pid>/status. Unavailable when any of it cannot be read.
StatusOr<PidNamespaces> ReadPidNamespaces(pid_t pid);

// Every process of the host's /proc by its PID namespace (one pass over /proc, a stat per
// process). A snapshot: a pid in it may have exited or been reused since.
std::map<NamespaceId, std::vector<uint32_t>> IndexPidNamespaces();

// The process's pid in its own PID namespace (the last of NSpid); 0 when unreadable.
uint32_t PidInOwnNamespace(pid_t pid);

}  // namespace gs::host
