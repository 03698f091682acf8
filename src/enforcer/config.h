// The enforcer's configuration: HAMi-core's environment contract (docs/configuration.md,
// names in src/common/contract.h) plus the read-only limits file the node agent mounts.
//
// Precedence: when the limits file exists it is authoritative: limits, policy, priority,
// oversubscription, the region and the cards directory come from it, and the environment
// can only tighten a limit (a lower memory limit or share, `force` instead of `default`,
// a larger context charge, a worse priority), never loosen or redirect anything. Without
// the file the environment is the source (standalone use, drop-in for HAMi-core), which is
// no security boundary: whoever sets the environment can also drop the preload. There,
// `gpuslice run`'s own limits file binds the limits to the granted cards' UUIDs and may
// tighten them (ApplyRunLimits).
// A value that cannot be parsed is an error that names the variable, and it never
// loosens anything: a bad memory limit denies device memory (limit of 1 byte) rather
// than silently running unlimited.
//
// Pure and allocation-free: called from the library constructor into fixed buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/common/contract.h"

namespace gs::enforcer {

using contract::CorePolicy;
using contract::kLimitsFile;
using contract::kMaxDevices;

// What a context is charged when nothing better is known: the H100's measured footprint
// (518 MiB per context, NVML's per-process figure; docs/measurements/h100-driver.md).
inline constexpr uint64_t kDefaultContextOverhead = 518ull << 20;

struct Config {
  uint64_t memory_limit[kMaxDevices] = {};  // bytes; 0 = none
  uint32_t sm_limit[kMaxDevices] = {};      // percent; 0 = none (values >= 100 become 0)
  bool oversubscribe = false;
  CorePolicy core_policy = CorePolicy::kDefault;
  int priority = 1;  // CUDA_TASK_PRIORITY: lower = higher priority
  // GPUSLICE_CARD_BEST_PRIORITY: no other tenant's card entry is believed to have a better
  // priority than this (src/common/contract.h). Never worse than `priority`.
  int card_best_priority = 0;
  int log_level = 2;
  char region_path[512] = {};  // CUDA_DEVICE_MEMORY_SHARED_CACHE; empty = private
  // GPUSLICE_CARDS_DIR: where the card regions of the node's GPUs are (one file per GPU
  // UUID, shared by all containers computing on it); empty = beside the region.
  char cards_dir[512] = {};
  bool limits_file_used = false;
  // GPUSLICE_DEVICE_UUID_<i> from the limits file, or without one from `gpuslice run`'s
  // (ApplyRunLimits), never the environment: binds the i-th limits to that card; all empty
  // when no file names cards.
  char device_uuid[kMaxDevices][96] = {};
  // GPUSLICE_CARD_ENTRY_<i> + 1 from the limits file or `gpuslice run`'s, never the
  // environment: the tenant entry of the i-th device's card region the host handed this
  // container (src/node/card_entries.h); 0 = none (CardEntry in limits.h).
  uint8_t card_entry[kMaxDevices] = {};
  // GPUSLICE_CONTEXT_OVERHEAD: what a CUDA context is charged when the driver's real
  // footprint cannot be measured (docs/enforcer.md, "Memory"), and, when set, the least it
  // is charged even when measured. With the limits file the environment may only raise it.
  uint64_t context_overhead = kDefaultContextOverhead;
  uint64_t context_overhead_min = 0;
  char errors[1024] = {};  // human-readable problems, "; "-separated
};

// Looks a variable up in a NULL-terminated "KEY=VALUE" array.
const char* FindVar(const char* const* vars, const char* key);

// Builds the configuration. file_vars: the limits file's lines as "KEY=VALUE" (nullptr
// when there is no file); env: the process environment.
void BuildConfig(const char* const* file_vars, const char* const* env, Config* out);

// Applies `gpuslice run`'s limits file (contract::kEnvRunLimitsFile; run_vars as
// SplitLimitsFile gives them) to a configuration built without a limits file: its
// GPUSLICE_DEVICE_UUID_<i> bind the i-th limits to those cards, and its memory limits and
// shares apply where they are tighter. Nothing else is read from it; under a limits file
// (limits_file_used) it changes nothing, so it can only bind and tighten, never loosen.
void ApplyRunLimits(const char* const* run_vars, Config* c);

// Splits limits-file text in place into at most max-1 "KEY=VALUE" entries (comments and
// blank lines dropped), NULL-terminated.
void SplitLimitsFile(char* text, const char** out, size_t max);

}  // namespace gs::enforcer
