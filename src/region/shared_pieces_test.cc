// The region's shared pieces: a pool allocation's charge follows it from its owner's slot
// to an importer's when the owner goes first, and leaves the books with the last holder.
#include "src/region/shared_pieces.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "src/common/proc_identity.h"

namespace gs::region {
namespace {

constexpr uint64_t kPiece = 256;
constexpr uint64_t kContext = 500;
constexpr uint64_t kPool = 0x5000;

class SharedPiecesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    r_ = CreatePrivateRegion();
    ASSERT_NE(r_, nullptr);
  }
  void TearDown() override { CloseRegion(r_); }
  // A slot of a live process (pid 1, this test's parent or itself), holding a context.
  ProcessSlot* Live(pid_t pid) {
    ProcessSlot* s = ClaimSlot(r_, pid, ProcessStartTime(pid), OwnPidNamespace());
    EXPECT_NE(s, nullptr);
    EXPECT_TRUE(Reserve(r_, s, 0, kContext, false, 0));
    return s;
  }
  // An owner that exported a piece it charged.
  ProcessSlot* Owner(pid_t pid, uint64_t key, uint64_t ptr = 0x1000) {
    ProcessSlot* s = Live(pid);
    EXPECT_TRUE(Reserve(r_, s, 0, kPiece, false, 0));
    EXPECT_TRUE(RecordExportedPiece(r_, s, key, 0, kPiece, ptr, kPool));
    return s;
  }
  uint64_t Used() const { return r_->devices[0].memory_used.load(); }
  Region* r_ = nullptr;
};

TEST_F(SharedPiecesTest, TheOwnersChargeMovesToItsImporterWhenTheOwnerGoesFirst) {
  ProcessSlot* owner = Owner(getppid(), 7);
  ProcessSlot* importer = Live(getpid());
  ASSERT_TRUE(RecordImportedPiece(r_, importer, 7));
  EXPECT_EQ(Used(), 2 * kContext + kPiece);  // importing charges nothing
  ReleaseSlot(r_, owner);                    // the owner exits
  EXPECT_EQ(importer->memory[0].load(), kContext + kPiece);
  EXPECT_EQ(Used(), kContext + kPiece);  // the owner's context left, the piece stayed
  ForgetImportedPiece(r_, importer, 7);  // the last holder lets go: off the card
  EXPECT_EQ(importer->memory[0].load(), kContext);
  EXPECT_EQ(Used(), kContext);
  EXPECT_FALSE(RecordImportedPiece(r_, importer, 7));  // forgotten
}

// A legacy IPC handle is recorded with no bytes: an importer finds it (its owner is of the
// container) and no charge moves when the owner goes first (the card lists the memory under
// the importer, whose own reconciliation pays for it).
TEST_F(SharedPiecesTest, ALegacyIpcHandleIsFoundAndMovesNoCharge) {
  ProcessSlot* owner = Live(getppid());
  ASSERT_TRUE(Reserve(r_, owner, 0, kPiece, false, 0));
  ASSERT_TRUE(RecordExportedPiece(r_, owner, 9, 0, 0, 0x2000, 0));
  ProcessSlot* importer = Live(getpid());
  ASSERT_TRUE(RecordImportedPiece(r_, importer, 9));
  ReleaseSlot(r_, owner);
  EXPECT_EQ(importer->memory[0].load(), kContext);
  EXPECT_EQ(Used(), kContext);
  EXPECT_EQ(PiecesChargedTo(r_, importer, 0), 0u);
  EXPECT_FALSE(RecordImportedPiece(r_, importer, 9));  // nothing left to follow
}

// An importer that exits holding a legacy IPC handle its owner already freed, without
// letting it go, leaves nothing in the table: the entries are not used up by workers that
// come and go.
TEST_F(SharedPiecesTest, AnIpcHandleItsOwnerFreedLeavesWithItsLastHolderEvenUnreleased) {
  ProcessSlot* owner = Live(getppid());
  ASSERT_TRUE(RecordExportedPiece(r_, owner, 9, 0, 0, 0x2000, 0));
  ProcessSlot* importer = Live(getpid());
  ASSERT_TRUE(RecordImportedPiece(r_, importer, 9));
  ForgetExportedPiece(r_, owner, 0x2000);             // the owner frees it
  ASSERT_TRUE(RecordImportedPiece(r_, importer, 9));  // still followed: imported
  ReleaseSlot(r_, importer);                          // exits without letting go
  EXPECT_FALSE(RecordImportedPiece(r_, owner, 9));
  EXPECT_EQ(owner->memory[0].load(), kContext);
}

