// The host side of a simulated node: the part of the kernel driver that knows processes.
// `gpuslice sim up` starts it in the background; it
// - answers each process that registers (src/sim/registration.h) with its pid as the
//   daemon's PID namespace sees it and its start time, so that the simulated libraries key
//   everything per-process by the node's pids, as the real driver does, from any container;
// - frees what a process held (memory, queued GPU work) once its last connection closes,
//   and sweeps processes that died with a connection still open elsewhere (checked by pid
//   and start time in its own /proc);
// - stops when the node's state file is removed or replaced (`sim down`, a deleted root),
//   or on SIGTERM/SIGINT.
// Single-threaded; one instance per node.
#pragma once

#include <cstddef>

namespace gs::sim {

// Serves the node whose state is at `state_path` on `socket_path` until it stops. Writes
// one byte to `ready_fd` (if >= 0) once the socket accepts registrations. Returns 0 on a
// normal stop, 1 with the reason in err when it could not start.
int RunNodeDaemon(const char* state_path, const char* socket_path, int ready_fd, char* err, size_t err_size);

}  // namespace gs::sim
