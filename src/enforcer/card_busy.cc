#include "src/enforcer/card_busy.h"

#include <algorithm>

namespace gs::enforcer {

void CardBusy::Sample(int64_t now, unsigned util_pct, int64_t held_ns) {
  if (!started_ || now <= last_at_ || held_ns < last_held_) {  // the first look, or time went wrong
    Unknown(now);
    started_ = true;
    last_held_ = held_ns;
    return;
  }
  const double held =
      std::clamp(static_cast<double>(held_ns - last_held_) / static_cast<double>(now - last_at_), 0.0, 1.0);
  last_at_ = now;
  last_held_ = held_ns;
  if (count_ == kWindow) {  // the oldest leaves the window
    std::copy(util_ + 1, util_ + kWindow, util_);
    std::copy(held_ + 1, held_ + kWindow, held_);
    --count_;
  }
  util_[count_] = std::min(util_pct, 100u) / 100.0;
  held_[count_] = held;
  if (++count_ < kWindow) return;
  double held_in_window = 0;
  for (double h : held_) held_in_window += h;
  if (held_in_window < kLeastHeld * kWindow) {
    permille_ = kAll;
    return;
  }
  // Utilisation read at sample i against the time held up to `lag` samples before it.
  double busy = 0;
  for (int lag = 0; lag <= kMostLag; ++lag) {
    double util = 0, held_then = 0;
    for (int i = lag; i < kWindow; ++i) {
      util += util_[i];
      held_then += held_[i - lag];
    }
    if (held_then <= 0) return void(permille_ = kAll);
    busy = std::max(busy, util / held_then);
  }
  permille_ = static_cast<unsigned>(std::clamp(busy * kAll, static_cast<double>(kFloor), static_cast<double>(kAll)));
}

void CardBusy::Unknown(int64_t now) {
  started_ = false;
  count_ = 0;
  last_at_ = now;
  permille_ = kAll;
}

}  // namespace gs::enforcer
