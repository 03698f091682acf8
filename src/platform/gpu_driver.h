// GpuDriver: what the node agent and the CLI need to know about the GPUs of a node,
// behind one interface (STYLE: the platform hidden behind an interface with real and
// fake implementations). The NVML implementation works on real drivers and on the
// simulator alike; tests may substitute their own.
//
// Thread-safety: implementations are safe to call from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/common/status.h"

namespace gs::platform {

struct GpuProcess {
  uint32_t pid = 0;         // host pid (the driver's view: the initial PID namespace)
  uint64_t used_bytes = 0;  // device memory the process holds on the GPU, contexts included
};

struct GpuInfo {
  int index = 0;
  std::string uuid;
  std::string name;
  std::string pci_bus_id;
  uint32_t minor = 0;
  int numa_node = -1;
  uint64_t memory_total = 0;
  uint64_t memory_used = 0;
  // False when NVML answers the memory query NOT_SUPPORTED (cards with unified memory):
  // memory_total and memory_used are then 0, not the card's.
  bool memory_info_supported = true;
  // Device memory in use that the driver lists under no process: NVML's used memory
  // (version 2, which leaves the driver's reserve out), the smaller of a read before and one
  // after the process lists, less what each listed process (compute or graphics) holds.
  // nullopt when version 2 or a list is not answered, or a listed process's memory is not
  // reported. On a card it includes the driver's own unlisted memory
  // (docs/measurements/h200-driver.md: 8-9 MiB beside one context).
  std::optional<uint64_t> memory_unlisted;
  unsigned utilization = 0;  // percent over the driver's sample period
  unsigned temperature_c = 0;
  unsigned power_mw = 0;
  unsigned power_limit_mw = 0;
  bool lost = false;  // fell off the bus: nothing else is valid
  std::vector<GpuProcess> processes;
};

struct ProcessUtil {
  uint32_t pid = 0;      // as the node sees it
  unsigned sm_util = 0;  // percent
};

struct XidEvent {
  std::string uuid;
  uint64_t xid = 0;
};

class GpuDriver {
 public:
  virtual ~GpuDriver() = default;
  virtual std::string DriverVersion() = 0;
  virtual int CudaVersion() = 0;  // e.g. 13000
  virtual StatusOr<std::vector<GpuInfo>> ListGpus() = 0;
  // SM utilisation of each process on a GPU, from the driver's samples newer than
  // since_us (wall clock, microseconds). Empty when nothing ran.
  virtual StatusOr<std::vector<ProcessUtil>> ProcessUtilization(const std::string& uuid, uint64_t since_us) = 0;
  // The compute processes on a GPU and the device memory each holds
  // (nvmlDeviceGetComputeRunningProcesses_v3), all of them however many (the buffer grows
  // on NVML_ERROR_INSUFFICIENT_SIZE). A process whose usage the driver does not report
  // (NVML_VALUE_NOT_AVAILABLE) is left out. An error (unknown or lost GPU, a failed call)
  // says nothing about the processes: callers must not act on it.
  virtual StatusOr<std::vector<GpuProcess>> ComputeProcesses(const std::string& uuid) = 0;
  // Waits up to timeout_ms for a critical XID on any GPU; nullopt on timeout.
  virtual StatusOr<std::optional<XidEvent>> WaitXid(int timeout_ms) = 0;
};

// NVML from driver_root ("/" for the system's). Fails when NVML cannot be loaded or
// initialised, with the reason.
StatusOr<std::unique_ptr<GpuDriver>> OpenNvmlGpuDriver(const std::string& driver_root);

}  // namespace gs::platform
