// Which tenant entry of each card region (src/region/card.h) a container owns, decided on
// the host by whatever makes the container's slice (the node agent, the OCI hook,
// `gpuslice run`) and handed to the container's enforcer in its read-only limits file
// (GPUSLICE_CARD_ENTRY_<i>).
//
// Why: every tenant of a card can write the whole card file, so entries a container claims
// for itself can all be taken by one that never computes, and the next container would
// find no entry and run without its share. An entry handed out here is the container's
// whatever the card file says; the enforcer takes it over and keeps re-publishing it.
//
// The roster: one file per card, <cards dir>/../card-entries/<uuid> (a directory no
// container sees), 64 fixed slots of 256 bytes, slot i the line "<entry i> <unix seconds
// when handed out> <owner>" with spaces before the owner to fill it (blank when never
// used), where the owner is
// the directory whose life is the container's slice (the directory holding its limits file
// and region), which exists before the entry is asked for. An assignment stands while its
// owner exists; then the entry is free again. Nothing needs to release an entry: removing
// the slice's directory does. Readers and writers serialise on an flock of
// <roster dir>/.lock; handing out an entry rewrites its slot in place, so a crash tears at
// most that line. A roster of plain lines (an older version's) is read the same way and
// rewritten in slots by rename, or kept in lines while an owner too long for a slot stands.
//
// Thread-safe across processes (flock). Cost: an open, a lock, a 16 KiB read, a stat per
// owner named for an entry up to the one handed out (every owner in a roster of plain
// lines, which is rewritten whole), and one 256-byte write per card.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/model/container_edits.h"
#include "src/model/slices.h"

namespace gs::node {

// The roster directory of a cards directory: a sibling, never mounted into containers.
std::string CardEntriesDir(const std::string& cards_dir);

// One entry on each card of `uuids` for `owner` (an existing directory), in the same order: the one it already has,
// else the lowest free one; -1 where every entry of a card is taken (its enforcer then
// claims one from the card file itself, from the top down). Errors name the path.
StatusOr<std::vector<int>> AssignCardEntries(const std::string& cards_dir, const std::vector<std::string>& uuids,
                                             const std::string& owner, int64_t now_seconds);

// Makes the roster of each of `gpus` that has none, every slot blank (at the agent's start:
// a file made on the first Allocate of a card cost that call up to 2 ms on a churned ext4).
Status PrepareCardRosters(const std::string& cards_dir, const std::vector<model::Gpu>& gpus);

// Hands `owner` an entry on the card of each device of `a` that has a compute share (the
// only ones whose enforcer takes turns) and records it in the device's card_entry.
Status TakeCardEntries(const std::string& cards_dir, const std::string& owner, int64_t now_seconds,
                       model::Allocation* a);

// The entries `owner` holds on card `uuid` (tests, diagnostics); stale ones excluded.
std::vector<int> CardEntriesOf(const std::string& cards_dir, const std::string& uuid, const std::string& owner);

}  // namespace gs::node
