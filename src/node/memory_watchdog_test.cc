#include "src/node/memory_watchdog.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "src/common/proc_identity.h"
#include "src/region/region.h"
#include "tests/temp_dir.h"

namespace gs::node {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

ContainerGpuUse Use(const std::string& allocation, uint64_t limit, std::vector<WatchedProcess> processes) {
  ContainerGpuUse u;
  u.allocation = allocation;
  u.uuid = "GPU-0";
  u.limit = limit;
  u.processes = std::move(processes);
  return u;
}

// Feeds `sample` to the rule until one short of confirmation: each must decide nothing.
void ObserveUnconfirmed(OverLimitRule& rule, const std::vector<ContainerGpuUse>& sample) {
  for (int i = 1; i < kConfirmSamples; ++i) EXPECT_TRUE(rule.Observe(sample).empty()) << "sample " << i;
}

TEST(OverLimitRule, OverForLessThanTheConfirmingSamplesIsNothing) {
  OverLimitRule rule;
  auto over = Use("a", 2048 * kMiB, {{10, 1400 * kMiB, 1}, {11, 1400 * kMiB, 1}});
  ObserveUnconfirmed(rule, {over});
  // Back within the limit (a context the enforcer refused, destroyed): the count starts again.
  EXPECT_TRUE(rule.Observe({Use("a", 2048 * kMiB, {{10, 1400 * kMiB, 1}})}).empty());
  ObserveUnconfirmed(rule, {Use("a", 2048 * kMiB, {{10, 1400 * kMiB, 1}, {12, 700 * kMiB, 1}})});
}

TEST(OverLimitRule, OverInThreeSamplesInARowKillsTheLargestProcessOnce) {
  EXPECT_EQ(kConfirmSamples, 3);
  EXPECT_GE((kConfirmSamples - 1) * kSamplePeriodNs, 1'000'000'000);  // a context over for a moment is not
  OverLimitRule rule;
  auto over = Use("a", 2048 * kMiB, {{10, 1000 * kMiB, 1}, {11, 1400 * kMiB, 7}, {12, 100 * kMiB, 1}});
  ObserveUnconfirmed(rule, {over});
  auto kills = rule.Observe({over});
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].reason, KillReason::kOverLimit);
  EXPECT_EQ(kills[0].allocation, "a");
  EXPECT_EQ(kills[0].uuid, "GPU-0");
  EXPECT_EQ(kills[0].victim.pid, 11u);
  EXPECT_EQ(kills[0].victim.start_time, 7u);
  EXPECT_EQ(kills[0].used, 2500 * kMiB);
  EXPECT_EQ(kills[0].limit, 2048 * kMiB);
  // The killed process may still be listed in the next sample: that is a first sample over.
  ObserveUnconfirmed(rule, {over});
  EXPECT_EQ(rule.Observe({over}).size(), 1u);
}

TEST(OverLimitRule, TheLimitPlusTheDriversGranularityIsNotOver) {
  OverLimitRule rule;
  auto exact = Use("a", 2039 * kMiB, {{10, 2040 * kMiB, 1}});  // 2039 MiB allocated: 2040 held
  auto slack = Use("a", 2039 * kMiB, {{10, 2039 * kMiB + OverLimitRule::kSlackBytes, 1}});
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(rule.Observe({exact}).empty());
    EXPECT_TRUE(rule.Observe({slack}).empty());
  }
}

TEST(OverLimitRule, ASampleWithoutTheContainerStartsTheCountAgain) {
  OverLimitRule rule;
  auto over = Use("a", 100 * kMiB, {{10, 200 * kMiB, 1}});
  ObserveUnconfirmed(rule, {over});
  EXPECT_TRUE(rule.Observe({}).empty());  // e.g. NVML failed for the GPU
  ObserveUnconfirmed(rule, {over});
  EXPECT_EQ(rule.Observe({over}).size(), 1u);
  // Each (container, GPU) counts on its own.
  auto other = Use("b", 100 * kMiB, {{20, 200 * kMiB, 1}});
  ObserveUnconfirmed(rule, {over, other});
  auto kills = rule.Observe({other});
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].allocation, "b");
}

// ---- attribution --------------------------------------------------------------------------

