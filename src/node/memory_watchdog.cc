#include "src/node/memory_watchdog.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "src/common/clock.h"
#include "src/common/proc_identity.h"
#include "src/common/raw_log.h"
#include "src/model/container_edits.h"

namespace gs::node {

uint64_t ContainerGpuUse::used() const {
  uint64_t sum = 0;
  for (const auto& p : processes) sum += p.bytes;
  return sum;
}

std::vector<std::string> RegionMountPoints() {
  std::string path = model::EditOptions().region_container_dir;
  std::vector<std::string> points{path};
  if (path.rfind("/var/run/", 0) == 0) points.push_back(path.substr(4));
  return points;
}

std::vector<ContainerGpuUse> Attribute(const std::string& uuid, const std::vector<platform::GpuProcess>& processes,
                                       const std::map<uint32_t, host::ProcessMounts>& mounts,
                                       const std::vector<WatchedContainer>& containers,
                                       const std::vector<std::string>& mount_points) {
  std::map<std::pair<uint32_t, uint32_t>, size_t> by_device;
  for (size_t i = 0; i < containers.size(); ++i) by_device[{containers[i].major, containers[i].minor}] = i;
  std::map<size_t, ContainerGpuUse> uses;
  for (const auto& p : processes) {
    auto m = mounts.find(p.pid);
    if (m == mounts.end() || m->second.same_namespace_as_reader) continue;
    std::set<size_t> owners;
    for (const auto& point : mount_points)
      for (const auto& dev : host::DevicesMountedAt(m->second.entries, point))
        if (auto it = by_device.find(dev); it != by_device.end()) owners.insert(it->second);
    if (owners.size() != 1) continue;
    const WatchedContainer& c = containers[*owners.begin()];
    auto limit = c.limits.find(uuid);
    if (limit == c.limits.end() || limit->second == 0) continue;
    ContainerGpuUse& use = uses[*owners.begin()];
    use.allocation = c.allocation;
    use.uuid = uuid;
    use.limit = limit->second;
    use.processes.push_back({p.pid, p.used_bytes, m->second.start_time});
  }
  std::vector<ContainerGpuUse> out;
  for (auto& [i, use] : uses) out.push_back(std::move(use));
  return out;
}

std::vector<KillDecision> OverLimitRule::Observe(const std::vector<ContainerGpuUse>& sample) {
  std::set<std::pair<std::string, std::string>> over;
  std::vector<KillDecision> kills;
  for (const auto& use : sample) {
    const uint64_t used = use.used();
    if (use.processes.empty() || used <= use.limit + kSlackBytes) continue;
    auto key = std::make_pair(use.allocation, use.uuid);
    if (!over_.count(key)) {
      over.insert(key);
      continue;
    }
    auto victim = std::max_element(use.processes.begin(), use.processes.end(),
                                   [](const WatchedProcess& a, const WatchedProcess& b) { return a.bytes < b.bytes; });
    kills.push_back({use.allocation, use.uuid, *victim, used, use.limit});
  }
  over_ = std::move(over);
  return kills;
}

MemoryWatchdog::MemoryWatchdog(platform::GpuDriver* driver, const SliceBook* book,
                               std::function<std::vector<ContainerDevices>()> pods)
    : driver_(driver), book_(book), pods_(std::move(pods)) {}

std::vector<WatchedContainer> MemoryWatchdog::Containers() {
  std::map<std::string, WatchedContainer> live;
  for (const auto& rec : book_->Records()) {
    if (auto it = known_.find(rec.id); it != known_.end()) {
      live[rec.id] = it->second;
      continue;
    }
    // Only a `shared/` that is a mount of its own (the tmpfs) names the container: a plain
    // directory (--shared-dir-size 0) has the state disk's device, which every container's has.
    struct stat dir, shared;
    if (stat(book_->ContainerDir(rec.id).c_str(), &dir) != 0 || stat(book_->SharedDir(rec.id).c_str(), &shared) != 0 ||
        dir.st_dev == shared.st_dev)
      continue;
    WatchedContainer c{rec.id, major(shared.st_dev), minor(shared.st_dev), {}};
    for (const auto& g : book_->Grants(rec.id))
      if (g.memory_limit > 0) c.limits[g.uuid] = g.memory_limit;
    if (c.limits.empty()) continue;  // not written yet, or no memory limit: nothing to watch
    live[rec.id] = c;
  }
  known_ = live;
  std::vector<WatchedContainer> out;
  for (auto& [id, c] : live) out.push_back(c);
  return out;
}

void MemoryWatchdog::Sample() {
  std::vector<WatchedContainer> containers = Containers();
  if (containers.empty()) {
    rule_.Observe({});
    return;
  }
  static const std::vector<std::string> kMountPoints = RegionMountPoints();
  std::vector<ContainerGpuUse> sample;
  std::map<uint32_t, host::ProcessMounts> mounts;  // read once per pid per sample
  std::set<uint32_t> unreadable;
  for (const auto& gpu : book_->Gpus()) {
    auto procs = driver_->ComputeProcesses(gpu.uuid);
    if (!procs.ok()) continue;  // nothing known about this GPU in this sample
    for (const auto& p : *procs) {
      if (mounts.count(p.pid) || unreadable.count(p.pid)) continue;
      auto m = host::ReadProcessMounts(static_cast<pid_t>(p.pid));
      if (m.ok())
        mounts[p.pid] = std::move(*m);
      else
        unreadable.insert(p.pid);
    }
    auto uses = Attribute(gpu.uuid, *procs, mounts, containers, kMountPoints);
    sample.insert(sample.end(), uses.begin(), uses.end());
  }
  for (const auto& d : rule_.Observe(sample)) Kill(d);
}

namespace {

// SIGKILL to the process (pid, start_time) and no other: through a pidfd, opened before the
// identity is checked, so a pid reused after the check cannot receive it. False when the
// process is gone or is no longer that one.
bool KillProcess(pid_t pid, uint64_t start_time) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) {
    bool ok = ProcessStartTime(pid) == start_time && syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0) == 0;
    close(fd);
    return ok;
  }
  if (errno != ENOSYS) return false;
