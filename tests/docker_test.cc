// docker's --gpus route end to end, on a simulated node: a private dockerd (Debian's
// docker.io) finds on its PATH the nvidia-container-runtime-hook that `gpuslice runtime
// configure --runtime docker --mode hook --write` installed, and every `docker run --gpus`
// container gets its cards and a container-wide slice from its own `-e` limits. One daemon
// per test process (SetUpTestSuite; tests/CMakeLists.txt runs each group of tests as one
// process). Needs root, dockerd and docker: without them every test is skipped with the
// reason, and the process exits 77, which ctest reports as skipped.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/common/file.h"
#include "tests/container_roots.h"
#include "tests/harness.h"
#include "tests/private_dockerd.h"
#include "tests/racing_slice.h"
#include "tests/wait_until.h"

namespace fs = std::filesystem;

namespace gs::testing {
namespace {

constexpr char kImage[] = "local/img:1";

class DockerGpus : public ::testing::Test {
 public:
  static void SetUpTestSuite();
  static void TearDownTestSuite();

 protected:
  void SetUp() override {
    if (!skip_.empty()) {
      std::cout << "NOTE: " << skip_ << ": this test did NOT run\n";
      GTEST_SKIP() << skip_;
    }
    ASSERT_TRUE(broken_.empty()) << broken_;
  }
  static Result Docker(const std::vector<std::string>& args) { return dockerd_->Docker(args); }
  // `docker run --rm --network none [gpus...] [-e env...] IMAGE argv...`
  static std::vector<std::string> RunArgs(const std::vector<std::string>& gpus, const std::vector<std::string>& env,
                                          const std::vector<std::string>& argv) {
    std::vector<std::string> a = {"docker", "run", "--rm", "--network", "none"};
    a.insert(a.end(), gpus.begin(), gpus.end());
    for (const auto& e : env) a.insert(a.end(), {"-e", e});
    a.push_back(kImage);
    a.insert(a.end(), argv.begin(), argv.end());
    return a;
  }
  static Result Run(const std::vector<std::string>& gpus, const std::vector<std::string>& env,
                    const std::vector<std::string>& argv) {
    return RunProcess(RunArgs(gpus, env, argv), dockerd_->client_env(), 180);
  }
  static std::unique_ptr<Process> Start(const std::vector<std::string>& gpus, const std::vector<std::string>& env,
                                        const std::vector<std::string>& argv) {
    return std::make_unique<Process>(RunArgs(gpus, env, argv), dockerd_->client_env());
  }
  // The containers' slice directories the hook has made and not yet removed.
  static std::set<std::string> SliceDirs() {
    std::set<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(state_ + "/oci-containers", ec))
      out.insert(e.path().filename().string());
    return out;
  }
  // What the hook left on the host: slice directories, mounts under the state directory,
  // and files in the cards directory other than the cards.
  static std::vector<std::string> LeftOnTheHost() {
    std::vector<std::string> left;
    for (const auto& d : SliceDirs()) left.push_back(state_ + "/oci-containers/" + d);
    std::ifstream mi("/proc/self/mountinfo");
    for (std::string line; std::getline(mi, line);)
      if (line.find(state_) != std::string::npos) left.push_back("mount: " + line);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(state_ + "/cards", ec))
      if (std::find(uuids_.begin(), uuids_.end(), e.path().filename().string()) == uuids_.end())
        left.push_back(e.path().string());
    return left;
  }
  // `gpuslice hook reclaim`: removes the slices of containers that are gone.
  static Result Reclaim() { return RunProcess({GpusliceBin(), "hook", "--state-dir", state_, "reclaim"}); }
  static std::string HookLog() {
    auto text = ReadFile(dir_ + "/hook.log");
    return text.ok() ? *text : "";
  }
  static std::string DaemonLog() { return dockerd_->LogTail(); }

  static std::unique_ptr<SimNode> node_;
  static std::unique_ptr<PrivateDockerd> dockerd_;
  static std::string dir_, state_, skip_, broken_;
  static std::vector<std::string> uuids_;
};

std::unique_ptr<SimNode> DockerGpus::node_;
std::unique_ptr<PrivateDockerd> DockerGpus::dockerd_;
std::string DockerGpus::dir_, DockerGpus::state_, DockerGpus::skip_, DockerGpus::broken_;
std::vector<std::string> DockerGpus::uuids_;

