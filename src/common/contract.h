// The contract between what grants a slice (the model, the node agent, `gpuslice run`)
// and what enforces it (the enforcer, the region, the simulator): the names of the
// environment variables and limits-file keys (docs/configuration.md), where the limits file
// is, how many devices one container may see, and the compute-share policies. Written
// once here so a writer and a reader can never drift apart (tested end to end by
// tests/limits_contract_test.cc).
//
// Allocation-free and dependency-free (no std::string, no I/O): the enforcer and the
// simulator include it from inside other people's processes. Thread-safe: constants and
// pure functions only.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace gs::contract {

// Devices one container (and one region, one simulated node) can hold.
inline constexpr int kMaxDevices = 16;

// The read-only limits file the node agent mounts into every sliced container; when it
// exists it is authoritative (the environment may only tighten). Format: one KEY=VALUE per
// line, `#` comments, blank lines ignored, the keys below.
inline constexpr const char* kLimitsFile = "/etc/gpuslice/limits";
// Test-only path to a limits file; honoured only when kLimitsFile is absent.
inline constexpr const char* kEnvLimitsFileOverride = "GPUSLICE_LIMITS_FILE";
// `gpuslice run`'s limits file (in its run directory, same format), for a process with no
// limits file: its GPUSLICE_DEVICE_UUID_<i> bind the limits to the granted cards and its
// limits may only tighten the environment's. Nothing else in it is read, and it is ignored
// under a limits file, so naming another file can never loosen anything
// (docs/enforcer.md, "Threat model").
inline constexpr const char* kEnvRunLimitsFile = "GPUSLICE_RUN_LIMITS_FILE";

// Keys, both environment variables and limits-file keys. `<i>` suffixes ("_0", "_1", ...)
// name the i-th device granted to the container.
inline constexpr const char* kMemoryLimit = "CUDA_DEVICE_MEMORY_LIMIT";  // + optional _<i>
inline constexpr const char* kSmLimit = "CUDA_DEVICE_SM_LIMIT";          // + optional _<i>
// The UUID ("GPU-...") of the i-th granted device: binds CUDA_DEVICE_*_LIMIT_<i> to that
// card whatever order the process sees its devices in (CUDA_VISIBLE_DEVICES may reorder).
inline constexpr const char* kDeviceUuid = "GPUSLICE_DEVICE_UUID";  // always with _<i>
// The tenant entry (0..63) of the i-th granted device's card region that the host handed
// this container (src/node/card_entries.h); read only from a limits file. Absent: the
// enforcer claims a free entry of the card itself.
inline constexpr const char* kCardEntry = "GPUSLICE_CARD_ENTRY";  // always with _<i>
inline constexpr const char* kRegionPath = "CUDA_DEVICE_MEMORY_SHARED_CACHE";
inline constexpr const char* kOversubscribe = "CUDA_OVERSUBSCRIBE";
inline constexpr const char* kCorePolicy = "GPU_CORE_UTILIZATION_POLICY";
inline constexpr const char* kPriority = "CUDA_TASK_PRIORITY";
inline constexpr const char* kLogLevel = "LIBCUDA_LOG_LEVEL";
inline constexpr const char* kContextOverhead = "GPUSLICE_CONTEXT_OVERHEAD";
inline constexpr const char* kCardsDir = "GPUSLICE_CARDS_DIR";
// The best (lowest) CUDA_TASK_PRIORITY any tenant of the cards this container computes on
// may hold: the node agent grants every container 1 (a container may only lower its own),
// `gpuslice run` lets a run ask for 0. The card region is writable by every tenant, so an
// enforcer never believes a priority better than this from another tenant's card entry
// (docs/enforcer.md, "Threat model"). Absent: 0. With the limits file the environment may
// only lower it (defer to more tenants), never raise it.
inline constexpr const char* kCardBestPriority = "GPUSLICE_CARD_BEST_PRIORITY";
// Priorities are 0 (highest) .. kWorstPriority.
inline constexpr int kWorstPriority = 999;

// How a compute share behaves when the card has idle capacity. Stored in the region as a
// uint32_t: the values are part of its layout.
enum class CorePolicy : uint32_t { kDefault = 0, kForce = 1, kDisable = 2 };

constexpr const char* CorePolicyName(CorePolicy p) {
  return p == CorePolicy::kForce ? "force" : p == CorePolicy::kDisable ? "disable" : "default";
}

namespace internal {
constexpr bool SameIgnoringCase(const char* a, const char* b) {
  for (; *a && *b; ++a, ++b) {
    char x = *a >= 'A' && *a <= 'Z' ? static_cast<char>(*a - 'A' + 'a') : *a;
    if (x != *b) return false;
  }
  return *a == *b;
}
}  // namespace internal

// Parses a policy name as written by CorePolicyName (any case; empty = default). False,
// *out untouched, for anything else.
constexpr bool ParseCorePolicy(const char* s, CorePolicy* out) {
  if (s == nullptr) return false;
  for (CorePolicy p : {CorePolicy::kDefault, CorePolicy::kForce, CorePolicy::kDisable}) {
    if (internal::SameIgnoringCase(s, CorePolicyName(p)) || (*s == 0 && p == CorePolicy::kDefault)) {
      *out = p;
      return true;
    }
  }
  return false;
}

}  // namespace gs::contract
