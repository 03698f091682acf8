#include "src/node/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <map>
#include <sstream>
#include <string_view>

#include "src/common/clock.h"
#include "src/host/card_reader.h"
#include "src/host/region_reader.h"
#include "src/model/container_edits.h"

namespace gs::node {
namespace {

std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// The shortest text that reads back as the same double, without an exponent where it
// fits: byte counts stay exact (a stream's default six digits would print 20 GiB as
// 2.14748e+10) and bucket bounds read as written (0.0001, not 1e-04).
std::string Number(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
  if (r.ec != std::errc()) r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

class Writer {
 public:
  void Family(const char* name, const char* help, const char* type = "gauge") {
    os_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  void Sample(std::string_view name, const std::vector<std::pair<const char*, std::string>>& labels, double v) {
    os_ << name;
    if (!labels.empty()) {
      os_ << "{";
      for (size_t i = 0; i < labels.size(); ++i)
        os_ << (i ? "," : "") << labels[i].first << "=\"" << Escape(labels[i].second) << "\"";
      os_ << "}";
    }
    os_ << " " << Number(v) << "\n";
  }
  void Histogram(const std::string& name, const char* help, const LatencyHistogram::Snapshot& h) {
    Family(name.c_str(), help, "histogram");
    const std::string bucket = name + "_bucket";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i) {
      cumulative += h.counts[i];
      Sample(bucket, {{"le", Number(LatencyHistogram::kBounds[i])}}, static_cast<double>(cumulative));
    }
    Sample(bucket, {{"le", "+Inf"}}, static_cast<double>(h.count));
    Sample(name + "_sum", {}, h.sum_seconds);
    Sample(name + "_count", {}, static_cast<double>(h.count));
  }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

}  // namespace

std::string RenderMetrics(const std::vector<GpuUsage>& gpus, const std::vector<SliceUsage>& slices,
                          const LatencyHistogram::Snapshot& allocate, const std::vector<KillCount>& kills,
                          uint64_t watchdog_samples) {
  Writer w;
  auto gl = [](const GpuUsage& g) {
    return std::vector<std::pair<const char*, std::string>>{
        {"gpu", std::to_string(g.info.index)}, {"uuid", g.uuid}, {"model", g.info.name}};
  };
  w.Family("gpuslice_gpu_memory_total_bytes", "Device memory of the GPU.");
  for (const auto& g : gpus)
    w.Sample("gpuslice_gpu_memory_total_bytes", gl(g), static_cast<double>(g.info.memory_total));
  w.Family("gpuslice_gpu_memory_used_bytes", "Device memory in use on the GPU, all processes.");
  for (const auto& g : gpus) w.Sample("gpuslice_gpu_memory_used_bytes", gl(g), static_cast<double>(g.info.memory_used));
  w.Family("gpuslice_gpu_memory_unlisted_bytes",
           "Device memory in use on the GPU that the driver lists under no process: pool memory its owner freed while "
           "another process imported it, and the driver's own.");
  for (const auto& g : gpus)
    if (g.info.memory_unlisted)
      w.Sample("gpuslice_gpu_memory_unlisted_bytes", gl(g), static_cast<double>(*g.info.memory_unlisted));
  w.Family("gpuslice_gpu_utilization_ratio", "Fraction of the last sample period a kernel ran on the GPU.");
  for (const auto& g : gpus) w.Sample("gpuslice_gpu_utilization_ratio", gl(g), g.info.utilization / 100.0);
  w.Family("gpuslice_gpu_slices", "Slices the GPU is split into.");
  for (const auto& g : gpus) w.Sample("gpuslice_gpu_slices", gl(g), g.slices_total);
  w.Family("gpuslice_gpu_slices_allocated",
           "Slices of the GPU allocated to containers (with scheduler decisions: containers given a share of it).");
  for (const auto& g : gpus) w.Sample("gpuslice_gpu_slices_allocated", gl(g), g.slices_allocated);
  w.Family("gpuslice_gpu_healthy", "1 if the GPU's slices are Healthy, 0 if Unhealthy.");
  for (const auto& g : gpus) w.Sample("gpuslice_gpu_healthy", gl(g), g.healthy ? 1 : 0);

  auto sl = [](const SliceUsage& s) {
    return std::vector<std::pair<const char*, std::string>>{{"namespace", s.ns},
                                                            {"pod", s.pod},
                                                            {"container", s.container},
                                                            {"uuid", s.uuid},
                                                            {"allocation", s.allocation}};
  };
  w.Family("gpuslice_slice_memory_used_bytes", "Device memory charged to the container on the GPU.");
  for (const auto& s : slices) w.Sample("gpuslice_slice_memory_used_bytes", sl(s), static_cast<double>(s.used));
  w.Family("gpuslice_slice_memory_limit_bytes", "The container's device memory limit on the GPU.");
  for (const auto& s : slices) w.Sample("gpuslice_slice_memory_limit_bytes", sl(s), static_cast<double>(s.limit));
  w.Family("gpuslice_slice_memory_spilled_bytes",
           "Of the used memory, bytes backed by host memory (virtual device memory).");
  for (const auto& s : slices) w.Sample("gpuslice_slice_memory_spilled_bytes", sl(s), static_cast<double>(s.spilled));
  w.Family("gpuslice_slice_sm_utilization_ratio",
           "The container's share of the GPU's time (its turns on the card) since the previous scrape at least 1 s "
           "earlier.");
  for (const auto& s : slices) w.Sample("gpuslice_slice_sm_utilization_ratio", sl(s), s.sm_util / 100.0);
  w.Family("gpuslice_slice_sm_share_ratio", "The container's compute share of the GPU (1 = no limit).");
  for (const auto& s : slices) w.Sample("gpuslice_slice_sm_share_ratio", sl(s), s.sm_share ? s.sm_share / 100.0 : 1.0);

  // The names cAdvisor used before the kubelet stopped collecting accelerator metrics.
  auto cl = [](const SliceUsage& s) {
    return std::vector<std::pair<const char*, std::string>>{{"namespace", s.ns},        {"pod", s.pod},
                                                            {"container", s.container}, {"make", "nvidia"},
                                                            {"model", s.model},         {"acc_id", s.uuid}};
  };
  w.Family("container_accelerator_memory_used_bytes", "Accelerator memory used by the container, bytes.");
  for (const auto& s : slices) w.Sample("container_accelerator_memory_used_bytes", cl(s), static_cast<double>(s.used));
  w.Family("container_accelerator_memory_total_bytes", "Accelerator memory the container may use, bytes.");
  for (const auto& s : slices)
    w.Sample("container_accelerator_memory_total_bytes", cl(s), static_cast<double>(s.limit));
  w.Family("container_accelerator_duty_cycle", "Percent of time the accelerator was busy for the container.");
  for (const auto& s : slices) w.Sample("container_accelerator_duty_cycle", cl(s), s.sm_util);

  w.Histogram("gpuslice_allocate_duration_seconds",
              "Time the agent took to answer the kubelet's Allocate calls, the gRPC transport not included.", allocate);
  w.Family("gpuslice_allocate_failures_total", "Allocate calls the agent refused or could not serve.", "counter");
  w.Sample("gpuslice_allocate_failures_total", {}, static_cast<double>(allocate.failed));
  auto kill_labels = [](const KillCount& k) {
    return std::vector<std::pair<const char*, std::string>>{{"namespace", k.ns},
                                                            {"pod", k.pod},
                                                            {"container", k.container},
                                                            {"uuid", k.uuid},
                                                            {"allocation", k.allocation}};
  };
  w.Family("gpuslice_memory_watchdog_samples_total",
           "Samples the memory watchdog has taken, each with its kills done: two a second while it runs, none when "
           "it is off (the agent's log says why).",
           "counter");
  w.Sample("gpuslice_memory_watchdog_samples_total", {}, static_cast<double>(watchdog_samples));
  w.Family("gpuslice_memory_limit_kills_total",
           "Processes the memory watchdog killed because their container held more device memory on the GPU than "
           "its limit (NVML's per-process figures, three samples in a row).",
           "counter");
  for (const auto& k : kills)
    if (k.reason == KillReason::kOverLimit)
      w.Sample("gpuslice_memory_limit_kills_total", kill_labels(k), static_cast<double>(k.kills));
  w.Family("gpuslice_unenforced_process_kills_total",
           "Processes of containers with a slice that the memory watchdog killed because they were on the GPU "
           "without the enforcer (no slot in their container's region, three samples in a row).",
           "counter");
  for (const auto& k : kills)
    if (k.reason == KillReason::kNoEnforcer)
      w.Sample("gpuslice_unenforced_process_kills_total", kill_labels(k), static_cast<double>(k.kills));
  return w.str();
}

unsigned SmUseMeter::Percent(const std::string& key, uint64_t used_ns, int64_t now_ns) {
  constexpr int64_t kStepNs = 1'000'000'000, kForgetNs = 600'000'000'000;
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = keys_.begin(); it != keys_.end();)
    it = now_ns - it->second.seen_ns > kForgetNs ? keys_.erase(it) : std::next(it);
  auto [it, fresh] = keys_.try_emplace(key);
  Baseline& b = it->second;
  b.seen_ns = now_ns;
  if (fresh || used_ns < b.used_ns) {  // new, or a new tenant under the same key
    b.used_ns = used_ns;
    b.at_ns = now_ns;
    b.percent = 0;
    return 0;
  }
  if (now_ns - b.at_ns >= kStepNs) {
    double pct = 100.0 * static_cast<double>(used_ns - b.used_ns) / static_cast<double>(now_ns - b.at_ns);
    b.percent = static_cast<unsigned>(std::lround(std::min(100.0, pct)));
    b.used_ns = used_ns;
    b.at_ns = now_ns;
  }
  return b.percent;
}

std::string CollectMetrics(platform::GpuDriver* driver, const SliceBook& book,
                           const std::vector<ContainerDevices>& pods, const LatencyHistogram& allocate,
                           SmUseMeter* sm_use, const std::vector<KillCount>& kills, uint64_t watchdog_samples) {
  auto known = book.Gpus();
  // What each container was granted, from the limits files the agent wrote: with
  // --scheduler-decisions the cards, memory and cores the scheduler decided, which the
  // kubelet's slice IDs in the records do not tell.
  std::vector<std::pair<AllocationRecord, std::vector<model::DeviceGrant>>> granted;
  std::map<std::string, int> in_use;  // containers granted a share of each GPU
  for (auto& rec : book.Records()) {
    auto grants = book.Grants(rec.id);
    for (const auto& g : grants) ++in_use[g.uuid];
    granted.emplace_back(std::move(rec), std::move(grants));
  }
  std::vector<GpuUsage> gpus;
  auto infos = driver->ListGpus();
  for (size_t i = 0; i < known.size(); ++i) {
    GpuUsage g;
    // By NVML index: cards not registered (--exclude-devices) leave gaps in `known`.
    for (size_t j = 0; infos.ok() && j < infos->size(); ++j)
      if ((*infos)[j].index == known[i].index) g.info = (*infos)[j];
    g.info.index = known[i].index;
    if (g.info.name.empty()) g.info.name = known[i].name;
    g.uuid = known[i].uuid;
    g.slices_total = book.policy().split_count;
    g.slices_allocated = in_use.count(g.uuid) ? in_use.at(g.uuid) : 0;
    g.healthy = known[i].healthy;
    gpus.push_back(g);
  }
  // Each GPU's card region, read once per collection.
  std::map<std::string, std::vector<host::CardTenantUse>> cards;
  for (const auto& g : known)
    if (auto tenants = host::ReadCardTenants(book.CardsDir() + "/" + g.uuid); tenants.ok()) cards[g.uuid] = *tenants;
  const int64_t now = MonotonicNowNs();
  std::vector<SliceUsage> slices;
  for (const auto& [rec, grants] : granted) {
    const ContainerDevices* owner = nullptr;
    for (const auto& p : pods)
      for (const auto& id : p.device_ids)
        if (std::find(rec.device_ids.begin(), rec.device_ids.end(), id) != rec.device_ids.end()) owner = &p;
    auto region = host::ContainerRegion::Open(book.RegionFile(rec.id));  // absent until the container computes
    for (const auto& grant : grants) {
      SliceUsage s;
      if (owner) {
        s.pod = owner->pod;
        s.ns = owner->ns;
        s.container = owner->container;
      }
      s.allocation = rec.id;
      s.uuid = grant.uuid;
      for (const auto& g : known)
        if (g.uuid == grant.uuid) s.model = g.name;
      s.limit = grant.memory_limit;  // from the agent's limits file, never from the region
      s.sm_share = grant.sm_share;
      if (region.ok())
        for (const auto& d : region->devices()) {
          if (d.uuid != grant.uuid) continue;
          s.used = d.memory_used;
          s.spilled = d.spilled;
          for (const auto& t : cards[grant.uuid])
            if (d.card_tenant_id != 0 && t.id == d.card_tenant_id)
              s.sm_util = sm_use->Percent(rec.id + "/" + grant.uuid, t.used_ns, now);
        }
      slices.push_back(s);
    }
  }
  return RenderMetrics(gpus, slices, allocate.Read(), kills, watchdog_samples);
}

}  // namespace gs::node
