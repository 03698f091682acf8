// Container integration with real runtimes from Debian: runc with `gpuslice hook`, podman
// with a CDI spec from `gpuslice cdi generate`, on a simulated node. Needs root, runc and
// podman; says so loudly when they are missing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "src/common/file.h"
#include "src/common/proc_identity.h"
#include "src/region/card.h"
#include "tests/container_roots.h"
#include "tests/harness.h"
#include "tests/racing_slice.h"
#include "tests/wait_until.h"

namespace fs = std::filesystem;

namespace gs::testing {
namespace {

using PodmanEnv = Env;

#define REQUIRE_ROOT_AND(tool)                                                                                \
  do {                                                                                                        \
    if (geteuid() != 0 || !Have(tool)) {                                                                      \
      std::cout << "NOTE: this test needs root and " tool ": it did NOT run (make test installs " tool ")\n"; \
      GTEST_SKIP() << "needs root and " tool;                                                                 \
    }                                                                                                         \
  } while (0)

// A Debian bookworm image (debootstrap --variant=minbase), built once per machine into
// ~/.cache/gpuslice and copied for each container; cuda_probe is added to it. Falls back
// (loudly) to the host-library root when debootstrap cannot run.
void DebianRootfs(const std::string& r) {
  const char* home = getenv("HOME");
  std::string cache = std::string(home ? home : "/root") + "/.cache/gpuslice/bookworm-minbase";
  if (!fs::exists(cache + "/etc/debian_version") && Have("debootstrap")) {
    fs::create_directories(fs::path(cache).parent_path());
    fs::remove_all(cache + ".tmp");
    Result d = RunProcess(
        {"debootstrap", "--variant=minbase", "bookworm", cache + ".tmp", "http://deb.debian.org/debian"}, {}, 600);
    if (d.code == 0)
      fs::rename(cache + ".tmp", cache);
    else
      std::cout << "NOTE: debootstrap failed (" << d.err.substr(0, 200) << ")\n";
  }
  if (!fs::exists(cache + "/etc/debian_version")) {
    std::cout << "NOTE: no debootstrap image: using a glibc root assembled from the host's libraries\n";
    GlibcRootfs(r);
    return;
  }
  RunProcess({"cp", "-a", "--reflink=auto", cache, r});
  fs::copy_file(ProbeBin(), r + "/bin/cuda_probe", fs::copy_options::overwrite_existing);
}

// Specs of tests running at once must not define the same device names (the runtime then
// refuses both): each test generates its own kind.
std::string TestKind(const std::string& test) {
  return test + std::to_string(getpid()) + ".test.gpuslice.io/gpu";
}

PodmanEnv PodmanConfig(const std::string& conf) {
  fs::create_directories(conf);
  std::ofstream(conf + "/containers.conf")
      << "[containers]\ndefault_ulimits = [\"nofile=20000:20000\", \"nproc=20000:20000\"]\n"
         "netns = \"none\"\n[engine]\nruntime = \"runc\"\n"
         "cgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n";
  std::ofstream(conf + "/storage.conf") << "[storage]\ndriver = \"vfs\"\ngraphroot = \"" << conf
                                        << "/root\"\nrunroot = \"" << conf << "/run\"\n";
  return {{"CONTAINERS_CONF", conf + "/containers.conf"}, {"CONTAINERS_STORAGE_CONF", conf + "/storage.conf"}};
}

class RuncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    node_ = std::make_unique<SimNode>("gpus: 2xT4\n");
    bundle_ = node_->root() + "/bundle";
    fs::create_directories(bundle_);
    BusyboxRootfs(bundle_ + "/rootfs");
    RunProcess({"runc", "spec", "--bundle", bundle_});
  }
  struct Spec {
    std::vector<std::string> env;         // added to the process (the image's environment)
    std::vector<std::string> markers;     // the device plugin's allocation: /dev/null mounted at
                                          // /var/run/nvidia-container-devices/<id>, as the kubelet passes it
    std::vector<std::string> hook_flags;  // added to the hook's arguments
    bool extra_nvidia0 = false;           // /dev/nvidia0 created by the runtime, not allowed in the cgroup
    bool privileged = false;              // CAP_SYS_ADMIN in the bounding set
  };
  static Spec With(std::vector<std::string> env, std::vector<std::string> markers = {},
                   std::vector<std::string> hook_flags = {}) {
    Spec s;
    s.env = std::move(env);
    s.markers = std::move(markers);
    s.hook_flags = std::move(hook_flags);
    return s;
  }
  // Runs `sh -c script` in a runc container with the hook (runc's default spec: unprivileged).
  Result RunContainer(const std::string& script, const Spec& spec) {
    std::ifstream in(bundle_ + "/config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    c["process"]["terminal"] = false;
    c["process"]["args"] = {"sh", "-c", script};
    for (const auto& e : spec.env) c["process"]["env"].push_back(e);
    std::vector<std::string> args = {"gpuslice",    "hook",        "--driver-root",
                                     node_->root(), "--state-dir", node_->root() + "/gs-state",
                                     "--enforcer",  EnforcerLib()};
    args.insert(args.end(), spec.hook_flags.begin(), spec.hook_flags.end());
    c["hooks"]["prestart"] = {
        {{"path", GpusliceBin()}, {"args", args}, {"env", {"PATH=/usr/bin:/bin"}}}};  // explicit: never the image's env
    if (spec.extra_nvidia0)
      c["linux"]["devices"] = {
          {{"path", "/dev/nvidia0"}, {"type", "c"}, {"major", 195}, {"minor", 0}, {"fileMode", 438}}};
    for (const auto& m : spec.markers)
      c["mounts"].push_back({{"destination", "/var/run/nvidia-container-devices/" + m},
                             {"type", "bind"},
                             {"source", "/dev/null"},
                             {"options", {"rbind", "ro"}}});
    if (spec.privileged) c["process"]["capabilities"]["bounding"].push_back("CAP_SYS_ADMIN");
    std::ofstream(bundle_ + "/config.json") << c.dump(1);
    std::string id = "gs-test-" + std::to_string(getpid()) + "-" + std::to_string(++n_);
    Result r = RunProcess({"runc", "run", "--bundle", bundle_, id}, {}, 60);
    RunProcess({"runc", "delete", "-f", id});
    // The next run starts again from runc's default spec.
    fs::remove(bundle_ + "/config.json");
    RunProcess({"runc", "spec", "--bundle", bundle_});
    return r;
  }
  // The simulated cards' UUIDs, by index.
  std::vector<std::string> Uuids() {
    Result smi = RunProcess({GpusliceBin(), "smi"}, node_->env());
    std::vector<std::string> out;
    std::istringstream words(smi.out);
    for (std::string w; words >> w;)
      if (w.rfind("GPU-", 0) == 0) out.push_back(w);
    return out;
  }
  std::unique_ptr<SimNode> node_;
  std::string bundle_;
  int n_ = 0;
};

TEST_F(RuncTest, ContainerSeesExactlyItsGpuAndTheCgroupEnforcesIt) {
  REQUIRE_ROOT_AND("runc");
  auto uuids = Uuids();
  ASSERT_EQ(uuids.size(), 2u);
  // The device plugin allocated card 1; the image asks for every card, as CUDA images do.
  Spec spec;
  spec.env = {"NVIDIA_VISIBLE_DEVICES=all"};
  spec.markers = {uuids[1]};
  spec.extra_nvidia0 = true;
  Result r = RunContainer("ls /dev | grep nvidia; cat /dev/nvidia1; cat /dev/nvidia0; cat /etc/ld.so.preload", spec);
  std::set<std::string> nodes;
  for (const auto& l : Lines(r.out, "nvidia")) nodes.insert(l);
  EXPECT_EQ(nodes, (std::set<std::string>{"nvidia0", "nvidia1", "nvidia-uvm", "nvidia-uvm-tools", "nvidiactl"}))
      << r.out << r.err;
  EXPECT_NE(r.err.find("can't open '/dev/nvidia1': No such device or address"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("can't open '/dev/nvidia0': Operation not permitted"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("/usr/lib/gpuslice/"), std::string::npos) << r.out;  // the preload file names the enforcer
}

// docker --gpus semantics: the operator opted in to the environment variable.
TEST_F(RuncTest, DockerGpusForms) {
  REQUIRE_ROOT_AND("runc");
  const std::vector<std::string> accept = {"--accept-env-when-unprivileged"};
  Result all = RunContainer("ls /dev | grep 'nvidia[0-9]'", With({"NVIDIA_VISIBLE_DEVICES=all"}, {}, accept));
  EXPECT_EQ(Lines(all.out, "nvidia").size(), 2u) << all.out << all.err;
  Result none = RunContainer("ls /dev | grep nvidia; ls /usr/lib/x86_64-linux-gnu",
                             With({"NVIDIA_VISIBLE_DEVICES=none"}, {}, accept));
  EXPECT_EQ(Lines(none.out, "nvidia0").size(), 0u);
  EXPECT_NE(none.out.find("libcuda.so.1"), std::string::npos) << none.out << none.err;  // driver, no GPU
  Result uuid = RunContainer("ls /dev | grep 'nvidia[0-9]'",
                             With({"NVIDIA_VISIBLE_DEVICES=GPU-3c6ef372-ffb8-3d91-bd25-a09c16ea5856"}, {}, accept));
  EXPECT_EQ(Lines(uuid.out, "nvidia").size(), 1u) << uuid.out << uuid.err;
}

// Every CUDA base image sets NVIDIA_VISIBLE_DEVICES=all, and the hook runs for every
// container: without the device plugin's allocation an unprivileged container gets no GPU
// and no driver, and the hook's log says why.
TEST_F(RuncTest, ImageEnvironmentAloneGetsNoGpuUnlessAllocatedPrivilegedOrOptedIn) {
  REQUIRE_ROOT_AND("runc");
  auto uuids = Uuids();
  ASSERT_EQ(uuids.size(), 2u);
  std::string log = node_->root() + "/hook.log";
  auto First = [](const std::string& out) {
    auto lines = Lines(out, "nvidia");
    return lines.empty() ? std::string() : lines[0];
  };
  const std::string list =
      "ls /dev | grep 'nvidia' | sort | tr '\\n' ' '; echo; ls /usr/lib/x86_64-linux-gnu 2>/dev/null; true";
  Result image = RunContainer(list, With({"NVIDIA_VISIBLE_DEVICES=all"}, {}, {"--log", log}));
  ASSERT_EQ(image.code, 0) << image.out << image.err;  // the container still starts
  EXPECT_EQ(Lines(image.out, "nvidia").size(), 0u) << image.out;
  EXPECT_EQ(image.out.find("libcuda"), std::string::npos) << image.out;
  auto read = ReadFile(log);
  ASSERT_TRUE(read.ok()) << read.status().message();
  std::string logged = std::move(*read);
  EXPECT_NE(logged.find("ignoring NVIDIA_VISIBLE_DEVICES=\"all\" of an unprivileged container"), std::string::npos)
      << logged;
  // `none` (the driver without a GPU) is refused the same way.
  Result none = RunContainer(list, With({"NVIDIA_VISIBLE_DEVICES=none"}, {}, {"--log", log}));
  EXPECT_EQ(none.out.find("libcuda"), std::string::npos) << none.out;

  // The device plugin's marker: exactly the allocated cards, whatever the image asks for.
  Result allocated = RunContainer(list, With({"NVIDIA_VISIBLE_DEVICES=all"}, {uuids[0]}));
  EXPECT_EQ(First(allocated.out), "nvidia-uvm nvidia-uvm-tools nvidia0 nvidiactl ") << allocated.out << allocated.err;
  EXPECT_NE(allocated.out.find("libcuda.so.1"), std::string::npos) << allocated.out;
  Result both = RunContainer(list, With({}, {uuids[1], uuids[0]}));
  EXPECT_EQ(First(both.out), "nvidia-uvm nvidia-uvm-tools nvidia0 nvidia1 nvidiactl ") << both.out << both.err;

  // The operator's opt-in, and a privileged container: the variable works again.
  Result opted = RunContainer(list, With({"NVIDIA_VISIBLE_DEVICES=all"}, {}, {"--accept-env-when-unprivileged"}));
  EXPECT_EQ(First(opted.out), "nvidia-uvm nvidia-uvm-tools nvidia0 nvidia1 nvidiactl ") << opted.out << opted.err;
  Spec privileged;
  privileged.env = {"NVIDIA_VISIBLE_DEVICES=1"};
  privileged.privileged = true;
  Result priv = RunContainer(list, privileged);
  EXPECT_EQ(First(priv.out), "nvidia-uvm nvidia-uvm-tools nvidia1 nvidiactl ") << priv.out << priv.err;
}

TEST_F(RuncTest, ContainerWithoutGpusIsLeftExactlyAsItWas) {
  REQUIRE_ROOT_AND("runc");
  auto listing = [&] {
    std::set<std::string> files;
    for (auto& e : fs::recursive_directory_iterator(bundle_ + "/rootfs")) files.insert(e.path().string());
    return files;
  };
  auto before = listing();
  Result r = RunContainer("ls /dev | grep -c nvidia; echo done", Spec{});
  EXPECT_NE(r.out.find("0\ndone"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(listing(), before);
}

TEST_F(RuncTest, SymlinkPlantedInTheImageMakesTheHookRefuseAndTheHostIsUntouched) {
  REQUIRE_ROOT_AND("runc");
  std::string host = node_->root() + "/host-target";
  fs::create_directories(host);
  std::ofstream(host + "/canary") << "host file\n";
  // The CVE-2024-0132 / CVE-2025-23267 shape: a library directory pointing at the host.
  fs::create_directories(bundle_ + "/rootfs/usr/lib");
  fs::create_symlink(host, bundle_ + "/rootfs/usr/lib/x86_64-linux-gnu");
  Result r = RunContainer("echo started", With({}, {"0"}));
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.out.find("started"), std::string::npos);  // the container did not start
  EXPECT_NE(r.err.find("is a symbolic link in the container image"), std::string::npos) << r.err;
  std::set<std::string> after;
  for (auto& e : fs::directory_iterator(host)) after.insert(e.path().filename().string());
  EXPECT_EQ(after, std::set<std::string>{"canary"});
  Result mounts = RunProcess({"sh", "-c", "grep -c " + host + " /proc/self/mountinfo"});
  EXPECT_EQ(mounts.out, "0\n");

  // The same with /etc/ld.so.preload planted as a link to a host file.
  fs::remove(bundle_ + "/rootfs/usr/lib/x86_64-linux-gnu");
  fs::create_symlink(host + "/canary", bundle_ + "/rootfs/etc/ld.so.preload");
  r = RunContainer("echo started", With({}, {"0"}));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("/etc/ld.so.preload"), std::string::npos) << r.err;
  auto content = ReadFile(host + "/canary");
  ASSERT_TRUE(content.ok()) << content.status().message();
  EXPECT_EQ(*content, "host file\n");
}

// A container-wide slice outside Kubernetes (docker --gpus semantics: the hook honours
// NVIDIA_VISIBLE_DEVICES with --accept-env-when-unprivileged): containers run by runc,
// each from its own bundle, the hook a real prestart hook (and poststop where asked).
class RuncSliceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    node_ = std::make_unique<SimNode>("context_memory: 0\ngpus: 2xT4\n");
    state_ = node_->root() + "/gs-state";
    Result smi = RunProcess({GpusliceBin(), "smi"}, node_->env());
    std::istringstream words(smi.out);
    for (std::string w; words >> w;)
      if (w.rfind("GPU-", 0) == 0) uuids_.push_back(w);
  }
  void TearDown() override {
    for (const auto& id : started_) RunProcess({"runc", "delete", "-f", id});
  }
  // A glibc root with cuda_probe and gpuslice (for `burn`), with the libraries they need.
  static void ProgramsRootfs(const std::string& r) {
    GlibcRootfs(r);
    CopyProgram(r, GpusliceBin(), "/bin/gpuslice");
  }
  // A bundle running `sh -c script` with `env` added to the process.
  std::string Bundle(const std::string& name, const std::string& script, const std::vector<std::string>& env,
                     bool programs, bool poststop) {
    std::string b = node_->root() + "/bundles/" + name;
    fs::create_directories(b);
    if (programs)
      ProgramsRootfs(b + "/rootfs");
    else
      BusyboxRootfs(b + "/rootfs");
    fs::remove(b + "/config.json");
    RunProcess({"runc", "spec", "--bundle", b});
    std::ifstream in(b + "/config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    c["process"]["terminal"] = false;
    c["process"]["args"] = {"sh", "-c", script};
    for (const auto& e : env) c["process"]["env"].push_back(e);
    std::vector<std::string> args = {"gpuslice",    "hook",        "--driver-root",
                                     node_->root(), "--state-dir", state_,
                                     "--enforcer",  EnforcerLib(), "--accept-env-when-unprivileged"};
    nlohmann::json hook = {{"path", GpusliceBin()}, {"args", args}, {"env", {"PATH=/usr/bin:/bin"}}};
    c["hooks"]["prestart"] = {hook};
    if (poststop) {
      args.push_back("poststop");
      c["hooks"]["poststop"] = {{{"path", GpusliceBin()}, {"args", args}, {"env", {"PATH=/usr/bin:/bin"}}}};
    }
    std::ofstream(b + "/config.json") << c.dump(1);
    return b;
  }
  std::unique_ptr<Process> Start(const std::string& bundle, const std::string& id) {
    started_.push_back(id);
    return std::make_unique<Process>(std::vector<std::string>{"runc", "run", "--bundle", bundle, id});
  }
  std::string Id(const std::string& what) { return "gs-slice-" + std::to_string(getpid()) + "-" + what; }
  // What the hook left on the host: container directories, mounts under the state
  // directory, and files in the cards directory other than the cards.
  std::vector<std::string> LeftOnTheHost() {
    std::vector<std::string> left;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(state_ + "/oci-containers", ec)) left.push_back(e.path().string());
    std::ifstream mi("/proc/self/mountinfo");
    for (std::string line; std::getline(mi, line);)
      if (line.find(state_) != std::string::npos) left.push_back("mount: " + line);
    for (const auto& e : fs::directory_iterator(state_ + "/cards", ec))
      if (std::find(uuids_.begin(), uuids_.end(), e.path().filename().string()) == uuids_.end())
        left.push_back(e.path().string());
    return left;
  }
  // Two containers on the first card, 30 % and 70 % under policy default, both saturating.
  void ExpectSharesOfTwoContainers() {
    ASSERT_EQ(uuids_.size(), 2u);
    const std::string burn = "/bin/gpuslice burn --memory 0 --util 100 --seconds 6";
    std::string a = Bundle("a", burn, {"NVIDIA_VISIBLE_DEVICES=" + uuids_[0], "CUDA_DEVICE_SM_LIMIT=30"}, true, true);
    std::string b = Bundle("b", burn, {"NVIDIA_VISIBLE_DEVICES=" + uuids_[0], "CUDA_DEVICE_SM_LIMIT=70"}, true, true);
    auto pa = Start(a, Id("a"));
    auto pb = Start(b, Id("b"));
    Result ra = pa->Wait(), rb = pb->Wait();
    ASSERT_EQ(ra.code, 0) << ra.out << ra.err;
    ASSERT_EQ(rb.code, 0) << rb.out << rb.err;
    std::cout << "shares 30 and 70: " << BurnUtil(ra.out) << "% and " << BurnUtil(rb.out) << "%\n";
    EXPECT_NEAR(BurnUtil(ra.out), 30, 5) << ra.out << ra.err;
    EXPECT_NEAR(BurnUtil(rb.out), 70, 5) << rb.out << rb.err;
    EXPECT_GE(BurnUtil(ra.out) + BurnUtil(rb.out), 90);
  }
  std::unique_ptr<SimNode> node_;
  std::string state_;
  std::vector<std::string> uuids_, started_;
};

// Six processes of one container race for memory under CUDA_DEVICE_MEMORY_LIMIT=2g given
// at `docker run -e`: together they hold at most the slice, watched from outside.
TEST_F(RuncSliceTest, SixRacingProcessesOfOneContainerShareItsMemoryLimit) {
  REQUIRE_ROOT_AND("runc");
  ASSERT_EQ(uuids_.size(), 2u);
  std::string b = Bundle("six", kSixRacingProcesses,
                         {"NVIDIA_VISIBLE_DEVICES=" + uuids_[0], "CUDA_DEVICE_MEMORY_LIMIT=2g"}, true, true);
  RaceOnCard w = SixRacingProcesses(node_->env(), "runc", [&] { return Start(b, Id("six"))->Wait(); });
  ASSERT_TRUE(w.watched);
  // Every allocation is held through the sleep: the observer outside saw them all at once.
  EXPECT_EQ(w.card_most, w.allocations * 512 * kMiB) << w.result.out;
  EXPECT_LE(w.card_most, 2 * kGiB);
  EXPECT_TRUE(LeftOnTheHost().empty());  // poststop removed the slice
}

// Two containers on one card asking for 30 % and 70 % (policy default), both saturating:
// they take turns through the node's cards directory.
TEST_F(RuncSliceTest, TwoContainersOnOneCardGetTheirComputeShares) {
  REQUIRE_ROOT_AND("runc");
  ExpectSharesOfTwoContainers();
}

// The same after another tenant of the card made its card file and took every entry of it
// with made-up tenants that look alive and never compute: each container still has the
// entry its hook handed it, so both get their shares.
TEST_F(RuncSliceTest, ACardFileFilledByAnotherTenantTakesNoShareAway) {
  REQUIRE_ROOT_AND("runc");
  fs::create_directories(state_ + "/cards");
  fs::permissions(state_ + "/cards", fs::perms(0755));
  const std::string card = state_ + "/cards/" + uuids_.at(0);
  Process filler({HostileBin(), "card", card, "20000", "fill"}, node_->env());
  ASSERT_TRUE(WaitUntil([&] { return CardFileIsFull(card); })) << "the filler did not fill " << card;
  ExpectSharesOfTwoContainers();
  filler.Signal(SIGKILL);
}

// A limit that cannot be parsed refuses the container, naming the variable, and leaves
// nothing on the host.
TEST_F(RuncSliceTest, ALimitThatDoesNotParseRefusesTheContainerAndLeavesNothing) {
  REQUIRE_ROOT_AND("runc");
  ASSERT_EQ(uuids_.size(), 2u);
  for (const std::string bad : {"CUDA_DEVICE_MEMORY_LIMIT=2gx", "CUDA_DEVICE_SM_LIMIT_0=thirty"}) {
    std::string b = Bundle("bad", "echo started", {"NVIDIA_VISIBLE_DEVICES=" + uuids_[0], bad}, false, true);
    Result r = Start(b, Id("bad"))->Wait();
    RunProcess({"runc", "delete", "-f", Id("bad")});
    EXPECT_NE(r.code, 0) << r.out << r.err;
    EXPECT_EQ(r.out.find("started"), std::string::npos) << r.out;
    std::string variable = bad.substr(0, bad.find('='));
    // runc quotes the hook's stderr in its own message.
    EXPECT_NE(r.err.find("gpuslice hook: container " + Id("bad") + ": " + variable + "="), std::string::npos) << r.err;
    EXPECT_TRUE(LeftOnTheHost().empty());
  }
}

// Clean-up after many containers: with the poststop hook, and without it (docker's
// --gpus route runs none) by the next hook run once the container's process is gone.
// Each container has a compute share, so each is handed a card entry too: the roster ends
// with at most the last container's line (an entry whose owner is gone is handed out again).
TEST_F(RuncSliceTest, ManyContainerRunsLeaveNoDirectoryMountOrCardEntry) {
  REQUIRE_ROOT_AND("runc");
  ASSERT_EQ(uuids_.size(), 2u);
  const int kRuns = 1000;
  const std::vector<std::string> env = {"NVIDIA_VISIBLE_DEVICES=" + uuids_[1], "CUDA_DEVICE_MEMORY_LIMIT=1g",
                                        "CUDA_DEVICE_SM_LIMIT=50"};
  const std::string check =
      "test -s /etc/gpuslice/limits && test -d /var/run/gpuslice && "
      "grep -q '^GPUSLICE_CARD_ENTRY_0=' /etc/gpuslice/limits";
  std::string with = Bundle("with-poststop", check, env, false, true);
  std::string without = Bundle("without-poststop", check, env, false, false);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRuns; ++i) {
    std::string id = Id("run" + std::to_string(i));
    Result r = Start(i % 2 ? with : without, id)->Wait();
    ASSERT_EQ(r.code, 0) << i << ": " << r.out << r.err;
    RunProcess({"runc", "delete", "-f", id});  // runc run has removed it already
    started_.pop_back();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << kRuns << " container runs (create, hook, run, delete): " << seconds << " s, " << 1000 * seconds / kRuns
            << " ms each\n";
  // The last run had no poststop: its directory waits for the next hook run.
  std::string none = Bundle("no-gpu", "true", {}, false, false);
  ASSERT_EQ(Start(none, Id("last"))->Wait().code, 0);
  auto left = LeftOnTheHost();
  EXPECT_TRUE(left.empty()) << left.size() << " left, first " << (left.empty() ? "" : left[0]);
  // The roster reused an entry or two (each run's directory was gone, or went at the next
  // hook run) and none is held any more: every owner it names is gone.
  auto roster = ReadFile(state_ + "/card-entries/" + uuids_[1]);
  ASSERT_TRUE(roster.ok()) << roster.status().message();
  int used = 0;
  std::istringstream lines(*roster);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string entry, at, owner;
    if (!(fields >> entry >> at >> owner)) continue;  // a slot never used
    ++used;
    EXPECT_FALSE(std::filesystem::exists(owner)) << "entry " << entry << " still held by " << owner;
  }
  EXPECT_GE(used, 1) << *roster;
  EXPECT_LE(used, 2) << *roster;
}