void DockerGpus::SetUpTestSuite() {
  skip_ = PrivateDockerdUnavailable();
  if (!skip_.empty()) return;
  node_ = std::make_unique<SimNode>("context_memory: 0\ngpus: 2xT4\n");
  dir_ = node_->root() + "/docker";
  state_ = node_->root() + "/gs-state";
  Result smi = RunProcess({GpusliceBin(), "smi"}, node_->env());
  std::istringstream words(smi.out);
  for (std::string w; words >> w;)
    if (w.rfind("GPU-", 0) == 0) uuids_.push_back(w);
  if (uuids_.size() != 2) {
    broken_ = "the simulated node has no two cards: " + smi.out + smi.err;
    return;
  }
  // The hook, installed as a user installs it, in a directory only this daemon's PATH has.
  const std::string hook_dir = dir_ + "/hookbin";
  Result conf = RunProcess({GpusliceBin(), "runtime",     "configure",  "--runtime",   "docker",
                            "--mode",      "hook",        "--write",    "--hook-dir",  hook_dir,
                            "--gpuslice",  GpusliceBin(), "--enforcer", EnforcerLib(), "--driver-root",
                            node_->root(), "--state-dir", state_,       "--hook-log",  dir_ + "/hook.log"});
  if (conf.code != 0) {
    broken_ = "gpuslice runtime configure failed: " + conf.out + conf.err;
    return;
  }
  dockerd_ = std::make_unique<PrivateDockerd>(dir_, hook_dir);
  if (!dockerd_->error().empty()) {
    skip_ = dockerd_->error();  // it cannot run here: said loudly by every test
    return;
  }
  // The image: NVIDIA_VISIBLE_DEVICES=all, as every CUDA base image sets it.
  ProbeImageRootfs(dir_ + "/rootfs");
  broken_ = dockerd_->Import(dir_ + "/rootfs", kImage, {"ENV PATH=/bin", "ENV NVIDIA_VISIBLE_DEVICES=all"});
}

void DockerGpus::TearDownTestSuite() {
  dockerd_.reset();  // removes the containers, stops the daemon
  node_.reset();     // stops the simulator, detaches every mount under its root and removes it
}

// The first line of `out`: the container id that docker printed.
std::string ContainerId(const std::string& out) {
  return out.substr(0, out.find('\n'));
}

// docker's forms of --gpus give exactly their cards, each with the enforcer and a slice,
// whatever the image's NVIDIA_VISIBLE_DEVICES says; a container without --gpus gets none.
TEST_F(DockerGpus, EachGpusFormGivesItsCardsAndTheEnforcerAndNoGpusGivesNothing) {
  const std::string look =
      "ls /dev | grep 'nvidia[0-9]' | tr '\\n' ' '; echo; cat /etc/ld.so.preload; "
      "grep -o 'GPU-[0-9a-f-]*' /etc/gpuslice/limits | sort | tr '\\n' ' '; echo; /bin/cuda_probe maps init";
  struct Case {
    std::string gpus, nodes, uuids;
  };
  const Case cases[] = {
      {"all", "nvidia0 nvidia1 ", uuids_[0] + " " + uuids_[1] + " "},
      {"1", "nvidia0 ", uuids_[0] + " "},
      {"\"device=1\"", "nvidia1 ", uuids_[1] + " "},
      {"\"device=" + uuids_[0] + "\"", "nvidia0 ", uuids_[0] + " "},
      {"\"device=0,1\"", "nvidia0 nvidia1 ", uuids_[0] + " " + uuids_[1] + " "},
  };
  for (const auto& c : cases) {
    Result r = Run({"--gpus", c.gpus}, {}, {"sh", "-c", look});
    ASSERT_EQ(r.code, 0) << "--gpus " << c.gpus << ": " << r.out << r.err << HookLog();
    std::vector<std::string> lines;
    std::istringstream in(r.out);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    ASSERT_GE(lines.size(), 5u) << r.out;
    EXPECT_EQ(lines[0], c.nodes) << "--gpus " << c.gpus;
    EXPECT_NE(lines[1].find("libgpuslice.so"), std::string::npos) << "--gpus " << c.gpus << ": " << lines[1];
    // The slice's limits file names exactly the container's cards.
    std::vector<std::string> want;
    std::istringstream wanted(c.uuids);
    for (std::string u; wanted >> u;) want.push_back(u);
    std::sort(want.begin(), want.end());
    std::string want_line;
    for (const auto& u : want) want_line += u + " ";
    EXPECT_EQ(lines[2], want_line) << "--gpus " << c.gpus;
    EXPECT_EQ(Line(r.out, "maps"), "maps enforcer loaded") << "--gpus " << c.gpus;
    EXPECT_EQ(Line(r.out, "init"), "init ok") << "--gpus " << c.gpus << ": " << r.out << r.err;
  }
  // No --gpus: docker adds no hook; the image's variable alone gives nothing.
  Result none = Run({}, {},
                    {"sh", "-c",
                     "ls /dev | grep -c nvidia; ls /etc/ld.so.preload /etc/gpuslice 2>&1 | "
                     "grep -c 'No such'; ls -R /lib /usr/lib 2>/dev/null | grep -c libcuda"});
  EXPECT_EQ(none.out, "0\n2\n0\n") << none.out << none.err;
}