host::NamespaceId Ns(uint64_t ino) {
  return {4, ino};
}

// A mount table with the container tmpfs of minor `minor` at `point` (none when minor is 0).
std::vector<host::MountEntry> Table(uint32_t minor, const std::string& point = "/var/run/gpuslice") {
  std::string text = "1 0 0:1 / / rw - overlay o rw\n";
  if (minor != 0) text += "2 1 0:" + std::to_string(minor) + " / " + point + " rw - tmpfs gpuslice-shared rw\n";
  return host::ParseMountinfo(text);
}

// The host's processes as a test lays them out: each process's facts, and the whole table
// of each mount namespace (what chroot cannot hide).
class FakeHost : public HostProcesses {
 public:
  // A process in mount namespace `mnt` (whose whole table shows `ns_minor`'s tmpfs at the
  // region directory), seeing `own` from its root, in PID namespaces `pid_ns` (own first).
  void Add(uint32_t pid, uint64_t mnt, std::vector<host::MountEntry> own, const std::vector<uint64_t>& pid_ns,
           uint32_t ns_pid, bool agents = false) {
    ProcessFacts f;
    f.start_time = 1000 + pid;
    f.mount_namespace = Ns(mnt);
    f.agents_mount_namespace = agents;
    f.mounts = std::move(own);
    for (uint64_t n : pid_ns) f.pid_namespaces.push_back(Ns(n));
    f.ns_pid = ns_pid;
    procs[pid] = f;
  }
  StatusOr<ProcessFacts> Facts(uint32_t pid) override {
    auto it = procs.find(pid);
    if (it == procs.end()) return Unavailable("gone");
    return it->second;
  }
  StatusOr<std::vector<host::MountEntry>> NamespaceMounts(uint32_t, const ProcessFacts& f) override {
    ++namespace_reads;
    if (!may_enter) return FailedPrecondition("setns: Operation not permitted");
    auto it = tables.find(f.mount_namespace);
    if (it == tables.end()) return Unavailable("gone");
    return it->second;
  }
  std::vector<uint32_t> FirstProcesses(const host::NamespaceId& ns) override {
    std::vector<uint32_t> out;
    for (const auto& [pid, f] : procs)
      if (!f.pid_namespaces.empty() && f.pid_namespaces[0] == ns && f.ns_pid == 1) out.push_back(pid);
    return out;
  }
  bool Alive(uint32_t pid, uint64_t start_time) override {
    auto it = procs.find(pid);
    return it != procs.end() && it->second.start_time == start_time;
  }

  std::map<uint32_t, ProcessFacts> procs;
  std::map<host::NamespaceId, std::vector<host::MountEntry>> tables;
  bool may_enter = true;
  int namespace_reads = 0;
};

std::vector<WatchedContainer> TwoContainers() {
  return {{"a", 0, 58, {{"GPU-0", 2048 * kMiB}}}, {"b", 0, 59, {{"GPU-0", 4096 * kMiB}, {"GPU-1", 1024 * kMiB}}}};
}