TEST(Hook, MalformedInputFailsClearlyBeforeAnythingChanges) {
  SimNode node("gpus: [T4]\n");
  auto hook = [&](const std::string& state) {
    std::string file = node.root() + "/state.json";
    std::ofstream(file) << state;
    return RunProcess(
        {"sh", "-c",
         GpusliceBin() + " hook --accept-env-when-unprivileged --driver-root " + node.root() + " < " + file});
  };
  Result r = hook("{not json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("not valid JSON"), std::string::npos) << r.err;
  r = hook("{\"pid\": -4, \"bundle\": \"/x\"}");
  EXPECT_NE(r.err.find("no valid \"pid\""), std::string::npos) << r.err;
  r = hook("{\"pid\": 1, \"bundle\": \"relative\"}");
  EXPECT_NE(r.err.find("absolute \"bundle\""), std::string::npos) << r.err;
  std::string bundle = node.root() + "/b";
  fs::create_directories(bundle);
  std::ofstream(bundle + "/config.json")
      << R"({"root":{"path":"rootfs"},"process":{"env":["NVIDIA_VISIBLE_DEVICES=0,../../etc"]}})";
  r = hook("{\"pid\": 1, \"bundle\": \"" + bundle + "\"}");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("'../../etc' is not a GPU index or UUID"), std::string::npos) << r.err;
  std::ofstream(bundle + "/config.json")
      << R"({"root":{"path":"rootfs"},"process":{"env":["NVIDIA_VISIBLE_DEVICES=0","NVIDIA_DRIVER_CAPABILITIES=compute,warp"]}})";
  r = hook("{\"pid\": 1, \"bundle\": \"" + bundle + "\"}");
  EXPECT_NE(r.err.find("unknown capability 'warp'"), std::string::npos) << r.err;
}

