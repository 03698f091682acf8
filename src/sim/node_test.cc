// The simulator's node model on virtual time: memory accounting, the one-kernel-at-a-time
// timeline shared by processes, utilisation, dead-process sweeping and events.
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

TEST_F(NodeTest, KernelsOfTwoProcessesRunOneAtATime) {
  Node a = MakeNode(getpid()), b = MakeNode(1);
  int64_t t0 = clock_.NowNs();
  int64_t end_a = a.ScheduleKernel(0, t0, 10'000'000);
  int64_t end_b = b.ScheduleKernel(0, t0, 10'000'000);
  EXPECT_EQ(end_a, t0 + 10'000'000);
  EXPECT_EQ(end_b, t0 + 20'000'000);  // waited for a's kernel
  int64_t other = b.ScheduleKernel(1, t0, 5'000'000);
  EXPECT_EQ(other, t0 + 5'000'000);  // another GPU is independent
}

TEST_F(NodeTest, UtilizationOverTheWindow) {
  Node a = MakeNode(getpid());
  int64_t t0 = clock_.NowNs();
  // 250 ms busy in the next second.
  for (int i = 0; i < 5; ++i) a.ScheduleKernel(0, t0 + i * 200'000'000, 50'000'000);
  clock_.Advance(1'000'000'000);
  EXPECT_EQ(a.Utilization(0, 1'000'000'000), 25u);
  EXPECT_EQ(a.Utilization(1, 1'000'000'000), 0u);
}

TEST_F(NodeTest, PerProcessUtilizationSplitsTheCard) {
  Node a = MakeNode(100), b = MakeNode(200);
  int64_t t0 = clock_.NowNs();
  for (int i = 0; i < 10; ++i) {
    a.ScheduleKernel(0, t0, 60'000'000);  // back-to-back runs merge into one record
    b.ScheduleKernel(0, t0, 20'000'000);
  }
  clock_.Advance(1'000'000'000);
  ProcessBusy busy[4];
  int n = a.ProcessUtilization(0, t0, busy, 4);
  ASSERT_EQ(n, 2);
  unsigned pa = busy[0].pid == 100 ? busy[0].sm_percent : busy[1].sm_percent;
  unsigned pb = busy[0].pid == 200 ? busy[0].sm_percent : busy[1].sm_percent;
  EXPECT_EQ(pa, 60u);
  EXPECT_EQ(pb, 20u);
}

TEST_F(NodeTest, BackToBackKernelsOfOneProcessMerge) {
  Node a = MakeNode(100);
  int64_t t0 = clock_.NowNs();
  for (int i = 0; i < 100; ++i) a.ScheduleKernel(0, t0, 1'000'000);
  EXPECT_EQ(state_->live[0].kernel_head.load(), 1u);
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
