// The enforcer against the simulator, with real processes: exact limits on every
// allocation path and every way of reaching the driver, racing processes, agreeing
// views, virtual device memory, crash and PID-reuse safety, the compute share.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "tests/harness.h"

namespace gs::testing {
namespace {

// Bytes in use by a cuda_probe "meminfo FREE TOTAL" line (total - free).
uint64_t MeminfoUsed(const std::string& line) {
  std::istringstream in(line);
  std::string tag;
  uint64_t free = 0, total = 0;
  in >> tag >> free >> total;
  return total - free;
}

TEST(Enforcer, LimitIsExactOnEveryAllocationApiAndPath) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  for (const char* via : {"linked", "dlsym", "getproc"}) {
    for (const char* kind :
         {"mem", "pitch", "managed", "async", "pool", "vmm", "array", "array3d", "mipmap", "graph"}) {
      Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"},
                               {"GPUSLICE_CONTEXT_OVERHEAD", "0"},
                               {"CUDA_DEVICE_MEMORY_SHARED_CACHE", node.root() + "/region-" + via + kind}});
      Result r =
          RunProcess({ProbeBin(), "--via", via,     "init", "alloc", kind,   "768m", "alloc", kind, "512m", "alloc",
                      kind,       "256m",  "alloc", kind,   "2m",    "free", "free", "alloc", kind, "1g"},
                     env);
      auto a = Lines(r.out, "alloc");
      ASSERT_EQ(a.size(), 5u) << via << " " << kind << "\n" << r.out << r.err;
      EXPECT_EQ(a[0], "alloc ok") << via << " " << kind;
      EXPECT_EQ(a[1], "alloc err CUDA_ERROR_OUT_OF_MEMORY") << via << " " << kind;  // 768 + 512 > 1024
      EXPECT_EQ(a[2], "alloc ok") << via << " " << kind;                            // 768 + 256 = 1024
      EXPECT_EQ(a[3], "alloc err CUDA_ERROR_OUT_OF_MEMORY") << via << " " << kind;  // not one page more
      EXPECT_EQ(a[4], "alloc ok") << via << " " << kind;  // frees returned exactly what was counted
    }
  }
}

TEST(Enforcer, HostLocatedVmmPassesThroughUncounted) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "64m"}, {"GPUSLICE_CONTEXT_OVERHEAD", "0"}});
  Result r = RunProcess({ProbeBin(), "init", "alloc", "vmmhost", "256m", "alloc", "mem", "64m"}, env);
  auto a = Lines(r.out, "alloc");
  ASSERT_EQ(a.size(), 2u) << r.out << r.err;
  EXPECT_EQ(a[0], "alloc ok");
  EXPECT_EQ(a[1], "alloc ok");
}

// Eight processes of one container (one PID namespace, as in a pod) race for its memory.
TEST(Enforcer, RacingProcessesNeverOvershootTheContainerLimit) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}, {"GPUSLICE_CONTEXT_OVERHEAD", "0"}});
  std::string probe = ProbeBin() + " init";
  for (int k = 0; k < 4; ++k) probe += " alloc mem 128m";
  probe += " sleep 1500";
  std::string script;
  for (int i = 0; i < 8; ++i) script += probe + " & ";
  Result r = RunProcess(AsContainer({"/bin/sh", "-c", script + "wait"}), env);
  int ok = static_cast<int>(Lines(r.out, "alloc ok").size());
  int refused = static_cast<int>(Lines(r.out, "alloc err CUDA_ERROR_OUT_OF_MEMORY").size());
  EXPECT_EQ(ok, 16);  // exactly 2 GiB in 128 MiB pieces, never more
  EXPECT_EQ(refused, 16);
}

TEST(Enforcer, CudaAndNvmlViewsAgree) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "4g"}, {"GPUSLICE_CONTEXT_OVERHEAD", "256m"}});
  Result r = RunProcess({ProbeBin(), "init", "alloc", "mem", "1g", "meminfo", "nvml"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  uint64_t used = kGiB + (256 + 6) * kMiB;  // the context: as configured, and the driver's unlisted part
  auto cuda = Fields(r.out, "meminfo");
  EXPECT_EQ(U(cuda[2]), 4 * kGiB);  // cuMemGetInfo total
  EXPECT_EQ(U(cuda[1]), 4 * kGiB - used);
  EXPECT_EQ(U(cuda[3]), 4 * kGiB);  // cuDeviceTotalMem
  auto nv = Fields(r.out, "nvml");
  EXPECT_EQ(U(nv[1]), 4 * kGiB);
  EXPECT_EQ(U(nv[2]), used);
  EXPECT_EQ(U(nv[3]), 4 * kGiB - used);
  EXPECT_EQ(U(nv[4]), 4 * kGiB);  // v2
  EXPECT_EQ(U(nv[5]), used);
  EXPECT_EQ(U(nv[7]), 1u);    // only the container's processes
  EXPECT_EQ(U(nv[8]), used);  // charged memory, context included
}

// Modules and libraries (cuLibraryLoadData: how the CUDA runtime loads a program's kernels
// since 12.0) are charged a documented estimate (2 MiB) and returned on unload.
TEST(Enforcer, ModulesAndLibrariesAreChargedAndReturned) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"GPUSLICE_CONTEXT_OVERHEAD", "0"}});
  Result r = RunProcess({ProbeBin(), "init", "modload", "meminfo", "libload", "meminfo", "modunload", "meminfo",
                         "libunload", "meminfo", "alloc", "mem", "1023m", "libload", "modload"},
                        env);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  auto info = Lines(r.out, "meminfo");
  ASSERT_EQ(info.size(), 4u);
  auto used = [&](size_t i) { return MeminfoUsed(info[i]); };
  EXPECT_EQ(used(0), 2 * kMiB);  // a module
  EXPECT_EQ(used(1), 4 * kMiB);  // and a library
  EXPECT_EQ(used(2), 2 * kMiB);  // module unloaded
  EXPECT_EQ(used(3), 0u);        // library unloaded: exactly what was counted comes back
  // 1 MiB left: neither fits, and the driver is not asked.
  EXPECT_EQ(Lines(r.out, "libload").back(), "libload CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(Lines(r.out, "modload").back(), "modload CUDA_ERROR_OUT_OF_MEMORY");
}

