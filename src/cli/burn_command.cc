#include "src/cli/burn_command.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/cli/burn_ptx.h"
#include "src/common/clock.h"
#include "src/common/flags.h"
#include "src/common/quantity.h"
#include "src/platform/driver_loader.h"

namespace gs::cli {
namespace {

constexpr int64_t kPeriodNs = 50'000'000;  // one duty cycle: busy util% of it, then idle
constexpr int64_t kHostBoundBatch = 64;    // --host-us: launches between synchronisations

struct Cuda {
  platform::CudaApi api;
  const char* Error(CUresult rc) {
    const char* name = nullptr;
    if (api.cuGetErrorName == nullptr || api.cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == nullptr)
      return "CUDA error";
    return name;
  }
};

using LaunchExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);

// What the launching threads share. Each thread runs its own duty cycle: per period of
// kPeriodNs, busy_ns of kernels (kernel_ns each, one block per SM so a kernel of ns keeps
// every SM busy for ns), then a synchronisation and idle until the period ends. With
// host_ns, a thread instead prepares each kernel on the CPU for host_ns and launches it
// without waiting for the last one (a host-bound program: an inference loop, small
// kernels from Python), synchronising every kHostBoundBatch launches. The GPU time
// obtained is counted as kernels completed x their length.
struct Work {
  const platform::CudaApi* api = nullptr;
  CUcontext ctx = nullptr;
  CUfunction spin = nullptr;
  LaunchExFn launch_ex = nullptr;  // null: cuLaunchKernel
  unsigned blocks = 1;
  int64_t busy_ns = 0, kernel_ns = 0, host_ns = 0, start = 0, end = 0;
  bool own_stream = false;  // each thread on a stream of its own
  long long device = 0;     // for the report lines
  double target = 0;
  const char* memory_text = "";
  std::atomic<int64_t> work_ns{0}, second_work{0}, launches{0};
  std::mutex mu;  // guards the first error
  CUresult error = CUDA_SUCCESS;
  const char* failed_call = nullptr;
  void Fail(CUresult rc, const char* what) {
    std::lock_guard<std::mutex> lock(mu);
    if (error == CUDA_SUCCESS) {
      error = rc;
      failed_call = what;
    }
  }
};

CUresult Launch(const Work& w, CUstream stream, unsigned long long ns) {
  void* params[] = {&ns};
  if (w.launch_ex == nullptr)
    return w.api->cuLaunchKernel(w.spin, w.blocks, 1, 1, 128, 1, 1, 0, stream, params, nullptr);
  CUlaunchConfig cfg{};
  cfg.gridDimX = w.blocks;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 128;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = stream;
  return w.launch_ex(&cfg, w.spin, params, nullptr);
}

// The once-a-second line of the reporting thread.
void Report(Work* w, int64_t now, int64_t* second_start) {
  if (now - *second_start < 1'000'000'000) return;
  double achieved = 100.0 * static_cast<double>(w->second_work.exchange(0)) / static_cast<double>(now - *second_start);
  printf("burn: t=%.0fs device=%lld util=%.1f%% (target %.0f%%) memory=%s\n", static_cast<double>(now - w->start) / 1e9,
         w->device, achieved, w->target, w->memory_text);
  fflush(stdout);
  *second_start = now;
}

// Kernels queued since the last synchronisation: waits for them and counts them as done.
bool Completed(Work* w, CUstream stream, int64_t kernels) {
  if (kernels == 0) return true;
  const platform::CudaApi& c = *w->api;
  CUresult rc = w->own_stream ? c.cuStreamSynchronize(stream) : c.cuCtxSynchronize();
  if (rc != CUDA_SUCCESS) return w->Fail(rc, "synchronize"), false;
  w->launches.fetch_add(kernels);
  w->work_ns.fetch_add(kernels * w->kernel_ns);
  w->second_work.fetch_add(kernels * w->kernel_ns);
  return true;
}

bool Launched(Work* w, CUstream stream) {
  CUresult rc = Launch(*w, stream, static_cast<unsigned long long>(w->kernel_ns));
  if (rc != CUDA_SUCCESS) w->Fail(rc, w->launch_ex ? "cuLaunchKernelEx" : "cuLaunchKernel");
  return rc == CUDA_SUCCESS;
}

// One thread's duty cycle until w->end; the reporting thread prints once a second.
void DutyCycleLoop(Work* w, CUstream stream, bool reports) {
  const int64_t per_period = w->busy_ns > 0 ? std::max<int64_t>(1, w->busy_ns / std::max<int64_t>(1, w->kernel_ns)) : 0;
  int64_t second_start = w->start, next_period = w->start;
  while (MonotonicNowNs() < w->end && w->error == CUDA_SUCCESS) {
    for (int64_t k = 0; k < per_period; ++k)
      if (!Launched(w, stream)) return;
    if (!Completed(w, stream, per_period)) return;
    next_period += kPeriodNs;
    int64_t now = MonotonicNowNs();
    if (next_period > now)
      SleepUntilNs(next_period);
    else
      next_period = now;  // running late (the GPU is shared or throttled): no catching up
    if (reports) Report(w, MonotonicNowNs(), &second_start);
  }
}

// One thread's host-bound loop until w->end: host_ns of CPU work before each launch.
void HostBoundLoop(Work* w, CUstream stream, bool reports) {
  int64_t second_start = w->start, queued = 0;
  volatile uint64_t spins = 0;  // the CPU work: keeps the thread on its core, as real work does
  while (MonotonicNowNs() < w->end && w->error == CUDA_SUCCESS) {
    for (const int64_t ready = MonotonicNowNs() + w->host_ns; MonotonicNowNs() < ready;) spins = spins + 1;
    if (!Launched(w, stream)) return;
    if (++queued == kHostBoundBatch) {
      if (!Completed(w, stream, queued)) return;
      queued = 0;
      if (reports) Report(w, MonotonicNowNs(), &second_start);
    }
  }
  Completed(w, stream, queued);
}

void BurnLoop(Work* w, bool reports) {
  const platform::CudaApi& c = *w->api;
  if (CUresult rc = c.cuCtxSetCurrent(w->ctx); rc != CUDA_SUCCESS) return w->Fail(rc, "cuCtxSetCurrent");
  CUstream stream = nullptr;
  if (w->own_stream)
    if (CUresult rc = c.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING); rc != CUDA_SUCCESS)
      return w->Fail(rc, "cuStreamCreate");
  if (w->host_ns > 0)
    HostBoundLoop(w, stream, reports);
  else
    DutyCycleLoop(w, stream, reports);
  if (stream) c.cuStreamDestroy_v2(stream);
}

#define BURN_CHECK(call, what)                                                                     \
  do {                                                                                             \
    CUresult rc_ = (call);                                                                         \
    if (rc_ != CUDA_SUCCESS) {                                                                     \
      fprintf(stderr, "burn: %s failed: %s (%d)\n", what, cuda.Error(rc_), static_cast<int>(rc_)); \
      return rc_ == CUDA_ERROR_OUT_OF_MEMORY ? 3 : 1;                                              \
    }                                                                                              \
  } while (0)

uint32_t Pattern(uint64_t word, uint32_t seed) {
  uint64_t x = (word + seed) * 0x9E3779B97F4A7C15ULL;
  return static_cast<uint32_t>(x ^ (x >> 32));
}

}  // namespace

