// Keeps a card file shrunk by another tenant from killing this process.
//
// Card regions (src/region/card.h) are files that every container computing on a GPU maps
// read-write, so one hostile tenant can ftruncate its card file: every other tenant's
// enforcer would then take SIGBUS on its next access to the mapping and the program would
// die. The guard catches SIGBUS inside a registered card mapping, maps a fresh private card
// over it (this process then coordinates only its own launches on that device: its share
// still holds under policy force, and it time-slices with the others under default) and
// lets the faulting instruction run again. Faults anywhere else go to the handler the
// program had, or to the default action.
//
// Limits: a program that installs its own SIGBUS handler after the enforcer loaded
// replaces the guard (then a shrunk card kills it as before).
//
// Thread-safety: GuardCard is called under the limiter's join mutex; the handler uses only
// async-signal-safe calls (mmap, clock_gettime, sigaction) and atomics.
#pragma once

#include <cstdint>

#include "src/region/card.h"

namespace gs::enforcer {

// Registers the card mapped for device `dev` and what this process published in it as
// tenant `tenant` (restored in the private card that replaces a lost one).
void GuardCard(int dev, region::Card* card, int tenant, uint64_t id, unsigned share, bool force, int priority);

// True, once, after device `dev`'s card was replaced by a private one (for the log).
bool TakeCardLost(int dev);

}  // namespace gs::enforcer
