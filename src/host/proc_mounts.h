// What the host's /proc says about a process's mounts, for the node agent's memory
// watchdog (src/node/memory_watchdog.h): which container a GPU process belongs to, by a
// fact the container cannot forge. Every container the agent allocates has its own
// `shared/` tmpfs mounted at the region directory (model::EditOptions::region_container_dir);
// a tmpfs's device number is unique per mount, so a process whose mount table shows that
// device at that mount point has the container's mount. A process in the host's mount
// namespace sees the tmpfs at its host path (no match); one in the agent's own mount
// namespace is never attributed (ProcessMounts::same_namespace_as_reader).
//
// A process's own mount table is relative to its root: after chroot(2) it lists only the
// mounts under the new root. The table of its whole mount namespace, which chroot cannot
// change, is read by ReadNamespaceMounts (src/host/proc_namespaces.h).
//
// ParseMountinfo is pure and total over any text (fuzzed: fuzz/mountinfo_fuzzer.cc);
// ReadProcessMounts reads /proc. Thread-compatible; no state.
#pragma once

#include <sys/types.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/common/status.h"

namespace gs::host {

struct MountEntry {
  uint32_t id = 0;                // the mount's id (mountinfo field 1)
  uint32_t major = 0, minor = 0;  // of the mounted file system (mountinfo field 3)
  std::string mount_point;        // as the process sees it, octal escapes (\040 ...) decoded
  std::string fs_type;            // after the " - " separator
  // Propagation ("shared:N", "master:N"; 0 = none): a mount made under a mount of peer
  // group N appears under every mount of that group and every mount whose master is N.
  uint32_t peer_group = 0, master = 0;
};

// The well-formed lines of /proc/<pid>/mountinfo text (proc(5)); a malformed line is
// skipped, never guessed at.
std::vector<MountEntry> ParseMountinfo(std::string_view text);

// The devices (major, minor) mounted at `mount_point` in `entries`, in mount order (a later
// mount over the same point hides an earlier one, but both are the process's mounts).
std::vector<std::pair<uint32_t, uint32_t>> DevicesMountedAt(const std::vector<MountEntry>& entries,
                                                            std::string_view mount_point);

// The id of the mount that holds `path`, as this process sees it (/proc/self/fdinfo's
// mnt_id of the path opened): the mountinfo entry of that id is the mount, whatever is
// stacked over its parents.
StatusOr<uint32_t> MountIdOf(const std::string& path);

// A namespace as the kernel names it: the device and inode of /proc/<pid>/ns/<kind>. Equal
// ids are one namespace while a process in it lives (the kernel reuses the inode number
// of a namespace only after the namespace is gone).
struct NamespaceId {
  uint64_t dev = 0, ino = 0;
  auto operator<=>(const NamespaceId&) const = default;  // NOLINT(modernize-use-nullptr): clang-tidy 14 misreads it
};

// The most of one mountinfo text a reader keeps (a process with millions of mounts).
inline constexpr size_t kMaxMountinfoBytes = 16u << 20;

struct ProcessMounts {
  std::vector<MountEntry> entries;  // its own view: the mounts under its root
  NamespaceId mount_namespace;
  uint64_t start_time = 0;               // ProcessStartTime, the same before and after the reads
  bool same_namespace_as_reader = true;  // /proc/<pid>/ns/mnt is the caller's own
};

// Reads /proc/<pid>/mountinfo and the process's mount namespace (against
// /proc/self/ns/mnt). Unavailable when any of it cannot be read (the process is gone, or
// /proc is not the host's): the caller then knows nothing about the process.
StatusOr<ProcessMounts> ReadProcessMounts(pid_t pid);

}  // namespace gs::host
