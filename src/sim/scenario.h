// A simulated node described in YAML: which GPUs (presets with counts, or by hand),
// driver and CUDA versions, and faults to inject at given times. Parsed by
// `gpuslice sim up`; see docs/simulator.md for the format. Pure parsing, no I/O beyond
// reading the text it is given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/sim/gpu_presets.h"

namespace gs::sim {

struct ScenarioGpu {
  std::string name;
  std::string uuid;
  std::string pci_bus_id;
  std::string serial;
  uint64_t memory_bytes = 0;
  uint32_t sm_count = 0;
  uint32_t cc_major = 0, cc_minor = 0;
  uint32_t architecture = 0;
  uint32_t pci_device = 0;
  uint32_t power_limit_w = 300;
  uint32_t sm_clock_mhz = 1500, mem_clock_mhz = 1500;
  // Device memory one CUDA context costs: the preset's (518 MiB on the H100, as measured),
  // else 256 MiB (not measured); the scenario's `context_memory` (top level or per GPU)
  // overrides it.
  uint64_t context_memory = kUnmeasuredContextMib << 20;
  int numa_node = 0;
  uint32_t minor = 0;
  bool numa_set = false, minor_set = false;  // given in the scenario, not derived
  bool context_memory_set = false;
  // `memory_info: not_supported`: NVML's memory queries answer NOT_SUPPORTED, as on a
  // card with unified memory (docs/simulator.md).
  bool memory_info_unsupported = false;
  // CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: the preset's (NVSwitch boards), else false.
  bool multicast = false;
};

struct ScenarioFault {
  double at_seconds = 0;
  int gpu = 0;
  uint64_t xid = 0;  // 79 for "lost"
};

struct Scenario {
  std::string driver_version = "580.65.06";
  int cuda_version = 13000;
  // `context_memory` at the top level: what one CUDA context costs on every card,
  // overriding the presets' figures (already applied to each of `gpus`).
  std::optional<uint64_t> context_memory;
  // NVML's per-process sample period and the driver's time slice between processes
  // (src/sim/timeline.h; defaults as measured on the H100).
  double sample_period_ms = 200;
  double timeslice_ms = 2;
  std::vector<ScenarioGpu> gpus;
  std::vector<ScenarioFault> faults;
};

// Parses scenario YAML. Errors name the key and the problem.
StatusOr<Scenario> ParseScenario(const std::string& yaml_text);

}  // namespace gs::sim
