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
#include "src/host/proc_namespaces.h"
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

const char* EvidenceName(Evidence e) {
  switch (e) {
    case Evidence::kOwnMounts:
      return "its mounts";
    case Evidence::kNamespaceMounts:
      return "its mount namespace";
    case Evidence::kPidNamespace:
      return "its PID namespace";
    case Evidence::kNone:
      break;
  }
  return "nothing";
}

namespace {

class ProcHostProcesses final : public HostProcesses {
 public:
  StatusOr<ProcessFacts> Facts(uint32_t pid) override {
    GS_ASSIGN_OR_RETURN(host::ProcessMounts m, host::ReadProcessMounts(static_cast<pid_t>(pid)));
    GS_ASSIGN_OR_RETURN(host::PidNamespaces p, host::ReadPidNamespaces(static_cast<pid_t>(pid)));
    if (p.start_time != m.start_time) return Unavailable("/proc/" + std::to_string(pid) + ": gone");
    ProcessFacts f;
    f.start_time = m.start_time;
    f.mount_namespace = m.mount_namespace;
    f.agents_mount_namespace = m.same_namespace_as_reader;
    f.mounts = std::move(m.entries);
    f.pid_namespaces = std::move(p.chain);
    f.ns_pid = p.ns_pid;
    return f;
  }
  StatusOr<std::vector<host::MountEntry>> NamespaceMounts(uint32_t pid, const ProcessFacts& facts) override {
    return host::ReadNamespaceMounts(static_cast<pid_t>(pid), facts.start_time, facts.mount_namespace);
  }
  std::vector<uint32_t> FirstProcesses(const host::NamespaceId& ns) override {
    if (!index_) index_ = host::IndexPidNamespaces();  // one pass over /proc per sample, when needed
    std::vector<uint32_t> out;
    auto it = index_->find(ns);
    if (it == index_->end()) return out;
    for (uint32_t pid : it->second)
      if (host::PidInOwnNamespace(static_cast<pid_t>(pid)) == 1) out.push_back(pid);
    return out;
  }
  bool Alive(uint32_t pid, uint64_t start_time) override { return ProcessIsAlive(static_cast<pid_t>(pid), start_time); }

 private:
  std::optional<std::map<host::NamespaceId, std::vector<uint32_t>>> index_;
};

}  // namespace

std::unique_ptr<HostProcesses> HostProcessesFromProc() {
  return std::make_unique<ProcHostProcesses>();
}

Attributor::Attributor(HostProcesses* host, const std::vector<WatchedContainer>& containers,
                       std::vector<std::string> mount_points)
    : host_(host), mount_points_(std::move(mount_points)) {
  for (size_t i = 0; i < containers.size(); ++i)
    by_device_[{containers[i].major, containers[i].minor}] = static_cast<int>(i);
}

const ProcessFacts* Attributor::FactsOf(uint32_t pid) {
  auto [it, fresh] = facts_.try_emplace(pid);
  if (fresh) {
    auto f = host_->Facts(pid);
    if (f.ok()) it->second = std::move(*f);
  }
  return it->second ? &*it->second : nullptr;
}

int Attributor::InTable(const std::vector<host::MountEntry>& table) const {
  std::set<int> owners;
  for (const auto& point : mount_points_)
    for (const auto& dev : host::DevicesMountedAt(table, point))
      if (auto it = by_device_.find(dev); it != by_device_.end()) owners.insert(it->second);
  if (owners.empty()) return kNobody;
  return owners.size() == 1 ? *owners.begin() : kAmbiguous;
}

int Attributor::ByMounts(uint32_t pid, const ProcessFacts& facts, Evidence* how) {
  if (facts.agents_mount_namespace) return kNobody;
  int owner = InTable(facts.mounts);
  if (owner != kNobody) {
    *how = Evidence::kOwnMounts;
    return owner;
  }
  auto cached = namespace_owner_.find(facts.mount_namespace);
  if (cached == namespace_owner_.end()) {
    auto table = host_->NamespaceMounts(pid, facts);
    if (!table.ok()) {  // gone, or no privilege: nothing learnt (another process of it may do)
      namespace_error_ = table.status();
      return kNobody;
    }
    cached = namespace_owner_.emplace(facts.mount_namespace, InTable(*table)).first;
  }
  if (cached->second != kNobody) *how = Evidence::kNamespaceMounts;
  return cached->second;
}