TEST_F(SharedPiecesTest, AnImporterThatLetGoBeforeTheOwnerLeavesTheChargeWithTheOwner) {
  ProcessSlot* owner = Owner(getppid(), 7);
  ProcessSlot* importer = Live(getpid());
  ASSERT_TRUE(RecordImportedPiece(r_, importer, 7));
  ForgetImportedPiece(r_, importer, 7);
  EXPECT_EQ(owner->memory[0].load(), kContext + kPiece);
  ReleaseSlot(r_, owner);
  EXPECT_EQ(importer->memory[0].load(), kContext);
  EXPECT_EQ(Used(), kContext);
}

TEST_F(SharedPiecesTest, TheChargePassesFromHolderToHolderAndLeavesWithTheLast) {
  ProcessSlot* owner = Owner(getppid(), 7);
  ProcessSlot* first = Live(getpid());
  ProcessSlot* second = Live(1);
  ASSERT_TRUE(RecordImportedPiece(r_, first, 7));
  ASSERT_TRUE(RecordImportedPiece(r_, second, 7));
  ReleaseSlot(r_, owner);
  EXPECT_EQ(first->memory[0].load() + second->memory[0].load(), 2 * kContext + kPiece);
  ProcessSlot* charged = first->memory[0].load() > kContext ? first : second;
  ProcessSlot* other = charged == first ? second : first;
  ForgetImportedPiece(r_, charged, 7);  // passes to the other holder
  EXPECT_EQ(charged->memory[0].load(), kContext);
  EXPECT_EQ(other->memory[0].load(), kContext + kPiece);
  EXPECT_EQ(Used(), 2 * kContext + kPiece);
  ReleaseSlot(r_, other);  // the last holder exits: the charge goes with its slot
  EXPECT_EQ(Used(), kContext);
  EXPECT_FALSE(RecordImportedPiece(r_, charged, 7));
}

TEST_F(SharedPiecesTest, AnOwnerFoundDeadPassesTheChargeOnToo) {
  // A slot naming our parent with another start time: a process that is gone.
  ProcessSlot* dead = ClaimSlot(r_, getppid(), 1, OwnPidNamespace());
  ASSERT_NE(dead, nullptr);
  ASSERT_TRUE(Reserve(r_, dead, 0, kContext + kPiece, false, 0));
  ASSERT_TRUE(RecordExportedPiece(r_, dead, 9, 0, kPiece, 0x2000, kPool));
  ProcessSlot* importer = Live(getpid());
  ASSERT_TRUE(RecordImportedPiece(r_, importer, 9));
  EXPECT_EQ(SweepDead(r_), 1);
  EXPECT_EQ(importer->memory[0].load(), kContext + kPiece);
  EXPECT_EQ(Used(), kContext + kPiece);
}

TEST_F(SharedPiecesTest, APieceItsOwnerFreedUnimportedIsForgotten) {
  ProcessSlot* owner = Owner(getppid(), 7, 0x1000);
  ProcessSlot* importer = Live(getpid());
  ForgetExportedPiece(r_, owner, 0x1000);
  EXPECT_FALSE(RecordImportedPiece(r_, importer, 7));
  // Freed while imported: followed until the importer lets go.
  ProcessSlot* second = Owner(1, 8, 0x3000);
  ASSERT_TRUE(RecordImportedPiece(r_, importer, 8));
  ForgetExportedPiece(r_, second, 0x3000);
  EXPECT_TRUE(RecordImportedPiece(r_, importer, 8));
  ForgetImportedPiece(r_, importer, 8);
  EXPECT_FALSE(RecordImportedPiece(r_, importer, 8));
}

