#include "src/enforcer/allocations.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace gs::enforcer {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kA = 0x7f0000000000, kB = 0x7f1000000000;  // two reservations

// The bytes an unmap gave back on device 0.
uint64_t Unmap(VmmBook& b, uint64_t ptr, uint64_t size) {
  uint64_t bytes[2] = {};
  b.Unmapped(ptr, size, bytes, 2);
  return bytes[0];
}

TEST(VmmBook, ReleaseThenUnmapFreesAtTheUnmap) {
  VmmBook b;
  b.Created(1, Charge{0, 64 * kMiB});
  b.Mapped(kA, 64 * kMiB, 1);
  Charge c;
  EXPECT_FALSE(b.Released(1, &c));  // still mapped: the driver frees nothing
  EXPECT_EQ(b.Total(0), 64 * kMiB);
  EXPECT_EQ(Unmap(b, kA, 64 * kMiB), 64 * kMiB);
  EXPECT_EQ(b.Total(0), 0u);
}

TEST(VmmBook, UnmapThenReleaseFreesAtTheRelease) {
  VmmBook b;
  b.Created(1, Charge{0, 64 * kMiB});
  b.Mapped(kA, 64 * kMiB, 1);
  EXPECT_EQ(Unmap(b, kA, 64 * kMiB), 0u);  // the handle still holds it
  Charge c;
  ASSERT_TRUE(b.Released(1, &c));
  EXPECT_EQ(c.bytes, 64 * kMiB);
  EXPECT_EQ(c.device, 0);
  EXPECT_EQ(b.Total(0), 0u);
}

TEST(VmmBook, NeverMappedFreesAtTheRelease) {
  VmmBook b;
  b.Created(1, Charge{1, 2 * kMiB});
  Charge c;
  ASSERT_TRUE(b.Released(1, &c));
  EXPECT_EQ(c.device, 1);
  EXPECT_FALSE(b.Released(1, &c));  // once
}

TEST(VmmBook, TheLastOfSeveralMappingsFrees) {
  VmmBook b;
  b.Created(1, Charge{0, 64 * kMiB});
  b.Mapped(kA, 64 * kMiB, 1);
  b.Mapped(kB, 64 * kMiB, 1);
  Charge c;
  EXPECT_FALSE(b.Released(1, &c));
  EXPECT_EQ(Unmap(b, kB, 64 * kMiB), 0u);
  b.Mapped(kB, 32 * kMiB, 1);  // a released handle mapped again (a driver that allows it)
  EXPECT_EQ(Unmap(b, kA, 64 * kMiB), 0u);
  EXPECT_EQ(Unmap(b, kB, 32 * kMiB), 64 * kMiB);
}

TEST(VmmBook, OneUnmapOverSeveralMappingsFreesEachOnce) {
  VmmBook b;
  b.Created(1, Charge{0, 64 * kMiB});
  b.Created(2, Charge{1, 32 * kMiB});
  b.Mapped(kA, 64 * kMiB, 1);
  b.Mapped(kA + 64 * kMiB, 32 * kMiB, 2);
  Charge c;
  EXPECT_FALSE(b.Released(1, &c));
  EXPECT_FALSE(b.Released(2, &c));
  uint64_t bytes[2] = {};
  b.Unmapped(kA, 96 * kMiB, bytes, 2);
  EXPECT_EQ(bytes[0], 64 * kMiB);
  EXPECT_EQ(bytes[1], 32 * kMiB);
  EXPECT_FALSE(b.AnyMapped(kA, 96 * kMiB));
}

TEST(VmmBook, WhatAPartialUnmapLeavesMappedStaysCharged) {
  VmmBook b;
  b.Created(1, Charge{0, 64 * kMiB});
  b.Mapped(kA, 64 * kMiB, 1);
  Charge c;
  EXPECT_FALSE(b.Released(1, &c));
  EXPECT_EQ(Unmap(b, kA + 16 * kMiB, 16 * kMiB), 0u);  // a hole in the middle: two pieces left
  EXPECT_TRUE(b.AnyMapped(kA, 2 * kMiB));
  EXPECT_FALSE(b.AnyMapped(kA + 16 * kMiB, 16 * kMiB));
  EXPECT_TRUE(b.AnyMapped(kA + 60 * kMiB, 2 * kMiB));
  EXPECT_EQ(Unmap(b, kA, 16 * kMiB), 0u);
  EXPECT_EQ(Unmap(b, kA + 32 * kMiB, 32 * kMiB), 64 * kMiB);
}

