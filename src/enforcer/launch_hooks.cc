// Kernel launches: every launch entry point of the driver API (cuLaunchKernel, Ex,
// cooperative on one device or several, graphs, and the deprecated cuLaunch, cuLaunchGrid
// and cuLaunchGridAsync) passes the compute limiter before reaching the driver. With no SM
// limit the hook is one load and compare.
// A kernel launched for the first time may bring its lazily loaded code onto the card:
// the launch is noted afterwards for the memory books (charging.h, NoteFunctionUsed).
#include "src/common/raw_log.h"
#include "src/enforcer/charging.h"
#include "src/enforcer/enforcer.h"
#include "src/enforcer/limiter.h"

using namespace gs::enforcer;  // NOLINT: C ABI definitions below

// Stream capture: while any stream of this process is capturing, the gate asks the driver
// whether a launch is being recorded rather than run; otherwise it need not ask.
#define GS_CAPTURE_BEGIN(call)                           \
  do {                                                   \
    if (!CudaReady()) return CUDA_ERROR_NOT_INITIALIZED; \
    CUresult rc_ = (call);                               \
    if (rc_ == CUDA_SUCCESS) Limiter::CaptureStarted();  \
    return rc_;                                          \
  } while (0)
#define GS_CAPTURE_END(call)                                                    \
  do {                                                                          \
    if (!CudaReady()) return CUDA_ERROR_NOT_INITIALIZED;                        \
    CUresult rc_ = (call);                                                      \
    /* capture ends whatever the result, unless the stream was not capturing */ \
    if (rc_ != CUDA_ERROR_ILLEGAL_STATE) Limiter::CaptureEnded();               \
    return rc_;                                                                 \
  } while (0)

GS_HOOK(cuStreamBeginCapture) CUresult gs_hook_cuStreamBeginCapture(CUstream s) {
  GS_CAPTURE_BEGIN(g_cuda.cuStreamBeginCapture(s));
}
GS_HOOK(cuStreamBeginCapture_ptsz) CUresult gs_hook_cuStreamBeginCapture_ptsz(CUstream s) {
  GS_CAPTURE_BEGIN(g_cuda.cuStreamBeginCapture_ptsz(s));
}
GS_HOOK(cuStreamBeginCapture_v2) CUresult gs_hook_cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m) {
  GS_CAPTURE_BEGIN(g_cuda.cuStreamBeginCapture_v2(s, m));
}
GS_HOOK(cuStreamBeginCapture_v2_ptsz)
CUresult gs_hook_cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m) {
  GS_CAPTURE_BEGIN(g_cuda.cuStreamBeginCapture_v2_ptsz(s, m));
}
GS_HOOK(cuStreamBeginCaptureToGraph)
CUresult gs_hook_cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e,
                                             size_t n, CUstreamCaptureMode m) {
  GS_CAPTURE_BEGIN(g_cuda.cuStreamBeginCaptureToGraph(s, g, d, e, n, m));
}
GS_HOOK(cuStreamBeginCaptureToGraph_ptsz)
CUresult gs_hook_cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e,
                                                  size_t n, CUstreamCaptureMode m) {
  GS_CAPTURE_BEGIN(g_cuda.cuStreamBeginCaptureToGraph_ptsz(s, g, d, e, n, m));
}
// What the capture allocated becomes the graph's charge (charging.h, CaptureEnded).
namespace {
CUresult EndCapture(CUresult (*real)(CUstream, CUgraph*), CUstream s, CUgraph* g) {
  CUresult rc = real(s, g);
  CaptureEnded(reinterpret_cast<uint64_t>(s), rc, rc == CUDA_SUCCESS && g ? reinterpret_cast<uint64_t>(*g) : 0);
  return rc;
}
}  // namespace
GS_HOOK(cuStreamEndCapture) CUresult gs_hook_cuStreamEndCapture(CUstream s, CUgraph* g) {
  GS_CAPTURE_END(EndCapture(g_cuda.cuStreamEndCapture, s, g));
}
GS_HOOK(cuStreamEndCapture_ptsz) CUresult gs_hook_cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) {
  GS_CAPTURE_END(EndCapture(g_cuda.cuStreamEndCapture_ptsz, s, g));
}
namespace region = gs::region;

// The gate caches the device of the stream a thread launched on last: a destroyed stream's
// handle may name another context's stream next.
GS_HOOK(cuStreamDestroy_v2) CUresult gs_hook_cuStreamDestroy_v2(CUstream s) {
  if (!CudaReady()) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = g_cuda.cuStreamDestroy_v2(s);
  Limiter::StreamGone();
  return rc;
}
GS_HOOK(cuStreamDestroy) CUresult gs_hook_cuStreamDestroy(CUstream s) {
  if (!CudaReady()) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = (g_cuda.cuStreamDestroy ? g_cuda.cuStreamDestroy : g_cuda.cuStreamDestroy_v2)(s);
  Limiter::StreamGone();
  return rc;
}

#define GS_LAUNCH_GATE(stream)                           \
  do {                                                   \
    if (!CudaReady()) return CUDA_ERROR_NOT_INITIALIZED; \
    Limiter::Gate(stream);                               \
  } while (0)

