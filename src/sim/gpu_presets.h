// Real NVIDIA GPU models the simulator can impersonate, with the memory nvidia-smi
// reports for them, their SM count, compute capability and PCI device id. What follows
// from the compute capability (resident threads and blocks per SM, texture extents) is
// not repeated here: the simulator derives it from the CUDA programming guide's table
// (src/sim/compute_capability.h), for presets and hand-described cards alike.
// Pure data; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gs::sim {

struct GpuPreset {
  const char* key;      // scenario name, e.g. "H100-80GB"
  const char* name;     // what NVML reports
  uint64_t memory_mib;  // total as nvidia-smi shows it
  uint32_t sm_count;
  uint32_t cc_major, cc_minor;
  uint32_t architecture;  // NVML_DEVICE_ARCH_*
  uint32_t pci_device;    // PCI device id (vendor 0x10DE)
  uint32_t power_limit_w;
  uint32_t sm_clock_mhz, mem_clock_mhz;
  // Device memory one CUDA context costs on this card (NVML's per-process used memory of
  // a process holding only a context). Measured where the table says so; elsewhere the
  // simulator's earlier default, not measured.
  uint64_t context_mib;
  // Whether the board sits on an NVSwitch that does multicast (NVLink SHARP: third-generation
  // NVSwitch, the SXM H100 and H200 baseboards): CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED.
  bool multicast;
};

// What a context costs on a card nobody measured (and on hand-described scenario GPUs).
inline constexpr uint64_t kUnmeasuredContextMib = 256;

const std::vector<GpuPreset>& GpuPresets();
const GpuPreset* FindGpuPreset(const std::string& key);  // case-insensitive; nullptr if unknown

}  // namespace gs::sim
