// The simulated NVML: answers from the same shared state as the simulated CUDA driver,
// so memory, utilisation, processes and XID events agree with what CUDA programs do.
// See docs/simulator.md for what each query reports.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "src/common/raw_log.h"
#include "src/sim/impl.h"
#include "src/sim/runtime.h"

namespace gs::sim {
namespace {

struct DeviceHandle {
  int state_index;
};
DeviceHandle g_handles[kMaxDevices];
std::atomic<int> g_init_count{0};
Runtime* g_rt = nullptr;

struct EventSet {
  struct Registration {
    int state_index;
    unsigned long long mask;
  };
  std::mutex mu;
  std::vector<Registration> regs;
  uint64_t delivered[kMaxDevices][kMaxEvents / 64] = {};
};

Node* node() {
  return g_rt->node;
}

int StateIndexOf(nvmlDevice_t d) {
  auto* h = reinterpret_cast<DeviceHandle*>(d);
  if (h < g_handles || h >= g_handles + kMaxDevices) return -1;
  for (int i = 0; i < g_rt->nvml_count; ++i)
    if (g_rt->nvml_devices[i] == h->state_index) return h->state_index;
  return -1;
}

nvmlDevice_t HandleOf(int state_index) {
  return reinterpret_cast<nvmlDevice_t>(&g_handles[state_index]);
}

const DeviceSpec& Spec(int s) {
  return node()->spec(s);
}

nvmlReturn_t CopyString(char* out, unsigned length, const char* value) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(out, value, strlen(value) + 1);
  return NVML_SUCCESS;
}

}  // namespace
}  // namespace gs::sim

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

#define GS_NVML_REQUIRE_INIT()                                                        \
  do {                                                                                \
    if (g_init_count.load() <= 0 || g_rt == nullptr) return NVML_ERROR_UNINITIALIZED; \
  } while (0)

// Resolves `device` into `var` (state index) or returns the NVML error for it.
#define GS_NVML_DEVICE(var, device)                \
  GS_NVML_REQUIRE_INIT();                          \
  int var = StateIndexOf(device);                  \
  if (var < 0) return NVML_ERROR_INVALID_ARGUMENT; \
  if (node()->IsLost(var)) return NVML_ERROR_GPU_IS_LOST

GS_SIM_NVML(nvmlReturn_t, nvmlInitWithFlags)(unsigned int) {
  Runtime* rt = GetRuntime();
  if (rt == nullptr) return NVML_ERROR_DRIVER_NOT_LOADED;
  for (int i = 0; i < kMaxDevices; ++i) g_handles[i].state_index = i;
  g_rt = rt;
  g_init_count.fetch_add(1);
  return NVML_SUCCESS;
}
GS_SIM_NVML(nvmlReturn_t, nvmlInit_v2)(void) {
  return gs_sim_nvml_nvmlInitWithFlags(0);
}
GS_SIM_NVML_SAME(nvmlInit, nvmlInit_v2)

GS_SIM_NVML(nvmlReturn_t, nvmlShutdown)(void) {
  int cur = g_init_count.load();
  do {
    if (cur <= 0) return NVML_ERROR_UNINITIALIZED;
  } while (!g_init_count.compare_exchange_weak(cur, cur - 1));
  return NVML_SUCCESS;
}

GS_SIM_NVML(const char*, nvmlErrorString)(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    default:
      return "Unknown Error";
  }
}

GS_SIM_NVML(nvmlReturn_t, nvmlSystemGetDriverVersion)(char* version, unsigned int length) {
  GS_NVML_REQUIRE_INIT();
  return CopyString(version, length, node()->state()->driver_version);
}

GS_SIM_NVML(nvmlReturn_t, nvmlSystemGetNVMLVersion)(char* version, unsigned int length) {
  GS_NVML_REQUIRE_INIT();
  char v[64];
  int cuda = node()->state()->cuda_version;
  snprintf(v, sizeof(v), "%d.%s", cuda / 1000, node()->state()->driver_version);
  return CopyString(version, length, v);
}

