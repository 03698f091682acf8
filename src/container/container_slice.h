// The per-container directories the OCI hook makes for containers it gives GPUs outside
// Kubernetes (what the node agent's Allocate makes for a pod, docs/node-agent.md):
// <containers_dir>/<container id>/ holding
//   owner    "<pid> <start time>": the container's init process (src/common/proc_identity.h)
//   limits   the read-only limits file (model::LimitsFileText), mounted at /etc/gpuslice/limits
//   shared/  the region directory, mounted read-write at /var/run/gpuslice: a tmpfs of
//            `shared_bytes` and kSharedDirInodes files, nosuid, nodev, noexec, so the
//            container's only writable place on the host cannot fill its disk.
// The limits file is outside the writable directory: no container mount reaches it.
//
// A directory goes when its container goes: the hook as poststop removes it
// (RemoveStoppedContainerSlice), and every hook run reclaims those whose init process is
// gone, by pid and start time (ReclaimContainerSlices), for runtimes that run no poststop
// hook (docker's --gpus route). Nothing here follows a link: the directories are the
// hook's own (root, 0755), under a state directory the operator configures.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "src/common/status.h"

namespace gs::container {

inline constexpr int kSharedDirInodes = 64;
inline constexpr uint64_t kDefaultSharedDirBytes = 4 << 20;

// An OCI container id usable as a directory name: 1-128 of [A-Za-z0-9_.+-], not "." or
// "..", not starting with '.' (runc's own rule, without the dot at the start).
bool UsableContainerId(const std::string& id);

// What goes into a slice's limits file, asked once its directory exists (things handed to
// the container on the host, such as card entries, are owned by that directory).
using LimitsTextFor = std::function<StatusOr<std::string>(const std::string& dir)>;

// Makes <containers_dir>/<id> for the container whose init process is `pid`, with
// `limits_text(dir)` in its limits file and a fresh, mounted `shared/`. A directory left by
// an earlier container of the same id whose process is gone is replaced; one whose process
// still runs is refused. Fails closed (the tmpfs cannot be mounted, the process is gone,
// the limits cannot be made) with nothing left behind. Returns the directory.
StatusOr<std::string> MakeContainerSlice(const std::string& containers_dir, const std::string& id, pid_t pid,
                                         const LimitsTextFor& limits_text, uint64_t shared_bytes);

// Unmounts `shared/` (detached: a container still running keeps its own mount) and
// removes the directory.
void RemoveContainerSlice(const std::string& dir);

// Poststop: removes <containers_dir>/<id> unless its init process still runs.
void RemoveStoppedContainerSlice(const std::string& containers_dir, const std::string& id);

// Removes every directory whose init process is gone (by pid and start time), and those
// without an owner (a hook that died while making it) older than a minute. Returns how
// many were removed.
int ReclaimContainerSlices(const std::string& containers_dir);

}  // namespace gs::container
