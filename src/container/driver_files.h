// The driver's files a container needs, found in a driver root by capability
// (NVIDIA_DRIVER_CAPABILITIES: compute, utility, ...; "all" for every one gpuslice
// knows), and the enforcer's installation for containers. Used by the CDI generator,
// the OCI hook and the node agent. Reads the filesystem; no other side effects except
// InstallEnforcer, which writes under the state directory.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "src/common/status.h"

namespace gs::container {

struct HostFile {
  std::string host_path;       // resolved, regular file
  std::string container_path;  // where it appears in the container (the host's path)
  bool library = false;        // a shared library (else an executable)
};

// Parses NVIDIA_DRIVER_CAPABILITIES ("" -> utility,compute). Unknown names are an error.
StatusOr<std::set<std::string>> ParseCapabilities(const std::string& text);

// Libraries (and for utility, binaries) of the capabilities, as they are in driver_root.
std::vector<HostFile> FindDriverFiles(const std::string& driver_root, const std::set<std::string>& caps);

// A simulated node's state file when driver_root is one (gpuslice sim up), else "".
std::string SimulatorState(const std::string& driver_root);
inline constexpr const char* kSimStateContainerPath = "/var/run/gpuslice-sim/state";
// The node daemon's socket beside it (src/sim/registration.h): processes in the container
// register there and are known to the node by their host pids.
inline constexpr const char* kSimSocketContainerPath = "/var/run/gpuslice-sim/driver.sock";

struct EnforcerInstall {
  std::string host_path;       // <state>/lib/<version>-<hash>/libgpuslice.so
  std::string container_path;  // /usr/lib/gpuslice/<version>-<hash>/libgpuslice.so
  std::string preload_file;    // <state>/lib/<version>-<hash>/ld.so.preload (names container_path)
};

// Copies libgpuslice.so into a directory named by version and content hash unless it is
// there already: an upgrade never replaces a library a running process has mapped.
StatusOr<EnforcerInstall> InstallEnforcer(const std::string& source, const std::string& state_dir);

}  // namespace gs::container
