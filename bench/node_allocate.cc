// The node agent under the kubelet's calls: Allocate latency (p50/p99) on a node of
// 8 GPUs x 16 slices, and the agent's resident memory in that state. Reported, never
// asserted. Run with `make bench`.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness.h"
#include "tests/kubelet_double.h"

using namespace gs::testing;

namespace {
long RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}
}  // namespace

int main() {
  SimNode node("gpus: 8xH100-80GB\n");
  KubeletDouble kubelet(node.root() + "/kubelet");
  Process agent({GpusliceBin(), "node", "--driver-root", node.root(), "--kubelet-dir", node.root() + "/kubelet",
                 "--state-dir", node.root() + "/agent-state", "--device-split-count", "16", "--metrics-addr", "",
                 "--enforcer", EnforcerLib()});
  if (!kubelet.WaitForDevices([](auto& ds) { return ds.size() == 128; }, 20000)) {
    agent.Signal(SIGTERM);
    Result r = agent.Wait();
    fprintf(stderr, "the agent did not list 128 slices (got %zu): %s\n", kubelet.devices().size(), r.err.c_str());
    return 1;
  }
  std::vector<std::string> ids;
  for (const auto& d : kubelet.devices()) ids.push_back(d.id());
  std::vector<double> ms;
  for (int i = 0; i < 2000; ++i) {
    v1beta1::ContainerAllocateResponse resp;
    auto t0 = std::chrono::steady_clock::now();
    grpc::Status s = kubelet.Allocate({ids[static_cast<size_t>(i) % ids.size()]}, &resp);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (!s.ok()) {
      fprintf(stderr, "Allocate failed: %s\n", s.error_message().c_str());
      return 1;
    }
  }
  std::sort(ms.begin(), ms.end());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  printf("\nnode agent, 8 GPUs x 16 slices, 2000 Allocate calls over gRPC (one container each):\n");
  printf("%-28s %10s\n", "Allocate latency p50", (std::to_string(ms[ms.size() / 2]).substr(0, 6) + " ms").c_str());
  printf("%-28s %10s\n", "Allocate latency p99",
         (std::to_string(ms[ms.size() * 99 / 100]).substr(0, 6) + " ms").c_str());
  printf("%-28s %10s\n", "agent resident memory",
         (std::to_string(RssKiB(agent.pid()) / 1024.0).substr(0, 5) + " MiB").c_str());
  agent.Signal(SIGTERM);
  agent.Wait();
  return 0;
}