// `--gpus all,capabilities=utility` (a monitoring container): the cards and the management
// library, no compute: no libcuda, no nvidia-uvm.
TEST_F(DockerGpus, UtilityCapabilityGivesTheManagementLibraryWithoutCompute) {
  Result r = Run({"--gpus", "all,capabilities=utility"}, {},
                 {"sh", "-c",
                  "ls /dev | grep nvidia | sort | tr '\\n' ' '; echo; ls /lib/x86_64-linux-gnu | grep "
                  "'libnvidia-ml\\|libcuda' | sort | tr '\\n' ' '"});
  ASSERT_EQ(r.code, 0) << r.out << r.err << HookLog();
  EXPECT_EQ(r.out, "nvidia0 nvidia1 nvidiactl \nlibnvidia-ml.so libnvidia-ml.so.1 ") << r.err;
}

// Six processes of one container race for memory under `-e CUDA_DEVICE_MEMORY_LIMIT=2g`:
// together they hold at most the slice, watched from outside.
TEST_F(DockerGpus, SixRacingProcessesOfOneContainerShareItsMemoryLimit) {
  RaceOnCard w = SixRacingProcesses(node_->env(), "docker", [&] {
    return Run({"--gpus", "\"device=" + uuids_[0] + "\""}, {"CUDA_DEVICE_MEMORY_LIMIT=2g"},
               {"sh", "-c", kSixRacingProcesses});
  });
  ASSERT_TRUE(w.watched) << HookLog();
  EXPECT_LE(w.card_most, 2 * kGiB + 2 * kMiB);
}

// Containers that start `gpuslice burn` as PID 1 once all of them are running (a file the
// test creates in a directory they share), so that the shares are measured together.
class Burners {
 public:
  Burners(const std::string& dir) : dir_(dir) { fs::create_directories(dir_); }
  std::vector<std::string> Argv(const std::string& name) const {
    return {"sh", "-c",
            "touch /sync/ready-" + name +
                "; until [ -e /sync/go ]; do usleep 10000; done; exec /bin/gpuslice burn --memory 0 --util 100 "
                "--seconds 6"};
  }
  std::vector<std::string> Mount() const { return {"-v", dir_ + ":/sync"}; }
  // Waits until every container is ready, then lets them go.
  bool Go(const std::vector<std::string>& names) {
    bool ready = WaitUntil(
        [&] {
          for (const auto& n : names)
            if (!fs::exists(dir_ + "/ready-" + n)) return false;
          return true;
        },
        std::chrono::seconds(60));
    if (!ready) return false;
    std::ofstream(dir_ + "/go") << "go\n";
    return true;
  }

 private:
  std::string dir_;
};