int Attributor::ByPidNamespace(uint32_t pid, const ProcessFacts& facts) {
  std::set<int> owners;
  for (const auto& ns : facts.pid_namespaces) {
    for (uint32_t first : host_->FirstProcesses(ns)) {
      if (first == pid) continue;
      const ProcessFacts* f = FactsOf(first);
      // Read after the index: still pid 1 of that very namespace.
      if (f == nullptr || f->pid_namespaces.empty() || f->pid_namespaces[0] != ns || f->ns_pid != 1) continue;
      Evidence how = Evidence::kNone;
      int owner = ByMounts(first, *f, &how);
      if (owner == kAmbiguous) return kAmbiguous;
      if (owner >= 0) owners.insert(owner);
    }
  }
  if (owners.empty()) return kNobody;
  if (owners.size() > 1) return kAmbiguous;
  // The namespaces compared were the process's own throughout: it is still alive (a live
  // process holds its namespaces, so their ids were not reused meanwhile).
  return host_->Alive(pid, facts.start_time) ? *owners.begin() : kNobody;
}

const Attribution& Attributor::Of(uint32_t pid) {
  if (auto it = done_.find(pid); it != done_.end()) return it->second;
  Attribution a;
  if (const ProcessFacts* f = FactsOf(pid)) {
    a.known = true;
    a.facts = *f;
    Evidence how = Evidence::kNone;
    int owner = ByMounts(pid, *f, &how);
    if (owner == kNobody && !f->agents_mount_namespace) {
      owner = ByPidNamespace(pid, *f);
      how = Evidence::kPidNamespace;
    }
    if (owner >= 0) {
      a.container = owner;
      a.evidence = how;
    }
  }
  return done_.emplace(pid, std::move(a)).first->second;
}

std::vector<ContainerGpuUse> GpuUses(const std::string& uuid, const std::vector<platform::GpuProcess>& processes,
                                     Attributor* who, const std::vector<WatchedContainer>& containers) {
  std::map<int, ContainerGpuUse> uses;
  for (const auto& p : processes) {
    const Attribution& a = who->Of(p.pid);
    if (a.container < 0) continue;
    const WatchedContainer& c = containers[static_cast<size_t>(a.container)];
    auto limit = c.limits.find(uuid);
    if (limit == c.limits.end() || limit->second == 0) continue;
    ContainerGpuUse& use = uses[a.container];
    use.allocation = c.allocation;
    use.uuid = uuid;
    use.limit = limit->second;
    use.processes.push_back({p.pid, p.used_bytes, a.facts.start_time, a.evidence});
  }
  std::vector<ContainerGpuUse> out;
  for (auto& [i, use] : uses) out.push_back(std::move(use));
  return out;
}

std::vector<KillDecision> OverLimitRule::Observe(const std::vector<ContainerGpuUse>& sample) {
  std::map<std::pair<std::string, std::string>, int> over;
  std::vector<KillDecision> kills;
  for (const auto& use : sample) {
    const uint64_t used = use.used();
    if (use.processes.empty() || used <= use.limit + kSlackBytes) continue;
    auto key = std::make_pair(use.allocation, use.uuid);
    auto before = over_.find(key);
    int samples = (before == over_.end() ? 0 : before->second) + 1;
    if (samples < kConfirmSamples) {
      over[key] = samples;
      continue;
    }
    auto victim = std::max_element(use.processes.begin(), use.processes.end(),
                                   [](const WatchedProcess& a, const WatchedProcess& b) { return a.bytes < b.bytes; });
    kills.push_back({KillReason::kOverLimit, use.allocation, use.uuid, *victim, used, use.limit});
  }
  over_ = std::move(over);
  return kills;
}

