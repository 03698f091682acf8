// The memory watchdog: the node agent's backstop for device-memory limits, needing nothing
// from the container. The enforcer runs inside the container and its books (the region)
// are writable by every process there, so colluding processes can each take up to a whole
// limit, and a program with its own loader or raw ioctls is not limited at all
// (docs/enforcer.md, "Threat model"). Once a second the watchdog asks the driver (NVML) which
// processes hold how much memory on each GPU, attributes each to a container by its mount
// of that container's `shared/` tmpfs (src/host/proc_mounts.h: the tmpfs's device number at
// the region directory, in a mount namespace other than the agent's), sums each
// container's use per GPU and compares it with what the agent granted there (the limits
// file the agent wrote, outside anything the container can write). A container over its
// limit plus 2 MiB (the driver's allocation granularity) in two consecutive samples loses
// its process holding the most memory on that GPU (SIGKILL); a context may be over for a
// moment before the enforcer refuses its charge and destroys it, hence two.
//
// It never acts on missing information: a GPU NVML cannot list, a process whose /proc it
// cannot read, a container whose limits it cannot read are left out of that round (and the
// count of consecutive samples over starts again). It touches no container's directory or
// record. Docs: docs/node-agent.md, "Memory watchdog".
//
// Threading: Run() on one thread; Kills() from any (metrics scrapes).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "src/host/proc_mounts.h"
#include "src/node/pod_resources.h"
#include "src/node/slice_book.h"
#include "src/platform/gpu_driver.h"

namespace gs::node {

// A container as the watchdog knows it: its allocation record, the device of its
// `shared/` tmpfs, and its memory limit per GPU UUID (0 or absent: none there).
struct WatchedContainer {
  std::string allocation;
  uint32_t major = 0, minor = 0;
  std::map<std::string, uint64_t> limits;
};

struct WatchedProcess {
  uint32_t pid = 0;  // host pid
  uint64_t bytes = 0;
  uint64_t start_time = 0;  // identity with pid (src/common/proc_identity.h)
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

// Attributes the processes NVML lists on GPU `uuid` to containers: a process belongs to
// the container whose tmpfs device its mount table shows at one of `mount_points`, when
// its mount namespace is not the agent's. A process without readable mounts (absent from
// `mounts`), in the agent's namespace, matching no container or more than one is nobody's.
// Returns the use of every container with a limit on `uuid` that has a process there.
std::vector<ContainerGpuUse> Attribute(const std::string& uuid, const std::vector<platform::GpuProcess>& processes,
                                       const std::map<uint32_t, host::ProcessMounts>& mounts,
                                       const std::vector<WatchedContainer>& containers,
                                       const std::vector<std::string>& mount_points);

struct KillDecision {
  std::string allocation, uuid;
  WatchedProcess victim;
  uint64_t used = 0, limit = 0;
};

// The decision rule, over successive samples: a (container, GPU) over limit + kSlackBytes
// in this sample and the one before gets its largest process killed; the count starts
// again after a kill and whenever a sample is not over or does not include it.
class OverLimitRule {
 public:
  static constexpr uint64_t kSlackBytes = 2ull << 20;
  std::vector<KillDecision> Observe(const std::vector<ContainerGpuUse>& sample);

 private:
  std::set<std::pair<std::string, std::string>> over_;  // (allocation, uuid) over in the last sample
};

// Kills counted per container and GPU, with the container's labels at the time.
struct KillCount {
  std::string ns, pod, container, uuid, allocation;
  uint64_t kills = 0;
};

class MemoryWatchdog {
 public:
  // pods: the agent's latest pod-resources view (labels for logs and metrics).
  MemoryWatchdog(platform::GpuDriver* driver, const SliceBook* book,
                 std::function<std::vector<ContainerDevices>()> pods);
  // Samples every ~1 s until stop; calls beat() once per sample.
  void Run(const std::atomic<bool>& stop, const std::function<void()>& beat);
  // One sample (and its kills).
  void Sample();
  std::vector<KillCount> Kills() const;

 private:
  std::vector<WatchedContainer> Containers();
  void Kill(const KillDecision& d);

  platform::GpuDriver* driver_;
  const SliceBook* book_;
  std::function<std::vector<ContainerDevices>()> pods_;
  std::map<std::string, WatchedContainer> known_;  // by allocation: ids are never reused
  OverLimitRule rule_;
  mutable std::mutex mu_;
  std::vector<KillCount> kills_;
};

}  // namespace gs::node