GS_HOOK(cuLaunchKernel)
CUresult gs_hook_cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void** params,
                                void** extra) {
  GS_LAUNCH_GATE(s);
  CUresult rc = g_cuda.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
  NoteFunctionUsed(f);
  return rc;
}
GS_HOOK(cuLaunchKernel_ptsz)
CUresult gs_hook_cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                     unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void** params,
                                     void** extra) {
  GS_LAUNCH_GATE(s);
  CUresult rc = g_cuda.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
  NoteFunctionUsed(f);
  return rc;
}
GS_HOOK(cuLaunchKernelEx)
CUresult gs_hook_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  GS_LAUNCH_GATE(config ? config->hStream : nullptr);
  CUresult rc = g_cuda.cuLaunchKernelEx(config, f, params, extra);
  NoteFunctionUsed(f);
  return rc;
}
GS_HOOK(cuLaunchKernelEx_ptsz)
CUresult gs_hook_cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  GS_LAUNCH_GATE(config ? config->hStream : nullptr);
  CUresult rc = g_cuda.cuLaunchKernelEx_ptsz(config, f, params, extra);
  NoteFunctionUsed(f);
  return rc;
}
GS_HOOK(cuLaunchCooperativeKernel)
CUresult gs_hook_cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                           unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                           CUstream s, void** params) {
  GS_LAUNCH_GATE(s);
  CUresult rc = g_cuda.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params);
  NoteFunctionUsed(f);
  return rc;
}
GS_HOOK(cuLaunchCooperativeKernel_ptsz)
CUresult gs_hook_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                                CUstream s, void** params) {
  GS_LAUNCH_GATE(s);
  CUresult rc = g_cuda.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params);
  NoteFunctionUsed(f);
  return rc;
}
GS_HOOK(cuGraphLaunch) CUresult gs_hook_cuGraphLaunch(CUgraphExec g, CUstream s) {
  GS_LAUNCH_GATE(s);
  return g_cuda.cuGraphLaunch(g, s);
}
GS_HOOK(cuGraphLaunch_ptsz) CUresult gs_hook_cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
  GS_LAUNCH_GATE(s);
  return g_cuda.cuGraphLaunch_ptsz(g, s);
}

// The deprecated entry points launch with the block shape and parameters set on the
// function before (cuFuncSetBlockShape, cuParamSet*): cuLaunch and cuLaunchGrid on the
// NULL stream, cuLaunchGridAsync on its stream. A driver that no longer has one answers
// CUDA_ERROR_NOT_SUPPORTED.
GS_HOOK(cuLaunch) CUresult gs_hook_cuLaunch(CUfunction f) {
  if (CudaReady() && g_cuda.cuLaunch == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  GS_LAUNCH_GATE(nullptr);
  CUresult rc = g_cuda.cuLaunch(f);
  NoteFunctionUsed(f);
  return rc;
}
GS_HOOK(cuLaunchGrid) CUresult gs_hook_cuLaunchGrid(CUfunction f, int grid_width, int grid_height) {
  if (CudaReady() && g_cuda.cuLaunchGrid == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  GS_LAUNCH_GATE(nullptr);
  CUresult rc = g_cuda.cuLaunchGrid(f, grid_width, grid_height);
  NoteFunctionUsed(f);
  return rc;
}
GS_HOOK(cuLaunchGridAsync)
CUresult gs_hook_cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream s) {
  if (CudaReady() && g_cuda.cuLaunchGridAsync == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  GS_LAUNCH_GATE(s);
  CUresult rc = g_cuda.cuLaunchGridAsync(f, grid_width, grid_height, s);
  NoteFunctionUsed(f);
  return rc;
}

namespace {
// The region device of a stream's context (-1: it cannot be told), and that context.
int DeviceOfStream(CUstream s, CUcontext* ctx) {
  *ctx = nullptr;
  if (g_cuda.cuStreamGetCtx == nullptr || g_cuda.cuStreamGetCtx(s, ctx) != CUDA_SUCCESS || *ctx == nullptr) return -1;
  return DeviceOfOrdinal(OrdinalOfContext(*ctx));
}
}  // namespace

// One kernel on each of several devices, which start together. Each card hands out its
// turns on its own, so the launch can wait for the turn of one card only: waiting for a
// second card's, the first card's turn may end, and its kernel would then run outside any
// turn, charged to whoever holds the card next. So the launch is gated on the one of its
// devices that has a share, and refused (CUDA_ERROR_NOT_SUPPORTED) when two or more do.
GS_HOOK(cuLaunchCooperativeKernelMultiDevice)
CUresult gs_hook_cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* list, unsigned int n, unsigned int flags) {
  if (!CudaReady()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_cuda.cuLaunchCooperativeKernelMultiDevice == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (list != nullptr && Limiter::Active()) {
    int gated = -1;
    CUcontext gated_ctx = nullptr;
    CUstream gated_stream = nullptr;
    for (unsigned i = 0; i < n; ++i) {
      CUcontext ctx;
      int dev = DeviceOfStream(list[i].hStream, &ctx);
      if (!Limiter::Shared(dev) || dev == gated) continue;  // two on one device: the driver refuses it
      if (gated >= 0) {
        GS_LOG(kInfo,
               "cuLaunchCooperativeKernelMultiDevice refused: devices %d and %d both have a compute share, whose "
               "turns cannot be held together",
               gated, dev);
        return CUDA_ERROR_NOT_SUPPORTED;
      }
      gated = dev;
      gated_ctx = ctx;
      gated_stream = list[i].hStream;
    }
    if (gated >= 0) Limiter::GateOn(gated, gated_ctx, gated_stream);
  }
  CUresult rc = g_cuda.cuLaunchCooperativeKernelMultiDevice(list, n, flags);
  for (unsigned i = 0; list != nullptr && i < n; ++i) NoteFunctionUsed(list[i].function);
  return rc;
}