// What a module really takes on the card shows only after the driver loaded it (a 64 MiB
// .global took 64 MiB on the H100, docs/measurements/h100-driver.md): the enforcer reconciles with NVML's
// figure for its own pid, charges the difference, and unloads a module that does not fit.
TEST(Enforcer, ModulesAreChargedWhatTheCardSpendsOnThem) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "256m"}, {"GPUSLICE_CONTEXT_OVERHEAD", "0"}});
  Result r = RunProcess({ProbeBin(), "init", "modglobal", "64m", "meminfo", "nvml", "modglobal", "200m", "meminfo",
                         "modunload", "meminfo", "alloc", "mem", "256m", "alloc", "mem", "2m"},
                        env);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  auto info = Lines(r.out, "meminfo");
  ASSERT_EQ(info.size(), 3u);
  auto used = [&](size_t i) { return MeminfoUsed(info[i]); };
  EXPECT_EQ(Line(r.out, "modglobal"), "modglobal ok");
  EXPECT_EQ(used(0), 64 * kMiB);
  EXPECT_EQ(U(Field(r.out, "nvml", 2)), 64 * kMiB);  // NVML's view of the slice agrees
  // 64 + 200 MiB do not fit in 256: the second module is unloaded and refused.
  EXPECT_EQ(Line(r.out, "modglobal", 1), "modglobal CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(used(1), 64 * kMiB);
  EXPECT_EQ(used(2), 0u);  // unloaded: all of it comes back at once
  EXPECT_EQ(Line(r.out, "alloc"), "alloc ok");
  EXPECT_EQ(Line(r.out, "alloc", 1), "alloc err CUDA_ERROR_OUT_OF_MEMORY");
}

// Lazy loading (the driver's default since CUDA 12.2): a kernel's code reaches the card when
// the kernel is first resolved or launched, with no allocation call to hook. The enforcer
// looks at the card right after a function's first use, so the allocation that follows is
// refused when the code took the container's room, whether the code came by
// cuModuleGetFunction or by the first launch of a library's kernel (the CUDA runtime's
// way); a process the code leaves under its limit goes on working.
TEST(Enforcer, LazilyLoadedCodeCountsAgainstTheLimitAtItsFirstUse) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "128m"}, {"GPUSLICE_CONTEXT_OVERHEAD", "0"}});
  for (const char* how : {"module", "library"}) {
    std::vector<std::string> load = std::string(how) == "module"
                                        ? std::vector<std::string>{"modcode", "48m", "getfunc"}
                                        : std::vector<std::string>{"libcode", "48m", "getkernel"};
    std::vector<std::string> args = {ProbeBin(), "init"};
    args.insert(args.end(), load.begin(), load.end());
    for (const char* step : {"launchcode", "alloc", "mem", "96m", "alloc", "mem", "64m", "meminfo", "launchcode"})
      args.push_back(step);
    Result r = RunProcess(args, env);
    ASSERT_EQ(r.code, 0) << how << "\n" << r.out << r.err;
    auto a = Lines(r.out, "alloc");
    ASSERT_EQ(a.size(), 2u) << how << "\n" << r.out << r.err;
    EXPECT_EQ(a[0], "alloc err CUDA_ERROR_OUT_OF_MEMORY") << how;  // 48 of code + 96 > 128
    EXPECT_EQ(a[1], "alloc ok") << how;                            // 48 + 64 fit
    EXPECT_EQ(MeminfoUsed(Line(r.out, "meminfo")), 112 * kMiB) << how;
    EXPECT_EQ(Lines(r.out, "launchcode").back(), "launchcode ok") << how;

    // Under the limit: 16 MiB of code and 96 MiB of data fit in 128, and it keeps working.
    args = {ProbeBin(), "init", std::string(how) == "module" ? "modcode" : "libcode", "16m",
            std::string(how) == "module" ? "getfunc" : "getkernel"};
    for (const char* step : {"launchcode", "alloc", "mem", "96m", "launchcode", "meminfo"}) args.push_back(step);
    r = RunProcess(args, env);
    ASSERT_EQ(r.code, 0) << how << "\n" << r.out << r.err;
    EXPECT_EQ(Line(r.out, "alloc"), "alloc ok") << how << "\n" << r.out << r.err;
    EXPECT_EQ(Lines(r.out, "launchcode").back(), "launchcode ok") << how;
    EXPECT_EQ(MeminfoUsed(Line(r.out, "meminfo")), 112 * kMiB) << how;
  }
}

// Memory that appears without any hooked call (here a graph's kernel, loaded when the graph
// is instantiated) is found by the reconciliation every charge makes at most 100 ms after
// the last: an allocation 150 ms later is refused when that memory took the room.
TEST(Enforcer, MemoryNoCallShowsIsChargedByTheNextAllocationAfter100ms) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "128m"}, {"GPUSLICE_CONTEXT_OVERHEAD", "0"}});
  Result r = RunProcess({ProbeBin(), "init", "libcode", "48m", "getkernel", "graphcode", "sleep", "150", "alloc", "mem",
                         "96m", "alloc", "mem", "64m", "meminfo"},
                        env);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Line(r.out, "graphcode"), "graphcode ok");
  auto a = Lines(r.out, "alloc");
  ASSERT_EQ(a.size(), 2u) << r.out << r.err;
  EXPECT_EQ(a[0], "alloc err CUDA_ERROR_OUT_OF_MEMORY") << r.out << r.err;
  EXPECT_EQ(a[1], "alloc ok");
  EXPECT_EQ(MeminfoUsed(Line(r.out, "meminfo")), 112 * kMiB);
}

