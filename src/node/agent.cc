#include "src/node/agent.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "src/common/clock.h"
#include "src/common/raw_log.h"
#include "src/container/cdi.h"
#include "src/kube/client.h"
#include "src/kube/config.h"
#include "src/node/card_entries.h"
#include "src/node/card_files.h"
#include "src/node/claimed_allocation.h"
#include "src/node/config.h"
#include "src/node/device_plugin.h"
#include "src/node/durable_file.h"
#include "src/node/health.h"
#include "src/node/host_pids.h"
#include "src/node/http_server.h"
#include "src/node/memory_watchdog.h"
#include "src/node/metrics.h"
#include "src/node/node_registrar.h"
#include "src/node/plugin_server.h"
#include "src/node/pod_resources.h"
#include "src/node/progress.h"
#include "src/node/scheduler_decisions.h"
#include "src/node/stale_allocations.h"

namespace gs::node {
namespace {

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Removes the directories of allocations whose containers the kubelet has not listed for
// the grace period (StaleAllocations: counted from when each was last listed). Regions are
// not swept here: freeing a dead process's slot needs the region's lock, which a container
// can hold or forge, and its pids are of the container's PID namespace. The enforcer frees
// them itself (when a process joins, and before refusing an allocation).
void Sweep(const Config& cfg, SliceBook* book, ContainerDirs* dirs, StaleAllocations* stale,
           std::vector<ContainerDevices>* pods_cache) {
  auto pods = ListPodResources(cfg.pod_resources_socket(), cfg.resource_name);
  if (pods.ok()) *pods_cache = *pods;
  if (!pods.ok()) return;  // a failed List says nothing about the containers
  for (const auto& id : stale->Observe(book->Records(), *pods, UnixNow())) {
    GS_LOG(kInfo, "allocation %s: no container has held its slices for %d s; removing %s", id.c_str(),
           cfg.cleanup_grace_seconds, book->ContainerDir(id).c_str());
    book->Remove(id);
    dirs->Discard(id);
  }
}

// Writes the CDI spec of the GPUs that are healthy now (durably: a runtime never reads a
// torn spec, even after a crash or with a full disk).
void WriteCdiSpec(const Config& cfg, const SliceBook& book, const container::EnforcerInstall& enforcer) {
  if (cfg.cdi_spec_dir.empty()) return;
  std::vector<model::Gpu> healthy;
  for (const auto& g : book.Gpus())
    if (g.healthy) healthy.push_back(g);
  container::CdiOptions o;
  o.kind = cfg.cdi_kind;
  o.plan.driver_root = cfg.driver_root;
  o.plan.enforcer = enforcer;
  o.plan.extras = ExtraDevicesFor(cfg);
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
  if (Status s = WriteFileDurably(path, spec->dump(2) + "\n"); !s.ok())
    GS_LOG(kError, "CDI spec: %s", s.message().c_str());
}

// With --scheduler-decisions: the API client, where Allocate finds the decisions, and
// the registrar that publishes the cards. Null (logged) when the API cannot be reached.
struct SchedulerLink {
  std::unique_ptr<kube::Client> client;
  std::unique_ptr<DecisionSource> decisions;
  std::unique_ptr<NodeRegistrar> registrar;
};

std::unique_ptr<SchedulerLink> ConnectToScheduler(const Config& cfg, const SliceBook* book) {
  auto config = cfg.kubeconfig.empty() ? kube::InClusterConfig() : kube::LoadKubeconfig(cfg.kubeconfig);
  if (!config.ok()) {
    GS_LOG(kError, "API server: %s", config.status().message().c_str());
    return nullptr;
  }
  auto client = kube::Client::Create(std::move(*config));
  if (!client.ok()) {
    GS_LOG(kError, "API server: %s", client.status().message().c_str());
    return nullptr;
  }
  auto link = std::make_unique<SchedulerLink>();
  link->client = std::move(*client);
  auto decisions = std::make_unique<ApiDecisionSource>(link->client.get(), cfg.node_name);
  decisions->StartWatching([](const std::string& line) { GS_LOG(kWarn, "%s", line.c_str()); });
  link->decisions = std::move(decisions);
  link->registrar = std::make_unique<NodeRegistrar>(
      link->client.get(), cfg.node_name, [book] { return book->Gpus(); }, cfg.split, std::chrono::seconds(30),
      [](const std::string& line) { GS_LOG(kWarn, "%s", line.c_str()); });
  // Not fatal: the registrar keeps trying, and Allocate works once the API answers.
  if (Status s = link->registrar->Start(); !s.ok())
    GS_LOG(kWarn, "%s; retrying", s.message().c_str());
  else
    GS_LOG(kInfo, "published %zu card(s) on node %s for gpuslice scheduler", book->Gpus().size(),
           cfg.node_name.c_str());
  return link;
}

}  // namespace

Status ServeNode(const Config& cfg, platform::GpuDriver* driver, const std::vector<model::Gpu>& gpus,
                 const std::string& enforcer_library, const std::atomic<bool>& stop) {
  std::error_code ec;
  std::filesystem::create_directories(cfg.state_dir + "/containers", ec);
  if (ec) return Internal("cannot create " + cfg.state_dir + ": " + ec.message());
  auto enforcer = container::InstallEnforcer(enforcer_library, cfg.state_dir);
  if (!enforcer.ok()) return enforcer.status();

  // What NVIDIA's toolkit does with an extra device the node lacks: nothing, noted once.
  const std::string dev_root = model::DevRoot(cfg.driver_root);
  const struct {
    bool on;
    const char* flag;
    const char* nodes;
    container::ExtraDevices only;
  } extras[] = {{cfg.gdrcopy_enabled, "--gdrcopy-enabled", "/dev/gdrdrv", {true, false, false}},
                {cfg.gds_enabled, "--gds-enabled", "/dev/nvidia-fs*", {false, true, false}},
                {cfg.mofed_enabled, "--mofed-enabled", "/dev/infiniband/*", {false, false, true}}};
  for (const auto& x : extras)
    if (x.on && container::ExtraDeviceNodes(dev_root, x.only).empty())
      GS_LOG(kWarn, "%s: no %s under %s yet: containers get none while the node has none", x.flag, x.nodes,
             dev_root.c_str());

  SliceBook book(gpus, cfg.split, cfg.state_dir);
  GS_RETURN_IF_ERROR(PrepareCardFiles(book.CardsDir(), gpus));
  GS_RETURN_IF_ERROR(PrepareCardRosters(book.CardsDir(), gpus));
  Status loaded = book.Load();
  const bool keep_unrecorded = !loaded.ok() || book.HasDamagedRecords();
  if (!loaded.ok())
    GS_LOG(kError, "%s; records may be missing: keeping every container directory under %s", loaded.message().c_str(),
           book.ContainersDir().c_str());
  else if (keep_unrecorded)
    GS_LOG(kWarn,
           "records were damaged at an earlier start (%s/allocations.*.damaged): keeping every container directory "
           "under %s until those files are removed",
           cfg.state_dir.c_str(), book.ContainersDir().c_str());
  ContainerDirs dirs(&book, /*spares=*/8, cfg.shared_dir_bytes);
  GS_RETURN_IF_ERROR(dirs.CheckMountsReachTheRuntime());
  dirs.Start(keep_unrecorded);
  StaleAllocations stale(cfg.cleanup_grace_seconds, UnixNow());
  auto scheduler_link = cfg.scheduler_decisions ? ConnectToScheduler(cfg, &book) : nullptr;
  if (cfg.scheduler_decisions && scheduler_link == nullptr)
    return FailedPrecondition("--scheduler-decisions: no access to the API server (see the log)");
  DevicePluginService service(cfg, &book, &dirs, *enforcer, scheduler_link ? scheduler_link->decisions.get() : nullptr);
  PluginServer server(cfg, &service);
  server.Start();
  GS_LOG(kInfo, "serving %zu GPU(s) as %zu x %s slices of %d per GPU", gpus.size(),
         gpus.size() * static_cast<size_t>(cfg.split.split_count), cfg.resource_name.c_str(), cfg.split.split_count);
  if (!SeesHostPids())
    GS_LOG(kWarn,
           "not in the host's PID namespace (a pod without hostPID: true?): container processes' host pids cannot "
           "be resolved, so their contexts' memory and compute share are not measured");
  if (cfg.shared_dir_bytes == 0)
    GS_LOG(kWarn, "--shared-dir-size 0: containers write their regions on the state disk, which they can fill");

  // The memory watchdog attributes GPU processes to containers by the mount of a container's
  // tmpfs and the namespaces of the host's /proc: without either it could attribute nothing.
  // Its two rules (memory over the limit, a process without the enforcer) share its loop.
  WatchdogRules rules{cfg.memory_watchdog, cfg.require_enforcer};
  bool watchdog_on = rules.memory_limits || rules.require_enforcer;
  if (watchdog_on && !SeesHostPids()) {
    GS_LOG(kWarn, "memory watchdog off: NVML's pids are the host's, and this agent does not see the host's processes");
    watchdog_on = false;
  } else if (watchdog_on && cfg.shared_dir_bytes == 0) {
    GS_LOG(kWarn,
           "memory watchdog off: it knows a container's processes by their mount of its shared/ tmpfs, and "
           "--shared-dir-size 0 gives them none");
    watchdog_on = false;
  }
  if (!rules.memory_limits)
    GS_LOG(kWarn, "--memory-watchdog=false: a container whose processes hold more than its limit is not stopped");
  if (!rules.require_enforcer)
    GS_LOG(kWarn,
           "--require-enforcer=false: a process that runs on a GPU without the enforcer is stopped only when its "
           "container holds more memory than its limit");

  // What /healthz and /livez check: the main loop (the kubelet's registration, the CDI
  // spec) beats every 200 ms (10 s allowed), the containers loop (host pids, the cleanup)
  // every 200 ms (a pod-resources List may take its 3 s deadline: 60 s allowed), the
  // health watcher every ~1 s (30 s allowed), the memory watchdog every ~0.5 s (an NVML call
  // per GPU and /proc reads: 30 s allowed).
  Progress progress;
  const int main_loop = progress.Register("main loop", 10'000'000'000, MonotonicNowNs());
  const int containers_loop = progress.Register("containers loop", 60'000'000'000, MonotonicNowNs());
  const int health_loop = progress.Register("health watcher", 30'000'000'000, MonotonicNowNs());
  const int watchdog_loop = watchdog_on ? progress.Register("memory watchdog", 30'000'000'000, MonotonicNowNs()) : -1;
  HealthWatcher health(cfg, driver, &book);
  std::thread health_thread([&] { health.Run(stop, [&] { progress.Beat(health_loop, MonotonicNowNs()); }); });

  std::mutex pods_mu;
  std::vector<ContainerDevices> pods;
  MemoryWatchdog watchdog(
      driver, &book,
      [&] {
        std::lock_guard<std::mutex> l(pods_mu);
        return pods;
      },
      rules);
  std::thread watchdog_thread;
  if (watchdog_on)
    watchdog_thread = std::thread([&] { watchdog.Run(stop, [&] { progress.Beat(watchdog_loop, MonotonicNowNs()); }); });
  HttpServer http;
  SmUseMeter sm_use;
  http.Handle("/metrics", [&] {
    std::vector<ContainerDevices> snapshot;
    {
      std::lock_guard<std::mutex> l(pods_mu);
      snapshot = pods;
    }
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                        CollectMetrics(driver, book, snapshot, service.allocate_latency(), &sm_use, watchdog.Kills(),
                                       watchdog.Samples())};
  });
  // /livez: every loop makes progress (a liveness probe restarts a stuck agent).
  // /healthz: that, and registered with the kubelet (readiness: not while the kubelet is
  // away, which a restart would not mend).
  auto stalled = [&] {
    std::string loops = progress.Stalled(MonotonicNowNs());
    return loops.empty() ? "" : "stalled: " + loops + "\n";
  };
  http.Handle("/livez", [&] {
    std::string why = stalled();
    return HttpResponse{why.empty() ? 200 : 503, "text/plain; charset=utf-8", why.empty() ? "ok\n" : why};
  });
  http.Handle("/healthz", [&] {
    if (!server.registered()) return HttpResponse{503, "text/plain; charset=utf-8", "not registered\n"};
    std::string why = stalled();
    return HttpResponse{why.empty() ? 200 : 503, "text/plain; charset=utf-8", why.empty() ? "ok\n" : why};
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

  // Work on what containers wrote or hold runs in its own loop, so that however long it
  // takes, the loop that keeps the kubelet's registration never waits for it.
  std::thread containers_thread([&] {
    int64_t next_sweep = 0, next_pids = 0;
    while (!stop) {
      progress.Beat(containers_loop, MonotonicNowNs());
      int64_t now = MonotonicNowNs();
      if (now >= next_pids) {
        // New container processes need their host pid quickly: the enforcer measures its
        // context's footprint through NVML by it.
        std::vector<std::string> regions;
        for (const auto& rec : book.Records()) regions.push_back(book.RegionFile(rec.id));
        ResolveHostPids(regions);
        next_pids = now + 1'000'000'000;
      }
      if (now >= next_sweep) {
        std::vector<ContainerDevices> fresh;
        {
          std::lock_guard<std::mutex> l(pods_mu);
          fresh = pods;
        }
        Sweep(cfg, &book, &dirs, &stale, &fresh);
        {
          std::lock_guard<std::mutex> l(pods_mu);
          pods = fresh;
        }
        next_sweep = now + static_cast<int64_t>(cfg.sweep_seconds) * 1'000'000'000;
      }
      SleepUntilNs(MonotonicNowNs() + 200'000'000);
    }
  });

  std::string cdi_health;  // the healthy set the spec was last written for
  while (!stop) {
    progress.Beat(main_loop, MonotonicNowNs());
    // The spec first: once registered, the kubelet may allocate a device at once, and a
    // runtime resolving its CDI name needs the spec by then.
    std::string health;
    for (const auto& g : book.Gpus()) health += g.healthy ? '1' : '0';
    if (health != cdi_health) {
      WriteCdiSpec(cfg, book, *enforcer);
      if (scheduler_link && !cdi_health.empty()) scheduler_link->registrar->Poke();
      cdi_health = health;
    }
    server.Keep();
    SleepUntilNs(MonotonicNowNs() + 200'000'000);
  }
  containers_thread.join();
  if (watchdog_thread.joinable()) watchdog_thread.join();
  GS_LOG(kInfo, "stopping");
  if (scheduler_link) scheduler_link->registrar->Stop();
  service.Stop();
  server.Stop();
  http.Stop();
  if (metrics_thread.joinable()) metrics_thread.join();
  health_thread.join();
  return Status::Ok();
}

}  // namespace gs::node
