// Loads the NVIDIA driver libraries at run time (never linked at build time) and binds
// every symbol of the tables into a struct of function pointers.
//
// A driver root may be given: "/" on a real node, the simulator's root (gpuslice sim up)
// on a simulated one; libraries are looked for in the root's usual library directories.
// A symbol missing from an older driver stays null. Load once, then use from any thread.
#pragma once

#include <string>

#include "src/common/status.h"
#include "src/platform/cuda_api.h"
#include "src/platform/nvml_api.h"

namespace gs::platform {

struct NvmlApi {
#define GS_NVML_SYM(ret, name, params, args) ret(*name) params = nullptr;
#include "src/platform/nvml_symbols.def"
#undef GS_NVML_SYM
  void* handle = nullptr;
  std::string path;
};

struct CudaApi {
#define GS_CUDA_SYM(name, params, args) CUresult(*name) params = nullptr;
#include "src/platform/cuda_symbols.def"
#undef GS_CUDA_SYM
  void* handle = nullptr;
  std::string path;
};

// Path of `soname` under driver_root, or soname itself when the root is "/" or empty
// (then the dynamic loader's search applies). NotFound when a non-system root lacks it.
StatusOr<std::string> FindDriverLibrary(const std::string& driver_root, const std::string& soname);

Status LoadNvml(const std::string& driver_root, NvmlApi* api);
Status LoadCuda(const std::string& driver_root, CudaApi* api);

}  // namespace gs::platform
