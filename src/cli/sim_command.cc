#include "src/cli/sim_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "src/cli/paths.h"
#include "src/common/clock.h"
#include "src/common/file.h"
#include "src/common/flags.h"
#include "src/common/quantity.h"
#include "src/platform/nvml_api.h"
#include "src/sim/node.h"
#include "src/sim/node_daemon.h"
#include "src/sim/registration.h"
#include "src/sim/scenario.h"
#include "src/sim/state.h"

namespace fs = std::filesystem;

namespace gs::cli {
namespace {

// Where a driver installs its libraries: Debian/Ubuntu's multiarch directory, or the
// lib64 directory of RHEL, Fedora and SUSE (--lib-dir), so both host layouts can be tested.
constexpr const char* kMultiarchLibDir = "/usr/lib/x86_64-linux-gnu";
constexpr const char* kLib64Dir = "/usr/lib64";
constexpr unsigned kUvmMajor = 510;  // nvidia-uvm's major is dynamic on real systems

int Fail(const std::string& message) {
  std::cerr << "gpuslice sim: " << message << "\n";
  return 1;
}

std::string StatePath(const std::string& root) {
  return root + "/state";
}
std::string SocketPath(const std::string& root) {
  return root + "/" + sim::kDriverSocketName;
}
std::string DaemonPidPath(const std::string& root) {
  return root + "/driver.pid";
}
std::string DaemonLogPath(const std::string& root) {
  return root + "/driver.log";
}

// Starts `gpuslice sim daemon` for the node in root, detached (own session, output to
// driver.log, no descriptor of ours), and waits until it accepts registrations.
Status StartDaemon(const std::string& root) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + strerror(errno));
  std::string self = SelfExecutable(), log = DaemonLogPath(root);
  pid_t pid = fork();
  if (pid < 0) return Internal(std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    setsid();
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (null_fd >= 0) dup2(null_fd, 0);
    if (log_fd >= 0) {
      dup2(log_fd, 1);
      dup2(log_fd, 2);
    }
    dup2(ready[1], 3);  // without close-on-exec: the daemon's readiness signal
    close_range(4, ~0U, 0);
    execl(self.c_str(), self.c_str(), "sim", "daemon", "--root", root.c_str(), "--ready-fd", "3",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(ready[1]);
  pollfd p{ready[0], POLLIN, 0};
  char byte = 0;
  bool ok = poll(&p, 1, 10000) == 1 && read(ready[0], &byte, 1) == 1;
  close(ready[0]);
  if (!ok) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    auto text = ReadFile(log);
    return Internal("the node daemon did not start: " + (text.ok() ? *text : text.status().message()));
  }
  std::ofstream(DaemonPidPath(root)) << pid << "\n";
  return Status::Ok();
}

// Stops the node's daemon (SIGTERM, then waits up to 2 s); it also stops by itself within a
// second of its state file going.
void StopDaemon(const std::string& root) {
  std::ifstream in(DaemonPidPath(root));
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return;
  // Only a daemon serving this root: the pid may have been reused since.
  auto argv = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
  if (!argv.ok() || argv->find(std::string("daemon") + '\0' + "--root" + '\0' + root + '\0') == std::string::npos)
    return;
  kill(static_cast<pid_t>(pid), SIGTERM);
  for (int i = 0; i < 200 && kill(static_cast<pid_t>(pid), 0) == 0; ++i) {
    waitpid(static_cast<pid_t>(pid), nullptr, WNOHANG);  // ours when down runs in the process that was up
    usleep(10000);
  }
}

// A character device when we may mknod (root), a plain file otherwise: the simulated
// driver only checks that the node exists, as real NVML does in a container.
Status MakeDeviceNode(const std::string& path, unsigned major, unsigned minor) {
  unlink(path.c_str());
  if (mknod(path.c_str(), S_IFCHR | 0666, makedev(major, minor)) == 0) return Status::Ok();
  int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) return Internal("cannot create " + path + ": " + strerror(errno));
  close(fd);
  return Status::Ok();
}

