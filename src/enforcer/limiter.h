// The compute limiter: holds a container to its SM share on each device by taking turns
// on the card with the card's other tenants (src/region/card.h; the why is in
// docs/enforcer.md, "Compute share").
//
// A launch goes ahead while this process's container holds the card's turn; otherwise it
// waits until the turn comes. Every tenant can write the card, so each process also keeps
// a private ledger of what the card owes it at its trusted share, and goes ahead on its own
// for a while when the card stops handing it turns fairly (src/enforcer/starvation_guard.h):
// nothing a broken or hostile tenant writes can stall a program or take its
// share. While the container
// holds the turn the card runs only its work, so the wall time of the turn is the GPU
// time it took: that is what its credit is charged. A per-process controller thread ends
// the process's part of a turn when the turn's time is up or the process stopped
// launching (then the turn is handed on, so idle turns do not waste the card): it closes
// the gate, waits for the process's queued work to finish (cuCtxSynchronize) and leaves
// the turn; the last process of the container to leave hands the card over.
//
// Launch path with a share: one relaxed load and one relaxed add while the turn is held;
// no syscall, lock or NVML call. Without a share: one load and compare.
#pragma once

#include "src/platform/cuda_api.h"

namespace gs::enforcer {

class Limiter {
 public:
  // Called on every launch path before the driver, for a launch on `stream`: gated on the
  // device of the stream's context (the current context's for the null and per-thread
  // streams).
  static void Gate(CUstream stream);
  // The same for a launch on region device dev through ctx (not necessarily current): a
  // launch on several devices at once gates the one of them that has a share.
  static void GateOn(int dev, CUcontext ctx, CUstream stream);
  // A context went away (destroyed, reset, a green context destroyed): its queued work is
  // no longer drained, and a context made later at the same address is resolved anew.
  static void ContextGone(CUcontext ctx);
  // A stream went away: a stream made later at the same address is resolved anew.
  static void StreamGone();
  // Whether any launch may wait for turns (a share somewhere, policy not `disable`), and
  // whether launches on region device dev do.
  static bool Active();
  static bool Shared(int dev);
  // Stream captures in progress in this process (launches into them are not gated).
  static void CaptureStarted();
  static void CaptureEnded();
  // Whether any stream capture may be in progress in this process.
  static bool AnyCapture();
};

}  // namespace gs::enforcer