TEST(PodmanCdi, EnforcerLoadsAndTwoContainersAreHeldToTheirSlices) {
  REQUIRE_ROOT_AND("podman");
  SimNode node("context_memory: 0\ngpus: 2xT4\n");
  std::string spec = "/var/run/cdi/gpuslice-test-" + std::to_string(getpid()) + ".json";
  fs::create_directories("/var/run/cdi");
  std::string kind = TestKind("two");
  Result gen = RunProcess({GpusliceBin(), "cdi", "generate", "--driver-root", node.root(), "--output", spec,
                           "--state-dir", node.root() + "/gs-state", "--enforcer", EnforcerLib(), "--kind", kind});
  ASSERT_EQ(gen.code, 0) << gen.err;
  EXPECT_NE(gen.out.find("cdiVersion 0.5.0"), std::string::npos);  // hostPath on device nodes
  Result list = RunProcess({GpusliceBin(), "cdi", "list", "--spec", spec});
  EXPECT_NE(list.out.find(kind + "=1"), std::string::npos) << list.out << list.err;

  std::string conf = node.root() + "/podman";
  Env env = PodmanConfig(conf);
  auto run = [&](const std::string& name, const std::string& device, const std::string& limit,
                 const std::vector<std::string>& probe) {
    std::string rootfs = conf + "/" + name;
    DebianRootfs(rootfs);  // --rootfs writes mount-point stubs into it: one copy per container
    std::vector<std::string> argv = {"podman",
                                     "run",
                                     "--rm",
                                     "--device",
                                     device,
                                     "-e",
                                     "CUDA_DEVICE_MEMORY_LIMIT=" + limit,
                                     "-e",
                                     "GPUSLICE_CONTEXT_OVERHEAD=0",
                                     "--rootfs",
                                     rootfs,
                                     "/bin/cuda_probe"};
    argv.insert(argv.end(), probe.begin(), probe.end());
    return std::make_unique<Process>(argv, env);
  };
  // Two containers on one simulated card at once, each held to its own slice.
  auto a = run("a", kind + "=1", "4g",
               {"maps", "init", "meminfo", "alloc", "mem", "3g", "alloc", "mem", "2g", "sleep", "1500"});
  auto b =
      run("b", kind + "=1", "6g", {"init", "meminfo", "alloc", "mem", "5g", "alloc", "mem", "2g", "sleep", "1500"});
  Result ra = a->Wait(), rb = b->Wait();
  fs::remove(spec);
  ASSERT_EQ(ra.code, 0) << ra.out << ra.err;
  ASSERT_EQ(rb.code, 0) << rb.out << rb.err;
  EXPECT_EQ(Line(ra.out, "maps"), "maps enforcer loaded");
  EXPECT_EQ(std::stoull(Field(ra.out, "meminfo", 2)), 4ull << 30);  // its slice, not the T4's 15 GiB
  EXPECT_EQ(std::stoull(Field(rb.out, "meminfo", 2)), 6ull << 30);
  EXPECT_EQ(Line(ra.out, "alloc"), "alloc ok");
  EXPECT_EQ(Line(ra.out, "alloc", 1), "alloc err CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(Line(rb.out, "alloc"), "alloc ok");
  EXPECT_EQ(Line(rb.out, "alloc", 1), "alloc err CUDA_ERROR_OUT_OF_MEMORY");
}

TEST(PodmanHook, HooksDirFromRuntimeConfigureInjectsTheSlice) {
  REQUIRE_ROOT_AND("podman");
  SimNode node("context_memory: 0\ngpus: 2xT4\n");
  std::string etc = node.root() + "/etc-root";
  Result conf = RunProcess({GpusliceBin(), "runtime", "configure", "--runtime", "podman", "--mode", "hook", "--write",
                            "--root", etc, "--gpuslice", GpusliceBin(), "--enforcer", EnforcerLib(), "--driver-root",
                            node.root(), "--state-dir", node.root() + "/gs-state"});
  ASSERT_EQ(conf.code, 0) << conf.err;
  Env env = PodmanConfig(node.root() + "/podman");
  std::string rootfs = node.root() + "/podman/rootfs";
  GlibcRootfs(rootfs);
  // The device list as the kubelet passes the device plugin's: /dev/null mounted at
  // /var/run/nvidia-container-devices/<id>; the image's variable asks for every card.
  Result r = RunProcess({"podman",
                         "run",
                         "--rm",
                         "--hooks-dir",
                         etc + "/usr/share/containers/oci/hooks.d",
                         "-v",
                         "/dev/null:/var/run/nvidia-container-devices/1:ro",
                         "-e",
                         "NVIDIA_VISIBLE_DEVICES=all",
                         "-e",
                         "CUDA_DEVICE_MEMORY_LIMIT=3g",
                         "-e",
                         "GPUSLICE_CONTEXT_OVERHEAD=0",
                         "--rootfs",
                         rootfs,
                         "/bin/cuda_probe",
                         "maps",
                         "init",
                         "meminfo",
                         "alloc",
                         "mem",
                         "4g"},
                        env, 120);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Line(r.out, "maps"), "maps enforcer loaded");
  EXPECT_EQ(std::stoull(Field(r.out, "meminfo", 2)), 3ull << 30);
  EXPECT_EQ(Line(r.out, "alloc"), "alloc err CUDA_ERROR_OUT_OF_MEMORY");
  // The same hooks.d file runs at poststop: the container's slice is gone with it.
  std::error_code ec;
  EXPECT_TRUE(fs::is_empty(node.root() + "/gs-state/oci-containers", ec)) << "the poststop hook left the slice";

  // The same image's variable without the allocation: no GPU, no driver, and it starts.
  std::string fresh = node.root() + "/podman/rootfs-unallocated";  // no mount points from the run above
  BusyboxRootfs(fresh);
  fs::create_directories(fresh + "/usr/lib/x86_64-linux-gnu");
  Result image = RunProcess({"podman", "run", "--rm", "--hooks-dir", etc + "/usr/share/containers/oci/hooks.d", "-e",
                             "NVIDIA_VISIBLE_DEVICES=all", "--rootfs", fresh, "sh", "-c",
                             "ls /dev | grep -c nvidia; ls /usr/lib/x86_64-linux-gnu | grep -c libcuda"},
                            env, 120);
  EXPECT_EQ(image.out, "0\n0\n") << image.out << image.err;
}

