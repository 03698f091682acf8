#include "src/container/oci_hook.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "src/common/file.h"
#include "src/container/edits_plan.h"
#include "src/container/library_dirs.h"
#include "src/container/rootfs.h"

namespace gs::container {
namespace {

constexpr size_t kMaxState = 1 << 20, kMaxConfig = 16 << 20;

}  // namespace

StatusOr<HookContainer> ReadHookContainer(std::istream& state_in) {
  std::string text(kMaxState + 1, '\0');
  state_in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(state_in.gcount()));
  if (text.size() > kMaxState) return InvalidArgument("container state on stdin is larger than 1 MiB");
  HookContainer c;
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
  auto config = ReadFile(bundle + "/config.json");
  if (!config.ok()) return InvalidArgument("cannot read " + config.status().message());
  if (config->size() > kMaxConfig) return InvalidArgument(bundle + "/config.json is larger than 16 MiB");
  auto cfg = ParseContainerConfig(*config, bundle);
  if (!cfg.ok()) return cfg.status();
  c.config = std::move(*cfg);
  return c;
}

namespace {

// cgroup v1: "N:devices:/path" in /proc/<pid>/cgroup.
Status AllowDevices(int pid, const std::vector<model::DeviceNode>& nodes) {
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
Status ApplyInNamespace(const HookContainer& c, model::ContainerEdits edits) {
  const std::string& rootfs = c.config.rootfs;
  int ns = open(("/proc/" + std::to_string(c.pid) + "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0 || setns(ns, CLONE_NEWNS) != 0)
    return Internal("cannot enter the mount namespace of pid " + std::to_string(c.pid) + ": " + strerror(errno));
  GS_ASSIGN_OR_RETURN(RootFs root, RootFs::Open(rootfs));
  // Libraries go where the image's own loader looks (a static image keeps the host's path).
  std::string lib_dir = ImageLibraryDir(root);
  if (!lib_dir.empty()) PlaceLibraries(&edits, {lib_dir});
  // Before pivot_root (prestart, createRuntime) the container's namespace still holds the
  // host's tree: sources are opened here, since bind mounts may not cross namespaces.
  // They are host paths gpuslice chose (driver root, state dir), never image paths.
  std::vector<int> sources;
  for (const auto& m : edits.mounts) {
    int fd = open(m.host_path.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0)
      return Internal("cannot open " + m.host_path + " in the container's namespace: " + strerror(errno) +
                      " (is the hook running after pivot_root? use prestart or createRuntime)");
    sources.push_back(fd);
  }
  // Resolve every target first: a refused path leaves the container untouched.
  std::vector<int> targets;
  for (const auto& m : edits.mounts) {
    GS_ASSIGN_OR_RETURN(int t, root.Target(m.container_path, false));
    targets.push_back(t);
  }
  for (const auto& n : edits.devices) GS_RETURN_IF_ERROR(root.CharDevice(n.container_path, n.major, n.minor));
  for (size_t i = 0; i < edits.mounts.size(); ++i) {
    const model::Mount& m = edits.mounts[i];
    GS_RETURN_IF_ERROR(BindMount(sources[i], targets[i], m.container_path));
    GS_ASSIGN_OR_RETURN(int mounted, root.Target(m.container_path, false));  // now the mount, not what is beneath
    Status s = RestrictMount(mounted, !m.read_only, m.container_path);
    close(mounted);
    GS_RETURN_IF_ERROR(s);
  }
  return Status::Ok();
}

// Runs ApplyInNamespace in a child; its error comes back through a pipe.
Status ApplyInChild(const HookContainer& c, const model::ContainerEdits& edits) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + strerror(errno));
  pid_t child = fork();
  if (child < 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return Internal(std::string("fork: ") + strerror(errno));
  }
  if (child == 0) {
    close(pipe_fds[0]);
    Status s = ApplyInNamespace(c, edits);
    if (s.ok()) _exit(0);
    if (write(pipe_fds[1], s.message().data(), s.message().size()) < 0) _exit(1);
    _exit(1);
  }
  close(pipe_fds[1]);
  std::string message;
  char buf[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof(buf))) != 0;) {
    if (n > 0)
      message.append(buf, static_cast<size_t>(n));
    else if (errno != EINTR)
      break;
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  return Internal(message.empty() ? "the process that edits the container failed" : message);
}

}  // namespace

Status GiveDevices(const HookContainer& c, const model::VisibleDevices& visible, const HookOptions& o,
                   const GpuLister& node_gpus) {
  GS_ASSIGN_OR_RETURN(auto caps, ParseCapabilities(c.config.capabilities));
  std::vector<model::Gpu> selected;
  if (visible.kind != model::Visibility::kNone) {
    GS_ASSIGN_OR_RETURN(auto gpus, node_gpus());
    GS_ASSIGN_OR_RETURN(selected, model::SelectGpus(visible, gpus));
  }
  PlanOptions plan_options;
  plan_options.driver_root = o.driver_root;
  plan_options.capabilities = caps;
  if (!o.enforcer.empty()) {
    GS_ASSIGN_OR_RETURN(plan_options.enforcer, InstallEnforcer(o.enforcer, o.state_dir));
  }
  GS_ASSIGN_OR_RETURN(model::ContainerEdits edits, PlanEdits(plan_options, selected));
  GS_RETURN_IF_ERROR(ApplyInChild(c, edits));
  return AllowDevices(c.pid, edits.devices);
}

}  // namespace gs::container
