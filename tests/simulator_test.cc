// The driver-level simulator with real processes: several programs share simulated
// cards and see each other exactly as on a real GPU, through CUDA and NVML alike.
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "src/common/clock.h"
#include "src/platform/cuda_api.h"
#include "src/platform/nvml_api.h"
#include "src/sim/node.h"
#include "src/sim/registration.h"
#include "src/sim/state.h"
#include "tests/harness.h"
#include "tests/wait_until.h"

namespace gs::testing {
namespace {

// The node daemon may hold a connection per registered library of every process and a
// kept backing per shared allocation: its soft limit on open files is raised to that (as far
// as the hard limit allows), not left at the usual 1,024, which about 500 processes would
// use up.
TEST(Simulator, TheDaemonMayHoldADescriptorPerConnectionAndShare) {
  // The daemon inherits the usual soft limit from the node's `sim up`.
  rlimit was{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &was), 0);
  rlimit usual = was;
  usual.rlim_cur = std::min<rlim_t>(was.rlim_max, 1024);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &usual), 0);
  SimNode node("gpus: [H100-80GB]\n");
  setrlimit(RLIMIT_NOFILE, &was);
  std::ifstream pid_file(node.root() + "/driver.pid");
  long pid = 0;
  ASSERT_TRUE(pid_file >> pid) << "no driver.pid in " << node.root();
  std::ifstream limits("/proc/" + std::to_string(pid) + "/limits");
  std::string line, soft, hard;
  while (std::getline(limits, line))
    if (line.rfind("Max open files", 0) == 0) {
      std::istringstream fields(line.substr(strlen("Max open files")));
      fields >> soft >> hard;
    }
  ASSERT_FALSE(soft.empty()) << "no open-file limit for the daemon (pid " << pid << ")";
  const unsigned long needed = 4ul * gs::sim::kMaxProcesses + gs::sim::kMaxShared;
  if (hard != "unlimited" && std::stoul(hard) < needed) {
    EXPECT_EQ(soft, hard) << "the hard limit is below what the daemon may hold: the soft one should reach it";
  } else {
    EXPECT_TRUE(soft == "unlimited" || std::stoul(soft) >= needed) << "soft limit " << soft << ", hard " << hard;
  }
}

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
  // Four holders and five contexts, each context 100 MiB listed and 6 MiB under no process.
  uint64_t expect_used = 4 * kGiB + uint64_t{5} * (100 + 6) * kMiB;
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
  EXPECT_EQ(U(nvml[2]), 3 * kGiB + uint64_t{4} * (100 + 6) * kMiB);  // its unlisted part gone too
  EXPECT_EQ(U(nvml[7]), 4u);
}

// A process that exits normally has left the card by the time its parent sees it exit, as
// the kernel driver frees a process's memory while it exits: the simulated driver shuts
// down in its exit handler and, at the exit's last step, waits for the node to free what
// the process held. A call made in a later exit handler gets CUDA_ERROR_DEINITIALIZED,
// frees nothing twice and still sees its memory listed (as on an H100).
TEST(Simulator, AProcessLeavesTheCardBeforeItsExitCompletes) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  std::vector<std::string> args = {ProbeBin()};
  for (int k = 0; k < 10; ++k) args.insert(args.end(), {"spawnexit", "1g"});
  Result r = RunProcess(args, node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Lines(r.out, "spawnexit"), std::vector<std::string>(10, "spawnexit 1024 0")) << r.out;

  r = RunProcess({ProbeBin(), "atexit", "init", "alloc", "mem", "1g"}, node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Lines(r.out, "atexit own"),
            std::vector<std::string>{"atexit own=1024 free=CUDA_ERROR_DEINITIALIZED alloc=CUDA_ERROR_DEINITIALIZED"})
      << r.out;
  r = RunProcess({ProbeBin(), "init", "nvml"}, node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(U(Fields(r.out, "nvml")[2]), 0u) << r.out;  // nothing left, nothing freed twice
}

// Memory shared between processes (src/sim/cuda_ipc.cc, src/sim/cuda_pool_ipc.cc): the
// importer (a process of its own) reads what the owner wrote and the owner reads the
// importer's answer, by a legacy IPC handle, by a POSIX descriptor and by a pool's
// descriptor and a pointer's export data; a process cannot open its own IPC handle, and a
// handle or a pool made without the descriptor type cannot be exported as one, nor an
// allocation of such a pool, as CUDA documents.
TEST(Simulator, SharedMemoryCarriesDataBetweenProcessesAsCudaDocumentsIt) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  Result r = RunProcess({HostileBin(), "init", "ipc-leak", "2", "64", "fd-leak", "2", "64", "pool-leak", "2", "64",
                         "importer-done", "ipc-self", "vmmcreate", "64", "vmmexport", "pool-noexport"},
                        node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Lines(r.out, "ipc-leak"), std::vector<std::string>{"ipc-leak 128 2"}) << r.out;
  EXPECT_EQ(Lines(r.out, "fd-leak"), std::vector<std::string>{"fd-leak 128 2"}) << r.out;
  EXPECT_EQ(Lines(r.out, "pool-leak"), std::vector<std::string>{"pool-leak 128 2"}) << r.out;
  EXPECT_EQ(Lines(r.out, "importer "), std::vector<std::string>{"importer 6 6"}) << r.out;
  EXPECT_EQ(Lines(r.out, "ipc-self"), std::vector<std::string>{"ipc-self CUDA_ERROR_INVALID_CONTEXT"}) << r.out;
  EXPECT_EQ(Lines(r.out, "vmmexport"), std::vector<std::string>{"vmmexport CUDA_ERROR_INVALID_VALUE"}) << r.out;
  EXPECT_EQ(Lines(r.out, "pool-noexport"),
            std::vector<std::string>{"pool-noexport CUDA_ERROR_INVALID_VALUE CUDA_ERROR_INVALID_VALUE"})
      << r.out;
}

// The owner exits (normally) while its importer holds the memory: it stays on the card until
// the importer lets go, listed under the importer (legacy IPC; descriptors, the least
// convenient reading) or under no one (a pool's allocation), as on an H100
// (docs/measurements/shared-memory.md; tests/gpu/run.sh 6d').
TEST(Simulator, SharedMemoryOfAnOwnerThatExitedStaysUntilTheImporterLetsGo) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  for (const char* kind : {"ipc", "fd", "pool"}) {
    Result r = RunProcess({ProbeBin(), "shareownerexit", kind, "256"}, node.env());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    const std::string importer = std::string(kind) == "pool" ? "0" : "268435456";
    std::vector<std::string> want = {
        "sharemodel imported owner=268435456 importer=0 used=268435456",
        "sharemodel owner-exited owner=0 importer=" + importer + " used=268435456",
        "sharemodel importer-closed owner=0 importer=0 used=0",
    };
    EXPECT_EQ(Lines(r.out, "sharemodel"), want) << kind << ": " << r.out << r.err;
  }
}

// The model (docs/measurements/shared-memory.md, as on an H100 and an H200): importing adds
// nothing to the card, nor to the importer's figure. Freed by its owner while an importer
// holds it, legacy IPC and descriptor memory stays on the card, now listed under the
// importer, until the importer closes it; a pool's
// allocation is listed under no one (the pool's own figures drop too) and stays on the card
// past the importer, kept by the owner's pool until it is destroyed (a trim keeps it).
TEST(Simulator, SharedMemoryStaysOnTheCardUntilTheImporterLetsGo) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  for (const char* kind : {"ipc", "fd"}) {
    Result r = RunProcess({ProbeBin(), "init", "sharemodel", kind, "256"}, node.env());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(Lines(r.out, "shareimport"), std::vector<std::string>{"shareimport ok added=0"}) << kind << ": " << r.out;
    const bool ipc = std::string(kind) == "ipc";
    // A cuMemCreate descriptor comes close-on-exec, as on an H200.
    if (!ipc) {
      EXPECT_EQ(Lines(r.out, "shareexport"), std::vector<std::string>{"shareexport cloexec=1"}) << r.out;
      // Every export is an open of one file, as an H100's are of /dev/nvidiactl: the same
      // handle exported again and another handle have the same device and inode.
      std::vector<std::string> identity = Lines(r.out, "shareidentity");
      ASSERT_EQ(identity.size(), 1u) << r.out;
      auto field = [&](const std::string& key) {
        size_t at = identity[0].find(" " + key + "=");
        return at == std::string::npos
                   ? std::string("?")
                   : identity[0].substr(at + key.size() + 2, identity[0].find(' ', at + 1) - at - key.size() - 2);
      };
      EXPECT_NE(field("ino"), "?") << identity[0];
      EXPECT_EQ(field("again"), field("ino")) << identity[0];
      EXPECT_EQ(field("other"), field("ino")) << identity[0];
    }
    std::vector<std::string> want = {
        "sharemodel imported owner=268435456 importer=0 used=268435456",
        "sharemodel owner-freed owner=0 importer=268435456 used=268435456",
        "sharemodel importer-closed owner=0 importer=0 used=0",
    };
    EXPECT_EQ(Lines(r.out, "sharemodel"), want) << kind << ": " << r.out << r.err;
  }
  Result r = RunProcess({ProbeBin(), "init", "sharemodel", "pool", "256"}, node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Lines(r.out, "shareimport"), std::vector<std::string>{"shareimport ok added=0"}) << r.out;
  // A pool's descriptor comes inheritable, as on an H200.
  EXPECT_EQ(Lines(r.out, "shareexport"), std::vector<std::string>{"shareexport cloexec=0"}) << r.out;
  std::vector<std::string> want = {
      "sharemodel imported owner=268435456 importer=0 used=268435456 reserved=268435456 pool_used=268435456",
      "sharemodel owner-freed owner=0 importer=0 used=268435456 reserved=0 pool_used=0",
      "sharemodel importer-closed owner=0 importer=0 used=268435456 reserved=0 pool_used=0",
      "sharemodel owner-trimmed owner=0 importer=0 used=268435456 reserved=0 pool_used=0",
      "sharemodel pool-destroyed owner=0 importer=0 used=0",
  };
  EXPECT_EQ(Lines(r.out, "sharemodel"), want) << r.out << r.err;
}