// An array wider than the card's texture extent is refused by the driver as invalid, not
// as out of memory (docs/measurements/h100-driver.md), and what the enforcer reserved for it comes back.
TEST(Enforcer, ArraysBeyondTheTextureExtentsAreTheDriversRefusalAndCostNothing) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"GPUSLICE_CONTEXT_OVERHEAD", "0"}});
  Result r = RunProcess(
      {ProbeBin(), "init", "array2d", "196608", "1024", "meminfo", "array2d", "131072", "1024", "meminfo"}, env);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  auto a = Lines(r.out, "array2d");
  ASSERT_EQ(a.size(), 2u) << r.out << r.err;
  EXPECT_EQ(a[0], "array2d CUDA_ERROR_INVALID_VALUE");  // 768 MiB fits the limit, not the extent
  EXPECT_EQ(MeminfoUsed(Line(r.out, "meminfo")), 0u);
  EXPECT_EQ(a[1], "array2d ok");
  EXPECT_EQ(MeminfoUsed(Line(r.out, "meminfo", 1)), 512 * kMiB);
}

TEST(Enforcer, ViewsNeverGoNegativeWhenUsageIsOverATighterLimit) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "4g"}, {"GPUSLICE_CONTEXT_OVERHEAD", "0"}});
  Process holder({ProbeBin(), "init", "alloc", "mem", "3g", "sleep", "20000"}, env);
  ASSERT_TRUE(holder.WaitForOutput("alloc ok")) << holder.out();
  Env tighter = env;
  tighter["CUDA_DEVICE_MEMORY_LIMIT"] = "2g";  // a process may tighten its own view
  Result r = RunProcess({ProbeBin(), "init", "meminfo", "nvml", "alloc", "mem", "1m"}, tighter);
  auto cuda = Fields(r.out, "meminfo");
  EXPECT_EQ(U(cuda[1]), 0u);
  EXPECT_EQ(U(cuda[2]), 2 * kGiB);
  auto nv = Fields(r.out, "nvml");
  EXPECT_EQ(U(nv[1]), 2 * kGiB);
  EXPECT_EQ(U(nv[2]), 2 * kGiB);
  EXPECT_EQ(U(nv[3]), 0u);
  EXPECT_EQ(Line(r.out, "alloc"), "alloc err CUDA_ERROR_OUT_OF_MEMORY");
}

TEST(Enforcer, KilledProcessesLoseNoAccountingAndReusedPidsInheritNothing) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}, {"GPUSLICE_CONTEXT_OVERHEAD", "0"}});
  for (int round = 0; round < 3; ++round) {
    Process victim({ProbeBin(), "init", "alloc", "mem", "1536m", "sleep", "20000"}, env);
    ASSERT_TRUE(victim.WaitForOutput("alloc ok"));
    Result blocked = RunProcess({ProbeBin(), "init", "alloc", "mem", "1g"}, env);
    EXPECT_EQ(Line(blocked.out, "alloc"), "alloc err CUDA_ERROR_OUT_OF_MEMORY");
    victim.Signal(SIGKILL);
    victim.Wait();
    // The next process to join sweeps the dead one: the whole limit is free again.
    Result after = RunProcess({ProbeBin(), "init", "alloc", "mem", "2g", "meminfo"}, env);
    EXPECT_EQ(Line(after.out, "alloc"), "alloc ok") << after.out << after.err;
  }
}

TEST(Enforcer, OversubscriptionSpillsToHostWithDataIntact) {
  // A 2 GiB card; the slice's limit is 4 GiB of virtual device memory.
  std::string scenario = "context_memory: 0\ngpus: [{name: Small GPU, memory: 2Gi, sms: 20}]\n";
  SimNode node(scenario);
  Env env = node.enforced(
      {{"CUDA_DEVICE_MEMORY_LIMIT", "4g"}, {"GPUSLICE_CONTEXT_OVERHEAD", "0"}, {"CUDA_OVERSUBSCRIBE", "true"}});
  Result r = RunProcess({ProbeBin(), "init", "alloc", "mem", "1536m", "alloc", "mem", "2g", "fill", "64m", "42",
                         "check", "64m", "42", "alloc", "mem", "1g", "meminfo"},
                        env);
  auto a = Lines(r.out, "alloc");
  ASSERT_EQ(a.size(), 3u) << r.out << r.err;
  EXPECT_EQ(a[0], "alloc ok");
  EXPECT_EQ(a[1], "alloc ok");  // beyond the card's free memory, within the slice
  EXPECT_EQ(Line(r.out, "check"), "check ok");
  EXPECT_EQ(a[2], "alloc err CUDA_ERROR_OUT_OF_MEMORY");  // beyond the slice: never
  EXPECT_EQ(U(Field(r.out, "meminfo", 2)), 4 * kGiB);

  env["CUDA_OVERSUBSCRIBE"] = "false";
  env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = node.root() + "/region2";
  r = RunProcess({ProbeBin(), "init", "alloc", "mem", "1536m", "alloc", "mem", "2g"}, env);
  EXPECT_EQ(Line(r.out, "alloc", 1), "alloc err CUDA_ERROR_OUT_OF_MEMORY");
}

