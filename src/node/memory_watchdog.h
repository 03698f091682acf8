// The memory watchdog: the node agent's backstop for what the enforcer enforces from inside
// a container, needing nothing from the container. The enforcer runs inside the container
// and its books (the region) are writable by every process there, so colluding processes
// can each take up to a whole limit, and a program with its own loader or raw ioctls is not
// limited at all (docs/enforcer.md, "Threat model"). Twice a second the watchdog asks the
// driver (NVML) which processes hold how much memory on each GPU, attributes each to a
// container (Attributor, below), and applies two rules, each only when its condition holds
// in kConfirmSamples samples in a row (at least 1 s):
// - memory (OverLimitRule): a container over what the agent granted it on a GPU (the limits
//   file the agent wrote, outside anything the container can write) plus 2 MiB (the driver's
//   allocation granularity) loses its process holding the most memory there (SIGKILL); a
//   context may be over for a moment before the enforcer refuses its charge and destroys it;
// - enforcer (EnforcerRule, --require-enforcer): a process of a container with a slice that
//   is on a GPU and holds no slot in its container's region is killed, whatever it holds. The
//   enforcer claims its process's slot before that process makes its first context, so an
//   enforced process is never on a card without one; a process there without one reached the
//   driver around the enforcer. The region is the container's to write: a slot can only
//   spare a process of that container, never have anyone killed.
//
// It never acts on missing information: a GPU NVML cannot list, a process whose /proc it
// cannot read, a container whose limits it cannot read, a region it cannot read (other than
// one that does not exist) are left out of that sample, and the count of samples in a row
// starts again. It takes no lock a container can hold and touches no container's directory
// or record. Docs: docs/node-agent.md, "Memory watchdog".
//
// Threading: Run() on one thread; Kills() and Samples() from any (metrics scrapes).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "src/common/status.h"
#include "src/host/proc_mounts.h"
#include "src/host/region_reader.h"
#include "src/node/pod_resources.h"
#include "src/node/slice_book.h"
#include "src/platform/gpu_driver.h"

namespace gs::node {

// The sampling period and how many samples in a row a rule's condition must hold.
inline constexpr int64_t kSamplePeriodNs = 500'000'000;
inline constexpr int kConfirmSamples = 3;

// A container as the watchdog knows it: its allocation record, the device of the tmpfs
// its `shared/` is on, and its memory limit on each GPU it was granted (0: no limit there).
struct WatchedContainer {
  std::string allocation;
  uint32_t major = 0, minor = 0;
  std::map<std::string, uint64_t> limits;
};

// Which fact tied a process to its container (Attributor).
enum class Evidence { kNone, kOwnMounts, kNamespaceMounts, kPidNamespace };
const char* EvidenceName(Evidence e);

struct WatchedProcess {
  uint32_t pid = 0;  // host pid
  uint64_t bytes = 0;
  uint64_t start_time = 0;  // identity with pid (src/common/proc_identity.h)
  Evidence evidence = Evidence::kNone;
};

// One container's use of one GPU in one sample.
struct ContainerGpuUse {
  std::string allocation, uuid;
  uint64_t limit = 0;
  std::vector<WatchedProcess> processes;
  uint64_t used() const;
};

// The mount points at which a container sees its region directory: the path the agent
// gives (model::EditOptions::region_container_dir), and that path with /var/run resolved
// to /run, where images have /var/run -> /run (the runtime resolves links in the rootfs).
std::vector<std::string> RegionMountPoints();

// What attribution needs to know about a process, from the host's /proc.
struct ProcessFacts {
  uint64_t start_time = 0;
  host::NamespaceId mount_namespace;
  bool agents_mount_namespace = true;             // the agent's own: never a container's
  std::vector<host::MountEntry> mounts;           // its own table: the mounts under its root
  std::vector<host::NamespaceId> pid_namespaces;  // its own, then each parent, below the agent's
  uint32_t ns_pid = 0;                            // its pid in its own PID namespace
};

// The host's processes as attribution reads them: /proc (HostProcessesFromProc), or a fake
// in tests. One instance serves one sample.
class HostProcesses {
 public:
  virtual ~HostProcesses() = default;
  // Unavailable when the process is gone or its /proc cannot be read.
  virtual StatusOr<ProcessFacts> Facts(uint32_t pid) = 0;
  // The mount table of the process's mount namespace from the namespace's root
  // (src/host/proc_namespaces.h), if it is still in facts.mount_namespace.
  virtual StatusOr<std::vector<host::MountEntry>> NamespaceMounts(uint32_t pid, const ProcessFacts& facts) = 0;
  // Host pids of processes that look like pid 1 of PID namespace `ns` (the caller checks
  // their facts).
  virtual std::vector<uint32_t> FirstProcesses(const host::NamespaceId& ns) = 0;
  virtual bool Alive(uint32_t pid, uint64_t start_time) = 0;
};
std::unique_ptr<HostProcesses> HostProcessesFromProc();

struct Attribution {
  bool known = false;  // the process's /proc could be read
  int container = -1;  // index into the containers; -1: nobody's
  Evidence evidence = Evidence::kNone;
  ProcessFacts facts;
};

// Attributes processes to containers by facts a process cannot shed. Every container's
// `shared/` is a tmpfs the agent mounted, with a device number no other mount has, and the
// runtime mounts it at the region directory (`mount_points`) in the container's mount
// namespace. A process belongs to container C when, in order:
// 1. its own mount table shows C's tmpfs at the region directory (the common case);
// 2. else the table of its whole mount namespace does, read from the namespace's root: a
//    chrooted process keeps its mount namespace;
// 3. else its PID namespace, or one of that namespace's parents, has as its pid 1 a process
//    that belongs to C by 1 or 2: a process that made a mount namespace of its own (in a user
//    namespace of its own, say) and shed the region's mount there is still in its
//    container's PID namespace, which it can never leave.
// A process in the agent's own mount namespace is nobody's; one for which any step finds
// two containers, or whose /proc cannot be read, is nobody's. Host processes see the tmpfs
// at its host path and are in the host's PID namespace (below which the chain stops): they
// are never a container's. One instance serves one sample (it caches what it read).
class Attributor {
 public:
  Attributor(HostProcesses* host, const std::vector<WatchedContainer>& containers,
             std::vector<std::string> mount_points);
  const Attribution& Of(uint32_t pid);
  // The last failure to read a mount namespace's table (e.g. no privilege to enter it), ok
  // when there was none.
  const Status& namespace_error() const { return namespace_error_; }