// An importer in a container (pid 1 of a PID namespace with its own /proc, where the
// exporter cannot be seen) opens a legacy IPC handle of a process on the node, and the
// memory lives as anywhere else, as on an H100 (docs/measurements/shared-memory.md,
// "Across PID namespaces"): the simulated driver hands the importer the memory's backing
// from the node, not through the importer's /proc.
TEST(Simulator, LegacyIpcOpensInAContainerWithAProcOfItsOwn) {
  if (!CanUnsharePidNamespace()) {
    std::cout << "NOTE: needs root and unshare --pid: legacy IPC into a container's namespace was NOT tested\n";
    GTEST_SKIP() << "needs root and unshare --pid";
  }
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  Result r = RunProcess({ProbeBin(), "init", "sharemodel", "ipc-pidns", "256"}, node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Lines(r.out, "shareimport"), std::vector<std::string>{"shareimport ok added=0"}) << r.out << r.err;
  EXPECT_EQ(Lines(r.out, "sharemodel imported"),
            std::vector<std::string>{"sharemodel imported owner=268435456 importer=0 used=268435456"})
      << r.out;
  // Freed by its owner, the memory stays on the card, no longer listed under the owner.
  EXPECT_EQ(Lines(r.out, "sharemodel owner-freed owner=0 "),
            std::vector<std::string>{"sharemodel owner-freed owner=0 importer=0 used=268435456"})
      << r.out;
  EXPECT_EQ(Lines(r.out, "sharemodel importer-closed"),
            std::vector<std::string>{"sharemodel importer-closed owner=0 importer=0 used=0"})
      << r.out;
}

// The node daemon hands a share's backing only to a process that holds the share, and only
// a memfd of the simulated driver: the node's state is writable by every process of the
// node, so an entry may name any descriptor of any process, a file the asker may only read
// among them.
TEST(Simulator, TheNodeHandsOutOnlyTheDriversMemoryToItsHolders) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  char err[256] = {};
  sim::State* state = sim::MapState((node.root() + "/state").c_str(), err, sizeof(err));
  ASSERT_NE(state, nullptr) << err;
  char socket_path[512];
  ASSERT_TRUE(sim::DriverSocketPath((node.root() + "/state").c_str(), socket_path, sizeof(socket_path)));
  sim::NodeIdentity me;
  int registration = sim::RegisterWithNode(socket_path, &me, err, sizeof(err));  // held, as libcuda holds it
  ASSERT_GE(registration, 0) << err;
  sim::Node as_me(state, RealClock::Get(), me.pid, me.start_time);
  sim::Node as_another(state, RealClock::Get(), me.pid, me.start_time + 1);
  auto share = [&](sim::Node& by, int fd, uint64_t* id) {
    struct stat st;
    EXPECT_EQ(fstat(fd, &st), 0);
    return by.Share(0, 0, st.st_ino, st.st_dev, fd, sim::ShareWay::kLegacyIpc, id);
  };
  // Whether the daemon handed over the memory of share (index, id), which must be `backing`.
  auto handed = [&](int index, uint64_t id, int backing) {
    int got = sim::FetchShareBacking(socket_path, index, id);
    if (got < 0) return false;
    struct stat a, b;
    EXPECT_TRUE(fstat(got, &a) == 0 && fstat(backing, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev);
    close(got);
    return true;
  };

  int driver_memory = memfd_create("gpuslice-sim-ipc", MFD_CLOEXEC);
  ASSERT_GE(driver_memory, 0);
  uint64_t id = 0;
  int index = share(as_me, driver_memory, &id);
  ASSERT_GE(index, 0);
  EXPECT_TRUE(handed(index, id, driver_memory)) << "the holder of a share is refused its memory";
  EXPECT_FALSE(handed(index, id + 1, driver_memory)) << "a share's stale id";

  int other_memory = memfd_create("gpuslice-sim-ipc", MFD_CLOEXEC);
  uint64_t other_id = 0;
  int other = share(as_another, other_memory, &other_id);
  ASSERT_GE(other, 0);
  EXPECT_FALSE(handed(other, other_id, other_memory)) << "a process that does not hold the share got its memory";

  // A file this process may only read, named in a share of its own.
  std::string path = node.root() + "/read-only";
  { std::ofstream(path) << "not device memory"; }
  chmod(path.c_str(), 0444);
  int file = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(file, 0);
  uint64_t file_id = 0;
  int file_share = share(as_me, file, &file_id);
  ASSERT_GE(file_share, 0);
  EXPECT_FALSE(handed(file_share, file_id, file)) << "the daemon handed out a file that is not the driver's memory";
  for (int fd : {driver_memory, other_memory, file, registration}) close(fd);
  munmap(state, sizeof(sim::State));
}

TEST(Simulator, EveryAllocationApiDrawsFromTheCardAndGivesBack) {
  SimNode node("context_memory: 0\ngpus: [A100-40GB]\n");
  // Graph memory reaches the card at a launch: SimulatorMemory.GraphMemory* below.
  for (const char* kind : {"mem", "pitch", "managed", "async", "pool", "vmm", "array", "array3d", "mipmap"}) {
    // A synchronize after the free: stream-ordered frees go back to the card then.
    Result r = RunProcess({ProbeBin(), "init", "alloc", kind, "64m", "nvml", "free", "sync", "nvml"}, node.env());
    ASSERT_EQ(r.code, 0) << kind << ": " << r.err;
    ASSERT_EQ(Line(r.out, "alloc"), "alloc ok") << kind << "\n" << r.out;
    auto nv = Lines(r.out, "nvml");
    ASSERT_EQ(nv.size(), 2u);
    uint64_t during = U(Field(nv[0], "nvml", 2)), after = U(Field(nv[1], "nvml", 2));
    EXPECT_GE(during, 64 * kMiB) << kind;
    EXPECT_LE(during, 66 * kMiB) << kind;
    EXPECT_EQ(after, 0u) << kind;
  }
  // Host-located VMM memory is not device memory.
  Result r = RunProcess({ProbeBin(), "init", "alloc", "vmmhost", "64m", "nvml"}, node.env());
  EXPECT_EQ(Line(r.out, "alloc"), "alloc ok");
  EXPECT_EQ(U(Field(r.out, "nvml", 2)), 0u);
}

// Stream-ordered frees go into the pool, which keeps the memory on the card: until the next
// synchronize (release threshold 0, the default), beyond it up to the threshold, until a
// trim; an allocation takes what the pool holds free first.
TEST(Simulator, APoolKeepsFreedMemoryUntilASynchronizeOrATrim) {
  SimNode node("context_memory: 0\ngpus: [A100-40GB]\n");
  Result r =
      RunProcess({ProbeBin(), "init",  "alloc",    "async", "64m",  "free",     "nvml", "sync",  "nvml",  "poolkeep",
                  "1g",       "alloc", "async",    "64m",   "free", "sync",     "nvml", "alloc", "async", "32m",
                  "nvml",     "free",  "pooltrim", "16m",   "nvml", "pooltrim", "0",    "nvml"},
                 node.env());
  ASSERT_EQ(r.code, 0) << r.err;
  auto nv = Lines(r.out, "nvml");
  ASSERT_EQ(nv.size(), 6u) << r.out;
  std::vector<uint64_t> mib;
  for (const auto& line : nv) mib.push_back(U(Field(line, "nvml", 2)) / kMiB);
  EXPECT_EQ(mib, (std::vector<uint64_t>{64, 0, 64, 64, 16, 0})) << r.out;
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

// NVML's per-process feed behaves as measured on the H100 (docs/measurements/h100-driver.md): a NULL
// buffer is answered INSUFFICIENT_SIZE with a fixed 72; polled every 20 ms, a new sample
// arrives once per 200 ms period and NOT_FOUND in between.
TEST(Simulator, NvmlProcessSamplesArriveOncePerPeriod) {
  SimNode node("gpus: [H100-80GB]\n");
  Process burn({GpusliceBin(), "burn", "--memory", "0", "--util", "100", "--seconds", "3"}, node.env());
  Result r = RunProcess({ProbeBin(), "sleep", "300", "procutil", "2000"}, node.env());
  burn.Wait();
  EXPECT_EQ(Line(r.out, "procutil-size"), "procutil-size insufficient 72") << r.out << r.err;
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
  ASSERT_TRUE(waiter.WaitForOutput("events armed")) << waiter.out();  // an earlier event would be missed
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
  EXPECT_EQ(U(Field(r.out, "meminfo", 2)), 23034 * kMiB);  // the L4
  env["CUDA_VISIBLE_DEVICES"] = "7";
  r = RunProcess({ProbeBin(), "init"}, env);
  EXPECT_EQ(Line(r.out, "init"), "init CUDA_ERROR_NO_DEVICE");
}

// ---- what the driver really spends (docs/measurements/h100-driver.md) ----------------
//
// These run their CUDA in a forked child of the test that dlopens the node's libcuda and
// libnvidia-ml, so a step can read NVML's per-process used memory for its own pid (the
// figure measured on the H100) and fork again; the test process never loads them.

struct SimLibs {
  void* cuda = nullptr;
  void* nvml = nullptr;
  template <typename Fn>
  Fn Cuda(const char* name) const {
    return reinterpret_cast<Fn>(dlsym(cuda, name));
  }
  template <typename Fn>
  Fn Nvml(const char* name) const {
    return reinterpret_cast<Fn>(dlsym(nvml, name));
  }
  // NVML's used memory of process `pid` on GPU 0, in MiB (0: not listed).
  uint64_t NvmlMiB(pid_t pid) const {
    nvmlDevice_t dev;
    if (Nvml<nvmlReturn_t (*)()>("nvmlInit_v2")() != NVML_SUCCESS ||
        Nvml<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>("nvmlDeviceGetHandleByIndex_v2")(0, &dev) != NVML_SUCCESS)
      return UINT64_MAX;
    nvmlProcessInfo_t procs[64];
    unsigned n = 64;
    if (Nvml<nvmlReturn_t (*)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*)>("nvmlDeviceGetComputeRunningProcesses_v3")(
            dev, &n, procs) != NVML_SUCCESS)
      return UINT64_MAX;
    for (unsigned i = 0; i < n; ++i)
      if (procs[i].pid == static_cast<unsigned>(pid)) return procs[i].usedGpuMemory >> 20;
    return 0;
  }
  uint64_t OwnMiB() const { return NvmlMiB(getpid()); }
  // cuInit, then retain device 0's primary context and make it current.
  CUresult Init() const {
    CUresult rc = Cuda<CUresult (*)(unsigned)>("cuInit")(0);
    CUcontext ctx = nullptr;
    if (rc == CUDA_SUCCESS) rc = Cuda<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain")(&ctx, 0);
    if (rc == CUDA_SUCCESS) rc = Cuda<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(ctx);
    return rc;
  }
  CUresult SetLimit(CUlimit limit, size_t v) const {
    return Cuda<CUresult (*)(CUlimit, size_t)>("cuCtxSetLimit")(limit, v);
  }
  size_t GetLimit(CUlimit limit) const {
    size_t v = 0;
    return Cuda<CUresult (*)(size_t*, CUlimit)>("cuCtxGetLimit")(&v, limit) == CUDA_SUCCESS ? v : SIZE_MAX;
  }
  CUresult Alloc(size_t bytes) const {
    CUdeviceptr p = 0;
    return Cuda<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2")(&p, bytes);
  }
};