Status WriteState(const sim::Scenario& sc, const std::string& path) {
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0666);
  if (fd < 0) return Internal("cannot create " + tmp + ": " + strerror(errno));
  fchmod(fd, 0666);  // containers running as other users attach to the same node
  if (ftruncate(fd, sizeof(sim::State)) != 0) {
    close(fd);
    return Internal("cannot size " + tmp + ": " + strerror(errno));
  }
  void* p = mmap(nullptr, sizeof(sim::State), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return Internal("cannot map " + tmp + ": " + strerror(errno));
  auto* s = static_cast<sim::State*>(p);
  sim::InitState(s);
  s->epoch_ns = MonotonicNowNs();
  snprintf(s->driver_version, sizeof(s->driver_version), "%s", sc.driver_version.c_str());
  s->cuda_version = sc.cuda_version;
  s->device_count = static_cast<uint32_t>(sc.gpus.size());
  s->timing = {static_cast<int64_t>(sc.sample_period_ms * 1e6), static_cast<int64_t>(sc.timeslice_ms * 1e6)};
  for (size_t i = 0; i < sc.gpus.size(); ++i) {
    const sim::ScenarioGpu& g = sc.gpus[i];
    sim::DeviceSpec& d = s->spec[i];
    snprintf(d.name, sizeof(d.name), "%s", g.name.c_str());
    snprintf(d.uuid, sizeof(d.uuid), "%s", g.uuid.c_str());
    snprintf(d.pci_bus_id, sizeof(d.pci_bus_id), "%s", g.pci_bus_id.c_str());
    snprintf(d.serial, sizeof(d.serial), "%s", g.serial.c_str());
    d.pci_device_id = (g.pci_device << 16) | 0x10DE;
    d.pci_subsystem_id = 0x160710DE;
    d.numa_node = g.numa_node;
    d.minor = g.minor;
    d.sm_count = g.sm_count;
    d.cc_major = g.cc_major;
    d.cc_minor = g.cc_minor;
    d.architecture = g.architecture;
    d.power_limit_w = g.power_limit_w;
    d.sm_clock_mhz = g.sm_clock_mhz;
    d.mem_clock_mhz = g.mem_clock_mhz;
    d.memory_total = g.memory_bytes;
    d.context_memory = g.context_memory;
    d.memory_info_unsupported = g.memory_info_unsupported ? 1 : 0;
    d.multicast_supported = g.multicast ? 1 : 0;
  }
  sim::Node node(s, RealClock::Get(), getpid(), 0);
  for (const auto& f : sc.faults)
    node.AddEvent(f.gpu, s->epoch_ns + static_cast<int64_t>(f.at_seconds * 1e9), nvmlEventTypeXidCriticalError, f.xid);
  munmap(p, sizeof(sim::State));
  if (rename(tmp.c_str(), path.c_str()) != 0) return Internal("cannot create " + path + ": " + strerror(errno));
  return Status::Ok();
}

