#include "src/node/agent.h"

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "src/cli/arbiter.h"
#include "src/cli/paths.h"
#include "src/common/clock.h"
#include "src/common/raw_log.h"
#include "src/container/cdi.h"
#include "src/node/config.h"
#include "src/node/device_plugin.h"
#include "src/node/health.h"
#include "src/node/host_pids.h"
#include "src/node/http_server.h"
#include "src/node/metrics.h"
#include "src/node/plugin_server.h"
#include "src/node/pod_resources.h"
#include "src/region/region.h"

namespace gs::node {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) {
  g_stop = true;
}

// Frees slots of dead processes in every region, and removes the directories of
// allocations whose containers the kubelet no longer lists (after a grace period: a
// container is listed only once admitted).
void Sweep(const Config& cfg, SliceBook* book, ContainerDirs* dirs, std::vector<ContainerDevices>* pods_cache) {
  auto pods = ListPodResources(cfg.pod_resources_socket(), cfg.resource_name);
  if (pods.ok()) *pods_cache = *pods;
  int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& rec : book->Records()) {
    std::string dir = book->ContainerDir(rec.id);
    region::OpenError err;
    char msg[256];
    std::string region_path = book->RegionFile(rec.id);  // created by the container's first process
    if (access(region_path.c_str(), F_OK) != 0) {
    } else if (region::Region* r = region::OpenRegion(region_path.c_str(), &err, msg, sizeof(msg))) {
      region::SweepDead(r);
      region::CloseRegion(r);
    }
    if (!pods.ok() || now - rec.created_unix < cfg.cleanup_grace_seconds) continue;
    bool listed = false;
    for (const auto& p : *pods)
      for (const auto& id : p.device_ids)
        listed |= std::find(rec.device_ids.begin(), rec.device_ids.end(), id) != rec.device_ids.end();
    if (listed) continue;
    GS_LOG(kInfo, "allocation %s: no container holds its slices any more; removing %s", rec.id.c_str(), dir.c_str());
    book->Remove(rec.id);
    dirs->Discard(rec.id);
  }
}

// Writes the CDI spec of the GPUs that are healthy now (atomically: write, then rename).
void WriteCdiSpec(const Config& cfg, const SliceBook& book, const container::EnforcerInstall& enforcer) {
  if (cfg.cdi_spec_dir.empty()) return;
  std::vector<model::Gpu> healthy;
  for (const auto& g : book.Gpus())
    if (g.healthy) healthy.push_back(g);
  container::CdiOptions o;
  o.kind = cfg.cdi_kind;
  o.plan.driver_root = cfg.driver_root;
  o.plan.enforcer = enforcer;
  std::string path = cfg.cdi_spec_dir + "/gpuslice.json";
  std::error_code ec;
  std::filesystem::create_directories(cfg.cdi_spec_dir, ec);
  if (healthy.empty()) {
    std::filesystem::remove(path, ec);  // a spec must offer at least one device
    return;
  }
  auto spec = container::GenerateCdiSpec(o, healthy);
  if (!spec.ok()) {
    GS_LOG(kError, "CDI spec: %s", spec.status().message().c_str());
    return;
  }
  std::ofstream(path + ".tmp") << spec->dump(2) << "\n";
  std::filesystem::rename(path + ".tmp", path, ec);
  if (ec) GS_LOG(kError, "cannot write %s: %s", path.c_str(), ec.message().c_str());
}

}  // namespace

