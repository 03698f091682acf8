#include "src/enforcer/config.h"

#include <cstdio>
#include <cstring>

#include "src/common/quantity.h"
#include "src/region/card.h"

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
  bool has_all_mem = ReadMemory(vars, contract::kMemoryLimit, c, &all_mem);
  uint32_t all_sm = 0;
  bool has_all_sm = ReadPercent(vars, contract::kSmLimit, c, &all_sm);
  for (int i = 0; i < kMaxDevices; ++i) {
    char key[64];
    snprintf(key, sizeof(key), "%s_%d", contract::kMemoryLimit, i);
    mem_set[i] = ReadMemory(vars, key, c, &mem[i]);
    if (!mem_set[i] && has_all_mem) {
      mem[i] = all_mem;
      mem_set[i] = true;
    }
    snprintf(key, sizeof(key), "%s_%d", contract::kSmLimit, i);
    sm_set[i] = ReadPercent(vars, key, c, &sm[i]);
    if (!sm_set[i] && has_all_sm) {
      sm[i] = all_sm;
      sm_set[i] = true;
    }
  }
}

// GPUSLICE_CARD_ENTRY_<i> of a file the host wrote (the limits file, `gpuslice run`'s).
void ReadCardEntries(const char* const* file_vars, Config* c) {
  for (int i = 0; i < kMaxDevices; ++i) {
    char key[64];
    snprintf(key, sizeof(key), "%s_%d", contract::kCardEntry, i);
    const char* v = FindVar(file_vars, key);
    if (v == nullptr) continue;
    uint64_t e = 0;
    if (ParseUnsigned(v, &e) && e < static_cast<uint64_t>(region::kCardTenants))
      c->card_entry[i] = static_cast<uint8_t>(e + 1);
    else
      AddError(c, "%s=%s is not a card entry (0..63); claiming one from the card", key, v);
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
  // The rest. With the file, the operator's decisions come from it alone and the
  // environment may only tighten; without it, the environment is the source.
  const char* const* source = file_vars ? file_vars : env;
  if (const char* v = FindVar(source, contract::kOversubscribe))
    c->oversubscribe = strcmp(v, "true") == 0 || strcmp(v, "1") == 0;
  if (const char* v = FindVar(source, contract::kCorePolicy); v && !contract::ParseCorePolicy(v, &c->core_policy))
    AddError(c, "%s=%s is not default, force or disable; using default", contract::kCorePolicy, v);
  if (file_vars) {
    // `force` is stricter than `default`; nothing else in the environment counts.
    CorePolicy wanted = CorePolicy::kDefault;
    if (const char* v = FindVar(env, contract::kCorePolicy); v && contract::ParseCorePolicy(v, &wanted) &&
                                                             wanted == CorePolicy::kForce &&
                                                             c->core_policy == CorePolicy::kDefault)
      c->core_policy = CorePolicy::kForce;
  }
  // The limits file sets the priority; a container may not lift its own above it (0 is the
  // highest), only lower it.
  bool file_priority = false;
  if (const char* v = FindVar(file_vars, contract::kPriority)) {
    uint64_t p = 0;
    if (ParseUnsigned(v, &p) && p < 1000) {
      c->priority = static_cast<int>(p);
      file_priority = true;
    }
  }
  if (const char* v = FindVar(env, contract::kPriority)) {
    uint64_t p = 0;
    if (!ParseUnsigned(v, &p) || p >= 1000)
      AddError(c, "%s=%s is not a priority (0 = highest); ignored", contract::kPriority, v);
    else if (!file_priority || static_cast<int>(p) > c->priority)
      c->priority = static_cast<int>(p);
  }
  // The best priority believed of other tenants: from the file (absent: 0, believe any);
  // the environment may only lower it, i.e. defer to more tenants. Never worse than our
  // own priority: a tenant as important as we are is one we may share the card with.
  auto read_best = [&](const char* const* vars, int* out) {
    const char* v = FindVar(vars, contract::kCardBestPriority);
    if (v == nullptr) return false;
    uint64_t p = 0;
    if (ParseUnsigned(v, &p) && p <= static_cast<uint64_t>(contract::kWorstPriority)) {
      *out = static_cast<int>(p);
      return true;
    }
    AddError(c, "%s=%s is not a priority (0 = highest); ignored", contract::kCardBestPriority, v);
    return false;
  };
  int best_file = 0, best_env = 0;
  bool best_file_set = read_best(file_vars, &best_file), best_env_set = read_best(env, &best_env);
  if (file_vars) {
    c->card_best_priority = best_file_set ? best_file : 0;
    if (best_env_set && best_env < c->card_best_priority) c->card_best_priority = best_env;
  } else if (best_env_set) {
    c->card_best_priority = best_env;
  }
  if (c->card_best_priority > c->priority) c->card_best_priority = c->priority;
  if (const char* v = FindVar(env, contract::kLogLevel)) {
    uint64_t l = 0;
    if (ParseUnsigned(v, &l) && l <= 4) c->log_level = static_cast<int>(l);
  }
  // Where the container's accounting lives is the operator's choice too: a process that
  // could name its own region would get a fresh, empty one and with it a full limit.
  if (const char* v = FindVar(source, contract::kRegionPath)) snprintf(c->region_path, sizeof(c->region_path), "%s", v);
  if (const char* v = FindVar(source, contract::kCardsDir)) snprintf(c->cards_dir, sizeof(c->cards_dir), "%s", v);
  for (int i = 0; file_vars && i < kMaxDevices; ++i) {
    char key[64];
    snprintf(key, sizeof(key), "%s_%d", contract::kDeviceUuid, i);
    if (const char* v = FindVar(file_vars, key)) snprintf(c->device_uuid[i], sizeof(c->device_uuid[i]), "%s", v);
  }
  if (file_vars) ReadCardEntries(file_vars, c);
  // The context charge: the file (or the default) sets it, the environment may raise it.
  auto read_overhead = [&](const char* const* vars, uint64_t* out) {
    const char* v = FindVar(vars, contract::kContextOverhead);
    if (v == nullptr) return false;
    if (ParseByteQuantity(v, out)) return true;
    AddError(c, "%s=%s is not a size; using the default", contract::kContextOverhead, v);
    return false;
  };
  uint64_t from_file = 0, from_env = 0;
  bool file_set = read_overhead(file_vars, &from_file), env_set = read_overhead(env, &from_env);
  if (file_vars) {
    if (file_set) c->context_overhead = c->context_overhead_min = from_file;
    if (env_set && from_env > c->context_overhead) c->context_overhead = c->context_overhead_min = from_env;
  } else if (env_set) {
    c->context_overhead = c->context_overhead_min = from_env;
  }
}

void ApplyRunLimits(const char* const* run_vars, Config* c) {
  if (run_vars == nullptr || c->limits_file_used) return;
  uint64_t mem[kMaxDevices] = {};
  uint32_t sm[kMaxDevices] = {};
  bool mem_set[kMaxDevices] = {}, sm_set[kMaxDevices] = {};
  ReadSource(run_vars, c, mem, mem_set, sm, sm_set);
  for (int i = 0; i < kMaxDevices; ++i) {
    if (mem_set[i]) c->memory_limit[i] = Tighter(c->memory_limit[i], mem[i]);
    if (sm_set[i]) c->sm_limit[i] = static_cast<uint32_t>(Tighter(c->sm_limit[i], sm[i]));
    char key[64];
    snprintf(key, sizeof(key), "%s_%d", contract::kDeviceUuid, i);
    if (const char* v = FindVar(run_vars, key)) snprintf(c->device_uuid[i], sizeof(c->device_uuid[i]), "%s", v);
  }
  ReadCardEntries(run_vars, c);
}

}  // namespace gs::enforcer
