#include "src/container/edits_plan.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>

namespace gs::container {

StatusOr<DeviceNodeEdit> DeviceNode(const std::string& driver_root, const std::string& name) {
  std::string dev = driver_root == "/" ? "/dev/" : driver_root + "/dev/";
  DeviceNodeEdit e{"/dev/" + name, dev + name};
  struct stat st;
  if (stat(e.host_path.c_str(), &st) != 0) return NotFound(e.host_path + ": " + strerror(errno));
  if (S_ISCHR(st.st_mode)) {
    e.major = major(st.st_rdev);
    e.minor = minor(st.st_rdev);
  } else {
    // A simulated node made without mknod rights: regular files stand in for devices.
    e.major = name.rfind("nvidia-uvm", 0) == 0 ? 510 : 195;
    e.minor = name == "nvidiactl"          ? 255
              : name == "nvidia-uvm-tools" ? 1
              : name == "nvidia-uvm"       ? 0
                                           : static_cast<unsigned>(atoi(name.c_str() + 6));
  }
  return e;
}

StatusOr<EditsPlan> PlanEdits(const PlanOptions& o, const std::vector<model::Gpu>& gpus) {
  EditsPlan p;
  for (const auto& g : gpus) {
    auto n = DeviceNode(o.driver_root, "nvidia" + std::to_string(g.minor));
    if (!n.ok()) return FailedPrecondition("GPU " + g.uuid + " has no device node: " + n.status().message());
    p.gpu_nodes.push_back(*n);
  }
  bool compute = o.capabilities.count("compute") > 0;
  for (const char* name : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}) {
    std::string n = name;
    // The toolkit's rules: uvm nodes only with compute libraries, modeset only with display.
    if (n.rfind("nvidia-uvm", 0) == 0 && !compute) continue;
    if (n == "nvidia-modeset" && !o.capabilities.count("display")) continue;
    auto e = DeviceNode(o.driver_root, n);
    if (e.ok()) p.control_nodes.push_back(*e);
  }
  for (const auto& f : FindDriverFiles(o.driver_root, o.capabilities))
    p.mounts.push_back({f.host_path, f.container_path, false, f.library});
  if (!o.enforcer.host_path.empty()) {
    p.mounts.push_back({o.enforcer.host_path, o.enforcer.container_path});
    p.mounts.push_back({o.enforcer.preload_file, "/etc/ld.so.preload"});
    // Processes of one container share accounting through a region in its own /tmp.
    p.env.push_back("CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/.gpuslice-region");
  }
  std::string sim = SimulatorState(o.driver_root);
  if (!sim.empty()) p.mounts.push_back({sim, kSimStateContainerPath, true});
  return p;
}

}  // namespace gs::container