TEST(Enforcer, UnopenableRegionFallsBackToPerProcessLimitsAndSaysSo) {
  SimNode node("context_memory: 0\ngpus: [T4]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"},
                           {"GPUSLICE_CONTEXT_OVERHEAD", "0"},
                           {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/nonexistent-dir/region"}});
  Result r = RunProcess({ProbeBin(), "init", "alloc", "mem", "1g", "alloc", "mem", "1m"}, env);
  EXPECT_NE(r.err.find("cannot open region /nonexistent-dir/region"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("enforced for this process alone"), std::string::npos) << r.err;
  auto a = Lines(r.out, "alloc");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0], "alloc ok");
  EXPECT_EQ(a[1], "alloc err CUDA_ERROR_OUT_OF_MEMORY");  // still limited
}

TEST(Enforcer, ForeignRegionFileIsRefusedWithAClearError) {
  SimNode node("context_memory: 0\ngpus: [T4]\n");
  std::string path = node.root() + "/foreign";
  std::ofstream(path) << std::string(1 << 20, 'z');
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"CUDA_DEVICE_MEMORY_SHARED_CACHE", path}});
  Result r = RunProcess({ProbeBin(), "init", "alloc", "mem", "2g"}, env);
  EXPECT_NE(r.err.find("not a gpuslice region"), std::string::npos) << r.err;
  EXPECT_EQ(Line(r.out, "alloc"), "alloc err CUDA_ERROR_OUT_OF_MEMORY");
}

TEST(Enforcer, LimitsFileIsAuthoritativeAgainstTheEnvironment) {
  SimNode node("context_memory: 0\ngpus: [T4]\n");
  std::string file = node.root() + "/limits";
  std::ofstream(file) << "# from the node agent\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\nGPUSLICE_CONTEXT_OVERHEAD=0\n";
  Env env = node.enforced(
      {{"CUDA_DEVICE_MEMORY_LIMIT", "8g"}, {"GPUSLICE_LIMITS_FILE", file}, {"GPUSLICE_CONTEXT_OVERHEAD", "0"}});
  Result r = RunProcess({ProbeBin(), "init", "alloc", "mem", "2g", "alloc", "mem", "1g"}, env);
  auto a = Lines(r.out, "alloc");
  ASSERT_EQ(a.size(), 2u) << r.out << r.err;
  EXPECT_EQ(a[0], "alloc err CUDA_ERROR_OUT_OF_MEMORY");  // env cannot loosen
  EXPECT_EQ(a[1], "alloc ok");
}