// A RHEL-family host keeps the driver in /usr/lib64, which a Debian image's loader never
// searches: both routes must put the libraries where the image's loader looks.
TEST(PodmanBothRoutes, DriverFromALib64HostLoadsInADebianImage) {
  REQUIRE_ROOT_AND("podman");
  SimNode node("context_memory: 0\ngpus: [T4]\n", "/usr/lib64");
  ASSERT_TRUE(fs::exists(node.root() + "/usr/lib64/libcuda.so.1"));
  ASSERT_FALSE(fs::exists(node.root() + "/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
  std::string conf = node.root() + "/podman";
  Env env = PodmanConfig(conf);
  std::vector<std::string> probe = {"/bin/cuda_probe", "init", "meminfo"};

  std::string spec = "/var/run/cdi/gpuslice-lib64-" + std::to_string(getpid()) + ".json";
  fs::create_directories("/var/run/cdi");
  std::string kind = TestKind("lib64");
  ASSERT_EQ(RunProcess({GpusliceBin(), "cdi", "generate", "--driver-root", node.root(), "--output", spec, "--state-dir",
                        node.root() + "/gs-state", "--enforcer", EnforcerLib(), "--kind", kind})
                .code,
            0);
  DebianRootfs(conf + "/cdi-rootfs");
  std::vector<std::string> cdi = {"podman",
                                  "run",
                                  "--rm",
                                  "--device",
                                  kind + "=0",
                                  "-e",
                                  "CUDA_DEVICE_MEMORY_LIMIT=2g",
                                  "--rootfs",
                                  conf + "/cdi-rootfs"};
  cdi.insert(cdi.end(), probe.begin(), probe.end());
  Result by_cdi = RunProcess(cdi, env, 120);
  fs::remove(spec);
  ASSERT_EQ(by_cdi.code, 0) << by_cdi.out << by_cdi.err;
  EXPECT_EQ(std::stoull(Field(by_cdi.out, "meminfo", 2)), 2ull << 30);

  std::string etc = node.root() + "/etc-root";
  ASSERT_EQ(RunProcess({GpusliceBin(), "runtime", "configure", "--runtime", "podman", "--mode", "hook", "--write",
                        "--root", etc, "--gpuslice", GpusliceBin(), "--enforcer", EnforcerLib(), "--driver-root",
                        node.root(), "--state-dir", node.root() + "/gs-state"})
                .code,
            0);
  DebianRootfs(conf + "/hook-rootfs");
  std::vector<std::string> hook = {"podman",
                                   "run",
                                   "--rm",
                                   "--hooks-dir",
                                   etc + "/usr/share/containers/oci/hooks.d",
                                   "-v",
                                   "/dev/null:/var/run/nvidia-container-devices/0:ro",
                                   "-e",
                                   "CUDA_DEVICE_MEMORY_LIMIT=3g",
                                   "--rootfs",
                                   conf + "/hook-rootfs"};
  hook.insert(hook.end(), probe.begin(), probe.end());
  Result by_hook = RunProcess(hook, env, 120);
  ASSERT_EQ(by_hook.code, 0) << by_hook.out << by_hook.err;
  EXPECT_EQ(std::stoull(Field(by_hook.out, "meminfo", 2)), 3ull << 30);
  // The hook chose the image's own directory: nothing was created in /usr/lib64 of it.
  EXPECT_TRUE(fs::exists(conf + "/hook-rootfs/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
  EXPECT_FALSE(fs::exists(conf + "/hook-rootfs/usr/lib64/libcuda.so.1"));
}

// Slices through podman by both of its routes. "cdi": `gpuslice cdi generate` adds a
// createRuntime hook that makes the container's slice from its environment once podman has
// given it its GPUs, and a poststop hook that removes it. "hooks.d": the hook file
// `gpuslice runtime configure --runtime podman --mode hook --accept-env-when-unprivileged`
// writes, with NVIDIA_VISIBLE_DEVICES as `docker run --gpus` sets it. On a simulated
// 2 x T4 node whose contexts cost nothing on the card.
class PodmanSlice : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || !Have("podman")) return;
    node_ = std::make_unique<SimNode>("context_memory: 0\ngpus: 2xT4\n");
    state_ = node_->root() + "/gs-state";
    env_ = PodmanConfig(node_->root() + "/podman");
    if (Cdi()) {
      spec_ = "/var/run/cdi/gpuslice-slice-" + std::to_string(getpid()) + ".json";
      fs::create_directories("/var/run/cdi");
      kind_ = TestKind("slice");
      Result gen = RunProcess({GpusliceBin(), "cdi", "generate", "--driver-root", node_->root(), "--output", spec_,
                               "--state-dir", state_, "--enforcer", EnforcerLib(), "--kind", kind_});
      ASSERT_EQ(gen.code, 0) << gen.err;
    } else {
      etc_ = node_->root() + "/etc-root";
      Result conf =
          RunProcess({GpusliceBin(), "runtime", "configure", "--runtime", "podman", "--mode", "hook", "--write",
                      "--root", etc_, "--gpuslice", GpusliceBin(), "--enforcer", EnforcerLib(), "--driver-root",
                      node_->root(), "--state-dir", state_, "--accept-env-when-unprivileged"});
      ASSERT_EQ(conf.code, 0) << conf.err;
      Result smi = RunProcess({GpusliceBin(), "smi"}, node_->env());
      uuid_ = smi.out.substr(smi.out.find("GPU-"));
      uuid_ = uuid_.substr(0, uuid_.find_first_of(" \n"));
    }
  }
  void TearDown() override {
    if (!spec_.empty()) fs::remove(spec_);
  }
  bool Cdi() const { return std::string(GetParam()) == "cdi"; }
  // `podman run` of `sh -c script` with the first GPU and `env` added.
  std::unique_ptr<Process> Run(const std::string& name, const std::string& script,
                               const std::vector<std::string>& env) {
    std::string rootfs = node_->root() + "/podman/" + name;
    GlibcRootfs(rootfs);  // --rootfs writes mount-point stubs into it: one copy per container
    CopyProgram(rootfs, GpusliceBin(), "/bin/gpuslice");
    std::vector<std::string> argv = {"podman", "run", "--rm"};
    if (Cdi())
      argv.insert(argv.end(), {"--device", kind_ + "=0"});
    else
      argv.insert(argv.end(),
                  {"--hooks-dir", etc_ + "/usr/share/containers/oci/hooks.d", "-e", "NVIDIA_VISIBLE_DEVICES=" + uuid_});
    for (const auto& e : env) argv.insert(argv.end(), {"-e", e});
    argv.insert(argv.end(), {"--rootfs", rootfs, "/bin/sh", "-c", script});
    return std::make_unique<Process>(argv, env_);
  }
  std::vector<std::string> SlicesLeft() const {
    std::vector<std::string> left;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(state_ + "/oci-containers", ec)) left.push_back(e.path().string());
    return left;
  }
  std::unique_ptr<SimNode> node_;
  std::string state_, spec_, kind_, etc_, uuid_;
  PodmanEnv env_;
};

