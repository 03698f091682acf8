#include "src/container/oci_hook.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "src/common/file.h"
#include "src/container/device_request.h"
#include "src/container/edits_plan.h"
#include "src/container/library_dirs.h"
#include "src/container/rootfs.h"
#include "src/model/env_limits.h"

namespace gs::container {
namespace {

constexpr size_t kMaxConfig = 16 << 20;
// open_tree(2) and move_mount(2) flags (linux/mount.h, which clashes with sys/mount.h).
constexpr unsigned kOpenTreeClone = 1, kMoveMountFEmptyPath = 0x4, kMoveMountTEmptyPath = 0x40;

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

bool StateIsStopped(const std::string& state_text) {
  auto st = nlohmann::json::parse(state_text, nullptr, /*allow_exceptions=*/false);
  return st.is_object() && st.contains("status") && st["status"] == "stopped";
}

StatusOr<std::string> ReadHookContainerId(std::istream& state_in) {
  std::string text(kMaxState + 1, '\0');
  state_in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(state_in.gcount()));
  if (text.size() > kMaxState) return InvalidArgument("container state on stdin is larger than 1 MiB");
  try {
    auto st = nlohmann::json::parse(text);
    if (!st.is_object() || !st.contains("id") || !st["id"].is_string() || st["id"].get<std::string>().empty())
      return InvalidArgument("container state on stdin has no \"id\"");
    return st["id"].get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("container state on stdin is not valid JSON: ") + e.what());
  }
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

// Mount trees cloned on the host (open_tree), by host path: a mount the hook made on the
// host after the runtime made the container's namespace (a slice's tmpfs) is not in that
// namespace, where its path shows the directory beneath; the clone carries the mount
// itself across (move_mount of a detached tree).
using HostTrees = std::map<std::string, int>;

int OpenTree(const std::string& path) {
  return static_cast<int>(syscall(SYS_open_tree, AT_FDCWD, path.c_str(), kOpenTreeClone | O_CLOEXEC));
}

Status MoveMount(int tree_fd, int target_fd, const std::string& what) {
  if (syscall(SYS_move_mount, tree_fd, "", target_fd, "", kMoveMountFEmptyPath | kMoveMountTEmptyPath) != 0)
    return Internal("cannot mount " + what + ": " + strerror(errno));
  return Status::Ok();
}

// In a child (setns needs a single-threaded process): enter the container's mount
// namespace and make the edits through fds opened beneath its root.
Status ApplyInNamespace(const HookContainer& c, model::ContainerEdits edits, const HostTrees& trees) {
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
    if (auto t = trees.find(m.host_path); t != trees.end()) {
      sources.push_back(t->second);
      continue;
    }
    int fd = open(m.host_path.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0)
      return Internal("cannot open " + m.host_path + " in the container's namespace: " + strerror(errno) +
                      " (is the hook running after pivot_root? use prestart or createRuntime)");
    sources.push_back(fd);
  }
  // Resolve every target first: a refused path leaves the container untouched.
  std::vector<int> targets;
  std::vector<bool> dirs;
  for (size_t i = 0; i < edits.mounts.size(); ++i) {
    struct stat st;
    dirs.push_back(fstat(sources[i], &st) == 0 && S_ISDIR(st.st_mode));
    GS_ASSIGN_OR_RETURN(int t, root.Target(edits.mounts[i].container_path, dirs[i]));
    targets.push_back(t);
  }
  for (const auto& n : edits.devices) GS_RETURN_IF_ERROR(root.CharDevice(n.container_path, n.major, n.minor));
  for (size_t i = 0; i < edits.mounts.size(); ++i) {
    const model::Mount& m = edits.mounts[i];
    const bool tree = trees.count(m.host_path) > 0;
    GS_RETURN_IF_ERROR(tree ? MoveMount(sources[i], targets[i], m.container_path)
                            : BindMount(sources[i], targets[i], m.container_path));
    GS_ASSIGN_OR_RETURN(int mounted, root.Target(m.container_path, dirs[i]));  // now the mount, not what is beneath
    // A cloned tree is a slice's tmpfs: it keeps noexec in the container too.
    Status s = RestrictMount(mounted, !m.read_only, m.container_path, tree);
    close(mounted);
    GS_RETURN_IF_ERROR(s);
  }
  return Status::Ok();
}

