#include "src/platform/driver_loader.h"

#include <dlfcn.h>
#include <unistd.h>

namespace gs::platform {
namespace {
const char* const kLibDirs[] = {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu",
                                "/lib/x86_64-linux-gnu",     "/lib64",     "/usr/lib"};

StatusOr<void*> Open(const std::string& driver_root, const std::string& soname, std::string* path) {
  auto found = FindDriverLibrary(driver_root, soname);
  if (!found.ok()) return found.status();
  *path = *found;
  void* h = dlopen(path->c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    return Unavailable("cannot load " + *path + ": " + (why ? why : "unknown error"));
  }
  return h;
}
}  // namespace

StatusOr<std::string> FindDriverLibrary(const std::string& driver_root, const std::string& soname) {
  if (driver_root.empty() || driver_root == "/") return soname;
  for (const char* dir : kLibDirs) {
    std::string p = driver_root + dir + "/" + soname;
    if (access(p.c_str(), R_OK) == 0) return p;
  }
  return NotFound(soname + " not found under driver root " + driver_root);
}

Status LoadNvml(const std::string& driver_root, NvmlApi* api) {
  auto h = Open(driver_root, "libnvidia-ml.so.1", &api->path);
  if (!h.ok()) return h.status();
  api->handle = *h;
#define GS_NVML_SYM(ret, name, params, args) api->name = reinterpret_cast<ret(*) params>(dlsym(api->handle, #name));
#include "src/platform/nvml_symbols.def"
#undef GS_NVML_SYM
  if (api->nvmlInit_v2 == nullptr) return Unavailable(api->path + " has no nvmlInit_v2: not an NVML library");
  return Status::Ok();
}

Status LoadCuda(const std::string& driver_root, CudaApi* api) {
  auto h = Open(driver_root, "libcuda.so.1", &api->path);
  if (!h.ok()) return h.status();
  api->handle = *h;
#define GS_CUDA_SYM(name, params, args) api->name = reinterpret_cast<CUresult(*) params>(dlsym(api->handle, #name));
#include "src/platform/cuda_symbols.def"
#undef GS_CUDA_SYM
  if (api->cuInit == nullptr) return Unavailable(api->path + " has no cuInit: not a CUDA driver");
  return Status::Ok();
}

}  // namespace gs::platform
