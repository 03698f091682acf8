// Kernel launches: every launch path (plain, Ex, cooperative, graph) passes the compute
// limiter before reaching the driver. With no SM limit the hook is one load and compare.
// A kernel launched for the first time may bring its lazily loaded code onto the card:
// the launch is noted afterwards for the memory books (charging.h, NoteFunctionUsed).
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
GS_HOOK(cuStreamEndCapture) CUresult gs_hook_cuStreamEndCapture(CUstream s, CUgraph* g) {
  GS_CAPTURE_END(g_cuda.cuStreamEndCapture(s, g));
}
GS_HOOK(cuStreamEndCapture_ptsz) CUresult gs_hook_cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) {
  GS_CAPTURE_END(g_cuda.cuStreamEndCapture_ptsz(s, g));
}
namespace region = gs::region;

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
