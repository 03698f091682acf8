// The simulated CUDA driver API, launches: a kernel's run time from its configuration,
// queued on its stream. Every entry point CUDA 13's cuda.h still declares: cuLaunchKernel,
// cuLaunchKernelEx, cooperative launches on one device or several
// (cuLaunchCooperativeKernelMultiDevice), and the deprecated cuLaunch / cuLaunchGrid /
// cuLaunchGridAsync with the function state they read (cuFuncSetBlockShape,
// cuFuncSetSharedSize, cuParamSetSize, cuParamSeti/f/v).
// Shared state and helpers: src/sim/cuda_driver.h.
#include <cstring>

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

// ---- several devices at once --------------------------------------------------------------

// One kernel per device, each on a stream of its own (not the NULL stream), all of the same
// shape. The simulator keeps no order between devices, so the launches only queue on their
// streams (the flags' pre- and post-launch synchronisation across devices is not modelled).
GS_SIM_CUDA(cuLaunchCooperativeKernelMultiDevice)
(CUDA_LAUNCH_PARAMS* launchParamsList, unsigned int numDevices, unsigned int flags) {
  GS_REQUIRE_INIT();
  constexpr unsigned kKnownFlags = CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC |
                                   CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC;
  if (launchParamsList == nullptr || numDevices == 0 || (flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_LAUNCH_PARAMS& first = launchParamsList[0];
  for (unsigned i = 0; i < numDevices; ++i) {
    const CUDA_LAUNCH_PARAMS& p = launchParamsList[i];
    if (p.function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (p.hStream == nullptr || p.hStream == CU_STREAM_LEGACY || p.hStream == CU_STREAM_PER_THREAD)
      return CUDA_ERROR_INVALID_VALUE;
    if (p.gridDimX != first.gridDimX || p.gridDimY != first.gridDimY || p.gridDimZ != first.gridDimZ ||
        p.blockDimX != first.blockDimX || p.blockDimY != first.blockDimY || p.blockDimZ != first.blockDimZ ||
        p.sharedMemBytes != first.sharedMemBytes)
      return CUDA_ERROR_INVALID_VALUE;
    const int device = reinterpret_cast<Stream*>(p.hStream)->ctx->device;
    for (unsigned j = 0; j < i; ++j)
      if (reinterpret_cast<Stream*>(launchParamsList[j].hStream)->ctx->device == device)
        return CUDA_ERROR_INVALID_VALUE;  // no two kernels on one device
  }
  for (unsigned i = 0; i < numDevices; ++i) {
    const CUDA_LAUNCH_PARAMS& p = launchParamsList[i];
    if (CUresult rc = Launch(p.function, p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ,
                             p.hStream, p.kernelParams, nullptr);
        rc != CUDA_SUCCESS)
      return rc;
  }
  return CUDA_SUCCESS;
}

// ---- the deprecated launch API: state set on the function, then launched -------------------

namespace {
// Runs `set` on f's deprecated launch state (made on first use) under its lock.
template <typename Set>
CUresult WithLegacyState(CUfunction f, Set set) {
  GS_REQUIRE_INIT();
  auto* fn = reinterpret_cast<Function*>(f);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(fn->legacy_mu);
  if (!fn->legacy) fn->legacy = std::make_unique<LegacyLaunchState>();
  return set(*fn->legacy);
}

// Copies `bytes` at `offset` into the parameter buffer cuParamSetSize sized.
CUresult SetParam(CUfunction f, int offset, const void* value, unsigned bytes) {
  if (value == nullptr && bytes > 0) return CUDA_ERROR_INVALID_VALUE;
  return WithLegacyState(f, [&](LegacyLaunchState& st) {
    if (offset < 0 || static_cast<uint64_t>(offset) + bytes > st.param_bytes) return CUDA_ERROR_INVALID_VALUE;
    memcpy(st.params + offset, value, bytes);
    return CUDA_SUCCESS;
  });
}

// A gw x gh grid of the block shape set on f, its parameters passed as one buffer.
CUresult LaunchWithState(CUfunction f, int gw, int gh, CUstream s) {
  GS_REQUIRE_INIT();
  auto* fn = reinterpret_cast<Function*>(f);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (gw <= 0 || gh <= 0) return CUDA_ERROR_INVALID_VALUE;
  unsigned block[3] = {};
  alignas(8) unsigned char params[LegacyLaunchState::kMaxParamBytes + 8];  // + 8: SpinParam reads a u64
  size_t param_bytes = 0;
  {
    std::lock_guard<std::mutex> lock(fn->legacy_mu);
    if (fn->legacy) {
      memcpy(block, fn->legacy->block, sizeof(block));
      param_bytes = fn->legacy->param_bytes;
      memcpy(params, fn->legacy->params, param_bytes);
    }
  }
  memset(params + param_bytes, 0, 8);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &param_bytes,
                   CU_LAUNCH_PARAM_END};
  return Launch(f, static_cast<unsigned>(gw), static_cast<unsigned>(gh), 1, block[0], block[1], block[2], s, nullptr,
                extra);
}
}  // namespace

GS_SIM_CUDA(cuFuncSetBlockShape)(CUfunction hfunc, int x, int y, int z) {
  return WithLegacyState(hfunc, [&](LegacyLaunchState& st) {
    if (x <= 0 || y <= 0 || z <= 0) return CUDA_ERROR_INVALID_VALUE;
    st.block[0] = static_cast<unsigned>(x);
    st.block[1] = static_cast<unsigned>(y);
    st.block[2] = static_cast<unsigned>(z);
    return CUDA_SUCCESS;
  });
}

GS_SIM_CUDA(cuFuncSetSharedSize)(CUfunction hfunc, unsigned int bytes) {
  return WithLegacyState(hfunc, [&](LegacyLaunchState& st) {
    st.shared_bytes = bytes;
    return CUDA_SUCCESS;
  });
}

GS_SIM_CUDA(cuParamSetSize)(CUfunction hfunc, unsigned int numbytes) {
  return WithLegacyState(hfunc, [&](LegacyLaunchState& st) {
    if (numbytes > LegacyLaunchState::kMaxParamBytes) return CUDA_ERROR_INVALID_VALUE;
    st.param_bytes = numbytes;
    return CUDA_SUCCESS;
  });
}

GS_SIM_CUDA(cuParamSeti)(CUfunction hfunc, int offset, unsigned int value) {
  return SetParam(hfunc, offset, &value, sizeof(value));
}

GS_SIM_CUDA(cuParamSetf)(CUfunction hfunc, int offset, float value) {
  return SetParam(hfunc, offset, &value, sizeof(value));
}

GS_SIM_CUDA(cuParamSetv)(CUfunction hfunc, int offset, void* ptr, unsigned int numbytes) {
  return SetParam(hfunc, offset, ptr, numbytes);
}

GS_SIM_CUDA(cuLaunch)(CUfunction f) {
  return LaunchWithState(f, 1, 1, nullptr);
}

GS_SIM_CUDA(cuLaunchGrid)(CUfunction f, int grid_width, int grid_height) {
  return LaunchWithState(f, grid_width, grid_height, nullptr);
}

GS_SIM_CUDA(cuLaunchGridAsync)(CUfunction f, int grid_width, int grid_height, CUstream hStream) {
  return LaunchWithState(f, grid_width, grid_height, hStream);
}
