#include "src/cli/hook_command.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <iostream>
#include <sstream>

#include "src/cli/node_gpus.h"
#include "src/common/flags.h"
#include "src/container/container_slice.h"
#include "src/container/device_request.h"
#include "src/container/oci_hook.h"
#include "src/node/card_entries.h"
#include "src/node/card_files.h"

namespace gs::cli {
namespace {

int Fail(const Status& s) {
  std::cerr << "gpuslice hook: " << s.message() << "\n";
  return 1;
}

// A message on stderr and, with --log, appended to that file, so a refusal of a container
// that still starts leaves a trace.
void Log(const std::string& log_path, const std::string& container_id, const std::string& message) {
  std::string line =
      "gpuslice hook: " + (container_id.empty() ? "" : "container " + container::Printable(container_id, 80) + ": ") +
      message + "\n";
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

}  // namespace

int HookCommand(const std::vector<std::string>& args) {
  container::HookOptions o;
  container::DevicePolicy policy;
  std::string log_path;
  FlagSet flags("hook",
                "OCI hook: reads the container state on stdin. As prestart/createRuntime (no argument) it gives a "
                "container its GPUs and slice (also as `gpuslice hook [flags] prestart`); as `gpuslice hook [flags] "
                "poststop` it removes the container's slice; `gpuslice hook [flags] reclaim` only removes the slices "
                "of containers that are gone; `gpuslice hook [flags] slice` (the createRuntime hook of gpuslice's CDI "
                "spec) only makes the slice of the GPUs the runtime gave the container.");
  flags.String("driver-root", &o.driver_root, "root of the driver installation");
  flags.String("state-dir", &o.state_dir,
               "where the enforcer is installed, the node's cards directory and the containers' slices are");
  flags.String("enforcer", &o.enforcer, "libgpuslice.so to install (empty: none)");
  flags.Bytes("shared-dir-size", &o.shared_dir_bytes, "size of each container's region tmpfs");
  flags.Bool("accept-env-when-unprivileged", &policy.accept_env_when_unprivileged,
             "honour NVIDIA_VISIBLE_DEVICES of unprivileged containers without a device allocation");
  flags.String("log", &log_path, "file to append refusals to (empty: stderr only)");
  std::vector<std::string> rest;
  if (Status s = flags.Parse(args, &rest, true); !s.ok()) {
    Fail(s);
    return 2;
  }
  if (flags.help_requested()) return std::cout << flags.Usage(), 0;
  // The stage: `prestart` (docker runs nvidia-container-runtime-hook so), `poststop`,
  // `reclaim` (no container: only the clean-up below, for operators and timers) or `slice`
  // (CDI gave the devices; only the slice is made). None: the state's "status" tells
  // (a hooks.d file runs one command line at prestart and poststop).
  std::string state;
  if (rest.empty()) {
    state.resize(container::kMaxState + 1);
    std::cin.read(state.data(), static_cast<std::streamsize>(state.size()));
    state.resize(static_cast<size_t>(std::cin.gcount()));
  }
  std::istringstream state_in(state);
  std::istream& in = rest.empty() ? static_cast<std::istream&>(state_in) : std::cin;
  const std::string stage = !rest.empty() ? rest[0] : container::StateIsStopped(state) ? "poststop" : "prestart";
  if (rest.size() > 1 || (stage != "prestart" && stage != "poststop" && stage != "reclaim" && stage != "slice")) {
    Fail(InvalidArgument("unexpected argument '" + rest.back() + "' (one of prestart, poststop, reclaim, slice)"));
    return 2;
  }
  const bool poststop = stage == "poststop";
  if (o.shared_dir_bytes < (1u << 20)) {
    Fail(InvalidArgument("--shared-dir-size: at least 1Mi (the region needs ~290 KiB)"));
    return 2;
  }
  // Every run reclaims the slices of containers that are gone (runtimes that run no
  // poststop hook, containers killed with their runtime).
  const int reclaimed = container::ReclaimContainerSlices(container::ContainersDir(o));
  if (stage == "reclaim") {
    std::cout << "reclaimed " << reclaimed << " slice directories of containers that are gone\n";
    return 0;
  }
  if (poststop) {
    auto id = container::ReadHookContainerId(in);
    if (!id.ok()) return Fail(id.status());
    container::RemoveStoppedContainerSlice(container::ContainersDir(o), *id);
    return 0;
  }
  auto c = container::ReadHookContainer(in);
  if (!c.ok()) return Fail(c.status());
  o.prepare_cards = node::PrepareCardFiles;
  o.take_card_entries = [](const std::string& cards_dir, const std::string& owner, model::Allocation* a) {
    return node::TakeCardEntries(cards_dir, owner, static_cast<int64_t>(time(nullptr)), a);
  };
  auto node_gpus = [&]() -> StatusOr<std::vector<model::Gpu>> {
    GS_ASSIGN_OR_RETURN(NodeGpus node, OpenNodeGpus(o.driver_root));
    return std::move(node.gpus);
  };
  if (stage == "slice") {
    Status s = container::GiveSlice(*c, o, node_gpus);
    if (!s.ok()) Log(log_path, c->id, s.message());
    return s.ok() ? 0 : 1;
  }
  auto decision = container::DecideDevices(c->config, policy);
  if (!decision.ok()) {
    Log(log_path, c->id, decision.status().message());
    return 1;
  }
  if (!decision->ignored.empty()) Log(log_path, c->id, decision->ignored);
  if (decision->devices.kind == model::Visibility::kVoid) return 0;  // not a GPU container, or refused: untouched
  Status s = container::GiveDevices(*c, decision->devices, o, node_gpus);
  if (!s.ok()) Log(log_path, c->id, s.message());
  return s.ok() ? 0 : 1;
}

}  // namespace gs::cli
