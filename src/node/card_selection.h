// Which of the cards NVML reports the node agent registers: HAMi's filterdevices
// (--exclude-devices, by UUID or NVML index) and its preConfiguredDeviceMemory (a card
// whose memory NVML cannot report is registered with the configured memory, or not at
// all). Everything downstream (slices, the kubelet's list, the CDI spec, the scheduler's
// register annotation) sees only the cards chosen here. Pure: the caller logs the lines.
#pragma once

#include <string>
#include <vector>

#include "src/node/config.h"
#include "src/platform/gpu_driver.h"

namespace gs::node {

struct CardSelection {
  std::vector<platform::GpuInfo> cards;  // to register, in NVML order
  std::vector<std::string> infos;        // cards left out as configured
  std::vector<std::string> warnings;     // exclusions that match no card; memory taken from the config
  std::vector<std::string> errors;       // cards left out because their memory is unknown
};

// The cards of `reported` the agent registers under `cfg`.
CardSelection SelectCards(const Config& cfg, const std::vector<platform::GpuInfo>& reported);

}  // namespace gs::node
