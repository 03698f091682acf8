#include "src/node/host_pids.h"

#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "src/common/proc_identity.h"
#include "src/host/region_reader.h"

namespace gs::node {
namespace {

// (pid inside its innermost namespace, start time) -> host pid, for namespaced processes.
std::map<std::pair<uint32_t, uint64_t>, uint32_t> NamespacedProcesses() {
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long host = strtol(e->d_name, &end, 10);
    if (*end || host <= 0) continue;
    std::ifstream status(std::string("/proc/") + e->d_name + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("NSpid:", 0) != 0) continue;
      std::istringstream in(line.substr(6));
      std::vector<uint32_t> pids;
      for (uint32_t p; in >> p;) pids.push_back(p);
      if (pids.size() > 1) {
        uint64_t start = ProcessStartTime(static_cast<pid_t>(host));
        if (start) out[{pids.back(), start}] = static_cast<uint32_t>(host);
      }
      break;
    }
  }
  closedir(d);
  return out;
}

}  // namespace

int ResolveHostPids(const std::vector<std::string>& region_paths) {
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> procs;
  bool scanned = false;
  int updated = 0;
  for (const auto& path : region_paths) {
    auto r = host::ContainerRegion::Open(path);  // a private copy: missing, damaged or foreign files are skipped
    if (!r.ok()) continue;
    for (const auto& p : r->processes()) {
      if (!scanned) {
        procs = NamespacedProcesses();
        scanned = true;
      }
      auto it = procs.find({p.pid, p.start_time});
      if (it != procs.end() && p.host_pid != it->second && r->WriteHostPid(p.slot, p.pid, it->second).ok()) ++updated;
    }
  }
  return updated;
}

}  // namespace gs::node