bool HoldsSlot(const std::vector<host::RegionProcess>& slots, uint32_t ns_pid, uint64_t start_time) {
  for (const auto& s : slots)
    if (s.pid == ns_pid && s.start_time == start_time) return true;
  return false;
}

std::vector<KillDecision> EnforcerRule::Observe(const std::vector<CardSighting>& sample) {
  std::map<std::pair<uint32_t, uint64_t>, int> without;
  std::set<std::pair<uint32_t, uint64_t>> seen;  // a process listed on two GPUs counts once
  std::vector<KillDecision> kills;
  for (const auto& s : sample) {
    if (!s.has_slot.has_value() || *s.has_slot) continue;
    auto key = std::make_pair(s.process.pid, s.process.start_time);
    if (!seen.insert(key).second) continue;
    auto before = without_slot_.find(key);
    int samples = (before == without_slot_.end() ? 0 : before->second) + 1;
    if (samples < kConfirmSamples) {
      without[key] = samples;
      continue;
    }
    kills.push_back({KillReason::kNoEnforcer, s.allocation, s.uuid, s.process, 0, 0});
  }
  without_slot_ = std::move(without);
  return kills;
}

std::optional<std::vector<host::RegionProcess>> RegionSlots(const std::string& region_file) {
  auto r = host::ContainerRegion::Open(region_file);
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kNotFound) return std::vector<host::RegionProcess>{};
    return std::nullopt;
  }
  if (!r->consistent()) return std::nullopt;
  return r->processes();
}

MemoryWatchdog::MemoryWatchdog(platform::GpuDriver* driver, const SliceBook* book,
                               std::function<std::vector<ContainerDevices>()> pods, WatchdogRules rules)
    : driver_(driver), book_(book), pods_(std::move(pods)), rules_(rules) {}

std::vector<WatchedContainer> MemoryWatchdog::Containers() {
  std::map<std::string, WatchedContainer> live;
  for (const auto& rec : book_->Records()) {
    if (auto it = known_.find(rec.id); it != known_.end()) {
      live[rec.id] = it->second;
      continue;
    }
    // Only a `shared/` on a tmpfs of its container's names the container: a plain directory
    // (--shared-dir-size 0) has the state disk's device, which every container's has.
    struct stat disk, shared;
    if (stat(book_->ContainersDir().c_str(), &disk) != 0 || stat(book_->SharedDir(rec.id).c_str(), &shared) != 0 ||
        disk.st_dev == shared.st_dev)
      continue;
    WatchedContainer c{rec.id, major(shared.st_dev), minor(shared.st_dev), {}};
    for (const auto& g : book_->Grants(rec.id)) c.limits[g.uuid] = g.memory_limit;
    if (c.limits.empty()) continue;  // its limits file is not written yet
    live[rec.id] = c;
  }
  known_ = live;
  std::vector<WatchedContainer> out;
  for (auto& [id, c] : live) out.push_back(c);
  return out;
}

