// The container-runtime tests' memory race: six processes of one container, each making a
// context and asking four times for 512 MiB, under CUDA_DEVICE_MEMORY_LIMIT=2g, while an
// observer without the enforcer watches the card (cuda_probe cardwatch: NVML's used
// memory of every compute process). On a simulated node whose contexts cost the card
// nothing and the enforcer 518 MiB each, the race decides how the slice is split between
// contexts and allocations, never how much of it is used.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tests/harness.h"

namespace gs::testing {

// What each container runs, as `sh -c` (/bin/cuda_probe in its root file system).
inline constexpr const char* kSixRacingProcesses =
    "for i in 1 2 3 4 5 6; do /bin/cuda_probe init alloc mem 512m alloc mem 512m alloc mem 512m alloc mem 512m "
    "sleep 1500 & done; wait";

struct RaceOnCard {
  Result result;           // of the container
  size_t contexts = 0;     // "init ok" lines
  size_t allocations = 0;  // "alloc ok" lines
  uint64_t card_most = 0;  // bytes the card held at most, seen from outside
  uint64_t samples = 0;    // the observer's looks at the card
  bool watched = false;    // the container ran to exit 0 and the observer watched it
};

// Runs the container (`run`, which must run kSixRacingProcesses with the 2 GiB limit)
// with the observer on `node_env`, prints the split after `what`, and checks what holds in
// every race ordering: contexts and allocations charged together stay within 2 GiB and
// leave less free than the smallest request (518 MiB). Failures are recorded; `watched`
// says whether the figures can be used.
RaceOnCard SixRacingProcesses(const Env& node_env, const std::string& what, const std::function<Result()>& run);

}  // namespace gs::testing
