#include "src/scheduler/capacity.h"

namespace gs::scheduler {

const char* VerdictText(CardVerdict v) {
  switch (v) {
    case CardVerdict::kFits:
      return "fits";
    case CardVerdict::kUnhealthy:
      return "unhealthy";
    case CardVerdict::kCordoned:
      return "cordoned (the node's hami.io/device-cordon)";
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

}  // namespace gs::scheduler
