// What the compute limiter's controller does with this process's part of a held turn at
// one look (docs/enforcer.md, "Compute share"): go on, end the part (deadline, idle, the
// launches it admitted spent), ask to extend the turn while alone on the card, or charge a
// turn another tenant took. A pure function of what the controller saw and when, so that
// its rules run on made-up time in unit tests; the limiter gathers the look from the card
// and its launch gate and carries the action out.
#pragma once

#include <cstdint>

namespace gs::enforcer {

// A process that launched nothing for this long is idle: its part of the turn ends.
inline constexpr int64_t kIdleNs = 1'000'000;

// What the controller saw at `now`.
struct PartLook {
  int64_t now = 0;
  bool holds_turn = true;           // the card still names this tenant's turn as the one joined
  uint64_t launches = 0;            // launches through the gate so far (it only grows)
  int64_t deadline = 0;             // the turn's deadline as the card says it (INT64_MAX: unknown)
  bool others_wait = false;         // another tenant waits for the card (read only past the deadline)
  int64_t in_turn = 0, budget = 0;  // launches this part took, and may take
};

// What the controller alone keeps between looks at a part: the launch count it last saw,
// and when that count last changed (Saw: a part opens, or the count moved).
struct PartProgress {
  uint64_t seen_launches = 0;
  int64_t last_change_ns = 0;
  void Saw(uint64_t launches, int64_t now) {
    seen_launches = launches;
    last_change_ns = now;
  }
};

enum class PartAction {
  kGoOn,         // look again later
  kTakenFromUs,  // another tenant took the turn: drain and charge our part ourselves
  kExtendAlone,  // past the deadline, busy and alone: extend the turn (rg::ExtendTurnAlone);
                 // if the card does not allow it, end the part for its deadline
  kEnd,          // drain, then reopen the part or leave the turn
};
enum class EndReason { kDeadline, kIdle, kSpent, kExit };  // kExit: the process exits (the limiter's own)

struct PartDecision {
  PartAction action = PartAction::kGoOn;
  EndReason reason = EndReason::kDeadline;  // kEnd's (and kExtendAlone's if refused)
};

// Decides at one look, moving `progress` on.
PartDecision DecidePart(const PartLook& look, PartProgress* progress);

const char* EndReasonName(EndReason r);

}  // namespace gs::enforcer
