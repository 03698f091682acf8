// The node agent under the kubelet's calls: Allocate latency (p50/p99) on a node of
// 8 GPUs x 16 slices, and the agent's resident memory in that state (metrics endpoint on,
// scraped). Two call patterns: paced (one Allocate every 5 ms, faster than a kubelet
// admits pods) and back-to-back (a burst with no pause at all). Each is set beside the
// floor of the transport (an empty gRPC call) and the agent's own share (its
// gpuslice_allocate_duration_seconds histogram: the bucket holding p50/p99). Reported,
// never asserted. Run with `make bench`.
#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness.h"
#include "tests/kubelet_double.h"

using namespace gs::testing;

namespace {
// A field of /proc/<pid>/smaps_rollup in KiB (Rss: everything mapped and resident,
// shared library pages included; Pss: shared pages divided among the processes using them).
long SmapsKiB(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

struct Latency {
  double p50, p99;
};

// The agent's /metrics body ("" when it does not answer).
std::string Scrape(int port) {
  httplib::Client c("127.0.0.1", port);
  auto res = c.Get("/metrics");
  return res ? res->body : "";
}

// Cumulative bucket counts of gpuslice_allocate_duration_seconds by bound ("+Inf" last).
std::vector<std::pair<std::string, double>> AgentHistogram(const std::string& metrics) {
  std::vector<std::pair<std::string, double>> buckets;
  const std::string key = "gpuslice_allocate_duration_seconds_bucket{le=\"";
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) {
      auto end = line.find('"', key.size());
      buckets.emplace_back(line.substr(key.size(), end - key.size()), std::stod(line.substr(line.rfind(' ') + 1)));
    }
  return buckets;
}

// "<= bound" of the bucket holding quantile q of the calls between two scrapes.
std::string AgentQuantile(const std::vector<std::pair<std::string, double>>& before,
                          const std::vector<std::pair<std::string, double>>& after, double q) {
  if (after.empty() || after.size() != before.size()) return "-";
  double total = after.back().second - before.back().second;
  for (size_t i = 0; i < after.size(); ++i)
    if (after[i].second - before[i].second >= q * total)
      return after[i].first == "+Inf" ? "> 1 s"
                                      : "<= " + std::to_string(std::stod(after[i].first) * 1e3).substr(0, 5) + " ms";
  return "-";
}

template <typename Call>
Latency Measure(int n, std::chrono::microseconds pause, Call call) {
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (!call(i)) return {-1, -1};
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    std::this_thread::sleep_for(pause);
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[ms.size() * 99 / 100]};
}

// The file system where the agent makes container directories: a directory and an empty
// file in it made (2 of the 3 inodes a container's directory takes), then removed, n times.
Latency InodeCost(const std::string& dir, int n) {
  Latency l = Measure(n, std::chrono::microseconds(0), [&](int i) {
    const std::string d = dir + "/inode-cost-" + std::to_string(i);
    const int fd = mkdir(d.c_str(), 0755) == 0 ? open((d + "/f").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644) : -1;
    if (fd >= 0) close(fd);
    return fd >= 0;
  });
  for (int i = 0; i < n; ++i) {
    const std::string d = dir + "/inode-cost-" + std::to_string(i);
    unlink((d + "/f").c_str());
    rmdir(d.c_str());
  }
  return l;
}
}  // namespace

