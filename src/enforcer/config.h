// The enforcer's configuration: HAMi-core's environment contract (ARCHITECTURE.md 3.1)
// plus the read-only limits file the node agent mounts.
//
// Precedence: when the limits file exists it is authoritative and the environment can
// only tighten a limit, never loosen it; without it the environment is the source.
// A value that cannot be parsed is an error that names the variable, and it never
// loosens anything: a bad memory limit denies device memory (limit of 1 byte) rather
// than silently running unlimited.
//
// Pure and allocation-free: called from the library constructor into fixed buffers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gs::enforcer {

inline constexpr int kMaxDevices = 16;
inline constexpr const char* kLimitsFile = "/etc/gpuslice/limits";

enum class CorePolicy { kDefault, kForce, kDisable };

struct Config {
  uint64_t memory_limit[kMaxDevices] = {};  // bytes; 0 = none
  uint32_t sm_limit[kMaxDevices] = {};      // percent; 0 = none (values >= 100 become 0)
  bool oversubscribe = false;
  CorePolicy core_policy = CorePolicy::kDefault;
  int priority = 1;  // CUDA_TASK_PRIORITY: lower = higher priority
  int log_level = 2;
  char region_path[512] = {};  // CUDA_DEVICE_MEMORY_SHARED_CACHE; empty = private
  // GPUSLICE_CARDS_DIR: where the card regions of the node's GPUs are (one file per GPU
  // UUID, shared by all containers computing on it); empty = beside the region.
  char cards_dir[512] = {};
  bool limits_file_used = false;
  uint64_t context_overhead = 256ull << 20;  // GPUSLICE_CONTEXT_OVERHEAD
  char errors[1024] = {};                    // human-readable problems, "; "-separated
};

// Looks a variable up in a NULL-terminated "KEY=VALUE" array.
const char* FindVar(const char* const* vars, const char* key);

// Builds the configuration. file_vars: the limits file's lines as "KEY=VALUE" (nullptr
// when there is no file); env: the process environment.
void BuildConfig(const char* const* file_vars, const char* const* env, Config* out);

// Splits limits-file text in place into at most max-1 "KEY=VALUE" entries (comments and
// blank lines dropped), NULL-terminated.
void SplitLimitsFile(char* text, const char** out, size_t max);

}  // namespace gs::enforcer
