// Process-wide attachment of a simulated library to its node: locates the state file,
// maps it, claims this process's slot and works out which GPUs the process may see.
//
// Where the state is: $GPUSLICE_SIM_STATE, else <root>/state where <root> is the part of
// this library's own path before "/usr/lib/" (libraries live in <root>/usr/lib/<triplet>/).
// Which GPUs exist for the process: those whose device node <devdir>/nvidia<minor> exists,
// as with a real driver in a container; <devdir> is $GPUSLICE_SIM_DEV_DIR, else <root>/dev
// when the library sits in a simulated root, else /dev. CUDA further applies
// CUDA_VISIBLE_DEVICES (indices or UUID prefixes; parsing stops at the first invalid
// entry, as in CUDA). Thread-safe; initialised once.
#pragma once

#include "src/sim/node.h"

namespace gs::sim {

struct Runtime {
  Node* node = nullptr;
  int nvml_count = 0;
  int nvml_devices[kMaxDevices] = {};  // state index of NVML device i
  int cuda_count = 0;
  int cuda_devices[kMaxDevices] = {};  // state index of CUdevice i
  int64_t realtime_minus_monotonic_ns = 0;
};

// nullptr when no simulated node can be reached; the reason is logged once.
Runtime* GetRuntime();

// libcuda's shutdown at a normal exit: nothing of this process charges, frees or waits on
// the node any more (Node::Depart), and the node daemon frees what it held before the
// process's exit completes (src/sim/registration.h, the goodbye). Only in the process that
// registered, never in a forked child.
void LeaveNode();

// The backing of share (index, id) of another process, handed over by the node daemon
// (src/sim/registration.h, FetchShareBacking): its descriptor, or -1.
int OpenShareBacking(int index, uint64_t id);

// The file every exported memory descriptor is an open of: the node's state file. A card
// hands out every VMM handle's descriptor as an open of /dev/nvidiactl, one inode for all
// (docs/measurements/shared-memory.md), so two exports cannot be told apart by fstat; each
// call opens it anew, one open file description per export. -1 without a node.
int OpenExportFile();
// Whether fd is an open of that file.
bool IsExportFile(int fd);

// Maps a NVML/CUDA-independent UUID string "GPU-..." to a state index, or -1.
int FindDeviceByUuid(const Runtime* rt, const char* uuid);

}  // namespace gs::sim
