// Which allocations no container holds any more. The kubelet's pod-resources List says
// which containers hold which slices; an allocation is stale once no listed container has
// held any of its slices for the grace period, counted from the last List that showed it
// (or from its creation, or the agent's start, whichever is latest). So a List that
// comes back empty once (a kubelet restarting, a transient answer) releases nothing: the
// grace runs from the last time each container was seen, not from its creation.
//
// Pure bookkeeping, no I/O; not thread-safe (the agent's sweep owns it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/node/pod_resources.h"
#include "src/node/slice_book.h"

namespace gs::node {

class StaleAllocations {
 public:
  // `started_unix`: when the agent started (records loaded from disk count as seen then).
  StaleAllocations(int64_t grace_seconds, int64_t started_unix) : grace_(grace_seconds), started_(started_unix) {}

  // One successful List at `now_unix`; returns the ids of the records now stale (a
  // failed List must not be passed in: it says nothing about the containers).
  std::vector<std::string> Observe(const std::vector<AllocationRecord>& records,
                                   const std::vector<ContainerDevices>& pods, int64_t now_unix);

 private:
  int64_t grace_, started_;
  std::map<std::string, int64_t> last_listed_;  // record id -> last List that showed it
};

}  // namespace gs::node