void MemoryWatchdog::Sample() {
  static const std::vector<std::string> kMountPoints = RegionMountPoints();
  std::vector<WatchedContainer> containers = Containers();
  std::vector<ContainerGpuUse> uses;
  std::vector<CardSighting> sightings;
  if (!containers.empty()) {
    std::unique_ptr<HostProcesses> host = HostProcessesFromProc();
    Attributor who(host.get(), containers, kMountPoints);
    std::vector<std::pair<int, CardSighting>> unchecked;  // (container, sighting) without its slot yet
    std::set<uint32_t> sighted;
    for (const auto& gpu : book_->Gpus()) {
      auto procs = driver_->ComputeProcesses(gpu.uuid);
      if (!procs.ok()) continue;  // nothing known about this GPU in this sample
      if (rules_.memory_limits) {
        auto more = GpuUses(gpu.uuid, *procs, &who, containers);
        uses.insert(uses.end(), more.begin(), more.end());
      }
      if (!rules_.require_enforcer) continue;
      for (const auto& p : *procs) {
        const Attribution& a = who.Of(p.pid);
        if (a.container < 0 || !sighted.insert(p.pid).second) continue;
        CardSighting s{containers[static_cast<size_t>(a.container)].allocation, gpu.uuid,
                       WatchedProcess{p.pid, p.used_bytes, a.facts.start_time, a.evidence}, std::nullopt};
        unchecked.emplace_back(a.container, std::move(s));
      }
    }
    // Regions are read after the driver listed its processes: an enforced process claims
    // its slot before it makes its first context, so each one listed has it by now.
    std::map<int, std::optional<std::vector<host::RegionProcess>>> slots;
    for (auto& [c, s] : unchecked) {
      auto it = slots.find(c);
      if (it == slots.end())
        it = slots.emplace(c, RegionSlots(book_->RegionFile(containers[static_cast<size_t>(c)].allocation))).first;
      const ProcessFacts& f = who.Of(s.process.pid).facts;
      if (it->second) s.has_slot = HoldsSlot(*it->second, f.ns_pid, f.start_time);
      sightings.push_back(std::move(s));
    }
    if (!who.namespace_error().ok() && who.namespace_error().code() == StatusCode::kFailedPrecondition &&
        !namespace_error_logged_) {
      GS_LOG(kWarn,
             "memory watchdog: %s: a process that chroots away from its region directory cannot be attributed to "
             "its container (the agent needs CAP_SYS_ADMIN and CAP_SYS_CHROOT)",
             who.namespace_error().message().c_str());
      namespace_error_logged_ = true;
    }
  }
  std::vector<KillDecision> kills;
  if (rules_.memory_limits) kills = over_limit_.Observe(uses);
  if (rules_.require_enforcer) {
    auto more = enforcer_.Observe(sightings);
    kills.insert(kills.end(), more.begin(), more.end());
  }
  std::set<uint32_t> killed;
  for (const auto& d : kills)
    if (killed.insert(d.victim.pid).second) Kill(d);
  samples_.fetch_add(1, std::memory_order_relaxed);
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
  who.reason = d.reason;
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
  const bool over = d.reason == KillReason::kOverLimit;
  if (!KillProcess(static_cast<pid_t>(d.victim.pid), d.victim.start_time)) {
    GS_LOG(kInfo, "memory watchdog: %s %s on %s, but pid %u is gone", name.c_str(),
           over ? "was over its limit" : "ran without the enforcer", d.uuid.c_str(), d.victim.pid);
    return;
  }
  if (over)
    GS_LOG(kWarn,
           "memory watchdog: %s holds %llu bytes on %s, over its limit of %llu bytes in %d samples: killed host pid "
           "%u (%llu bytes; its container by %s)",
           name.c_str(), static_cast<unsigned long long>(d.used), d.uuid.c_str(),
           static_cast<unsigned long long>(d.limit), kConfirmSamples, d.victim.pid,
           static_cast<unsigned long long>(d.victim.bytes), EvidenceName(d.victim.evidence));
  else
    GS_LOG(kWarn,
           "memory watchdog: %s: host pid %u is on %s (%llu bytes) without the enforcer (no slot in the "
           "container's region in %d samples): killed (its container by %s)",
           name.c_str(), d.victim.pid, d.uuid.c_str(), static_cast<unsigned long long>(d.victim.bytes), kConfirmSamples,
           EvidenceName(d.victim.evidence));
  std::lock_guard<std::mutex> l(mu_);
  for (auto& k : kills_)
    if (k.reason == who.reason && k.allocation == who.allocation && k.uuid == who.uuid && k.pod == who.pod &&
        k.ns == who.ns && k.container == who.container) {
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
    int64_t next = MonotonicNowNs() + kSamplePeriodNs;
    Sample();
    // Sleep in short steps: a stop is seen within 200 ms.
    for (int64_t now = MonotonicNowNs(); !stop && now < next; now = MonotonicNowNs())
      SleepUntilNs(std::min(next, now + 200'000'000));
  }
}

}  // namespace gs::node
