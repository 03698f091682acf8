#include "src/node/card_selection.h"

#include <set>

namespace gs::node {

CardSelection SelectCards(const Config& cfg, const std::vector<platform::GpuInfo>& reported) {
  CardSelection out;
  std::set<std::string> matched;
  for (const auto& g : reported) {
    std::string card = "card " + std::to_string(g.index) + (g.uuid.empty() ? "" : " (" + g.uuid + ")");
    std::string by;
    for (const auto& e : cfg.exclude_devices)
      if (e == std::to_string(g.index) || (!g.uuid.empty() && e == g.uuid)) {
        matched.insert(e);
        by = e;
      }
    if (!by.empty()) {
      out.infos.push_back(card + " is not registered: excluded by '" + by + "' (--exclude-devices)");
      continue;
    }
    platform::GpuInfo kept = g;
    if (!g.lost && !g.memory_info_supported) {
      if (cfg.pre_configured_device_memory == 0) {
        out.errors.push_back(card +
                             " is not registered: NVML cannot report its memory (NOT_SUPPORTED, a unified-memory "
                             "card?); set --pre-configured-device-memory to its memory");
        continue;
      }
      kept.memory_total = cfg.pre_configured_device_memory;
      out.warnings.push_back(card + ": NVML cannot report its memory; registering " +
                             std::to_string(cfg.pre_configured_device_memory >> 20) +
                             " MiB (--pre-configured-device-memory)");
    }
    out.cards.push_back(std::move(kept));
  }
  for (const auto& e : cfg.exclude_devices)
    if (!matched.count(e)) out.warnings.push_back("--exclude-devices: '" + e + "' matches no card on this node");
  return out;
}

}  // namespace gs::node