// Two containers on one card asking for 30 % and 70 % (policy default), both saturating:
// they take turns through the node's cards directory.
TEST_F(DockerGpus, TwoContainersOnOneCardGetTheirComputeShares) {
  Burners burners(dir_ + "/sync-two");
  std::vector<std::string> gpus = {"--gpus", "\"device=0\""};
  auto mount = burners.Mount();
  gpus.insert(gpus.end(), mount.begin(), mount.end());
  auto a = Start(gpus, {"CUDA_DEVICE_SM_LIMIT=30"}, burners.Argv("a"));
  auto b = Start(gpus, {"CUDA_DEVICE_SM_LIMIT=70"}, burners.Argv("b"));
  ASSERT_TRUE(burners.Go({"a", "b"})) << HookLog() << DaemonLog();
  Result ra = a->Wait(), rb = b->Wait();
  ASSERT_EQ(ra.code, 0) << ra.out << ra.err;
  ASSERT_EQ(rb.code, 0) << rb.out << rb.err;
  std::cout << "docker, shares 30 and 70: " << BurnUtil(ra.out) << "% and " << BurnUtil(rb.out) << "%\n";
  EXPECT_NEAR(BurnUtil(ra.out), 30, 5) << ra.out << ra.err;
  EXPECT_NEAR(BurnUtil(rb.out), 70, 5) << rb.out << rb.err;
  EXPECT_GE(BurnUtil(ra.out) + BurnUtil(rb.out), 90);
}

// Three containers at 20, 30 and 50 % on one card.
TEST_F(DockerGpus, ThreeContainersOnOneCardGetTheirComputeShares) {
  Burners burners(dir_ + "/sync-three");
  std::vector<std::string> gpus = {"--gpus", "\"device=" + uuids_[1] + "\""};
  auto mount = burners.Mount();
  gpus.insert(gpus.end(), mount.begin(), mount.end());
  const int shares[] = {20, 30, 50};
  std::vector<std::unique_ptr<Process>> containers;
  for (int s : shares)
    containers.push_back(Start(gpus, {"CUDA_DEVICE_SM_LIMIT=" + std::to_string(s)}, burners.Argv(std::to_string(s))));
  ASSERT_TRUE(burners.Go({"20", "30", "50"})) << HookLog() << DaemonLog();
  double sum = 0;
  std::cout << "docker, shares 20, 30 and 50:";
  for (size_t i = 0; i < containers.size(); ++i) {
    Result r = containers[i]->Wait();
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    std::cout << " " << BurnUtil(r.out) << "%";
    EXPECT_NEAR(BurnUtil(r.out), shares[i], 5) << r.out << r.err;
    sum += BurnUtil(r.out);
  }
  std::cout << "\n";
  EXPECT_GE(sum, 90);
}

// docker-compose (1.29) asks for GPUs through deploy.resources.reservations.devices, by
// device id or by count, with the limits in `environment:`.
TEST_F(DockerGpus, ComposeServicesOnOneCardGetTheirComputeShares) {
  if (!Have("docker-compose")) {
    std::cout << "NOTE: needs docker-compose (make test installs Debian's): this test did NOT run\n";
    GTEST_SKIP() << "needs docker-compose";
  }
  Burners burners(dir_ + "/sync-compose");
  auto service = [&](const std::string& name, const std::string& share, const std::string& devices) {
    std::string argv;
    for (const auto& a : burners.Argv(name)) argv += (argv.empty() ? "" : ", ") + nlohmann::json(a).dump();
    return "  " + name + ":\n    image: " + kImage + "\n    network_mode: none\n    command: [" + argv +
           "]\n    environment:\n      CUDA_DEVICE_SM_LIMIT: \"" + share + "\"\n    volumes:\n      - " + dir_ +
           "/sync-compose:/sync\n    deploy:\n      resources:\n        reservations:\n          devices:\n"
           "            - driver: nvidia\n              " +
           devices + "\n              capabilities: [gpu]\n";
  };
  const std::string file = dir_ + "/compose.yaml";
  // `count: 1` is card 0, as `docker run --gpus 1`.
  std::ofstream(file) << "version: \"3.8\"\nservices:\n"
                      << service("low", "30", "device_ids: [\"0\"]") << service("high", "70", "count: 1");
  const std::vector<std::string> compose = {"docker-compose", "-f", file, "-p", "gs" + std::to_string(getpid())};
  auto with = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = compose;
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  };
  Process up(with({"up", "--no-color"}), dockerd_->client_env());
  ASSERT_TRUE(burners.Go({"low", "high"})) << HookLog() << DaemonLog();
  Result ru = up.Wait();
  Result low = RunProcess(with({"logs", "--no-color", "low"}), dockerd_->client_env());
  Result high = RunProcess(with({"logs", "--no-color", "high"}), dockerd_->client_env());
  RunProcess(with({"down"}), dockerd_->client_env());
  ASSERT_EQ(ru.code, 0) << ru.out << ru.err;
  std::cout << "compose, shares 30 and 70: " << BurnUtil(low.out) << "% and " << BurnUtil(high.out) << "%\n";
  EXPECT_NEAR(BurnUtil(low.out), 30, 5) << low.out << ru.out << ru.err;
  EXPECT_NEAR(BurnUtil(high.out), 70, 5) << high.out << ru.out << ru.err;
  EXPECT_GE(BurnUtil(low.out) + BurnUtil(high.out), 90);
}

