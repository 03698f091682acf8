// The shared region: layout, atomic limit checks across processes, crash repair,
// PID-reuse safety, refusing foreign files.
#include "src/region/region.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "src/common/proc_identity.h"
#include "src/region/card.h"
#include "tests/temp_dir.h"

namespace gs::region {
namespace {

class RegionTest : public ::testing::Test {
 protected:
  Region* Open() {
    OpenError err;
    char msg[512];
    Region* r = OpenRegion(path_.c_str(), &err, msg, sizeof(msg));
    EXPECT_NE(r, nullptr) << msg;
    return r;
  }
  // A child process that joins the region, tries `rounds` reservations of 1 KiB on device
  // 0 under `limit`, and hands the bytes it got to done() (which ends the child).
  template <typename Done>
  pid_t ForkReserver(int rounds, uint64_t limit, Done done) {
    pid_t pid = fork();
    if (pid == 0) {
      Region* rr = Open();
      ProcessSlot* s = ClaimSlot(rr, getpid(), ProcessStartTime(getpid()), OwnPidNamespace());
      uint64_t got = 0;
      for (int k = 0; k < rounds; ++k)
        if (Reserve(rr, s, 0, 1024, false, limit)) got += 1024;
      done(got);
      _exit(0);
    }
    return pid;
  }
  gs::testing::TempDir tmp_{"gs-region-test"};
  const std::string dir_ = tmp_.path(), path_ = dir_ + "/region";
};

TEST_F(RegionTest, LayoutIsPinned) {
  // The node agent and enforcers of different builds share this file: these are ABI.
  EXPECT_EQ(sizeof(Device), 256u);
  EXPECT_EQ(sizeof(ProcessSlot), 280u);
  EXPECT_EQ(offsetof(Region, devices), 128u);
  EXPECT_EQ(sizeof(SharedPiece), 168u);
  EXPECT_EQ(sizeof(Region), 128u + 16 * 256 + 1024 * 280 + 512 * 168);
  EXPECT_EQ(kRegionAbiMajor, 2u);
}

TEST_F(RegionTest, LimitIsExactAndFreesBalance) {
  Region* r = Open();
  ProcessSlot* s = ClaimSlot(r, getpid(), ProcessStartTime(getpid()), OwnPidNamespace());
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(Reserve(r, s, 0, 600, false, 1000));
  EXPECT_TRUE(Reserve(r, s, 0, 400, false, 1000));
  EXPECT_FALSE(Reserve(r, s, 0, 1, false, 1000));
  EXPECT_EQ(r->devices[0].memory_used.load(), 1000u);
  Unreserve(r, s, 0, 400, false);
  EXPECT_EQ(r->devices[0].memory_used.load(), 600u);
  EXPECT_EQ(r->devices[0].memory_peak.load(), 1000u);
  EXPECT_FALSE(Reserve(r, s, 0, UINT64_MAX, false, 1000));  // no wrap-around
  EXPECT_TRUE(Reserve(r, s, 0, 100, false, 700));           // 600+100 <= 700
  EXPECT_FALSE(Reserve(r, s, 0, 1, false, 700));
  CloseRegion(r);
}

// The region is writable by every process of the container: a limit written there (or
// wiped) changes nothing, only the limit the caller passes counts.
TEST_F(RegionTest, LimitWrittenIntoTheRegionIsNeverTrusted) {
  Region* r = Open();
  ProcessSlot* s = ClaimSlot(r, getpid(), ProcessStartTime(getpid()), OwnPidNamespace());
  ASSERT_NE(s, nullptr);
  r->devices[0].memory_limit = 0;  // "unlimited", as a hostile process might write
  EXPECT_TRUE(Reserve(r, s, 0, 1000, false, 1000));
  EXPECT_FALSE(Reserve(r, s, 0, 1, false, 1000));
  r->devices[0].memory_limit = 1ull << 40;
  EXPECT_FALSE(Reserve(r, s, 0, 1, false, 1000));
  EXPECT_EQ(ViewMemory(r, 0, 1000, 80000).total, 1000u);
  CloseRegion(r);
}

TEST_F(RegionTest, ViewNeverWrapsWhenOverALoweredLimit) {
  Region* r = Open();
  ProcessSlot* s = ClaimSlot(r, getpid(), ProcessStartTime(getpid()), OwnPidNamespace());
  ASSERT_TRUE(Reserve(r, s, 0, 5000, false, 0));
  MemoryView v = ViewMemory(r, 0, 3000, 80000);  // limit lowered under the container's use
  EXPECT_EQ(v.total, 3000u);
  EXPECT_EQ(v.used, 3000u);
  EXPECT_EQ(v.free, 0u);
  v = ViewMemory(r, 1, 0, 80000);
  EXPECT_EQ(v.total, 80000u);
  CloseRegion(r);
}

TEST_F(RegionTest, RacingProcessesNeverOvershoot) {
  Region* r = Open();
  constexpr uint64_t kLimit = 100 * 1024ULL;
  constexpr int kProcs = 8;
  pid_t kids[kProcs];
  for (int i = 0; i < kProcs; ++i)
    kids[i] = ForkReserver(1000, kLimit, [](uint64_t got) { _exit(got > kLimit ? 1 : 0); });
  // Children stay alive until reaped, so their memory is still counted below.
  for (int i = 0; i < kProcs; ++i) {
    int st;
    waitpid(kids[i], &st, 0);
    EXPECT_EQ(WEXITSTATUS(st), 0);
  }
  // All processes are dead now; a sweep returns everything.
  SweepDead(r);
  EXPECT_EQ(r->devices[0].memory_used.load(), 0u);
  CloseRegion(r);
}

TEST_F(RegionTest, ExactlyTheLimitIsHandedOutUnderRace) {
  Region* r = Open();
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  constexpr int kProcs = 6;
  pid_t kids[kProcs];
  for (int i = 0; i < kProcs; ++i)
    kids[i] = ForkReserver(200, 64 * 1024ULL, [&](uint64_t got) {
      ssize_t unused = write(pipefd[1], &got, sizeof(got));
      (void)unused;
      pause();  // stay alive: our memory stays counted
    });
  uint64_t total = 0;
  for (int i = 0; i < kProcs; ++i) {
    uint64_t got;
    ASSERT_EQ(read(pipefd[0], &got, sizeof(got)), static_cast<ssize_t>(sizeof(got)));
    total += got;
  }
  EXPECT_EQ(total, 64u * 1024);
  EXPECT_EQ(r->devices[0].memory_used.load(), 64u * 1024);
  for (pid_t k : kids) kill(k, SIGKILL);
  for (pid_t k : kids) waitpid(k, nullptr, 0);
  EXPECT_EQ(SweepDead(r), kProcs);
  EXPECT_EQ(r->devices[0].memory_used.load(), 0u);
  CloseRegion(r);
}

TEST_F(RegionTest, OwnerDiedHoldingTheLockIsRepaired) {
  Region* r = Open();
  pid_t kid = fork();
  if (kid == 0) {
    Region* rr = Open();
    ProcessSlot* s = ClaimSlot(rr, getpid(), ProcessStartTime(getpid()), OwnPidNamespace());
    Lock(rr);
    // Half an update: the slot has it, the total does not.
    s->memory[0].fetch_add(4096);
    rr->seq.fetch_add(1);
    _exit(0);  // dies holding the mutex
  }
  waitpid(kid, nullptr, 0);
  Lock(r);  // EOWNERDEAD: totals recomputed from slots (the dead slot still holds 4096)
  EXPECT_EQ(r->devices[0].memory_used.load(), 4096u);
  EXPECT_EQ(r->seq.load() % 2, 0u);
  Unlock(r);
  EXPECT_EQ(SweepDead(r), 1);
  EXPECT_EQ(r->devices[0].memory_used.load(), 0u);
  CloseRegion(r);
}

// A slot's pid means something only in its own PID namespace: a process that unshared one
// inside the container is pid 1 there, which a sweeper in the container's namespace would
// take for another process. Such a slot is not the sweeper's to free; one of its own is.
TEST_F(RegionTest, ASlotOfAnotherPidNamespaceIsNotSweptByPidHere) {
  Region* r = Open();
  pid_t kid = ForkReserver(4, 0, [](uint64_t got) { _exit(got == 4096 ? 0 : 1); });
  int st = 0;
  waitpid(kid, &st, 0);
  ASSERT_EQ(WEXITSTATUS(st), 0);
  ProcessSlot* dead = nullptr;
  for (auto& s : r->procs)
    if (s.pid.load() == static_cast<uint32_t>(kid)) dead = &s;
  ASSERT_NE(dead, nullptr);
  ASSERT_EQ(dead->pid_namespace.load(), OwnPidNamespace());
  dead->pid_namespace.store(OwnPidNamespace() + 1);  // as if claimed in a namespace of its own
  EXPECT_EQ(SweepDead(r), 0);
  EXPECT_EQ(r->devices[0].memory_used.load(), 4096u);
  dead->pid_namespace.store(OwnPidNamespace());
  EXPECT_EQ(SweepDead(r), 1);
  EXPECT_EQ(r->devices[0].memory_used.load(), 0u);
  CloseRegion(r);
}

// Joining is cheap (no /proc read per live process), so a slot whose process died is not
// always freed right away; an allocation that would fail because of it frees it first.
TEST_F(RegionTest, MemoryOfADeadProcessIsReturnedBeforeAnAllocationFails) {
  Region* r = Open();
  // A slot whose process is gone and whose pid another live process has since taken (our
  // parent here): kill(pid, 0) says alive, only the start time tells.
  ProcessSlot* dead = ClaimSlot(r, getppid(), 1, OwnPidNamespace());
  ASSERT_NE(dead, nullptr);
  ASSERT_TRUE(Reserve(r, dead, 0, 800, false, 1000));
  ProcessSlot* mine = ClaimSlot(r, getpid(), ProcessStartTime(getpid()), OwnPidNamespace());
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(r->devices[0].memory_used.load(), 800u);   // joining did not look that closely
  EXPECT_TRUE(Reserve(r, mine, 0, 900, false, 1000));  // fits once the dead process's 800 are back
  EXPECT_EQ(r->devices[0].memory_used.load(), 900u);
  EXPECT_FALSE(Reserve(r, mine, 0, 200, false, 1000));  // and the limit still holds
  CloseRegion(r);
}

TEST_F(RegionTest, ReusedPidDoesNotInheritASlot) {
  Region* r = Open();
  pid_t me = getpid();
  uint64_t start = ProcessStartTime(me);
  // A slot left by an earlier process that had our pid but another start time.
  ProcessSlot* ghost = ClaimSlot(r, me, start - 1, OwnPidNamespace());
  ASSERT_NE(ghost, nullptr);
  ghost->memory[0] = 777;
  r->devices[0].memory_used = 777;
  ProcessSlot* mine = ClaimSlot(r, me, start, OwnPidNamespace());  // sweeps the ghost first
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(mine->memory[0].load(), 0u);
  EXPECT_EQ(r->devices[0].memory_used.load(), 0u);
  CloseRegion(r);
}

TEST_F(RegionTest, ForeignAndShortFilesAreRefused) {
  {
    std::ofstream f(path_);
    f << std::string(sizeof(Region), 'x');
  }
  OpenError err;
  char msg[512];
  EXPECT_EQ(OpenRegion(path_.c_str(), &err, msg, sizeof(msg)), nullptr);
  EXPECT_EQ(err, OpenError::kForeign);
  EXPECT_NE(std::string(msg).find("not a gpuslice region"), std::string::npos) << msg;
  {
    std::ofstream f(path_);
    f << "short";
  }
  EXPECT_EQ(OpenRegion(path_.c_str(), &err, msg, sizeof(msg)), nullptr);
  EXPECT_EQ(err, OpenError::kTooSmall);
  unlink(path_.c_str());
  ASSERT_EQ(symlink("/etc/passwd", path_.c_str()), 0);
  EXPECT_EQ(OpenRegion(path_.c_str(), &err, msg, sizeof(msg)), nullptr);  // never follows links
}

TEST_F(RegionTest, SnapshotIsConsistent) {
  Region* r = Open();
  ProcessSlot* s = ClaimSlot(r, getpid(), ProcessStartTime(getpid()), OwnPidNamespace());
  Reserve(r, s, 2, 12345, true, 0);
  auto* copy = static_cast<Region*>(operator new (sizeof(Region), std::align_val_t{alignof(Region)}));
  Snapshot(r, copy);
  EXPECT_EQ(copy->devices[2].memory_used.load(), 12345u);
  EXPECT_EQ(copy->devices[2].spilled.load(), 12345u);
  operator delete (copy, std::align_val_t{alignof(Region)});
  CloseRegion(r);
}

// The card's accounting of turns longer than a turn (a kernel cannot be preempted), on an
// anonymous card with the clock given.
class CardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char msg[256];
    c_ = OpenCard(nullptr, msg, sizeof(msg));
    ASSERT_NE(c_, nullptr) << msg;
    a_ = JoinCard(c_, 1, 30, /*force=*/false, 1, kT0);
    b_ = JoinCard(c_, 2, 70, /*force=*/false, 1, kT0);
    ASSERT_GE(a_, 0);
    ASSERT_GE(b_, 0);
  }
  void TearDown() override { CloseCard(c_); }
  int64_t Credit(int t, unsigned share, int64_t now) const { return CreditAt(c_->tenants[t], share, now); }

