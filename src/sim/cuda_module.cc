// The simulated CUDA driver API, modules and libraries: loading (a module costs its .global
// bytes at load, and its kernels' code when they are loaded), functions, kernels,
// attributes.
//
// Lazy loading (CUDA C++ Programming Guide, "Lazy Loading"; the default on Linux since
// CUDA 12.2, CUDA_MODULE_LOADING=EAGER turns it off): cuModuleLoad* does not load kernels;
// the driver loads a kernel when cuModuleGetFunction resolves it. A library's kernels
// (cuLibraryGetKernel) are context-independent handles, loaded into the context by
// cuKernelGetFunction or at their first launch, as the CUDA runtime launches them; a
// graph's kernels at cuGraphInstantiate. So device memory grows per kernel, at first
// resolution or launch, not at load (part of what the H100 showed: a PyTorch process grew
// from 612 to 738 MiB over its first matmul and convolution with 54 MiB in its allocator,
// docs/measurements/h100-driver.md). A module's
// .global variables are allocated at load in either mode (the H100's NVML figure grew by
// 64 MiB right after loading a module with a 64 MiB .global, under CUDA 13's default).
//
// A kernel's code is taken to be as large as its PTX body's text (not measured: SASS
// takes 16 bytes an instruction, a line of PTX about as many characters); a module's code
// takes whole 2 MiB driver pages, so its first loaded kernel costs one page.
// Shared state and helpers: src/sim/cuda_driver.h.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "src/common/raw_log.h"
#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"
#include "src/sim/ptx.h"

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

GS_SIM_CUDA(cuModuleLoadData)(CUmodule* module, const void* image) {
  GS_REQUIRE_INIT();
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::vector<PtxKernel> kernels;
  if (!ParsePtxKernels(static_cast<const char*>(image), &kernels)) {
    GS_LOG(kWarn, "cuModuleLoadData: the simulator loads PTX text only (no .entry found)");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  // The module's .global variables take device memory in 2 MiB pages: a 64 MiB .global
  // added 64 MiB to NVML's per-process figure on the H100 (docs/measurements/h100-driver.md).
  uint64_t globals = PtxGlobalBytes(static_cast<const char*>(image));
  uint64_t charge = globals > Spec(c->device).memory_total ? UINT64_MAX : RoundUp(globals, kDriverPage);
  if (charge && !node()->Reserve(c->device, charge)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* m = new Module;
  m->global_bytes = charge;
  m->ctx = c;
  for (auto& k : kernels) {
    auto f = std::make_unique<Function>();
    f->kind = IsSpinKernel(k.name) ? KernelKind::kSpin : KernelKind::kGeneric;
    f->name = std::move(k.name);
    f->code_bytes = k.body_bytes;
    f->module = m;
    m->functions.push_back(std::move(f));
  }
  if (!g_driver->lazy_loading) {  // EAGER: every kernel's code now, or no module
    for (auto& f : m->functions)
      if (EnsureLoaded(f.get()) != CUDA_SUCCESS) {
        if (m->code_charged) node()->Release(c->device, m->code_charged);
        if (m->global_bytes) node()->Release(c->device, m->global_bytes);
        delete m;
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
  }
  {
    std::lock_guard<std::mutex> lock(g_driver->mu);
    c->modules.push_back(m);
  }
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

CUresult gs::sim::EnsureLoaded(Function* fn) {
  if (fn->loaded.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  if (fn->loaded.load(std::memory_order_relaxed)) return CUDA_SUCCESS;
  Module* m = fn->module;
  if (m == nullptr || m->ctx == nullptr) return CUDA_SUCCESS;  // its context is gone: nothing to charge
  uint64_t code = m->code_bytes + fn->code_bytes;
  uint64_t pages = code > Spec(m->ctx->device).memory_total ? UINT64_MAX : RoundUp(code, kDriverPage);
  if (pages > m->code_charged) {
    if (!node()->Reserve(m->ctx->device, pages - m->code_charged)) return CUDA_ERROR_OUT_OF_MEMORY;
    m->code_charged = pages;
  }
  m->code_bytes = code;
  fn->loaded.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuModuleGetLoadingMode)(CUmoduleLoadingMode* mode) {
  GS_REQUIRE_INIT();
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = g_driver->lazy_loading ? CU_MODULE_LAZY_LOADING : CU_MODULE_EAGER_LOADING;
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
      if (m->global_bytes + m->code_charged) node()->Release(c->device, m->global_bytes + m->code_charged);
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
      // Lazy loading: the kernel's code goes onto the card now.
      if (CUresult rc = EnsureLoaded(f.get()); rc != CUDA_SUCCESS) return rc;
      *hfunc = reinterpret_cast<CUfunction>(f.get());
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}

namespace {
Function* FindFunction(Module* m, const char* name) {
  for (auto& f : m->functions)
    if (f->name == name) return f.get();
  return nullptr;
}
}  // namespace

// Libraries (CUDA 12's context-independent loading): the simulator loads the module into
// the current context right away (its .global variables; kernels as above), so a context
// must be current (the real driver loads into each context as it is used). A CUkernel is
// the Function itself, usable as a CUfunction.
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

// A CUkernel is context-independent: resolving one loads nothing (lazy loading); the
// kernel is loaded by cuKernelGetFunction or its first launch.
GS_SIM_CUDA(cuLibraryGetKernel)(CUkernel* pKernel, CUlibrary library, const char* name) {
  GS_REQUIRE_INIT();
  auto* m = reinterpret_cast<Module*>(library);
  if (pKernel == nullptr || m == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* f = FindFunction(m, name);
  if (f == nullptr) return CUDA_ERROR_NOT_FOUND;
  *pKernel = reinterpret_cast<CUkernel>(f);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuKernelGetFunction)(CUfunction* pFunc, CUkernel kernel) {
  GS_REQUIRE_INIT();
  auto* f = reinterpret_cast<Function*>(kernel);
  if (pFunc == nullptr || f == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult rc = EnsureLoaded(f); rc != CUDA_SUCCESS) return rc;
  *pFunc = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
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
