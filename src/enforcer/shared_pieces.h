// Allocations shared between processes of the container, followed in the region
// (src/region/shared_pieces.h). A pool's piece: the card keeps it, listed by NVML under no
// process, until its last importer lets go, also past its owner
// (docs/measurements/shared-memory.md). The owner's slot pays while the owner lives; when
// the owner goes first, the charge moves to a live importer's slot, and leaves with the last
// holder. A legacy IPC allocation is recorded only so that its importer knows it comes from
// the container (its owner pays; once the owner let go the card lists it under the holder,
// whose reconciliation pays). A piece of no record here (an owner of another container, or
// one that kept no record) is not followed: its importer pays for it while it holds it
// (the import hooks, docs/enforcer.md, "Threat model").
//
// Thread-safe (the region mutex); called from the sharing hooks, not on the launch path.
#pragma once

#include <cstdint>

#include "src/enforcer/allocations.h"
#include "src/platform/cuda_api.h"

namespace gs::enforcer {

// This process exported `ptr`, an allocation it charged, as `data` (cuMemPoolExportPointer)
// or `handle` (cuIpcGetMemHandle).
void FollowExportedPiece(CUdeviceptr ptr, const CUmemPoolPtrExportData& data);
void FollowExportedPiece(CUdeviceptr ptr, const CUipcMemHandle& handle);
// This process freed `ptr`, an allocation it exported that FollowExportedPiece recorded.
void LetGoExportedPiece(CUdeviceptr ptr);
// This process destroyed `pool`, whose freed exported pieces it kept charged on region
// device `dev`: those another process still holds move to it. Returns the bytes that left
// this process's slot that way (the caller gives back only the rest).
uint64_t HandOverPoolPieces(uint64_t pool, int dev);
// This process imported `data` (cuMemPoolImportPointer) or opened `handle`
// (cuIpcOpenMemHandle) on region device `dev`. Returns the key its release passes to
// LetGoImportedPiece; 0 when no piece of the container has it.
uint64_t FollowImportedPiece(int dev, const CUmemPoolPtrExportData& data);
uint64_t FollowImportedPiece(int dev, const CUipcMemHandle& handle);
void LetGoImportedPiece(uint64_t key);
// This process let `ptr` go (freed or closed it, or its context ended), a pointer shared
// with other processes (`c.imported`, or `c.exported` and not spilled): an imported one
// gives back what its import charged (the caller then reconciles its card: memory whose
// owner is gone is this process's on the card while it holds it); an exported pool allocation stays charged until its
// pool is destroyed (the pool may keep it on the card past its importers, listed under no
// process), other exported memory while importers may hold it (KeepWhileShared).
void LetGoSharedPointer(CUdeviceptr ptr, const Charge& c);

}  // namespace gs::enforcer
