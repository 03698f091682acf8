#include "src/cli/node_command.h"

#include <malloc.h>
#include <signal.h>

#include <atomic>
#include <iostream>

#include "src/cli/node_gpus.h"
#include "src/cli/paths.h"
#include "src/common/clock.h"
#include "src/common/raw_log.h"
#include "src/node/agent.h"
#include "src/node/card_selection.h"
#include "src/node/config.h"

namespace gs::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) {
  g_stop = true;
}

// Everything before the agent serves: the GPUs, then ServeNode's own checks.
Status Serve(const node::Config& cfg) {
  auto node = OpenNodeGpus(cfg.driver_root);
  if (!node.ok()) return Status(node.status().code(), "no GPUs: " + node.status().message());
  if (node->gpus.empty()) return NotFound("NVML reports no GPUs on this node");
  node::CardSelection chosen = node::SelectCards(cfg, node->infos);
  for (const auto& line : chosen.infos) GS_LOG(kInfo, "%s", line.c_str());
  for (const auto& line : chosen.warnings) GS_LOG(kWarn, "%s", line.c_str());
  for (const auto& line : chosen.errors) GS_LOG(kError, "%s", line.c_str());
  std::vector<model::Gpu> gpus;
  for (const auto& g : chosen.cards) gpus.push_back(ToModelGpu(g));
  if (gpus.empty())
    return NotFound("none of the " + std::to_string(node->gpus.size()) + " GPU(s) NVML reports is to be registered");
  return node::ServeNode(cfg, node->driver.get(), gpus,
                         cfg.enforcer_path.empty() ? EnforcerLibrary() : cfg.enforcer_path, g_stop);
}

}  // namespace

int NodeCommand(const std::vector<std::string>& args) {
  // Large buffers (a /metrics body is ~170 KiB on 8 GPUs x 16 slices) from mmap, always:
  // glibc otherwise raises its threshold after the first such free and keeps later ones
  // in the heap, resident for the agent's life.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  // Two heaps for the agent's few dozen threads, which allocate little: glibc otherwise
  // gives each thread its own, each with pages of its own resident.
  mallopt(M_ARENA_MAX, 2);
  SetRawLogPrefix("gpuslice node");
  SetRawLogLevel(2);
  std::string usage;
  auto cfg = node::LoadConfig(args, &usage);
  if (!cfg.ok()) {
    std::cerr << "gpuslice node: " << cfg.status().message() << "\n";
    return 2;
  }
  if (!usage.empty()) return std::cout << usage, 0;
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  Status s = Serve(*cfg);
  if (s.ok()) return 0;
  GS_LOG(kError, "%s", s.message().c_str());
  if (cfg->fail_on_init_error) return 1;
  // One DaemonSet on every node: on a node without GPUs, wait quietly instead of
  // crash-looping.
  GS_LOG(kWarn, "--fail-on-init-error=false: waiting without serving");
  while (!g_stop) SleepUntilNs(MonotonicNowNs() + 1'000'000'000);
  return 0;
}

}  // namespace gs::cli