// Runs body(libs, out) in a forked child with the node's simulated libraries loaded;
// returns what it (and any process it forks) wrote to `out`. The child is waited for
// before the output is read, so a grandchild may outlive it.
std::string InSimChild(const SimNode& node, const std::function<void(const SimLibs&, FILE*)>& body) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    FILE* out = fdopen(fds[1], "w");
    setvbuf(out, nullptr, _IONBF, 0);
    std::string lib = node.root() + "/usr/lib/x86_64-linux-gnu/";
    SimLibs libs;
    libs.cuda = dlopen((lib + "libcuda.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
    libs.nvml = dlopen((lib + "libnvidia-ml.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (libs.cuda == nullptr || libs.nvml == nullptr) {
      fprintf(out, "dlopen failed: %s\n", dlerror());
      _exit(2);
    }
    body(libs, out);
    _exit(0);
  }
  close(fds[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) text += "child failed\n";
  return text;
}

// Measured: a context costs 518 MiB on the H100 (NVML, own pid), each further one 518 more.
TEST(SimulatorMemory, AnH100ContextCostsWhatTheCardSpends) {
  SimNode node("gpus: [H100-80GB]\n");
  std::string out = InSimChild(node, [](const SimLibs& cu, FILE* out) {
    fprintf(out, "before %llu\n", static_cast<unsigned long long>(cu.OwnMiB()));
    fprintf(out, "init %d\n", cu.Init());
    fprintf(out, "primary %llu\n", static_cast<unsigned long long>(cu.OwnMiB()));
    CUcontext second = nullptr;
    fprintf(out, "create %d\n", cu.Cuda<CUresult (*)(CUcontext*, unsigned, CUdevice)>("cuCtxCreate_v2")(&second, 0, 0));
    fprintf(out, "two %llu\n", static_cast<unsigned long long>(cu.OwnMiB()));
    cu.Cuda<CUresult (*)(CUcontext)>("cuCtxDestroy_v2")(second);
    fprintf(out, "destroyed %llu\n", static_cast<unsigned long long>(cu.OwnMiB()));
  });
  EXPECT_EQ(Line(out, "before"), "before 0") << out;
  EXPECT_EQ(Line(out, "init"), "init 0") << out;
  EXPECT_EQ(Line(out, "primary"), "primary 518") << out;
  EXPECT_EQ(Line(out, "create"), "create 0") << out;
  EXPECT_EQ(Line(out, "two"), "two 1036") << out;
  EXPECT_EQ(Line(out, "destroyed"), "destroyed 518") << out;
  // A card nobody measured keeps the 256 MiB figure; the scenario key overrides either.
  SimNode t4("gpus: [T4]\n");
  Result r = RunProcess({ProbeBin(), "init", "nvml"}, t4.env());
  EXPECT_EQ(U(Field(r.out, "nvml", 8)), 256 * kMiB) << r.out << r.err;
  SimNode custom("context_memory: 100Mi\ngpus: [H100-80GB]\n");
  r = RunProcess({ProbeBin(), "init", "nvml"}, custom.env());
  EXPECT_EQ(U(Field(r.out, "nvml", 8)), 100 * kMiB) << r.out << r.err;
}

// Measured on the H100 (docs/measurements/h100-driver.md, "What device memory costs"): a 1 GiB malloc
// heap and a 256 MiB printf FIFO cost nothing until used; a 64 KiB stack per thread added
// 16,632 MiB = (64 - 1) KiB x 132 SMs x 2048 threads. The simulator charges the same, and
// refuses a stack the card has no room for.
TEST(SimulatorMemory, CtxSetLimitCostsWhatTheCardSpends) {
  SimNode node("gpus: [H100-80GB]\n");
  std::string out = InSimChild(node, [](const SimLibs& cu, FILE* out) {
    auto own = [&](const char* step) { fprintf(out, "%s %llu\n", step, static_cast<unsigned long long>(cu.OwnMiB())); };
    if (cu.Init() != CUDA_SUCCESS) return;
    own("context");
    fprintf(out, "defaults %zu %zu %zu\n", cu.GetLimit(CU_LIMIT_STACK_SIZE), cu.GetLimit(CU_LIMIT_MALLOC_HEAP_SIZE),
            cu.GetLimit(CU_LIMIT_PRINTF_FIFO_SIZE));
    fprintf(out, "heap-rc %d\n", cu.SetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 1ull << 30));
    own("heap");
    fprintf(out, "stack-rc %d\n", cu.SetLimit(CU_LIMIT_STACK_SIZE, 64 << 10));
    own("stack");
    fprintf(out, "fifo-rc %d\n", cu.SetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 256u << 20));
    own("fifo");
    fprintf(out, "limits %zu %zu %zu\n", cu.GetLimit(CU_LIMIT_STACK_SIZE), cu.GetLimit(CU_LIMIT_MALLOC_HEAP_SIZE),
            cu.GetLimit(CU_LIMIT_PRINTF_FIFO_SIZE));
    // 1 MiB a thread: 1023 KiB x 270,336 threads = 264 GiB, more than the card.
    fprintf(out, "huge-rc %d\n", cu.SetLimit(CU_LIMIT_STACK_SIZE, 1 << 20));
    own("huge");
    fprintf(out, "kept %zu\n", cu.GetLimit(CU_LIMIT_STACK_SIZE));
    fprintf(out, "lower-rc %d\n", cu.SetLimit(CU_LIMIT_STACK_SIZE, 1024));
    own("lower");
    // With 70 GiB allocated the 16,632 MiB no longer fit: refused, nothing charged.
    CUdeviceptr p = 0;
    fprintf(out, "alloc-rc %d\n", cu.Cuda<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2")(&p, 70ull << 30));
    own("allocated");
    fprintf(out, "full-rc %d\n", cu.SetLimit(CU_LIMIT_STACK_SIZE, 64 << 10));
    own("full");
    cu.Cuda<CUresult (*)(CUdeviceptr)>("cuMemFree_v2")(p);
    // A context reset gives the stack back and the limits return to their defaults.
    fprintf(out, "stack2-rc %d\n", cu.SetLimit(CU_LIMIT_STACK_SIZE, 4 << 10));
    own("stack2");
    fprintf(out, "reset-rc %d\n", cu.Cuda<CUresult (*)(CUdevice)>("cuDevicePrimaryCtxReset_v2")(0));
    cu.Init();
    own("reinit");
    fprintf(out, "after-reset %zu\n", cu.GetLimit(CU_LIMIT_STACK_SIZE));
  });
  EXPECT_EQ(Line(out, "context"), "context 518") << out;
  EXPECT_EQ(Line(out, "defaults"), "defaults 1024 8388608 1048576") << out;
  EXPECT_EQ(Line(out, "heap-rc"), "heap-rc 0") << out;
  EXPECT_EQ(Line(out, "heap "), "heap 518") << out;  // +0 until used
  EXPECT_EQ(Line(out, "stack-rc"), "stack-rc 0") << out;
  EXPECT_EQ(Line(out, "stack "), "stack 17150") << out;  // 518 + 16,632
  EXPECT_EQ(Line(out, "fifo-rc"), "fifo-rc 0") << out;
  EXPECT_EQ(Line(out, "fifo "), "fifo 17150") << out;  // +0 until used
  EXPECT_EQ(Line(out, "limits"), "limits 65536 1073741824 268435456") << out;
  EXPECT_EQ(Line(out, "huge-rc"), "huge-rc 2") << out;  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_EQ(Line(out, "huge "), "huge 17150") << out;
  EXPECT_EQ(Line(out, "kept"), "kept 65536") << out;
  EXPECT_EQ(Line(out, "lower-rc"), "lower-rc 0") << out;
  EXPECT_EQ(Line(out, "lower "), "lower 518") << out;
  EXPECT_EQ(Line(out, "alloc-rc"), "alloc-rc 0") << out;
  EXPECT_EQ(Line(out, "allocated"), "allocated 72198") << out;  // 518 + 71,680
  EXPECT_EQ(Line(out, "full-rc"), "full-rc 2") << out;          // 9,361 MiB free < 16,632
  EXPECT_EQ(Line(out, "full "), "full 72198") << out;
  EXPECT_EQ(Line(out, "stack2-rc"), "stack2-rc 0") << out;
  EXPECT_EQ(Line(out, "stack2 "), "stack2 1310") << out;  // 518 + 3 KiB x 270,336 = 792 MiB
  EXPECT_EQ(Line(out, "reset-rc"), "reset-rc 0") << out;
  EXPECT_EQ(Line(out, "reinit"), "reinit 518") << out;  // the stack went with the old context
  EXPECT_EQ(Line(out, "after-reset"), "after-reset 1024") << out;
}

// Measured on the H100: a module with a 64 MiB .global added 64 MiB (NVML, own pid); the
// driver's pages are 2 MiB. The module's memory goes with cuModuleUnload and with its
// context.
TEST(SimulatorMemory, AModuleCostsItsGlobals) {
  SimNode node("gpus: [H100-80GB]\n");
  std::string out = InSimChild(node, [](const SimLibs& cu, FILE* out) {
    auto own = [&](const char* step) { fprintf(out, "%s %llu\n", step, static_cast<unsigned long long>(cu.OwnMiB())); };
    auto load = [&](const char* globals, CUmodule* m) {
      std::string ptx = std::string(".version 8.0\n.target sm_90\n.address_size 64\n") + globals +
                        "\n.visible .entry k() { ld.global.u32 %r1, [x]; ret; }\n";
      return cu.Cuda<CUresult (*)(CUmodule*, const void*)>("cuModuleLoadData")(m, ptx.c_str());
    };
    auto unload = cu.Cuda<CUresult (*)(CUmodule)>("cuModuleUnload");
    if (cu.Init() != CUDA_SUCCESS) return;
    own("context");
    CUmodule big = nullptr, small = nullptr, none = nullptr;
    fprintf(out, "big-rc %d\n", load(".visible .global .align 1 .b8 big[67108864];", &big));
    own("big");
    fprintf(out, "small-rc %d\n", load(".global .u32 x;", &small));
    own("small");  // 4 bytes take a 2 MiB page
    fprintf(out, "none-rc %d\n", load("", &none));
    own("none");
    fprintf(out, "toobig-rc %d\n", load(".global .b8 t[90000000000];", &none));
    own("toobig");
    unload(big);
    own("unloaded");
    fprintf(out, "reset-rc %d\n", cu.Cuda<CUresult (*)(CUdevice)>("cuDevicePrimaryCtxReset_v2")(0));
    own("reset");
  });
  EXPECT_EQ(Line(out, "context"), "context 518") << out;
  EXPECT_EQ(Line(out, "big-rc"), "big-rc 0") << out;
  EXPECT_EQ(Line(out, "big "), "big 582") << out;  // +64
  EXPECT_EQ(Line(out, "small-rc"), "small-rc 0") << out;
  EXPECT_EQ(Line(out, "small "), "small 584") << out;  // +2
  EXPECT_EQ(Line(out, "none-rc"), "none-rc 0") << out;
  EXPECT_EQ(Line(out, "none "), "none 584") << out;  // +0
  EXPECT_EQ(Line(out, "toobig-rc"), "toobig-rc 2") << out;
  EXPECT_EQ(Line(out, "toobig "), "toobig 584") << out;
  EXPECT_EQ(Line(out, "unloaded"), "unloaded 520") << out;
  EXPECT_EQ(Line(out, "reset-rc"), "reset-rc 0") << out;
  EXPECT_EQ(Line(out, "reset "), "reset 0") << out;  // the context and its module's 2 MiB
}

// Lazy loading (CUDA C++ Programming Guide, "Lazy Loading"; the default since CUDA 12.2):
// a module's kernels reach the card when cuModuleGetFunction resolves them, a library's
// when cuKernelGetFunction or a launch of its CUkernel does, a graph's at instantiation;
// with CUDA_MODULE_LOADING=EAGER at load. NVML's figure for the process grows then, and
// a kernel the card has no room for is refused then.
TEST(SimulatorMemory, KernelCodeReachesTheCardWhenFirstUsedUnlessEager) {
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  auto mine = [](const std::string& out, size_t i) { return U(Fields(Lines(out, "nvml ").at(i), "nvml").at(8)); };
  std::vector<std::string> steps = {
      ProbeBin(),  "init",       "loadingmode", "modcode",   "24m",  "nvml",       "getfunc",   "nvml",    "launchcode",
      "nvml",      "libcode",    "8m",          "getkernel", "nvml", "launchcode", "nvml",      "libcode", "6m",
      "getkernel", "kernelfunc", "nvml",        "libcode",   "4m",   "getkernel",  "graphcode", "nvml"};
  Result lazy = RunProcess(steps, node.env());
  ASSERT_EQ(lazy.code, 0) << lazy.out << lazy.err;
  EXPECT_EQ(Line(lazy.out, "loadingmode"), "loadingmode lazy");
  EXPECT_EQ(mine(lazy.out, 0), 0u) << lazy.out;         // loaded: no code on the card yet
  EXPECT_EQ(mine(lazy.out, 1), 24 * kMiB) << lazy.out;  // resolved: its 24 MiB of code
  EXPECT_EQ(mine(lazy.out, 2), 24 * kMiB) << lazy.out;  // launching it adds nothing
  EXPECT_EQ(mine(lazy.out, 3), 24 * kMiB) << lazy.out;  // a library's kernel handle loads nothing
  EXPECT_EQ(mine(lazy.out, 4), 32 * kMiB) << lazy.out;  // its first launch does
  EXPECT_EQ(mine(lazy.out, 5), 38 * kMiB) << lazy.out;  // cuKernelGetFunction does
  EXPECT_EQ(mine(lazy.out, 6), 42 * kMiB) << lazy.out;  // a graph's instantiation does

  Env eager = node.env();
  eager["CUDA_MODULE_LOADING"] = "EAGER";
  Result r =
      RunProcess({ProbeBin(), "init", "loadingmode", "modcode", "24m", "nvml", "getfunc", "launchcode", "nvml"}, eager);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Line(r.out, "loadingmode"), "loadingmode eager");
  EXPECT_EQ(mine(r.out, 0), 24 * kMiB) << r.out;  // all at load
  EXPECT_EQ(mine(r.out, 1), 24 * kMiB) << r.out;

  // A card without room for a kernel's code refuses it when it is first used.
  SimNode small("context_memory: 0\ngpus:\n  - {name: Small, memory: 64Mi, sms: 4, compute_capability: \"9.0\"}\n");
  r = RunProcess({ProbeBin(), "init", "alloc", "mem", "48m", "modcode", "24m", "getfunc", "free", "getfunc"},
                 small.env());
  EXPECT_EQ(Line(r.out, "modcode"), "modcode ok") << r.out << r.err;
  EXPECT_EQ(Line(r.out, "getfunc"), "getfunc CUDA_ERROR_OUT_OF_MEMORY") << r.out;
  EXPECT_EQ(Line(r.out, "getfunc", 1), "getfunc ok") << r.out;
  r = RunProcess({ProbeBin(), "init", "alloc", "mem", "48m", "modcode", "24m"}, [&] {
    Env e = small.env();
    e["CUDA_MODULE_LOADING"] = "EAGER";
    return e;
  }());
  EXPECT_EQ(Line(r.out, "modcode"), "modcode CUDA_ERROR_OUT_OF_MEMORY") << r.out << r.err;
}