TEST(VmmBook, AnyMappedSeesOverlapsAtEitherEnd) {
  VmmBook b;
  b.Created(1, Charge{0, 64 * kMiB});
  b.Mapped(kA + 64 * kMiB, 64 * kMiB, 1);
  EXPECT_FALSE(b.AnyMapped(kA, 64 * kMiB));
  EXPECT_TRUE(b.AnyMapped(kA, 64 * kMiB + 1));
  EXPECT_TRUE(b.AnyMapped(kA + 127 * kMiB, 2 * kMiB));
  EXPECT_FALSE(b.AnyMapped(kA + 128 * kMiB, 64 * kMiB));
}

TEST(VmmBook, ARetainedHandleHoldsTheAllocationUntilReleasedToo) {
  VmmBook b;
  b.Created(1, Charge{0, 64 * kMiB});
  b.Mapped(kA, 64 * kMiB, 1);
  b.Retained(7, kA + kMiB);  // cuMemRetainAllocationHandle of an address inside the mapping
  Charge c;
  EXPECT_FALSE(b.Released(1, &c));
  EXPECT_EQ(Unmap(b, kA, 64 * kMiB), 0u);
  b.Mapped(kB, 64 * kMiB, 7);
  EXPECT_FALSE(b.Released(7, &c));
  EXPECT_EQ(Unmap(b, kB, 64 * kMiB), 64 * kMiB);
}

TEST(VmmBook, AHandleValueHandedOutAgainNamesTheNewAllocation) {
  VmmBook b;
  b.Created(1, Charge{0, 64 * kMiB});
  b.Mapped(kA, 64 * kMiB, 1);
  Charge c;
  EXPECT_FALSE(b.Released(1, &c));
  b.Created(1, Charge{0, 2 * kMiB});  // the same value for a new allocation
  ASSERT_TRUE(b.Released(1, &c));
  EXPECT_EQ(c.bytes, 2 * kMiB);
  EXPECT_EQ(b.Total(0), 64 * kMiB);  // the first is still mapped
  EXPECT_EQ(Unmap(b, kA, 64 * kMiB), 64 * kMiB);
}

TEST(VmmBook, HandlesAndAddressesNotChargedHereAreIgnored) {
  VmmBook b;
  b.Mapped(kA, 64 * kMiB, 9);  // host memory, or made without a limit
  EXPECT_FALSE(b.AnyMapped(kA, 64 * kMiB));
  Charge c;
  EXPECT_FALSE(b.Released(9, &c));
  b.Retained(9, kA);
  EXPECT_EQ(Unmap(b, kA, 64 * kMiB), 0u);
}

// A graph's charge ends with the last of the graph and the executables made from it.
TEST(GraphCharges, TheLastOfTheGraphAndItsExecutablesReturnsTheCharge) {
  Allocations a;
  a.Add(HandleKind::kGraph, 10, Charge{0, 64 * kMiB});
  a.GraphInstantiated(100, 10);
  a.GraphInstantiated(101, 10);
  Charge c;
  EXPECT_FALSE(a.GraphDestroyed(10, &c));
  EXPECT_FALSE(a.GraphExecDestroyed(100, &c));
  ASSERT_TRUE(a.GraphExecDestroyed(101, &c));
  EXPECT_EQ(c.bytes, 64 * kMiB);
  EXPECT_FALSE(a.GraphExecDestroyed(101, &c));  // once
  // Executables destroyed first: the graph returns it.
  a.Add(HandleKind::kGraph, 11, Charge{0, 32 * kMiB});
  a.GraphInstantiated(102, 11);
  EXPECT_FALSE(a.GraphExecDestroyed(102, &c));
  ASSERT_TRUE(a.GraphDestroyed(11, &c));
  EXPECT_EQ(c.bytes, 32 * kMiB);
}

