#include "src/platform/proc_address.h"

#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "src/platform/cuda_api.h"

namespace gs::platform {
namespace {

const char* const kNames[] = {
#define GS_CUDA_SYM(name, params, args) #name,
#include "src/platform/cuda_symbols.def"
#undef GS_CUDA_SYM
};

struct VersionRow {
  const char* base;
  int since;
  const char* name;
};
const VersionRow kVersions[] = {
#define GS_CUDA_VERSION(base, since, name) {#base, since, #name},
#include "src/platform/cuda_versions.def"
#undef GS_CUDA_VERSION
};

}  // namespace

const char* const* CudaSymbolNames(size_t* count) {
  *count = sizeof(kNames) / sizeof(kNames[0]);
  return kNames;
}

int CudaSymbolIndex(const char* name) {
  int lo = 0, hi = static_cast<int>(sizeof(kNames) / sizeof(kNames[0])) - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    int c = strcmp(kNames[mid], name);
    if (c == 0) return mid;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

ProcLookup ResolveCudaExport(const char* symbol, int cuda_version, uint64_t flags, const char** export_name) {
  if (symbol == nullptr) return ProcLookup::kNotFound;
  const char* chosen = symbol;
  bool versioned = false;
  int best = -1;
  for (const auto& row : kVersions) {
    if (strcmp(row.base, symbol) != 0) continue;
    versioned = true;
    if (row.since <= cuda_version && row.since > best) {
      best = row.since;
      chosen = row.name;
    }
  }
  if (versioned && best < 0) return ProcLookup::kVersionNotSufficient;
  if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
    char buf[160];
    for (const char* suffix : {"_ptsz", "_ptds"}) {
      snprintf(buf, sizeof(buf), "%s%s", chosen, suffix);
      int idx = CudaSymbolIndex(buf);
      if (idx >= 0) {
        *export_name = kNames[idx];
        return ProcLookup::kFound;
      }
    }
  }
  int idx = CudaSymbolIndex(chosen);
  if (idx < 0) return ProcLookup::kNotFound;
  *export_name = kNames[idx];
  return ProcLookup::kFound;
}

}  // namespace gs::platform
