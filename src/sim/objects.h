// In-process objects of the simulated CUDA driver: contexts, streams, events, modules,
// functions, graphs, memory pools, VMM handles and arrays, plus the registry of device
// pointers. CUDA handles given to programs are pointers to these objects.
//
// Threading: the registry and object lists are guarded by Registry::mu; a Stream's
// timeline by its own mutex. Nothing here is shared between processes (that is State).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/platform/cuda_api.h"

namespace gs::sim {

struct Context;

struct Stream {
  Context* ctx = nullptr;
  unsigned flags = 0;
  int priority = 0;
  std::mutex mu;
  // Work marks on the device timeline (src/sim/timeline.h): the stream's work is done
  // when the process's executed work reaches tail.
  int64_t tail = 0;
  // Real drivers block a launch when about a thousand are pending on a stream.
  static constexpr int kMaxPending = 1024;
  int64_t pending[kMaxPending] = {};  // marks of the last launches
  uint64_t launches = 0;
  struct Graph* capture = nullptr;  // non-null while capturing
};

struct Module;

struct Context {
  int device = 0;   // state index
  int ordinal = 0;  // CUdevice
  unsigned flags = 0;
  bool primary = false;
  int refcount = 0;
  Stream null_stream;
  std::mutex mu;
  int64_t tail = 0;  // mark of everything queued in this context
  // Guarded by mu: the context's limits (cuCtxSetLimit; set to the defaults when it is
  // created), the device memory its stack reservation costs and its loaded modules,
  // whose .global memory it holds.
  size_t limits[CU_LIMIT_MAX] = {};
  uint64_t stack_bytes = 0;
  std::vector<Module*> modules;
  // A green context's (cuGreenCtxCreate): the green context and the SMs it was given; null
  // and 0 for any other context.
  struct GreenContext* green = nullptr;
  unsigned green_sms = 0;
};

// cuGreenCtxCreate: a context of its own (what cuCtxFromGreenCtx returns) with a share of
// the device's SMs; it holds a reference to the device's primary context while it lives.
struct GreenContext {
  Context ctx;
  unsigned long long id = 0;
};

// A resource descriptor (cuDevResourceGenerateDesc): the SMs of one device.
struct ResourceDesc {
  int ordinal = 0;
  unsigned sms = 0;
};

// cuMulticastCreate. Bindings keep the physical memory they bind alive, as mappings do.
struct MulticastObject {
  unsigned num_devices = 0;
  size_t size = 0;
  std::vector<int> devices;  // ordinals added (cuMulticastAddDevice)
  struct Binding {
    int ordinal;
    size_t offset, size;
    struct PhysicalMemory* phys;
  };
  std::vector<Binding> bindings;
};

struct CudaEvent {
  unsigned flags = 0;
  bool recorded = false;
  int device = 0;
  int64_t mark = 0;         // the work before it on its stream
  int64_t recorded_at = 0;  // it completes no earlier than when it was recorded
};

enum class KernelKind { kGeneric, kSpin };

// What the deprecated launch entry points (cuLaunch, cuLaunchGrid, cuLaunchGridAsync)
// launch with: the block shape, dynamic shared memory and parameter buffer set on the
// function by cuFuncSetBlockShape, cuFuncSetSharedSize and cuParamSet*.
struct LegacyLaunchState {
  // The parameter space the deprecated API addresses (cuParamSetSize's largest size).
  static constexpr unsigned kMaxParamBytes = 4096;
  unsigned block[3] = {};  // 0 until cuFuncSetBlockShape: a launch is then refused
  unsigned shared_bytes = 0;
  unsigned param_bytes = 0;
  alignas(8) unsigned char params[kMaxParamBytes] = {};
};

struct Function {
  std::string name;
  KernelKind kind = KernelKind::kGeneric;
  struct Module* module = nullptr;
  uint64_t code_bytes = 0;  // its machine code on the card once loaded (src/sim/cuda_module.cc)
  // Whether its code is on the card: at load with CUDA_MODULE_LOADING=EAGER, else when
  // first resolved or launched (lazy loading). Set under Driver::mu, read by launches.
  std::atomic<bool> loaded{false};
  // Made by the first cuFuncSetBlockShape / cuFuncSetSharedSize / cuParamSet* call;
  // guarded by legacy_mu.
  std::mutex legacy_mu;
  std::unique_ptr<LegacyLaunchState> legacy;
};

struct Module {
  Context* ctx = nullptr;     // nullptr once its context was destroyed or reset
  uint64_t global_bytes = 0;  // device memory its .global variables hold (charged)
  // Guarded by Driver::mu: the code of its loaded kernels, and what the card was charged
  // for it (whole 2 MiB pages).
  uint64_t code_bytes = 0, code_charged = 0;
  std::vector<std::unique_ptr<Function>> functions;
};

struct GraphNode {
  enum class Type { kEmpty, kKernel, kMemAlloc, kMemFree, kMemcpy, kMemset } type = Type::kEmpty;
  Function* fn = nullptr;
  uint64_t blocks = 0, threads = 0;
  int64_t spin_ns = 0;
  CUdeviceptr ptr = 0;
  CUdeviceptr src = 0;
  size_t bytes = 0;            // kMemset: elements per row
  size_t rows = 1, pitch = 0;  // kMemset
  uint32_t value = 0;
  unsigned elem = 1;
};

// A graph's allocation nodes name addresses reserved when the nodes are made; the memory
// behind them comes from the card at a launch and goes back to the device's graph memory
// pool when freed (Allocation, kind kGraph). The graph object lives until it and every
// executable graph made from it are destroyed; an address whose memory is still allocated
// then stays valid until it is freed (docs/simulator.md).
struct Graph {
  int device = -1;
  std::vector<std::unique_ptr<GraphNode>> nodes;
  std::vector<CUdeviceptr> owned_allocations;  // the addresses of its allocation nodes
  int execs = 0;                               // executable graphs made from it that exist
  bool destroyed = false;                      // cuGraphDestroy was called while execs > 0
  // Moved into a parent as a child graph node (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE): its
  // nodes and allocations are the parent's, which destroys it; it is not instantiated,
  // destroyed or given memory nodes on its own any more.
  bool moved = false;
  std::vector<Graph*> children;  // the graphs moved into this one
};

struct GraphExec {
  Graph* graph = nullptr;
  std::vector<GraphNode> nodes;
  // CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH: a launch first frees what the
  // previous one left allocated.
  bool auto_free = false;
};

// A stream-ordered memory pool. Memory freed into it stays reserved on the card (the
// process's NVML figure keeps it) until the pool gives it back: at a synchronize, down to
// its release threshold; at cuMemPoolTrimTo, down to the size asked; at cuMemPoolDestroy.
// Allocations take reserved free memory first (docs/simulator.md). A device's graph
// memory pool (Driver::graph_pool) is one too: no release threshold, not trimmed at a
// synchronize, only by cuDeviceGraphMemTrim and with its context.
struct MemPool {
  int device = 0;
  uint64_t release_threshold = 0;
  uint64_t reserved_now = 0, used_now = 0, used_high = 0, reserved_high = 0;
  // Sharing between processes (src/sim/cuda_pool_ipc.cc): the handle types asked for at
  // cuMemPoolCreate (a pool without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is not
  // exported), and the memfd that names the pool to other processes (made at its first
  // export; an imported pool's: the descriptor it was imported from), with its identity.
  // An imported pool allocates nothing: its pointers are imported, one by one.
  CUmemAllocationHandleType handle_types = CU_MEM_HANDLE_TYPE_NONE;
  bool imported = false;
  int fd = -1;
  uint64_t inode = 0, fs_dev = 0;
  // Exported allocations of this pool that were freed here: the node keeps on the card, for
  // this pool, those freed while imported (Node::LeaveShare) until it is destroyed.
  std::vector<std::pair<int, uint64_t>> freed_shares;  // (index, id) in the node's table
};

struct PhysicalMemory {  // cuMemCreate
  int device = -1;       // -1: host location, not charged to a GPU
  size_t size = 0;
  int fd = -1;  // memfd backing, mapped into reserved ranges
  int mappings = 0;
  bool released = false;
  CUmemAllocationProp prop{};
  // Shared with other processes (src/sim/cuda_ipc.cc): its entry in the node's table, and
  // whether this handle was imported (the memory's owner is another handle).
  int share = -1;
  uint64_t share_id = 0;
  bool imported = false;
};

struct ArrayObject {
  int device = 0;
  size_t bytes = 0;
  void* mem = nullptr;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  struct MipmappedArray* parent = nullptr;
};

struct MipmappedArray {
  int device = 0;
  size_t bytes = 0;
  std::vector<std::unique_ptr<ArrayObject>> levels;
};

// kIpc: another process's allocation opened here with cuIpcOpenMemHandle; kPoolImport:
// another process's pool allocation imported here with cuMemPoolImportPointer.
enum class AllocKind { kDevice, kPitch, kManaged, kPool, kGraph, kHost, kHostRegistered, kVmm, kIpc, kPoolImport };

struct Allocation {
  size_t size = 0;
  size_t map_size = 0;  // bytes mmapped (for munmap); 0 for registered host memory
  int device = -1;      // -1 for host kinds
  AllocKind kind = AllocKind::kDevice;
  // The pool it came from. A graph allocation (kGraph) names its device's graph memory
  // pool while a launch has allocated it and it is not freed yet, none otherwise: only
  // then is it on the card.
  MemPool* pool = nullptr;
  // The context it was made in: destroying or resetting that context frees it, as the
  // driver does (cudaDeviceReset hands the whole card back, docs/measurements/h100-driver.md). Null for
  // VMM and registered host memory, which outlive contexts here.
  const void* ctx = nullptr;
  // kGraph: a graph or an executable graph still names this address. Once neither does,
  // the address goes when its memory is freed (at once when it is not allocated).
  bool graph_held = false;
  // Shared with other processes (src/sim/cuda_ipc.cc): exported by cuIpcGetMemHandle or
  // cuMemPoolExportPointer (its bytes then live in a memfd, share_fd), or opened by
  // cuIpcOpenMemHandle (kIpc) or cuMemPoolImportPointer (kPoolImport).
  int share = -1;
  uint64_t share_id = 0;
  int share_fd = -1;
  // kIpc: how many times its context opened the handle (CUDA documents that a second open in
  // the same context returns the same pointer and counts; each cuIpcCloseMemHandle uncounts).
  int opens = 0;
};

}  // namespace gs::sim
