// The node's card regions: one file per GPU under <state-dir>/cards, named by the GPU's
// UUID, through which the enforcers of every container computing on that card take turns
// (src/region/card.h). The agent mounts the directory read-write into each container it
// allocates and names it in GPUSLICE_CARDS_DIR.
//
// The agent makes the files, not the containers: the directory is the agent's (0755), so
// a container cannot create files there (no disk to fill, no links planted for another
// tenant, no card replaced by another file); each card file is made 0666 (containers run
// as any user) and allocated to its full size (a full disk never faults a tenant on a
// page it touches later). The first enforcer to map an all-zero file initialises it. A
// card file that already exists (the agent restarted while containers compute) is kept.
//
// Called once at start; not thread-safe. Cost: a few syscalls per GPU.
#pragma once

#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/model/slices.h"

namespace gs::node {

// Whether a GPU UUID can name a file of the cards directory (or of its roster): no path
// separator, and not a hidden name.
bool UsableCardFileName(const std::string& uuid);

// Makes `dir` and one card file per GPU in it. Errors name the path and the reason.
Status PrepareCardFiles(const std::string& dir, const std::vector<model::Gpu>& gpus);

}  // namespace gs::node