int main() {
  SimNode node("gpus: 8xH100-80GB\n");
  KubeletDouble kubelet(node.root() + "/kubelet");
  std::string state = node.root() + "/agent-state";
  Process agent({GpusliceBin(), "node", "--driver-root", node.root(), "--kubelet-dir", node.root() + "/kubelet",
                 "--state-dir", state, "--device-split-count", "16", "--metrics-addr", "127.0.0.1:0", "--enforcer",
                 EnforcerLib()});
  if (!kubelet.WaitForDevices([](auto& ds) { return ds.size() == 128; }, 20000)) {
    agent.Signal(SIGTERM);
    Result r = agent.Wait();
    fprintf(stderr, "the agent did not list 128 slices (got %zu): %s\n", kubelet.devices().size(), r.err.c_str());
    return 1;
  }
  std::vector<std::string> ids;
  for (const auto& d : kubelet.devices()) ids.push_back(d.id());
  auto allocate = [&](int i) {
    v1beta1::ContainerAllocateResponse resp;
    grpc::Status s = kubelet.Allocate({ids[static_cast<size_t>(i) % ids.size()]}, &resp);
    if (!s.ok()) fprintf(stderr, "Allocate failed: %s\n", s.error_message().c_str());
    return s.ok();
  };
  auto options = [&](int) {
    v1beta1::DevicePluginOptions o;
    return kubelet.Options(&o).ok();
  };
  int port = 0;
  std::ifstream(state + "/metrics.port") >> port;
  Latency floor_paced = Measure(1000, std::chrono::microseconds(5000), options);
  auto h0 = AgentHistogram(Scrape(port));
  Latency paced = Measure(1000, std::chrono::microseconds(5000), allocate);
  auto h1 = AgentHistogram(Scrape(port));
  Latency floor_burst = Measure(2000, std::chrono::microseconds(0), options);
  auto h2 = AgentHistogram(Scrape(port));
  Latency burst = Measure(2000, std::chrono::microseconds(0), allocate);
  std::string last = Scrape(port);
  auto h3 = AgentHistogram(last);
  if (paced.p50 < 0 || burst.p50 < 0 || floor_paced.p50 < 0 || floor_burst.p50 < 0) return 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto fmt = [](double v, const char* unit) { return (std::to_string(v).substr(0, 6) + " " + unit); };
  printf("\nnode agent, 8 GPUs x 16 slices, Allocate over gRPC (one container per call):\n");
  printf("%-38s %12s %12s %14s\n", "", "Allocate", "empty call", "in the agent");
  printf("%-38s %12s %12s %14s\n", "p50, paced (1000 calls, 5 ms apart)", fmt(paced.p50, "ms").c_str(),
         fmt(floor_paced.p50, "ms").c_str(), AgentQuantile(h0, h1, 0.5).c_str());
  printf("%-38s %12s %12s %14s\n", "p99, paced", fmt(paced.p99, "ms").c_str(), fmt(floor_paced.p99, "ms").c_str(),
         AgentQuantile(h0, h1, 0.99).c_str());
  printf("%-38s %12s %12s %14s\n", "p50, back-to-back (2000 calls)", fmt(burst.p50, "ms").c_str(),
         fmt(floor_burst.p50, "ms").c_str(), AgentQuantile(h2, h3, 0.5).c_str());
  printf("%-38s %12s %12s %14s\n", "p99, back-to-back", fmt(burst.p99, "ms").c_str(),
         fmt(floor_burst.p99, "ms").c_str(), AgentQuantile(h2, h3, 0.99).c_str());
  printf(
      "(empty call = GetDevicePluginOptions: gRPC over the unix socket and nothing else;\n"
      " in the agent = its gpuslice_allocate_duration_seconds bucket holding that quantile)\n");
  printf("%-38s %12s\n", "agent RSS (after /metrics scrapes)",
         fmt(SmapsKiB(agent.pid(), "Rss") / 1024.0, "MiB").c_str());
  printf("%-38s %12s\n", "  of which anonymous (heap, stacks)",
         fmt(SmapsKiB(agent.pid(), "Anonymous") / 1024.0, "MiB").c_str());
  printf("%-38s %12s\n", "agent PSS", fmt(SmapsKiB(agent.pid(), "Pss") / 1024.0, "MiB").c_str());
  printf("%-38s %12s\n", "/metrics body",
         (last.empty() ? std::string("-") : std::to_string(last.size()) + " B").c_str());
  agent.Signal(SIGTERM);
  Result r = agent.Wait();
  if (r.code != 0) {
    fprintf(stderr, "the agent exited with %d:\n%s\n", r.code, r.err.c_str());
    return 1;
  }
  // What a spare directory costs the file system as this run left it: back-to-back calls
  // outrun the agent's spares, and Allocate then makes the directory itself.
  Latency inodes = InodeCost(state + "/containers", 500);
  if (inodes.p50 < 0) {
    fprintf(stderr, "cannot make directories and files in %s/containers\n", state.c_str());
    return 1;
  }
  printf("%-38s %12s %12s\n", "containers dir: mkdir + new file, p50/p99", fmt(inodes.p50, "ms").c_str(),
         fmt(inodes.p99, "ms").c_str());
  return 0;
}
