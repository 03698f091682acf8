// The simulator's node model on virtual time: memory accounting, the time-sliced
// timeline shared by processes, NVML's samples, dead-process sweeping and events.
#include "src/sim/node.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>

#include "src/common/proc_identity.h"
#include "src/platform/nvml_api.h"

namespace gs::sim {
namespace {

class NodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_.reset(static_cast<State*>(operator new(sizeof(State))));
    InitState(state_.get());
    state_->device_count = 2;
    for (int i = 0; i < 2; ++i) {
      state_->spec[i].memory_total = 80ull << 30;
      state_->spec[i].sm_count = 132;
    }
  }
  Node MakeNode(pid_t pid) { return Node(state_.get(), &clock_, pid, ProcessStartTime(pid)); }
  // `owner` and `importer` attach, `owner` holds `held` bytes on card 0 and shares `bytes` of
  // them (backing inode `inode`, the way `way`), and `importer` opens them. Returns the
  // share's index, its id in *id.
  int ShareBetween(Node& owner, Node& importer, uint64_t held, uint64_t bytes, uint64_t inode, ShareWay way,
                   uint64_t* id) {
    EXPECT_TRUE(owner.Attach());
    EXPECT_TRUE(importer.Attach());
    EXPECT_TRUE(owner.Reserve(0, held));
    int index = owner.Share(0, bytes, inode, 5, 9, way, id);
    EXPECT_GE(index, 0);
    EXPECT_TRUE(importer.JoinShare(index, *id));
    return index;
  }

  struct Deleter {
    void operator()(State* s) { operator delete(s); }
  };
  std::unique_ptr<State, Deleter> state_;
  ManualClock clock_;
};

TEST_F(NodeTest, MemoryFillsToExactlyCapacity) {
  Node n = MakeNode(getpid());
  ASSERT_TRUE(n.Attach());
  EXPECT_TRUE(n.Reserve(0, 80ull << 30));
  EXPECT_FALSE(n.Reserve(0, 1));
  EXPECT_EQ(n.MemoryFree(0), 0u);
  EXPECT_EQ(n.MemoryUsed(1), 0u);  // the other card is untouched
  n.Release(0, 1ull << 30);
  EXPECT_TRUE(n.Reserve(0, 1ull << 30));
  EXPECT_FALSE(n.Reserve(0, 1ull << 30));
}

TEST_F(NodeTest, HugeRequestDoesNotWrap) {
  Node n = MakeNode(getpid());
  ASSERT_TRUE(n.Attach());
  ASSERT_TRUE(n.Reserve(0, 1024));
  EXPECT_FALSE(n.Reserve(0, UINT64_MAX - 100));
  EXPECT_EQ(n.MemoryUsed(0), 1024u);
}

TEST_F(NodeTest, AProcessAloneRunsItsWorkBackToBack) {
  Node a = MakeNode(getpid());
  int64_t t0 = clock_.NowNs();
  int64_t first = a.Enqueue(0, 10'000'000);
  int64_t second = a.Enqueue(0, 5'000'000);
  EXPECT_FALSE(a.WorkDone(0, first));
  a.WaitWork(0, second);  // virtual time: jumps to the predicted end
  EXPECT_EQ(clock_.NowNs(), t0 + 15'000'000);
  EXPECT_TRUE(a.WorkDone(0, first));
  EXPECT_EQ(a.DoneAt(0, first), t0 + 10'000'000);
  EXPECT_EQ(a.DoneAt(0, second), t0 + 15'000'000);
}