// Six processes of one container race for memory under CUDA_DEVICE_MEMORY_LIMIT=2g: together
// they hold at most the slice, watched from outside (without the slice each process had
// its own 2 GiB), and the slice is gone with the container.
TEST_P(PodmanSlice, SixRacingProcessesOfOneContainerShareItsMemoryLimit) {
  REQUIRE_ROOT_AND("podman");
  RaceOnCard w = SixRacingProcesses(node_->env(), std::string("podman (") + GetParam() + ")", [&] {
    return Run("six", kSixRacingProcesses, {"CUDA_DEVICE_MEMORY_LIMIT=2g"})->Wait();
  });
  ASSERT_TRUE(w.watched);
  EXPECT_EQ(w.card_most, w.allocations * 512 * kMiB) << w.result.out;
  EXPECT_TRUE(SlicesLeft().empty()) << "the poststop hook left the slice";
}

// Two containers on one card asking for 30 % and 70 % (policy default), both saturating:
// they take turns through the node's cards directory, as with runc.
TEST_P(PodmanSlice, TwoContainersOnOneCardGetTheirComputeShares) {
  REQUIRE_ROOT_AND("podman");
  const std::string burn = "/bin/gpuslice burn --memory 0 --util 100 --seconds 6";
  auto a = Run("a", burn, {"CUDA_DEVICE_SM_LIMIT=30"});
  auto b = Run("b", burn, {"CUDA_DEVICE_SM_LIMIT=70"});
  Result ra = a->Wait(), rb = b->Wait();
  ASSERT_EQ(ra.code, 0) << ra.out << ra.err;
  ASSERT_EQ(rb.code, 0) << rb.out << rb.err;
  std::cout << "podman (" << GetParam() << "), shares 30 and 70: " << BurnUtil(ra.out) << "% and " << BurnUtil(rb.out)
            << "%\n";
  EXPECT_NEAR(BurnUtil(ra.out), 30, 5) << ra.out << ra.err;
  EXPECT_NEAR(BurnUtil(rb.out), 70, 5) << rb.out << rb.err;
  EXPECT_GE(BurnUtil(ra.out) + BurnUtil(rb.out), 90);
}

