#include "src/node/host_pids.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "src/common/proc_identity.h"
#include "src/host/region_reader.h"

namespace gs::node {
namespace {

// The pids of /proc/<pid>/status's NSpid line, outermost first; empty when unreadable.
std::vector<uint32_t> NsPids(const std::string& pid) {
  std::ifstream status("/proc/" + pid + "/status");
  std::vector<uint32_t> pids;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream in(line.substr(6));
    for (uint32_t p; in >> p;) pids.push_back(p);
    break;
  }
  return pids;
}

// (pid inside its innermost namespace, start time) -> host pid, for namespaced processes.
std::map<std::pair<uint32_t, uint64_t>, uint32_t> NamespacedProcesses() {
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long host = strtol(e->d_name, &end, 10);
    if (*end || host <= 0) continue;
    std::vector<uint32_t> pids = NsPids(e->d_name);
    if (pids.size() > 1) {
      uint64_t start = ProcessStartTime(static_cast<pid_t>(host));
      if (start) out[{pids.back(), start}] = static_cast<uint32_t>(host);
    }
  }
  closedir(d);
  return out;
}

}  // namespace

bool SeesHostPids() {
  constexpr ino_t kInitialPidNamespace = 0xEFFFFFFCU;  // PROC_PID_INIT_INO, include/linux/proc_ns.h
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 && st.st_ino == kInitialPidNamespace;
}

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