// A child graph moved into a parent is owned by it: the child's charge becomes part of the
// parent's, returned with the parent, never by the child's handle.
TEST(GraphCharges, AChildGraphMovedIntoAParentBringsItsCharge) {
  Allocations a;
  a.Add(HandleKind::kGraph, 20, Charge{0, 64 * kMiB});  // the parent's own node
  a.Add(HandleKind::kGraph, 21, Charge{0, 32 * kMiB});  // the child's
  a.GraphMoved(21, 20);
  Charge c;
  EXPECT_FALSE(a.Find(HandleKind::kGraph, 21, &c));
  ASSERT_TRUE(a.Find(HandleKind::kGraph, 20, &c));  // Find leaves it in place
  EXPECT_EQ(c.bytes, 96 * kMiB);
  a.GraphInstantiated(200, 20);
  EXPECT_FALSE(a.GraphDestroyed(20, &c));
  ASSERT_TRUE(a.GraphExecDestroyed(200, &c));
  EXPECT_EQ(c.bytes, 96 * kMiB);
  EXPECT_EQ(a.Total(0), 0u);
  // A child without a charge, moved into a parent without one: nothing is made up.
  a.GraphMoved(23, 22);
  EXPECT_FALSE(a.Find(HandleKind::kGraph, 22, &c));
}

// Destroyed graphs' charges are held per device and returned only down to what the driver
// says the device's graph memory holds.
TEST(GraphMemoryBook, HeldChargesGoOnlyDownToTheDevicesGraphMemory) {
  GraphMemoryBook b;
  b.Held(0, 64 * kMiB);
  b.Held(0, 64 * kMiB);
  b.Held(1, 32 * kMiB);
  EXPECT_EQ(b.Trimmed(0, 256 * kMiB), 0u);  // the card holds more: all stays
  EXPECT_EQ(b.HeldOn(0), 128 * kMiB);
  EXPECT_EQ(b.Trimmed(0, 96 * kMiB), 32 * kMiB);
  EXPECT_EQ(b.HeldOn(0), 96 * kMiB);
  EXPECT_EQ(b.HeldOn(1), 32 * kMiB);  // another device's untouched
  EXPECT_EQ(b.Trimmed(0, 0), 96 * kMiB);
  EXPECT_EQ(b.HeldOn(0), 0u);
  EXPECT_EQ(b.Trimmed(0, 0), 0u);  // once
  EXPECT_EQ(b.Trimmed(2, 0), 0u);  // never held
}

// What a pool holds free is taken by its next allocations and returned when the driver
// says the pool holds less.
TEST(PoolBook, HeldMemoryIsReusedAndReturnedWhenThePoolShrinks) {
  PoolBook b;
  b.Freed(7, 0, 64 * kMiB);
  EXPECT_EQ(b.Take(7, 16 * kMiB), 16 * kMiB);
  EXPECT_EQ(b.Take(8, 16 * kMiB), 0u);  // another pool holds nothing
  int dev = -1;
  EXPECT_EQ(b.Trimmed(7, 48 * kMiB, &dev), 0u);  // holds what we thought
  EXPECT_EQ(b.Trimmed(7, 8 * kMiB, &dev), 40 * kMiB);
  EXPECT_EQ(dev, 0);
  uint64_t pools[4];
  ASSERT_EQ(b.PoolsOn(0, pools, 4), 1);
  EXPECT_EQ(pools[0], 7u);
  EXPECT_EQ(b.Take(7, 64 * kMiB), 8 * kMiB);
  EXPECT_EQ(b.PoolsOn(0, pools, 4), 0);
  b.Freed(9, 1, 4 * kMiB);
  EXPECT_EQ(b.Trimmed(9, 0, &dev), 4 * kMiB);  // destroyed
  EXPECT_EQ(dev, 1);
}

// What a pool keeps for importers is neither reused by an allocation nor given back by a
// trim: only the pool's destruction returns it.
TEST(PoolBook, MemoryKeptForImportersGoesOnlyWithThePool) {
  PoolBook b;
  b.KeptForImporters(7, 1, 64 * kMiB);
  b.KeptForImporters(7, 1, 32 * kMiB);
  EXPECT_EQ(b.Take(7, 16 * kMiB), 0u);
  int dev = -1;
  EXPECT_EQ(b.Trimmed(7, 0, &dev), 0u);
  uint64_t pools[4];
  EXPECT_EQ(b.PoolsOn(1, pools, 4), 0);
  EXPECT_EQ(b.Destroyed(8, &dev), 0u);  // another pool
  EXPECT_EQ(b.Destroyed(7, &dev), 96 * kMiB);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(b.Destroyed(7, &dev), 0u);  // once
}