// Alone on a card, `force` holds a share even though nobody else wants the card.
TEST_F(DockerGpus, ForcePolicyHoldsAShareAloneOnTheCard) {
  Result r = Run({"--gpus", "\"device=1\""}, {"CUDA_DEVICE_SM_LIMIT=30", "GPU_CORE_UTILIZATION_POLICY=force"},
                 {"/bin/gpuslice", "burn", "--memory", "0", "--util", "100", "--seconds", "5"});
  ASSERT_EQ(r.code, 0) << r.out << r.err << HookLog();
  std::cout << "docker, 30 % forced, alone: " << BurnUtil(r.out) << "%\n";
  EXPECT_NEAR(BurnUtil(r.out), 30, 5) << r.out;
}

// A limit that does not parse refuses the container with a message naming the variable,
// and leaves nothing on the host (nor a container in docker).
TEST_F(DockerGpus, ALimitThatDoesNotParseRefusesTheContainerAndLeavesNothing) {
  ASSERT_EQ(Reclaim().code, 0);
  ASSERT_TRUE(LeftOnTheHost().empty());
  Result r = Run({"--gpus", "1"}, {"CUDA_DEVICE_MEMORY_LIMIT=lots"}, {"echo", "started"});
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.out.find("started"), std::string::npos) << r.out;
  // dockerd quotes the hook's stderr in its error.
  EXPECT_NE(r.err.find("gpuslice hook: container "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("CUDA_DEVICE_MEMORY_LIMIT=\"lots\" is not a size"), std::string::npos) << r.err;
  EXPECT_NE(HookLog().find("CUDA_DEVICE_MEMORY_LIMIT=\"lots\" is not a size"), std::string::npos) << HookLog();
  auto left = LeftOnTheHost();
  EXPECT_TRUE(left.empty()) << left.size() << " left, first " << (left.empty() ? "" : left[0]);
  EXPECT_EQ(Docker({"ps", "-aq"}).out, "");
}

// docker runs no poststop hook for --gpus: a container's slice directory outlives it until
// the next hook run, which removes it, or `gpuslice hook reclaim`; a running container's
// stays.
TEST_F(DockerGpus, SlicesOfContainersThatAreGoneAreReclaimed) {
  ASSERT_EQ(Reclaim().code, 0);
  ASSERT_TRUE(LeftOnTheHost().empty());
  auto id_of = [&](const std::string& cidfile) {
    auto text = ReadFile(cidfile);
    return text.ok() ? *text : std::string("(no " + cidfile + ")");
  };
  const std::vector<std::string> sliced = {"sh", "-c", "test -s /etc/gpuslice/limits && test -d /var/run/gpuslice"};
  Result first = Run({"--gpus", "1", "--cidfile", dir_ + "/first.cid"}, {"CUDA_DEVICE_MEMORY_LIMIT=1g"}, sliced);
  ASSERT_EQ(first.code, 0) << first.out << first.err << HookLog();
  EXPECT_EQ(SliceDirs(), std::set<std::string>{id_of(dir_ + "/first.cid")});  // gone, its directory stays

  Result second = Run({"--gpus", "1", "--cidfile", dir_ + "/second.cid"}, {"CUDA_DEVICE_MEMORY_LIMIT=1g"}, sliced);
  ASSERT_EQ(second.code, 0) << second.out << second.err << HookLog();
  EXPECT_EQ(SliceDirs(), std::set<std::string>{id_of(dir_ + "/second.cid")});  // its hook run removed the first's

  Result running = Docker({"run", "-d", "--network", "none", "--gpus", "1", kImage, "sleep", "600"});
  ASSERT_EQ(running.code, 0) << running.out << running.err << HookLog();
  const std::string id = ContainerId(running.out);
  EXPECT_EQ(SliceDirs(), std::set<std::string>{id});
  Result reclaimed = Reclaim();
  EXPECT_EQ(reclaimed.out, "reclaimed 0 slice directories of containers that are gone\n") << reclaimed.err;
  EXPECT_EQ(SliceDirs(), std::set<std::string>{id});  // still running: kept
  ASSERT_EQ(Docker({"rm", "-f", id}).code, 0);
  reclaimed = Reclaim();
  EXPECT_EQ(reclaimed.out, "reclaimed 1 slice directories of containers that are gone\n") << reclaimed.err;
  auto left = LeftOnTheHost();
  EXPECT_TRUE(left.empty()) << left.size() << " left, first " << (left.empty() ? "" : left[0]);
}