INSTANTIATE_TEST_SUITE_P(Routes, PodmanSlice, ::testing::Values("cdi", "hooks_d"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

TEST(PodmanCdi, AttackImageCannotReachTheHostThroughCdiMounts) {
  REQUIRE_ROOT_AND("podman");
  SimNode node("gpus: [T4]\n");
  std::string spec = "/var/run/cdi/gpuslice-attack-" + std::to_string(getpid()) + ".json";
  fs::create_directories("/var/run/cdi");
  std::string kind = TestKind("attack");
  ASSERT_EQ(RunProcess({GpusliceBin(), "cdi", "generate", "--driver-root", node.root(), "--output", spec, "--state-dir",
                        node.root() + "/gs-state", "--enforcer", EnforcerLib(), "--kind", kind})
                .code,
            0);
  std::string host = node.root() + "/host-target";
  fs::create_directories(host);
  std::ofstream(host + "/canary") << "host file\n";
  std::string rootfs = node.root() + "/attack";
  BusyboxRootfs(rootfs);
  fs::create_directories(rootfs + "/usr/lib");
  fs::create_symlink(host, rootfs + "/usr/lib/x86_64-linux-gnu");
  Env env = PodmanConfig(node.root() + "/podman");
  Result attack =
      RunProcess({"podman", "run", "--rm", "--device", kind + "=0", "--rootfs", rootfs, "sh", "-c", "true"}, env, 60);
  // The runtime must have got as far as resolving the device (the mounts are then refused).
  EXPECT_EQ(attack.err.find("unresolvable CDI devices"), std::string::npos) << attack.err;
  fs::remove(spec);
  std::set<std::string> after;
  for (auto& e : fs::directory_iterator(host)) after.insert(e.path().filename().string());
  EXPECT_EQ(after, std::set<std::string>{"canary"});  // nothing was created or mounted on the host
  Result mounts = RunProcess({"sh", "-c", "grep -c " + host + " /proc/self/mountinfo"});
  EXPECT_EQ(mounts.out, "0\n");
}

}  // namespace
}  // namespace gs::testing