TEST(Attributor, AProcessBelongsToTheContainerWhoseTmpfsItHasAtTheRegionDirectory) {
  auto containers = TwoContainers();
  FakeHost host;
  host.Add(10, 100, Table(58), {200}, 1);
  host.Add(11, 101, Table(58, "/run/gpuslice"), {201}, 1);  // /var/run -> /run in the image
  host.Add(12, 102, Table(59), {202}, 1);
  host.Add(13, 103, Table(58), {}, 13, /*agents=*/true);  // the agent's own mount namespace
  host.Add(14, 104, Table(58, "/elsewhere"), {204}, 1);
  host.Add(15, 105, Table(60), {205}, 1);  // a tmpfs of no container
  for (uint64_t ns = 100; ns <= 105; ++ns) host.tables[Ns(ns)] = host.procs[static_cast<uint32_t>(ns - 90)].mounts;
  Attributor who(&host, containers, RegionMountPoints());
  std::vector<platform::GpuProcess> procs{
      {10, 100 * kMiB}, {11, 200 * kMiB}, {12, 300 * kMiB}, {13, 400 * kMiB},
      {14, 500 * kMiB}, {15, 600 * kMiB}, {16, 700 * kMiB}};  // 16: /proc unreadable
  auto uses = GpuUses("GPU-0", procs, &who, containers);
  ASSERT_EQ(uses.size(), 2u);
  EXPECT_EQ(uses[0].allocation, "a");
  EXPECT_EQ(uses[0].limit, 2048 * kMiB);
  ASSERT_EQ(uses[0].processes.size(), 2u);
  EXPECT_EQ(uses[0].processes[0].pid, 10u);
  EXPECT_EQ(uses[0].processes[0].start_time, 1010u);
  EXPECT_EQ(uses[0].processes[0].evidence, Evidence::kOwnMounts);
  EXPECT_EQ(uses[0].processes[1].pid, 11u);
  EXPECT_EQ(uses[0].used(), 300 * kMiB);
  EXPECT_EQ(uses[1].allocation, "b");
  ASSERT_EQ(uses[1].processes.size(), 1u);
  EXPECT_EQ(uses[1].processes[0].pid, 12u);
  for (uint32_t nobody : {13u, 14u, 15u, 16u}) EXPECT_EQ(who.Of(nobody).container, -1) << nobody;
  EXPECT_FALSE(who.Of(16).known);
  // On GPU-1 only b has a limit: a's process there is not judged against anything.
  uses = GpuUses("GPU-1", procs, &who, containers);
  ASSERT_EQ(uses.size(), 1u);
  EXPECT_EQ(uses[0].allocation, "b");
}

TEST(Attributor, TwoContainersTmpfsAtTheRegionDirectoryIsNobodys) {
  auto containers = TwoContainers();
  FakeHost host;
  auto both = Table(58);
  auto more = Table(59);
  both.push_back(more.back());
  host.Add(10, 100, both, {200}, 1);
  host.Add(11, 101, {}, {201}, 1);  // chrooted, in a namespace holding both
  host.tables[Ns(101)] = both;
  host.Add(12, 102, Table(0), {200}, 7);  // in 10's PID namespace, its mounts shed
  host.tables[Ns(102)] = Table(0);
  Attributor who(&host, containers, RegionMountPoints());
  OverLimitRule rule;
  for (uint32_t pid : {10u, 11u, 12u}) EXPECT_EQ(who.Of(pid).container, -1) << pid;
  std::vector<platform::GpuProcess> procs{{10, 900 * kMiB}, {11, 900 * kMiB}, {12, 900 * kMiB}};
  for (int i = 0; i < kConfirmSamples + 1; ++i)
    EXPECT_TRUE(rule.Observe(GpuUses("GPU-0", procs, &who, containers)).empty());
}

TEST(Attributor, AChrootedProcessBelongsToItsContainerByItsMountNamespace) {
  auto containers = TwoContainers();
  FakeHost host;
  // chroot /var/run: the tmpfs is at /gpuslice under its root; the namespace still has it.
  host.Add(10, 100, Table(58, "/gpuslice"), {200}, 1);
  host.Add(11, 100, Table(0), {200}, 2);  // chrooted elsewhere, the same namespace
  host.tables[Ns(100)] = Table(58, "/run/gpuslice");
  Attributor who(&host, containers, RegionMountPoints());
  EXPECT_EQ(who.Of(10).container, 0);
  EXPECT_EQ(who.Of(10).evidence, Evidence::kNamespaceMounts);
  EXPECT_EQ(who.Of(11).container, 0);
  EXPECT_EQ(host.namespace_reads, 1);  // once per namespace and sample
  EXPECT_TRUE(who.namespace_error().ok());
}

TEST(Attributor, WithoutTheRightToEnterANamespaceAChrootedProcessIsNobodys) {
  auto containers = TwoContainers();
  FakeHost host;
  host.may_enter = false;
  host.Add(10, 100, Table(0), {200}, 1);
  host.tables[Ns(100)] = Table(58);
  Attributor who(&host, containers, RegionMountPoints());
  EXPECT_TRUE(who.Of(10).known);
  EXPECT_EQ(who.Of(10).container, -1);
  EXPECT_EQ(who.namespace_error().code(), StatusCode::kFailedPrecondition);
}

