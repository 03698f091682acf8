// Process identity as (pid, start time), never pid alone: a reused PID has a different
// start time, so it can never inherit a dead process's slot or accounting.
//
// Reads /proc/<pid>/stat (field 22, start time in clock ticks since boot). Allocation-free.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace gs {

// Reads /proc/<pid>/<name> into buf, NUL-terminated; returns the bytes read, 0 when the
// file cannot be read or is empty. Allocation-free.
size_t ReadProcFile(pid_t pid, const char* name, char* buf, size_t size);

// 0 if the process does not exist (or /proc is unreadable).
uint64_t ProcessStartTime(pid_t pid);

// True when a process with this pid exists, started at start_time and has not exited: a
// zombie (every thread exited, not yet reaped by its parent) is not alive, its memory and
// descriptors, the GPU's included, are already released; a process whose main thread
// exited while others run on is.
bool ProcessIsAlive(pid_t pid, uint64_t start_time);

// The inode number of the process's PID namespace (/proc/<pid>/ns/pid), which tells two
// processes with the same pid and start time in sibling namespaces apart; 0 when unknown.
// The kernel numbers namespaces with 32-bit inodes. OwnPidNamespace() reads /proc/self,
// which names the caller also when /proc was mounted for another namespace.
uint32_t PidNamespaceOf(pid_t pid);
uint32_t OwnPidNamespace();

// PID namespaces nest at most this deep (the kernel's MAX_PID_NS_LEVEL).
inline constexpr int kMaxPidNamespaceLevels = 32;

// /proc/<pid>/status (a pid of the /proc's namespace): the pids of its NSpid line, outermost
// first (at most `max` kept in `pids`), and its PPid in *parent. Returns how many pids the
// line has: 0 when the file or the line is absent. Allocation-free.
int ProcessNsPids(pid_t pid, pid_t* pids, int max, pid_t* parent);

// True when /proc/<pid> (a pid of the /proc's namespace) is known as ns_pid in its own
// namespace or in any namespace between (its NSpid line).
bool ProcessHasNsPid(pid_t pid, pid_t ns_pid);

// The caller as /proc shows it. /proc may be mounted for an ancestor of the caller's PID
// namespace (a process that unshared one and kept its container's /proc): its pids are then
// not the caller's getpid() world, and every liveness check by /proc must use them. `pid`:
// the first pid of /proc/self/status's NSpid line; `pid_namespace`: the namespace those
// pids belong to (that of the nearest ancestor process living in it),
// kUnknownPidNamespace when it cannot be read;
// `start_time`: /proc/self/stat's. False when /proc/self cannot be read.
struct ProcView {
  pid_t pid = 0;
  uint64_t start_time = 0;
  uint32_t pid_namespace = 0;
};
bool OwnProcView(ProcView* out);
// The PID namespace whose pids the caller's /proc shows (ProcView::pid_namespace).
uint32_t ProcPidNamespace();
// Stands for a namespace that could not be read: no real PID namespace has inode 1, so
// nothing outside the processes that share this /proc judges by it.
inline constexpr uint32_t kUnknownPidNamespace = 1;

}  // namespace gs