TEST_F(SharedPiecesTest, ADestroyedPoolHandsItsFreedPiecesToTheirHolders) {
  ProcessSlot* owner = Owner(getppid(), 7, 0x1000);
  ASSERT_TRUE(RecordExportedPiece(r_, owner, 8, 0, kPiece, 0x2000, kPool + 1));  // another pool
  ASSERT_TRUE(Reserve(r_, owner, 0, kPiece, false, 0));
  ProcessSlot* importer = Live(getpid());
  ASSERT_TRUE(RecordImportedPiece(r_, importer, 7));
  ASSERT_TRUE(RecordImportedPiece(r_, importer, 8));
  // A piece the owner still holds stays its own.
  EXPECT_EQ(HandOverPoolPieces(r_, owner, kPool, 0), 0u);
  ForgetExportedPiece(r_, owner, 0x1000);  // freed, still imported
  EXPECT_EQ(HandOverPoolPieces(r_, owner, kPool, 0), kPiece);
  EXPECT_EQ(importer->memory[0].load(), kContext + kPiece);
  EXPECT_EQ(owner->memory[0].load(), kContext + kPiece);  // the other pool's piece
  EXPECT_EQ(Used(), 2 * kContext + 2 * kPiece);
  ForgetImportedPiece(r_, importer, 7);
  EXPECT_EQ(Used(), 2 * kContext + kPiece);
}

// The owner was given its piece's charge back (its pool destroyed) and then exits: what
// moves is what its slot still held, and the importer's free gives back no more than that.
TEST_F(SharedPiecesTest, AnImportersFreeGivesBackOnlyWhatMovedToIt) {
  ProcessSlot* owner = Owner(getppid(), 7);
  Unreserve(r_, owner, 0, kPiece + kContext - 100, false);  // 100 bytes of it left
  ProcessSlot* importer = Live(getpid());
  ASSERT_TRUE(RecordImportedPiece(r_, importer, 7));
  ReleaseSlot(r_, owner);
  EXPECT_EQ(importer->memory[0].load(), kContext + 100);
  ForgetImportedPiece(r_, importer, 7);
  EXPECT_EQ(importer->memory[0].load(), kContext);
  EXPECT_EQ(Used(), kContext);
}

// A slot claimed afresh carries nothing of an earlier process's marks.
TEST_F(SharedPiecesTest, AFreshSlotHoldsNoEarlierImport) {
  ProcessSlot* owner = Owner(getppid(), 7);
  ProcessSlot* slot = Live(getpid());
  const int index = static_cast<int>(slot - r_->procs);
  ReleaseSlot(r_, slot);
  r_->pieces[0].holders[index / 64] |= uint64_t{1} << (index % 64);  // left behind by a crash
  ProcessSlot* again = Live(getpid());
  ASSERT_EQ(again, slot);
  ReleaseSlot(r_, owner);  // nothing moves to the new process
  EXPECT_EQ(again->memory[0].load(), kContext);
}

TEST_F(SharedPiecesTest, AFullTableRefusesAndAForgedEntryMovesNothingOutside) {
  ProcessSlot* owner = Live(getppid());
  for (int k = 0; k < kMaxSharedPieces; ++k)
    ASSERT_TRUE(RecordExportedPiece(r_, owner, 100 + static_cast<uint64_t>(k), 0, 1, 0x1000 + k, kPool));
  EXPECT_FALSE(RecordExportedPiece(r_, owner, 99999, 0, 1, 0x9000, kPool));
  EXPECT_TRUE(RecordExportedPiece(r_, owner, 100, 0, 1, 0x1000, kPool));  // already followed
  // What a process of the container can write: an entry naming a slot or a device past the
  // arrays is dropped, never followed.
  r_->pieces[0].charged_slot = kMaxProcesses + 5;
  r_->pieces[1].device = -3;
  ProcessSlot* importer = Live(getpid());
  EXPECT_FALSE(RecordImportedPiece(r_, importer, 100));
  EXPECT_FALSE(RecordImportedPiece(r_, importer, 101));
  ReleaseSlot(r_, owner);
  EXPECT_EQ(r_->pieces[0].key, 0u);
  EXPECT_EQ(Used(), kContext);
}

TEST_F(SharedPiecesTest, KeysAreNeverZeroAndTellExportDataApart) {
  unsigned char a[64] = {}, b[64] = {};
  b[63] = 1;
  EXPECT_NE(PieceKey(a, sizeof(a)), 0u);
  EXPECT_NE(PieceKey(a, sizeof(a)), PieceKey(b, sizeof(b)));
  EXPECT_EQ(PieceKey(b, sizeof(b)), PieceKey(b, sizeof(b)));
}

}  // namespace
}  // namespace gs::region