namespace gs::testing {
namespace {

bool CanUnsharePids() {
  if (geteuid() == 0 && Have("unshare")) return true;
  std::cout << "NOTE: needs root and unshare: did NOT run\n";
  return false;
}

// The host pid of unshare's child (pid 1 in its namespace), 0 when it has not forked yet.
pid_t ChildOf(pid_t unshare) {
  Result child = RunProcess({"pgrep", "-P", std::to_string(unshare)});
  return child.code == 0 ? static_cast<pid_t>(std::stol(child.out)) : 0;
}

// Runs the node agent's resolver on a region; its output, one "pid P host_pid H" a slot.
std::string ResolveHostPids(const std::string& region_path) {
  Result r = RunProcess({BuildDir() + "/tests/resolve_host_pids", region_path});
  EXPECT_EQ(r.code, 0) << r.err;
  return r.out;
}

// A process in its own PID namespace (as in every Kubernetes pod) gets its host pid
// written into its region slot by the node agent's resolver.
TEST(HostPids, ContainerProcessesGetTheirNodeVisiblePid) {
  if (!CanUnsharePids()) GTEST_SKIP();
  SimNode node("context_memory: 0\ngpus: [T4]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}});
  Process p(InOwnPidNamespace({ProbeBin(), "init", "alloc", "mem", "1m", "sleep", "20000"}), env);
  ASSERT_TRUE(p.WaitForOutput("alloc ok")) << p.out();
  std::string slots = ResolveHostPids(node.region_path());
  std::string host_pid = std::to_string(ChildOf(p.pid()));
  EXPECT_NE(slots.find("host_pid " + host_pid + "\n"), std::string::npos) << slots << " want " << host_pid;
  EXPECT_EQ(slots.find("host_pid 1\n"), std::string::npos) << slots;  // not its namespace pid
}

// A process that unshared a PID namespace inside its container and kept the container's
// /proc is named in the region by its pid in the container's namespace (what that /proc
// shows); the resolver finds its host pid by that name too.
TEST(HostPids, AProcessOfANamespaceNestedInAContainerGetsItsHostPid) {
  if (!CanUnsharePids()) GTEST_SKIP();
  SimNode node("context_memory: 0\ngpus: [T4]\n");
  Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}});
  Process p(InOwnPidNamespace({"unshare", "--pid", "--fork", "--kill-child", ProbeBin(), "init", "alloc", "mem", "1m",
                               "sleep", "20000"}),
            env);
  ASSERT_TRUE(p.WaitForOutput("alloc ok")) << p.out() << p.err();
  const pid_t probe = ChildOf(ChildOf(p.pid()));  // the outer unshare, the inner one, the probe
  ASSERT_GT(probe, 0);
  std::string slots = ResolveHostPids(node.region_path());
  EXPECT_NE(slots.find("host_pid " + std::to_string(probe) + "\n"), std::string::npos) << slots << " want " << probe;
}

