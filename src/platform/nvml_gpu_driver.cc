#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "src/platform/driver_loader.h"
#include "src/platform/gpu_driver.h"

namespace gs::platform {
namespace {

using ProcessList = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);

// Every process of d in one of NVML's lists (compute or graphics), growing the buffer while
// NVML says it is too small (processes may start between the calls, so it is asked again, a
// few times at most). A process whose memory the driver does not report is left out and
// counted in *unmeasured (when given).
nvmlReturn_t RunningProcesses(ProcessList list, nvmlDevice_t d, std::vector<GpuProcess>* out,
                              size_t* unmeasured = nullptr) {
  std::vector<nvmlProcessInfo_t> infos(64);
  nvmlReturn_t rc = NVML_ERROR_INSUFFICIENT_SIZE;
  for (int attempt = 0; attempt < 5 && rc == NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
    unsigned n = static_cast<unsigned>(infos.size());
    rc = list(d, &n, infos.data());
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
      infos.resize(std::max<size_t>(infos.size() * 2, static_cast<size_t>(n) + 16));
      continue;
    }
    if (rc != NVML_SUCCESS) return rc;
    out->clear();
    for (unsigned k = 0; k < n && k < infos.size(); ++k) {
      if (infos[k].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE_ULL)
        out->push_back({infos[k].pid, infos[k].usedGpuMemory});
      else if (unmeasured != nullptr)
        ++*unmeasured;
    }
  }
  return rc;
}

// NVML's used memory of d without the driver's reserve (nvmlDeviceGetMemoryInfo_v2).
std::optional<uint64_t> UsedByAllocations(const NvmlApi& api, nvmlDevice_t d) {
  nvmlMemory_v2_t mem{};
  mem.version = nvmlMemory_v2;
  if (!api.nvmlDeviceGetMemoryInfo_v2 || api.nvmlDeviceGetMemoryInfo_v2(d, &mem) != NVML_SUCCESS) return std::nullopt;
  return mem.used;
}

class NvmlGpuDriver final : public GpuDriver {
 public:
  explicit NvmlGpuDriver(NvmlApi api) : api_(std::move(api)) {}
  ~NvmlGpuDriver() override {
    if (events_) api_.nvmlEventSetFree(events_);
    api_.nvmlShutdown();
  }

  std::string DriverVersion() override {
    char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
    return api_.nvmlSystemGetDriverVersion(buf, sizeof(buf)) == NVML_SUCCESS ? buf : "unknown";
  }

  int CudaVersion() override {
    int v = 0;
    return api_.nvmlSystemGetCudaDriverVersion(&v) == NVML_SUCCESS ? v : 0;
  }