int BurnCommand(const std::vector<std::string>& args) {
  uint64_t memory = 256ull << 20, verify_bytes = 64ull << 20;
  double util = 50, seconds = 10, kernel_us = 0, host_us = 0;
  int64_t device = 0, threads = 1;
  std::string launch_path = "plain";
  std::string driver_root = "/";
  bool json = false;
  FlagSet flags("burn", "Allocates and verifies device memory, then keeps the GPU busy at a duty cycle.");
  flags.Bytes("memory", &memory, "device memory to allocate (e.g. 2g)");
  flags.Bytes("verify-bytes", &verify_bytes, "bytes of it to write and read back (host memory is used for them)");
  flags.Double("util", &util, "target GPU utilisation in percent", 0, 100);
  flags.Double("seconds", &seconds, "how long to run", 0, 86400);
  flags.Int("device", &device, "CUDA device ordinal", 0, 63);
  flags.Double("kernel-us", &kernel_us,
               "length of one kernel in microseconds (0: the whole busy part of a 50 ms period)", 0, 1000000);
  flags.Double("host-us", &host_us,
               "host-bound instead of a duty cycle: microseconds of CPU work before each kernel, launched without "
               "waiting for the last (--util is then ignored)",
               0, 1000000);
  flags.Int("threads", &threads, "launching threads, each on a stream of its own when more than one", 1, 64);
  flags.String("launch", &launch_path,
               "launch path: plain (cuLaunchKernel), ex (cuLaunchKernelEx), proc "
               "(cuLaunchKernelEx through cuGetProcAddress, as the CUDA runtime)");
  flags.String("driver-root", &driver_root, "where libcuda.so.1 is ('/' = the loader's search path)");
  flags.Bool("json", &json, "print the final summary as one JSON line");
  std::vector<std::string> rest;
  if (Status s = flags.Parse(args, &rest); !s.ok()) {
    std::cerr << "gpuslice burn: " << s.message() << "\n";
    return 2;
  }
  if (flags.help_requested()) return std::cout << flags.Usage(), 0;

  if (host_us > 0 && kernel_us <= 0) {
    std::cerr << "gpuslice burn: --host-us needs --kernel-us (the length of the kernel each step launches)\n";
    return 2;
  }
  Cuda cuda;
  if (Status s = platform::LoadCuda(driver_root, &cuda.api); !s.ok()) {
    std::cerr << "gpuslice burn: " << s.message() << "\n";
    return 1;
  }
  auto& c = cuda.api;
  CUdevice dev;
  CUcontext ctx;
  BURN_CHECK(c.cuInit(0), "cuInit");
  BURN_CHECK(c.cuDeviceGet(&dev, static_cast<int>(device)), "cuDeviceGet");
  BURN_CHECK(c.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  BURN_CHECK(c.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  char name[128] = {};
  c.cuDeviceGetName(name, sizeof(name), dev);
  size_t free_b = 0, total_b = 0;
  BURN_CHECK(c.cuMemGetInfo_v2(&free_b, &total_b), "cuMemGetInfo");
  char mem_s[32], total_s[32], free_s[32];
  printf("burn: device %lld %s: %s total, %s free\n", static_cast<long long>(device), name,
         FormatBytes(total_b, total_s, sizeof(total_s)), FormatBytes(free_b, free_s, sizeof(free_s)));

  CUdeviceptr buf = 0;
  if (memory > 0) {
    CUresult rc = c.cuMemAlloc_v2(&buf, memory);
    if (rc != CUDA_SUCCESS) {
      fprintf(stderr, "burn: cuMemAlloc of %s failed: %s (%d)\n", FormatBytes(memory, mem_s, sizeof(mem_s)),
              cuda.Error(rc), static_cast<int>(rc));
      if (json)
        printf("{\"ok\":false,\"error\":\"%s\",\"memory\":%llu}\n", cuda.Error(rc),
               static_cast<unsigned long long>(memory));
      return rc == CUDA_ERROR_OUT_OF_MEMORY ? 3 : 1;
    }
    // Write a pattern through the whole verified span, read it back, compare.
    verify_bytes = std::min(verify_bytes, memory) / 4 * 4;
    const size_t chunk = 16u << 20;
    std::vector<uint32_t> host(chunk / 4), back(chunk / 4);
    for (int pass = 0; pass < 2; ++pass)
      for (uint64_t off = 0; off < verify_bytes; off += chunk) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, verify_bytes - off));
        for (size_t w = 0; w < n / 4; ++w) host[w] = Pattern(off / 4 + w, 0x5EED);
        if (pass == 0) {
          BURN_CHECK(c.cuMemcpyHtoD_v2(buf + off, host.data(), n), "cuMemcpyHtoD");
        } else {
          BURN_CHECK(c.cuMemcpyDtoH_v2(back.data(), buf + off, n), "cuMemcpyDtoH");
          if (memcmp(host.data(), back.data(), n) != 0) {
            fprintf(stderr, "burn: DATA CORRUPTION in device memory at offset %llu\n",
                    static_cast<unsigned long long>(off));
            return 4;
          }
        }
      }
    printf("burn: allocated %s, verified %s\n", FormatBytes(memory, mem_s, sizeof(mem_s)),
           FormatBytes(verify_bytes, total_s, sizeof(total_s)));
    fflush(stdout);  // who waits for the allocation (make demo) sees it now
  }

  CUmodule mod;
  CUfunction spin;
  BURN_CHECK(c.cuModuleLoadData(&mod, kBurnPtx), "cuModuleLoadData");
  BURN_CHECK(c.cuModuleGetFunction(&spin, mod, "gpuslice_spin"), "cuModuleGetFunction");
  int sms = 1;
  c.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);

  // How the kernels are launched: plain cuLaunchKernel, cuLaunchKernelEx, or
  // cuLaunchKernelEx fetched through cuGetProcAddress as the CUDA runtime (and through it
  // cuBLAS and cuDNN) does.
  LaunchExFn launch_ex = nullptr;
  if (launch_path == "ex") {
    launch_ex = c.cuLaunchKernelEx;
  } else if (launch_path == "proc") {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult found{};
    BURN_CHECK(c.cuGetProcAddress_v2("cuLaunchKernelEx", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found),
               "cuGetProcAddress(cuLaunchKernelEx)");
    launch_ex = reinterpret_cast<LaunchExFn>(fn);
  } else if (launch_path != "plain") {
    std::cerr << "gpuslice burn: --launch: '" << launch_path << "' is not one of plain, ex, proc\n";
    return 2;
  }
  if (launch_path != "plain" && launch_ex == nullptr) {
    std::cerr << "gpuslice burn: the driver has no cuLaunchKernelEx\n";
    return 1;
  }

  Work w;
  w.api = &c;
  w.ctx = ctx;
  w.spin = spin;
  w.launch_ex = launch_ex;
  w.blocks = static_cast<unsigned>(sms);
  w.busy_ns = static_cast<int64_t>(kPeriodNs * util / 100.0);
  w.kernel_ns = kernel_us > 0 ? static_cast<int64_t>(kernel_us * 1000.0) : w.busy_ns;
  w.host_ns = static_cast<int64_t>(host_us * 1000.0);
  w.start = MonotonicNowNs();
  w.end = w.start + static_cast<int64_t>(seconds * 1e9);
  w.own_stream = threads > 1;
  w.device = static_cast<long long>(device);
  w.target = util;
  w.memory_text = FormatBytes(memory, mem_s, sizeof(mem_s));
  std::vector<std::thread> pool;
  for (int64_t i = 1; i < threads; ++i) pool.emplace_back([&w] { BurnLoop(&w, false); });
  BurnLoop(&w, true);
  for (std::thread& t : pool) t.join();
  if (w.error != CUDA_SUCCESS) {
    fprintf(stderr, "burn: %s failed: %s (%d)\n", w.failed_call, cuda.Error(w.error), static_cast<int>(w.error));
    return 1;
  }
  const int64_t start = w.start, work_ns = w.work_ns.load();
  double elapsed = static_cast<double>(MonotonicNowNs() - start) / 1e9;
  double avg = elapsed > 0 ? 100.0 * static_cast<double>(work_ns) / (elapsed * 1e9) : 0;
  if (buf) c.cuMemFree_v2(buf);
  c.cuModuleUnload(mod);
  c.cuDevicePrimaryCtxRelease_v2(dev);
  const double rate = elapsed > 0 ? static_cast<double>(w.launches.load()) / elapsed : 0;
  if (host_us > 0)
    printf("burn: done after %.1fs: average util %.1f%% (host-bound), %.0f kernels/s\n", elapsed, avg, rate);
  else
    printf("burn: done after %.1fs: average util %.1f%% (target %.0f%%), %.0f kernels/s\n", elapsed, avg, util, rate);
  if (json) {
    // Host-bound runs have no target: they use what their CPU work leaves them.
    char target[32] = "null";
    if (host_us <= 0) snprintf(target, sizeof(target), "%.1f", util);
    printf(
        "{\"ok\":true,\"seconds\":%.2f,\"util\":%.2f,\"target\":%s,\"host_us\":%.1f,\"kernels_per_second\":%.1f,"
        "\"memory\":%llu,\"verified\":%llu}\n",
        elapsed, avg, target, host_us, rate, static_cast<unsigned long long>(memory),
        static_cast<unsigned long long>(verify_bytes));
  }
  return 0;
}

}  // namespace gs::cli
