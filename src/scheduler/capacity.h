// The one rule for "does one more container's share fit on this card", used by the
// placement (placement.h) when it chooses and by the ledger (ledger.h) when it re-checks
// at reserve time, so the two can never disagree.
//
// Pure functions on small values; O(1). CardState is the same card in the form the fit
// loop reads (capacity and usage side by side, no strings): the ledger keeps one per card
// of every node in one array (ledger.h), and the GpuDevice forms below go through it, so
// there is one rule whichever form the caller holds.
#pragma once

#include <cstdint>

#include "src/scheduler/inventory.h"

namespace gs::scheduler {

// What is handed out on one card.
struct CardUsage {
  int64_t memory_mib = 0;
  int cores = 0;
  int containers = 0;
  bool operator==(const CardUsage&) const = default;
};

enum class CardVerdict {
  kFits,
  kUnhealthy,
  kCordoned,       // the node's hami.io/device-cordon names it
  kSlotsFull,      // `slots` containers already share it
  kExclusiveBusy,  // cores = 100 asked, but someone uses the card
  kNoMemory,
  kNoCores,
  kComputeExhausted,  // every core handed out: not even a cores = 0 container (keep last)
};
inline constexpr int kCardVerdicts = static_cast<int>(CardVerdict::kComputeExhausted) + 1;

// One card's capacity and what is handed out on it, 40 bytes.
struct CardState {
  CardUsage used;
  int64_t memory_mib = 0;
  int32_t slots = 1;
  int32_t cores = 100;
  int32_t numa = 0;
  bool healthy = true;
  bool cordoned = false;
  bool operator==(const CardState&) const = default;
};

inline CardState MakeCardState(const GpuDevice& card, const CardUsage& used) {
  return CardState{used, card.memory_mib, card.slots, card.cores, card.numa, card.healthy, card.cordoned};
}

// `memory_mib` and `cores` are the share asked on this card. With check_health false an
// unhealthy or cordoned card still "fits" (a ledger rebuild must count pods already
// running on it).
inline CardVerdict CheckCard(const CardState& card, int64_t memory_mib, int cores, bool check_health = true) {
  if (check_health && !card.healthy) return CardVerdict::kUnhealthy;
  if (check_health && card.cordoned) return CardVerdict::kCordoned;
  if (card.used.containers >= card.slots) return CardVerdict::kSlotsFull;
  if (cores >= 100 && card.used.containers > 0) return CardVerdict::kExclusiveBusy;
  if (card.memory_mib - card.used.memory_mib < memory_mib) return CardVerdict::kNoMemory;
  if (card.cores - card.used.cores < cores) return CardVerdict::kNoCores;
  if (cores == 0 && card.used.cores >= card.cores) return CardVerdict::kComputeExhausted;
  return CardVerdict::kFits;
}
inline CardVerdict CheckCard(const GpuDevice& card, const CardUsage& used, int64_t memory_mib, int cores,
                             bool check_health = true) {
  return CheckCard(MakeCardState(card, used), memory_mib, cores, check_health);
}

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
inline double CardFullness(const CardState& card) {
  double mem = static_cast<double>(card.used.memory_mib) / static_cast<double>(card.memory_mib);
  double cores = static_cast<double>(card.used.cores) / static_cast<double>(card.cores);
  double slots = static_cast<double>(card.used.containers) / static_cast<double>(card.slots);
  return (mem + cores + slots) / 3.0;
}
inline double CardFullness(const GpuDevice& card, const CardUsage& used) {
  return CardFullness(MakeCardState(card, used));
}

}  // namespace gs::scheduler