GS_SIM_NVML(nvmlReturn_t, nvmlSystemGetCudaDriverVersion)(int* cudaDriverVersion) {
  GS_NVML_REQUIRE_INIT();
  if (cudaDriverVersion == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *cudaDriverVersion = node()->state()->cuda_version;
  return NVML_SUCCESS;
}
GS_SIM_NVML_SAME(nvmlSystemGetCudaDriverVersion_v2, nvmlSystemGetCudaDriverVersion)

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetCount_v2)(unsigned int* deviceCount) {
  GS_NVML_REQUIRE_INIT();
  if (deviceCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *deviceCount = static_cast<unsigned>(g_rt->nvml_count);
  return NVML_SUCCESS;
}
GS_SIM_NVML_SAME(nvmlDeviceGetCount, nvmlDeviceGetCount_v2)

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetHandleByIndex_v2)(unsigned int index, nvmlDevice_t* device) {
  GS_NVML_REQUIRE_INIT();
  if (device == nullptr || index >= static_cast<unsigned>(g_rt->nvml_count)) return NVML_ERROR_INVALID_ARGUMENT;
  *device = HandleOf(g_rt->nvml_devices[index]);
  return NVML_SUCCESS;
}
GS_SIM_NVML_SAME(nvmlDeviceGetHandleByIndex, nvmlDeviceGetHandleByIndex_v2)

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetHandleByUUID)(const char* uuid, nvmlDevice_t* device) {
  GS_NVML_REQUIRE_INIT();
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  int s = FindDeviceByUuid(g_rt, uuid);
  if (s < 0) return NVML_ERROR_NOT_FOUND;
  *device = HandleOf(s);
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetHandleByPciBusId_v2)(const char* pciBusId, nvmlDevice_t* device) {
  GS_NVML_REQUIRE_INIT();
  if (pciBusId == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned d0, b0, v0;
  if (ParsePciBusId(pciBusId, &d0, &b0, &v0) != 3) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < g_rt->nvml_count; ++i) {
    unsigned d, b, v;
    int s = g_rt->nvml_devices[i];
    if (ParsePciBusId(Spec(s).pci_bus_id, &d, &b, &v) == 3 && d == d0 && b == b0 && v == v0) {
      *device = HandleOf(s);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}
GS_SIM_NVML_SAME(nvmlDeviceGetHandleByPciBusId, nvmlDeviceGetHandleByPciBusId_v2)

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetIndex)(nvmlDevice_t device, unsigned int* index) {
  GS_NVML_REQUIRE_INIT();
  int s = StateIndexOf(device);
  if (s < 0 || index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < g_rt->nvml_count; ++i)
    if (g_rt->nvml_devices[i] == s) *index = static_cast<unsigned>(i);
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetName)(nvmlDevice_t device, char* name, unsigned int length) {
  GS_NVML_DEVICE(s, device);
  return CopyString(name, length, Spec(s).name);
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetUUID)(nvmlDevice_t device, char* uuid, unsigned int length) {
  GS_NVML_DEVICE(s, device);
  return CopyString(uuid, length, Spec(s).uuid);
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetSerial)(nvmlDevice_t device, char* serial, unsigned int length) {
  GS_NVML_DEVICE(s, device);
  return CopyString(serial, length, Spec(s).serial);
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetMinorNumber)(nvmlDevice_t device, unsigned int* minorNumber) {
  GS_NVML_DEVICE(s, device);
  if (minorNumber == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *minorNumber = Spec(s).minor;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetBrand)(nvmlDevice_t device, nvmlBrandType_t* type) {
  GS_NVML_DEVICE(s, device);
  if (type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *type = NVML_BRAND_NVIDIA;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetArchitecture)(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch) {
  GS_NVML_DEVICE(s, device);
  if (arch == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *arch = Spec(s).architecture;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetCudaComputeCapability)(nvmlDevice_t device, int* major, int* minor) {
  GS_NVML_DEVICE(s, device);
  if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *major = static_cast<int>(Spec(s).cc_major);
  *minor = static_cast<int>(Spec(s).cc_minor);
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetNumGpuCores)(nvmlDevice_t device, unsigned int* numCores) {
  GS_NVML_DEVICE(s, device);
  if (numCores == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  // FP32 cores per SM: 64 on Turing and GA100, 128 on Ada and Hopper.
  unsigned per_sm = (Spec(s).architecture >= NVML_DEVICE_ARCH_ADA) ? 128 : 64;
  *numCores = Spec(s).sm_count * per_sm;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetMemoryInfo)(nvmlDevice_t device, nvmlMemory_t* memory) {
  GS_NVML_DEVICE(s, device);
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (Spec(s).memory_info_unsupported) return NVML_ERROR_NOT_SUPPORTED;
  memory->total = Spec(s).memory_total;
  memory->used = std::min<uint64_t>(node()->MemoryUsed(s), memory->total);
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetMemoryInfo_v2)(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  GS_NVML_DEVICE(s, device);
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (Spec(s).memory_info_unsupported) return NVML_ERROR_NOT_SUPPORTED;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  memory->total = Spec(s).memory_total;
  memory->reserved = 0;  // the simulator reserves nothing for the driver
  memory->used = std::min<uint64_t>(node()->MemoryUsed(s), memory->total);
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetBAR1MemoryInfo)(nvmlDevice_t device, nvmlBAR1Memory_t* bar1Memory) {
  GS_NVML_DEVICE(s, device);
  if (bar1Memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  bar1Memory->bar1Total = Spec(s).memory_total;
  bar1Memory->bar1Used = 0;
  bar1Memory->bar1Free = bar1Memory->bar1Total;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetUtilizationRates)(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  GS_NVML_DEVICE(s, device);
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  utilization->gpu = node()->Utilization(s);
  utilization->memory = 0;  // memory-controller activity is not modelled
  return NVML_SUCCESS;
}

// As measured on the H100 (src/sim/timeline.h): a NULL buffer is answered with a fixed
// capacity; otherwise one sample per process per sample period newer than
// lastSeenTimeStamp, or NVML_ERROR_NOT_FOUND when no period has ended since.
GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetProcessUtilization)
(nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization, unsigned int* processSamplesCount,
 unsigned long long lastSeenTimeStamp) {
  GS_NVML_DEVICE(s, device);
  if (processSamplesCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (utilization == nullptr) {
    *processSamplesCount = kProcessSampleCapacity;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  // Timestamps are CPU time in microseconds (wall clock), as NVML reports them: skip the
  // samples whose stamp, so rounded, is not after lastSeenTimeStamp.
  int64_t after = (static_cast<int64_t>(lastSeenTimeStamp) + 1) * 1000 - g_rt->realtime_minus_monotonic_ns - 1;
  ProcessSample samples[kProcessSampleCapacity];
  int n = node()->ProcessSamples(s, after, samples, static_cast<int>(kProcessSampleCapacity));
  if (n == 0) return NVML_ERROR_NOT_FOUND;
  if (*processSamplesCount < static_cast<unsigned>(n)) {
    *processSamplesCount = static_cast<unsigned>(n);
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  n = std::min(n, static_cast<int>(kProcessSampleCapacity));
  for (int i = 0; i < n; ++i) {
    auto stamp = static_cast<unsigned long long>(
        (static_cast<int64_t>(samples[i].timestamp_ns) + g_rt->realtime_minus_monotonic_ns) / 1000);
    utilization[i] = {samples[i].pid, stamp, samples[i].sm_percent, 0, 0, 0};
  }
  *processSamplesCount = static_cast<unsigned>(n);
  return NVML_SUCCESS;
}

namespace {
template <typename Info>
nvmlReturn_t RunningProcesses(nvmlDevice_t device, unsigned int* infoCount, Info* infos) {
  GS_NVML_DEVICE(s, device);
  if (infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  ProcessMemory procs[kMaxProcesses];
  int n = node()->RunningProcesses(s, procs, kMaxProcesses);
  if (*infoCount < static_cast<unsigned>(n) || (infos == nullptr && n > 0)) {
    *infoCount = static_cast<unsigned>(n);
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (int i = 0; i < n; ++i) {
    Info info{};
    info.pid = procs[i].pid;
    info.usedGpuMemory = procs[i].bytes;
    if constexpr (sizeof(Info) > sizeof(nvmlProcessInfo_v1_t)) {
      info.gpuInstanceId = 0xFFFFFFFF;  // no MIG
      info.computeInstanceId = 0xFFFFFFFF;
    }
    infos[i] = info;
  }
  *infoCount = static_cast<unsigned>(n);
  return NVML_SUCCESS;
}
}  // namespace

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses)
(nvmlDevice_t d, unsigned int* c, nvmlProcessInfo_v1_t* i) {
  return RunningProcesses(d, c, i);
}
GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses_v2)
(nvmlDevice_t d, unsigned int* c, nvmlProcessInfo_v2_t* i) {
  return RunningProcesses(d, c, i);
}
GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses_v3)
(nvmlDevice_t d, unsigned int* c, nvmlProcessInfo_t* i) {
  return RunningProcesses(d, c, i);
}
GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetGraphicsRunningProcesses_v3)
(nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_t*) {
  GS_NVML_DEVICE(s, device);
  if (infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *infoCount = 0;  // the simulator runs compute work only
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetPciInfo_v3)(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  GS_NVML_DEVICE(s, device);
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  memset(pci, 0, sizeof(*pci));
  unsigned domain = 0, bus = 0, dev = 0;
  ParsePciBusId(Spec(s).pci_bus_id, &domain, &bus, &dev);
  pci->domain = domain;
  pci->bus = bus;
  pci->device = dev;
  pci->pciDeviceId = Spec(s).pci_device_id;
  pci->pciSubSystemId = Spec(s).pci_subsystem_id;
  snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", domain, bus, dev);
  snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", domain & 0xFFFF, bus, dev);
  return NVML_SUCCESS;
}
GS_SIM_NVML_SAME(nvmlDeviceGetPciInfo_v2, nvmlDeviceGetPciInfo_v3)
GS_SIM_NVML_SAME(nvmlDeviceGetPciInfo, nvmlDeviceGetPciInfo_v3)

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetNumaNodeId)(nvmlDevice_t device, unsigned int* numa) {
  GS_NVML_DEVICE(s, device);
  if (numa == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (Spec(s).numa_node < 0) return NVML_ERROR_NOT_SUPPORTED;
  *numa = static_cast<unsigned>(Spec(s).numa_node);
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetTopologyCommonAncestor)
(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuTopologyLevel_t* pathInfo) {
  GS_NVML_REQUIRE_INIT();
  int a = StateIndexOf(device1), b = StateIndexOf(device2);
  if (a < 0 || b < 0 || pathInfo == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *pathInfo = a == b                                   ? NVML_TOPOLOGY_INTERNAL
              : Spec(a).numa_node == Spec(b).numa_node ? NVML_TOPOLOGY_NODE
                                                       : NVML_TOPOLOGY_SYSTEM;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetTemperature)
(nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int* temp) {
  GS_NVML_DEVICE(s, device);
  if (temp == nullptr || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *temp = 30 + node()->Utilization(s) * 45 / 100;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetPowerUsage)(nvmlDevice_t device, unsigned int* power) {
  GS_NVML_DEVICE(s, device);
  if (power == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned limit_mw = Spec(s).power_limit_w * 1000, idle_mw = limit_mw / 5;
  *power = idle_mw + (limit_mw - idle_mw) * node()->Utilization(s) / 100;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetEnforcedPowerLimit)(nvmlDevice_t device, unsigned int* limit) {
  GS_NVML_DEVICE(s, device);
  if (limit == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *limit = Spec(s).power_limit_w * 1000;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetPerformanceState)(nvmlDevice_t device, nvmlPstates_t* pState) {
  GS_NVML_DEVICE(s, device);
  if (pState == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *pState = NVML_PSTATE_0;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetClockInfo)(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock) {
  GS_NVML_DEVICE(s, device);
  if (clock == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *clock = type == NVML_CLOCK_MEM ? Spec(s).mem_clock_mhz : Spec(s).sm_clock_mhz;
  return NVML_SUCCESS;
}
GS_SIM_NVML_SAME(nvmlDeviceGetMaxClockInfo, nvmlDeviceGetClockInfo)

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetPersistenceMode)(nvmlDevice_t device, nvmlEnableState_t* mode) {
  GS_NVML_DEVICE(s, device);
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *mode = NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetComputeMode)(nvmlDevice_t device, nvmlComputeMode_t* mode) {
  GS_NVML_DEVICE(s, device);
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *mode = NVML_COMPUTEMODE_DEFAULT;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetMigMode)
(nvmlDevice_t device, unsigned int* currentMode, unsigned int* pendingMode) {
  GS_NVML_DEVICE(s, device);
  if (currentMode == nullptr || pendingMode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *currentMode = *pendingMode = 0;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetEccMode)
(nvmlDevice_t device, nvmlEnableState_t* current, nvmlEnableState_t* pending) {
  GS_NVML_DEVICE(s, device);
  if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *current = *pending = NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}

// ---- events ------------------------------------------------------------------------------------

namespace {
constexpr unsigned long long kSupportedEvents =
    nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceGetSupportedEventTypes)(nvmlDevice_t device, unsigned long long* eventTypes) {
  GS_NVML_DEVICE(s, device);
  if (eventTypes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *eventTypes = kSupportedEvents;
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlEventSetCreate)(nvmlEventSet_t* set) {
  GS_NVML_REQUIRE_INIT();
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *set = reinterpret_cast<nvmlEventSet_t>(new EventSet);
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlDeviceRegisterEvents)
(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
  GS_NVML_DEVICE(s, device);
  auto* es = reinterpret_cast<EventSet*>(set);
  if (es == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (eventTypes & ~kSupportedEvents) return NVML_ERROR_NOT_SUPPORTED;
  std::lock_guard<std::mutex> lock(es->mu);
  // Like NVML, a set hears only what happens after it registers: mark what is due now.
  Event ignored[kMaxEvents];
  node()->DueEvents(s, es->delivered[s], ignored, kMaxEvents);
  es->regs.push_back({s, eventTypes});
  return NVML_SUCCESS;
}

GS_SIM_NVML(nvmlReturn_t, nvmlEventSetWait_v2)(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms) {
  GS_NVML_REQUIRE_INIT();
  auto* es = reinterpret_cast<EventSet*>(set);
  if (es == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  int64_t deadline = node()->clock()->NowNs() + static_cast<int64_t>(timeoutms) * 1'000'000;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(es->mu);
      for (const auto& r : es->regs) {
        Event ev;
        // Events the set does not listen for are marked delivered and dropped.
        while (node()->DueEvents(r.state_index, es->delivered[r.state_index], &ev, 1) == 1) {
          if (!(ev.type & r.mask)) continue;
          memset(data, 0, sizeof(*data));
          data->device = HandleOf(r.state_index);
          data->eventType = ev.type;
          data->eventData = ev.data;
          data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFF;
          return NVML_SUCCESS;
        }
      }
    }
    int64_t now = node()->clock()->NowNs();
    if (now >= deadline) return NVML_ERROR_TIMEOUT;
    node()->clock()->SleepUntil(std::min(deadline, now + 10'000'000));
  }
}
GS_SIM_NVML_SAME(nvmlEventSetWait, nvmlEventSetWait_v2)

GS_SIM_NVML(nvmlReturn_t, nvmlEventSetFree)(nvmlEventSet_t set) {
  GS_NVML_REQUIRE_INIT();
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  delete reinterpret_cast<EventSet*>(set);
  return NVML_SUCCESS;
}
