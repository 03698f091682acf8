#include "src/scheduler/capacity.h"

namespace gs::scheduler {

CardVerdict CheckCard(const GpuDevice& card, const CardUsage& used, int64_t memory_mib, int cores, bool check_health) {
  if (check_health && !card.healthy) return CardVerdict::kUnhealthy;
  if (used.containers >= card.slots) return CardVerdict::kSlotsFull;
  if (cores >= 100 && used.containers > 0) return CardVerdict::kExclusiveBusy;
  if (card.memory_mib - used.memory_mib < memory_mib) return CardVerdict::kNoMemory;
  if (card.cores - used.cores < cores) return CardVerdict::kNoCores;
  if (cores == 0 && used.cores >= card.cores) return CardVerdict::kComputeExhausted;
  return CardVerdict::kFits;
}

const char* VerdictText(CardVerdict v) {
  switch (v) {
    case CardVerdict::kFits:
      return "fits";
    case CardVerdict::kUnhealthy:
      return "unhealthy";
    case CardVerdict::kSlotsFull:
      return "all slots in use";
    case CardVerdict::kExclusiveBusy:
      return "in use (exclusive asked)";
    case CardVerdict::kNoMemory:
      return "too little free memory";
    case CardVerdict::kNoCores:
      return "too few free cores";
    case CardVerdict::kComputeExhausted:
      return "all cores handed out";
  }
  return "?";
}

double CardFullness(const GpuDevice& card, const CardUsage& used) {
  double mem = static_cast<double>(used.memory_mib) / static_cast<double>(card.memory_mib);
  double cores = static_cast<double>(used.cores) / static_cast<double>(card.cores);
  double slots = static_cast<double>(used.containers) / static_cast<double>(card.slots);
  return (mem + cores + slots) / 3.0;
}

}  // namespace gs::scheduler