TEST(Attributor, AProcessThatShedTheRegionMountBelongsToItsPidNamespacesFirstProcesssContainer) {
  auto containers = TwoContainers();
  FakeHost host;
  host.Add(1, 100, Table(59), {300}, 1);  // b's first process, in b's mount namespace
  host.tables[Ns(100)] = Table(59);
  host.Add(20, 120, Table(0), {300}, 7);  // its own mount namespace, without the tmpfs
  host.tables[Ns(120)] = Table(0);
  // Deeper: a PID namespace of its own inside b's, whose pid 1 shed the mount too.
  host.Add(30, 130, Table(0), {301, 300}, 1);
  host.Add(31, 130, Table(0), {301, 300}, 2);
  host.tables[Ns(130)] = Table(0);
  Attributor who(&host, containers, RegionMountPoints());
  for (uint32_t pid : {20u, 30u, 31u}) {
    EXPECT_EQ(who.Of(pid).container, 1) << pid;
    EXPECT_EQ(who.Of(pid).evidence, Evidence::kPidNamespace) << pid;
  }
  EXPECT_EQ(who.Of(1).evidence, Evidence::kOwnMounts);
}

TEST(Attributor, APidNamespaceWhoseFirstProcessIsNoContainersGivesNothing) {
  auto containers = TwoContainers();
  FakeHost host;
  // A pod sharing one PID namespace between its containers: pid 1 is the pod's sandbox
  // (pause), in a mount namespace of its own with no region directory. A sliced container's
  // process is attributed by its mounts; the other container's process (no slice, on the GPU
  // all the same) is nobody's.
  host.Add(1, 100, Table(0), {300}, 1);
  host.tables[Ns(100)] = Table(0);
  host.Add(2, 101, Table(58), {300}, 2);
  host.Add(3, 102, Table(0), {300}, 3);
  host.tables[Ns(102)] = Table(0);
  // Nested PID namespaces whose first processes are of two containers: nobody's.
  host.Add(10, 110, Table(58), {310}, 1);
  host.Add(11, 111, Table(59), {311, 310}, 1);
  host.Add(12, 112, Table(0), {311, 310}, 5);
  host.tables[Ns(112)] = Table(0);
  // A first process that is gone is no evidence.
  host.Add(20, 120, Table(0), {320}, 4);
  host.tables[Ns(120)] = Table(0);
  Attributor who(&host, containers, RegionMountPoints());
  EXPECT_EQ(who.Of(2).container, 0);
  EXPECT_EQ(who.Of(3).container, -1);
  EXPECT_EQ(who.Of(12).container, -1);
  EXPECT_EQ(who.Of(20).container, -1);
}

TEST(Attributor, HostProcessesAreNobodys) {
  auto containers = TwoContainers();
  FakeHost host;
  // The host's mount namespace (not the agent's when the agent runs in a pod): the tmpfs at
  // its host path; the host's PID namespace (the chain is empty). The same for a process of
  // a hostPID container without a slice.
  auto host_table = Table(58, "/var/lib/gpuslice/containers/x/shared");
  host.Add(10, 1, host_table, {}, 10);
  host.tables[Ns(1)] = host_table;
  host.Add(11, 2, Table(0), {}, 11);
  host.tables[Ns(2)] = Table(0);
  Attributor who(&host, containers, RegionMountPoints());
  EXPECT_EQ(who.Of(10).container, -1);
  EXPECT_EQ(who.Of(11).container, -1);
}

// ---- the enforcer rule ----------------------------------------------------------------------

CardSighting Seen(uint32_t pid, uint64_t start, std::optional<bool> has_slot, const std::string& uuid = "GPU-0") {
  return {"a", uuid, {pid, 64 * kMiB, start, Evidence::kOwnMounts}, has_slot};
}

TEST(EnforcerRule, AProcessWithoutASlotIsKilledInTheThirdSampleInARow) {
  EnforcerRule rule;
  for (int i = 1; i < kConfirmSamples; ++i) EXPECT_TRUE(rule.Observe({Seen(10, 7, false)}).empty());
  auto kills = rule.Observe({Seen(10, 7, false)});
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].reason, KillReason::kNoEnforcer);
  EXPECT_EQ(kills[0].allocation, "a");
  EXPECT_EQ(kills[0].victim.pid, 10u);
  EXPECT_EQ(kills[0].victim.start_time, 7u);
  // Still listed just after: it counts from the start again.
  EXPECT_TRUE(rule.Observe({Seen(10, 7, false)}).empty());
}