// Runs ApplyInNamespace in a child; its error comes back through a pipe.
Status ApplyInChild(const HookContainer& c, const model::ContainerEdits& edits, const HostTrees& trees) {
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
    Status s = ApplyInNamespace(c, edits, trees);
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

// The container's slice from its own environment, for the GPUs it gets: refused (a limit
// that does not parse, an id that cannot name a directory) before anything changes.
StatusOr<model::Allocation> SliceOf(const HookContainer& c, const std::vector<model::Gpu>& gpus) {
  std::vector<model::DeviceGrant> cards;
  for (const auto& g : gpus) cards.push_back({g.uuid, g.minor, 0, 0});
  GS_ASSIGN_OR_RETURN(model::Allocation alloc,
                      model::AllocationFromEnvironment(c.config.env, cards, kHookBestPriority));
  if (!UsableContainerId(c.id))
    return InvalidArgument("the container id \"" + Printable(c.id, 80) +
                           "\" cannot name its slice's directory (1-128 of A-Z a-z 0-9 _ . + -)");
  return alloc;
}

// Makes the container's slice directory for `alloc` and applies `edits` with the slice's
// mounts added; on failure nothing half-made stays on the host.
Status ApplyWithSlice(const HookContainer& c, const HookOptions& o, const std::vector<model::Gpu>& gpus,
                      model::Allocation alloc, model::ContainerEdits edits) {
  model::EditOptions eo;  // the container paths are model::EditOptions' own
  if (o.prepare_cards) {
    eo.cards_host_dir = o.state_dir + "/cards";
    GS_RETURN_IF_ERROR(o.prepare_cards(eo.cards_host_dir, gpus));
  }
  auto limits = [&](const std::string& dir) -> StatusOr<std::string> {
    if (o.take_card_entries && !eo.cards_host_dir.empty())
      GS_RETURN_IF_ERROR(o.take_card_entries(eo.cards_host_dir, dir, &alloc));
    return model::LimitsFileText(
        alloc, eo.region_container_dir + "/region", eo.cards_host_dir.empty() ? "" : eo.cards_container_dir,
        "written by gpuslice hook for container " + c.id + " from its environment; authoritative, mounted read-only");
  };
  GS_ASSIGN_OR_RETURN(std::string dir, MakeContainerSlice(ContainersDir(o), c.id, c.pid, limits, o.shared_dir_bytes));
  eo.limits_file_host_path = dir + "/limits";
  eo.region_host_dir = dir + "/shared";
  for (auto& m : model::SliceMounts(eo)) edits.mounts.push_back(std::move(m));
  Status s = Status::Ok();
  int tree = OpenTree(eo.region_host_dir);
  if (tree < 0)
    s = Internal("cannot clone the mount of " + eo.region_host_dir + ": " + strerror(errno));
  else
    s = ApplyInChild(c, edits, {{eo.region_host_dir, tree}});
  if (tree >= 0) close(tree);
  if (s.ok()) s = AllowDevices(c.pid, edits.devices);
  if (!s.ok()) RemoveContainerSlice(dir);  // nothing half-made stays on the host
  return s;
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
  const bool slice = !o.enforcer.empty() && !selected.empty() && !c.config.limits_mounted;
  model::Allocation alloc;
  if (slice) {
    GS_ASSIGN_OR_RETURN(alloc, SliceOf(c, selected));  // refused before anything changes
  }
  PlanOptions plan_options;
  plan_options.driver_root = o.driver_root;
  plan_options.capabilities = caps;
  if (!o.enforcer.empty()) {
    GS_ASSIGN_OR_RETURN(plan_options.enforcer, InstallEnforcer(o.enforcer, o.state_dir));
  }
  GS_ASSIGN_OR_RETURN(model::ContainerEdits edits, PlanEdits(plan_options, selected));
  if (!slice) {
    GS_RETURN_IF_ERROR(ApplyInChild(c, edits, {}));
    return AllowDevices(c.pid, edits.devices);
  }
  return ApplyWithSlice(c, o, selected, std::move(alloc), std::move(edits));
}

Status GiveSlice(const HookContainer& c, const HookOptions& o, const GpuLister& node_gpus) {
  if (c.config.gpu_minors.empty() || c.config.limits_mounted) return Status::Ok();
  GS_ASSIGN_OR_RETURN(auto gpus, node_gpus());
  std::vector<model::Gpu> selected;
  for (unsigned minor : c.config.gpu_minors) {
    auto g = std::find_if(gpus.begin(), gpus.end(), [&](const model::Gpu& x) { return x.minor == minor; });
    if (g == gpus.end())
      return FailedPrecondition("the container was given /dev/nvidia" + std::to_string(minor) +
                                ", which is no GPU of this node");
    selected.push_back(*g);
  }
  GS_ASSIGN_OR_RETURN(model::Allocation alloc, SliceOf(c, selected));
  return ApplyWithSlice(c, o, selected, std::move(alloc), model::ContainerEdits{});
}

}  // namespace gs::container
