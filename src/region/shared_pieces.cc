#include "src/region/shared_pieces.h"

#include <cstring>

namespace gs::region {
namespace {

int SlotIndex(const Region* r, const ProcessSlot* slot) {
  return static_cast<int>(slot - r->procs);
}

bool Holds(const SharedPiece& p, int slot) {
  return (p.holders[slot / 64] >> (slot % 64) & 1) != 0;
}

void SetHolder(SharedPiece* p, int slot, bool holds) {
  const uint64_t bit = uint64_t{1} << (slot % 64);
  p->holders[slot / 64] = holds ? p->holders[slot / 64] | bit : p->holders[slot / 64] & ~bit;
}

// A live slot other than `except` that holds the piece; -1 when none.
int AnotherHolder(const Region* r, const SharedPiece& p, int except) {
  for (int s = 0; s < kMaxProcesses; ++s)
    if (s != except && Holds(p, s) && r->procs[s].pid.load() != 0) return s;
  return -1;
}

// A legacy IPC handle (no bytes) its owner freed that no live slot holds any more: nothing
// left to follow. (A pool's piece stays until its pool is destroyed: HandOverPoolPieces.)
bool Orphaned(const Region* r, const SharedPiece& p) {
  return p.bytes == 0 && p.owner_ptr == 0 && AnotherHolder(r, p, -1) < 0;
}

// Entries hold indexes a process of the container wrote: only those inside the arrays count.
bool Valid(const SharedPiece& p) {
  return p.key != 0 && p.device >= 0 && p.device < kMaxDevices && p.charged_slot >= 0 && p.charged_slot < kMaxProcesses;
}

void Forget(SharedPiece* p) {
  memset(static_cast<void*>(p), 0, sizeof(*p));
}

// Moves the piece's charge from its slot to slot `to`: what the slot holds at most, so the
// device total, the sum of the slots, does not change, and the piece is worth what moved
// (its owner may have been given part of it back already). A piece worth nothing is
// forgotten. Returns the bytes moved.
uint64_t MoveCharge(Region* r, SharedPiece* p, int to) {
  ProcessSlot& from = r->procs[p->charged_slot];
  const uint64_t held = from.memory[p->device].load();
  const uint64_t n = p->bytes < held ? p->bytes : held;
  from.memory[p->device].fetch_sub(n);
  r->procs[to].memory[p->device].fetch_add(n);
  p->charged_slot = to;
  p->bytes = n;
  if (n == 0) Forget(p);
  return n;
}

SharedPiece* Find(Region* r, uint64_t key) {
  for (auto& p : r->pieces)
    if (p.key == key && Valid(p)) return &p;
  return nullptr;
}

}  // namespace

uint64_t PieceKey(const void* export_data, size_t size) {
  // FNV-1a: the export data is the driver's, not an adversary's; a forged collision moves a
  // charge within the forger's own container only.
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto* b = static_cast<const unsigned char*>(export_data);
  for (size_t i = 0; i < size; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h == 0 ? 1 : h;
}

bool RecordExportedPiece(Region* r, ProcessSlot* owner, uint64_t key, int dev, uint64_t bytes, uint64_t ptr,
                         uint64_t pool) {
  if (key == 0 || dev < 0 || dev >= kMaxDevices) return false;
  Lock(r);
  SharedPiece* p = Find(r, key);
  bool ok = p != nullptr;  // exported again: already followed
  if (p == nullptr) {
    for (auto& e : r->pieces) {
      if (e.key != 0) continue;
      WriteBegin(r);
      e.device = dev;
      e.charged_slot = SlotIndex(r, owner);
      e.bytes = bytes;
      e.owner_ptr = ptr;
      e.owner_pool = pool;
      e.key = key;
      WriteEnd(r);
      ok = true;
      break;
    }
  }
  Unlock(r);
  return ok;
}

bool RecordImportedPiece(Region* r, ProcessSlot* importer, uint64_t key) {
  Lock(r);
  SharedPiece* p = Find(r, key);
  if (p != nullptr) {
    WriteBegin(r);
    SetHolder(p, SlotIndex(r, importer), true);
    WriteEnd(r);
  }
  Unlock(r);
  return p != nullptr;
}

void ForgetImportedPiece(Region* r, ProcessSlot* importer, uint64_t key) {
  const int me = SlotIndex(r, importer);
  Lock(r);
  SharedPiece* p = Find(r, key);
  if (p != nullptr && Holds(*p, me)) {
    WriteBegin(r);
    SetHolder(p, me, false);
    if (p->charged_slot == me) {
      if (int next = AnotherHolder(r, *p, me); next >= 0) {
        MoveCharge(r, p, next);
      } else {
        // The last holder of a piece whose owner is gone: it leaves the card now.
        const uint64_t held = importer->memory[p->device].load();
        const uint64_t n = p->bytes < held ? p->bytes : held;
        importer->memory[p->device].fetch_sub(n);
        r->devices[p->device].memory_used.fetch_sub(n);
        Forget(p);
      }
    } else if (p->owner_ptr == 0 && AnotherHolder(r, *p, me) < 0) {
      Forget(p);  // its owner freed it and nobody imports it any more: nothing to follow
    }
    WriteEnd(r);
  }
  Unlock(r);
}

void ForgetExportedPiece(Region* r, ProcessSlot* owner, uint64_t ptr) {
  const int me = SlotIndex(r, owner);
  Lock(r);
  for (auto& p : r->pieces) {
    if (!Valid(p) || p.charged_slot != me || p.owner_ptr != ptr || ptr == 0) continue;
    WriteBegin(r);
    p.owner_ptr = 0;
    if (AnotherHolder(r, p, me) < 0) Forget(&p);
    WriteEnd(r);
  }
  Unlock(r);
}

uint64_t HandOverPoolPieces(Region* r, ProcessSlot* owner, uint64_t pool, int dev) {
  const int me = SlotIndex(r, owner);
  uint64_t moved = 0;
  Lock(r);
  for (auto& p : r->pieces) {
    if (!Valid(p) || p.charged_slot != me || p.owner_pool != pool || p.owner_ptr != 0) continue;
    WriteBegin(r);
    if (int next = AnotherHolder(r, p, me); next >= 0) {
      const int device = p.device;
      const uint64_t n = MoveCharge(r, &p, next);
      if (device == dev) moved += n;
    } else {
      Forget(&p);
    }
    WriteEnd(r);
  }
  Unlock(r);
  return moved;
}

uint64_t PiecesChargedTo(const Region* r, const ProcessSlot* slot, int dev) {
  const int me = SlotIndex(r, slot);
  uint64_t sum = 0;
  for (const auto& p : r->pieces)
    if (p.key != 0 && p.charged_slot == me && p.device == dev && p.owner_ptr == 0) sum += p.bytes;
  return sum;
}

void ClearSlotPiecesLocked(Region* r, const ProcessSlot* slot) {
  const int me = SlotIndex(r, slot);
  for (auto& p : r->pieces) {
    if (p.key == 0) continue;
    SetHolder(&p, me, false);
    if (p.charged_slot == me || Orphaned(r, p)) Forget(&p);
  }
}

void LeavePiecesLocked(Region* r, ProcessSlot* slot) {
  const int me = SlotIndex(r, slot);
  for (auto& p : r->pieces) {
    if (p.key == 0) continue;
    if (!Valid(p)) {  // written by nothing of ours
      Forget(&p);
      continue;
    }
    SetHolder(&p, me, false);
    if (p.charged_slot != me) {
      if (Orphaned(r, p)) Forget(&p);  // its last holder went without letting go
      continue;
    }
    if (int next = AnotherHolder(r, p, me); next >= 0) {
      p.owner_ptr = 0;
      MoveCharge(r, &p, next);
    } else {
      Forget(&p);  // its charge goes with the slot
    }
  }
}

}  // namespace gs::region