TEST(Enforcer, GarbageLimitDeniesInsteadOfUnlimiting) {
  SimNode node("context_memory: 0\ngpus: [T4]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "lots"}});
  Result r = RunProcess({ProbeBin(), "init", "alloc", "mem", "1m"}, env);
  EXPECT_NE(r.err.find("CUDA_DEVICE_MEMORY_LIMIT=lots is not a size"), std::string::npos) << r.err;
  EXPECT_EQ(Line(r.out, "init"), "init CUDA_ERROR_OUT_OF_MEMORY");  // not even a context fits
}

TEST(Enforcer, GpusliceRunHoldsAProgramToItsSlice) {
  SimNode node("gpus: [H100-80GB]\n");
  Result r = RunProcess({GpusliceBin(), "run", "--memory", "3g", "--", ProbeBin(), "init", "alloc", "mem", "2g",
                         "alloc", "mem", "1g", "meminfo"},
                        node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  auto a = Lines(r.out, "alloc");
  EXPECT_EQ(a[0], "alloc ok");
  EXPECT_EQ(a[1], "alloc err CUDA_ERROR_OUT_OF_MEMORY");  // 2g + 1g + the context > 3g
  EXPECT_EQ(U(Field(r.out, "meminfo", 2)), 3 * kGiB);
  Result bad = RunProcess({GpusliceBin(), "run", "--memory", "3q", "--", "true"}, node.env());
  EXPECT_NE(bad.err.find("--memory: '3q' is not a size"), std::string::npos) << bad.err;
}

// `gpuslice run --device 1` on a two-card node, and a program that sets its own
// CUDA_VISIBLE_DEVICES (here for the probe it starts): whatever order it sees the cards in,
// the granted card is held to its limit (the run binds its limits to the card's UUID, as
// the node agent does), and the card it was not granted gives no context, with a memory
// limit or a compute share alone.
TEST(Enforcer, GpusliceRunBindsItsSliceToTheGrantedCardWhateverTheProgramSees) {
  SimNode node("gpus: 2xH100-80GB\n");
  struct Order {
    const char* visible;
    const char* granted;  // the ordinal of card 1 in that order
    const char* other;    // the ordinal of card 0
  };
  auto run = [&](const std::vector<std::string>& slice, const Order& o, std::vector<std::string> probe) {
    std::vector<std::string> argv{GpusliceBin(), "run", "--device", "1"};
    argv.insert(argv.end(), slice.begin(), slice.end());
    argv.insert(argv.end(), {"--", "/usr/bin/env", std::string("CUDA_VISIBLE_DEVICES=") + o.visible, ProbeBin()});
    argv.insert(argv.end(), probe.begin(), probe.end());
    return RunProcess(argv, node.env());
  };
  for (const Order& o : {Order{"0,1", "1", "0"}, Order{"1,0", "0", "1"}}) {
    Result r = run({"--memory", "2g"}, o, {"init", o.granted, "alloc", "mem", "16g", "alloc", "mem", "1g", "meminfo"});
    auto a = Lines(r.out, "alloc");
    ASSERT_EQ(a.size(), 2u) << o.visible << "\n" << r.out << r.err;
    EXPECT_EQ(a[0], "alloc err CUDA_ERROR_OUT_OF_MEMORY") << "granted card as ordinal " << o.granted;
    EXPECT_EQ(a[1], "alloc ok") << o.visible;  // 1 GiB + the 518 MiB context fit 2 GiB
    EXPECT_EQ(U(Field(r.out, "meminfo", 2)), 2 * kGiB) << o.visible;
    Result other = run({"--memory", "2g"}, o, {"init", o.other, "alloc", "mem", "16g"});
    EXPECT_EQ(Line(other.out, "init"), "init CUDA_ERROR_DEVICE_UNAVAILABLE")
        << "ungranted card as ordinal " << o.other << "\n"
        << other.out << other.err;
    Result share = run({"--cores", "30"}, o, {"init", o.other, "launch", "1", "1000", "sync"});
    EXPECT_EQ(Line(share.out, "init"), "init CUDA_ERROR_DEVICE_UNAVAILABLE")
        << "ungranted card as ordinal " << o.other << " (compute share only)\n"
        << share.out << share.err;
  }
}

// Runs of one user share a directory; a run's own directory is known to be live by its
// supervisor's lock, not by a pid (every container's supervisor may be a PID 1). A directory
// left by a killed supervisor goes; a live one stays, whatever pid it was made by.
TEST(Enforcer, GpusliceRunKeepsLiveRunsAndRemovesDeadOnes) {
  SimNode node("gpus: [H100-80GB]\n");
  std::string runs = node.root() + "/runs";
  std::filesystem::create_directories(runs + "/run-dead");
  std::filesystem::create_directories(runs + "/run-live");
  std::ofstream(runs + "/run-dead/lock") << "";
  int held = open((runs + "/run-live/lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  ASSERT_EQ(flock(held, LOCK_EX), 0);
  Result r = RunProcess({GpusliceBin(), "run", "--memory", "1g", "--", "/bin/sh", "-c", "ls \"$GPUSLICE_RUN_DIR\""},
                        node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("run-dead"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run-live"), std::string::npos) << r.out;
  EXPECT_EQ(Lines(r.out, "run-").size(), 2u) << "its own and the live one: " << r.out;
  close(held);
  EXPECT_TRUE(std::filesystem::exists(runs + "/run-live"));
}

// Runs started at once each sweep the runs directory for dead runs' directories while the
// others are making theirs: none may take another's for dead. (A run's lock file made
// first and locked after would let a sweep in between lock it and remove the directory: a
// run then fails with "card entry owner .../run-… is not a directory".)
TEST(Enforcer, GpusliceRunsStartedAtOnceKeepEachOthersDirectories) {
  SimNode node("gpus: [H100-80GB]\n");
  for (int round = 0; round < 3; ++round) {
    std::vector<std::unique_ptr<Process>> runs;
    for (int k = 0; k < 16; ++k)
      runs.push_back(std::make_unique<Process>(
          std::vector<std::string>{GpusliceBin(), "run", "--memory", "1g", "--cores", "30", "--", "true"}, node.env()));
    for (auto& p : runs) {
      Result r = p->Wait();
      EXPECT_EQ(r.code, 0) << "round " << round << ": " << r.out << r.err;
    }
  }
}

// `gpuslice run` with a compute share around `gpuslice burn` at 100 % for `seconds`.
std::vector<std::string> BurnRun(const std::string& cores, const std::string& policy, int seconds,
                                 std::vector<std::string> burn_flags = {}) {
  std::vector<std::string> argv{GpusliceBin(), "run",    "--cores",     cores,       "--policy",
                                policy,        "--",     GpusliceBin(), "burn",      "--memory",
                                "0",           "--util", "100",         "--seconds", std::to_string(seconds)};
  argv.insert(argv.end(), burn_flags.begin(), burn_flags.end());
  return argv;
}

// The compute share's reference scenarios, at both NVML sample periods the simulator is calibrated for
// (200 ms as measured on the H100, 100 ms). The limiter takes turns on the card; NVML's
// utilisation is used only to charge a lone tenant under force what the card was busy in its
// turns. The period must not matter; these prove it.
class EnforcerComputeAtSamplePeriod : public ::testing::TestWithParam<int> {
 protected:
  std::string Scenario() const { return "gpus: [H100-80GB]\nsample_period_ms: " + std::to_string(GetParam()) + "\n"; }
};

TEST_P(EnforcerComputeAtSamplePeriod, OneContainerAloneIsHeldToItsShareWithPolicyForce) {
  SimNode node(Scenario());
  for (const char* share : {"30", "60"}) {
    Result r = RunProcess(BurnRun(share, "force", 6), node.env());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NEAR(BurnUtil(r.out), std::stod(share), 5.0) << r.out;
  }
}

// 30/70 under policy default: each within 5 points of its share, together >= 90 % of the
// card (a lone container under default takes > 90 %: DefaultPolicyLetsALoneContainer...).
TEST_P(EnforcerComputeAtSamplePeriod, TwoContainersGetTheirSharesAndKeepTheCardBusy) {
  SimNode node(Scenario());
  // Both workloads are the PID 1 of their own namespaces, as in two pods.
  Process a(AsContainer(BurnRun("30", "default", 6)), node.env());
  Process b(AsContainer(BurnRun("70", "default", 6)), node.env());
  Result ra = a.Wait(), rb = b.Wait();
  std::cout << "30/70: " << BurnUtil(ra.out) << " / " << BurnUtil(rb.out) << "\n";
  EXPECT_NEAR(BurnUtil(ra.out), 30, 5) << ra.out << ra.err;
  EXPECT_NEAR(BurnUtil(rb.out), 70, 5) << rb.out << rb.err;
  EXPECT_GE(BurnUtil(ra.out) + BurnUtil(rb.out), 90) << ra.out << rb.out;
}

TEST_P(EnforcerComputeAtSamplePeriod, ThreeContainersShareOneCard) {
  SimNode node(Scenario());
  std::vector<std::unique_ptr<Process>> ps;
  const double want[] = {20, 30, 50};
  for (double share : want)
    ps.push_back(std::make_unique<Process>(AsContainer(BurnRun(std::to_string(int(share)), "default", 6)), node.env()));
  for (int i = 0; i < 3; ++i) {
    Result r = ps[i]->Wait();
    EXPECT_NEAR(BurnUtil(r.out), want[i], 5) << r.out << r.err;
  }
}

// A share caps the card's time a tenant uses: a host-bound program (20 us of CPU work before
// each 5 us kernel) that keeps the card about 22 % busy alone keeps that under a 60 %
// share (policy force), and is held to 10 % under a 10 % one. Charged each turn's whole
// length, it ran only its share of the time: 12.3 % at 60 % (5.7 % at 30 %). The first
// 1.3 s of a run are charged whole turns (src/enforcer/card_busy.h), so a 6 s run ends a
// little under its steady figure. The figure is NVML's utilisation over the time held, whatever
// NVML's sample period.
TEST_P(EnforcerComputeAtSamplePeriod, AHostBoundProgramIsCappedNotSlowed) {
  SimNode node(Scenario());
  const std::vector<std::string> host_bound = {"--host-us", "20", "--kernel-us", "5"};
  std::vector<std::string> alone_run = {GpusliceBin(), "burn", "--memory", "0", "--seconds", "3"};
  alone_run.insert(alone_run.end(), host_bound.begin(), host_bound.end());
  Result alone = RunProcess(alone_run, node.env());
  ASSERT_EQ(alone.code, 0) << alone.out << alone.err;
  const double used = BurnUtil(alone.out);
  ASSERT_GT(used, 10) << alone.out;  // the test's premise: it uses well over the 10 % share
  ASSERT_LT(used, 50) << alone.out;  // and well under the 60 % one
  for (const char* share : {"60", "10"}) {
    Result held = RunProcess(BurnRun(share, "force", 6, host_bound), node.env());
    ASSERT_EQ(held.code, 0) << held.out << held.err;
    const double cap = std::min(used, std::stod(share));
    std::cout << "host-bound, alone " << used << " %; at " << share << " %: " << BurnUtil(held.out) << " %\n";
    EXPECT_NEAR(BurnUtil(held.out), cap, 5) << share << " %\n" << held.out << held.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Period, EnforcerComputeAtSamplePeriod, ::testing::Values(200, 100),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param) + "ms"; });

// Kernels from 5 us to 50 ms: a 30 % share (policy force) holds within 5 points of what the
// same workload gets alone. Short kernels are where turn changes cost the most (each one
// drains the queue) and where a launch count learned wrongly holds a container far below
// its share.
TEST(EnforcerCompute, SharesHoldForKernelsFrom5usTo50ms) {
  SimNode node("gpus: [H100-80GB]\n");
  for (const char* kernel_us : {"5", "100", "2000", "50000"}) {
    Result alone = RunProcess(
        {GpusliceBin(), "burn", "--memory", "0", "--util", "100", "--seconds", "2", "--kernel-us", kernel_us},
        node.env());
    Result held = RunProcess(BurnRun("30", "force", 4, {"--kernel-us", kernel_us}), node.env());
    ASSERT_EQ(held.code, 0) << held.out << held.err;
    double relative = 100 * BurnUtil(held.out) / BurnUtil(alone.out);
    std::cout << kernel_us << " us kernels: alone " << BurnUtil(alone.out) << " %, at 30 %: " << BurnUtil(held.out)
              << " % = " << relative << " % of alone\n";
    EXPECT_NEAR(relative, 30, 5) << kernel_us << " us\n" << held.out << held.err;
  }
}

// A green context's kernels, launched on a stream of its own with no context current (the
// launch runs in the stream's context), are held to the share like any other. Gated on the
// current context's device only, they ran ungated: 99.3 %.
TEST(EnforcerCompute, AGreenContextsKernelsAreHeldToTheShare) {
  SimNode node("gpus: [H100-80GB]\n");
  Result r = RunProcess({GpusliceBin(), "run", "--cores", "30", "--policy", "force", "--", ProbeBin(), "init",
                         "greenctx", "greenburn", "3000", "2000000"},
                        node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  auto f = Fields(r.out, "greenburn");
  ASSERT_EQ(f.size(), 2u) << r.out << r.err;
  std::cout << "a green context's kernels at 30 %: " << f[1] << " %\n";
  EXPECT_NEAR(std::stod(f[1]), 30, 5) << r.out << r.err;
}

// A turn cannot preempt a running kernel. Two containers at 30/70, both saturating with
// single kernels far longer than a turn (10-20 ms) and than the starvation guard's bound
// (140 ms): the holder keeps the card while it drains its kernel, is charged all of it and
// repays it before its next turn; the waiter keeps what it earned meanwhile. Each gets its
// share within 5 points, under policy default and force.
struct LongKernels {
  const char* policy;
  const char* kernel_us;
  friend std::ostream& operator<<(std::ostream& os, const LongKernels& k) {
    return os << k.policy << ", " << k.kernel_us << " us";
  }
};
class EnforcerComputeLongKernels : public ::testing::TestWithParam<LongKernels> {};

TEST_P(EnforcerComputeLongKernels, EachContainerGetsItsShare) {
  auto [policy, kernel_us] = GetParam();
  SimNode node("gpus: [H100-80GB]\n");
  Process a(AsContainer(BurnRun("30", policy, 6, {"--kernel-us", kernel_us})), node.env());
  Process b(AsContainer(BurnRun("70", policy, 6, {"--kernel-us", kernel_us})), node.env());
  Result ra = a.Wait(), rb = b.Wait();
  ASSERT_EQ(ra.code, 0) << ra.out << ra.err;
  ASSERT_EQ(rb.code, 0) << rb.out << rb.err;
  std::cout << policy << ", " << kernel_us << " us kernels, 30/70: " << BurnUtil(ra.out) << " / " << BurnUtil(rb.out)
            << "\n";
  EXPECT_NEAR(BurnUtil(ra.out), 30, 5) << ra.out << ra.err;
  EXPECT_NEAR(BurnUtil(rb.out), 70, 5) << rb.out << rb.err;
  EXPECT_EQ(rb.err.find("not handing out turns fairly"), std::string::npos) << rb.err;
  EXPECT_EQ(ra.err.find("not handing out turns fairly"), std::string::npos) << ra.err;
}

INSTANTIATE_TEST_SUITE_P(Kernels, EnforcerComputeLongKernels,
                         ::testing::Values(LongKernels{"default", "300000"}, LongKernels{"force", "150000"}),
                         [](const auto& p) { return std::string(p.param.policy) + "_" + p.param.kernel_us + "us"; });

// A container that first launches 64 kernels of 5 us (a short cost per launch learned, so
// a turn would admit thousands of launches), then queues eight of 50 ms, round after
// round, beside one that saturates the card: it takes no more than its 30 % share + 5, and
// the other keeps at least its 70 % - 5. The attacker's 6 s start together 1.5 s after the
// saturating one and end before it does, so it never has the card alone: a process that
// starts late on a loaded machine must not make idle capacity look like a stolen share.
TEST(EnforcerCompute, ShortKernelsDoNotLetLongOnesThroughBeyondTheShare) {
  SimNode node("gpus: [H100-80GB]\n");
  const auto begin = std::chrono::system_clock::now() + std::chrono::milliseconds(1500);
  const std::string at =
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(begin.time_since_epoch()).count());
  Process honest(AsContainer(BurnRun("70", "default", 10)), node.env());
  Process attacker(AsContainer({GpusliceBin(), "run", "--cores", "30", "--policy", "default", "--", ProbeBin(), "init",
                                "at", at, "mixburn", "6000", "64", "5000", "8", "50000000"}),
                   node.env());
  Result ra = attacker.Wait(), rh = honest.Wait();
  ASSERT_EQ(ra.code, 0) << ra.out << ra.err;
  ASSERT_EQ(rh.code, 0) << rh.out << rh.err;
  auto mix = Fields(ra.out, "mixburn");
  ASSERT_EQ(mix.size(), 2u) << ra.out << ra.err;
  double taken = std::stod(mix[1]);
  std::cout << "short then long kernels at 30 %: " << taken << " %, beside it at 70 %: " << BurnUtil(rh.out) << " %\n";
  EXPECT_LE(taken, 35) << ra.out << ra.err;
  EXPECT_GE(BurnUtil(rh.out), 65) << rh.out << rh.err;
}

// Many threads, each on a stream of its own, launching through cuLaunchKernelEx fetched
// with cuGetProcAddress (the CUDA runtime's way, and so cuBLAS's and cuDNN's), and
// cuLaunchKernelEx itself: one process's threads share its container's one budget.
TEST(EnforcerCompute, ThreadsStreamsAndTheRuntimesLaunchPathShareOneBudget) {
  SimNode node("gpus: [H100-80GB]\n");
  for (std::vector<std::string> how : {std::vector<std::string>{"--threads", "4", "--launch", "proc"},
                                       std::vector<std::string>{"--threads", "8", "--kernel-us", "1000"},
                                       std::vector<std::string>{"--launch", "ex", "--kernel-us", "500"}}) {
    Result r = RunProcess(BurnRun("30", "force", 4, how), node.env());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NEAR(BurnUtil(r.out), 30, 5) << how[0] << " " << how[1] << "\n" << r.out << r.err;
  }
}

// Two processes in one container (one gpuslice run) share its 40 %: together 40, not 80.
TEST(EnforcerCompute, ProcessesOfOneContainerShareItsBudget) {
  SimNode node("gpus: [H100-80GB]\n");
  const std::string burn = GpusliceBin() + " burn --memory 0 --util 100 --seconds 5";
  Result r = RunProcess({GpusliceBin(), "run", "--cores", "40", "--policy", "force", "--", "/bin/sh", "-c",
                         burn + " & " + burn + "; wait"},
                        node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  double total = 0;
  int runs = 0;
  for (const std::string& line : Lines(r.out, "burn: done")) {
    total += BurnUtil(line);
    ++runs;
  }
  ASSERT_EQ(runs, 2) << r.out;
  // One budget for the container, not one per process (that would be 80).
  EXPECT_NEAR(total, 40, 5) << r.out;
}

// One container with two GPUs and a different share on each: each device is held to its own.
TEST(EnforcerCompute, EveryDeviceOfAMultiGpuContainerIsLimited) {
  SimNode node("gpus: 2xH100-80GB\n");
  Env env = node.enforced(
      {{"CUDA_DEVICE_SM_LIMIT_0", "30"}, {"CUDA_DEVICE_SM_LIMIT_1", "60"}, {"GPU_CORE_UTILIZATION_POLICY", "force"}});
  Process a({GpusliceBin(), "burn", "--memory", "0", "--util", "100", "--seconds", "6", "--device", "0"}, env);
  Process b({GpusliceBin(), "burn", "--memory", "0", "--util", "100", "--seconds", "6", "--device", "1"}, env);
  Result ra = a.Wait(), rb = b.Wait();
  EXPECT_NEAR(BurnUtil(ra.out), 30, 5) << ra.out << ra.err;
  EXPECT_NEAR(BurnUtil(rb.out), 60, 5) << rb.out << rb.err;
}

// Deep asynchronous queues and every launch entry point are held back too (graphs,
// cuLaunchKernelEx, cooperative launches on one device or several, the deprecated cuLaunch,
// cuLaunchGrid and cuLaunchGridAsync): 0.5 s of kernels under a 25 % share cannot finish
// before about 2 s.
TEST(EnforcerCompute, EveryLaunchPathAndDeepQueuesAreGated) {
  SimNode node("gpus: [H100-80GB]\n");
  for (const char* how : {"launch", "launchex", "coop", "graph", "culaunch", "grid", "gridasync", "multidev"}) {
    auto start = std::chrono::steady_clock::now();
    Result r = RunProcess(
        {GpusliceBin(), "run", "--cores", "25", "--", ProbeBin(), "init", how, "20", "25000000", "sync"}, node.env());
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(r.code, 0) << how << r.out << r.err;
    EXPECT_GT(secs, 1.5) << how << ": not throttled";
    EXPECT_LT(secs, 3.5) << how << ": throttled too hard";
  }
}

// A cooperative launch on several devices at once waits for the turn of the one of them
// with a share, and is refused when two of them have one: their turns cannot be held
// together (src/enforcer/launch_hooks.cc).
TEST(EnforcerCompute, ALaunchOnTwoCardsIsGatedOnItsSharedOneOrRefused) {
  SimNode node("gpus: 2xH100-80GB\n");
  auto launch = [&](Env limits) {
    Result r = RunProcess({ProbeBin(), "init", "0", "multidev2", "1", "sync"}, node.enforced(limits));
    auto m = Lines(r.out, "multidev2");
    return m.empty() ? r.out + r.err : m[0];
  };
  EXPECT_EQ(launch({}), "multidev2 ok");
  EXPECT_EQ(launch({{"CUDA_DEVICE_SM_LIMIT_1", "60"}}), "multidev2 ok");
  EXPECT_EQ(launch({{"CUDA_DEVICE_SM_LIMIT_0", "30"}, {"CUDA_DEVICE_SM_LIMIT_1", "60"}}),
            "multidev2 CUDA_ERROR_NOT_SUPPORTED");
}

// CUDA_TASK_PRIORITY: while the priority-0 run computes, the priority-1 run on the same
// card keeps only a small share and the priority-0 one may take what it gives up, beyond
// its own 30 % (policy default). Without priorities they would get 60 % and 30 %.
TEST(EnforcerCompute, HigherPriorityTakesComputeFromLowerWhileActive) {
  SimNode node("gpus: [H100-80GB]\n");
  auto run = [&](const char* cores, const char* priority, const char* seconds) {
    return std::make_unique<Process>(
        std::vector<std::string>{GpusliceBin(), "run", "--cores", cores, "--policy", "default", "--priority", priority,
                                 "--", GpusliceBin(), "burn", "--memory", "0", "--util", "100", "--seconds", seconds},
        node.env());
  };
  // The better one runs a second longer, so the worse one is not measured alone after the
  // better one exits (which hands it the card at once).
  auto low = run("60", "1", "8");
  auto high = run("30", "0", "9");
  Result rl = low->Wait(), rh = high->Wait();
  ASSERT_EQ(rh.code, 0) << rh.out << rh.err;
  std::cout << "priority 0: " << BurnUtil(rh.out) << "%, priority 1: " << BurnUtil(rl.out) << "%\n";
  EXPECT_GT(BurnUtil(rh.out), 85) << rh.out << rh.err;  // measured 93
  EXPECT_LT(BurnUtil(rl.out), 10) << rl.out << rl.err;  // its 5 %, no idle capacity
}

// A process that exits while its container holds the card hands the card on as it goes:
// the next tenant gets it at once, not after the 200 ms the card gives a holder that died
// in its turn (with a warning in the next tenant's log).
TEST(EnforcerCompute, AProcessThatExitsInItsTurnHandsTheCardOn) {
  SimNode node("gpus: [H100-80GB]\n");
  auto burn = [&](const char* seconds) {
    // Alone under default its turn is renewed without a break: it exits holding the card.
    return RunProcess({GpusliceBin(), "run", "--cores", "30", "--policy", "default", "--", GpusliceBin(), "burn",
                       "--memory", "0", "--util", "100", "--kernel-us", "1000", "--seconds", seconds},
                      node.env());
  };
  ASSERT_EQ(burn("1").code, 0);
  for (int round = 0; round < 2; ++round) {
    Result next = burn("1");
    ASSERT_EQ(next.code, 0) << next.out << next.err;
    EXPECT_EQ(next.err.find("overran its turn"), std::string::npos) << next.err;
    EXPECT_GT(BurnUtil(next.out), 90) << next.out;  // ~85 when it waits out the grace
  }
}

TEST(EnforcerCompute, DefaultPolicyLetsALoneContainerUseIdleCapacity) {
  SimNode node("gpus: [H100-80GB]\n");
  Result r = RunProcess({GpusliceBin(), "run", "--cores", "30", "--policy", "default", "--", GpusliceBin(), "burn",
                         "--memory", "0", "--util", "100", "--seconds", "3"},
                        node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_GT(BurnUtil(r.out), 90) << r.out;
  r = RunProcess({GpusliceBin(), "run", "--cores", "30", "--policy", "disable", "--", GpusliceBin(), "burn", "--memory",
                  "0", "--util", "100", "--seconds", "2"},
                 node.env());
  EXPECT_GT(BurnUtil(r.out), 95) << r.out;
}

}  // namespace
}  // namespace gs::testing
