#include "src/host/proc_namespaces.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>

#include "src/common/proc_identity.h"
#include "src/host/private_copy.h"

namespace gs::host {
namespace {

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

bool IdOf(int fd, NamespaceId* id) {
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  *id = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  return true;
}

bool IdOfPath(const std::string& path, NamespaceId* id) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return false;
  *id = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  return true;
}

}  // namespace

StatusOr<std::vector<MountEntry>> ReadNamespaceMounts(pid_t pid, uint64_t start_time, const NamespaceId& expected) {
  const std::string dir = "/proc/" + std::to_string(pid);
  Fd proc(open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (proc.fd < 0) return Unavailable(std::string("/proc: ") + strerror(errno));
  // The descriptor holds the namespace: once it is the expected one and the process is still
  // the one that started at start_time, what is read through it is that process's namespace.
  Fd ns(open((dir + "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
  NamespaceId id;
  if (ns.fd < 0 || !IdOf(ns.fd, &id) || ProcessStartTime(pid) != start_time) return Unavailable(dir + ": gone");
  if (id != expected) return Unavailable(dir + ": in another mount namespace since");
  std::string text;
  int error = 0;
  const char* failed = nullptr;
  try {
    // setns(CLONE_NEWNS) needs a thread whose root and working directory no other thread
    // shares: this one, which does nothing else and ends here.
    std::thread reader([&] {
      if (unshare(CLONE_FS) != 0) {
        error = errno, failed = "unshare(CLONE_FS)";
        return;
      }
      if (setns(ns.fd, CLONE_NEWNS) != 0) {
        error = errno, failed = "setns";
        return;
      }
      // Entering made the namespace's root this thread's root: its own mountinfo now lists
      // the whole namespace. Opened through the host's /proc, not the namespace's paths.
      int fd = openat(proc.fd, "thread-self/mountinfo", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0 || !internal::ReadToEnd(fd, kMaxMountinfoBytes, &text)) error = errno, failed = "mountinfo";
      if (fd >= 0) close(fd);
    });
    reader.join();
  } catch (const std::system_error& e) {
    return Unavailable(std::string("no thread to read a mount namespace: ") + e.what());
  }
  if (failed != nullptr) {
    std::string why = dir + "/ns/mnt: " + failed + ": " + strerror(error);
    return error == EPERM ? FailedPrecondition(why) : Unavailable(why);
  }
  return ParseMountinfo(text);
}

uint32_t PidInOwnNamespace(pid_t pid) {
  Fd fd(open(("/proc/" + std::to_string(pid) + "/status").c_str(), O_RDONLY | O_CLOEXEC));
  std::string text;
  if (fd.fd < 0 || !internal::ReadToEnd(fd.fd, 1 << 16, &text)) return 0;
  size_t at = text.find("\nNSpid:");
  if (at == std::string::npos) return 0;
  std::string_view line(text);
  line = line.substr(at + 7);
  line = line.substr(0, line.find('\n'));
  // The last number of the line.
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
  size_t begin = line.find_last_of(" \t");
  std::string last(begin == std::string_view::npos ? line : line.substr(begin + 1));
  if (last.empty() || last.size() > 10) return 0;
  char* end = nullptr;
  unsigned long v = strtoul(last.c_str(), &end, 10);
  return *end == 0 && v <= UINT32_MAX ? static_cast<uint32_t>(v) : 0;
}

StatusOr<PidNamespaces> ReadPidNamespaces(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  PidNamespaces out;
  out.start_time = ProcessStartTime(pid);
  if (out.start_time == 0) return Unavailable(dir + ": gone");
  NamespaceId mine;
  if (!IdOfPath("/proc/self/ns/pid", &mine)) return Unavailable(std::string("/proc/self/ns/pid: ") + strerror(errno));
  int fd = open((dir + "/ns/pid").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Unavailable(dir + "/ns/pid: " + strerror(errno));
  // PID namespaces nest at most 32 deep (MAX_PID_NS_LEVEL).
  for (int depth = 0; depth <= 33; ++depth) {
    NamespaceId id;
    if (!IdOf(fd, &id)) break;
    if (id == mine) break;
    out.chain.push_back(id);
    int parent = ioctl(fd, NS_GET_PARENT);
    if (parent < 0) break;  // EPERM: the parent is outside the reader's namespace (the top)
    close(fd);
    fd = parent;
  }
  close(fd);
  out.ns_pid = PidInOwnNamespace(pid);
  if (out.ns_pid == 0) return Unavailable(dir + "/status: no NSpid");
  if (ProcessStartTime(pid) != out.start_time) return Unavailable(dir + ": gone");
  return out;
}

std::map<NamespaceId, std::vector<uint32_t>> IndexPidNamespaces() {
  std::map<NamespaceId, std::vector<uint32_t>> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    NamespaceId id;
    if (IdOfPath(std::string("/proc/") + e->d_name + "/ns/pid", &id)) out[id].push_back(static_cast<uint32_t>(pid));
  }
  closedir(d);
  return out;
}

}  // namespace gs::host
