#include "src/sim/gpu_presets.h"

#include <strings.h>

#include "src/platform/nvml_api.h"

namespace gs::sim {

const std::vector<GpuPreset>& GpuPresets() {
  // Memory sizes are the totals nvidia-smi prints for each board (ECC on); SM counts and
  // PCI ids from NVIDIA's product specifications and the PCI ID database. Context
  // footprints: the H100's 518 MiB is NVML's per-process used memory for its own pid
  // after creating the primary context (and another 518 for each further context), on an
  // H100 80GB HBM3 with driver 580.159.04 / CUDA 13.0 (docs/measurements/h100-driver.md,
  // "What device memory costs"). The other cards are not measured
  // and keep kUnmeasuredContextMib. Multicast: the SXM H100 and H200 sit on NVSwitches
  // that do it (NVLink SHARP); the A100's NVSwitch does not, PCIe cards have none.
  static const std::vector<GpuPreset> kPresets = {
      {"T4", "Tesla T4", 15360, 40, 7, 5, NVML_DEVICE_ARCH_TURING, 0x1EB8, 70, 1590, 5001, kUnmeasuredContextMib,
       false},  // context: not measured
      {"L4", "NVIDIA L4", 23034, 58, 8, 9, NVML_DEVICE_ARCH_ADA, 0x27B8, 72, 2040, 6251, kUnmeasuredContextMib,
       false},  // context: not measured
      {"A100-40GB", "NVIDIA A100-SXM4-40GB", 40960, 108, 8, 0, NVML_DEVICE_ARCH_AMPERE, 0x20B0, 400, 1410, 1215,
       kUnmeasuredContextMib, false},  // context: not measured
      {"A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, 108, 8, 0, NVML_DEVICE_ARCH_AMPERE, 0x20B2, 400, 1410, 1593,
       kUnmeasuredContextMib, false},  // context: not measured
      {"H100-80GB", "NVIDIA H100 80GB HBM3", 81559, 132, 9, 0, NVML_DEVICE_ARCH_HOPPER, 0x2330, 700, 1980, 2619, 518,
       true},  // context: measured (NVML, own pid), docs/measurements/h100-driver.md
      {"H200-141GB", "NVIDIA H200", 143771, 132, 9, 0, NVML_DEVICE_ARCH_HOPPER, 0x2335, 700, 1980, 3201,
       kUnmeasuredContextMib, true},  // context: not measured
  };
  return kPresets;
}

const GpuPreset* FindGpuPreset(const std::string& key) {
  for (const auto& p : GpuPresets())
    if (strcasecmp(p.key, key.c_str()) == 0) return &p;
  return nullptr;
}

}  // namespace gs::sim