// The limits that follow from a card's compute capability are its real ones (CUDA C++
// Programming Guide, "Technical Specifications per Compute Capability"): resident threads
// per SM (which the stack reservation multiplies: 2048 on the H100, measured), and the
// texture extents beyond which cuArrayCreate refuses an array without it being out of
// memory (docs/measurements/h100-driver.md).
TEST(SimulatorMemory, EachPresetReportsItsComputeCapabilitysLimits) {
  SimNode node("context_memory: 0\ngpus: [T4, L4, A100-80GB, H100-80GB]\n");
  Result r = RunProcess({ProbeBin(), "attrs", "0", "attrs", "1", "attrs", "2", "attrs", "3"}, node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  auto a = Lines(r.out, "attrs");
  ASSERT_EQ(a.size(), 4u) << r.out;
  // threads/SM, blocks/SM, SMs, 1D, 2D, 3D texture extents
  EXPECT_EQ(a[0], "attrs 1024 16 40 131072 131072x65536 16384x16384x16384");   // T4, 7.5
  EXPECT_EQ(a[1], "attrs 1536 24 58 131072 131072x65536 16384x16384x16384");   // L4, 8.9
  EXPECT_EQ(a[2], "attrs 2048 32 108 131072 131072x65536 16384x16384x16384");  // A100, 8.0
  EXPECT_EQ(a[3], "attrs 2048 32 132 131072 131072x65536 16384x16384x16384");  // H100, 9.0
  // The stack reservation follows: 63 KiB x 40 SMs x 1024 threads on the T4.
  r = RunProcess({ProbeBin(), "init", "0", "nvml", "stack", "65536", "nvml"}, node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  auto mine = [&](size_t i) { return U(Fields(Lines(r.out, "nvml ").at(i), "nvml").at(8)); };
  EXPECT_EQ(mine(1) - mine(0), 63 * 1024ull * 40 * 1024) << r.out;
  // One column too wide for a 2D texture: refused, and not as out of memory.
  r = RunProcess(
      {ProbeBin(), "init", "3", "array2d", "131072", "16", "array2d", "131073", "16", "array2d", "1024", "65537"},
      node.env());
  auto arr = Lines(r.out, "array2d");
  ASSERT_EQ(arr.size(), 3u) << r.out << r.err;
  EXPECT_EQ(arr[0], "array2d ok");
  EXPECT_EQ(arr[1], "array2d CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(arr[2], "array2d CUDA_ERROR_INVALID_VALUE");
}

// Destroying or resetting a context frees the memory allocated in it (the driver's
// behaviour: after cudaDeviceReset the whole card is free again, docs/measurements/h100-driver.md), and a
// context's memory is not another context's.
TEST(SimulatorMemory, AContextTakesItsAllocationsWithIt) {
  SimNode node("gpus: [H100-80GB]\n");
  std::string out = InSimChild(node, [](const SimLibs& cu, FILE* out) {
    auto own = [&](const char* step) { fprintf(out, "%s %llu\n", step, static_cast<unsigned long long>(cu.OwnMiB())); };
    auto alloc = cu.Cuda<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
    auto create = cu.Cuda<CUresult (*)(CUcontext*, unsigned, CUdevice)>("cuCtxCreate_v2");
    auto destroy = cu.Cuda<CUresult (*)(CUcontext)>("cuCtxDestroy_v2");
    auto pop = cu.Cuda<CUresult (*)(CUcontext*)>("cuCtxPopCurrent_v2");
    if (cu.Init() != CUDA_SUCCESS) return;
    CUdeviceptr p = 0, q = 0;
    fprintf(out, "alloc-rc %d\n", alloc(&p, 1ull << 30));
    CUcontext extra = nullptr, popped = nullptr;
    fprintf(out, "create-rc %d\n", create(&extra, 0, 0));
    fprintf(out, "alloc2-rc %d\n", alloc(&q, 256ull << 20));
    own("both");
    pop(&popped);
    fprintf(out, "destroy-rc %d\n", destroy(extra));
    own("destroyed");  // the second context and its 256 MiB
    fprintf(out, "reset-rc %d\n", cu.Cuda<CUresult (*)(CUdevice)>("cuDevicePrimaryCtxReset_v2")(0));
    own("reset");
  });
  EXPECT_EQ(Line(out, "alloc-rc"), "alloc-rc 0") << out;
  EXPECT_EQ(Line(out, "create-rc"), "create-rc 0") << out;
  EXPECT_EQ(Line(out, "alloc2-rc"), "alloc2-rc 0") << out;
  EXPECT_EQ(Line(out, "both"), "both " + std::to_string(518 * 2 + 1024 + 256)) << out;
  EXPECT_EQ(Line(out, "destroyed"), "destroyed " + std::to_string(518 + 1024)) << out;
  EXPECT_EQ(Line(out, "reset "), "reset 0") << out;
}

// cuPointerGetAttribute names the device a pointer was allocated on, whichever context is
// current, as the CUDA driver API documents it; a pointer CUDA did not give is
// CUDA_ERROR_INVALID_VALUE.
TEST(SimulatorMemory, APointerNamesTheDeviceItWasAllocatedOn) {
  SimNode node("gpus: [H100-80GB, H100-80GB]\n");
  std::string out = InSimChild(node, [](const SimLibs& cu, FILE* out) {
    auto alloc = cu.Cuda<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
    auto managed = cu.Cuda<CUresult (*)(CUdeviceptr*, size_t, unsigned)>("cuMemAllocManaged");
    auto attr = cu.Cuda<CUresult (*)(void*, CUpointer_attribute, CUdeviceptr)>("cuPointerGetAttribute");
    auto retain = cu.Cuda<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain");
    auto set_current = cu.Cuda<CUresult (*)(CUcontext)>("cuCtxSetCurrent");
    if (cu.Init() != CUDA_SUCCESS) return;
    CUdeviceptr on0 = 0, on1 = 0, m = 0;
    CUcontext ctx1 = nullptr;
    alloc(&on0, 1 << 20);
    retain(&ctx1, 1);
    set_current(ctx1);
    alloc(&on1, 1 << 20);
    managed(&m, 1 << 20, CU_MEM_ATTACH_GLOBAL);
    int ord0 = -1, ord1 = -1, is_managed = -1, plain = -1, stack_word = 0;
    CUresult rc0 = attr(&ord0, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, on0 + 4096);
    CUresult rc1 = attr(&ord1, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, on1);
    fprintf(out, "ordinals %d %d %d %d\n", rc0, ord0, rc1, ord1);
    attr(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m);
    attr(&plain, CU_POINTER_ATTRIBUTE_IS_MANAGED, on1);
    fprintf(out, "managed %d %d\n", is_managed, plain);
    int unused = -1;
    fprintf(out, "stack %d\n",
            attr(&unused, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, reinterpret_cast<CUdeviceptr>(&stack_word)));
  });
  EXPECT_EQ(Line(out, "ordinals"), "ordinals 0 0 0 1") << out;
  EXPECT_EQ(Line(out, "managed"), "managed 1 0") << out;
  EXPECT_EQ(Line(out, "stack"), "stack " + std::to_string(CUDA_ERROR_INVALID_VALUE)) << out;
}

// The probe's own device memory at each of its "nvml" lines, in MiB beyond its context's
// 518 (the H100 preset's).
std::vector<uint64_t> MibBeyondContext(const Result& r) {
  std::vector<uint64_t> mib;
  for (const auto& line : Lines(r.out, "nvml")) mib.push_back((U(Field(line, "nvml", 8)) - 518 * kMiB) / kMiB);
  return mib;
}

// A graph allocation node's memory, step by step as measured on the H200
// (docs/measurements/h200-driver.md, "Graph memory"; the same steps as tests/gpu/run.sh
// section 6c): nothing at instantiation, on the card from the first launch, kept through
// the graph's and the executable's destruction and the pointer's free, gone at
// cuDeviceGraphMemTrim; a second launch before the free is CUDA_ERROR_INVALID_VALUE.
TEST(SimulatorMemory, GraphMemoryReachesTheCardAtLaunchAndLeavesAtTrim) {
  SimNode node("gpus: [H100-80GB]\n");
  Result r = RunProcess({ProbeBin(), "init", "nvml", "alloc", "graph", "256m", "graphexec", "nvml", "graphlaunch",
                         "nvml", "free", "nvml", "execfree", "nvml", "graphfree", "nvml", "graphtrim", "nvml"},
                        node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(MibBeyondContext(r), (std::vector<uint64_t>{0, 0, 256, 256, 256, 256, 0})) << r.out;
  r = RunProcess({ProbeBin(), "init", "alloc", "graph", "256m", "graphexec", "graphlaunch", "graphlaunch"}, node.env());
  EXPECT_EQ(Lines(r.out, "graphlaunch"),
            (std::vector<std::string>{"graphlaunch ok", "graphlaunch CUDA_ERROR_INVALID_VALUE"}))
      << r.out;
}

// cuGraphAddNode's allocation node is cuGraphAddMemAllocNode's: its memory reaches the card
// at the launch, as the H200 showed (docs/measurements/h200-driver.md, "Graph memory"), and
// cuGraphClone of a graph with an allocation node is CUDA_ERROR_NOT_SUPPORTED there too.
TEST(SimulatorMemory, AnAddNodeAllocationReachesTheCardAtLaunchAndItsGraphIsNotCloned) {
  SimNode node("gpus: [H100-80GB]\n");
  Result r = RunProcess({ProbeBin(), "init", "nvml", "alloc", "graphnode", "256m", "graphexec", "nvml", "graphlaunch",
                         "nvml", "graphclone", "graphfree", "graphtrim", "nvml"},
                        node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(MibBeyondContext(r), (std::vector<uint64_t>{0, 0, 256, 0})) << r.out;
  EXPECT_EQ(Lines(r.out, "graphclone"), std::vector<std::string>{"graphclone CUDA_ERROR_NOT_SUPPORTED"}) << r.out;
  EXPECT_EQ(Lines(r.out, "graphtrim"), std::vector<std::string>{"graphtrim ok"}) << r.out;
}

// A child graph moved into another (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE) runs in it: its
// allocation node reaches the card at the parent's launch; the moved child is neither
// destroyed nor instantiated on its own (the codes an H100 answered); a graph with memory
// nodes is not cloned as a child.
TEST(SimulatorMemory, AMovedChildGraphRunsInItsParentAndIsNoLongerAGraphOfItsOwn) {
  SimNode node("gpus: [H100-80GB]\n");
  Result r =
      RunProcess({ProbeBin(), "init", "nvml", "alloc", "graph", "256m", "graphchild", "graphexec", "nvml",
                  "graphlaunch", "nvml", "graphchildclone", "graphfree", "free", "execfree", "graphtrim", "nvml"},
                 node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Lines(r.out, "graphchild "),
            std::vector<std::string>{"graphchild ok CUDA_ERROR_INVALID_VALUE CUDA_ERROR_NOT_SUPPORTED"})
      << r.out;
  EXPECT_EQ(Lines(r.out, "graphchildclone"), std::vector<std::string>{"graphchildclone CUDA_ERROR_NOT_SUPPORTED"})
      << r.out;
  EXPECT_EQ(MibBeyondContext(r), (std::vector<uint64_t>{0, 0, 256, 0})) << r.out;
}

// A graph with an allocation node has one executable at a time: a second instantiation is
// refused until the first executable is destroyed (as the H200 answered).
TEST(SimulatorMemory, AGraphWithAnAllocationNodeHasOneExecutableAtATime) {
  SimNode node("context_memory: 0\ngpus: [T4]\n");
  Result r = RunProcess({ProbeBin(), "init", "alloc", "graph", "64m", "graphexec", "graphexec", "execfree", "graphexec",
                         "alloc", "graphnode", "64m", "graphexec", "graphexec"},
                        node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Lines(r.out, "graphexec"),
            (std::vector<std::string>{"graphexec ok", "graphexec CUDA_ERROR_NOT_SUPPORTED", "graphexec ok",
                                      "graphexec ok", "graphexec CUDA_ERROR_NOT_SUPPORTED"}))
      << r.out;
}

// cuGraphAddNode and cuGraphAddNode_v2 make the nodes the simulator's graphs model (empty,
// memset, allocation, free) and refuse other types; cuGraphClone copies a graph without
// memory nodes, whose clone runs as the original, and refuses one with any.
TEST(SimulatorMemory, GraphAddNodeMakesModelledNodesAndCloneCopiesGraphsWithoutMemoryNodes) {
  SimNode node("context_memory: 0\ngpus: [T4]\n");
  std::string out = InSimChild(node, [](const SimLibs& cu, FILE* out) {
    auto create = cu.Cuda<CUresult (*)(CUgraph*, unsigned)>("cuGraphCreate");
    auto add =
        cu.Cuda<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*)>("cuGraphAddNode");
    auto add_v2 = cu.Cuda<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t,
                                       CUgraphNodeParams*)>("cuGraphAddNode_v2");
    auto clone = cu.Cuda<CUresult (*)(CUgraph*, CUgraph)>("cuGraphClone");
    auto instantiate = cu.Cuda<CUresult (*)(CUgraphExec*, CUgraph, unsigned long long)>("cuGraphInstantiateWithFlags");
    auto launch = cu.Cuda<CUresult (*)(CUgraphExec, CUstream)>("cuGraphLaunch");
    auto sync = cu.Cuda<CUresult (*)()>("cuCtxSynchronize");
    auto get = cu.Cuda<CUresult (*)(CUdevice, CUgraphMem_attribute, void*)>("cuDeviceGetGraphMemAttribute");
    auto mem_alloc = cu.Cuda<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
    auto memset8 = cu.Cuda<CUresult (*)(CUdeviceptr, unsigned char, size_t)>("cuMemsetD8_v2");
    auto dtoh = cu.Cuda<CUresult (*)(void*, CUdeviceptr, size_t)>("cuMemcpyDtoH_v2");
    if (cu.Init() != CUDA_SUCCESS) return;
    auto alloc_params = [](uint64_t mib) {
      CUgraphNodeParams p{};
      p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
      p.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      p.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      p.alloc.bytesize = mib << 20;
      return p;
    };
    auto used_mib = [&] {
      cuuint64_t v = 0;
      get(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v);
      return static_cast<unsigned long long>(v >> 20);
    };
    // An allocation node and a free node of it, both by cuGraphAddNode: launched again and
    // again, each launch gives back what it took.
    CUgraph g = nullptr, copy = nullptr;
    CUgraphNode n = nullptr;
    CUgraphExec e = nullptr;
    CUgraphNodeParams a = alloc_params(128);
    CUresult rc = create(&g, 0);
    if (rc == CUDA_SUCCESS) rc = add(&n, g, nullptr, 0, &a);
    fprintf(out, "alloc-node %d %d\n", rc, a.alloc.dptr != 0);
    CUgraphNodeParams f{};
    f.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
    f.free.dptr = a.alloc.dptr;
    fprintf(out, "free-node %d\n", add_v2(&n, g, &n, nullptr, 1, &f));
    fprintf(out, "clone-with-memory-nodes %d\n", clone(&copy, g));
    rc = instantiate(&e, g, 0);
    for (int i = 0; i < 3 && rc == CUDA_SUCCESS; ++i) rc = launch(e, nullptr);
    fprintf(out, "launched %d %llu %llu\n", rc, static_cast<unsigned long long>(cu.OwnMiB()), used_mib());
    // A location that is not a device, a child graph and a host node are refused.
    CUgraph h = nullptr;
    create(&h, 0);
    CUgraphNodeParams host_loc = alloc_params(64);
    host_loc.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CUgraphNodeParams child{};
    child.type = CU_GRAPH_NODE_TYPE_GRAPH;
    child.graph.graph = g;
    CUgraphNodeParams host_fn{};
    host_fn.type = CU_GRAPH_NODE_TYPE_HOST;
    fprintf(out, "refused %d %d %d\n", add(&n, h, nullptr, 0, &host_loc), add(&n, h, nullptr, 0, &child),
            add(&n, h, nullptr, 0, &host_fn));
    // Empty and memset nodes: the clone runs them as the original would.
    CUdeviceptr buf = 0;
    rc = mem_alloc(&buf, 4096);
    if (rc == CUDA_SUCCESS) rc = memset8(buf, 0, 4096);
    CUgraphNodeParams empty{};
    empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
    CUgraphNodeParams ms{};
    ms.type = CU_GRAPH_NODE_TYPE_MEMSET;
    ms.memset.dst = buf;
    ms.memset.pitch = 64;
    ms.memset.value = 0x01020304;
    ms.memset.elementSize = 4;
    ms.memset.width = 2;
    ms.memset.height = 3;
    if (rc == CUDA_SUCCESS) rc = add(&n, h, nullptr, 0, &empty);
    if (rc == CUDA_SUCCESS) rc = add_v2(&n, h, &n, nullptr, 1, &ms);
    fprintf(out, "nodes %d\n", rc);
    CUgraph hc = nullptr;
    CUgraphExec ehc = nullptr;
    rc = clone(&hc, h);
    ms.memset.elementSize = 3;
    fprintf(out, "clone %d bad-memset %d\n", rc, add(&n, h, nullptr, 0, &ms));  // the original changes
    if (rc == CUDA_SUCCESS) rc = instantiate(&ehc, hc, 0);
    if (rc == CUDA_SUCCESS) rc = launch(ehc, nullptr);
    if (rc == CUDA_SUCCESS) rc = sync();
    uint32_t words[64] = {};
    if (rc == CUDA_SUCCESS) rc = dtoh(words, buf, sizeof(words));
    std::string set;  // the words the memset wrote
    for (int i = 0; i < 64; ++i)
      if (words[i] != 0) set += " " + std::to_string(i) + (words[i] == 0x01020304 ? "" : "?");
    fprintf(out, "clone-ran %d%s\n", rc, set.c_str());
  });
  EXPECT_EQ(Line(out, "alloc-node"), "alloc-node 0 1") << out;
  EXPECT_EQ(Line(out, "free-node"), "free-node 0") << out;
  EXPECT_EQ(Line(out, "clone-with-memory-nodes"), "clone-with-memory-nodes 801") << out;  // NOT_SUPPORTED
  EXPECT_EQ(Line(out, "launched"), "launched 0 128 0") << out;  // on the card, in the graph pool
  EXPECT_EQ(Line(out, "refused"), "refused 1 801 801") << out;
  EXPECT_EQ(Line(out, "nodes"), "nodes 0") << out;
  EXPECT_EQ(Line(out, "clone "), "clone 0 bad-memset 1") << out;
  EXPECT_EQ(Line(out, "clone-ran"), "clone-ran 0 0 1 16 17 32 33") << out;  // 2 words in each of 3 rows
}

// The device's graph memory pool: what a graph frees stays there and the next launch of
// any graph takes it before the card; the attributes report it; a launch the card has no
// room for is refused whole; the end of the context frees everything.
TEST(SimulatorMemory, GraphMemoryIsPooledReportedRefusedAndFreedWithItsContext) {
  SimNode node("context_memory: 0\ngpus: [T4]\n");  // 15360 MiB
  std::string out = InSimChild(node, [](const SimLibs& cu, FILE* out) {
    auto create = cu.Cuda<CUresult (*)(CUgraph*, unsigned)>("cuGraphCreate");
    auto add_alloc =
        cu.Cuda<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUDA_MEM_ALLOC_NODE_PARAMS*)>(
            "cuGraphAddMemAllocNode");
    auto add_free =
        cu.Cuda<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUdeviceptr)>("cuGraphAddMemFreeNode");
    auto instantiate = cu.Cuda<CUresult (*)(CUgraphExec*, CUgraph, unsigned long long)>("cuGraphInstantiateWithFlags");
    auto launch = cu.Cuda<CUresult (*)(CUgraphExec, CUstream)>("cuGraphLaunch");
    auto get = cu.Cuda<CUresult (*)(CUdevice, CUgraphMem_attribute, void*)>("cuDeviceGetGraphMemAttribute");
    auto set = cu.Cuda<CUresult (*)(CUdevice, CUgraphMem_attribute, void*)>("cuDeviceSetGraphMemAttribute");
    auto trim = cu.Cuda<CUresult (*)(CUdevice)>("cuDeviceGraphMemTrim");
    auto mem_alloc = cu.Cuda<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
    auto mem_free = cu.Cuda<CUresult (*)(CUdeviceptr)>("cuMemFree_v2");
    if (cu.Init() != CUDA_SUCCESS) return;
    // A graph of one allocation node of `mib` MiB (and a free node of it when `with_free`),
    // instantiated with `flags`; its pointer in *ptr.
    auto build = [&](uint64_t mib, bool with_free, unsigned long long flags, CUdeviceptr* ptr) {
      CUgraph g = nullptr;
      CUgraphExec e = nullptr;
      CUgraphNode n = nullptr, f = nullptr;
      CUDA_MEM_ALLOC_NODE_PARAMS p{};
      p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      p.bytesize = mib << 20;
      CUresult rc = create(&g, 0);
      if (rc == CUDA_SUCCESS) rc = add_alloc(&n, g, nullptr, 0, &p);
      if (rc == CUDA_SUCCESS && with_free) rc = add_free(&f, g, &n, 1, p.dptr);
      if (rc == CUDA_SUCCESS) rc = instantiate(&e, g, flags);
      *ptr = p.dptr;
      fprintf(out, "build-rc %d\n", rc);
      return e;
    };
    auto step = [&](const char* name) {
      cuuint64_t v[4] = {};
      const CUgraphMem_attribute attrs[4] = {CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
                                             CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
                                             CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH};
      for (int i = 0; i < 4; ++i)
        if (get(0, attrs[i], &v[i]) != CUDA_SUCCESS) v[i] = 999999ull << 20;
      fprintf(out, "%s %llu %llu %llu %llu %llu\n", name, static_cast<unsigned long long>(cu.OwnMiB()),
              static_cast<unsigned long long>(v[0] >> 20), static_cast<unsigned long long>(v[1] >> 20),
              static_cast<unsigned long long>(v[2] >> 20), static_cast<unsigned long long>(v[3] >> 20));
    };
    // Results of several calls on one line, in the order they were made.
    auto results = [&](const char* name, std::initializer_list<std::function<CUresult()>> calls) {
      std::string line = name;
      for (const auto& call : calls) line += " " + std::to_string(call());
      fprintf(out, "%s\n", line.c_str());
    };
    CUdeviceptr a = 0, b = 0, c = 0, d = 0;
    // PyTorch's way: the free inside the graph, launched again and again.
    CUgraphExec ea = build(256, true, 0, &a);
    step("instantiated");
    auto launch_a = [&] { return launch(ea, nullptr); };
    results("launch-a", {launch_a, launch_a, launch_a});
    step("a-launched");
    // Another graph takes what the pool holds before the card.
    CUgraphExec eb = build(128, false, 0, &b);
    auto launch_b = [&] { return launch(eb, nullptr); };
    results("launch-b", {launch_b, launch_b});
    step("b-launched");
    auto free_b = [&] { return mem_free(b); };
    results("free-b", {free_b, free_b});
    uint64_t zero = 0, five = 5;
    results("reset-high", {[&] { return set(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero); },
                           [&] { return set(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &five); },
                           [&] { return set(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero); }});
    step("b-freed");
    results("trim", {[&] { return trim(0); }, [&] { return trim(7); }});
    step("trimmed");
    // The card full but for 256 MiB: a 512 MiB launch is refused, and takes nothing.
    CUdeviceptr big = 0;
    fprintf(out, "fill %d\n", mem_alloc(&big, (15360ull - 256) << 20));
    CUgraphExec ec = build(512, false, 0, &c);
    fprintf(out, "launch-c %d\n", launch(ec, nullptr));
    step("c-refused");
    mem_free(big);
    fprintf(out, "launch-c %d\n", launch(ec, nullptr));
    // Auto-free on launch: each launch frees what the one before left allocated.
    CUgraphExec ed = build(64, false, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, &d);
    auto launch_d = [&] { return launch(ed, nullptr); };
    results("launch-d", {launch_d, launch_d});
    step("c-d-launched");
    fprintf(out, "reset-rc %d\n", cu.Cuda<CUresult (*)(CUdevice)>("cuDevicePrimaryCtxReset_v2")(0));
    step("reset");
  });
  // Each step: NVML's MiB for the process, then used, used high, reserved, reserved high.
  EXPECT_EQ(Lines(out, "build-rc"), std::vector<std::string>(4, "build-rc 0")) << out;
  EXPECT_EQ(Line(out, "instantiated"), "instantiated 0 0 0 0 0") << out;
  EXPECT_EQ(Line(out, "launch-a"), "launch-a 0 0 0") << out;
  EXPECT_EQ(Line(out, "a-launched"), "a-launched 256 0 256 256 256") << out;
  EXPECT_EQ(Line(out, "launch-b"), "launch-b 0 1") << out;  // 1: CUDA_ERROR_INVALID_VALUE
  EXPECT_EQ(Line(out, "b-launched"), "b-launched 256 128 256 256 256") << out;
  EXPECT_EQ(Line(out, "free-b"), "free-b 0 1") << out;
  EXPECT_EQ(Line(out, "reset-high"), "reset-high 0 1 1") << out;
  EXPECT_EQ(Line(out, "b-freed"), "b-freed 256 0 0 256 256") << out;
  EXPECT_EQ(Line(out, "trim"), "trim 0 101") << out;  // 101: CUDA_ERROR_INVALID_DEVICE
  EXPECT_EQ(Line(out, "trimmed"), "trimmed 0 0 0 0 256") << out;
  EXPECT_EQ(Line(out, "fill"), "fill 0") << out;
  EXPECT_EQ(Line(out, "launch-c"), "launch-c 2") << out;  // 2: CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_EQ(Line(out, "c-refused"), "c-refused 15104 0 0 0 256") << out;
  EXPECT_EQ(Line(out, "launch-c", 1), "launch-c 0") << out;
  EXPECT_EQ(Line(out, "launch-d"), "launch-d 0 0") << out;
  EXPECT_EQ(Line(out, "c-d-launched"), "c-d-launched 576 576 576 576 576") << out;
  EXPECT_EQ(Line(out, "reset-rc"), "reset-rc 0") << out;
  EXPECT_EQ(Line(out, "reset "), "reset 0 0 576 0 576") << out;
}

// CUDA is not usable in a child forked after the parent initialised it (NVIDIA documents
// it; docs/measurements/h100-driver.md): every call answers CUDA_ERROR_NOT_INITIALIZED (3), cuInit
// included, while the parent goes on. A child forked before cuInit uses CUDA as its own
// process: NVML lists it under its own pid and its memory outlives the parent.
TEST(SimulatorMemory, CudaIsRefusedInAChildForkedAfterInit) {
  SimNode node("gpus: [H100-80GB]\n");
  std::string out = InSimChild(node, [](const SimLibs& cu, FILE* out) {
    fprintf(out, "parent-init %d\n", cu.Init());
    pid_t child = fork();
    if (child == 0) {
      int count = -1;
      CUdevice dev = -1;
      fprintf(out, "child-init %d\n", cu.Cuda<CUresult (*)(unsigned)>("cuInit")(0));
      fprintf(out, "child-count %d\n", cu.Cuda<CUresult (*)(int*)>("cuDeviceGetCount")(&count));
      fprintf(out, "child-get %d\n", cu.Cuda<CUresult (*)(CUdevice*, int)>("cuDeviceGet")(&dev, 0));
      fprintf(out, "child-alloc %d\n", cu.Alloc(1 << 20));
      fprintf(out, "child-limit %d\n", cu.SetLimit(CU_LIMIT_STACK_SIZE, 64 << 10));
      _exit(0);
    }
    waitpid(child, nullptr, 0);
    fprintf(out, "parent-alloc %d\n", cu.Alloc(64 << 20));
    fprintf(out, "parent-own %llu\n", static_cast<unsigned long long>(cu.OwnMiB()));
  });
  EXPECT_EQ(Line(out, "parent-init"), "parent-init 0") << out;
  EXPECT_EQ(Line(out, "child-init"), "child-init 3") << out;
  EXPECT_EQ(Line(out, "child-count"), "child-count 3") << out;
  EXPECT_EQ(Line(out, "child-get"), "child-get 3") << out;
  EXPECT_EQ(Line(out, "child-alloc"), "child-alloc 3") << out;
  EXPECT_EQ(Line(out, "child-limit"), "child-limit 3") << out;
  EXPECT_EQ(Line(out, "parent-alloc"), "parent-alloc 0") << out;
  EXPECT_EQ(Line(out, "parent-own"), "parent-own 582") << out;

  out = InSimChild(node, [](const SimLibs& cu, FILE* out) {
    int version = 0;
    cu.Cuda<CUresult (*)(int*)>("cuDriverGetVersion")(&version);  // attaches, CUDA not initialised
    pid_t parent = getpid();
    if (fork() != 0) _exit(0);  // the parent leaves; the child carries on
    fprintf(out, "child-init %d\n", cu.Init());
    fprintf(out, "child-alloc %d\n", cu.Alloc(1ull << 30));
    fprintf(out, "child-own %llu parent %llu\n", static_cast<unsigned long long>(cu.OwnMiB()),
            static_cast<unsigned long long>(cu.NvmlMiB(parent)));
    WaitUntil([parent] { return kill(parent, 0) != 0; }, std::chrono::seconds(5));  // until reaped
    fprintf(out, "parent-gone %d own %llu\n", kill(parent, 0) != 0, static_cast<unsigned long long>(cu.OwnMiB()));
  });
  EXPECT_EQ(Line(out, "child-init"), "child-init 0") << out;
  EXPECT_EQ(Line(out, "child-alloc"), "child-alloc 0") << out;
  EXPECT_EQ(Line(out, "child-own"), "child-own 1542 parent 0") << out;  // 518 + 1024, its own
  EXPECT_EQ(Line(out, "parent-gone"), "parent-gone 1 own 1542") << out;
}

// Every container's workload is PID 1 in a namespace of its own. The simulated driver
// knows processes as the kernel driver does, by host pid and start time
// (docs/measurements/pids-and-namespaces.md), so two of them share a card like any two
// processes.
#define NEED_PID_NAMESPACES()                                                                 \
  if (!CanUnsharePidNamespace()) {                                                            \
    std::cout << "NOTE: needs root and unshare --pid: processes in their own PID namespaces " \
                 "were NOT tested\n";                                                         \
    GTEST_SKIP() << "needs root and unshare --pid";                                           \
  }

TEST(SimulatorPidNamespaces, TwoWorkloadsThatAreBothPid1ShareACardAndBothFinish) {
  NEED_PID_NAMESPACES();
  SimNode node("gpus: [H100-80GB]\n");
  Result results[2];
  std::thread runs[2];
  for (int i = 0; i < 2; ++i)
    runs[i] = std::thread([&, i] {
      results[i] =
          RunProcess(InOwnPidNamespace({GpusliceBin(), "burn", "--util", "100", "--seconds", "3"}), node.env(), 60);
    });
  for (auto& t : runs) t.join();
  for (const Result& r : results) {
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    // Time-sliced with the other one the whole time: each got about half of the card.
    EXPECT_NEAR(BurnUtil(r.out), 50, 15) << r.out;
  }
}

// NVML answers in the caller's PID namespace, as the H200's driver did
// (docs/measurements/h200-driver.md, "Pids"): the process list translates each pid and
// leaves out what the caller cannot see; a sample of a process the caller cannot see
// carries its host pid.
TEST(SimulatorPidNamespaces, NvmlAnswersInTheCallersPidNamespace) {
  NEED_PID_NAMESPACES();
  SimNode node("gpus: [H100-80GB]\n");
  Process holder(InOwnPidNamespace({ProbeBin(), "init", "alloc", "mem", "1g", "launch", "2000", "1000000", "nvml",
                                    "pids", "sleep", "30000"}),
                 node.env());
  ASSERT_TRUE(holder.WaitForOutput("samplepids")) << holder.out();
  pid_t host_pid = UnsharedChild(holder.pid());
  ASSERT_GT(host_pid, 0);
  std::vector<pid_t> ns = NsPids(host_pid);
  ASSERT_EQ(ns.size(), 2u);
  ASSERT_EQ(ns[0], host_pid);
  ASSERT_EQ(ns[1], 1);  // PID 1 in its own namespace
  // The holder finds itself, with its memory, under its own pid 1.
  EXPECT_EQ(Line(holder.out(), "pids"), "pids 1") << holder.out();
  EXPECT_GE(U(Field(holder.out(), "nvml", 8)) >> 20, 518u + 1024u) << holder.out();  // and the module
  // NVML's samples for a period appear 20 ms after it ends (200 ms periods): until the
  // holder's first is there, by its host pid.
  Result outside;
  EXPECT_TRUE(WaitUntil(
      [&] {
        outside = RunProcess({ProbeBin(), "pids"}, node.env());
        auto samples = Lines(outside.out, "samplepids");
        return !samples.empty() && samples[0].find("samplepids " + std::to_string(host_pid)) == 0;
      },
      std::chrono::seconds(5), std::chrono::milliseconds(50)))
      << outside.out;
  ASSERT_EQ(outside.code, 0) << outside.err;
  EXPECT_EQ(Line(outside.out, "pids"), "pids " + std::to_string(host_pid)) << outside.out;
  // A sibling namespace: the holder is left out of the list, and it has no context of
  // its own there (pids does not init); its samples still carry the host pid.
  Result sibling = RunProcess(InOwnPidNamespace({ProbeBin(), "pids"}), node.env());
  ASSERT_EQ(sibling.code, 0) << sibling.err;
  EXPECT_EQ(Line(sibling.out, "pids"), "pids") << sibling.out;
  EXPECT_EQ(Line(sibling.out, "samplepids").find("samplepids " + std::to_string(host_pid)), 0u) << sibling.out;
  // Killed, it is gone from the card as soon as anyone looks, its memory freed.
  kill(host_pid, SIGKILL);
  holder.Wait();
  Result r = RunProcess({ProbeBin(), "init", "nvml"}, node.env());
  EXPECT_EQ(U(Field(r.out, "nvml", 7)), 1u) << r.out;  // only the looker
}

// Two processes of one namespace see each other by their pids there.
TEST(SimulatorPidNamespaces, ProcessesOfOneNamespaceSeeEachOtherByTheirPidsThere) {
  NEED_PID_NAMESPACES();
  SimNode node("gpus: [H100-80GB]\n");
  const std::string probe = ProbeBin();
  Result r = RunProcess(InOwnPidNamespace({"/bin/sh", "-c",
                                           probe +
                                               " init alloc mem 64m launch 2000 1000000 sleep 1500 & "
                                               "sleep 1; " +
                                               probe + " init pids; echo holder $!; wait"}),
                        node.env(), 60);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::vector<std::string> pids = Fields(r.out, "pids");
  std::string holder = Fields(r.out, "holder").at(1);
  ASSERT_EQ(pids.size(), 3u) << r.out;  // the holder and the asker, both small pids of this namespace
  EXPECT_TRUE(pids[1] == holder || pids[2] == holder) << r.out;
  for (size_t i = 1; i < pids.size(); ++i) EXPECT_LT(std::stoi(pids[i]), 100) << r.out;
}

TEST(SimulatorPidNamespaces, AProcessTheNodeCannotIdentifyIsRefusedAtInitAndSaysWhy) {
  SimNode node("gpus: [H100-80GB]\n");
  std::string socket = node.root() + "/driver.sock";
  ASSERT_EQ(rename(socket.c_str(), (socket + ".away").c_str()), 0);
  Result r = RunProcess({ProbeBin(), "init"}, node.env());
  EXPECT_NE(r.out.find("CUDA_ERROR_NO_DEVICE"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("cannot reach the simulated node's driver at " + socket), std::string::npos) << r.err;
  r = RunProcess({ProbeBin(), "pids"}, node.env());
  EXPECT_NE(r.code, 0) << "NVML must not start without an identity: " << r.out;
  ASSERT_EQ(rename((socket + ".away").c_str(), socket.c_str()), 0);
  r = RunProcess({ProbeBin(), "init"}, node.env());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
}

// A process may connect to the node's driver and be gone before it is answered (a thread
// that registers as its process exits). The node stays up for everyone else: its answer
// to the departed one must not kill it.
TEST(Simulator, ProcessesThatHangUpBeforeTheDriverAnswersLeaveTheNodeUp) {
  SimNode node("gpus: [H100-80GB]\n");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string socket_path = node.root() + "/driver.sock";
  ASSERT_LT(socket_path.size(), sizeof(addr.sun_path));
  socket_path.copy(addr.sun_path, socket_path.size());
  for (int i = 0; i < 50; ++i) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << "hang-up " << i << ": " << strerror(errno);
    close(fd);
  }
  Result r = RunProcess({ProbeBin(), "init", "alloc", "mem", "1g"}, node.env());
  EXPECT_EQ(Line(r.out, "init"), "init ok") << r.out << r.err;
  EXPECT_EQ(Line(r.out, "alloc"), "alloc ok") << r.out << r.err;
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

// A green context: half the SMs, a context of its own beside the primary one, costing what
// a context costs (the model, not measured), given back when destroyed.
TEST(Simulator, AGreenContextIsAContextOfItsOwnAndCostsWhatAContextCosts) {
  SimNode node("context_memory: 518Mi\ngpus: [H100-80GB]\n");
  Result r = RunProcess({ProbeBin(), "init", "greenctx", "greencurrent", "alloc", "mem", "64m", "greenburn", "50",
                         "1000000", "greendestroy"},
                        node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Lines(r.out, "greenctx"), std::vector<std::string>{"greenctx ok 518 distinct"}) << r.out;
  EXPECT_EQ(Lines(r.out, "greencurrent"), std::vector<std::string>{"greencurrent ok"});
  EXPECT_EQ(Lines(r.out, "alloc"), std::vector<std::string>{"alloc ok"});
  EXPECT_EQ(Lines(r.out, "greenburn").size(), 1u) << r.out;
  // The green context and the 64 MiB allocated in it are gone; the primary context stays.
  EXPECT_EQ(Lines(r.out, "greendestroy"), std::vector<std::string>{"greendestroy ok 518"}) << r.out;
}

// Multicast on an NVSwitch board: a binding keeps a released handle's memory until it is
// unbound (the model, not measured). A PCIe card has none.
TEST(Simulator, AMulticastBindingKeepsAReleasedHandleUntilUnbound) {
  SimNode node("context_memory: 518Mi\ngpus: [H100-80GB]\n");
  Result r = RunProcess({ProbeBin(), "init", "mckeeps"}, node.env());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Lines(r.out, "mckeeps"), std::vector<std::string>{"mckeeps 1030 1030 518 518"}) << r.out;
  SimNode pcie("gpus: [T4]\n");
  r = RunProcess({ProbeBin(), "init", "mckeeps"}, pcie.env());
  EXPECT_EQ(Lines(r.out, "mckeeps"), std::vector<std::string>{"mckeeps unsupported"}) << r.out << r.err;
}

}  // namespace
}  // namespace gs::testing