  StatusOr<std::vector<GpuInfo>> ListGpus() override {
    unsigned count = 0;
    nvmlReturn_t rc = api_.nvmlDeviceGetCount_v2(&count);
    if (rc != NVML_SUCCESS) return Unavailable(std::string("nvmlDeviceGetCount: ") + api_.nvmlErrorString(rc));
    std::vector<GpuInfo> gpus;
    for (unsigned i = 0; i < count; ++i) {
      nvmlDevice_t d;
      if (api_.nvmlDeviceGetHandleByIndex_v2(i, &d) != NVML_SUCCESS) continue;
      GpuInfo g;
      g.index = static_cast<int>(i);
      char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
      rc = api_.nvmlDeviceGetUUID(d, buf, sizeof(buf));
      if (rc == NVML_ERROR_GPU_IS_LOST) {
        g.lost = true;
        gpus.push_back(std::move(g));
        continue;
      }
      g.uuid = buf;
      if (api_.nvmlDeviceGetName(d, buf, sizeof(buf)) == NVML_SUCCESS) g.name = buf;
      nvmlPciInfo_t pci{};
      if (api_.nvmlDeviceGetPciInfo_v3(d, &pci) == NVML_SUCCESS) g.pci_bus_id = pci.busId;
      api_.nvmlDeviceGetMinorNumber(d, &g.minor);
      unsigned numa = 0;
      if (api_.nvmlDeviceGetNumaNodeId && api_.nvmlDeviceGetNumaNodeId(d, &numa) == NVML_SUCCESS)
        g.numa_node = static_cast<int>(numa);
      nvmlMemory_t mem{};
      rc = api_.nvmlDeviceGetMemoryInfo(d, &mem);
      if (rc == NVML_SUCCESS) {
        g.memory_total = mem.total;
        g.memory_used = mem.used;
      } else if (rc == NVML_ERROR_NOT_SUPPORTED) {
        g.memory_info_supported = false;
      }
      nvmlUtilization_t util{};
      if (api_.nvmlDeviceGetUtilizationRates(d, &util) == NVML_SUCCESS) g.utilization = util.gpu;
      api_.nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &g.temperature_c);
      api_.nvmlDeviceGetPowerUsage(d, &g.power_mw);
      api_.nvmlDeviceGetEnforcedPowerLimit(d, &g.power_limit_mw);
      // Memory freed between the reads would look unlisted in the first and allocated
      // after the lists in neither: the smaller read holds neither. The graphics list
      // counts too (a process may be in both: its larger figure); a process whose memory
      // the driver does not report leaves the figure unknown.
      const std::optional<uint64_t> used_before = UsedByAllocations(api_, d);
      size_t unmeasured = 0;
      const bool listed =
          RunningProcesses(api_.nvmlDeviceGetComputeRunningProcesses_v3, d, &g.processes, &unmeasured) == NVML_SUCCESS;
      std::vector<GpuProcess> graphics;
      const nvmlReturn_t graphics_rc =
          api_.nvmlDeviceGetGraphicsRunningProcesses_v3
              ? RunningProcesses(api_.nvmlDeviceGetGraphicsRunningProcesses_v3, d, &graphics, &unmeasured)
              : NVML_ERROR_FUNCTION_NOT_FOUND;
      const std::optional<uint64_t> used_after = UsedByAllocations(api_, d);
      if (listed && (graphics_rc == NVML_SUCCESS || graphics_rc == NVML_ERROR_NOT_SUPPORTED) && unmeasured == 0 &&
          used_before && used_after) {
        std::map<uint32_t, uint64_t> held;
        for (const auto* l : {&g.processes, &graphics})
          for (const auto& p : *l) held[p.pid] = std::max(held[p.pid], p.used_bytes);
        uint64_t unlisted = std::min(*used_before, *used_after);
        for (const auto& [pid, bytes] : held) unlisted -= std::min(unlisted, bytes);
        g.memory_unlisted = unlisted;
      }
      gpus.push_back(std::move(g));
    }
    return gpus;
  }

  StatusOr<std::vector<ProcessUtil>> ProcessUtilization(const std::string& uuid, uint64_t since_us) override {
    nvmlDevice_t d;
    nvmlReturn_t rc = api_.nvmlDeviceGetHandleByUUID(uuid.c_str(), &d);
    if (rc != NVML_SUCCESS) return Unavailable(uuid + ": " + api_.nvmlErrorString(rc));
    nvmlProcessUtilizationSample_t samples[256];
    unsigned n = 256;
    rc = api_.nvmlDeviceGetProcessUtilization(d, samples, &n, since_us);
    std::vector<ProcessUtil> out;
    if (rc == NVML_ERROR_NOT_FOUND) return out;  // no samples: nothing ran
    if (rc != NVML_SUCCESS)
      return Unavailable(std::string("nvmlDeviceGetProcessUtilization: ") + api_.nvmlErrorString(rc));
    for (unsigned i = 0; i < n; ++i) out.push_back({samples[i].pid, samples[i].smUtil});
    return out;
  }

  StatusOr<std::vector<GpuProcess>> ComputeProcesses(const std::string& uuid) override {
    nvmlDevice_t d;
    nvmlReturn_t rc = api_.nvmlDeviceGetHandleByUUID(uuid.c_str(), &d);
    if (rc != NVML_SUCCESS) return Unavailable(uuid + ": " + api_.nvmlErrorString(rc));
    std::vector<GpuProcess> out;
    rc = RunningProcesses(api_.nvmlDeviceGetComputeRunningProcesses_v3, d, &out);
    if (rc != NVML_SUCCESS)
      return Unavailable(uuid + ": nvmlDeviceGetComputeRunningProcesses_v3: " + api_.nvmlErrorString(rc));
    return out;
  }

  StatusOr<std::optional<XidEvent>> WaitXid(int timeout_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (events_ == nullptr) {
      nvmlReturn_t rc = api_.nvmlEventSetCreate(&events_);
      if (rc != NVML_SUCCESS) return Unavailable(std::string("nvmlEventSetCreate: ") + api_.nvmlErrorString(rc));
      unsigned count = 0;
      api_.nvmlDeviceGetCount_v2(&count);
      for (unsigned i = 0; i < count; ++i) {
        nvmlDevice_t d;
        if (api_.nvmlDeviceGetHandleByIndex_v2(i, &d) == NVML_SUCCESS)
          api_.nvmlDeviceRegisterEvents(d, nvmlEventTypeXidCriticalError, events_);
      }
    }
    nvmlEventData_t data{};
    nvmlReturn_t rc = api_.nvmlEventSetWait_v2(events_, &data, static_cast<unsigned>(timeout_ms));
    if (rc == NVML_ERROR_TIMEOUT) return std::optional<XidEvent>();
    if (rc != NVML_SUCCESS) return Unavailable(std::string("nvmlEventSetWait: ") + api_.nvmlErrorString(rc));
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    api_.nvmlDeviceGetUUID(data.device, uuid, sizeof(uuid));
    return std::optional<XidEvent>(XidEvent{uuid, data.eventData});
  }

 private:
  NvmlApi api_;
  std::mutex mu_;
  nvmlEventSet_t events_ = nullptr;
};

}  // namespace

StatusOr<std::unique_ptr<GpuDriver>> OpenNvmlGpuDriver(const std::string& driver_root) {
  NvmlApi api;
  GS_RETURN_IF_ERROR(LoadNvml(driver_root, &api));
  nvmlReturn_t rc = api.nvmlInit_v2();
  if (rc != NVML_SUCCESS)
    return Unavailable("NVML from " + api.path + " failed to initialise: " + api.nvmlErrorString(rc));
  return std::unique_ptr<GpuDriver>(new NvmlGpuDriver(std::move(api)));
}

}  // namespace gs::platform
