// The simulated CUDA driver API: contexts, memory on every allocation path, streams,
// events, modules, launches, graphs. Device pointers are host addresses of lazily backed
// mappings, so copies move real bytes; every device allocation is charged to the shared
// node (src/sim/node.h) so all processes see one card. See docs/simulator.md.
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "src/common/raw_log.h"
#include "src/platform/cuda_array.h"
#include "src/platform/proc_address.h"
#include "src/sim/impl.h"
#include "src/sim/objects.h"
#include "src/sim/ptx.h"
#include "src/sim/runtime.h"

extern "C" __attribute__((visibility("hidden"))) void* const gs_sim_cuda_exports[];

namespace gs::sim {
namespace {

constexpr size_t kVmmGranularity = 2u << 20;
constexpr int kDriverApiVersion = 13000;

struct Driver {
  Runtime* rt = nullptr;
  std::mutex mu;
  std::map<uintptr_t, Allocation> allocations;  // by start address
  std::map<CUmemGenericAllocationHandle, std::unique_ptr<PhysicalMemory>> physical;
  std::map<uintptr_t, std::pair<PhysicalMemory*, size_t>> vmm_maps;  // start -> (phys, size)
  Context primary[kMaxDevices];
  MemPool default_pool[kMaxDevices];
  MemPool* current_pool[kMaxDevices] = {};
};

Driver* g_driver = nullptr;
thread_local std::vector<Context*> t_ctx_stack;
// Set in a child forked after this process initialised CUDA: CUDA is unusable there.
bool g_forked_after_init = false;

Node* node() {
  return g_driver->rt->node;
}
int64_t Now() {
  return node()->clock()->NowNs();
}

#define GS_REQUIRE_INIT()                             \
  do {                                                \
    if (!g_driver) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)

Context* CurrentContext() {
  return t_ctx_stack.empty() ? nullptr : t_ctx_stack.back();
}

bool ValidOrdinal(CUdevice dev) {
  return dev >= 0 && dev < g_driver->rt->cuda_count;
}
int StateIndex(CUdevice dev) {
  return g_driver->rt->cuda_devices[dev];
}
const DeviceSpec& Spec(int state_index) {
  return node()->spec(state_index);
}

// ---- memory helpers -------------------------------------------------------------------

void* MapLazy(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

size_t RoundUp(size_t v, size_t to) {
  return (v + to - 1) / to * to;
}

// Charges `bytes` to device `dev` and maps backing memory; records the allocation.
CUresult AllocateDevice(int dev, size_t bytes, AllocKind kind, MemPool* pool, CUdeviceptr* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (node()->IsLost(dev)) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  if (!node()->Reserve(dev, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t map_size = RoundUp(bytes, 4096);
  void* p = MapLazy(map_size);
  if (p == nullptr) {
    node()->Release(dev, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lock(g_driver->mu);
  g_driver->allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{bytes, map_size, dev, kind, pool};
  if (pool) {
    pool->used_now += bytes;
    pool->reserved_now += bytes;
    pool->used_high = std::max(pool->used_high, pool->used_now);
  }
  *out = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult FreeAllocation(uintptr_t addr, bool host) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(g_driver->mu);
    auto it = g_driver->allocations.find(addr);
    if (it == g_driver->allocations.end()) return CUDA_ERROR_INVALID_VALUE;
    bool is_host = it->second.kind == AllocKind::kHost;
    if (is_host != host || it->second.kind == AllocKind::kHostRegistered || it->second.kind == AllocKind::kVmm)
      return CUDA_ERROR_INVALID_VALUE;
    a = it->second;
    if (a.pool) {
      a.pool->used_now -= a.size;
      a.pool->reserved_now -= a.size;
    }
    g_driver->allocations.erase(it);
  }
  if (a.device >= 0) node()->Release(a.device, a.size);
  if (a.map_size) munmap(reinterpret_cast<void*>(addr), a.map_size);
  return CUDA_SUCCESS;
}

// True when [p, p+n) lies inside one known allocation (device, host or mapped VMM).
bool ValidRange(uintptr_t p, size_t n) {
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->allocations.upper_bound(p);
  if (it == g_driver->allocations.begin()) return false;
  --it;
  size_t extent = it->second.map_size ? it->second.map_size : it->second.size;
  return p >= it->first && p + n <= it->first + std::max(extent, it->second.size);
}

// Host pointers in copies may be any host memory; only device sides are checked.
CUresult CheckDevice(CUdeviceptr p, size_t n) {
  return ValidRange(static_cast<uintptr_t>(p), n) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- streams and time -----------------------------------------------------------------

Stream* ResolveStream(CUstream s) {
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
    Context* ctx = CurrentContext();
    return ctx ? &ctx->null_stream : nullptr;
  }
  return reinterpret_cast<Stream*>(s);
}

bool IsNullStream(const Stream* st) {
  return st == &st->ctx->null_stream;
}

// Queues a kernel of duration_ns on st; blocks while the stream's queue is full. The
// device runs a process's work in launch order, so stream and context order hold.
CUresult EnqueueKernel(Stream* st, int64_t duration_ns) {
  Context* ctx = st->ctx;
  std::lock_guard<std::mutex> lock(st->mu);
  int64_t& oldest = st->pending[st->launches % Stream::kMaxPending];
  node()->WaitWork(ctx->device, oldest);
  int64_t mark = node()->Enqueue(ctx->device, duration_ns);
  if (mark < 0) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;  // more processes than the card serves
  oldest = mark;
  ++st->launches;
  st->tail = mark;
  std::lock_guard<std::mutex> ctx_lock(ctx->mu);
  ctx->tail = std::max(ctx->tail, mark);
  return CUDA_SUCCESS;
}

int64_t StreamTail(Stream* st) {
  std::lock_guard<std::mutex> lock(st->mu);
  return st->tail;
}

int64_t ContextTail(Context* ctx) {
  std::lock_guard<std::mutex> lock(ctx->mu);
  return ctx->tail;
}

// The legacy default stream orders against all work in its context.
int64_t StreamOrderTail(Stream* st) {
  return IsNullStream(st) ? std::max(StreamTail(st), ContextTail(st->ctx)) : StreamTail(st);
}

void WaitStream(Stream* st) {
  node()->WaitWork(st->ctx->device, StreamOrderTail(st));
}

void WaitContext(Context* ctx) {
  node()->WaitWork(ctx->device, ContextTail(ctx));
}

bool EventDone(const CudaEvent* e) {
  return !e->recorded || node()->WorkDone(e->device, e->mark);
}

int64_t EventTime(const CudaEvent* e) {
  return std::max(e->recorded_at, node()->DoneAt(e->device, e->mark));
}

// ---- contexts -------------------------------------------------------------------------

// cuCtxGetLimit's values in a fresh context: the three memory limits' defaults are CUDA's
// documented ones (1 KiB of stack per thread, 1 MiB printf FIFO, 8 MiB malloc heap).
size_t DefaultLimit(int limit) {
  switch (limit) {
    case CU_LIMIT_STACK_SIZE:
      return 1024;
    case CU_LIMIT_PRINTF_FIFO_SIZE:
      return 1u << 20;
    case CU_LIMIT_MALLOC_HEAP_SIZE:
      return 8u << 20;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH:
      return 2;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
      return 2048;
    default:
      return 0;
  }
}

void ResetLimits(Context* c) {
  for (int i = 0; i < CU_LIMIT_MAX; ++i) c->limits[i] = DefaultLimit(i);
}

// The driver reserves device memory in 2 MiB pages (real-gpu-h100.md: a 1 MiB cuMemAlloc
// added 2 MiB to NVML's per-process figure).
constexpr uint64_t kDriverPage = 2u << 20;
// Threads a card holds at once per SM, as cuDeviceGetAttribute reports it.
constexpr uint64_t kMaxThreadsPerSm = 2048;

// What a per-thread stack of `stack` bytes costs beyond the context's own 1 KiB: the
// driver reserves it for every thread the card can hold at once. Measured on the H100
// (real-gpu-h100.md, "What the driver really spends"): raising the stack to 64 KiB added
// 16,632 MiB = (64 - 1) KiB x 132 SMs x 2048 threads. UINT64_MAX when it overflows.
uint64_t StackBytes(int dev, size_t stack) {
  const uint64_t base = DefaultLimit(CU_LIMIT_STACK_SIZE);
  if (stack <= base) return 0;
  uint64_t threads = static_cast<uint64_t>(Spec(dev).sm_count) * kMaxThreadsPerSm;
  uint64_t per_thread = stack - base;
  if (threads && per_thread > (UINT64_MAX - kDriverPage) / threads) return UINT64_MAX;
  return RoundUp(per_thread * threads, kDriverPage);
}

// Gives back what a context holds besides allocations, when it goes away (destroyed,
// last primary reference released, reset): its stack reservation and its modules'
// .global memory; its limits return to the defaults. Called with c->mu held.
void ReleaseContextMemory(Context* c) {
  if (c->stack_bytes) node()->Release(c->device, c->stack_bytes);
  c->stack_bytes = 0;
  ResetLimits(c);
  std::lock_guard<std::mutex> lock(g_driver->mu);
  for (Module* m : c->modules) {
    if (m->global_bytes) node()->Release(c->device, m->global_bytes);
    m->global_bytes = 0;
    m->ctx = nullptr;  // the handle stays, as dead as on a real driver
  }
  c->modules.clear();
}

CUresult ChargeContext(Context* ctx) {
  uint64_t overhead = Spec(ctx->device).context_memory;
  if (overhead && !node()->Reserve(ctx->device, overhead)) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}

void UnchargeContext(Context* ctx) {
  uint64_t overhead = Spec(ctx->device).context_memory;
  if (overhead) node()->Release(ctx->device, overhead);
}

CUresult CreateContext(CUcontext* pctx, unsigned flags, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  auto* ctx = new Context;
  ctx->device = StateIndex(dev);
  ctx->ordinal = dev;
  ctx->flags = flags;
  ctx->refcount = 1;
  ctx->null_stream.ctx = ctx;
  ResetLimits(ctx);
  CUresult rc = ChargeContext(ctx);
  if (rc != CUDA_SUCCESS) {
    delete ctx;
    return rc;
  }
  t_ctx_stack.push_back(ctx);
  *pctx = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace gs::sim

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

// ---- initialisation, versions, errors ---------------------------------------------------

// CUDA is not usable in a child forked after the parent initialised it (NVIDIA documents
// it; real-gpu-h100.md, "Driver behaviour the simulator should share"). The reference
// names no error code: the simulator answers cuInit and every call that needs an
// initialised driver with CUDA_ERROR_NOT_INITIALIZED ("initialization error", what the
// CUDA runtime reports in such a child), the least convenient reading. A child forked
// before cuInit uses CUDA normally, in a process slot of its own (src/sim/runtime.cc).
static void ForgetCudaInForkedChild() {
  if (g_driver == nullptr) return;
  g_driver = nullptr;
  g_forked_after_init = true;
}

GS_SIM_CUDA(cuInit)(unsigned int Flags) {
  if (g_forked_after_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (g_driver) return CUDA_SUCCESS;
  Runtime* rt = GetRuntime();
  if (rt == nullptr) return CUDA_ERROR_NO_DEVICE;
  static Driver driver;
  static std::once_flag once;
  std::call_once(once, [&] {
    driver.rt = rt;
    for (int d = 0; d < kMaxDevices; ++d) {
      driver.primary[d].device = d;
      driver.primary[d].primary = true;
      driver.primary[d].null_stream.ctx = &driver.primary[d];
      ResetLimits(&driver.primary[d]);
      driver.default_pool[d].device = d;
      driver.current_pool[d] = &driver.default_pool[d];
    }
    for (int i = 0; i < rt->cuda_count; ++i) driver.primary[rt->cuda_devices[i]].ordinal = i;
    g_driver = &driver;
    pthread_atfork(nullptr, nullptr, ForgetCudaInForkedChild);
  });
  return rt->cuda_count > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

GS_SIM_CUDA(cuDriverGetVersion)(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Runtime* rt = GetRuntime();
  *driverVersion = rt ? rt->node->state()->cuda_version : kDriverApiVersion;
  return CUDA_SUCCESS;
}

namespace {
struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};
const ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE",
     "CUDA-capable device(s) is/are busy or unavailable"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};
const ErrorText* FindError(CUresult e) {
  for (const auto& t : kErrors)
    if (t.code == e) return &t;
  return nullptr;
}
}  // namespace

GS_SIM_CUDA(cuGetErrorString)(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* t = FindError(error);
  *pStr = t ? t->text : nullptr;
  return t ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GS_SIM_CUDA(cuGetErrorName)(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* t = FindError(error);
  *pStr = t ? t->name : nullptr;
  return t ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GS_SIM_CUDA(cuGetProcAddress_v2)
(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* name = nullptr;
  auto r = gs::platform::ResolveCudaExport(symbol, cudaVersion, flags, &name);
  if (r != gs::platform::ProcLookup::kFound) {
    *pfn = nullptr;
    if (symbolStatus)
      *symbolStatus = r == gs::platform::ProcLookup::kVersionNotSufficient ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                                                           : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = gs_sim_cuda_exports[gs::platform::CudaSymbolIndex(name)];
  if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGetProcAddress)(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return gs_sim_cuda_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
}

// ---- devices ----------------------------------------------------------------------------

GS_SIM_CUDA(cuDeviceGetCount)(int* count) {
  GS_REQUIRE_INIT();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = g_driver->rt->cuda_count;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceGet)(CUdevice* device, int ordinal) {
  GS_REQUIRE_INIT();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceGetName)(char* name, int len, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, static_cast<size_t>(len), "%s", Spec(StateIndex(dev)).name);
  return CUDA_SUCCESS;
}

namespace {
// "GPU-0a1b2c3d-..." -> 16 raw bytes.
void UuidBytes(const char* text, CUuuid* out) {
  memset(out, 0, sizeof(*out));
  const char* p = strncmp(text, "GPU-", 4) == 0 ? text + 4 : text;
  int n = 0;
  auto hex = [](char c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; };
  while (*p && n < 16) {
    if (*p == '-') {
      ++p;
      continue;
    }
    if (!p[1]) break;
    out->bytes[n++] = static_cast<char>(hex(p[0]) << 4 | hex(p[1]));
    p += 2;
  }
}
}  // namespace

GS_SIM_CUDA(cuDeviceGetUuid)(CUuuid* uuid, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  UuidBytes(Spec(StateIndex(dev)).uuid, uuid);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuDeviceGetUuid_v2, cuDeviceGetUuid)

GS_SIM_CUDA(cuDeviceTotalMem_v2)(size_t* bytes, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = Spec(StateIndex(dev)).memory_total;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceComputeCapability)(int* major, int* minor, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *major = static_cast<int>(Spec(StateIndex(dev)).cc_major);
  *minor = static_cast<int>(Spec(StateIndex(dev)).cc_minor);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceGetAttribute)(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  const DeviceSpec& s = Spec(StateIndex(dev));
  unsigned domain = 0, bus = 0, device = 0;
  sscanf(s.pci_bus_id, "%x:%x:%x", &domain, &bus, &device);
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *pi = static_cast<int>(s.sm_count);
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *pi = static_cast<int>(s.cc_major);
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *pi = static_cast<int>(s.cc_minor);
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *pi = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *pi = 2048;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      *pi = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *pi = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      *pi = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      *pi = 64;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      *pi = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *pi = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *pi = 48 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      *pi = 64 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *pi = static_cast<int>(s.sm_clock_mhz) * 1000;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *pi = static_cast<int>(s.mem_clock_mhz) * 1000;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      *pi = static_cast<int>(domain);
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *pi = static_cast<int>(bus);
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      *pi = static_cast<int>(device);
      break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
      *pi = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID:
      *pi = s.numa_node;
      break;
    default:
      *pi = 0;
      break;
  }
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceGetPCIBusId)(char* pciBusId, int len, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  // CUDA's form has a 4-digit domain: "0000:1A:00.0".
  const char* id = Spec(StateIndex(dev)).pci_bus_id;
  size_t n = strlen(id);
  snprintf(pciBusId, static_cast<size_t>(len), "%s", n > 12 ? id + (n - 12) : id);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceGetByPCIBusId)(CUdevice* dev, const char* pciBusId) {
  GS_REQUIRE_INIT();
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < g_driver->rt->cuda_count; ++i) {
    const char* id = Spec(StateIndex(i)).pci_bus_id;
    size_t a = strlen(id), b = strlen(pciBusId);
    if (b <= a && strcasecmp(id + (a - b), pciBusId) == 0) {
      *dev = i;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

GS_SIM_CUDA(cuDeviceCanAccessPeer)(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  GS_REQUIRE_INIT();
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev) || !ValidOrdinal(peerDev)) return CUDA_ERROR_INVALID_DEVICE;
  *canAccessPeer = dev != peerDev;
  return CUDA_SUCCESS;
}

// ---- contexts ---------------------------------------------------------------------------

GS_SIM_CUDA(cuCtxCreate_v2)(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}
GS_SIM_CUDA(cuCtxCreate_v3)(CUcontext* pctx, CUexecAffinityParam*, int, unsigned int flags, CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}
GS_SIM_CUDA(cuCtxCreate_v4)(CUcontext* pctx, CUctxCreateParams*, unsigned int flags, CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}

GS_SIM_CUDA(cuCtxDestroy_v2)(CUcontext ctx) {
  GS_REQUIRE_INIT();
  auto* c = reinterpret_cast<Context*>(ctx);
  if (c == nullptr || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  WaitContext(c);
  t_ctx_stack.erase(std::remove(t_ctx_stack.begin(), t_ctx_stack.end(), c), t_ctx_stack.end());
  {
    std::lock_guard<std::mutex> lock(c->mu);
    ReleaseContextMemory(c);
  }
  UnchargeContext(c);
  delete c;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxGetCurrent)(CUcontext* pctx) {
  GS_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(CurrentContext());
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxSetCurrent)(CUcontext ctx) {
  GS_REQUIRE_INIT();
  if (!t_ctx_stack.empty()) t_ctx_stack.pop_back();
  if (ctx) t_ctx_stack.push_back(reinterpret_cast<Context*>(ctx));
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxPushCurrent_v2)(CUcontext ctx) {
  GS_REQUIRE_INIT();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  t_ctx_stack.push_back(reinterpret_cast<Context*>(ctx));
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxPopCurrent_v2)(CUcontext* pctx) {
  GS_REQUIRE_INIT();
  if (t_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(t_ctx_stack.back());
  t_ctx_stack.pop_back();
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxGetDevice)(CUdevice* device) {
  GS_REQUIRE_INIT();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = c->ordinal;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxGetFlags)(unsigned int* flags) {
  GS_REQUIRE_INIT();
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags) *flags = c->flags;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxGetApiVersion)(CUcontext, unsigned int* version) {
  GS_REQUIRE_INIT();
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 3020;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxSynchronize)(void) {
  GS_REQUIRE_INIT();
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  WaitContext(c);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxGetLimit)(size_t* pvalue, CUlimit limit) {
  GS_REQUIRE_INIT();
  if (pvalue == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(c->mu);
  *pvalue = c->limits[limit];
  return CUDA_SUCCESS;
}

// What the limits cost, as measured on the H100 (real-gpu-h100.md, "What the driver really
// spends"): the stack is reserved at once for every resident thread (StackBytes), refused
// with CUDA_ERROR_OUT_OF_MEMORY when the card has not that much free; the malloc heap and
// the printf FIFO cost nothing until a kernel uses them (1 GiB heap, 256 MiB FIFO: +0 MiB),
// and no simulated kernel does. Lowering the stack gives its memory back (not measured).
GS_SIM_CUDA(cuCtxSetLimit)(CUlimit limit, size_t value) {
  GS_REQUIRE_INIT();
  if (limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  if (limit == CU_LIMIT_SHMEM_SIZE || limit == CU_LIMIT_CIG_ENABLED) return CUDA_ERROR_INVALID_VALUE;  // query only
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(c->mu);
  if (limit == CU_LIMIT_STACK_SIZE) {
    uint64_t want = StackBytes(c->device, value);
    if (want > c->stack_bytes && !node()->Reserve(c->device, want - c->stack_bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (want < c->stack_bytes) node()->Release(c->device, c->stack_bytes - want);
    c->stack_bytes = want;
  }
  c->limits[limit] = value;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDevicePrimaryCtxRetain)(CUcontext* pctx, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Context* c = &g_driver->primary[StateIndex(dev)];
  std::lock_guard<std::mutex> lock(c->mu);
  if (c->refcount == 0) {
    CUresult rc = ChargeContext(c);
    if (rc != CUDA_SUCCESS) return rc;
  }
  ++c->refcount;
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDevicePrimaryCtxRelease_v2)(CUdevice dev) {
  GS_REQUIRE_INIT();
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Context* c = &g_driver->primary[StateIndex(dev)];
  std::lock_guard<std::mutex> lock(c->mu);
  if (c->refcount == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--c->refcount == 0) {
    ReleaseContextMemory(c);
    UnchargeContext(c);
  }
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDevicePrimaryCtxReset_v2)(CUdevice dev) {
  GS_REQUIRE_INIT();
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Context* c = &g_driver->primary[StateIndex(dev)];
  std::lock_guard<std::mutex> lock(c->mu);
  if (c->refcount > 0) {
    ReleaseContextMemory(c);
    UnchargeContext(c);
  }
  c->refcount = 0;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDevicePrimaryCtxGetState)(CUdevice dev, unsigned int* flags, int* active) {
  GS_REQUIRE_INIT();
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Context* c = &g_driver->primary[StateIndex(dev)];
  std::lock_guard<std::mutex> lock(c->mu);
  *flags = c->flags;
  *active = c->refcount > 0;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDevicePrimaryCtxSetFlags_v2)(CUdevice dev, unsigned int flags) {
  GS_REQUIRE_INIT();
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  g_driver->primary[StateIndex(dev)].flags = flags;
  return CUDA_SUCCESS;
}

// ---- memory -------------------------------------------------------------------------------

#define GS_CURRENT_DEVICE(var)                                 \
  Context* var##_ctx = CurrentContext();                       \
  if (var##_ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT; \
  int var = var##_ctx->device

GS_SIM_CUDA(cuMemGetInfo_v2)(size_t* free, size_t* total) {
  GS_REQUIRE_INIT();
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GS_CURRENT_DEVICE(dev);
  *total = Spec(dev).memory_total;
  *free = node()->MemoryFree(dev);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemAlloc_v2)(CUdeviceptr* dptr, size_t bytesize) {
  GS_REQUIRE_INIT();
  GS_CURRENT_DEVICE(dev);
  return AllocateDevice(dev, bytesize, AllocKind::kDevice, nullptr, dptr);
}

GS_SIM_CUDA(cuMemAllocPitch_v2)
(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes) {
  GS_REQUIRE_INIT();
  if (pPitch == nullptr || (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
    return CUDA_ERROR_INVALID_VALUE;
  GS_CURRENT_DEVICE(dev);
  size_t pitch = RoundUp(WidthInBytes, 512);  // the texture pitch alignment of current GPUs
  CUresult rc = AllocateDevice(dev, pitch * Height, AllocKind::kPitch, nullptr, dptr);
  if (rc == CUDA_SUCCESS) *pPitch = pitch;
  return rc;
}

GS_SIM_CUDA(cuMemAllocManaged)(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  GS_REQUIRE_INIT();
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  GS_CURRENT_DEVICE(dev);
  return AllocateDevice(dev, bytesize, AllocKind::kManaged, nullptr, dptr);
}

GS_SIM_CUDA(cuMemFree_v2)(CUdeviceptr dptr) {
  GS_REQUIRE_INIT();
  if (dptr == 0) return CUDA_SUCCESS;
  return FreeAllocation(static_cast<uintptr_t>(dptr), false);
}

GS_SIM_CUDA(cuMemHostAlloc)(void** pp, size_t bytesize, unsigned int) {
  GS_REQUIRE_INIT();
  if (pp == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t map_size = RoundUp(bytesize, 4096);
  void* p = MapLazy(map_size);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  g_driver->allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{bytesize, map_size, -1, AllocKind::kHost, nullptr};
  *pp = p;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemAllocHost_v2)(void** pp, size_t bytesize) {
  return gs_sim_cuda_cuMemHostAlloc(pp, bytesize, 0);
}

GS_SIM_CUDA(cuMemFreeHost)(void* p) {
  GS_REQUIRE_INIT();
  return FreeAllocation(reinterpret_cast<uintptr_t>(p), true);
}

GS_SIM_CUDA(cuMemHostRegister_v2)(void* p, size_t bytesize, unsigned int) {
  GS_REQUIRE_INIT();
  if (p == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  g_driver->allocations[reinterpret_cast<uintptr_t>(p)] =
      Allocation{bytesize, 0, -1, AllocKind::kHostRegistered, nullptr};
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemHostUnregister)(void* p) {
  GS_REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_driver->allocations.end() || it->second.kind != AllocKind::kHostRegistered)
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  g_driver->allocations.erase(it);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemHostGetDevicePointer_v2)(CUdeviceptr* pdptr, void* p, unsigned int) {
  GS_REQUIRE_INIT();
  if (pdptr == nullptr || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: same address
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemGetAddressRange_v2)(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  GS_REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->allocations.upper_bound(static_cast<uintptr_t>(dptr));
  if (it == g_driver->allocations.begin()) return CUDA_ERROR_NOT_FOUND;
  --it;
  if (dptr >= it->first + it->second.size) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = it->first;
  if (psize) *psize = it->second.size;
  return CUDA_SUCCESS;
}

// Copies. Device pointers are host addresses; device sides are checked against the
// registry so a bad pointer is an error, not a crash.
GS_SIM_CUDA(cuMemcpyHtoD_v2)(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  GS_REQUIRE_INIT();
  if (CheckDevice(dstDevice, ByteCount) != CUDA_SUCCESS || srcHost == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Context* c = CurrentContext()) WaitContext(c);
  memcpy(reinterpret_cast<void*>(dstDevice), srcHost, ByteCount);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2)

GS_SIM_CUDA(cuMemcpyDtoH_v2)(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  GS_REQUIRE_INIT();
  if (CheckDevice(srcDevice, ByteCount) != CUDA_SUCCESS || dstHost == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Context* c = CurrentContext()) WaitContext(c);
  memcpy(dstHost, reinterpret_cast<const void*>(srcDevice), ByteCount);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2)

GS_SIM_CUDA(cuMemcpyDtoD_v2)(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  GS_REQUIRE_INIT();
  if (CheckDevice(dstDevice, ByteCount) != CUDA_SUCCESS || CheckDevice(srcDevice, ByteCount) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  memmove(reinterpret_cast<void*>(dstDevice), reinterpret_cast<const void*>(srcDevice), ByteCount);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2)

GS_SIM_CUDA(cuMemcpy)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  GS_REQUIRE_INIT();
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  if (Context* c = CurrentContext()) WaitContext(c);
  memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuMemcpy_ptds, cuMemcpy)

namespace {
// Async copies and sets: ordered after the stream's queued work by waiting for it; the
// simulator does not model copy-engine time.
CUresult StreamCopy(CUstream s, void* dst, const void* src, size_t n) {
  Stream* st = ResolveStream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (st->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  WaitStream(st);
  memmove(dst, src, n);
  return CUDA_SUCCESS;
}
}  // namespace

GS_SIM_CUDA(cuMemcpyHtoDAsync_v2)(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream) {
  GS_REQUIRE_INIT();
  if (CheckDevice(dstDevice, ByteCount) != CUDA_SUCCESS || srcHost == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return StreamCopy(hStream, reinterpret_cast<void*>(dstDevice), srcHost, ByteCount);
}
GS_SIM_CUDA_SAME(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2)

GS_SIM_CUDA(cuMemcpyDtoHAsync_v2)(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  GS_REQUIRE_INIT();
  if (CheckDevice(srcDevice, ByteCount) != CUDA_SUCCESS || dstHost == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return StreamCopy(hStream, dstHost, reinterpret_cast<const void*>(srcDevice), ByteCount);
}
GS_SIM_CUDA_SAME(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2)

GS_SIM_CUDA(cuMemcpyDtoDAsync_v2)(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  GS_REQUIRE_INIT();
  if (CheckDevice(dstDevice, ByteCount) != CUDA_SUCCESS || CheckDevice(srcDevice, ByteCount) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  return StreamCopy(hStream, reinterpret_cast<void*>(dstDevice), reinterpret_cast<const void*>(srcDevice), ByteCount);
}
GS_SIM_CUDA_SAME(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2)

GS_SIM_CUDA(cuMemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  GS_REQUIRE_INIT();
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  return StreamCopy(hStream, reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount);
}
GS_SIM_CUDA_SAME(cuMemcpyAsync_ptsz, cuMemcpyAsync)

namespace {
template <typename T>
CUresult Fill(CUdeviceptr dst, T value, size_t count) {
  if (CheckDevice(dst, count * sizeof(T)) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  if (Context* c = CurrentContext()) WaitContext(c);
  T* p = reinterpret_cast<T*>(dst);
  if (sizeof(T) == 1)
    memset(p, static_cast<int>(value), count);
  else
    std::fill(p, p + count, value);
  return CUDA_SUCCESS;
}
}  // namespace

GS_SIM_CUDA(cuMemsetD8_v2)(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  GS_REQUIRE_INIT();
  return Fill(dstDevice, uc, N);
}
GS_SIM_CUDA_SAME(cuMemsetD8_v2_ptds, cuMemsetD8_v2)
GS_SIM_CUDA(cuMemsetD16_v2)(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  GS_REQUIRE_INIT();
  return Fill(dstDevice, us, N);
}
GS_SIM_CUDA_SAME(cuMemsetD16_v2_ptds, cuMemsetD16_v2)
GS_SIM_CUDA(cuMemsetD32_v2)(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  GS_REQUIRE_INIT();
  return Fill(dstDevice, ui, N);
}
GS_SIM_CUDA_SAME(cuMemsetD32_v2_ptds, cuMemsetD32_v2)
GS_SIM_CUDA(cuMemsetD8Async)(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream) {
  GS_REQUIRE_INIT();
  return Fill(dstDevice, uc, N);
}
GS_SIM_CUDA_SAME(cuMemsetD8Async_ptsz, cuMemsetD8Async)
GS_SIM_CUDA(cuMemsetD32Async)(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream) {
  GS_REQUIRE_INIT();
  return Fill(dstDevice, ui, N);
}
GS_SIM_CUDA_SAME(cuMemsetD32Async_ptsz, cuMemsetD32Async)

// ---- stream-ordered allocation and pools ----------------------------------------------------

GS_SIM_CUDA(cuDeviceGetDefaultMemPool)(CUmemoryPool* pool_out, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool_out = reinterpret_cast<CUmemoryPool>(&g_driver->default_pool[StateIndex(dev)]);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceGetMemPool)(CUmemoryPool* pool, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = reinterpret_cast<CUmemoryPool>(g_driver->current_pool[StateIndex(dev)]);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceSetMemPool)(CUdevice dev, CUmemoryPool pool) {
  GS_REQUIRE_INIT();
  if (!ValidOrdinal(dev) || pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  g_driver->current_pool[StateIndex(dev)] = reinterpret_cast<MemPool*>(pool);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemPoolCreate)(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  GS_REQUIRE_INIT();
  if (pool == nullptr || poolProps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !ValidOrdinal(poolProps->location.id))
    return CUDA_ERROR_NOT_SUPPORTED;
  auto* p = new MemPool;
  p->device = StateIndex(poolProps->location.id);
  *pool = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemPoolDestroy)(CUmemoryPool pool) {
  GS_REQUIRE_INIT();
  auto* p = reinterpret_cast<MemPool*>(pool);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (auto& d : g_driver->default_pool)
    if (&d == p) return CUDA_ERROR_INVALID_VALUE;
  delete p;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemPoolTrimTo)(CUmemoryPool pool, size_t) {
  GS_REQUIRE_INIT();
  return pool ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GS_SIM_CUDA(cuMemPoolSetAttribute)(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  GS_REQUIRE_INIT();
  auto* p = reinterpret_cast<MemPool*>(pool);
  if (p == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) p->release_threshold = *static_cast<cuuint64_t*>(value);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemPoolGetAttribute)(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  GS_REQUIRE_INIT();
  auto* p = reinterpret_cast<MemPool*>(pool);
  if (p == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  cuuint64_t v = 0;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      v = p->release_threshold;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      v = p->reserved_now;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      v = p->used_now;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      v = p->used_high;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      v = p->used_high;
      break;
    default:
      *static_cast<int*>(value) = 0;
      return CUDA_SUCCESS;
  }
  *static_cast<cuuint64_t*>(value) = v;
  return CUDA_SUCCESS;
}

namespace {
CUresult AllocInGraphCapture(Stream* st, size_t bytes, CUdeviceptr* dptr);
}

GS_SIM_CUDA(cuMemAllocFromPoolAsync)(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  GS_REQUIRE_INIT();
  auto* p = reinterpret_cast<MemPool*>(pool);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (st->capture) return AllocInGraphCapture(st, bytesize, dptr);
  return AllocateDevice(p->device, bytesize, AllocKind::kPool, p, dptr);
}
GS_SIM_CUDA_SAME(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync)

GS_SIM_CUDA(cuMemAllocAsync)(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (st->capture) return AllocInGraphCapture(st, bytesize, dptr);
  MemPool* p = g_driver->current_pool[st->ctx->device];
  return AllocateDevice(p->device, bytesize, AllocKind::kPool, p, dptr);
}
GS_SIM_CUDA_SAME(cuMemAllocAsync_ptsz, cuMemAllocAsync)

GS_SIM_CUDA(cuMemFreeAsync)(CUdeviceptr dptr, CUstream hStream) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (st->capture) {
    auto n = std::make_unique<GraphNode>();
    n->type = GraphNode::Type::kMemFree;
    n->ptr = dptr;
    st->capture->nodes.push_back(std::move(n));
    return CUDA_SUCCESS;
  }
  WaitStream(st);
  return FreeAllocation(static_cast<uintptr_t>(dptr), false);
}
GS_SIM_CUDA_SAME(cuMemFreeAsync_ptsz, cuMemFreeAsync)

// ---- virtual memory management ----------------------------------------------------------------

GS_SIM_CUDA(cuMemGetAllocationGranularity)
(size_t* granularity, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags) {
  GS_REQUIRE_INIT();
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kVmmGranularity;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemCreate)
(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop, unsigned long long flags) {
  GS_REQUIRE_INIT();
  if (handle == nullptr || prop == nullptr || flags != 0 || size == 0 || size % kVmmGranularity != 0)
    return CUDA_ERROR_INVALID_VALUE;
  int dev = -1;
  switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      if (!ValidOrdinal(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
      dev = StateIndex(prop->location.id);
      break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev >= 0 && !node()->Reserve(dev, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = memfd_create("gpuslice-sim-vmm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    if (dev >= 0) node()->Release(dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto phys = std::make_unique<PhysicalMemory>();
  phys->device = dev;
  phys->size = size;
  phys->fd = fd;
  phys->prop = *prop;
  auto key = reinterpret_cast<CUmemGenericAllocationHandle>(phys.get());
  std::lock_guard<std::mutex> lock(g_driver->mu);
  g_driver->physical[key] = std::move(phys);
  *handle = key;
  return CUDA_SUCCESS;
}

namespace {
// Frees a released handle once nothing maps it any more. Caller holds g_driver->mu.
void MaybeDestroyPhysical(CUmemGenericAllocationHandle key) {
  auto it = g_driver->physical.find(key);
  if (it == g_driver->physical.end() || !it->second->released || it->second->mappings > 0) return;
  if (it->second->device >= 0) node()->Release(it->second->device, it->second->size);
  close(it->second->fd);
  g_driver->physical.erase(it);
}
}  // namespace

GS_SIM_CUDA(cuMemRelease)(CUmemGenericAllocationHandle handle) {
  GS_REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->physical.find(handle);
  if (it == g_driver->physical.end() || it->second->released) return CUDA_ERROR_INVALID_VALUE;
  it->second->released = true;
  MaybeDestroyPhysical(handle);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemGetAllocationPropertiesFromHandle)(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  GS_REQUIRE_INIT();
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->physical.find(handle);
  if (it == g_driver->physical.end()) return CUDA_ERROR_INVALID_VALUE;
  *prop = it->second->prop;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemAddressReserve)(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr, unsigned long long) {
  GS_REQUIRE_INIT();
  if (ptr == nullptr || size == 0 || size % kVmmGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  size_t align = std::max(alignment, kVmmGranularity);
  size_t span = size + align;
  void* p = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t base = RoundUp(reinterpret_cast<uintptr_t>(p), align);
  // Trim the slack so the reservation is exactly [base, base + size).
  if (base > reinterpret_cast<uintptr_t>(p)) munmap(p, base - reinterpret_cast<uintptr_t>(p));
  uintptr_t end = reinterpret_cast<uintptr_t>(p) + span;
  if (end > base + size) munmap(reinterpret_cast<void*>(base + size), end - (base + size));
  *ptr = static_cast<CUdeviceptr>(base);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemAddressFree)(CUdeviceptr ptr, size_t size) {
  GS_REQUIRE_INIT();
  if (ptr == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(ptr), size);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemMap)
(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) {
  GS_REQUIRE_INIT();
  if (ptr == 0 || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->physical.find(handle);
  if (it == g_driver->physical.end() || offset + size > it->second->size) return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, it->second->fd,
                 static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
  ++it->second->mappings;
  g_driver->vmm_maps[static_cast<uintptr_t>(ptr)] = {it->second.get(), size};
  g_driver->allocations[static_cast<uintptr_t>(ptr)] =
      Allocation{size, 0, it->second->device, AllocKind::kVmm, nullptr};
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  GS_REQUIRE_INIT();
  if (ptr == 0 || desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  int prot = desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
             : desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                                 : PROT_NONE;
  return mprotect(reinterpret_cast<void*>(ptr), size, prot) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GS_SIM_CUDA(cuMemUnmap)(CUdeviceptr ptr, size_t size) {
  GS_REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->vmm_maps.find(static_cast<uintptr_t>(ptr));
  if (it == g_driver->vmm_maps.end() || it->second.second != size) return CUDA_ERROR_INVALID_VALUE;
  PhysicalMemory* phys = it->second.first;
  mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  g_driver->vmm_maps.erase(it);
  g_driver->allocations.erase(static_cast<uintptr_t>(ptr));
  --phys->mappings;
  MaybeDestroyPhysical(reinterpret_cast<CUmemGenericAllocationHandle>(phys));
  return CUDA_SUCCESS;
}

// ---- arrays -------------------------------------------------------------------------------------

namespace {
size_t ArrayBytes(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  return gs::platform::CudaArrayBytes(d.Width, d.Height, d.Depth, d.NumChannels, d.Format);
}

CUresult CreateArray(const CUDA_ARRAY3D_DESCRIPTOR& desc, CUarray* out) {
  if (out == nullptr || desc.Width == 0 || desc.NumChannels == 0 || desc.NumChannels > 4)
    return CUDA_ERROR_INVALID_VALUE;
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  size_t bytes = ArrayBytes(desc);
  if (!node()->Reserve(c->device, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* a = new ArrayObject;
  a->device = c->device;
  a->bytes = bytes;
  a->desc = desc;
  a->mem = MapLazy(RoundUp(bytes, 4096));
  *out = reinterpret_cast<CUarray>(a);
  return CUDA_SUCCESS;
}
}  // namespace

GS_SIM_CUDA(cuArrayCreate_v2)(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  GS_REQUIRE_INIT();
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = pAllocateArray->Width;
  d.Height = pAllocateArray->Height;
  d.Format = pAllocateArray->Format;
  d.NumChannels = pAllocateArray->NumChannels;
  return CreateArray(d, pHandle);
}

GS_SIM_CUDA(cuArray3DCreate_v2)(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  GS_REQUIRE_INIT();
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(*pAllocateArray, pHandle);
}

GS_SIM_CUDA(cuArrayDestroy)(CUarray hArray) {
  GS_REQUIRE_INIT();
  auto* a = reinterpret_cast<ArrayObject*>(hArray);
  if (a == nullptr || a->parent) return CUDA_ERROR_INVALID_HANDLE;
  node()->Release(a->device, a->bytes);
  if (a->mem) munmap(a->mem, RoundUp(a->bytes, 4096));
  delete a;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuArray3DGetDescriptor_v2)(CUDA_ARRAY3D_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  GS_REQUIRE_INIT();
  auto* a = reinterpret_cast<ArrayObject*>(hArray);
  if (a == nullptr || pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pArrayDescriptor = a->desc;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMipmappedArrayCreate)
(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc, unsigned int numMipmapLevels) {
  GS_REQUIRE_INIT();
  if (pHandle == nullptr || pMipmappedArrayDesc == nullptr || numMipmapLevels == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto m = std::make_unique<MipmappedArray>();
  m->device = c->device;
  CUDA_ARRAY3D_DESCRIPTOR level = *pMipmappedArrayDesc;
  for (unsigned i = 0; i < numMipmapLevels; ++i) {
    auto a = std::make_unique<ArrayObject>();
    a->device = c->device;
    a->desc = level;
    a->bytes = ArrayBytes(level);
    a->parent = m.get();
    m->bytes += a->bytes;
    m->levels.push_back(std::move(a));
    level.Width = std::max<size_t>(level.Width / 2, 1);
    if (level.Height) level.Height = std::max<size_t>(level.Height / 2, 1);
    if (level.Depth) level.Depth = std::max<size_t>(level.Depth / 2, 1);
  }
  if (!node()->Reserve(c->device, m->bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  *pHandle = reinterpret_cast<CUmipmappedArray>(m.release());
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMipmappedArrayGetLevel)(CUarray* pLevelArray, CUmipmappedArray hMipmappedArray, unsigned int level) {
  GS_REQUIRE_INIT();
  auto* m = reinterpret_cast<MipmappedArray*>(hMipmappedArray);
  if (m == nullptr || pLevelArray == nullptr || level >= m->levels.size()) return CUDA_ERROR_INVALID_VALUE;
  *pLevelArray = reinterpret_cast<CUarray>(m->levels[level].get());
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMipmappedArrayDestroy)(CUmipmappedArray hMipmappedArray) {
  GS_REQUIRE_INIT();
  auto* m = reinterpret_cast<MipmappedArray*>(hMipmappedArray);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  node()->Release(m->device, m->bytes);
  delete m;
  return CUDA_SUCCESS;
}

// ---- modules ------------------------------------------------------------------------------------

GS_SIM_CUDA(cuModuleLoadData)(CUmodule* module, const void* image) {
  GS_REQUIRE_INIT();
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::vector<std::string> entries;
  if (!ParsePtxEntries(static_cast<const char*>(image), &entries)) {
    GS_LOG(kWarn, "cuModuleLoadData: the simulator loads PTX text only (no .entry found)");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  // The module's .global variables take device memory in 2 MiB pages: a 64 MiB .global
  // added 64 MiB to NVML's per-process figure on the H100 (real-gpu-h100.md); the code
  // itself added nothing measurable.
  uint64_t globals = PtxGlobalBytes(static_cast<const char*>(image));
  uint64_t charge = globals > Spec(c->device).memory_total ? UINT64_MAX : RoundUp(globals, kDriverPage);
  if (charge && !node()->Reserve(c->device, charge)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* m = new Module;
  m->global_bytes = charge;
  for (auto& name : entries) {
    auto f = std::make_unique<Function>();
    f->kind = IsSpinKernel(name) ? KernelKind::kSpin : KernelKind::kGeneric;
    f->name = std::move(name);
    f->module = m;
    m->functions.push_back(std::move(f));
  }
  {
    std::lock_guard<std::mutex> lock(g_driver->mu);
    m->ctx = c;
    c->modules.push_back(m);
  }
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuModuleLoadDataEx)(CUmodule* module, const void* image, unsigned int, CUjit_option*, void**) {
  return gs_sim_cuda_cuModuleLoadData(module, image);
}

GS_SIM_CUDA(cuModuleLoad)(CUmodule* module, const char* fname) {
  GS_REQUIRE_INIT();
  if (fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int fd = open(fname, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_FILE_NOT_FOUND;
  std::string text;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  close(fd);
  return gs_sim_cuda_cuModuleLoadData(module, text.c_str());
}

GS_SIM_CUDA(cuModuleUnload)(CUmodule hmod) {
  GS_REQUIRE_INIT();
  if (hmod == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto* m = reinterpret_cast<Module*>(hmod);
  {
    std::lock_guard<std::mutex> lock(g_driver->mu);
    if (Context* c = m->ctx) {
      c->modules.erase(std::remove(c->modules.begin(), c->modules.end(), m), c->modules.end());
      if (m->global_bytes) node()->Release(c->device, m->global_bytes);
    }
  }
  delete m;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuModuleGetFunction)(CUfunction* hfunc, CUmodule hmod, const char* name) {
  GS_REQUIRE_INIT();
  auto* m = reinterpret_cast<Module*>(hmod);
  if (hfunc == nullptr || m == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (auto& f : m->functions)
    if (f->name == name) {
      *hfunc = reinterpret_cast<CUfunction>(f.get());
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}

// Libraries (CUDA 12's context-independent loading): the simulator loads the module into
// the current context right away, so a context must be current (the real driver loads
// lazily into each context). A CUkernel is the Function itself, usable as a CUfunction.
GS_SIM_CUDA(cuLibraryLoadData)
(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned int, CUlibraryOption*, void**, unsigned int) {
  GS_REQUIRE_INIT();
  if (library == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUmodule module = nullptr;
  CUresult rc = gs_sim_cuda_cuModuleLoadData(&module, code);
  if (rc == CUDA_SUCCESS) *library = reinterpret_cast<CUlibrary>(module);
  return rc;
}

GS_SIM_CUDA(cuLibraryLoadFromFile)
(CUlibrary* library, const char* fileName, CUjit_option*, void**, unsigned int, CUlibraryOption*, void**,
 unsigned int) {
  GS_REQUIRE_INIT();
  if (library == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUmodule module = nullptr;
  CUresult rc = gs_sim_cuda_cuModuleLoad(&module, fileName);
  if (rc == CUDA_SUCCESS) *library = reinterpret_cast<CUlibrary>(module);
  return rc;
}

GS_SIM_CUDA(cuLibraryUnload)(CUlibrary library) {
  return gs_sim_cuda_cuModuleUnload(reinterpret_cast<CUmodule>(library));
}

GS_SIM_CUDA(cuLibraryGetModule)(CUmodule* pMod, CUlibrary library) {
  GS_REQUIRE_INIT();
  if (pMod == nullptr || library == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pMod = reinterpret_cast<CUmodule>(library);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuLibraryGetKernel)(CUkernel* pKernel, CUlibrary library, const char* name) {
  return gs_sim_cuda_cuModuleGetFunction(reinterpret_cast<CUfunction*>(pKernel), reinterpret_cast<CUmodule>(library),
                                         name);
}

GS_SIM_CUDA(cuFuncGetAttribute)(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  GS_REQUIRE_INIT();
  if (pi == nullptr || hfunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pi = attrib == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuFuncSetAttribute)(CUfunction hfunc, CUfunction_attribute, int) {
  GS_REQUIRE_INIT();
  return hfunc ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// ---- launches -------------------------------------------------------------------------------------

namespace {
// The spin kernel's only parameter: nanoseconds each block runs.
int64_t SpinParam(void** params, void** extra) {
  if (params && params[0]) return static_cast<int64_t>(*static_cast<const uint64_t*>(params[0]));
  for (int i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END; i += 2)
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER && extra[i + 1])
      return static_cast<int64_t>(*static_cast<const uint64_t*>(extra[i + 1]));
  return 0;
}

CUresult Launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, CUstream s,
                void** params, void** extra) {
  auto* fn = reinterpret_cast<Function*>(f);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || static_cast<uint64_t>(bx) * by * bz > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  Stream* st = ResolveStream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (node()->IsLost(st->ctx->device)) return CUDA_ERROR_LAUNCH_FAILED;
  uint64_t blocks = static_cast<uint64_t>(gx) * gy * gz, threads = static_cast<uint64_t>(bx) * by * bz;
  int64_t per_wave = fn->kind == KernelKind::kSpin ? SpinParam(params, extra) : kDefaultWaveNs;
  if (st->capture) {
    auto n = std::make_unique<GraphNode>();
    n->type = GraphNode::Type::kKernel;
    n->fn = fn;
    n->blocks = blocks;
    n->threads = threads;
    n->spin_ns = per_wave;
    st->capture->nodes.push_back(std::move(n));
    return CUDA_SUCCESS;
  }
  return EnqueueKernel(st, KernelDurationNs(Spec(st->ctx->device), blocks, threads, per_wave));
}
}  // namespace

GS_SIM_CUDA(cuLaunchKernel)
(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
 unsigned int blockDimY, unsigned int blockDimZ, unsigned int, CUstream hStream, void** kernelParams, void** extra) {
  GS_REQUIRE_INIT();
  return Launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, extra);
}
GS_SIM_CUDA_SAME(cuLaunchKernel_ptsz, cuLaunchKernel)

GS_SIM_CUDA(cuLaunchKernelEx)(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  GS_REQUIRE_INIT();
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                config->blockDimZ, config->hStream, kernelParams, extra);
}
GS_SIM_CUDA_SAME(cuLaunchKernelEx_ptsz, cuLaunchKernelEx)

GS_SIM_CUDA(cuLaunchCooperativeKernel)
(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
 unsigned int blockDimY, unsigned int blockDimZ, unsigned int, CUstream hStream, void** kernelParams) {
  GS_REQUIRE_INIT();
  return Launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, nullptr);
}
GS_SIM_CUDA_SAME(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel)

// ---- streams and events -------------------------------------------------------------------------

GS_SIM_CUDA(cuStreamCreateWithPriority)(CUstream* phStream, unsigned int flags, int priority) {
  GS_REQUIRE_INIT();
  if (phStream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto* st = new Stream;
  st->ctx = c;
  st->flags = flags;
  st->priority = priority;
  *phStream = reinterpret_cast<CUstream>(st);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuStreamCreate)(CUstream* phStream, unsigned int Flags) {
  return gs_sim_cuda_cuStreamCreateWithPriority(phStream, Flags, 0);
}

GS_SIM_CUDA(cuStreamDestroy_v2)(CUstream hStream) {
  GS_REQUIRE_INIT();
  Stream* st = reinterpret_cast<Stream*>(hStream);
  if (st == nullptr || IsNullStream(st)) return CUDA_ERROR_INVALID_HANDLE;
  delete st;  // queued work still completes on the GPU timeline
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuStreamSynchronize)(CUstream hStream) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (st->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (IsNullStream(st))
    WaitContext(st->ctx);
  else
    WaitStream(st);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuStreamSynchronize_ptsz, cuStreamSynchronize)

GS_SIM_CUDA(cuStreamQuery)(CUstream hStream) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return node()->WorkDone(st->ctx->device, StreamOrderTail(st)) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
GS_SIM_CUDA_SAME(cuStreamQuery_ptsz, cuStreamQuery)

GS_SIM_CUDA(cuEventCreate)(CUevent* phEvent, unsigned int Flags) {
  GS_REQUIRE_INIT();
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new CudaEvent;
  e->flags = Flags;
  *phEvent = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuEventDestroy_v2)(CUevent hEvent) {
  GS_REQUIRE_INIT();
  if (hEvent == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<CudaEvent*>(hEvent);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuEventRecord)(CUevent hEvent, CUstream hStream) {
  GS_REQUIRE_INIT();
  auto* e = reinterpret_cast<CudaEvent*>(hEvent);
  Stream* st = ResolveStream(hStream);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  e->device = st->ctx->device;
  e->mark = StreamOrderTail(st);
  e->recorded_at = Now();
  e->recorded = true;
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuEventRecord_ptsz, cuEventRecord)

GS_SIM_CUDA(cuEventRecordWithFlags)(CUevent hEvent, CUstream hStream, unsigned int) {
  return gs_sim_cuda_cuEventRecord(hEvent, hStream);
}
GS_SIM_CUDA_SAME(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags)

GS_SIM_CUDA(cuEventQuery)(CUevent hEvent) {
  GS_REQUIRE_INIT();
  auto* e = reinterpret_cast<CudaEvent*>(hEvent);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return EventDone(e) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

GS_SIM_CUDA(cuEventSynchronize)(CUevent hEvent) {
  GS_REQUIRE_INIT();
  auto* e = reinterpret_cast<CudaEvent*>(hEvent);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (e->recorded) node()->WaitWork(e->device, e->mark);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuEventElapsedTime_v2)(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  GS_REQUIRE_INIT();
  auto* a = reinterpret_cast<CudaEvent*>(hStart);
  auto* b = reinterpret_cast<CudaEvent*>(hEnd);
  if (pMilliseconds == nullptr || a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!a->recorded || !b->recorded) return CUDA_ERROR_INVALID_HANDLE;
  if (!EventDone(a) || !EventDone(b)) return CUDA_ERROR_NOT_READY;
  *pMilliseconds = static_cast<float>(static_cast<double>(EventTime(b) - EventTime(a)) / 1e6);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuEventElapsedTime, cuEventElapsedTime_v2)

GS_SIM_CUDA(cuStreamWaitEvent)(CUstream hStream, CUevent hEvent, unsigned int) {
  GS_REQUIRE_INIT();
  auto* e = reinterpret_cast<CudaEvent*>(hEvent);
  Stream* st = ResolveStream(hStream);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(st->mu);
  // Work of one process on one device runs in launch order: the wait holds by itself.
  // Across devices the simulator does not order work (a documented simplification).
  if (e->recorded && e->device == st->ctx->device) st->tail = std::max(st->tail, e->mark);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuStreamWaitEvent_ptsz, cuStreamWaitEvent)

// ---- graphs ---------------------------------------------------------------------------------------

namespace {
CUresult AllocInGraphCapture(Stream* st, size_t bytes, CUdeviceptr* dptr) {
  // Graph allocations get their address at capture and are charged from then until a
  // free node runs or the graph is destroyed (the simulator does not defer the charge).
  CUresult rc = AllocateDevice(st->ctx->device, bytes, AllocKind::kGraph, nullptr, dptr);
  if (rc != CUDA_SUCCESS) return rc;
  auto n = std::make_unique<GraphNode>();
  n->type = GraphNode::Type::kMemAlloc;
  n->ptr = *dptr;
  n->bytes = bytes;
  st->capture->owned_allocations.push_back(*dptr);
  st->capture->nodes.push_back(std::move(n));
  return CUDA_SUCCESS;
}

void ReleaseGraphAllocation(Graph* g, CUdeviceptr p) {
  auto it = std::find(g->owned_allocations.begin(), g->owned_allocations.end(), p);
  if (it == g->owned_allocations.end()) return;
  g->owned_allocations.erase(it);
  FreeAllocation(static_cast<uintptr_t>(p), false);
}
}  // namespace

GS_SIM_CUDA(cuStreamBeginCapture_v2)(CUstream hStream, CUstreamCaptureMode) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (IsNullStream(st)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (st->capture) return CUDA_ERROR_ILLEGAL_STATE;
  st->capture = new Graph;
  st->capture->device = st->ctx->device;
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture_v2)

GS_SIM_CUDA(cuStreamEndCapture)(CUstream hStream, CUgraph* phGraph) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr || phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (st->capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  *phGraph = reinterpret_cast<CUgraph>(st->capture);
  st->capture = nullptr;
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuStreamEndCapture_ptsz, cuStreamEndCapture)

GS_SIM_CUDA(cuStreamIsCapturing)(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr || captureStatus == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *captureStatus = st->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuStreamIsCapturing_ptsz, cuStreamIsCapturing)

GS_SIM_CUDA(cuGraphCreate)(CUgraph* phGraph, unsigned int flags) {
  GS_REQUIRE_INIT();
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *phGraph = reinterpret_cast<CUgraph>(new Graph);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphDestroy)(CUgraph hGraph) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  while (!g->owned_allocations.empty()) ReleaseGraphAllocation(g, g->owned_allocations.back());
  delete g;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphAddKernelNode_v2)
(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*, size_t, const CUDA_KERNEL_NODE_PARAMS* p) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || p == nullptr || phGraphNode == nullptr || p->func == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* fn = reinterpret_cast<Function*>(p->func);
  auto n = std::make_unique<GraphNode>();
  n->type = GraphNode::Type::kKernel;
  n->fn = fn;
  n->blocks = static_cast<uint64_t>(p->gridDimX) * p->gridDimY * p->gridDimZ;
  n->threads = static_cast<uint64_t>(p->blockDimX) * p->blockDimY * p->blockDimZ;
  n->spin_ns = fn->kind == KernelKind::kSpin ? SpinParam(p->kernelParams, p->extra) : kDefaultWaveNs;
  *phGraphNode = reinterpret_cast<CUgraphNode>(n.get());
  g->nodes.push_back(std::move(n));
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphAddMemAllocNode)
(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*, size_t, CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || nodeParams == nullptr || phGraphNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (nodeParams->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !ValidOrdinal(nodeParams->poolProps.location.id))
    return CUDA_ERROR_INVALID_VALUE;
  int dev = StateIndex(nodeParams->poolProps.location.id);
  CUresult rc = AllocateDevice(dev, nodeParams->bytesize, AllocKind::kGraph, nullptr, &nodeParams->dptr);
  if (rc != CUDA_SUCCESS) return rc;
  auto n = std::make_unique<GraphNode>();
  n->type = GraphNode::Type::kMemAlloc;
  n->ptr = nodeParams->dptr;
  n->bytes = nodeParams->bytesize;
  g->owned_allocations.push_back(nodeParams->dptr);
  *phGraphNode = reinterpret_cast<CUgraphNode>(n.get());
  g->nodes.push_back(std::move(n));
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphAddMemFreeNode)
(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*, size_t, CUdeviceptr dptr) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || phGraphNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto n = std::make_unique<GraphNode>();
  n->type = GraphNode::Type::kMemFree;
  n->ptr = dptr;
  *phGraphNode = reinterpret_cast<CUgraphNode>(n.get());
  g->nodes.push_back(std::move(n));
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphInstantiateWithFlags)(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || phGraphExec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new GraphExec;
  e->graph = g;
  for (auto& n : g->nodes) e->nodes.push_back(*n);
  *phGraphExec = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphExecDestroy)(CUgraphExec hGraphExec) {
  GS_REQUIRE_INIT();
  if (hGraphExec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  delete reinterpret_cast<GraphExec*>(hGraphExec);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphLaunch)(CUgraphExec hGraphExec, CUstream hStream) {
  GS_REQUIRE_INIT();
  auto* e = reinterpret_cast<GraphExec*>(hGraphExec);
  Stream* st = ResolveStream(hStream);
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  for (auto& n : e->nodes) {
    switch (n.type) {
      case GraphNode::Type::kKernel:
        if (CUresult rc = EnqueueKernel(st, KernelDurationNs(Spec(st->ctx->device), n.blocks, n.threads, n.spin_ns));
            rc != CUDA_SUCCESS)
          return rc;
        break;
      case GraphNode::Type::kMemFree:
        WaitStream(st);
        ReleaseGraphAllocation(e->graph, n.ptr);
        break;
      default:
        break;
    }
  }
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuGraphLaunch_ptsz, cuGraphLaunch)