int RunNode(const std::vector<std::string>& args) {
  // Large buffers (a /metrics body is ~170 KiB on 8 GPUs x 16 slices) from mmap, always:
  // glibc otherwise raises its threshold after the first such free and keeps later ones
  // in the heap, resident for the agent's life.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  SetRawLogPrefix("gpuslice node");
  SetRawLogLevel(2);
  std::string usage;
  auto cfg_or = LoadConfig(args, &usage);
  if (!cfg_or.ok()) {
    std::cerr << "gpuslice node: " << cfg_or.status().message() << "\n";
    return 2;
  }
  if (!usage.empty()) return std::cout << usage, 0;
  const Config cfg = *cfg_or;
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGPIPE, SIG_IGN);

  auto fail = [&](const std::string& why) {
    GS_LOG(kError, "%s", why.c_str());
    if (cfg.fail_on_init_error) return 1;
    // One DaemonSet on every node: on a node without GPUs, wait quietly instead of
    // crash-looping.
    GS_LOG(kWarn, "--fail-on-init-error=false: waiting without serving");
    while (!g_stop) SleepUntilNs(MonotonicNowNs() + 1'000'000'000);
    return 0;
  };
  auto driver = platform::OpenNvmlGpuDriver(cfg.driver_root);
  if (!driver.ok()) return fail("no GPUs: " + driver.status().message());
  auto infos = (*driver)->ListGpus();
  if (!infos.ok()) return fail("cannot list GPUs: " + infos.status().message());
  if (infos->empty()) return fail("NVML reports no GPUs on this node");
  std::vector<model::Gpu> gpus;
  for (const auto& g : *infos) gpus.push_back({g.uuid, g.index, g.name, g.memory_total, g.numa_node, g.minor, !g.lost});

  std::error_code ec;
  std::filesystem::create_directories(cfg.state_dir + "/containers", ec);
  if (ec) return fail("cannot create " + cfg.state_dir + ": " + ec.message());
  auto enforcer =
      container::InstallEnforcer(cfg.enforcer_path.empty() ? cli::EnforcerLibrary() : cfg.enforcer_path, cfg.state_dir);
  if (!enforcer.ok()) return fail(enforcer.status().message());

  SliceBook book(gpus, cfg.split, cfg.state_dir);
  if (Status s = book.Load(); !s.ok()) GS_LOG(kError, "%s; starting with no allocation records", s.message().c_str());
  ContainerDirs dirs(&book);
  dirs.Start();
  DevicePluginService service(cfg, &book, &dirs, *enforcer);
  PluginServer server(cfg, &service);
  server.Start();
  GS_LOG(kInfo, "serving %zu GPU(s) as %zu x %s slices of %d per GPU", gpus.size(),
         gpus.size() * static_cast<size_t>(cfg.split.split_count), cfg.resource_name.c_str(), cfg.split.split_count);

  HealthWatcher health(cfg, driver->get(), &book);
  std::thread health_thread([&] { health.Run(g_stop); });

  std::mutex pods_mu;
  std::vector<ContainerDevices> pods;
  HttpServer http;
  http.Handle("/metrics", [&] {
    std::vector<ContainerDevices> snapshot;
    {
      std::lock_guard<std::mutex> l(pods_mu);
      snapshot = pods;
    }
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                        CollectMetrics(driver->get(), book, snapshot, service.allocate_latency())};
  });
  http.Handle("/healthz", [&] {
    bool ok = server.registered();
    return HttpResponse{ok ? 200 : 503, "text/plain; charset=utf-8", ok ? "ok\n" : "not registered\n"};
  });
  std::thread metrics_thread;
  if (!cfg.metrics_addr.empty()) {
    auto port = http.Bind(cfg.metrics_addr);
    if (!port.ok()) {
      GS_LOG(kError, "metrics: %s", port.status().message().c_str());
    } else {
      std::ofstream(cfg.state_dir + "/metrics.port") << *port << "\n";
      metrics_thread = std::thread([&] { http.Serve(); });
    }
  }

  cli::PriorityArbiter arbiter(driver->get());
  int64_t next_sweep = 0, next_pids = 0;
  std::string cdi_health;  // the healthy set the spec was last written for
  while (!g_stop) {
    server.Keep();
    int64_t now = MonotonicNowNs();
    std::string health;
    for (const auto& g : book.Gpus()) health += g.healthy ? '1' : '0';
    if (health != cdi_health) {
      WriteCdiSpec(cfg, book, *enforcer);
      cdi_health = health;
    }
    std::vector<std::string> regions;
    for (const auto& rec : book.Records()) regions.push_back(book.RegionFile(rec.id));
    if (now >= next_pids) {
      // New container processes need their host pid quickly: the compute limiter measures by it.
      ResolveHostPids(regions);
      next_pids = now + 1'000'000'000;
    }
    arbiter.Step(regions);  // CUDA_TASK_PRIORITY between containers sharing a card
    if (now >= next_sweep) {
      std::vector<ContainerDevices> fresh;
      {
        std::lock_guard<std::mutex> l(pods_mu);
        fresh = pods;
      }
      Sweep(cfg, &book, &dirs, &fresh);
      {
        std::lock_guard<std::mutex> l(pods_mu);
        pods = fresh;
      }
      next_sweep = now + static_cast<int64_t>(cfg.sweep_seconds) * 1'000'000'000;
    }
    SleepUntilNs(MonotonicNowNs() + 200'000'000);
  }
  GS_LOG(kInfo, "stopping");
  service.Stop();
  server.Stop();
  http.Stop();
  if (metrics_thread.joinable()) metrics_thread.join();
  health_thread.join();
  return 0;
}

}  // namespace gs::node