// `docker exec` runs a process in the container's mounts: it is held to the same slice as
// the container's own processes.
TEST_F(DockerGpus, DockerExecProcessesShareTheContainersSlice) {
  Result started = Docker({"run", "-d", "--network", "none", "--gpus", "1", "-e", "CUDA_DEVICE_MEMORY_LIMIT=3g", kImage,
                           "/bin/cuda_probe", "init", "alloc", "mem", "1g", "sleep", "600000"});
  ASSERT_EQ(started.code, 0) << started.out << started.err << HookLog();
  const std::string id = ContainerId(started.out);
  Result logs;
  WaitUntil(
      [&] {
        return (logs = Docker({"logs", id})).out.find("alloc ") != std::string::npos;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(50));
  EXPECT_EQ(Line(logs.out, "alloc"), "alloc ok") << logs.out << logs.err;
  // 518 MiB per context: 1542 MiB held, a second context fits, a second 1 GiB does not.
  Result exec = Docker({"exec", id, "/bin/cuda_probe", "init", "alloc", "mem", "1g", "alloc", "mem", "512m"});
  Docker({"rm", "-f", id});
  EXPECT_EQ(Line(exec.out, "init"), "init ok") << exec.out << exec.err;
  ASSERT_EQ(Lines(exec.out, "alloc").size(), 2u) << exec.out << exec.err;
  EXPECT_EQ(Line(exec.out, "alloc"), "alloc err CUDA_ERROR_OUT_OF_MEMORY") << exec.out;
  EXPECT_EQ(Line(exec.out, "alloc", 1), "alloc ok") << exec.out;
}

// A stopped container started again (`docker start`, restart policies) gets its slice
// again: the hook replaces the directory its earlier run left.
TEST_F(DockerGpus, AContainerStartedAgainGetsItsSliceAgain) {
  Result created = Docker({"create", "--network", "none", "--gpus", "1", "-e", "CUDA_DEVICE_MEMORY_LIMIT=1g", kImage,
                           "/bin/cuda_probe", "init", "meminfo"});
  ASSERT_EQ(created.code, 0) << created.out << created.err;
  const std::string id = ContainerId(created.out);
  for (int run = 0; run < 2; ++run) {
    Result r = Docker({"start", "-a", id});
    ASSERT_EQ(r.code, 0) << "run " << run << ": " << r.out << r.err << HookLog();
    EXPECT_EQ(Line(r.out, "init"), "init ok") << r.out;
    EXPECT_EQ(std::stoull(Fields(r.out, "meminfo").at(2)), 1ull << 30) << "run " << run << ": " << r.out;
  }
  Docker({"rm", "-f", id});
}

}  // namespace
}  // namespace gs::testing

// Exits 77 when tests were skipped and none failed: ctest (SKIP_RETURN_CODE) then reports
// the group as skipped, never as passed.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  if (rc == 0 && ::testing::UnitTest::GetInstance()->skipped_test_count() > 0) return 77;
  return rc;
}
