// Processes in containers with their own PID namespace know themselves by a pid the rest
// of the node does not use: NVML reports host pids. The node agent, which sees the host's
// /proc, writes each region slot's host pid, matching (innermost pid from NSpid, start
// time, PID namespace inode): the first processes of two containers are both pid 1 and
// may have started in the same 10 ms tick. The enforcer's compute controller and NVML process filtering rely on it.
// Reads /proc and private copies of the regions (src/host/region_reader.h: a container
// cannot fault or block it); writes only host_pid fields, one pwrite each. Not
// thread-safe (agent loop only).
#pragma once

#include <string>
#include <vector>

namespace gs::node {

// Returns how many slots got a (new) host pid.
int ResolveHostPids(const std::vector<std::string>& region_paths);

// False when this process is not in the initial PID namespace: a node agent in a pod
// without hostPID sees no container's processes, so no host pid is ever resolved, and
// each container's context footprint (measured through NVML by host pid) and compute
// share go unmeasured. (NSpid cannot tell: it is relative to the namespace /proc was
// mounted for, so inside a pod it names one pid. The initial namespace's inode number is
// fixed by the kernel, PROC_PID_INIT_INO.)
bool SeesHostPids();

}  // namespace gs::node
