#include "src/cli/burn_command.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

#include "src/common/clock.h"
#include "src/common/flags.h"
#include "src/common/quantity.h"
#include "src/platform/driver_loader.h"

extern const char kBurnPtx[];

namespace gs::cli {
namespace {

constexpr int64_t kPeriodNs = 50'000'000;  // one duty cycle: busy util% of it, then idle

struct Cuda {
  platform::CudaApi api;
  const char* Error(CUresult rc) {
    const char* name = nullptr;
    if (api.cuGetErrorName == nullptr || api.cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == nullptr)
      return "CUDA error";
    return name;
  }
};

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
  double util = 50, seconds = 10;
  int64_t device = 0;
  std::string driver_root = "/";
  bool json = false;
  FlagSet flags("burn", "Allocates and verifies device memory, then keeps the GPU busy at a duty cycle.");
  flags.Bytes("memory", &memory, "device memory to allocate (e.g. 2g)");
  flags.Bytes("verify-bytes", &verify_bytes, "bytes of it to write and read back (host memory is used for them)");
  flags.Double("util", &util, "target GPU utilisation in percent", 0, 100);
  flags.Double("seconds", &seconds, "how long to run", 0, 86400);
  flags.Int("device", &device, "CUDA device ordinal", 0, 63);
  flags.String("driver-root", &driver_root, "where libcuda.so.1 is ('/' = the loader's search path)");
  flags.Bool("json", &json, "print the final summary as one JSON line");
  std::vector<std::string> rest;
  if (Status s = flags.Parse(args, &rest); !s.ok()) {
    std::cerr << "gpuslice burn: " << s.message() << "\n";
    return 2;
  }
  if (flags.help_requested()) return std::cout << flags.Usage(), 0;

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

  // One block per SM, so a kernel of `ns` keeps every SM busy for ns (one wave).
  const int64_t busy_ns = static_cast<int64_t>(kPeriodNs * util / 100.0);
  const int64_t start = MonotonicNowNs(), end = start + static_cast<int64_t>(seconds * 1e9);
  int64_t work_ns = 0, second_work = 0, second_start = start, next_period = start;
  while (MonotonicNowNs() < end) {
    if (busy_ns > 0) {
      unsigned long long ns = static_cast<unsigned long long>(busy_ns);
      void* params[] = {&ns};
      BURN_CHECK(c.cuLaunchKernel(spin, static_cast<unsigned>(sms), 1, 1, 128, 1, 1, 0, nullptr, params, nullptr),
                 "cuLaunchKernel");
      BURN_CHECK(c.cuCtxSynchronize(), "cuCtxSynchronize");
      work_ns += busy_ns;
      second_work += busy_ns;
    }
    next_period += kPeriodNs;
    int64_t now = MonotonicNowNs();
    if (next_period > now)
      SleepUntilNs(next_period);
    else
      next_period = now;  // running late (the GPU is shared or throttled): no catching up
    now = MonotonicNowNs();
    if (now - second_start >= 1'000'000'000) {
      double achieved = 100.0 * static_cast<double>(second_work) / static_cast<double>(now - second_start);
      printf("burn: t=%.0fs device=%lld util=%.1f%% (target %.0f%%) memory=%s\n",
             static_cast<double>(now - start) / 1e9, static_cast<long long>(device), achieved, util,
             FormatBytes(memory, mem_s, sizeof(mem_s)));
      fflush(stdout);
      second_work = 0;
      second_start = now;
    }
  }
  double elapsed = static_cast<double>(MonotonicNowNs() - start) / 1e9;
  double avg = elapsed > 0 ? 100.0 * static_cast<double>(work_ns) / (elapsed * 1e9) : 0;
  if (buf) c.cuMemFree_v2(buf);
  c.cuModuleUnload(mod);
  c.cuDevicePrimaryCtxRelease_v2(dev);
  printf("burn: done after %.1fs: average util %.1f%% (target %.0f%%)\n", elapsed, avg, util);
  if (json)
    printf("{\"ok\":true,\"seconds\":%.2f,\"util\":%.2f,\"target\":%.1f,\"memory\":%llu,\"verified\":%llu}\n", elapsed,
           avg, util, static_cast<unsigned long long>(memory), static_cast<unsigned long long>(verify_bytes));
  return 0;
}

}  // namespace gs::cli