  static constexpr int64_t kT0 = 1'000'000'000'000;
  static constexpr int64_t kMs = 1'000'000;
  Card* c_ = nullptr;
  int a_ = -1, b_ = -1;
};

// A 300 ms turn at 30 %: the turn's length less the 30 % refilled while it ran, whatever the
// 30 ms cap on what is kept while waiting.
TEST_F(CardTest, ALongTurnIsChargedItsLengthLessItsShareOfIt) {
  Charge(c_, a_, 300 * kMs, kT0 + 300 * kMs, 1);
  EXPECT_EQ(Credit(a_, 30, kT0 + 300 * kMs), -210 * kMs);
  EXPECT_EQ(c_->tenants[a_].used_ns.load(), static_cast<uint64_t>(300 * kMs));
  // Repaid at the share: back to 0 after 700 ms more.
  EXPECT_EQ(Credit(a_, 30, kT0 + 1000 * kMs), 0);
  // A 1.5 s overrun is not forgiven.
  Charge(c_, b_, 1500 * kMs, kT0 + 1500 * kMs, 1);
  EXPECT_EQ(Credit(b_, 70, kT0 + 1500 * kMs), -450 * kMs);
}

// While b overruns its turn by 300 ms, a (waiting) earns 90 ms beyond its 30 ms cap and keeps
// it; b itself gets nothing from it, and a tenant not waiting keeps only its cap.
TEST_F(CardTest, WaitersKeepWhatTheyEarnDuringAnOverrun) {
  const int64_t deadline = kT0 + 200 * kMs, now = deadline + 300 * kMs;
  c_->tenants[a_].wants_ns.store(now);
  int idle = JoinCard(c_, 3, 30, false, 1, kT0);
  ASSERT_GE(idle, 0);
  ASSERT_EQ(Credit(a_, 30, deadline), 30 * kMs);  // at its cap when the overrun began
  int64_t b_before = Credit(b_, 70, now);
  KeepRefillOfWaiters(c_, static_cast<uint32_t>(b_), deadline, now, 1);
  EXPECT_EQ(Credit(a_, 30, now), 120 * kMs);
  EXPECT_EQ(Credit(b_, 70, now), b_before);
  EXPECT_EQ(Credit(idle, 30, now), 30 * kMs);
  // Credit kept beyond the cap is spent, not refilled, until it is back under the cap.
  EXPECT_EQ(Credit(a_, 30, now + 500 * kMs), 120 * kMs);
}

// A holder past its deadline keeps the card 200 ms, 1.2 s while its drain heartbeat is fresh.
TEST_F(CardTest, ADrainingHolderKeepsTheCardLongerThanAStuckOne) {
  const int64_t now = kT0 + 5 * kMs;
  EXPECT_FALSE(Draining(c_, static_cast<uint32_t>(a_), now));
  EXPECT_EQ(StuckGrace(c_, static_cast<uint32_t>(a_), now), kStuckGraceNs);
  c_->tenants[a_].drain_ns.store(now - 10 * kMs);
  EXPECT_TRUE(Draining(c_, static_cast<uint32_t>(a_), now));
  EXPECT_EQ(StuckGrace(c_, static_cast<uint32_t>(a_), now), kStuckGraceNs + kLongKernelNs);
  EXPECT_EQ(StuckGrace(c_, static_cast<uint32_t>(a_), now + kDrainFreshNs), kStuckGraceNs);  // stale
  EXPECT_EQ(StuckGrace(c_, kNoHolder, now), kStuckGraceNs);                                  // no tenant
}

}  // namespace
}  // namespace gs::region