int Up(const std::vector<std::string>& args) {
  std::string scenario_path, root, gpus, lib_dir = kMultiarchLibDir;
  bool replace = false;
  FlagSet flags("sim up", "Brings a simulated GPU node up in a directory (its driver root).");
  flags.String("scenario", &scenario_path, "scenario YAML file (see docs/simulator.md)");
  flags.String("gpus", &gpus, "instead of a scenario file: e.g. 2xH100-80GB,1xT4");
  flags.String("root", &root, "directory of the simulated node (created)", "GPUSLICE_SIM_ROOT");
  flags.Bool("replace", &replace, "replace a node already up in the directory");
  flags.String("lib-dir", &lib_dir,
               std::string("driver library directory, as the host distribution has it: ") + kMultiarchLibDir +
                   " (Debian, Ubuntu) or " + kLib64Dir + " (RHEL, Fedora, SUSE)");
  std::vector<std::string> rest;
  if (Status s = flags.Parse(args, &rest); !s.ok()) return Fail(s.message());
  if (flags.help_requested()) return std::cout << flags.Usage(), 0;
  if (root.empty()) return Fail("--root is required");
  if (lib_dir != kMultiarchLibDir && lib_dir != kLib64Dir)
    return Fail("--lib-dir: '" + lib_dir + "' is not one of " + kMultiarchLibDir + ", " + kLib64Dir);
  if (scenario_path.empty() == gpus.empty()) return Fail("give exactly one of --scenario FILE or --gpus SPEC");
  std::string text;
  if (!scenario_path.empty()) {
    auto file = ReadFile(scenario_path);
    if (!file.ok()) return Fail("cannot read scenario " + file.status().message());
    text = std::move(*file);
  } else {
    text = "gpus: \"" + gpus + "\"\n";
  }
  auto sc = sim::ParseScenario(text);
  if (!sc.ok()) return Fail((scenario_path.empty() ? "--gpus" : scenario_path) + ": " + sc.status().message());

  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Fail("cannot create " + root + ": " + ec.message());
  root = fs::canonical(root).string();
  if (fs::exists(StatePath(root)) && !replace)
    return Fail("a simulated node is already up in " + root + " (use --replace, or sim down first)");
  for (const std::string& d : {std::string("/dev"), lib_dir, std::string("/usr/bin")})
    fs::create_directories(root + d, ec);
  for (const char* other : {kMultiarchLibDir, kLib64Dir})  // a replaced node may have had the other layout
    if (other != lib_dir)
      for (const char* f : {"libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "libnvidia-ml.so"})
        fs::remove(root + other + "/" + f, ec);

  std::string lib_src = SimLibraryDir();
  for (const char* lib : {"libcuda.so.1", "libnvidia-ml.so.1"}) {
    std::string dst = root + lib_dir + "/" + lib;
    // Copy to a temp name and rename: processes that mapped the old file keep it intact.
    fs::copy_file(lib_src + "/" + lib, dst + ".new", fs::copy_options::overwrite_existing, ec);
    if (ec) return Fail("cannot install " + std::string(lib) + " from " + lib_src + ": " + ec.message());
    fs::rename(dst + ".new", dst, ec);
    std::string plain = root + lib_dir + "/" + std::string(lib).substr(0, strlen(lib) - 2);
    fs::remove(plain, ec);
    fs::create_symlink(lib, plain, ec);
  }
  for (size_t i = 0; i < sc->gpus.size(); ++i)
    if (Status s = MakeDeviceNode(root + "/dev/nvidia" + std::to_string(sc->gpus[i].minor), 195, sc->gpus[i].minor);
        !s.ok())
      return Fail(s.message());
  for (auto [name, major, minor] : {std::tuple{"nvidiactl", 195u, 255u}, std::tuple{"nvidia-uvm", kUvmMajor, 0u},
                                    std::tuple{"nvidia-uvm-tools", kUvmMajor, 1u}})
    if (Status s = MakeDeviceNode(root + "/dev/" + name, major, minor); !s.ok()) return Fail(s.message());
  {
    std::ofstream smi(root + "/usr/bin/nvidia-smi");
    smi << "#!/bin/sh\n# nvidia-smi of a gpuslice simulated node\nexec '" << SelfExecutable() << "' smi --driver-root '"
        << root << "' \"$@\"\n";
  }
  fs::permissions(root + "/usr/bin/nvidia-smi", fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec |
                                                    fs::perms::group_read | fs::perms::others_read);
  StopDaemon(root);  // a replaced node's
  if (Status s = WriteState(*sc, StatePath(root)); !s.ok()) return Fail(s.message());
  if (Status s = StartDaemon(root); !s.ok()) return Fail(s.message());
  std::cout << "simulated node up in " << root << ": ";
  for (size_t i = 0; i < sc->gpus.size(); ++i) std::cout << (i ? ", " : "") << sc->gpus[i].name;
  std::cout << "\nuse it with:  eval \"$(gpuslice sim env --root " << root << ")\"\n";
  return 0;
}

int Down(const std::vector<std::string>& args) {
  std::string root;
  FlagSet flags("sim down", "Takes a simulated node down and removes what sim up created.");
  flags.String("root", &root, "directory of the simulated node", "GPUSLICE_SIM_ROOT");
  std::vector<std::string> rest;
  if (Status s = flags.Parse(args, &rest); !s.ok()) return Fail(s.message());
  if (flags.help_requested()) return std::cout << flags.Usage(), 0;
  if (root.empty()) return Fail("--root is required");
  if (!fs::exists(StatePath(root))) return Fail("no simulated node in " + root);
  std::error_code ec;
  // Only what `sim up` made; anything else a user put in the directory stays.
  root = fs::canonical(root, ec).string();
  StopDaemon(root);
  fs::remove(StatePath(root), ec);
  for (const std::string& f : {SocketPath(root), DaemonPidPath(root), DaemonLogPath(root)}) fs::remove(f, ec);
  for (auto& e : fs::directory_iterator(root + "/dev", ec))
    if (e.path().filename().string().rfind("nvidia", 0) == 0) fs::remove(e.path(), ec);
  for (const char* dir : {kMultiarchLibDir, kLib64Dir})
    for (const char* f : {"libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "libnvidia-ml.so"})
      fs::remove(root + dir + "/" + f, ec);
  fs::remove(root + "/usr/bin/nvidia-smi", ec);
  for (const char* d : {kMultiarchLibDir, kLib64Dir, "/usr/lib", "/usr/bin", "/usr", "/dev"})
    fs::remove(root + d, ec);  // if empty
  std::cout << "simulated node in " << root << " is down\n";
  return 0;
}

int StatusCmd(const std::vector<std::string>& args) {
  std::string root;
  FlagSet flags("sim status", "Shows a simulated node's cards, memory, load and pending faults.");
  flags.String("root", &root, "directory of the simulated node", "GPUSLICE_SIM_ROOT");
  std::vector<std::string> rest;
  if (Status s = flags.Parse(args, &rest); !s.ok()) return Fail(s.message());
  if (flags.help_requested()) return std::cout << flags.Usage(), 0;
  if (root.empty()) return Fail("--root is required");
  char err[512];
  sim::State* s = sim::MapState(StatePath(root).c_str(), err, sizeof(err));
  if (s == nullptr) return Fail(err);
  sim::Node node(s, RealClock::Get(), getpid(), 0);
  int64_t now = MonotonicNowNs();
  printf("simulated node %s  driver %s  CUDA %d.%d  up %.0fs\n", root.c_str(), s->driver_version,
         s->cuda_version / 1000, s->cuda_version % 1000 / 10, static_cast<double>(now - s->epoch_ns) / 1e9);
  for (int i = 0; i < node.device_count(); ++i) {
    const auto& d = node.spec(i);
    char used[32], total[32];
    sim::ProcessMemory procs[8];
    int nproc = node.RunningProcesses(i, procs, 8);
    printf("  %d  %-24s %s  %10s / %-10s  util %3u%%  procs %d%s\n", i, d.name, d.uuid,
           FormatBytes(node.MemoryUsed(i), used, sizeof(used)), FormatBytes(d.memory_total, total, sizeof(total)),
           node.Utilization(i), nproc, node.IsLost(i) ? "  LOST" : "");
    for (uint32_t e = 0; e < s->live[i].event_count.load(); ++e) {
      const sim::Event& ev = s->live[i].events[e];
      double at = static_cast<double>(ev.at_ns - s->epoch_ns) / 1e9;
      printf("     xid %llu at +%.1fs%s\n", static_cast<unsigned long long>(ev.data), at,
             ev.at_ns > now ? " (pending)" : "");
    }
  }
  return 0;
}

int Daemon(const std::vector<std::string>& args) {
  std::string root;
  int64_t ready_fd = -1;
  FlagSet flags("sim daemon",
                "Runs a simulated node's daemon in the foreground: it tells each process its pid as the node sees "
                "it and frees what a process held when it is gone. `sim up` starts it; it stops when the node goes "
                "down.");
  flags.String("root", &root, "directory of the simulated node", "GPUSLICE_SIM_ROOT");
  flags.Int("ready-fd", &ready_fd, "descriptor to write one byte to once registrations are accepted", -1, 1 << 20);
  std::vector<std::string> rest;
  if (Status s = flags.Parse(args, &rest); !s.ok()) return Fail(s.message());
  if (flags.help_requested()) return std::cout << flags.Usage(), 0;
  if (root.empty()) return Fail("--root is required");
  char err[1024];
  if (sim::RunNodeDaemon(StatePath(root).c_str(), SocketPath(root).c_str(), static_cast<int>(ready_fd), err,
                         sizeof(err)) != 0)
    return Fail(err);
  return 0;
}

int Env(const std::vector<std::string>& args) {
  std::string root;
  FlagSet flags("sim env", "Prints the shell exports that point a process at a simulated node.");
  flags.String("root", &root, "directory of the simulated node", "GPUSLICE_SIM_ROOT");
  std::vector<std::string> rest;
  if (Status s = flags.Parse(args, &rest); !s.ok()) return Fail(s.message());
  if (flags.help_requested()) return std::cout << flags.Usage(), 0;
  if (root.empty()) return Fail("--root is required");
  if (!fs::exists(StatePath(root))) return Fail("no simulated node in " + root + " (run gpuslice sim up first)");
  root = fs::canonical(root).string();
  std::string lib_dir = fs::exists(root + kLib64Dir + "/libcuda.so.1") ? kLib64Dir : kMultiarchLibDir;
  std::cout << "export GPUSLICE_SIM_ROOT='" << root << "'\n"
            << "export LD_LIBRARY_PATH='" << root << lib_dir << "'${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n"
            << "export PATH='" << root << "/usr/bin':\"$PATH\"\n";
  return 0;
}

int Inject(const std::vector<std::string>& args) {
  std::string root;
  int64_t gpu = 0, xid = 0;
  bool lost = false;
  FlagSet flags("sim inject", "Injects a fault now: an XID error on a GPU, or the GPU falling off the bus.");
  flags.String("root", &root, "directory of the simulated node", "GPUSLICE_SIM_ROOT");
  flags.Int("gpu", &gpu, "GPU index in the scenario", 0, sim::kMaxDevices - 1);
  flags.Int("xid", &xid, "XID number to report (e.g. 48 double-bit ECC, 79 fallen off the bus)", 1, 1 << 20);
  flags.Bool("lost", &lost, "the GPU falls off the bus (XID 79)");
  std::vector<std::string> rest;
  if (Status s = flags.Parse(args, &rest); !s.ok()) return Fail(s.message());
  if (flags.help_requested()) return std::cout << flags.Usage(), 0;
  if (root.empty()) return Fail("--root is required");
  if (lost) xid = 79;
  if (xid == 0) return Fail("give --xid N or --lost");
  char err[512];
  sim::State* s = sim::MapState(StatePath(root).c_str(), err, sizeof(err));
  if (s == nullptr) return Fail(err);
  if (gpu >= static_cast<int64_t>(s->device_count))
    return Fail("--gpu: the node has " + std::to_string(s->device_count) + " GPU(s)");
  sim::Node node(s, RealClock::Get(), getpid(), 0);
  node.AddEvent(static_cast<int>(gpu), MonotonicNowNs(), nvmlEventTypeXidCriticalError, static_cast<uint64_t>(xid));
  std::cout << "injected XID " << xid << " on GPU " << gpu << " (" << s->spec[gpu].uuid << ")\n";
  return 0;
}

}  // namespace

int SimCommand(const std::vector<std::string>& args) {
  static const char* kUsage =
      "usage: gpuslice sim <up|down|status|env|inject|daemon> [flags]\n"
      "  up      bring a simulated GPU node up (--scenario FILE | --gpus 2xH100-80GB) --root DIR\n"
      "  down    take it down\n"
      "  status  show cards, memory, load, faults\n"
      "  env     print exports pointing a shell at it: eval \"$(gpuslice sim env --root DIR)\"\n"
      "  inject  inject an XID error or a lost GPU now\n"
      "  daemon  the node's daemon in the foreground (up starts it)\n";
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "up") return Up(rest);
  if (args[0] == "down") return Down(rest);
  if (args[0] == "status") return StatusCmd(rest);
  if (args[0] == "env") return Env(rest);
  if (args[0] == "inject") return Inject(rest);
  if (args[0] == "daemon") return Daemon(rest);
  std::cerr << "gpuslice sim: unknown subcommand '" << args[0] << "'\n" << kUsage;
  return 2;
}

}  // namespace gs::cli
