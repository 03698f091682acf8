// The driver-level simulator with real processes: several programs share simulated
// cards and see each other exactly as on a real GPU, through CUDA and NVML alike.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <thread>

#include "tests/harness.h"

namespace gs::testing {
namespace {

TEST(Simulator, OutOfMemoryAtExactlyTheCardsCapacity) {
  SimNode node("context_memory: 0\ngpus: [T4]\n");
  Result r = RunProcess({ProbeBin(), "init", "alloc", "mem", "15360m", "meminfo", "alloc", "mem", "512", "free",
                         "alloc", "mem", "1", "meminfo"},
                        node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  auto allocs = Lines(r.out, "alloc");
  ASSERT_EQ(allocs.size(), 3u) << r.out;
  EXPECT_EQ(allocs[0], "alloc ok");                            // the whole card
  EXPECT_EQ(allocs[1], "alloc err CUDA_ERROR_OUT_OF_MEMORY");  // one more byte-ish
  EXPECT_EQ(allocs[2], "alloc ok");
  auto info = Fields(r.out, "meminfo");
  EXPECT_EQ(U(info[1]), 0u);            // free
  EXPECT_EQ(U(info[2]), 15360 * kMiB);  // total
}

TEST(Simulator, ProcessesShareOneCardAndAgreeThroughCudaAndNvml) {
  SimNode node("context_memory: 100Mi\ngpus: [H100-80GB]\n");
  std::vector<std::unique_ptr<Process>> holders;
  for (int i = 0; i < 4; ++i) {
    holders.push_back(std::make_unique<Process>(
        std::vector<std::string>{ProbeBin(), "init", "alloc", "mem", "1g", "sleep", "30000"}, node.env()));
  }
  for (auto& h : holders) ASSERT_TRUE(h->WaitForOutput("alloc ok")) << h->out();
  Result r = RunProcess({ProbeBin(), "init", "meminfo", "nvml"}, node.env());
  ASSERT_EQ(r.code, 0) << r.err;
  uint64_t total = 81559 * kMiB;
  uint64_t expect_used = 4 * kGiB + 5 * 100 * kMiB;  // four holders + five contexts
  auto cuda = Fields(r.out, "meminfo");
  EXPECT_EQ(U(cuda[2]), total);
  EXPECT_EQ(U(cuda[1]), total - expect_used);
  auto nvml = Fields(r.out, "nvml");
  EXPECT_EQ(U(nvml[1]), total);
  EXPECT_EQ(U(nvml[2]), expect_used);
  EXPECT_EQ(U(nvml[3]), total - expect_used);
  EXPECT_EQ(U(nvml[5]), expect_used);  // v2 agrees with v1
  EXPECT_EQ(U(nvml[7]), 5u);           // five processes on the card
  EXPECT_EQ(U(nvml[8]), 100 * kMiB);   // this one: its context only

  // A holder killed with SIGKILL gives its memory back.
  holders[0]->Signal(SIGKILL);
  holders[0]->Wait();
  r = RunProcess({ProbeBin(), "init", "nvml"}, node.env());
  nvml = Fields(r.out, "nvml");
  EXPECT_EQ(U(nvml[2]), 3 * kGiB + 4 * 100 * kMiB);
  EXPECT_EQ(U(nvml[7]), 4u);
}

TEST(Simulator, EveryAllocationApiDrawsFromTheCardAndGivesBack) {
  SimNode node("context_memory: 0\ngpus: [A100-40GB]\n");
  for (const char* kind : {"mem", "pitch", "managed", "async", "pool", "vmm", "array", "array3d", "mipmap", "graph"}) {
    Result r = RunProcess({ProbeBin(), "init", "alloc", kind, "64m", "nvml", "free", "nvml"}, node.env());
    ASSERT_EQ(r.code, 0) << kind << ": " << r.err;
    ASSERT_EQ(Lines(r.out, "alloc")[0], "alloc ok") << kind << "\n" << r.out;
    auto nv = Lines(r.out, "nvml");
    ASSERT_EQ(nv.size(), 2u);
    uint64_t during = U(Fields(nv[0], "nvml")[2]), after = U(Fields(nv[1], "nvml")[2]);
    EXPECT_GE(during, 64 * kMiB) << kind;
    EXPECT_LE(during, 66 * kMiB) << kind;
    EXPECT_EQ(after, 0u) << kind;
  }
  // Host-located VMM memory is not device memory.
  Result r = RunProcess({ProbeBin(), "init", "alloc", "vmmhost", "64m", "nvml"}, node.env());
  EXPECT_EQ(Lines(r.out, "alloc")[0], "alloc ok");
  EXPECT_EQ(U(Fields(r.out, "nvml")[2]), 0u);
}

TEST(Simulator, CopiesMoveRealBytes) {
  SimNode node("gpus: [L4]\n");
  for (const char* kind : {"mem", "managed", "vmm", "async"}) {
    Result r = RunProcess(
        {ProbeBin(), "init", "alloc", kind, "32m", "fill", "32m", "7", "check", "32m", "7", "check", "32m", "8"},
        node.env());
    auto checks = Lines(r.out, "check");
    ASSERT_EQ(checks.size(), 2u) << kind << r.out << r.err;
    EXPECT_EQ(checks[0], "check ok") << kind;
    EXPECT_EQ(checks[1], "check CORRUPT") << kind;  // a different seed must not match
  }
}

TEST(Simulator, EveryPathToTheDriverWorks) {
  SimNode node("gpus: [T4]\n");
  for (const char* via : {"linked", "dlsym", "getproc"}) {
    Result r = RunProcess(
        {ProbeBin(), "--via", via, "init", "alloc", "mem", "1m", "alloc", "pool", "1m", "launch", "1", "1000", "sync"},
        node.env());
    EXPECT_EQ(r.code, 0) << via << r.out << r.err;
    EXPECT_EQ(Lines(r.out, "alloc ok").size(), 2u) << via << r.out;
  }
  Result r = RunProcess({ProbeBin(), "init", "symbols"}, node.env());
  auto f = Fields(r.out, "symbols");
  ASSERT_EQ(f.size(), 2u) << r.out;
  EXPECT_EQ(f[1].substr(0, f[1].find('/')), f[1].substr(f[1].find('/') + 1));  // every symbol resolves
}

// The cost model: a spin kernel of NS nanoseconds with one block per SM runs NS; the GPU
// runs one kernel at a time across processes; NVML utilisation follows. Tolerance: 10 %
// of wall time (scheduling noise on a loaded 2-core CI machine).
TEST(Simulator, KernelTimeAndUtilisationFollowTheCostModel) {
  SimNode node("gpus: [H100-80GB]\n");
  auto start = std::chrono::steady_clock::now();
  Result r = RunProcess({ProbeBin(), "init", "launch", "10", "50000000", "sync"}, node.env());
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GE(secs, 0.5);
  EXPECT_LT(secs, 0.5 + 0.35);  // process start-up is included

  // Two processes, 0.5 s of kernels each: together they need 1 s of the one engine.
  start = std::chrono::steady_clock::now();
  Process a({ProbeBin(), "init", "launch", "10", "50000000", "sync"}, node.env());
  Process b({ProbeBin(), "init", "launch", "10", "50000000", "sync"}, node.env());
  a.Wait();
  b.Wait();
  secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(secs, 1.0);
  EXPECT_LT(secs, 1.0 + 0.4);

  // Every launch path runs on the same timeline: Ex, cooperative, a captured graph.
  start = std::chrono::steady_clock::now();
  r = RunProcess(
      {ProbeBin(), "init", "launchex", "4", "50000000", "coop", "4", "50000000", "graph", "4", "50000000", "sync"},
      node.env());
  secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_GE(secs, 0.6);
  EXPECT_LT(secs, 0.6 + 0.35);

  // NVML's device utilisation is that of the newest sample period visible (200 ms, 20 ms
  // late): right after 0.6 s of kernels it is a fully busy one; 450 ms later an idle one.
  r = RunProcess({ProbeBin(), "init", "launch", "1", "600000000", "sync", "util", "sleep", "450", "util"}, node.env());
  auto utils = Lines(r.out, "util");
  ASSERT_EQ(utils.size(), 2u) << r.out << r.err;
  EXPECT_EQ(utils[0], "util 100") << r.out;
  EXPECT_EQ(utils[1], "util 0") << r.out;
}

// NVML's per-process feed behaves as measured on the H100 (real-gpu-h100.md): a NULL
// buffer is answered INSUFFICIENT_SIZE with a fixed 72; polled every 20 ms, a new sample
// arrives once per 200 ms period and NOT_FOUND in between.
TEST(Simulator, NvmlProcessSamplesArriveOncePerPeriod) {
  SimNode node("gpus: [H100-80GB]\n");
  Process burn({GpusliceBin(), "burn", "--memory", "0", "--util", "100", "--seconds", "3"}, node.env());
  Result r = RunProcess({ProbeBin(), "sleep", "300", "procutil", "2000"}, node.env());
  burn.Wait();
  EXPECT_EQ(Lines(r.out, "procutil-size")[0], "procutil-size insufficient 72") << r.out << r.err;
  auto f = Fields(r.out, "procutil new");
  ASSERT_EQ(f.size(), 4u) << r.out;
  int fresh = std::stoi(f[1].substr(4)), not_found = std::stoi(f[2].substr(9));
  EXPECT_GE(fresh, 9) << r.out;  // 2 s of 200 ms periods
  EXPECT_LE(fresh, 11) << r.out;
  EXPECT_GE(not_found, 50) << r.out;  // most 20 ms polls find nothing new
  EXPECT_GE(std::stoi(f[3].substr(11)), 95) << r.out;

  // With the sample period set to 100 ms by the scenario, twice as many.
  SimNode fast("sample_period_ms: 100\ngpus: [H100-80GB]\n");
  Process burn2({GpusliceBin(), "burn", "--memory", "0", "--util", "100", "--seconds", "3"}, fast.env());
  r = RunProcess({ProbeBin(), "sleep", "300", "procutil", "2000"}, fast.env());
  burn2.Wait();
  f = Fields(r.out, "procutil new");
  ASSERT_EQ(f.size(), 4u) << r.out;
  EXPECT_GE(std::stoi(f[1].substr(4)), 18) << r.out;
  EXPECT_LE(std::stoi(f[1].substr(4)), 21) << r.out;
}

TEST(Simulator, XidInjectedNowAndScheduledReachNvmlEventSets) {
  SimNode node(
      "gpus: 2xA100-80GB\n"
      "faults:\n"
      "  - {at: 4s, gpu: 1, lost: true}\n");
  Process waiter({ProbeBin(), "init", "xid", "10000", "xid", "10000"}, node.env());
  ASSERT_TRUE(waiter.WaitForOutput("init ok"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Result inj = RunProcess({GpusliceBin(), "sim", "inject", "--root", node.root(), "--gpu", "0", "--xid", "48"});
  ASSERT_EQ(inj.code, 0) << inj.err;
  Result w = waiter.Wait();
  auto xids = Lines(w.out, "xid");
  ASSERT_EQ(xids.size(), 2u) << w.out;
  EXPECT_EQ(xids[0], "xid 48 this-device");
  EXPECT_EQ(xids[1], "xid 79 other-device");  // the scheduled fault: GPU 1 falls off the bus
  Result smi = RunProcess({GpusliceBin(), "smi", "--driver-root", node.root()});
  EXPECT_NE(smi.out.find("GPU is lost"), std::string::npos) << smi.out;
}

TEST(Simulator, CudaVisibleDevicesSelectsCards) {
  SimNode node("gpus: 1xT4,1xL4\n");
  Env env = node.env();
  env["CUDA_VISIBLE_DEVICES"] = "1";
  Result r = RunProcess({ProbeBin(), "init", "meminfo"}, env);
  EXPECT_EQ(U(Fields(r.out, "meminfo")[2]), 23034 * kMiB);  // the L4
  env["CUDA_VISIBLE_DEVICES"] = "7";
  r = RunProcess({ProbeBin(), "init"}, env);
  EXPECT_EQ(Lines(r.out, "init")[0], "init CUDA_ERROR_NO_DEVICE");
}

TEST(SimulatorCli, BadScenariosAreRefusedWithTheReason) {
  TempDir tmp("gs-sim-bad");
  const std::string& dir = tmp.path();
  Result r = RunProcess({GpusliceBin(), "sim", "up", "--gpus", "3xB200", "--root", dir});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("unknown GPU preset 'B200'"), std::string::npos) << r.err;
  r = RunProcess({GpusliceBin(), "sim", "up", "--root", dir});
  EXPECT_NE(r.err.find("--scenario FILE or --gpus"), std::string::npos) << r.err;
  r = RunProcess({GpusliceBin(), "sim", "status", "--root", dir});
  EXPECT_NE(r.code, 0);
  r = RunProcess({GpusliceBin(), "burn", "--util", "150"});
  EXPECT_NE(r.err.find("--util: 150 is out of range [0, 100]"), std::string::npos) << r.err;
  rmdir(dir.c_str());
}

TEST(SimulatorCli, SmiAndBurnWorkAsAUserRunsThem) {
  SimNode node("gpus: 2xH100-80GB\n");
  Result burn = RunProcess(
      {GpusliceBin(), "burn", "--memory", "2g", "--verify-bytes", "32m", "--util", "50", "--seconds", "1.2", "--json"},
      node.env());
  ASSERT_EQ(burn.code, 0) << burn.out << burn.err;
  EXPECT_NE(burn.out.find("\"ok\":true"), std::string::npos) << burn.out;
  Result smi = RunProcess({"nvidia-smi"}, node.env());  // the node's nvidia-smi is gpuslice smi
  ASSERT_EQ(smi.code, 0) << smi.err;
  EXPECT_NE(smi.out.find("NVIDIA H100 80GB HBM3"), std::string::npos);
  EXPECT_NE(smi.out.find("81559MiB"), std::string::npos) << smi.out;
  Result env = RunProcess({GpusliceBin(), "sim", "env", "--root", node.root()});
  EXPECT_NE(env.out.find("export LD_LIBRARY_PATH='" + node.root()), std::string::npos) << env.out;
}

}  // namespace
}  // namespace gs::testing