// The first processes of two containers are both pid 1 and may start in the same 10 ms
// tick of the start-time clock: only their PID namespaces tell them apart. Tries until a
// sibling namespace's pid 1 started in the probe's tick with a higher host pid (the one a
// resolver keyed on pid and start time alone would have written into the probe's slot).
TEST(HostPids, TwoContainersFirstProcessesStartedInOneTickGetTheirOwnHostPids) {
  if (!CanUnsharePids()) GTEST_SKIP();
  SimNode node("context_memory: 0\ngpus: [T4]\n");
  for (int attempt = 1; attempt <= 60; ++attempt) {
    // A region of its own, as each container has: an earlier attempt's probe (pid 1 of
    // another namespace) stays charged in its region, which no probe here may sweep.
    std::string region = node.region_path() + "." + std::to_string(attempt);
    Env env = node.enforced({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"CUDA_DEVICE_MEMORY_SHARED_CACHE", region}});
    Process probe(InOwnPidNamespace({ProbeBin(), "init", "alloc", "mem", "1m", "sleep", "20000"}), env);
    std::vector<std::unique_ptr<Process>> siblings;
    for (int i = 0; i < 3; ++i) siblings.push_back(std::make_unique<Process>(InOwnPidNamespace({"sleep", "20"})));
    pid_t probe_pid = 0;
    ASSERT_TRUE(WaitUntil([&] { return (probe_pid = ChildOf(probe.pid())) != 0; }));
    pid_t twin = 0;  // a sibling's pid 1 started in the probe's tick after it
    for (auto& s : siblings) {
      pid_t pid = 0;
      ASSERT_TRUE(WaitUntil([&] { return (pid = ChildOf(s->pid())) != 0; }));
      if (pid > probe_pid && ProcessStartTime(pid) == ProcessStartTime(probe_pid)) twin = pid;
    }
    if (twin == 0) continue;
    std::cout << "a sibling's pid 1 started in the probe's tick at attempt " << attempt << "\n";
    ASSERT_TRUE(probe.WaitForOutput("alloc ok")) << probe.out() << " (attempt " << attempt << ")";
    std::string slots = ResolveHostPids(region);
    EXPECT_NE(slots.find("host_pid " + std::to_string(probe_pid) + "\n"), std::string::npos)
        << slots << "want " << probe_pid << " (attempt " << attempt << ")";
    EXPECT_EQ(slots.find("host_pid " + std::to_string(twin) + "\n"), std::string::npos)
        << slots << "the sibling's " << twin << " (attempt " << attempt << ")";
    return;
  }
  FAIL() << "no two PID namespaces' first processes started in one tick in 60 tries";
}

}  // namespace
}  // namespace gs::testing