// Without MPS a GPU time-slices between processes: both are slowed down, each one's
// completion times stretched by the other's turns (as event timings are on hardware).
TEST_F(NodeTest, TwoProcessesTimeSliceTheCard) {
  Node a = MakeNode(100), b = MakeNode(200);
  int64_t t0 = clock_.NowNs();
  int64_t ma = a.Enqueue(0, 10'000'000), mb = b.Enqueue(0, 10'000'000);
  int64_t other = b.Enqueue(1, 5'000'000);
  b.WaitWork(0, mb);
  b.WaitWork(1, other);
  EXPECT_EQ(a.DoneAt(0, ma), t0 + 18'000'000);  // 2 ms slices: a b a b ... a finishes first
  EXPECT_EQ(b.DoneAt(0, mb), t0 + 20'000'000);
  EXPECT_EQ(b.DoneAt(1, other), t0 + 5'000'000);  // another GPU is independent
}

TEST_F(NodeTest, WorkQueuedLaterDelaysAPrediction) {
  Node a = MakeNode(100), b = MakeNode(200);
  int64_t t0 = clock_.NowNs();
  int64_t ma = a.Enqueue(0, 10'000'000);
  clock_.Advance(1'000'000);
  b.Enqueue(0, 50'000'000);  // b arrives 1 ms in: a's remaining 9 ms now share the card
  a.WaitWork(0, ma);
  EXPECT_GT(a.DoneAt(0, ma), t0 + 10'000'000);
  EXPECT_EQ(a.DoneAt(0, ma), clock_.NowNs());
}

// NVML's per-process feed as measured on the H100: one sample per process per 200 ms
// period, stamped at the period's end, visible 20 ms later, nothing new in between; a
// process counts as busy while its work is resident, even while the other one runs.
TEST_F(NodeTest, NvmlSamplesComeOncePerPeriodAndCountResidentWork) {
  Node a = MakeNode(100), b = MakeNode(200);
  int64_t t0 = clock_.NowNs();  // 1 s: a period boundary
  ASSERT_EQ(t0 % 200'000'000, 0);
  a.Enqueue(0, 100'000'000);
  b.Enqueue(0, 100'000'000);
  ProcessSample s[8];
  clock_.Advance(219'000'000);
  EXPECT_EQ(a.ProcessSamples(0, 0, s, 8), 0);  // the period ended 19 ms ago: not visible yet
  clock_.Advance(1'000'000);
  ASSERT_EQ(a.ProcessSamples(0, 0, s, 8), 2);
  for (const auto& x : s)
    if (x.pid == 100 || x.pid == 200) {
      EXPECT_EQ(x.timestamp_ns, static_cast<uint64_t>(t0 + 200'000'000));
      EXPECT_GE(x.sm_percent, 99u) << x.pid;  // each ran half the time, NVML says ~100 %
    }
  EXPECT_EQ(a.Utilization(0), 100u);
  EXPECT_EQ(a.ProcessSamples(0, t0 + 200'000'000, s, 8), 0);  // nothing newer: NOT_FOUND
  clock_.Advance(200'000'000);
  EXPECT_EQ(a.ProcessSamples(0, t0 + 200'000'000, s, 8), 0);  // the next period was idle: no sample
  EXPECT_EQ(a.Utilization(0), 0u);
}

