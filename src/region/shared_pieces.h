// The region's table of shared pieces (SharedPiece, region.h): allocations one process of
// the container exported and others imported. A pool allocation's charge must outlive its
// owner's slot while an importer keeps it on the card (the card lists it under no process);
// a legacy IPC allocation is recorded with no bytes, only so that an importer knows it comes
// from its own container (the card lists it under its holder once the owner let go, and the
// holder's reconciliation charges it). The owner records a piece when it exports it, keyed
// by the driver's export data or handle; an importer that imports the same bytes marks itself
// a holder, and unmarks itself when it lets the piece go or its slot goes.
//
// What a process that writes the table (every process of the container can) gains: moving
// charges between the slots of its own container, or dropping a piece so that its charge
// leaves with a slot (or a forged size makes an importer's free give back more): all of it
// within its own container. A full table leaves a piece unfollowed (logged by the caller):
// its importers then find no record and pay for it themselves, as for a piece of another
// container.
//
// Thread- and process-safe: every function takes the region mutex.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/region/region.h"

namespace gs::region {

// The key of a piece: a hash of the driver's export data (CUmemPoolPtrExportData) or IPC
// handle (CUipcMemHandle), never 0.
uint64_t PieceKey(const void* export_data, size_t size);

// `owner` exported its pointer `ptr` of its pool `pool`, `bytes` charged in its slot on
// `dev`, as `key` (a legacy IPC handle: no pool, 0 bytes: no charge follows it). false when
// the table is full.
bool RecordExportedPiece(Region* r, ProcessSlot* owner, uint64_t key, int dev, uint64_t bytes, uint64_t ptr,
                         uint64_t pool);
// `importer` imported `key`; false when no piece of the container has it (the owner is
// elsewhere, or kept no record).
bool RecordImportedPiece(Region* r, ProcessSlot* importer, uint64_t key);
// `importer` freed what it imported as `key`. A piece charged to it passes to another live
// holder, or, with none left, its charge is given back (the card let it go).
void ForgetImportedPiece(Region* r, ProcessSlot* importer, uint64_t key);
// `owner` freed `ptr`: a piece nobody imports is forgotten (its charge stays the owner's
// business); one still imported keeps its entry, so that its charge follows it past the owner.
void ForgetExportedPiece(Region* r, ProcessSlot* owner, uint64_t ptr);

// `owner` destroyed its pool `pool`: each piece of it the owner had freed that a live slot
// still holds moves, with its bytes, to that slot (the card keeps it for the holder); the
// others are forgotten. Returns the bytes moved off the owner's slot on device `dev`.
uint64_t HandOverPoolPieces(Region* r, ProcessSlot* owner, uint64_t pool, int dev);

// What pieces moved to `slot` hold of its memory on `dev`: memory NVML lists under no
// process (a plain read, no lock).
uint64_t PiecesChargedTo(const Region* r, const ProcessSlot* slot, int dev);

// With the mutex held, as `slot` is claimed afresh: nothing of an earlier process's is
// followed through it (no holder mark, no piece charged to it), and legacy IPC handles their
// owner freed that no live slot holds any more are forgotten.
void ClearSlotPiecesLocked(Region* r, const ProcessSlot* slot);

// With the mutex held, as `slot` is freed (its process exited or is gone): its holder marks
// are cleared, and each piece charged to it passes, with its bytes, to another live holder.
// Pieces charged to it that nobody holds, and legacy IPC handles their owner freed that no
// live slot holds any more, are forgotten.
void LeavePiecesLocked(Region* r, ProcessSlot* slot);

}  // namespace gs::region