TEST(EnforcerRule, ASlotAnUnreadableRegionOrAMissingSampleStartsTheCountAgain) {
  EnforcerRule rule;
  for (std::optional<bool> reset : {std::optional<bool>(true), std::optional<bool>()}) {
    for (int i = 1; i < kConfirmSamples; ++i) EXPECT_TRUE(rule.Observe({Seen(10, 7, false)}).empty());
    EXPECT_TRUE(rule.Observe({Seen(10, 7, reset)}).empty());
  }
  for (int i = 1; i < kConfirmSamples; ++i) EXPECT_TRUE(rule.Observe({Seen(10, 7, false)}).empty());
  EXPECT_TRUE(rule.Observe({}).empty());
  // A process with a slot is never killed.
  for (int i = 0; i < 2 * kConfirmSamples; ++i) EXPECT_TRUE(rule.Observe({Seen(11, 7, true)}).empty());
  // A reused pid is another process: its count is its own.
  for (int i = 1; i < kConfirmSamples; ++i) EXPECT_TRUE(rule.Observe({Seen(10, 7, false)}).empty());
  EXPECT_TRUE(rule.Observe({Seen(10, 8, false)}).empty());
}

TEST(EnforcerRule, AProcessOnTwoGpusCountsOnceAndIsKilledOnce) {
  EnforcerRule rule;
  std::vector<CardSighting> both{Seen(10, 7, false, "GPU-0"), Seen(10, 7, false, "GPU-1")};
  for (int i = 1; i < kConfirmSamples; ++i) EXPECT_TRUE(rule.Observe(both).empty());
  EXPECT_EQ(rule.Observe(both).size(), 1u);
}

// ---- slots ----------------------------------------------------------------------------------

TEST(HoldsSlot, ByThePidInItsOwnNamespaceAndItsStartTime) {
  std::vector<host::RegionProcess> slots{{0, 7, 5007, 100}, {1, 8, 0, 200}};
  EXPECT_TRUE(HoldsSlot(slots, 7, 100));
  EXPECT_TRUE(HoldsSlot(slots, 8, 200));
  EXPECT_FALSE(HoldsSlot(slots, 7, 101));     // a reused pid
  EXPECT_FALSE(HoldsSlot(slots, 5007, 100));  // the host pid is the agent's note, not the identity
  EXPECT_FALSE(HoldsSlot({}, 7, 100));
}

TEST(RegionSlots, AProcessThatJoinedTheRegionHasItsSlotAndNoRegionMeansNoSlots) {
  gs::testing::TempDir tmp("gs-slots");
  const std::string path = tmp.path() + "/region";
  auto none = RegionSlots(path);
  ASSERT_TRUE(none.has_value());  // no file: nobody ever joined
  EXPECT_TRUE(none->empty());
  region::OpenError err;
  char msg[256];
  region::Region* r = region::OpenRegion(path.c_str(), &err, msg, sizeof(msg));
  ASSERT_NE(r, nullptr) << msg;
  const uint64_t start = ProcessStartTime(getpid());
  ASSERT_NE(region::ClaimSlot(r, getpid(), start, OwnPidNamespace()),
            nullptr);  // what the enforcer does at its first call
  region::CloseRegion(r);
  auto slots = RegionSlots(path);
  ASSERT_TRUE(slots.has_value());
  EXPECT_TRUE(HoldsSlot(*slots, static_cast<uint32_t>(getpid()), start));
  // A file that is no region: nothing can be told.
  std::ofstream(tmp.path() + "/junk") << "not a region";
  EXPECT_FALSE(RegionSlots(tmp.path() + "/junk").has_value());
}

TEST(RegionMountPoints, TheAgentsPathAndItsRunForm) {
  EXPECT_EQ(RegionMountPoints(), (std::vector<std::string>{"/var/run/gpuslice", "/run/gpuslice"}));
}

}  // namespace
}  // namespace gs::node
