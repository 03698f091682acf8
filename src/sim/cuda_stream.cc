// The simulated CUDA driver API, streams and events.
// Shared state and helpers: src/sim/cuda_driver.h.
#include <algorithm>

#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

GS_SIM_CUDA(cuStreamCreateWithPriority)(CUstream* phStream, unsigned int flags, int priority) {
  GS_REQUIRE_INIT();
  if (phStream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto* st = new Stream;
  st->ctx = c;
  st->flags = flags;
  st->priority = priority;
  *phStream = reinterpret_cast<CUstream>(st);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuStreamCreate)(CUstream* phStream, unsigned int Flags) {
  return gs_sim_cuda_cuStreamCreateWithPriority(phStream, Flags, 0);
}

GS_SIM_CUDA(cuStreamDestroy_v2)(CUstream hStream) {
  GS_REQUIRE_INIT();
  Stream* st = reinterpret_cast<Stream*>(hStream);
  if (st == nullptr || IsNullStream(st)) return CUDA_ERROR_INVALID_HANDLE;
  delete st;  // queued work still completes on the GPU timeline
  return CUDA_SUCCESS;
}

// The context a stream belongs to (the current one for the NULL stream).
GS_SIM_CUDA(cuStreamGetCtx)(CUstream hStream, CUcontext* pctx) {
  GS_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *pctx = reinterpret_cast<CUcontext>(st->ctx);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuStreamGetCtx_ptsz, cuStreamGetCtx)

GS_SIM_CUDA(cuStreamSynchronize)(CUstream hStream) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (st->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (IsNullStream(st))
    WaitContext(st->ctx);
  else
    WaitStream(st);
  TrimPoolsAtSync(st->ctx->device);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuStreamSynchronize_ptsz, cuStreamSynchronize)

GS_SIM_CUDA(cuStreamQuery)(CUstream hStream) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return node()->WorkDone(st->ctx->device, StreamOrderTail(st)) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
GS_SIM_CUDA_SAME(cuStreamQuery_ptsz, cuStreamQuery)

GS_SIM_CUDA(cuEventCreate)(CUevent* phEvent, unsigned int Flags) {
  GS_REQUIRE_INIT();
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new CudaEvent;
  e->flags = Flags;
  *phEvent = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuEventDestroy_v2)(CUevent hEvent) {
  GS_REQUIRE_INIT();
  if (hEvent == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<CudaEvent*>(hEvent);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuEventRecord)(CUevent hEvent, CUstream hStream) {
  GS_REQUIRE_INIT();
  auto* e = reinterpret_cast<CudaEvent*>(hEvent);
  Stream* st = ResolveStream(hStream);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  e->device = st->ctx->device;
  e->mark = StreamOrderTail(st);
  e->recorded_at = Now();
  e->recorded = true;
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuEventRecord_ptsz, cuEventRecord)

GS_SIM_CUDA(cuEventRecordWithFlags)(CUevent hEvent, CUstream hStream, unsigned int) {
  return gs_sim_cuda_cuEventRecord(hEvent, hStream);
}
GS_SIM_CUDA_SAME(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags)

GS_SIM_CUDA(cuEventQuery)(CUevent hEvent) {
  GS_REQUIRE_INIT();
  auto* e = reinterpret_cast<CudaEvent*>(hEvent);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return EventDone(e) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

GS_SIM_CUDA(cuEventSynchronize)(CUevent hEvent) {
  GS_REQUIRE_INIT();
  auto* e = reinterpret_cast<CudaEvent*>(hEvent);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (e->recorded) node()->WaitWork(e->device, e->mark);
  if (e->recorded) TrimPoolsAtSync(e->device);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuEventElapsedTime_v2)(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  GS_REQUIRE_INIT();
  auto* a = reinterpret_cast<CudaEvent*>(hStart);
  auto* b = reinterpret_cast<CudaEvent*>(hEnd);
  if (pMilliseconds == nullptr || a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!a->recorded || !b->recorded) return CUDA_ERROR_INVALID_HANDLE;
  if (!EventDone(a) || !EventDone(b)) return CUDA_ERROR_NOT_READY;
  *pMilliseconds = static_cast<float>(static_cast<double>(EventTime(b) - EventTime(a)) / 1e6);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuEventElapsedTime, cuEventElapsedTime_v2)

GS_SIM_CUDA(cuStreamWaitEvent)(CUstream hStream, CUevent hEvent, unsigned int) {
  GS_REQUIRE_INIT();
  auto* e = reinterpret_cast<CudaEvent*>(hEvent);
  Stream* st = ResolveStream(hStream);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(st->mu);
  // Work of one process on one device runs in launch order: the wait holds by itself.
  // Across devices the simulator does not order work (a documented simplification).
  if (e->recorded && e->device == st->ctx->device) st->tail = std::max(st->tail, e->mark);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuStreamWaitEvent_ptsz, cuStreamWaitEvent)
