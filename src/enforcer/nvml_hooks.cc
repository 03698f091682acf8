// What NVML tells a sliced container: its card's total is the slice's limit, used is the
// container's use, free is the difference (never negative or wrapped), and the process
// list shows the container's processes with the memory they are charged.
#include <algorithm>
#include <cstring>

#include "src/enforcer/enforcer.h"
#include "src/enforcer/limits.h"

using namespace gs::enforcer;  // NOLINT: C ABI definitions below
namespace region = gs::region;

namespace {

// Keeps the processes of this container and reports each with the memory the region
// charges it. NVML already lists processes by their pids in the caller's PID namespace
// (docs/measurements/h200-driver.md, "Pids"), the namespace the container's processes
// share and claim their region slots under; other containers' processes are not shown.
template <typename Info>
nvmlReturn_t FilterProcesses(nvmlDevice_t device, unsigned int* count, Info* infos, nvmlReturn_t rc) {
  int dev = DeviceOfNvml(device);
  if (rc != NVML_SUCCESS || dev < 0 || g_state.region == nullptr || infos == nullptr) return rc;
  unsigned kept = 0;
  for (unsigned i = 0; i < *count; ++i) {
    for (const auto& slot : g_state.region->procs) {
      uint32_t pid = slot.pid.load();
      if (pid == 0 || pid != infos[i].pid) continue;
      Info info = infos[i];
      info.usedGpuMemory = slot.memory[dev].load();
      infos[kept++] = info;
      break;
    }
  }
  *count = kept;
  return rc;
}

#define GS_NEED_NVML()                                     \
  do {                                                     \
    if (!NvmlReady()) return NVML_ERROR_LIBRARY_NOT_FOUND; \
  } while (0)

}  // namespace

GS_HOOK(nvmlDeviceGetMemoryInfo) nvmlReturn_t gs_hook_nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* m) {
  GS_NEED_NVML();
  nvmlReturn_t rc = g_nvml.nvmlDeviceGetMemoryInfo(device, m);
  region::MemoryView v;
  if (rc == NVML_SUCCESS && LimitedView(DeviceOfNvml(device), m->total, m->free, &v)) {
    m->total = v.total;
    m->used = v.used;
    m->free = v.free;
  }
  return rc;
}

GS_HOOK(nvmlDeviceGetMemoryInfo_v2)
nvmlReturn_t gs_hook_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* m) {
  GS_NEED_NVML();
  nvmlReturn_t rc = g_nvml.nvmlDeviceGetMemoryInfo_v2(device, m);
  region::MemoryView v;
  if (rc == NVML_SUCCESS && LimitedView(DeviceOfNvml(device), m->total, m->free, &v)) {
    m->total = v.total;
    m->reserved = 0;
    m->used = v.used;
    m->free = v.free;
  }
  return rc;
}

GS_HOOK(nvmlDeviceGetComputeRunningProcesses)
nvmlReturn_t gs_hook_nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int* c, nvmlProcessInfo_v1_t* i) {
  GS_NEED_NVML();
  return FilterProcesses(d, c, i, g_nvml.nvmlDeviceGetComputeRunningProcesses(d, c, i));
}
GS_HOOK(nvmlDeviceGetComputeRunningProcesses_v2)
nvmlReturn_t gs_hook_nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int* c, nvmlProcessInfo_v2_t* i) {
  GS_NEED_NVML();
  return FilterProcesses(d, c, i, g_nvml.nvmlDeviceGetComputeRunningProcesses_v2(d, c, i));
}
GS_HOOK(nvmlDeviceGetComputeRunningProcesses_v3)
nvmlReturn_t gs_hook_nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int* c, nvmlProcessInfo_t* i) {
  GS_NEED_NVML();
  return FilterProcesses(d, c, i, g_nvml.nvmlDeviceGetComputeRunningProcesses_v3(d, c, i));
}

GS_HOOK(nvmlInit_v2) nvmlReturn_t gs_hook_nvmlInit_v2(void) {
  GS_NEED_NVML();
  return g_nvml.nvmlInit_v2();
}
GS_HOOK(nvmlInit) nvmlReturn_t gs_hook_nvmlInit(void) {
  GS_NEED_NVML();
  return g_nvml.nvmlInit ? g_nvml.nvmlInit() : g_nvml.nvmlInit_v2();
}
GS_HOOK(nvmlInitWithFlags) nvmlReturn_t gs_hook_nvmlInitWithFlags(unsigned int flags) {
  GS_NEED_NVML();
  return g_nvml.nvmlInitWithFlags(flags);
}