TEST_F(NodeTest, SamplesAndUtilisationOfAPartlyBusyPeriod) {
  Node a = MakeNode(100);
  int64_t t0 = clock_.NowNs();
  a.Enqueue(0, 50'000'000);
  clock_.Advance(220'000'000);
  ProcessSample s[8];
  ASSERT_EQ(a.ProcessSamples(0, 0, s, 8), 1);
  EXPECT_EQ(s[0].sm_percent, 25u);
  EXPECT_EQ(a.Utilization(0), 25u);
  EXPECT_EQ(a.Utilization(1), 0u);
  // A caller polling every 20 ms gets exactly one new sample per period.
  int64_t last = static_cast<int64_t>(s[0].timestamp_ns);
  int fresh = 0;
  for (int i = 0; i < 50; ++i) {  // 1 s of polling while the process keeps the card busy
    a.Enqueue(0, 20'000'000);
    clock_.Advance(20'000'000);
    if (a.ProcessSamples(0, last, s, 8) == 1) {
      ++fresh;
      EXPECT_EQ(static_cast<int64_t>(s[0].timestamp_ns) % 200'000'000, 0);
      last = static_cast<int64_t>(s[0].timestamp_ns);
    }
  }
  EXPECT_EQ(fresh, 5);
  EXPECT_GE(last, t0 + 1'000'000'000);
}

TEST_F(NodeTest, DeadProcessMemoryIsSwept) {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  {
    Node dead = Node(state_.get(), &clock_, child, ProcessStartTime(child));
    ASSERT_TRUE(dead.Attach());
    ASSERT_TRUE(dead.Reserve(0, 5ull << 30));
  }
  Node me = MakeNode(getpid());
  ASSERT_TRUE(me.Attach());
  ASSERT_TRUE(me.Reserve(0, 1ull << 30));
  EXPECT_EQ(me.MemoryUsed(0), 6ull << 30);
  EXPECT_EQ(me.SweepDeadProcesses(), 0);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(me.SweepDeadProcesses(), 1);
  EXPECT_EQ(me.MemoryUsed(0), 1ull << 30);  // only ours is left
  ProcessMemory procs[4];
  ASSERT_EQ(me.RunningProcesses(0, procs, 4), 1);
  EXPECT_EQ(procs[0].pid, static_cast<uint32_t>(getpid()));
}

// Containers' workloads are all PID 1 in their own namespaces; the node knows them by host
// pid and start time. A tenant is one (pid, start time): a second process that shows the
// same pid with another start time never takes over the first one's queue.
TEST_F(NodeTest, TenantsAreKeyedByPidAndStartTime) {
  Node a(state_.get(), &clock_, 1, 100), b(state_.get(), &clock_, 1, 200);
  int64_t t0 = clock_.NowNs();
  int64_t ma = a.Enqueue(0, 10'000'000), mb = b.Enqueue(0, 10'000'000);
  clock_.Advance(20'000'000);
  ASSERT_TRUE(a.WorkDone(0, ma));
  ASSERT_TRUE(b.WorkDone(0, mb));
  EXPECT_EQ(a.DoneAt(0, ma), t0 + 18'000'000);  // time-sliced, as two processes are
  EXPECT_EQ(b.DoneAt(0, mb), t0 + 20'000'000);
}

// NVML answers in the caller's PID namespace (docs/measurements/h200-driver.md, "Pids").
// Namespaces here are inodes: 10 the node's, 100 and 200 two containers'.
TEST(PidNamespaces, APidIsSeenFromItsOwnNamespaceAndEveryOneAboveOnly) {
  const PidNamespaces nested{3, {900, 40, 1}, {10, 100, 150}};
  EXPECT_EQ(PidSeenFrom(nested, 10), 900u);
  EXPECT_EQ(PidSeenFrom(nested, 100), 40u);
  EXPECT_EQ(PidSeenFrom(nested, 150), 1u);
  EXPECT_EQ(PidSeenFrom(nested, 200), 0u);  // a sibling container
  EXPECT_EQ(PidSeenFrom(nested, 0), 0u);    // an unknown namespace sees nothing
  const PidNamespaces partly_known{2, {901, 1}, {10, 0}};
  EXPECT_EQ(PidSeenFrom(partly_known, 10), 901u);
  EXPECT_EQ(PidSeenFrom(partly_known, 100), 0u);
}

TEST(PidNamespaces, ThisProcessReadsItsOwnLevels) {
  PidNamespaces mine;
  ASSERT_TRUE(ReadPidNamespaces(getpid(), &mine));
  ASSERT_GE(mine.levels, 1u);
  EXPECT_EQ(mine.pid[0], static_cast<uint32_t>(getpid()));  // in the reader's namespace: its own
  EXPECT_EQ(mine.ns[0], OwnPidNamespace());
  EXPECT_NE(OwnPidNamespace(), 0u);
  PidNamespaces gone;
  EXPECT_FALSE(ReadPidNamespaces(0x3fffffff, &gone));
}

TEST_F(NodeTest, TheProcessListAndSamplesAreInTheCallersNamespace) {
  Node host(state_.get(), &clock_, 600, 1), in_a(state_.get(), &clock_, 500, 1), in_b(state_.get(), &clock_, 700, 1);
  host.SetPidNamespaces({1, {600}, {10}});
  in_a.SetPidNamespaces({2, {500, 1}, {10, 100}});
  in_b.SetPidNamespaces({2, {700, 1}, {10, 200}});
  for (Node* n : {&host, &in_a, &in_b}) {
    ASSERT_TRUE(n->Attach());
    ASSERT_TRUE(n->Reserve(0, 1ull << 30));
  }
  ProcessMemory procs[4];
  ASSERT_EQ(host.RunningProcesses(0, procs, 4), 3);
  EXPECT_EQ(procs[0].pid + procs[1].pid + procs[2].pid, 600u + 500u + 700u);
  ASSERT_EQ(in_a.RunningProcesses(0, procs, 4), 1);  // the other container is left out
  EXPECT_EQ(procs[0].pid, 1u);
  EXPECT_EQ(procs[0].bytes, 1ull << 30);
  // Samples: translated where the caller sees the process, its node pid where it does not.
  in_a.Enqueue(0, 50'000'000);
  in_b.Enqueue(0, 50'000'000);
  clock_.Advance(450'000'000);
  ProcessSample samples[8];
  int n = in_a.ProcessSamples(0, 0, samples, 8);
  ASSERT_GE(n, 2);
  bool own = false, other = false;
  for (int i = 0; i < n; ++i) {
    own |= samples[i].pid == 1;
    other |= samples[i].pid == 700;
    EXPECT_TRUE(samples[i].pid == 1 || samples[i].pid == 700) << samples[i].pid;
  }
  EXPECT_TRUE(own && other);
}

TEST_F(NodeTest, AForgottenProcessLosesItsMemoryAndWorkAndOnlyThat) {
  Node a(state_.get(), &clock_, 4001, 7), b(state_.get(), &clock_, 4002, 7);
  ASSERT_TRUE(a.Attach());
  ASSERT_TRUE(b.Attach());
  ASSERT_TRUE(a.Reserve(0, 3ull << 30));
  ASSERT_TRUE(b.Reserve(0, 1ull << 30));
  int64_t t0 = clock_.NowNs();
  a.Enqueue(0, 100'000'000);
  int64_t mb = b.Enqueue(0, 10'000'000);
  EXPECT_FALSE(a.ForgetProcess(4001, 8));  // another life of that pid: nothing of it here
  EXPECT_EQ(a.MemoryUsed(0), 4ull << 30);
  EXPECT_TRUE(b.ForgetProcess(4001, 7));
  EXPECT_EQ(a.MemoryUsed(0), 1ull << 30);
  ProcessMemory procs[4];
  ASSERT_EQ(b.RunningProcesses(0, procs, 4), 1);
  EXPECT_EQ(procs[0].pid, 4002u);
  clock_.Advance(10'000'000);
  EXPECT_TRUE(b.WorkDone(0, mb));
  EXPECT_EQ(b.DoneAt(0, mb), t0 + 10'000'000);  // a's queued 100 ms went with it
}

// A context's own part that the driver lists under no process
// (docs/measurements/h200-driver.md, 2026-11-28): in the card's used memory, in nobody's
// figure, and gone with its process.
TEST_F(NodeTest, MemoryListedUnderNoProcessCountsOnTheCardAndGoesWithItsProcess) {
  Node a(state_.get(), &clock_, 4201, 7);
  ASSERT_TRUE(a.Attach());
  ASSERT_TRUE(a.Reserve(0, 518ull << 20));
  ASSERT_TRUE(a.ReserveUnlisted(0, 6ull << 20));
  EXPECT_EQ(a.MemoryUsed(0), 524ull << 20);
  ProcessMemory procs[4];
  ASSERT_EQ(a.RunningProcesses(0, procs, 4), 1);
  EXPECT_EQ(procs[0].bytes, 518ull << 20);
  a.ReleaseUnlisted(0, 6ull << 20);
  EXPECT_EQ(a.MemoryUsed(0), 518ull << 20);
  ASSERT_TRUE(a.ReserveUnlisted(0, 6ull << 20));
  EXPECT_TRUE(a.ForgetProcess(4201, 7));
  EXPECT_EQ(a.MemoryUsed(0), 0u);
}

// Memory shared between processes (src/sim/node_shares.cc), the least convenient model:
// importing adds nothing to the card; the memory is the owner's in NVML's list while the
// owner lives, and leaves the card only once the owner freed it and every importer left.
uint64_t HeldBy(const Node& viewer, uint32_t pid) {
  ProcessMemory procs[8];
  int n = viewer.RunningProcesses(0, procs, 8);
  for (int i = 0; i < n && i < 8; ++i)
    if (procs[i].pid == pid) return procs[i].bytes;
  return 0;
}

// As an H200 showed it (docs/measurements/shared-memory.md): freed by its owner while
// imported, descriptor memory stays on the card, listed under the importer.
TEST_F(NodeTest, ADescriptorsMemoryStaysUntilTheOwnerAndEveryImporterLetItGo) {
  Node owner(state_.get(), &clock_, 4101, 1), importer(state_.get(), &clock_, 4102, 1);
  ASSERT_TRUE(owner.Attach());
  ASSERT_TRUE(importer.Attach());
  ASSERT_TRUE(owner.Reserve(0, 1ull << 30));
  uint64_t id = 0;
  int index = owner.Share(0, 1ull << 30, 77, 5, 9, ShareWay::kDescriptor, &id);
  ASSERT_GE(index, 0);
  ASSERT_TRUE(importer.JoinShare(index, id));
  EXPECT_EQ(owner.MemoryUsed(0), 1ull << 30);  // importing allocates nothing
  EXPECT_EQ(HeldBy(owner, 4101), 1ull << 30);
  EXPECT_EQ(HeldBy(owner, 4102), 0u);
  owner.LeaveShare(index, id, /*owner=*/true);  // freed by its owner, still held
  EXPECT_EQ(owner.MemoryUsed(0), 1ull << 30);
  EXPECT_EQ(HeldBy(owner, 4101), 0u);
  EXPECT_EQ(HeldBy(owner, 4102), 1ull << 30);
  ShareInfo info;
  ASSERT_TRUE(importer.ShareOf(index, id, &info));
  EXPECT_EQ(info.owner_pid, 0u);  // no new importer can open it by the owner's descriptor
  importer.LeaveShare(index, id, false);
  EXPECT_EQ(owner.MemoryUsed(0), 0u);
  EXPECT_EQ(HeldBy(owner, 4101), 0u);
  EXPECT_EQ(HeldBy(owner, 4102), 0u);
  EXPECT_FALSE(importer.JoinShare(index, id));  // gone
}

// As on an H100 (docs/measurements/shared-memory.md): freed by its owner first, a pool allocation is listed under no
// one and stays on the card past its importer, kept by the owner's pool until it is destroyed.
TEST_F(NodeTest, APoolAllocationFreedByItsOwnerFirstStaysOnTheCardUntilThePoolGoes) {
  Node owner(state_.get(), &clock_, 4501, 1), importer(state_.get(), &clock_, 4502, 1);
  uint64_t id = 0;
  int index = ShareBetween(owner, importer, 1ull << 30, 1ull << 30, 81, ShareWay::kPoolPointer, &id);
  owner.LeaveShare(index, id, true);
  EXPECT_EQ(owner.MemoryUsed(0), 1ull << 30);
  EXPECT_EQ(HeldBy(owner, 4501), 0u);
  EXPECT_EQ(HeldBy(owner, 4502), 0u);
  importer.LeaveShare(index, id, false);
  EXPECT_EQ(owner.MemoryUsed(0), 1ull << 30);  // the owner's pool keeps it
  importer.PoolLetGo(index, id);               // not the importer's pool to let go
  EXPECT_EQ(owner.MemoryUsed(0), 1ull << 30);
  owner.PoolLetGo(index, id);
  EXPECT_EQ(owner.MemoryUsed(0), 0u);

  // The same, its owner gone instead of its pool destroyed.
  ASSERT_TRUE(owner.Reserve(0, 1ull << 30));
  index = owner.Share(0, 1ull << 30, 82, 5, 9, ShareWay::kPoolPointer, &id);
  ASSERT_TRUE(importer.JoinShare(index, id));
  owner.LeaveShare(index, id, true);
  importer.LeaveShare(index, id, false);
  EXPECT_EQ(importer.MemoryUsed(0), 1ull << 30);
  EXPECT_TRUE(importer.ForgetProcess(4501, 1));
  EXPECT_EQ(importer.MemoryUsed(0), 0u);
}

// Freed by its owner after every importer closed it, a pool allocation leaves the card.
TEST_F(NodeTest, APoolAllocationFreedAfterItsImporterClosedItLeavesTheCard) {
  Node owner(state_.get(), &clock_, 4601, 1), importer(state_.get(), &clock_, 4602, 1);
  uint64_t id = 0;
  int index = ShareBetween(owner, importer, 1ull << 30, 1ull << 30, 83, ShareWay::kPoolPointer, &id);
  importer.LeaveShare(index, id, false);
  owner.LeaveShare(index, id, true);
  EXPECT_EQ(owner.MemoryUsed(0), 0u);
  EXPECT_EQ(HeldBy(owner, 4601), 0u);
}

TEST_F(NodeTest, SharedMemoryOfAGoneOwnerStaysOnTheCardAsTheImportersUntilItLeaves) {
  Node owner(state_.get(), &clock_, 4201, 1), importer(state_.get(), &clock_, 4202, 1);
  uint64_t id = 0;
  int index =
      ShareBetween(owner, importer, 3ull << 30, 1ull << 30, 78, ShareWay::kLegacyIpc, &id);  // 1 GiB of it shared
  EXPECT_TRUE(importer.ForgetProcess(4201, 1));  // the owner died holding it
  EXPECT_EQ(importer.MemoryUsed(0), 1ull << 30);
  EXPECT_EQ(HeldBy(importer, 4202), 1ull << 30);
  importer.LeaveShare(index, id, false);
  EXPECT_EQ(importer.MemoryUsed(0), 0u);
  EXPECT_EQ(HeldBy(importer, 4202), 0u);
}

TEST_F(NodeTest, SharedMemoryWhoseLastHolderDiesLeavesTheCard) {
  Node owner(state_.get(), &clock_, 4301, 1), importer(state_.get(), &clock_, 4302, 1);
  uint64_t id = 0;
  int index = ShareBetween(owner, importer, 1ull << 30, 1ull << 30, 79, ShareWay::kLegacyIpc, &id);
  owner.LeaveShare(index, id, true);
  EXPECT_TRUE(owner.ForgetProcess(4302, 1));  // the importer died holding it
  EXPECT_EQ(owner.MemoryUsed(0), 0u);
  EXPECT_EQ(HeldBy(owner, 4301), 0u);
}

// A process's goodbye at its exit (src/sim/registration.h): what it held leaves the card at
// once, its slot stays its own until its connection closes, and nothing it does after
// departing charges, frees twice or queues work.
TEST_F(NodeTest, AProcessThatSaidGoodbyeHoldsNothingAndKeepsItsSlotUntilForgotten) {
  Node leaving(state_.get(), &clock_, 4701, 1), daemon(state_.get(), &clock_, 4702, 1);
  ASSERT_TRUE(leaving.Attach());
  ASSERT_TRUE(leaving.Reserve(0, 1ull << 30));
  int64_t mark = leaving.Enqueue(0, 1'000'000'000);
  ASSERT_GT(mark, 0);
  auto slots_of = [&](uint32_t pid) {
    int n = 0;
    for (const auto& slot : state_->procs) n += slot.pid.load() == pid;
    return n;
  };
  leaving.Depart();
  EXPECT_TRUE(daemon.ReleaseHoldings(4701, 1));
  EXPECT_EQ(daemon.MemoryUsed(0), 0u);
  EXPECT_EQ(HeldBy(daemon, 4701), 0u);
  EXPECT_EQ(slots_of(4701), 1);
  EXPECT_TRUE(leaving.WorkDone(0, mark));  // dropped with the rest: nothing waits for it
  EXPECT_FALSE(leaving.Reserve(0, 1));
  leaving.Release(0, 1ull << 30);  // a late free frees nothing twice
  EXPECT_EQ(daemon.MemoryUsed(0), 0u);
  EXPECT_EQ(leaving.Enqueue(0, 1000), -1);
  EXPECT_TRUE(daemon.ForgetProcess(4701, 1));  // its connection closed
  EXPECT_EQ(slots_of(4701), 0);
}

TEST_F(NodeTest, AGoneTenantsSlotIsReusedOnlyAfterItsSamplesAgedOut) {
  for (int i = 0; i < kTimelineTenants; ++i) {
    Node n(state_.get(), &clock_, 5000 + i, 1);
    ASSERT_GT(n.Enqueue(0, 1000), 0);
  }
  clock_.Advance(1'000'000);
  Node late(state_.get(), &clock_, 6000, 1);
  EXPECT_EQ(late.Enqueue(0, 1000), -1);  // every slot belongs to a live process
  late.ForgetProcess(5003, 1);
  EXPECT_EQ(late.Enqueue(0, 1000), -1);  // gone, but NVML still reports its samples
  clock_.Advance((kSamplePeriods + 1) * kDefaultSamplePeriodNs);
  EXPECT_GT(late.Enqueue(0, 1000), 0);
}

TEST_F(NodeTest, ScheduledEventsBecomeDueAndAreDeliveredOnce) {
  Node n = MakeNode(getpid());
  int64_t now = clock_.NowNs();
  n.AddEvent(0, now + 5'000'000'000, nvmlEventTypeXidCriticalError, 79);
  n.AddEvent(0, now, nvmlEventTypeXidCriticalError, 48);
  uint64_t delivered[2] = {};
  Event ev[4];
  ASSERT_EQ(n.DueEvents(0, delivered, ev, 4), 1u);  // the immediate one, not blocked by the scheduled one
  EXPECT_EQ(ev[0].data, 48u);
  EXPECT_EQ(n.DueEvents(0, delivered, ev, 4), 0u);
  EXPECT_FALSE(n.IsLost(0));
  clock_.Advance(5'000'000'000);
  ASSERT_EQ(n.DueEvents(0, delivered, ev, 4), 1u);
  EXPECT_EQ(ev[0].data, 79u);
  EXPECT_TRUE(n.IsLost(0));
  EXPECT_FALSE(n.IsLost(1));
}

TEST(CostModel, WavesOfBlocks) {
  DeviceSpec s{};
  s.sm_count = 132;
  // 128 threads per block: 16 blocks fit per SM, 2112 per wave.
  EXPECT_EQ(KernelDurationNs(s, 132, 128, 1000), 1000);
  EXPECT_EQ(KernelDurationNs(s, 2112, 128, 1000), 1000);
  EXPECT_EQ(KernelDurationNs(s, 2113, 128, 1000), 2000);
  // 1024 threads per block: 2 per SM.
  EXPECT_EQ(KernelDurationNs(s, 264, 1024, 1000), 1000);
  EXPECT_EQ(KernelDurationNs(s, 265, 1024, 1000), 2000);
  EXPECT_EQ(KernelDurationNs(s, 0, 128, 1000), 0);
}

}  // namespace
}  // namespace gs::sim
