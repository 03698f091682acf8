// Memory a card holds that the driver lists under no process. A pool's allocation freed by
// its owner while another process imports it is listed under no one from then on, and stays
// on the card until the importer has let go and the owner's pool is gone too (destroyed, or
// its owner exited) (docs/measurements/shared-memory.md), so no per-process figure shows it:
// not a container's own reconciliation, not the memory watchdog. The enforcer keeps it
// charged (to the owner while its pool lives, then to an importer of its container, or to an
// importer in another container from the import on); a process that forged its container's
// records or imported around its enforcer leaves it charged to no one (docs/enforcer.md,
// "Threat model"). The card's total is the one place it shows: this watch reports it, per
// card, when it stays above what the driver keeps unlisted itself.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/platform/gpu_driver.h"

namespace gs::node {

struct UnlistedReport {
  enum class Kind { kAppeared, kGrew, kGone };  // kGone: back within the slack
  Kind kind = Kind::kAppeared;
  std::string uuid;
  uint64_t bytes = 0;    // unlisted now
  size_t processes = 0;  // processes the driver lists on the card
};

// Over successive observations (one a second): a card reports kAppeared once its unlisted
// memory is above the slack in kConfirm observations in a row, kGrew each time it reaches
// twice what was last reported, kGone once it is within the slack (which grows with the
// processes listed) in kConfirm in a row. A
// card whose figure is unknown (nvmlDeviceGetMemoryInfo_v2 unanswered, a lost GPU) keeps
// its state and breaks no run.
class UnlistedMemoryWatch {
 public:
  // The driver's own unlisted memory: 8-9 MiB beside one context on an H100 and an H200,
  // about 5.7 MiB more per further context on an H200, 31 MiB beside five
  // (docs/measurements/h200-driver.md, 2026-11-28); each listed process is allowed a
  // further 16 MiB, room for a few contexts each.
  static constexpr uint64_t kSlackBytes = 64ull << 20;
  static constexpr uint64_t kSlackPerProcessBytes = 16ull << 20;
  static constexpr int kConfirm = 3;

  std::vector<UnlistedReport> Observe(const std::vector<platform::GpuInfo>& gpus);

 private:
  struct Card {
    int over = 0, under = 0;  // observations in a row above / below the slack
    uint64_t reported = 0;    // 0: nothing reported (or reported gone)
  };
  std::map<std::string, Card> cards_;  // by UUID
};

}  // namespace gs::node
