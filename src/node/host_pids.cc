#include "src/node/host_pids.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <tuple>

#include "src/common/proc_identity.h"
#include "src/host/region_reader.h"

namespace gs::node {
namespace {

// A process's /proc/<pid>/status: the pids of its NSpid line, outermost first (empty when
// unreadable), and its parent's pid.
struct Status {
  std::vector<uint32_t> pids;
  uint32_t parent = 0;
};
Status ReadStatus(pid_t pid) {
  pid_t pids[kMaxPidNamespaceLevels], parent = 0;
  const int levels = std::min(ProcessNsPids(pid, pids, kMaxPidNamespaceLevels, &parent), kMaxPidNamespaceLevels);
  Status out;
  out.parent = static_cast<uint32_t>(parent);
  for (int i = 0; i < levels; ++i) out.pids.push_back(static_cast<uint32_t>(pids[i]));
  return out;
}

// A namespaced process as a container's region knows it: its pid in a PID namespace, its
// start time and that namespace's inode. The namespace is the innermost one, or an outer one
// below the host's for a process that unshared a namespace and kept its container's /proc
// (the enforcer names a process as its /proc shows it: OwnProcView).
struct Identity {
  uint32_t pid;
  uint64_t start_time;
  uint32_t pid_namespace;
  bool operator<(const Identity& o) const {
    return std::tie(pid, start_time, pid_namespace) < std::tie(o.pid, o.start_time, o.pid_namespace);
  }
};

// Every namespaced process on the node, by each identity it may have -> its host pid.
std::map<Identity, uint32_t> NamespacedProcesses() {
  struct Seen {
    Status status;
    uint64_t start = 0;
    uint32_t pid_namespace = 0;
  };
  std::map<uint32_t, Seen> seen;  // by host pid
  DIR* d = opendir("/proc");
  if (d == nullptr) return {};
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long host = strtol(e->d_name, &end, 10);
    if (*end || host <= 0) continue;
    auto pid = static_cast<pid_t>(host);
    Seen s{ReadStatus(pid), 0, 0};
    if (s.status.pids.size() < 2) continue;  // the host's own: no identity to resolve
    s.start = ProcessStartTime(pid);
    s.pid_namespace = PidNamespaceOf(pid);
    if (s.start) seen[static_cast<uint32_t>(host)] = std::move(s);
  }
  closedir(d);
  std::map<Identity, uint32_t> out;
  for (const auto& [host, s] : seen) {
    const size_t levels = s.status.pids.size();
    out[{s.status.pids.back(), s.start, s.pid_namespace}] = host;
    // An outer level's namespace is that of the nearest ancestor living in it.
    uint32_t up = s.status.parent;
    for (size_t level = levels - 2; level >= 1; --level) {
      auto a = seen.find(up);
      // Bounded: parents read at different moments may loop through a reused pid.
      for (int hops = 0; hops < 64 && a != seen.end() && a->second.status.pids.size() > level + 1; ++hops)
        a = seen.find(a->second.status.parent);
      if (a == seen.end() || a->second.status.pids.size() != level + 1) break;
      out[{s.status.pids[level], s.start, a->second.pid_namespace}] = host;
      up = a->first;
    }
  }
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
