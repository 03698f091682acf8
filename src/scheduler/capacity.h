// The one rule for "does one more container's share fit on this card", used by the
// placement (placement.h) when it chooses and by the ledger (ledger.h) when it re-checks
// at reserve time, so the two can never disagree.
//
// Pure functions on small values; O(1).
#pragma once

#include <cstdint>

#include "src/scheduler/inventory.h"

namespace gs::scheduler {

// What is handed out on one card.
struct CardUsage {
  int64_t memory_mib = 0;
  int cores = 0;
  int containers = 0;
};

enum class CardVerdict {
  kFits,
  kUnhealthy,
  kSlotsFull,      // `slots` containers already share it
  kExclusiveBusy,  // cores = 100 asked, but someone uses the card
  kNoMemory,
  kNoCores,
  kComputeExhausted,  // every core handed out: not even a cores = 0 container
};

// `memory_mib` and `cores` are the share asked on this card. With check_health false an
// unhealthy card still "fits" (a ledger rebuild must count pods already running on it).
CardVerdict CheckCard(const GpuDevice& card, const CardUsage& used, int64_t memory_mib, int cores,
                      bool check_health = true);

const char* VerdictText(CardVerdict v);

inline void AddShare(CardUsage* u, int64_t memory_mib, int cores) {
  u->memory_mib += memory_mib;
  u->cores += cores;
  u->containers += 1;
}
inline void RemoveShare(CardUsage* u, int64_t memory_mib, int cores) {
  u->memory_mib -= memory_mib;
  u->cores -= cores;
  u->containers -= 1;
}

// Fraction of the card handed out, 0..1: the mean of memory, cores and slots used.
// Binpack prefers a higher value, spread a lower one.
double CardFullness(const GpuDevice& card, const CardUsage& used);

}  // namespace gs::scheduler
