#include "src/node/host_pids.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "src/common/proc_identity.h"
#include "src/region/region.h"

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
    if (access(path.c_str(), F_OK) != 0) continue;
    region::OpenError err;
    char msg[256];
    region::Region* r = region::OpenRegion(path.c_str(), &err, msg, sizeof(msg));
    if (r == nullptr) continue;
    for (auto& slot : r->procs) {
      uint32_t pid = slot.pid.load();
      if (pid == 0) continue;
      if (!scanned) {
        procs = NamespacedProcesses();
        scanned = true;
      }
      auto it = procs.find({pid, slot.start_time});
      if (it != procs.end() && slot.host_pid.load() != it->second) {
        slot.host_pid.store(it->second);
        ++updated;
      }
    }
    region::CloseRegion(r);
  }
  return updated;
}

}  // namespace gs::node
