// NVML as the enforcer itself uses it: started once, its cards' handles found by UUID.
//
// NVML's first use costs a process 14-17 ms on an H200 (docs/measurements/h200-driver.md,
// "What NVML's first use costs a process"): nvmlInit_v2 with the library's load, then the
// first handle lookup. The context charge needs both, on the path of the first context.
// cuInit therefore starts them on a thread of their own, beside the driver's own start-up
// (about 300 ms there), and the first charge finds them done or waits for the rest.
#pragma once

#include "src/platform/nvml_api.h"

namespace gs::enforcer {

// Starts NVML on a detached thread unless it is started or starting. Called from cuInit.
void StartNvmlInBackground();

// The handle of the card with this UUID, starting NVML first (or waiting for the start
// under way). False when NVML is missing, fails to start, or knows no such card.
bool NvmlCardByUuid(const char* uuid, nvmlDevice_t* out);

// Whether NVML has started and works; never waits (for the limiter's controller thread).
bool NvmlStarted();

// In a forked child: a start the parent had under way has no thread here; the next use
// starts NVML again.
void NvmlCardsAfterForkInChild();

}  // namespace gs::enforcer
