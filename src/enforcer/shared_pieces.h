// Pool allocations shared between processes of the container, followed in the region
// (src/region/shared_pieces.h): the card keeps such a piece, listed by NVML under no
// process, until its last importer lets go, also past its owner
// (docs/measurements/shared-memory.md). The owner's slot pays while the owner lives; when
// the owner goes first, the charge moves to a live importer's slot, and leaves with the last
// holder. A piece of no record here (an owner of another container, or one that kept no
// record) is not followed: its importer pays for it (cuMemPoolImportPointer's hook,
// docs/enforcer.md, "Threat model").
//
// Thread-safe (the region mutex); called from the pool hooks, not on the launch path.
#pragma once

#include <cstdint>

#include "src/enforcer/allocations.h"
#include "src/platform/cuda_api.h"

namespace gs::enforcer {

// This process exported `ptr`, an allocation it charged, as `data` (cuMemPoolExportPointer).
void FollowExportedPiece(CUdeviceptr ptr, const CUmemPoolPtrExportData& data);
// This process freed `ptr`, an allocation it exported that FollowExportedPiece recorded.
void LetGoExportedPiece(CUdeviceptr ptr);
// This process destroyed `pool`, whose freed exported pieces it kept charged on region
// device `dev`: those another process still holds move to it. Returns the bytes that left
// this process's slot that way (the caller gives back only the rest).
uint64_t HandOverPoolPieces(uint64_t pool, int dev);
// This process imported `data` on region device `dev` (cuMemPoolImportPointer). Returns
// the key its free passes to LetGoImportedPiece; 0 when no piece of the container has it.
uint64_t FollowImportedPiece(int dev, const CUmemPoolPtrExportData& data);
void LetGoImportedPiece(uint64_t key);
// This process let `ptr` go (freed it, or its context ended), a pool pointer shared with
// other processes (`c.imported`, or `c.exported` with `c.pool`): an imported one gives back
// what its import charged; an exported one stays charged until its pool is destroyed (the
// pool may keep it on the card past its importers, listed under no process).
void LetGoSharedPoolPointer(CUdeviceptr ptr, const Charge& c);

}  // namespace gs::enforcer
