#include "src/enforcer/shared_pieces.h"

#include <unistd.h>

#include "src/common/raw_log.h"
#include "src/enforcer/allocations.h"
#include "src/enforcer/charging.h"
#include "src/enforcer/enforcer.h"
#include "src/region/shared_pieces.h"

namespace gs::enforcer {
namespace {

// This process's own slot, claimed first when it is a forked child; nullptr without one.
region::ProcessSlot* OwnSlot(int dev) {
  return CheckDevice(dev) == DeviceCheck::kCharge ? g_state.slot : nullptr;
}

// This process's slot if it has claimed one (a forked child has not until it charges).
region::ProcessSlot* ClaimedSlot() {
  if (g_state.region == nullptr || g_state.slot_pid.load() != getpid()) return nullptr;
  return g_state.slot;
}

// Records `ptr`, exported as `key`: with its charge for a pool's allocation (the charge
// follows the piece past its owner), with none for a legacy IPC allocation.
void FollowExported(CUdeviceptr ptr, uint64_t key, bool pool) {
  Charge c;
  if (!TheAllocations().Find(HandleKind::kPointer, ptr, &c) || c.spilled || c.bytes == 0) return;
  region::ProcessSlot* slot = OwnSlot(c.device);
  if (slot == nullptr) return;
  if (region::RecordExportedPiece(g_state.region, slot, key, c.device, pool ? c.bytes : 0, ptr, pool ? c.pool : 0)) {
    // Freed by another thread meanwhile: its free did not know the record, so take it back.
    if (!TheAllocations().MarkFollowed(HandleKind::kPointer, ptr, key))
      region::ForgetExportedPiece(g_state.region, slot, ptr);
  } else {
    GS_LOG(kInfo,
           "device %d: the region's table of shared pieces is full: an allocation exported now is charged to its "
           "importers too",
           c.device);
  }
}

uint64_t FollowImported(int dev, uint64_t key) {
  region::ProcessSlot* slot = OwnSlot(dev);
  if (slot == nullptr) return 0;
  return region::RecordImportedPiece(g_state.region, slot, key) ? key : 0;
}

}  // namespace

void FollowExportedPiece(CUdeviceptr ptr, const CUmemPoolPtrExportData& data) {
  FollowExported(ptr, region::PieceKey(data.reserved, sizeof(data.reserved)), /*pool=*/true);
}

void FollowExportedPiece(CUdeviceptr ptr, const CUipcMemHandle& handle) {
  FollowExported(ptr, region::PieceKey(handle.reserved, sizeof(handle.reserved)), /*pool=*/false);
}

void LetGoExportedPiece(CUdeviceptr ptr) {
  if (region::ProcessSlot* slot = ClaimedSlot()) region::ForgetExportedPiece(g_state.region, slot, ptr);
}

uint64_t HandOverPoolPieces(uint64_t pool, int dev) {
  region::ProcessSlot* slot = ClaimedSlot();
  return slot ? region::HandOverPoolPieces(g_state.region, slot, pool, dev) : 0;
}

uint64_t FollowImportedPiece(int dev, const CUmemPoolPtrExportData& data) {
  return FollowImported(dev, region::PieceKey(data.reserved, sizeof(data.reserved)));
}

uint64_t FollowImportedPiece(int dev, const CUipcMemHandle& handle) {
  return FollowImported(dev, region::PieceKey(handle.reserved, sizeof(handle.reserved)));
}

void LetGoImportedPiece(uint64_t key) {
  region::ProcessSlot* slot = ClaimedSlot();
  if (key != 0 && slot != nullptr) region::ForgetImportedPiece(g_state.region, slot, key);
}

void LetGoSharedPointer(CUdeviceptr ptr, const Charge& c) {
  if (c.imported) {
    LetGoImportedPiece(c.piece);
    if (c.bytes) UnreserveImported(c.device, c.bytes);
    return;
  }
  if (c.piece) LetGoExportedPiece(ptr);
  if (c.pool)
    ThePoolBook().KeptForImporters(c.pool, c.device, c.bytes);
  else
    KeepWhileShared(c.device, c.bytes);
}

}  // namespace gs::enforcer
