// How busy the card was while this process held its turns on it: the charge for a turn of
// a tenant held to its share (policy force) while nobody else waits (docs/enforcer.md,
// "A share is a cap"). A share caps the card's time a tenant uses; a turn's wall length
// overcharges a program that keeps the card only partly busy (it prepares each kernel on
// the CPU), which then runs its share of the time and uses that share of what it used
// alone. Alone on the card, every busy moment of it falls in this tenant's turns, so the
// card's utilisation over the time this process held turns is what the turns used.
//
// NVML's utilisation is the share of its last sample period (1/6 s to 1 s; 200 ms on an
// H100) in which a kernel ran, read a little after the period ended, while held time is
// this process's own up to now: the utilisation lags. So the figure is the card's busy
// time over the time held across the last kWindow samples (1.2 s, full 1.3 s after the first
// look), with the utilisation matched against held time up to kMostLag samples earlier, the
// highest of those ratios: whichever stretch NVML's figure covered, the turns are charged
// at least what the card was busy in them. A process that starts computing is charged
// whole turns until the window is full; one that turns from host-bound to saturating is
// charged less than its turns until the window holds mostly the new pattern, about a
// second (alone: the cap is exceeded for that long, and nobody is kept from the card).
//
// Sample() runs on the limiter's controller thread only; Permille() is read there too.
// Time is a parameter: tested on made-up time.
#pragma once

#include <cstdint>

namespace gs::enforcer {

class CardBusy {
 public:
  static constexpr int64_t kSampleNs = 100'000'000;  // how often the card is asked
  static constexpr int kWindow = 12;                 // samples the figure is taken from
  static constexpr int kMostLag = 3;                 // samples NVML's figure may lag by
  // Held less than this share of the time across the window, the figure is not believed:
  // the turns' length is charged.
  static constexpr double kLeastHeld = 0.01;
  static constexpr unsigned kAll = 1000;  // the whole turn: what is charged unmeasured
  static constexpr unsigned kFloor = 20;  // never believed below 2 % of a turn

  // Whether a sample is due at `now`.
  bool Due(int64_t now) const { return now - last_at_ >= kSampleNs; }
  // The card's utilisation now (percent, as NVML reports it), and the time this process
  // has held turns on it in all, up to `now`.
  void Sample(int64_t now, unsigned util_pct, int64_t held_ns);
  // Not measured (NVML gave no utilisation): the turns' length is charged until the window
  // is full again.
  void Unknown(int64_t now);
  // Per mille of a turn the card was busy: kAll until measured.
  unsigned Permille() const { return permille_; }

 private:
  int64_t last_at_ = 0, last_held_ = 0;
  bool started_ = false;
  int count_ = 0;                                   // samples in the window
  double util_[kWindow] = {}, held_[kWindow] = {};  // fractions of the time, in the order taken
  unsigned permille_ = kAll;
};

}  // namespace gs::enforcer
