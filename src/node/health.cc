#include "src/node/health.h"

#include "src/common/clock.h"
#include "src/common/raw_log.h"

namespace gs::node {
namespace {

void Log(const UnlistedReport& r) {
  const auto mib = static_cast<unsigned long long>(r.bytes >> 20);
  switch (r.kind) {
    case UnlistedReport::Kind::kAppeared:
    case UnlistedReport::Kind::kGrew:
      GS_LOG(kWarn,
             "GPU %s holds %llu MiB that the driver lists under no process (%zu processes listed): memory of a pool "
             "whose owner let go while another process imports it, which the card ties to no container; the "
             "enforcers charge it unless a process forged its container's records or went around its enforcer "
             "(docs/enforcer.md, \"Threat model\")",
             r.uuid.c_str(), mib, r.processes);
      break;
    case UnlistedReport::Kind::kGone:
      GS_LOG(kInfo,
             "GPU %s: the memory listed under no process is back within the driver's own (%llu MiB, %zu "
             "processes listed)",
             r.uuid.c_str(), mib, r.processes);
      break;
  }
}

}  // namespace

HealthWatcher::HealthWatcher(const Config& cfg, platform::GpuDriver* driver, SliceBook* book)
    : cfg_(cfg), driver_(driver), book_(book) {}

void HealthWatcher::Check() {
  int64_t now = MonotonicNowNs() / 1'000'000'000;
  auto gpus = driver_->ListGpus();
  auto known = book_->Gpus();
  if (gpus.ok()) {
    // By NVML index: a lost GPU has no UUID, and cards not registered leave gaps.
    for (const auto& info : *gpus)
      for (const auto& k : known) {
        if (!info.lost || k.index != info.index) continue;
        last_error_[k.uuid] = now;  // stays unhealthy while lost
        if (book_->SetHealthy(k.uuid, false))
          GS_LOG(kError, "GPU %s fell off the bus: its slices are Unhealthy", k.uuid.c_str());
      }
    std::vector<platform::GpuInfo> registered;  // cards excluded from the node are not its to watch
    for (const auto& info : *gpus)
      for (const auto& k : known)
        if (!info.lost && k.uuid == info.uuid) registered.push_back(info);
    for (const auto& r : unlisted_.Observe(registered)) Log(r);
  }
  for (const auto& g : known) {
    auto it = last_error_.find(g.uuid);
    if (g.healthy || it == last_error_.end() || now - it->second < cfg_.healthy_recovery_seconds) continue;
    if (book_->SetHealthy(g.uuid, true))
      GS_LOG(kInfo, "GPU %s had no error for %ds: its slices are Healthy again", g.uuid.c_str(),
             cfg_.healthy_recovery_seconds);
    last_error_.erase(it);
  }
}

void HealthWatcher::Run(const std::atomic<bool>& stop, const std::function<void()>& beat) {
  int64_t next_check = 0;
  while (!stop) {
    beat();
    auto ev = driver_->WaitXid(500);
    if (!ev.ok()) {
      // The event set itself failed: like NVIDIA's plugin, every GPU is suspect.
      GS_LOG(kError, "health events: %s", ev.status().message().c_str());
      for (const auto& g : book_->Gpus()) {
        last_error_[g.uuid] = MonotonicNowNs() / 1'000'000'000;
        book_->SetHealthy(g.uuid, false);
      }
      SleepUntilNs(MonotonicNowNs() + 1'000'000'000);
    } else if (ev->has_value()) {
      const auto& e = **ev;
      if (cfg_.ignored_xids.count(e.xid)) {
        GS_LOG(kInfo, "XID %llu on %s is an application error: ignored", static_cast<unsigned long long>(e.xid),
               e.uuid.c_str());
      } else {
        last_error_[e.uuid] = MonotonicNowNs() / 1'000'000'000;
        if (book_->SetHealthy(e.uuid, false))
          GS_LOG(kError, "XID %llu on %s: its slices are Unhealthy", static_cast<unsigned long long>(e.xid),
                 e.uuid.c_str());
      }
    }
    int64_t now = MonotonicNowNs();
    if (now >= next_check) {
      Check();
      next_check = now + 1'000'000'000;
    }
  }
}

}  // namespace gs::node
