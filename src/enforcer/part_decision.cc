#include "src/enforcer/part_decision.h"

namespace gs::enforcer {

PartDecision DecidePart(const PartLook& look, PartProgress* progress) {
  if (!look.holds_turn) return {PartAction::kTakenFromUs, EndReason::kDeadline};
  if (look.launches != progress->seen_launches) progress->Saw(look.launches, look.now);
  const bool idle = look.now - progress->last_change_ns >= kIdleNs;
  const bool expired = look.now >= look.deadline;
  if (expired && !idle && !look.others_wait) return {PartAction::kExtendAlone, EndReason::kDeadline};
  // A launch refused because the part's launches are spent ends it at once, rather than
  // after kIdleNs of an idle card.
  const bool spent = look.in_turn > look.budget;
  if (!expired && !idle && !spent) return {PartAction::kGoOn, EndReason::kDeadline};
  return {PartAction::kEnd, expired ? EndReason::kDeadline : idle ? EndReason::kIdle : EndReason::kSpent};
}

const char* EndReasonName(EndReason r) {
  switch (r) {
    case EndReason::kDeadline:
      return "deadline";
    case EndReason::kIdle:
      return "idle";
    case EndReason::kSpent:
      return "launches spent";
    case EndReason::kExit:
      return "exit";
  }
  return "?";
}

}  // namespace gs::enforcer
