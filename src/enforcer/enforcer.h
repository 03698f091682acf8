// Shared internals of libgpuslice.so, the enforcer preloaded into container processes.
//
// Life cycle: the constructor only reads the configuration (cheap: every process of a
// container loads the library, most never touch a GPU). The first CUDA or NVML call,
// or dlsym of one, loads the real driver and joins the container's region (Ready()).
// The real driver is found once; the library's own calls use the `Real*` tables and
// never re-enter its hooks.
//
// Threading: Ready() is safe from any thread (pthread_once inside, one load and compare
// once ready); everything it sets up is immutable afterwards except region contents
// (atomics / region mutex) and the allocation registry (its own mutex).
#pragma once

#include <atomic>
#include <cstdint>

#include "src/enforcer/config.h"
#include "src/enforcer/real_dl.h"
#include "src/platform/cuda_api.h"
#include "src/platform/nvml_api.h"
#include "src/region/region.h"

namespace gs::enforcer {

struct RealCuda {
#define GS_CUDA_SYM(name, params, args) CUresult(*name) params = nullptr;
#include "src/platform/cuda_symbols.def"
#undef GS_CUDA_SYM
};

struct RealNvml {
#define GS_NVML_SYM(ret, name, params, args) ret(*name) params = nullptr;
#include "src/platform/nvml_symbols.def"
#undef GS_NVML_SYM
};

struct State {
  Config cfg;
  region::Region* region = nullptr;
  bool private_region = false;  // the shared one could not be opened
  // The limits file names a shared region that cannot be used (foreign, truncated, wrong
  // version): device memory is refused rather than limited per process (a private region
  // per process would give each its own full limit).
  bool region_refused = false;
  region::ProcessSlot* slot = nullptr;
  std::atomic<int> slot_pid{0};    // the process that claimed `slot` (a forked child claims its own)
  int ordinal_to_device[64] = {};  // CUdevice -> region device index + 1; 0 unknown
  // CUdevice -> the limits name cards and this is none of them (NotGranted).
  bool ordinal_not_granted[64] = {};
  std::atomic<bool> devices_mapped{false};
  uint64_t physical_total[region::kMaxDevices] = {};
  // The card each region device is bound to, as the driver names it: set once when bound
  // (under the device map's mutex), and what NVML is asked about, never the region's copy,
  // which the container can rewrite.
  char device_uuid[region::kMaxDevices][96] = {};
  bool cuda_loaded = false;
  bool nvml_loaded = false;
};

extern State g_state;
extern RealCuda g_cuda;
extern RealNvml g_nvml;

// Loads the real CUDA driver and joins the region; false if there is no driver (the
// hooks then return CUDA_ERROR_NOT_INITIALIZED as a driverless system would).
bool CudaReady();
bool NvmlReady();

// After the real cuInit succeeded: maps CUDA ordinals to region devices by UUID
// (src/enforcer/limits.h says which index a card gets). Also done on first need, so a
// program that reached the real cuInit around the hooks is still mapped.
void MapCudaDevices();
// The child of a fork: the lock of the map is free (a thread of the parent may have been
// mapping; the child maps again where it must).
void DeviceMapAfterForkInChild();
// Region device index of a CUDA ordinal / of the current context's device; -1 if none
// (not a device of this container, or no context).
int DeviceOfOrdinal(CUdevice ordinal);
int CurrentDevice();
// The CUDA ordinal of ctx's device, -1 when it cannot be told; what is current is left as
// it was.
CUdevice OrdinalOfContext(CUcontext ctx);
// Whether the card at this CUDA ordinal was not granted: the limits name cards
// (GPUSLICE_DEVICE_UUID_<i>) and this is not one of them. Such a card gets no context
// (CUDA_ERROR_DEVICE_UNAVAILABLE, as a card in prohibited compute mode), whatever the
// limits are, so nothing can be allocated or launched on it.
bool NotGranted(CUdevice ordinal);
// Region device index for an NVML handle (by UUID); -1 if none.
int DeviceOfNvml(nvmlDevice_t device);

// Formats CUuuid as NVML does: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
void FormatUuid(const CUuuid& u, char* out, size_t size);

// Hook lookup for dlsym / cuGetProcAddress: our function for an exported name, or nullptr.
void* FindCudaHook(const char* name);
void* FindNvmlHook(const char* name);

}  // namespace gs::enforcer

// Declarations of every possible hook (null unless defined: hidden weak).
#define GS_WEAK_CUDA_NAME(name) gs_hook_##name
#define GS_WEAK_NVML_NAME(name) gs_hook_##name
#include "src/platform/weak_declarations.inc"

// Defines a hook: the body is gs_hook_<name>, exported under the driver's own name.
#define GS_HOOK(name)                                                                                       \
  extern "C" __attribute__((visibility("default"), alias("gs_hook_" #name))) decltype(gs_hook_##name) name; \
  extern "C" __attribute__((visibility("hidden")))
