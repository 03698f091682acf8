#include "src/container/oci_hook.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "src/common/flags.h"
#include "src/container/device_request.h"
#include "src/container/edits_plan.h"
#include "src/container/library_dirs.h"
#include "src/container/oci_config.h"
#include "src/container/rootfs.h"
#include "src/model/visible_devices.h"
#include "src/platform/gpu_driver.h"

namespace gs::container {
namespace {

constexpr size_t kMaxState = 1 << 20, kMaxConfig = 16 << 20;

struct Container {
  int pid = 0;
  std::string id;  // for messages; may be empty
  ContainerConfig config;
};

StatusOr<Container> ReadContainer(std::istream& state_in) {
  std::string text(kMaxState + 1, '\0');
  state_in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(state_in.gcount()));
  if (text.size() > kMaxState) return InvalidArgument("container state on stdin is larger than 1 MiB");
  Container c;
  std::string bundle;
  try {
    auto st = nlohmann::json::parse(text);
    if (!st.is_object() || !st.contains("pid") || !st["pid"].is_number_integer() || st["pid"].get<int>() <= 0)
      return InvalidArgument("container state on stdin has no valid \"pid\"");
    if (!st.contains("bundle") || !st["bundle"].is_string() || st["bundle"].get<std::string>().empty() ||
        st["bundle"].get<std::string>()[0] != '/')
      return InvalidArgument("container state on stdin has no absolute \"bundle\" path");
    c.pid = st["pid"].get<int>();
    bundle = st["bundle"].get<std::string>();
    if (st.contains("id") && st["id"].is_string()) c.id = st["id"].get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("container state on stdin is not valid JSON: ") + e.what());
  }
  std::ifstream f(bundle + "/config.json");
  if (!f) return InvalidArgument("cannot read " + bundle + "/config.json");
  std::stringstream ss;
  ss << f.rdbuf();
  if (ss.str().size() > kMaxConfig) return InvalidArgument(bundle + "/config.json is larger than 16 MiB");
  auto cfg = ParseContainerConfig(ss.str(), bundle);
  if (!cfg.ok()) return cfg.status();
  c.config = std::move(*cfg);
  return c;
}

// A message on stderr (runc shows it only when the hook fails) and, with --log, appended
// to that file, so a refusal of a container that still starts leaves a trace.
void Log(const std::string& log_path, const std::string& container_id, const std::string& message) {
  std::string line =
      "gpuslice hook: " + (container_id.empty() ? "" : "container " + Printable(container_id, 80) + ": ") + message +
      "\n";
  std::cerr << line;
  if (log_path.empty()) return;
  int fd = open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) {
    std::cerr << "gpuslice hook: cannot open the log " << log_path << ": " << strerror(errno) << "\n";
    return;
  }
  time_t now = time(nullptr);
  char stamp[32];
  struct tm tm_utc;
  strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ ", gmtime_r(&now, &tm_utc));
  line = stamp + line;
  if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    std::cerr << "gpuslice hook: cannot write the log " << log_path << ": " << strerror(errno) << "\n";
  close(fd);
}

// cgroup v1: "N:devices:/path" in /proc/<pid>/cgroup.
Status AllowDevices(int pid, const std::vector<DeviceNodeEdit>& nodes) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line, path;
  while (std::getline(in, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    if (line.substr(a + 1, b - a - 1) == "devices") path = line.substr(b + 1);
  }
  if (path.empty()) return Status::Ok();  // cgroup v2 or no devices controller: the runtime's rules apply
  std::string allow = "/sys/fs/cgroup/devices" + path + "/devices.allow";
  for (const auto& n : nodes) {
    std::ofstream f(allow);
    f << "c " << n.major << ":" << n.minor << " rw";
    f.flush();
    if (!f) return Internal("cannot allow device " + n.container_path + " in " + allow);
  }
  return Status::Ok();
}

