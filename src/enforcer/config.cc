#include "src/enforcer/config.h"

#include <cstdio>
#include <cstring>

#include "src/common/quantity.h"

namespace gs::enforcer {
namespace {

void AddError(Config* c, const char* fmt, const char* a, const char* b) {
  size_t n = strlen(c->errors);
  if (n >= sizeof(c->errors) - 2) return;
  snprintf(c->errors + n, sizeof(c->errors) - n, n ? "; " : "");
  n = strlen(c->errors);
  snprintf(c->errors + n, sizeof(c->errors) - n, fmt, a, b);
}

// Tightening rule: the authoritative value unless the other is stricter. 0 = unlimited.
uint64_t Tighter(uint64_t base, uint64_t other) {
  if (base == 0) return other;
  if (other == 0) return base;
  return other < base ? other : base;
}

// Reads one memory/SM setting from a source into value; *set tells whether it appeared.
bool ReadMemory(const char* const* vars, const char* key, Config* c, uint64_t* value) {
  const char* v = FindVar(vars, key);
  if (v == nullptr) return false;
  if (!ParseByteQuantity(v, value)) {
    AddError(c, "%s=%s is not a size (e.g. 4g, 4096m, 4294967296); device memory is denied", key, v);
    *value = 1;
  }
  return true;
}

bool ReadPercent(const char* const* vars, const char* key, Config* c, uint32_t* value) {
  const char* v = FindVar(vars, key);
  if (v == nullptr) return false;
  uint64_t x = 0;
  if (!ParseUnsigned(v, &x)) {
    AddError(c, "%s=%s is not a percentage; the smallest share (1%%) is used", key, v);
    x = 1;
  }
  *value = x >= 100 ? 0 : static_cast<uint32_t>(x);
  return true;
}

// Applies one source (file or env) onto per-device arrays.
void ReadSource(const char* const* vars, Config* c, uint64_t* mem, bool* mem_set, uint32_t* sm, bool* sm_set) {
  uint64_t all_mem = 0;
  bool has_all_mem = ReadMemory(vars, "CUDA_DEVICE_MEMORY_LIMIT", c, &all_mem);
  uint32_t all_sm = 0;
  bool has_all_sm = ReadPercent(vars, "CUDA_DEVICE_SM_LIMIT", c, &all_sm);
  for (int i = 0; i < kMaxDevices; ++i) {
    char key[64];
    snprintf(key, sizeof(key), "CUDA_DEVICE_MEMORY_LIMIT_%d", i);
    mem_set[i] = ReadMemory(vars, key, c, &mem[i]);
    if (!mem_set[i] && has_all_mem) {
      mem[i] = all_mem;
      mem_set[i] = true;
    }
    snprintf(key, sizeof(key), "CUDA_DEVICE_SM_LIMIT_%d", i);
    sm_set[i] = ReadPercent(vars, key, c, &sm[i]);
    if (!sm_set[i] && has_all_sm) {
      sm[i] = all_sm;
      sm_set[i] = true;
    }
  }
}

}  // namespace

const char* FindVar(const char* const* vars, const char* key) {
  if (vars == nullptr) return nullptr;
  size_t n = strlen(key);
  for (; *vars; ++vars)
    if (strncmp(*vars, key, n) == 0 && (*vars)[n] == '=') return *vars + n + 1;
  return nullptr;
}

void SplitLimitsFile(char* text, const char** out, size_t max) {
  size_t n = 0;
  char* p = text;
  while (*p && n + 1 < max) {
    char* line = p;
    while (*p && *p != '\n') ++p;
    if (*p) *p++ = 0;
    while (*line == ' ' || *line == '\t') ++line;
    size_t len = strlen(line);
    while (len && (line[len - 1] == ' ' || line[len - 1] == '\t' || line[len - 1] == '\r')) line[--len] = 0;
    if (*line == 0 || *line == '#') continue;
    if (strncmp(line, "export ", 7) == 0) line += 7;
    out[n++] = line;
  }
  out[n] = nullptr;
}

void BuildConfig(const char* const* file_vars, const char* const* env, Config* c) {
  uint64_t env_mem[kMaxDevices] = {}, file_mem[kMaxDevices] = {};
  uint32_t env_sm[kMaxDevices] = {}, file_sm[kMaxDevices] = {};
  bool env_mem_set[kMaxDevices] = {}, env_sm_set[kMaxDevices] = {};
  bool file_mem_set[kMaxDevices] = {}, file_sm_set[kMaxDevices] = {};
  ReadSource(env, c, env_mem, env_mem_set, env_sm, env_sm_set);
  c->limits_file_used = file_vars != nullptr;
  if (file_vars) ReadSource(file_vars, c, file_mem, file_mem_set, file_sm, file_sm_set);
  for (int i = 0; i < kMaxDevices; ++i) {
    if (file_vars) {
      c->memory_limit[i] = env_mem_set[i] ? Tighter(file_mem[i], env_mem[i]) : file_mem[i];
      c->sm_limit[i] = env_sm_set[i] ? static_cast<uint32_t>(Tighter(file_sm[i], env_sm[i])) : file_sm[i];
    } else {
      c->memory_limit[i] = env_mem[i];
      c->sm_limit[i] = env_sm[i];
    }
  }
  // The rest: the file wins where it speaks (oversubscription and policy are the
  // operator's decisions); the environment fills what the file leaves out.
  auto pick = [&](const char* key) {
    const char* v = FindVar(file_vars, key);
    return v ? v : FindVar(env, key);
  };
  if (const char* v = pick("CUDA_OVERSUBSCRIBE")) c->oversubscribe = strcmp(v, "true") == 0 || strcmp(v, "1") == 0;
  if (const char* v = pick("GPU_CORE_UTILIZATION_POLICY")) {
    if (strcmp(v, "force") == 0 || strcmp(v, "FORCE") == 0)
      c->core_policy = CorePolicy::kForce;
    else if (strcmp(v, "disable") == 0 || strcmp(v, "DISABLE") == 0)
      c->core_policy = CorePolicy::kDisable;
    else if (strcmp(v, "default") == 0 || strcmp(v, "DEFAULT") == 0 || *v == 0)
      c->core_policy = CorePolicy::kDefault;
    else
      AddError(c, "%s=%s is not default, force or disable; using default", "GPU_CORE_UTILIZATION_POLICY", v);
  }
  // A container may not lift its own priority above what the operator gave it.
  if (const char* v = FindVar(env, "CUDA_TASK_PRIORITY")) {
    uint64_t p = 0;
    if (ParseUnsigned(v, &p) && p < 1000)
      c->priority = static_cast<int>(p);
    else
      AddError(c, "%s=%s is not a priority (0 = highest); ignored", "CUDA_TASK_PRIORITY", v);
  }
  if (const char* v = FindVar(file_vars, "CUDA_TASK_PRIORITY")) {
    uint64_t p = 0;
    if (ParseUnsigned(v, &p) && static_cast<int>(p) > c->priority) c->priority = static_cast<int>(p);
  }
  if (const char* v = FindVar(env, "LIBCUDA_LOG_LEVEL")) {
    uint64_t l = 0;
    if (ParseUnsigned(v, &l) && l <= 4) c->log_level = static_cast<int>(l);
  }
  if (const char* v = pick("CUDA_DEVICE_MEMORY_SHARED_CACHE"))
    snprintf(c->region_path, sizeof(c->region_path), "%s", v);
  if (const char* v = pick("GPUSLICE_CARDS_DIR")) snprintf(c->cards_dir, sizeof(c->cards_dir), "%s", v);
  if (const char* v = pick("GPUSLICE_CONTEXT_OVERHEAD")) {
    uint64_t b = 0;
    if (ParseByteQuantity(v, &b))
      c->context_overhead = b;
    else
      AddError(c, "%s=%s is not a size; using the default", "GPUSLICE_CONTEXT_OVERHEAD", v);
  }
}

}  // namespace gs::enforcer
