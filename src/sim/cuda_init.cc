// The simulated CUDA driver API, initialisation: cuInit (and CUDA refused in a child forked
// after it), the driver's version, error names and strings, cuGetProcAddress.
// Shared state and helpers: src/sim/cuda_driver.h.
#include <pthread.h>

#include <cstdlib>
#include <cstring>

#include "src/platform/proc_address.h"
#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"
#include "src/sim/runtime.h"

extern "C" __attribute__((visibility("hidden"))) void* const gs_sim_cuda_exports[];

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

// CUDA is not usable in a child forked after the parent initialised it (NVIDIA documents
// it; docs/measurements/h100-driver.md, "CUDA after fork"). No error code was
// recorded there: the simulator answers cuInit and every call that needs an
// initialised driver with CUDA_ERROR_NOT_INITIALIZED ("initialization error", what the
// CUDA runtime reports in such a child), the least convenient reading. A child forked
// before cuInit uses CUDA normally, in a process slot of its own (src/sim/runtime.cc).
static void ForgetCudaInForkedChild() {
  if (g_driver == nullptr) return;
  g_driver = nullptr;
  g_forked_after_init = true;
}

// At a normal exit the driver shuts down in its exit handler (CUDA_ERROR_DEINITIALIZED: "the
// CUDA driver is in the process of shutting down"): a call made later in the exit (another
// exit handler, a late destructor, another thread) gets that error. The process's memory
// and work stay listed on the card until the exit's last step, where the kernel driver
// frees them as the process's device files close, before its parent can see the exit
// (docs/measurements/h100-driver.md, "A process's exit"): here, this library's destructor,
// which the dynamic linker runs after every exit handler.
static void ShutDownAtExit() {
  if (g_driver == nullptr) return;  // a child forked after cuInit never had CUDA
  g_shut_down.store(true);
}

__attribute__((destructor)) static void LeaveTheCardAtExit() {
  if (g_shut_down.load()) LeaveNode();
}

GS_SIM_CUDA(cuInit)(unsigned int Flags) {
  if (g_forked_after_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_shut_down.load()) return CUDA_ERROR_DEINITIALIZED;
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (g_driver) return CUDA_SUCCESS;
  Runtime* rt = GetRuntime();
  if (rt == nullptr) return CUDA_ERROR_NO_DEVICE;
  static Driver driver;
  static std::once_flag once;
  std::call_once(once, [&] {
    driver.rt = rt;
    const char* loading = getenv("CUDA_MODULE_LOADING");
    driver.lazy_loading = loading == nullptr || strcmp(loading, "EAGER") != 0;
    for (int d = 0; d < kMaxDevices; ++d) {
      driver.primary[d].device = d;
      driver.primary[d].primary = true;
      driver.primary[d].null_stream.ctx = &driver.primary[d];
      ResetLimits(&driver.primary[d]);
      driver.default_pool[d].device = d;
      driver.current_pool[d] = &driver.default_pool[d];
      driver.graph_pool[d].device = d;
    }
    for (int i = 0; i < rt->cuda_count; ++i) driver.primary[rt->cuda_devices[i]].ordinal = i;
    g_driver = &driver;
    pthread_atfork(nullptr, nullptr, ForgetCudaInForkedChild);
    // Registered after `driver`'s destructor, so it runs before it.
    atexit(ShutDownAtExit);
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
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
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
