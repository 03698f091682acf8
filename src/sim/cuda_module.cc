// The simulated CUDA driver API, modules and libraries: loading (a module costs its .global
// bytes), functions, kernels, attributes.
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
