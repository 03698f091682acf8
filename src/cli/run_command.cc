#include "src/cli/run_command.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "src/cli/node_gpus.h"
#include "src/cli/paths.h"
#include "src/common/flags.h"
#include "src/model/container_edits.h"
#include "src/node/card_entries.h"
#include "src/region/region.h"

namespace gs::cli {
namespace {

pid_t g_child = -1;
void Forward(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

// What the slice saw, read from its region after the program ended.
void WriteSummary(const std::string& region_path, const model::Allocation& a, const std::string& out) {
  region::OpenError err;
  char msg[256];
  region::Region* r = region::OpenRegionReadOnly(region_path.c_str(), &err, msg, sizeof(msg));
  std::ofstream f(out);
  if (r == nullptr) {
    f << "{\"error\":\"no region: the program used no GPU\"}\n";
    return;
  }
  const region::Device& d = r->devices[0];
  f << "{\"uuid\":\"" << a.devices[0].uuid << "\",\"memory_limit\":" << a.devices[0].memory_limit
    << ",\"memory_peak\":" << d.memory_peak.load() << ",\"spilled_peak\":" << d.spilled_peak.load()
    << ",\"sm_share\":" << a.devices[0].sm_share << "}\n";
  region::CloseRegion(r);
}

// Runs of one user share a directory, so their supervisors can arbitrate priorities
// among them: <dir>/run-XXXXXX/region, <dir>/cards for the card regions and
// <dir>/card-entries for the runs' entries in them (src/node/card_entries.h). Each
// supervisor holds an flock on its directory's `lock` for its lifetime; a directory whose
// lock can be taken belongs to a supervisor that is gone (killed before cleaning up) and is
// removed by the next run. A lock, unlike a pid, means the same in every PID namespace:
// supervisors that are each the PID 1 of their own container never mistake each other.
std::string RunsDir() {
  if (const char* d = getenv("GPUSLICE_RUN_DIR"); d && *d) return d;
  return "/tmp/gpuslice-runs-" + std::to_string(getuid());
}

// True when no live supervisor holds `dir`'s lock (or it has none: not a run directory, or
// one whose supervisor died between making it and locking it). A directory without a lock
// made in the last minute is left alone: another supervisor may be about to lock it.
bool RunDirIsStale(const std::string& dir) {
  int fd = open((dir + "/lock").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    struct stat st;
    return errno == ENOENT && stat(dir.c_str(), &st) == 0 && st.st_mtime < time(nullptr) - 60;
  }
  bool stale = flock(fd, LOCK_EX | LOCK_NB) == 0;
  close(fd);
  return stale;
}

StatusOr<std::string> MakeRunDir(const std::string& runs) {
  std::error_code ec;
  std::filesystem::create_directories(runs, ec);
  struct stat st;
  // Another user's directory (a squatter in /tmp) is never used.
  if (lstat(runs.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid())
    return FailedPrecondition(runs + " is not a directory of this user (set GPUSLICE_RUN_DIR)");
  chmod(runs.c_str(), 0700);
  for (const auto& e : std::filesystem::directory_iterator(runs, ec))
    if (e.path().filename().string().rfind("run-", 0) == 0 && e.is_directory(ec) && RunDirIsStale(e.path().string()))
      std::filesystem::remove_all(e.path(), ec);
  std::string dir = runs + "/run-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) return Internal("cannot create a directory in " + runs + ": " + strerror(errno));
  // Held until this process exits (close-on-exec: the program run is not its holder). The
  // lock file appears under its name already locked: between its creation and the flock,
  // another run's sweep could lock it itself, take this directory for stale and remove it.
  const std::string lock_path = dir + "/lock", unlocked = dir + "/lock.new";
  int lock = open(unlocked.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (lock < 0 || flock(lock, LOCK_EX) != 0 || rename(unlocked.c_str(), lock_path.c_str()) != 0)
    return Internal("cannot lock " + lock_path + ": " + strerror(errno));
  return dir;
}

}  // namespace

int RunCommand(const std::vector<std::string>& args) {
  int64_t device = 0, cores = 0, priority = 1;
  uint64_t memory = 0;
  bool oversubscribe = false;
  std::string policy = "force", driver_root = "/", summary_json;
  FlagSet flags("run",
                "Runs a program with a GPU slice: gpuslice run [flags] -- CMD [ARGS...]\n\n"
                "The slice is held by the enforcer preloaded into the program (LD_PRELOAD): for trusted\n"
                "programs on one machine. A program that drops LD_PRELOAD, is linked statically or reaches\n"
                "the driver another way is NOT held, and nothing outside it watches the card for a run.\n"
                "Untrusted programs belong in a container under the node agent, whose watchdog stops\n"
                "them (docs/enforcer.md, \"Threat model\").");
  flags.Int("device", &device, "GPU index (as nvidia-smi numbers them)", 0, 63);
  flags.Bytes("memory", &memory, "device memory limit (e.g. 4g); default: no limit");
  flags.Int("cores", &cores, "compute (SM) share in percent; 0 = no limit", 0, 100);
  flags.Bool("oversubscribe", &oversubscribe,
             "let allocations beyond the free memory of the card spill to host memory");
  flags.Int("priority", &priority, "task priority (0 = highest)", 0, 999);
  flags.String("policy", &policy, "compute policy: force (limit even when alone), default, disable");
  flags.String("driver-root", &driver_root, "where the driver libraries are ('/' on a real node)",
               "NVIDIA_DRIVER_ROOT");
  flags.String("summary-json", &summary_json, "when the program ends, write what the slice saw (limits, peaks) here");
  std::vector<std::string> cmd;
  if (Status s = flags.Parse(args, &cmd, true); !s.ok()) {
    std::cerr << "gpuslice run: " << s.message() << "\n";
    return 2;
  }
  if (flags.help_requested()) return std::cout << flags.Usage(), 0;
  if (cmd.empty()) {
    std::cerr << "gpuslice run: no command given (gpuslice run --memory 4g -- python train.py)\n";
    return 2;
  }
  model::Allocation a;
  if (policy == "force")
    a.core_policy = model::CorePolicy::kForce;
  else if (policy == "disable")
    a.core_policy = model::CorePolicy::kDisable;
  else if (policy != "default") {
    std::cerr << "gpuslice run: --policy must be force, default or disable, not '" << policy << "'\n";
    return 2;
  }
  a.oversubscribe = oversubscribe;
  a.priority = static_cast<int>(priority);
  a.card_best_priority = 0;  // another run on this card may have asked for --priority 0

  auto node = OpenNodeGpus(driver_root);
  if (!node.ok()) {
    std::cerr << "gpuslice run: " << node.status().message() << "\n";
    return 1;
  }
  if (device >= static_cast<int64_t>(node->gpus.size())) {
    std::cerr << "gpuslice run: --device " << device << ": this machine has " << node->gpus.size() << " GPU(s)\n";
    return 2;
  }
  const model::Gpu& g = node->gpus[static_cast<size_t>(device)];
  a.devices.push_back({g.uuid, g.minor, memory, static_cast<unsigned>(cores)});

  std::string runs = RunsDir();
  auto run_dir = MakeRunDir(runs);
  if (!run_dir.ok()) {
    std::cerr << "gpuslice run: " << run_dir.status().message() << "\n";
    return 1;
  }
  const std::string dir = *run_dir;
  mkdir((runs + "/cards").c_str(), 0700);
  model::EditOptions o;
  o.standalone = true;
  o.enforcer_host_path = EnforcerLibrary();
  o.region_host_dir = dir;
  // This user's runs take turns on each card through one card region per GPU.
  o.cards_host_dir = runs + "/cards";
  // The slice bound to the granted card's UUID, as the node agent's limits file binds it:
  // the program may reorder or widen CUDA_VISIBLE_DEVICES, the card keeps its limits and
  // no other card is usable.
  o.limits_file_host_path = dir + "/limits";
  // An entry of its own on each card region (the run directory is its owner), so no
  // program that fills a card file can leave this run without its share.
  if (Status s = node::TakeCardEntries(o.cards_host_dir, dir, static_cast<int64_t>(time(nullptr)), &a); !s.ok()) {
    std::cerr << "gpuslice run: " << s.message() << "\n";
    return 1;
  }
  {
    std::ofstream f(o.limits_file_host_path);
    f << model::LimitsFileText(a, dir + "/region", o.cards_host_dir, "written by gpuslice run");
    if (!f.flush()) {
      std::cerr << "gpuslice run: cannot write " << o.limits_file_host_path << "\n";
      return 1;
    }
  }
  chmod(o.limits_file_host_path.c_str(), 0400);
  if (const char* pre = getenv("LD_PRELOAD")) o.existing_ld_preload = pre;
  if (access(o.enforcer_host_path.c_str(), R_OK) != 0) {
    std::cerr << "gpuslice run: enforcer not found at " << o.enforcer_host_path << " (set GPUSLICE_ENFORCER)\n";
    return 1;
  }
  model::ContainerEdits edits = model::ToContainerEdits(a, o);

  // SIGCHLD is blocked so the supervisor can wait for it with a timeout (below); the
  // child gets the mask it had.
  sigset_t chld, old_mask;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &old_mask);
  g_child = fork();
  if (g_child == 0) {
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    for (const auto& [k, v] : edits.env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    for (auto& c : cmd) argv.push_back(c.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::cerr << "gpuslice run: cannot run " << cmd[0] << ": " << strerror(errno) << "\n";
    _exit(127);
  }
  signal(SIGINT, Forward);
  signal(SIGTERM, Forward);
  int status = 0;
  for (;;) {
    pid_t done = waitpid(g_child, &status, WNOHANG);
    if (done == g_child || (done < 0 && errno != EINTR)) break;
    timespec step{1, 0};
    sigtimedwait(&chld, nullptr, &step);  // returns early when the program ends
  }
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  if (!summary_json.empty()) WriteSummary(dir + "/region", a, summary_json);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

}  // namespace gs::cli