TEST(Allocations, AnExportedPoolPiecesRecordGoesWithItsChargeToTheContextsEnd) {
  Allocations a;
  Charge c{0, 64 << 20, false, /*context=*/7};
  c.pool = 9;
  c.exported = true;
  a.Add(HandleKind::kPointer, 0x1000, c);
  a.Add(HandleKind::kPointer, 0x2000, c);
  EXPECT_TRUE(a.MarkFollowed(HandleKind::kPointer, 0x1000, 42));
  EXPECT_FALSE(a.MarkFollowed(HandleKind::kPointer, 0x3000, 43));  // not allocated here
  uint64_t bytes[2] = {}, spilled[2] = {}, kept[2] = {};
  std::vector<std::pair<uint64_t, Charge>> pool_shared;
  a.TakeContext(7, 2, bytes, spilled, kept, &pool_shared);
  ASSERT_EQ(pool_shared.size(), 2u);
  std::sort(pool_shared.begin(), pool_shared.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  EXPECT_EQ(pool_shared[0].second.piece, 42u);
  EXPECT_EQ(pool_shared[1].second.piece, 0u);  // exported with its pool, never on its own
  EXPECT_EQ(bytes[0] + kept[0], 0u);           // their charge follows their pool
}

// A legacy IPC export with a record leaves a context's end kept like any export, and named
// with no bytes for its record to be let go; a handle opened here leaves with its charge.
TEST(Allocations, SharedPointersWithARecordGoToTheContextsEndOneByOne) {
  Allocations a;
  Charge exported{0, 64 << 20, false, /*context=*/7};
  exported.exported = true;
  a.Add(HandleKind::kPointer, 0x1000, exported);
  a.Add(HandleKind::kPointer, 0x2000, exported);
  EXPECT_TRUE(a.MarkFollowed(HandleKind::kPointer, 0x1000, 42));
  Charge opened{1, 32 << 20, false, 7};
  opened.imported = true;
  opened.ipc_opens = 1;
  a.Add(HandleKind::kPointer, 0x3000, opened);
  uint64_t bytes[2] = {}, spilled[2] = {}, kept[2] = {};
  std::vector<std::pair<uint64_t, Charge>> shared;
  a.TakeContext(7, 2, bytes, spilled, kept, &shared);
  ASSERT_EQ(shared.size(), 2u);
  std::sort(shared.begin(), shared.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  EXPECT_EQ(shared[0].second.piece, 42u);
  EXPECT_EQ(shared[1].second.bytes, uint64_t{32} << 20);
  EXPECT_EQ(shared[1].second.ipc_opens, 1u);
  EXPECT_EQ(kept[0], uint64_t{128} << 20);  // both exports: the one with a record goes with no bytes
  EXPECT_EQ(shared[0].second.bytes, 0u);
  EXPECT_EQ(bytes[0] + bytes[1], 0u);
}

// The driver hands out one pointer per handle and context and counts its opens: the charge
// stays until the last close.
TEST(Allocations, AnIpcHandleOpenedTwiceIsLetGoAtItsSecondClose) {
  Allocations a;
  Charge opened{0, 32 << 20, false, 7};
  opened.imported = true;
  opened.ipc_opens = 1;
  a.Add(HandleKind::kPointer, 0x3000, opened);
  EXPECT_TRUE(a.ReopenedIpc(0x3000));
  EXPECT_FALSE(a.ReopenedIpc(0x4000));  // not opened here
  Charge c;
  EXPECT_FALSE(a.ClosedIpc(0x3000, &c));  // one open left
  ASSERT_TRUE(a.ClosedIpc(0x3000, &c));
  EXPECT_EQ(c.bytes, uint64_t{32} << 20);
  EXPECT_FALSE(a.ClosedIpc(0x3000, &c));  // gone
  Charge plain{0, 64 << 20, false, 7};
  a.Add(HandleKind::kPointer, 0x5000, plain);
  EXPECT_FALSE(a.ReopenedIpc(0x5000));  // an allocation of this process is no opened handle
}

}  // namespace
}  // namespace gs::enforcer