#endif
  return ProcessStartTime(pid) == start_time && kill(pid, SIGKILL) == 0;  // kernels before 5.3
}

}  // namespace

void MemoryWatchdog::Kill(const KillDecision& d) {
  KillCount who;
  who.uuid = d.uuid;
  who.allocation = d.allocation;
  const std::vector<ContainerDevices> pods = pods_();
  for (const auto& rec : book_->Records())
    if (rec.id == d.allocation)
      for (const auto& p : pods)
        for (const auto& id : p.device_ids)
          if (std::find(rec.device_ids.begin(), rec.device_ids.end(), id) != rec.device_ids.end()) {
            who.ns = p.ns;
            who.pod = p.pod;
            who.container = p.container;
          }
  const std::string name = who.pod.empty()
                               ? "allocation " + d.allocation
                               : who.ns + "/" + who.pod + "/" + who.container + " (allocation " + d.allocation + ")";
  if (!KillProcess(static_cast<pid_t>(d.victim.pid), d.victim.start_time)) {
    GS_LOG(kInfo, "memory watchdog: %s was over its limit on %s, but pid %u is gone", name.c_str(), d.uuid.c_str(),
           d.victim.pid);
    return;
  }
  GS_LOG(kWarn,
         "memory watchdog: %s holds %llu bytes on %s, over its limit of %llu bytes in two samples: killed host pid %u "
         "(%llu bytes)",
         name.c_str(), static_cast<unsigned long long>(d.used), d.uuid.c_str(),
         static_cast<unsigned long long>(d.limit), d.victim.pid, static_cast<unsigned long long>(d.victim.bytes));
  std::lock_guard<std::mutex> l(mu_);
  for (auto& k : kills_)
    if (k.allocation == who.allocation && k.uuid == who.uuid && k.pod == who.pod && k.ns == who.ns &&
        k.container == who.container) {
      ++k.kills;
      return;
    }
  who.kills = 1;
  kills_.push_back(who);
}

std::vector<KillCount> MemoryWatchdog::Kills() const {
  std::lock_guard<std::mutex> l(mu_);
  return kills_;
}

void MemoryWatchdog::Run(const std::atomic<bool>& stop, const std::function<void()>& beat) {
  while (!stop) {
    beat();
    int64_t next = MonotonicNowNs() + 1'000'000'000;
    Sample();
    // Sleep in short steps: a stop is seen within 200 ms.
    for (int64_t now = MonotonicNowNs(); !stop && now < next; now = MonotonicNowNs())
      SleepUntilNs(std::min(next, now + 200'000'000));
  }
}

}  // namespace gs::node
