// What gpuslice's hook adds to a docker container's start: `docker run --rm --network none
// IMAGE true` through a private dockerd (tests/private_dockerd.h) on a simulated node, with
// the hook that `gpuslice runtime configure --runtime docker --mode hook` installs. Three
// kinds of run, interleaved so the machine's noise falls on all of them alike:
//   no --gpus                       docker alone (no hook runs)
//   --gpus 1                        the hook: device nodes, driver files, enforcer, a slice
//                                   without limits
//   --gpus 1 + the slice's env      the same with CUDA_DEVICE_MEMORY_LIMIT and CUDA_DEVICE_SM_LIMIT
// Prints the median, the fastest and the slowest of N runs each (GS_DOCKER_RUNS, default 20);
// asserts nothing. Root, dockerd and docker (Debian's docker.io); `make bench-docker`.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "tests/harness.h"
#include "tests/private_dockerd.h"

using namespace gs::testing;

int main() {
  const int n = getenv("GS_DOCKER_RUNS") ? atoi(getenv("GS_DOCKER_RUNS")) : 20;
  if (std::string why = PrivateDockerdUnavailable(); !why.empty()) {
    fprintf(stderr, "docker start bench: %s: not measured\n", why.c_str());
    return 1;
  }
  SimNode node("context_memory: 0\ngpus: 2xT4\n");
  const std::string dir = node.root() + "/docker", hook_dir = dir + "/hookbin";
  Result conf = RunProcess({GpusliceBin(), "runtime", "configure", "--runtime", "docker", "--mode", "hook", "--write",
                            "--hook-dir", hook_dir, "--gpuslice", GpusliceBin(), "--enforcer", EnforcerLib(),
                            "--driver-root", node.root(), "--state-dir", node.root() + "/gs-state"});
  if (conf.code != 0) {
    fprintf(stderr, "gpuslice runtime configure failed: %s%s\n", conf.out.c_str(), conf.err.c_str());
    return 1;
  }
  PrivateDockerd dockerd(dir, hook_dir);
  if (!dockerd.error().empty()) {
    fprintf(stderr, "docker start bench: %s\n", dockerd.error().c_str());
    return 1;
  }
  ProbeImageRootfs(dir + "/rootfs");
  if (std::string e = dockerd.Import(dir + "/rootfs", "local/img:1", {"ENV PATH=/bin"}); !e.empty()) {
    fprintf(stderr, "%s\n", e.c_str());
    return 1;
  }
  struct Kind {
    const char* name;
    std::vector<std::string> flags;
    std::vector<double> ms;
  };
  std::vector<Kind> kinds = {
      {"no --gpus", {}, {}},
      {"--gpus 1", {"--gpus", "1"}, {}},
      {"--gpus 1 -e MEMORY=2g -e SM=30",
       {"--gpus", "1", "-e", "CUDA_DEVICE_MEMORY_LIMIT=2g", "-e", "CUDA_DEVICE_SM_LIMIT=30"},
       {}},
  };
  auto run = [&](const Kind& k) {
    std::vector<std::string> args = {"run", "--rm", "--network", "none"};
    args.insert(args.end(), k.flags.begin(), k.flags.end());
    args.insert(args.end(), {"local/img:1", "true"});
    auto t0 = std::chrono::steady_clock::now();
    Result r = dockerd.Docker(args);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r.code != 0) {
      fprintf(stderr, "docker run %s failed: %s%s\n", k.name, r.out.c_str(), r.err.c_str());
      exit(1);
    }
    return ms;
  };
  for (auto& k : kinds) run(k);  // warm the page cache and the daemon
  for (int i = 0; i < n; ++i)
    for (auto& k : kinds) k.ms.push_back(run(k));
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  std::string version = dockerd.Docker({"version", "--format", "{{.Server.Version}}"}).out;
  version = version.substr(0, version.find('\n'));
  printf("\ndocker run --rm --network none local/img:1 true, %d runs each, interleaved (private dockerd %s):\n", n,
         version.c_str());
  printf("%-32s %10s %10s %10s %12s\n", "", "median", "fastest", "slowest", "+ median");
  const double base = median(kinds[0].ms);
  for (const auto& k : kinds)
    printf("%-32s %7.0f ms %7.0f ms %7.0f ms %9.0f ms\n", k.name, median(k.ms),
           *std::min_element(k.ms.begin(), k.ms.end()), *std::max_element(k.ms.begin(), k.ms.end()),
           median(k.ms) - base);
  return 0;
}
