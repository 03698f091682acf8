// What the enforcer adds to driver calls, measured in one run: the same calls straight to
// the simulator, through libgpuslice.so with a memory limit only, and with a 50 % compute
// share too (policy default, alone on the card, so the turn is held and renewed: this is
// the cost of a launch inside a turn, not the wait for one, which is the share working);
// median ns per call and what the enforcer adds; then whether the launch path makes
// syscalls (strace -c on 1k vs 100k launches: a flat count means none per launch).
//
//   gpuslice_bench [--sim-root DIR]   (make bench brings a simulated node up itself)
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "src/platform/driver_loader.h"

namespace {

const char kPtx[] =
    ".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry gpuslice_spin(.param .u64 ns)\n{ ret; }\n";

template <typename F>
double MedianNs(int reps, int batch, F f) {
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < batch; ++i) f();
    auto t1 = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / batch);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// Child: measures and prints "name ns" lines.
int Child(long launches_only) {
  gs::platform::CudaApi c;
  if (!gs::platform::LoadCuda("/", &c).ok()) return 3;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction spin;
  if (c.cuInit(0) || c.cuDeviceGet(&dev, 0) || c.cuDevicePrimaryCtxRetain(&ctx, dev) || c.cuCtxSetCurrent(ctx) ||
      c.cuModuleLoadData(&mod, kPtx) || c.cuModuleGetFunction(&spin, mod, "gpuslice_spin"))
    return 4;
  unsigned long long zero = 0;  // a zero-length kernel: measures the call, not the GPU
  void* params[] = {&zero};
  auto launch = [&] { c.cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr); };
  if (launches_only > 0) {
    // Warm up first (the limiter learns the cost of a launch), then the counted launches:
    // both runs share the warm-up, so the difference is what the launches themselves cost.
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    while (std::chrono::steady_clock::now() < until) launch();
    for (long i = 0; i < launches_only; ++i) launch();
    return 0;
  }
  printf("cuLaunchKernel %.1f\n", MedianNs(31, 2000, launch));
  printf("cuMemAlloc+cuMemFree %.1f\n", MedianNs(31, 200, [&] {
           CUdeviceptr p;
           c.cuMemAlloc_v2(&p, 1 << 20);
           c.cuMemFree_v2(p);
         }));
  // A VMM allocation's whole life at one reserved address: 2 MiB created, mapped, unmapped,
  // released.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CUdeviceptr va = 0;
  if (c.cuMemAddressReserve(&va, 2 << 20, 0, 0, 0) == CUDA_SUCCESS)
    printf("cuMemCreate+Map+Unmap+Release %.1f\n", MedianNs(31, 200, [&] {
             CUmemGenericAllocationHandle h;
             if (c.cuMemCreate(&h, 2 << 20, &prop, 0) != CUDA_SUCCESS) return;
             c.cuMemMap(va, 2 << 20, 0, h, 0);
             c.cuMemUnmap(va, 2 << 20);
             c.cuMemRelease(h);
           }));
  printf("cuMemGetInfo %.1f\n", MedianNs(31, 2000, [&] {
           size_t f, t;
           c.cuMemGetInfo_v2(&f, &t);
         }));
  return 0;
}

std::string RunCapture(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof(buf), p)) out += buf;
    pclose(p);
  }
  return out;
}

std::map<std::string, double> Parse(const std::string& out) {
  std::map<std::string, double> m;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    auto sp = line.rfind(' ');
    if (sp != std::string::npos) m[line.substr(0, sp)] = atof(line.c_str() + sp + 1);
  }
  return m;
}

long StraceCalls(const std::string& env, const std::string& self, long launches) {
  std::string file = "/tmp/gs-bench-strace." + std::to_string(getpid());
  RunCapture("env " + env + " strace -f -c -o " + file + " " + self + " --child-launches " + std::to_string(launches) +
             " 2>/dev/null");
  std::ifstream in(file);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find("total") != std::string::npos) last = line;
  unlink(file.c_str());
  std::istringstream f(last);
  double pct, secs, usecs;
  long calls = -1;
  f >> pct >> secs >> usecs >> calls;
  return calls;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "--child-launches") == 0) return Child(atol(argv[2]));
  if (argc == 2 && strcmp(argv[1], "--child") == 0) return Child(0);
  if (getenv("GS_ENFORCER") == nullptr) {
    fprintf(stderr, "run through `make bench` (it sets GS_ENFORCER and a simulated node)\n");
    return 2;
  }
  std::string self = "/proc/" + std::to_string(getpid()) + "/exe";
  char exe[4096];
  ssize_t n = readlink(self.c_str(), exe, sizeof(exe) - 1);
  exe[n > 0 ? n : 0] = 0;
  std::string region = "/tmp/gs-bench-region." + std::to_string(getpid());
  std::string cards = "/tmp/gs-bench-cards." + std::to_string(getpid());
  const std::string preload = "LD_PRELOAD=" + std::string(getenv("GS_ENFORCER")) +
                              " CUDA_DEVICE_MEMORY_SHARED_CACHE=" + region + " GPUSLICE_CARDS_DIR=" + cards;
  const std::string memory_only = preload + " CUDA_DEVICE_MEMORY_LIMIT=60g";
  const std::string enforced = memory_only + " CUDA_DEVICE_SM_LIMIT=50 GPU_CORE_UTILIZATION_POLICY=default";
  mkdir(cards.c_str(), 0700);
  auto plain = Parse(RunCapture(std::string(exe) + " --child"));
  auto mem = Parse(RunCapture("env " + memory_only + " " + exe + " --child"));
  unlink(region.c_str());
  auto with = Parse(RunCapture("env " + enforced + " " + exe + " --child"));
  unlink(region.c_str());
  printf("%-30s %12s %14s %14s %10s\n", "call (median ns)", "simulator", "+ enforcer", "+ 50 % share", "added");
  for (const char* k : {"cuLaunchKernel", "cuMemAlloc+cuMemFree", "cuMemCreate+Map+Unmap+Release", "cuMemGetInfo"}) {
    double a = plain[k], b = mem[k], c = with[k];
    printf("%-30s %12.1f %14.1f %14.1f %10.1f\n", k, a, b, c, std::max(b, c) - a);
  }
  if (system("command -v strace >/dev/null 2>&1") == 0) {
    long small = StraceCalls(enforced, exe, 1000), big = StraceCalls(enforced, exe, 100000);
    unlink(region.c_str());
    printf(
        "\nsyscalls of a whole process through the enforcer (strace -c -f, after a 1.5 s warm-up): %ld with 1,000 "
        "launches, %ld with 100,000\n(a difference far below 99,000 means no syscall per launch)\n",
        small, big);
  } else {
    printf("\n(strace not installed: syscall check skipped)\n");
  }
  std::error_code ec;
  std::filesystem::remove_all(cards, ec);
  return 0;
}