 private:
  static constexpr int kNobody = -1, kAmbiguous = -2;
  int InTable(const std::vector<host::MountEntry>& table) const;
  int ByMounts(uint32_t pid, const ProcessFacts& facts, Evidence* how);
  int ByPidNamespace(uint32_t pid, const ProcessFacts& facts);
  const ProcessFacts* FactsOf(uint32_t pid);

  HostProcesses* host_;
  std::vector<std::string> mount_points_;
  std::map<std::pair<uint32_t, uint32_t>, int> by_device_;
  std::map<uint32_t, std::optional<ProcessFacts>> facts_;
  std::map<host::NamespaceId, int> namespace_owner_;  // mount namespace -> owner by its table
  std::map<uint32_t, Attribution> done_;
  Status namespace_error_;
};

// The use of every container with a memory limit on `uuid` that has a process there.
std::vector<ContainerGpuUse> GpuUses(const std::string& uuid, const std::vector<platform::GpuProcess>& processes,
                                     Attributor* who, const std::vector<WatchedContainer>& containers);

enum class KillReason { kOverLimit, kNoEnforcer };

struct KillDecision {
  KillReason reason = KillReason::kOverLimit;
  std::string allocation, uuid;
  WatchedProcess victim;
  uint64_t used = 0, limit = 0;  // kOverLimit: the container's use and limit on the GPU
};

// The memory rule, over successive samples: a (container, GPU) over limit + kSlackBytes in
// kConfirmSamples samples in a row gets its largest process killed; the count starts again
// after a kill and whenever a sample is not over or does not include it.
class OverLimitRule {
 public:
  static constexpr uint64_t kSlackBytes = 2ull << 20;
  std::vector<KillDecision> Observe(const std::vector<ContainerGpuUse>& sample);

 private:
  std::map<std::pair<std::string, std::string>, int> over_;  // (allocation, uuid) -> samples over in a row
};

// A process of a container with a slice, seen on a GPU in one sample, and whether the
// container's region holds a slot for it (nullopt: the region could not be read).
struct CardSighting {
  std::string allocation, uuid;
  WatchedProcess process;
  std::optional<bool> has_slot;
};

// True when `slots` (a copy of the container's region) holds the process with pid `ns_pid`
// in its own PID namespace (what the enforcer records) and this start time.
bool HoldsSlot(const std::vector<host::RegionProcess>& slots, uint32_t ns_pid, uint64_t start_time);

// The enforcer rule, over successive samples: a process (pid, start time) seen on a GPU
// without a slot in kConfirmSamples samples in a row is killed; the count starts again when
// a sample shows it with a slot, cannot tell (region unreadable) or does not include it.
class EnforcerRule {
 public:
  std::vector<KillDecision> Observe(const std::vector<CardSighting>& sample);

 private:
  std::map<std::pair<uint32_t, uint64_t>, int> without_slot_;  // (pid, start time) -> samples in a row
};

// A copy of a container's slots: none when the region file does not exist (no process of
// the container ever ran the enforcer); nullopt when it cannot be read or was not one
// consistent copy.
std::optional<std::vector<host::RegionProcess>> RegionSlots(const std::string& region_file);

// Kills counted per container and GPU, with the container's labels at the time.
struct KillCount {
  KillReason reason = KillReason::kOverLimit;
  std::string ns, pod, container, uuid, allocation;
  uint64_t kills = 0;
};

struct WatchdogRules {
  bool memory_limits = true;     // --memory-watchdog
  bool require_enforcer = true;  // --require-enforcer
};

class MemoryWatchdog {
 public:
  // pods: the agent's latest pod-resources view (labels for logs and metrics).
  MemoryWatchdog(platform::GpuDriver* driver, const SliceBook* book,
                 std::function<std::vector<ContainerDevices>()> pods, WatchdogRules rules = {});
  // Samples every kSamplePeriodNs until stop; calls beat() once per sample.
  void Run(const std::atomic<bool>& stop, const std::function<void()>& beat);
  // One sample (and its kills).
  void Sample();
  std::vector<KillCount> Kills() const;
  // Samples taken, each with its kills done.
  uint64_t Samples() const { return samples_.load(std::memory_order_relaxed); }

 private:
  std::vector<WatchedContainer> Containers();
  void Kill(const KillDecision& d);

  platform::GpuDriver* driver_;
  const SliceBook* book_;
  std::function<std::vector<ContainerDevices>()> pods_;
  WatchdogRules rules_;
  std::map<std::string, WatchedContainer> known_;  // by allocation: ids are never reused
  OverLimitRule over_limit_;
  EnforcerRule enforcer_;
  bool namespace_error_logged_ = false;
  mutable std::mutex mu_;
  std::vector<KillCount> kills_;
  std::atomic<uint64_t> samples_{0};
};

}  // namespace gs::node
