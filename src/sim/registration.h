// How a process of a simulated node learns who it is to the node: its pid as the node's
// PID namespace sees it, and its start time — what the kernel driver knows every process
// by, whatever PID namespace (container) the process runs in.
//
// The node daemon (src/sim/node_daemon.h, started by `gpuslice sim up`) listens on a unix
// socket beside the state file. A process connects once, at its first cuInit/nvmlInit;
// the daemon reads the peer's pid with SO_PEERCRED (the kernel translates it into the
// daemon's namespace) and answers with that pid, the start time from its own /proc, and
// the peer's pid in every PID namespace between the daemon's and its own.
// The process keeps the connection for its lifetime: when its last connection closes
// (exit, kill -9, exec), the daemon frees what the process held, as the driver does when
// a process's file descriptors on its device nodes close. The daemon learns of a close a
// moment after it, when the process may already be reaped, where the kernel driver frees
// while the process exits; so libcuda says goodbye at a normal exit and waits until the
// daemon has freed what it held (SayGoodbye).
//
// Used by the simulated libraries (injected: libc only, no allocation).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "src/sim/pid_namespaces.h"

namespace gs::sim {

inline constexpr uint32_t kRegistrationMagic = 0x47525347;  // "GSRG"
inline constexpr uint32_t kRegistrationVersion = 4;
// The socket's name, beside the state file (<root>/state, or /var/run/gpuslice-sim/state
// in a container).
inline constexpr const char* kDriverSocketName = "driver.sock";

// What the daemon sends right after accepting a connection.
struct RegistrationReply {
  uint32_t magic;
  uint32_t version;
  uint32_t host_pid;  // 0: the daemon could not identify the peer
  uint32_t reserved;
  uint64_t start_time;       // /proc/<host_pid>/stat field 22, as the daemon read it
  PidNamespaces namespaces;  // the peer's pid in each PID namespace from the daemon's down
};
static_assert(sizeof(RegistrationReply) == 24 + sizeof(PidNamespaces));

struct NodeIdentity {
  pid_t pid = 0;  // as the node sees it
  uint64_t start_time = 0;
  PidNamespaces namespaces{};  // what NVML's answers to and about this process translate by
};

// The goodbye: the process sends kGoodbye on its connection; the daemon frees the memory
// and work the process holds (the slot stays the process's until the connection closes)
// and answers kGoodbyeDone. Any other byte a process sends is ignored.
inline constexpr char kGoodbye = 'B';
inline constexpr char kGoodbyeDone = 'A';

// The backing of memory another process shared (legacy IPC, a pool's exported pointer, a
// POSIX descriptor of cuMemCreate memory):
// the driver maps it for the importer whatever PID namespace and /proc either runs in, as
// the kernel driver does. A process opens a connection of its own (the daemon answers it
// with a RegistrationReply first), sends one BackingRequest and reads one byte, kBackingOk
// with the backing's descriptor (SCM_RIGHTS) or kBackingRefused without one: the share is
// gone, its owner freed it (a descriptor's backing: unless the daemon kept it from an
// earlier import), the asker does not hold it, or its backing is not the memfd recorded.
inline constexpr char kBackingRequest = 'M';
// What the simulated driver names the memfds that back shared memory (memfd_create); the
// daemon hands out no other descriptor.
inline constexpr const char* kBackingName = "/memfd:gpuslice-sim-";
inline constexpr char kBackingOk = 'm';
inline constexpr char kBackingRefused = 'x';
struct BackingRequest {
  char kind = kBackingRequest;
  char reserved[3] = {};
  int32_t index = -1;  // the share's entry in the node's state
  uint64_t id = 0;     // the share's id there (an entry reused since has another)
};
static_assert(sizeof(BackingRequest) == 16);

// Fills `out` with the socket path beside `state_path`. False when it does not fit.
bool DriverSocketPath(const char* state_path, char* out, size_t out_size);

// Connects to the node daemon at `socket_path` and reads this process's identity. Returns
// the connection (close-on-exec; keep it open for the process's lifetime), or -1 with a
// reason in err.
int RegisterWithNode(const char* socket_path, NodeIdentity* id, char* err, size_t err_size);

// Asks the node daemon at `socket_path` for the backing of share (index, id): its
// descriptor (close-on-exec), or -1.
int FetchShareBacking(const char* socket_path, int index, uint64_t id);

// Says goodbye on the connection `fd` and waits up to timeout_ms for the daemon's answer.
// False when none came (the daemon is gone or slow; it frees at the close instead).
bool SayGoodbye(int fd, int timeout_ms);

}  // namespace gs::sim
