#include "src/container/edits_plan.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace gs::container {

Status FillDeviceNumbers(model::DeviceNode* node) {
  struct stat st;
  if (stat(node->host_path.c_str(), &st) != 0) return NotFound(node->host_path + ": " + strerror(errno));
  if (S_ISCHR(st.st_mode)) {
    node->major = major(st.st_rdev);
    node->minor = minor(st.st_rdev);
    return Status::Ok();
  }
  const std::string name = node->container_path.substr(node->container_path.rfind('/') + 1);
  node->major = name.rfind("nvidia-uvm", 0) == 0 ? 510 : model::kNvidiaMajor;
  node->minor = name == "nvidiactl"          ? 255
                : name == "nvidia-uvm-tools" ? 1
                : name == "nvidia-uvm"       ? 0
                                             : static_cast<unsigned>(strtoul(name.c_str() + 6, nullptr, 10));
  return Status::Ok();
}

std::vector<model::DeviceNode> ExtraDeviceNodes(const std::string& dev_root, const ExtraDevices& extras) {
  std::vector<std::string> names;  // relative to dev_root
  auto entries = [&](const std::string& dir, const std::string& prefix) {
    std::vector<std::string> found;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dev_root + (dir.empty() ? "" : "/" + dir), ec)) {
      std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) == 0 && !e.is_directory(ec)) found.push_back(dir.empty() ? name : dir + "/" + name);
    }
    std::sort(found.begin(), found.end());
    names.insert(names.end(), found.begin(), found.end());
  };
  if (extras.gdrcopy && access((dev_root + "/gdrdrv").c_str(), F_OK) == 0) names.push_back("gdrdrv");
  if (extras.gds) entries("", "nvidia-fs");
  if (extras.mofed) entries("infiniband", "");
  std::vector<model::DeviceNode> nodes;
  for (const auto& n : names) {
    model::DeviceNode node{"/dev/" + n, dev_root + "/" + n, "rw"};
    if (FillDeviceNumbers(&node).ok()) nodes.push_back(node);
  }
  return nodes;
}

StatusOr<model::ContainerEdits> PlanEdits(const PlanOptions& o, const std::vector<model::Gpu>& gpus) {
  model::ContainerEdits e;
  std::vector<unsigned> minors;
  for (const auto& g : gpus) minors.push_back(g.minor);
  auto nodes = model::DeviceNodes(minors, o.capabilities, model::DevRoot(o.driver_root));
  for (size_t i = 0; i < nodes.size(); ++i) {
    Status s = FillDeviceNumbers(&nodes[i]);
    if (i < gpus.size() && !s.ok())
      return FailedPrecondition("GPU " + gpus[i].uuid + " has no device node: " + s.message());
    if (s.ok()) e.devices.push_back(nodes[i]);  // a control node the node lacks is left out
  }
  for (auto& n : ExtraDeviceNodes(model::DevRoot(o.driver_root), o.extras)) e.devices.push_back(std::move(n));
  for (const auto& f : FindDriverFiles(o.driver_root, o.capabilities))
    e.mounts.push_back({f.host_path, f.container_path, true, f.library});
  if (!o.enforcer.host_path.empty()) {
    for (auto& m : model::EnforcerMounts(o.enforcer.host_path, o.enforcer.container_path, o.enforcer.preload_file))
      e.mounts.push_back(m);
    e.env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = kContainerRegion;
  }
  std::string sim = SimulatorState(o.driver_root);
  if (!sim.empty()) {
    e.mounts.push_back({sim, kSimStateContainerPath, false});
    std::string socket = sim.substr(0, sim.rfind('/')) + "/driver.sock";
    if (access(socket.c_str(), F_OK) == 0) e.mounts.push_back({socket, kSimSocketContainerPath, false});
    e.env["GPUSLICE_SIM_STATE"] = kSimStateContainerPath;
  }
  return e;
}

}  // namespace gs::container
