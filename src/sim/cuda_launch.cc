// The simulated CUDA driver API, launches: a kernel's run time from its configuration,
// queued on its stream.
// Shared state and helpers: src/sim/cuda_driver.h.
#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

int64_t gs::sim::SpinParam(void** params, void** extra) {
  if (params && params[0]) return static_cast<int64_t>(*static_cast<const uint64_t*>(params[0]));
  for (int i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END; i += 2)
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER && extra[i + 1])
      return static_cast<int64_t>(*static_cast<const uint64_t*>(extra[i + 1]));
  return 0;
}

namespace {
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
  // A kernel not resolved before (a library's CUkernel, lazy loading) is loaded now.
  if (CUresult rc = EnsureLoaded(fn); rc != CUDA_SUCCESS) return rc;
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