// In a child (setns needs a single-threaded process): enter the container's mount
// namespace and make the edits through fds opened beneath its root.
int ApplyInNamespace(const Container& c, EditsPlan plan) {
  const std::string& rootfs = c.config.rootfs;
  int ns = open(("/proc/" + std::to_string(c.pid) + "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0 || setns(ns, CLONE_NEWNS) != 0) {
    std::cerr << "gpuslice hook: cannot enter the mount namespace of pid " << c.pid << ": " << strerror(errno) << "\n";
    return 1;
  }
  auto root = RootFs::Open(rootfs);
  if (!root.ok()) {
    std::cerr << "gpuslice hook: " << root.status().message() << "\n";
    return 1;
  }
  // Libraries go where the image's own loader looks (a static image keeps the host's path).
  std::string lib_dir = ImageLibraryDir(*root);
  if (!lib_dir.empty()) PlaceLibraries(&plan, {lib_dir});
  // Before pivot_root (prestart, createRuntime) the container's namespace still holds the
  // host's tree: sources are opened here, since bind mounts may not cross namespaces.
  // They are host paths gpuslice chose (driver root, state dir), never image paths.
  std::vector<int> sources;
  for (const auto& m : plan.mounts) {
    int fd = open(m.host_path.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) {
      std::cerr << "gpuslice hook: cannot open " << m.host_path << " in the container's namespace: " << strerror(errno)
                << " (is the hook running after pivot_root? use prestart or createRuntime)\n";
      return 1;
    }
    sources.push_back(fd);
  }
  // Resolve every target first: a refused path leaves the container untouched.
  std::vector<int> targets;
  for (const auto& m : plan.mounts) {
    auto t = root->Target(m.container_path, false);
    if (!t.ok()) {
      std::cerr << "gpuslice hook: " << t.status().message() << "\n";
      return 1;
    }
    targets.push_back(*t);
  }
  for (const auto* list : {&plan.control_nodes, &plan.gpu_nodes})
    for (const auto& n : *list)
      if (Status s = root->CharDevice(n.container_path, n.major, n.minor); !s.ok()) {
        std::cerr << "gpuslice hook: " << s.message() << "\n";
        return 1;
      }
  for (size_t i = 0; i < plan.mounts.size(); ++i) {
    const MountEdit& m = plan.mounts[i];
    Status s = BindMount(sources[i], targets[i], m.container_path);
    if (s.ok()) {
      auto mounted = root->Target(m.container_path, false);  // now the mount, not what is beneath
      s = mounted.ok() ? RestrictMount(*mounted, m.writable, m.container_path) : mounted.status();
      if (mounted.ok()) close(*mounted);
    }
    if (!s.ok()) {
      std::cerr << "gpuslice hook: " << s.message() << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace

int RunHook(const std::vector<std::string>& args) {
  std::string driver_root = "/", state_dir = "/var/lib/gpuslice", enforcer, log_path;
  DevicePolicy policy;
  FlagSet flags("hook", "OCI prestart/createRuntime hook: reads the container state on stdin.");
  flags.String("driver-root", &driver_root, "root of the driver installation");
  flags.String("state-dir", &state_dir, "where the enforcer is installed for containers");
  flags.String("enforcer", &enforcer, "libgpuslice.so to install (empty: none)");
  flags.Bool("accept-env-when-unprivileged", &policy.accept_env_when_unprivileged,
             "honour NVIDIA_VISIBLE_DEVICES of unprivileged containers without a device allocation");
  flags.String("log", &log_path, "file to append refusals to (empty: stderr only)");
  std::vector<std::string> rest;
  if (Status s = flags.Parse(args, &rest, true); !s.ok()) {
    std::cerr << "gpuslice hook: " << s.message() << "\n";
    return 2;
  }
  if (flags.help_requested()) return std::cout << flags.Usage(), 0;
  auto c = ReadContainer(std::cin);
  if (!c.ok()) {
    std::cerr << "gpuslice hook: " << c.status().message() << "\n";
    return 1;
  }
  auto decision = DecideDevices(c->config, policy);
  if (!decision.ok()) {
    Log(log_path, c->id, decision.status().message());
    return 1;
  }
  if (!decision->ignored.empty()) Log(log_path, c->id, decision->ignored);
  const model::VisibleDevices& visible = decision->devices;
  if (visible.kind == model::Visibility::kVoid) return 0;  // not a GPU container, or refused: untouched
  auto caps = ParseCapabilities(c->config.capabilities);
  if (!caps.ok()) {
    std::cerr << "gpuslice hook: " << caps.status().message() << "\n";
    return 1;
  }
  std::vector<model::Gpu> selected;
  if (visible.kind != model::Visibility::kNone) {
    auto driver = platform::OpenNvmlGpuDriver(driver_root);
    if (!driver.ok()) {
      std::cerr << "gpuslice hook: " << driver.status().message() << "\n";
      return 1;
    }
    auto infos = (*driver)->ListGpus();
    if (!infos.ok()) {
      std::cerr << "gpuslice hook: " << infos.status().message() << "\n";
      return 1;
    }
    std::vector<model::Gpu> gpus;
    for (const auto& g : *infos)
      gpus.push_back({g.uuid, g.index, g.name, g.memory_total, g.numa_node, g.minor, !g.lost});
    auto sel = model::SelectGpus(visible, gpus);
    if (!sel.ok()) {
      std::cerr << "gpuslice hook: " << sel.status().message() << "\n";
      return 1;
    }
    selected = *sel;
  }
  PlanOptions o;
  o.driver_root = driver_root;
  o.capabilities = *caps;
  if (!enforcer.empty()) {
    auto e = InstallEnforcer(enforcer, state_dir);
    if (!e.ok()) {
      std::cerr << "gpuslice hook: " << e.status().message() << "\n";
      return 1;
    }
    o.enforcer = *e;
  }
  auto plan = PlanEdits(o, selected);
  if (!plan.ok()) {
    std::cerr << "gpuslice hook: " << plan.status().message() << "\n";
    return 1;
  }
  pid_t child = fork();
  if (child == 0) _exit(ApplyInNamespace(*c, *plan));
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  std::vector<DeviceNodeEdit> all = plan->control_nodes;
  all.insert(all.end(), plan->gpu_nodes.begin(), plan->gpu_nodes.end());
  if (Status s = AllowDevices(c->pid, all); !s.ok()) {
    std::cerr << "gpuslice hook: " << s.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace gs::container
