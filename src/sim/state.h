// The simulated node's shared state: one file (DIR/state) that every process using the
// simulator maps. It holds the device table written by `gpuslice sim up` and the live
// state the simulated driver keeps: memory in use, the per-GPU execution timeline
// (src/sim/timeline.h), XID events and per-process accounting.
//
// Layout rules: fixed-size, no pointers, only lock-free atomics and robust
// process-shared mutexes; bump kSimAbiMajor on any incompatible change. Writers:
// - allocation paths update atomics without locking (CAS against the capacity);
// - process-slot claim/sweep and event appends hold `mutex`;
// - each GPU's timeline has its own robust mutex.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "src/common/contract.h"
#include "src/sim/pid_namespaces.h"
#include "src/sim/timeline.h"

namespace gs::sim {

inline constexpr uint64_t kSimMagic = 0x31544154534D4953ULL;  // "SIMSTAT1"
inline constexpr uint32_t kSimAbiMajor = 6;                   // 6: a slot holds memory listed under no process
inline constexpr uint32_t kSimAbiMinor = 0;
using contract::kMaxDevices;
inline constexpr int kMaxProcesses = 512;
inline constexpr int kMaxEvents = 128;
inline constexpr int kMaxShared = 256;  // allocations exported to other processes at once
inline constexpr int kMaxSharers = 16;  // processes holding one of them at once
inline constexpr int64_t kNever = INT64_MAX;

// Written once by `sim up`; read-only afterwards.
struct DeviceSpec {
  char name[96];
  char uuid[96];        // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  char pci_bus_id[32];  // "00000000:1A:00.0"
  char serial[32];
  uint32_t pci_device_id;  // (device id << 16) | vendor id 0x10DE
  uint32_t pci_subsystem_id;
  int32_t numa_node;  // -1: none
  uint32_t minor;     // /dev/nvidia<minor>
  uint32_t sm_count;
  uint32_t cc_major, cc_minor;
  uint32_t architecture;  // NVML_DEVICE_ARCH_*
  uint32_t power_limit_w;
  uint32_t sm_clock_mhz, mem_clock_mhz;
  // 1: NVML's memory queries answer NOT_SUPPORTED, as on cards with unified memory
  // (the scenario's memory_info: not_supported); CUDA still reports memory_total.
  uint32_t memory_info_unsupported;
  // 1: CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED (the GPU sits on an NVSwitch); 0: every
  // multicast call answers CUDA_ERROR_NOT_SUPPORTED, as on a PCIe card.
  uint32_t multicast_supported;
  uint64_t memory_total;    // bytes
  uint64_t context_memory;  // bytes a CUDA context costs on this device
};

struct Event {
  int64_t at_ns;  // visible once the clock reaches it (scenario faults are scheduled)
  uint64_t type;  // nvmlEventType* mask
  uint64_t data;  // XID number
};

struct DeviceLive {
  std::atomic<uint64_t> memory_used;  // bytes, all processes, incl. context overhead
  std::atomic<int64_t> lost_at_ns;    // kNever unless the GPU falls off the bus
  std::atomic<uint32_t> event_count;  // events[0, event_count) are valid
  uint32_t reserved;
  Event events[kMaxEvents];
  Timeline timeline;  // kernels of all processes, time-sliced
};

struct ProcessSlot {
  std::atomic<uint32_t> pid;  // 0: free
  uint32_t reserved;
  uint64_t start_time;                        // see common/proc_identity.h
  PidNamespaces namespaces;                   // its pid in each namespace above it; levels 0: unknown
  std::atomic<uint64_t> memory[kMaxDevices];  // bytes this process holds per device
  // Bytes the driver holds on each device for this process's contexts but lists under no
  // process (NVML's process list leaves them out; its device totals count them).
  std::atomic<uint64_t> unlisted[kMaxDevices];
};

// A process holding memory shared between processes: its owner (until it frees it) or an
// importer (until it closes or releases every handle and mapping it made of it).
struct Sharer {
  uint32_t pid;  // 0: free
  uint32_t refs;
  uint64_t start_time;
};

// How an allocation was shared: what the card does once its owner frees it differs
// (src/sim/node_shares.cc).
enum class ShareWay : uint32_t {
  kLegacyIpc = 1,    // cuIpcGetMemHandle
  kDescriptor = 2,   // cuMemExportToShareableHandle of a cuMemCreate handle
  kPoolPointer = 3,  // cuMemPoolExportPointer
};

// Device memory an owner exported, guarded by the state's mutex. It leaves the card once no
// process holds it and no pool keeps it; its bytes are in at most one process's slot
// meanwhile (docs/simulator.md, "Memory shared between processes").
struct SharedMemory {
  uint64_t id;     // 0: free
  int32_t device;  // -1: host memory, on no card
  ShareWay way;
  uint64_t bytes;        // on the card, in the slot of (charged_pid, charged_start)
  uint32_t charged_pid;  // 0: in no slot (its holder had none, or NVML lists it under no one)
  uint32_t owner_fd;     // the owner's descriptor of the backing (importers map it); 0 once freed
  uint64_t charged_start;
  uint64_t inode, fs_dev;  // the backing memfd's identity
  // A pool allocation its owner freed while imported: the owner's pool keeps it on the card
  // until the pool is destroyed or the owner is gone. 0: none.
  uint32_t pool_holder_pid;
  uint32_t unused;
  uint64_t pool_holder_start;
  Sharer sharers[kMaxSharers];
};

struct State {
  uint64_t magic;
  uint32_t abi_major;
  uint32_t abi_minor;
  uint64_t size;            // sizeof(State) of the writer
  int64_t epoch_ns;         // CLOCK_MONOTONIC at `sim up`
  char driver_version[32];  // "580.65.06"
  int32_t cuda_version;     // 13000 = 13.0
  uint32_t device_count;
  TimelineConfig timing;  // NVML sample period and timeslice, from the scenario
  pthread_mutex_t mutex;  // robust, process-shared
  char mutex_pad[64 - (sizeof(pthread_mutex_t) % 64)];
  DeviceSpec spec[kMaxDevices];
  DeviceLive live[kMaxDevices];
  ProcessSlot procs[kMaxProcesses];
  uint64_t last_shared_id;  // guarded by mutex
  SharedMemory shared[kMaxShared];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "state needs lock-free 64-bit atomics");
static_assert(sizeof(std::atomic<uint64_t>) == 8, "atomics must be plain words in shared memory");
static_assert(offsetof(State, magic) == 0);
static_assert(offsetof(State, abi_major) == 8);
static_assert(offsetof(State, size) == 16);

// Initialises a zeroed State in place (mutex, magic, sentinels). Used by `sim up`.
void InitState(State* s);

// Maps an existing state file read-write. Returns nullptr and fills err on a missing,
// short, foreign or incompatible file.
State* MapState(const char* path, char* err, size_t err_size);

// Locks the robust mutex, repairing it if its owner died holding it.
void LockState(State* s);
void UnlockState(State* s);

// Reads the domain, bus and device of a PCI bus id ("00000000:1A:00.0", hexadecimal
// fields); returns how many it read, in order (3 when the id is whole).
int ParsePciBusId(const char* id, unsigned* domain, unsigned* bus, unsigned* device);

}  // namespace gs::sim
