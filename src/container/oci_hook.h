// The OCI prestart / createRuntime hook's work, for `gpuslice hook` (any OCI runtime;
// src/cli/hook_command.cc). ReadHookContainer reads the container state (the hook's
// stdin) and the bundle's config.json; DecideDevices (device_request.h) says which GPUs
// the container may have: the device plugin's marker mounts, or NVIDIA_VISIBLE_DEVICES
// only where that is trusted (privileged, or --accept-env-when-unprivileged; docker --gpus
// semantics). GiveDevices then enters the container's mount namespace to create the
// allocated device nodes and read-only bind mounts, and allows the devices in the devices
// cgroup. A container that did not ask for GPUs is left exactly as it was. Malformed input
// is an error, before anything changes. Nothing here prints: errors come back as Status.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/container/container_slice.h"
#include "src/container/oci_config.h"
#include "src/model/slices.h"
#include "src/model/visible_devices.h"

namespace gs::container {

struct HookContainer {
  int pid = 0;
  std::string id;  // for messages; may be empty
  ContainerConfig config;
};

// The most a container state on stdin may hold.
inline constexpr size_t kMaxState = 1 << 20;

// The container state on `state_in` (at most 1 MiB; "pid" and an absolute "bundle") and
// the bundle's config.json (at most 16 MiB). Errors name what is malformed.
StatusOr<HookContainer> ReadHookContainer(std::istream& state_in);

// Whether the state text says the container has stopped ("status": "stopped", as runtimes
// pass it to poststop hooks); false for anything else, malformed text included.
bool StateIsStopped(const std::string& state_text);

// The container's "id" from the state on `state_in` (poststop: the process is gone, and
// runtimes may leave out its pid).
StatusOr<std::string> ReadHookContainerId(std::istream& state_in);

struct HookOptions {
  std::string driver_root = "/";
  // Where the enforcer is installed, the node's cards directory (<state_dir>/cards, shared
  // with the node agent's containers) and the containers' slices (ContainersDir).
  std::string state_dir = "/var/lib/gpuslice";
  std::string enforcer;                                // libgpuslice.so to install (empty: none, and no slice)
  uint64_t shared_dir_bytes = kDefaultSharedDirBytes;  // each container's region tmpfs
  // Makes `dir` and one card file per GPU in it (node::PrepareCardFiles); empty: the
  // containers get no cards directory and do not take turns on a card.
  std::function<Status(const std::string& dir, const std::vector<model::Gpu>& gpus)> prepare_cards;
  // Hands the container whose slice directory is `owner` an entry on the card region of
  // each of its shared devices (node::TakeCardEntries); empty: its enforcers claim entries
  // from the card files themselves.
  std::function<Status(const std::string& cards_dir, const std::string& owner, model::Allocation* a)> take_card_entries;
};

// The best CUDA_TASK_PRIORITY a container gets through the hook, as through the node
// agent: its card's other tenants believe no better (docs/enforcer.md, "Threat model").
inline constexpr int kHookBestPriority = 1;

// Where the hook keeps the containers' slices (container_slice.h).
inline std::string ContainersDir(const HookOptions& o) {
  return o.state_dir + "/oci-containers";
}

// The node's GPUs; called only when the container gets some (not for "none").
using GpuLister = std::function<StatusOr<std::vector<model::Gpu>>()>;

// Gives the container the devices `visible` selects (not kVoid: DecideDevices left it
// alone then), with the driver files of its NVIDIA_DRIVER_CAPABILITIES and the enforcer.
// With the enforcer and at least one GPU, and unless the runtime already mounts a limits
// file (the node agent's slice), the container also gets its slice: a directory of
// container_slice.h whose limits come from its own environment
// (model::AllocationFromEnvironment, with the GPUs' UUIDs), mounted as model::SliceMounts
// says, and the node's cards directory. A limit that does not parse refuses the container
// (the message names the variable) before anything changes; a later failure removes the
// slice again. Forks a child to enter the mount namespace (setns needs a single-threaded
// process).
Status GiveDevices(const HookContainer& c, const model::VisibleDevices& visible, const HookOptions& o,
                   const GpuLister& node_gpus);

// The CDI route: the runtime already gave the container its device nodes, driver files
// and the enforcer from a CDI spec, whose createRuntime hook calls this. Makes the
// container's slice (as GiveDevices does) for the GPUs whose /dev/nvidia<N> nodes are in
// its config, unless it has none or something already mounts its limits file (the node
// agent's slice). A node the container got that is no GPU of this node is refused.
Status GiveSlice(const HookContainer& c, const HookOptions& o, const GpuLister& node_gpus);

}  // namespace gs::container
