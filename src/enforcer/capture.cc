// How programs reach the driver, and how the enforcer stands in the way: direct linking
// (the exported hooks), dlopen + dlsym or dlvsym (ours: asking either for a hooked driver
// function, or for dlsym/dlvsym themselves, gets ours), and cuGetProcAddress (v1 and v2,
// every flag, _ptsz/_ptds and versioned names), which the CUDA runtime uses.
#include <dlfcn.h>
#include <link.h>

#include <cstring>

#include "src/common/raw_log.h"
#include "src/enforcer/enforcer.h"
#include "src/platform/proc_address.h"

namespace gs::enforcer {
namespace {

struct Entry {
  const char* name;
  void* fn;
};

// In the tables' order, which is sorted: binary search by name.
const Entry kCudaHooks[] = {
#define GS_CUDA_SYM(name, params, args) {#name, reinterpret_cast<void*>(&gs_hook_##name)},
#include "src/platform/cuda_symbols.def"
#undef GS_CUDA_SYM
};

const Entry kNvmlHooks[] = {
#define GS_NVML_SYM(ret, name, params, args) {#name, reinterpret_cast<void*>(&gs_hook_##name)},
#include "src/platform/nvml_symbols.def"
#undef GS_NVML_SYM
};

}  // namespace

void* FindCudaHook(const char* name) {
  int idx = platform::CudaSymbolIndex(name);
  return idx < 0 ? nullptr : kCudaHooks[idx].fn;
}

void* FindNvmlHook(const char* name) {
  for (const auto& e : kNvmlHooks)
    if (strcmp(e.name, name) == 0) return e.fn;
  return nullptr;
}

}  // namespace gs::enforcer

using namespace gs::enforcer;  // NOLINT: C ABI definitions below
namespace region = gs::region;

namespace {

// dlsym(RTLD_NEXT, ...) from another library means "after the caller": resolving it from
// inside this function would mean "after libgpuslice". Walk the caller's link map instead.
void* NextAfter(const void* caller, const char* symbol) {
  Dl_info info;
  struct link_map* lm = nullptr;
  if (dladdr1(caller, &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) == 0 || lm == nullptr) return nullptr;
  for (struct link_map* l = lm->l_next; l != nullptr; l = l->l_next) {
    void* h = dlopen(l->l_name[0] ? l->l_name : nullptr, RTLD_LAZY | RTLD_NOLOAD);
    if (h == nullptr) continue;
    DlsymFn real = RealDlsym();
    void* s = real ? real(h, symbol) : nullptr;
    dlclose(h);
    if (s) return s;
  }
  return nullptr;
}

}  // namespace

namespace {
// Our function for a name the program must not get the real one of: the driver entry
// points we hook, and the dynamic linker's own lookups (through which the real ones could
// be reached around us). nullptr for every other name.
void* Substitute(const char* symbol) {
  if (symbol[0] == 'c' && symbol[1] == 'u') {  // glibc declares symbol nonnull
    if (void* hook = FindCudaHook(symbol); hook && CudaReady()) return hook;
  } else if (strncmp(symbol, "nvml", 4) == 0) {
    if (void* hook = FindNvmlHook(symbol); hook && NvmlReady()) return hook;
  } else if (strcmp(symbol, "dlsym") == 0) {
    return reinterpret_cast<void*>(&dlsym);
  } else if (strcmp(symbol, "dlvsym") == 0) {
    return reinterpret_cast<void*>(&dlvsym);
  }
  return nullptr;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* symbol) {
  if (void* ours = Substitute(symbol)) return ours;
  if (handle == RTLD_NEXT) return NextAfter(__builtin_return_address(0), symbol);
  DlsymFn real = RealDlsym();
  return real ? real(handle, symbol) : nullptr;
}

// dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34") would otherwise hand out glibc's dlsym, and
// with it every real driver function.
extern "C" __attribute__((visibility("default"))) void* dlvsym(void* handle, const char* symbol, const char* version) {
  if (void* ours = Substitute(symbol)) return ours;
  DlvsymFn real = RealDlvsym();
  if (real == nullptr) return nullptr;
  if (handle == RTLD_NEXT) {
    // As dlsym: "after the caller", not after this library.
    Dl_info info;
    struct link_map* lm = nullptr;
    if (dladdr1(__builtin_return_address(0), &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) == 0 || !lm)
      return nullptr;
    for (struct link_map* l = lm->l_next; l != nullptr; l = l->l_next) {
      void* h = dlopen(l->l_name[0] ? l->l_name : nullptr, RTLD_LAZY | RTLD_NOLOAD);
      if (h == nullptr) continue;
      void* s = real(h, symbol, version);
      dlclose(h);
      if (s) return s;
    }
    return nullptr;
  }
  return real(handle, symbol, version);
}

namespace {
// Replaces *pfn by our hook when the driver handed out a function we intercept. The
// export is named by its address (dladdr, exact match) or, for a driver that returns
// pointers it does not export, by the documented version rules.
void SwapForHook(const char* symbol, int version, cuuint64_t flags, void** pfn) {
  if (pfn == nullptr || *pfn == nullptr) return;
  Dl_info info;
  const char* name = nullptr;
  if (dladdr(*pfn, &info) != 0 && info.dli_sname != nullptr && info.dli_saddr == *pfn) name = info.dli_sname;
  if (name == nullptr || FindCudaHook(name) == nullptr) {
    const char* resolved = nullptr;
    if (gs::platform::ResolveCudaExport(symbol, version, flags, &resolved) == gs::platform::ProcLookup::kFound)
      name = resolved;
  }
  if (name == nullptr) return;
  if (void* hook = FindCudaHook(name)) *pfn = hook;
}
}  // namespace

GS_HOOK(cuGetProcAddress_v2)
CUresult gs_hook_cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
  if (!CudaReady() || g_cuda.cuGetProcAddress_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = g_cuda.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (rc == CUDA_SUCCESS) SwapForHook(symbol, cudaVersion, flags, pfn);
  return rc;
}

GS_HOOK(cuGetProcAddress)
CUresult gs_hook_cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  if (!CudaReady() || g_cuda.cuGetProcAddress == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = g_cuda.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
  if (rc == CUDA_SUCCESS) SwapForHook(symbol, cudaVersion, flags, pfn);
  return rc;
}
