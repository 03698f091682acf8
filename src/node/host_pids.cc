#include "src/node/host_pids.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <tuple>

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

// A namespaced process as a container's region knows it: its pid inside its innermost
// namespace, its start time and that namespace's inode.
struct Identity {
  uint32_t pid;
  uint64_t start_time;
  uint32_t pid_namespace;
  bool operator<(const Identity& o) const {
    return std::tie(pid, start_time, pid_namespace) < std::tie(o.pid, o.start_time, o.pid_namespace);
  }
};

// Every namespaced process on the node, by identity -> its host pid.
std::map<Identity, uint32_t> NamespacedProcesses() {
  std::map<Identity, uint32_t> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long host = strtol(e->d_name, &end, 10);
    if (*end || host <= 0) continue;
    std::vector<uint32_t> pids = NsPids(e->d_name);
    if (pids.size() > 1) {
      auto pid = static_cast<pid_t>(host);
      uint64_t start = ProcessStartTime(pid);
      if (start) out[{pids.back(), start, PidNamespaceOf(pid)}] = static_cast<uint32_t>(host);
    }
  }
  closedir(d);
  return out;
}

// The host pid of p: the process with its identity. A slot without a namespace (written by
// an enforcer older than the field) matches on pid and start time when one process has them.
uint32_t HostPidOf(const host::RegionProcess& p, const std::map<Identity, uint32_t>& procs) {
  if (p.pid_namespace != 0) {
    auto it = procs.find({p.pid, p.start_time, p.pid_namespace});
    return it == procs.end() ? 0 : it->second;
  }
  auto it = procs.lower_bound({p.pid, p.start_time, 0});
  if (it == procs.end() || it->first.pid != p.pid || it->first.start_time != p.start_time) return 0;
  auto next = std::next(it);
  bool unique = next == procs.end() || next->first.pid != p.pid || next->first.start_time != p.start_time;
  return unique ? it->second : 0;
}

}  // namespace

bool SeesHostPids() {
  constexpr ino_t kInitialPidNamespace = 0xEFFFFFFCU;  // PROC_PID_INIT_INO, include/linux/proc_ns.h
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 && st.st_ino == kInitialPidNamespace;
}

int ResolveHostPids(const std::vector<std::string>& region_paths) {
  std::map<Identity, uint32_t> procs;
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
      uint32_t host = HostPidOf(p, procs);
      if (host != 0 && p.host_pid != host && r->WriteHostPid(p.slot, p.pid, host).ok()) ++updated;
    }
  }
  return updated;
}

}  // namespace gs::node
