#include "src/host/proc_namespaces.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "src/common/proc_identity.h"
#include "tests/wait_until.h"

namespace gs::host {
namespace {

using gs::testing::WaitUntil;

// Reads one line a child wrote to the pipe (its news), or "" when it died first.
std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

void Tell(int fd, const std::string& s) {
  std::string line = s + "\n";
  (void)!write(fd, line.data(), line.size());
}

// A process in a mount namespace of its own with a tmpfs at <dir>/region, chrooted into
// <dir>/elsewhere, as a container's process that chroots away from its region directory.
class ChrootedChild {
 public:
  explicit ChrootedChild(const std::string& dir) {
    std::filesystem::create_directories(dir + "/region");
    std::filesystem::create_directories(dir + "/elsewhere");
    int p[2];
    if (pipe(p) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(p[0]);
      bool ok = unshare(CLONE_NEWNS) == 0 && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
                mount("gs-test-region", (dir + "/region").c_str(), "tmpfs", 0, "size=64k") == 0 &&
                chroot((dir + "/elsewhere").c_str()) == 0 && chdir("/") == 0;
      Tell(p[1], ok ? "ready" : "failed");
      pause();
      _exit(0);
    }
    close(p[1]);
    ready_ = ReadLine(p[0]) == "ready";
    close(p[0]);
  }
  ~ChrootedChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  bool ready() const { return ready_; }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

TEST(ReadNamespaceMounts, AChrootedProcessHidesTheMountFromItsOwnTableButNotFromItsNamespaces) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (a mount namespace and a tmpfs)";
  std::string dir = std::filesystem::temp_directory_path() / ("gs-ns-test-" + std::to_string(getpid()));
  {
    ChrootedChild child(dir);
    ASSERT_TRUE(child.ready());
    auto own = ReadProcessMounts(child.pid());
    ASSERT_TRUE(own.ok()) << own.status().message();
    EXPECT_FALSE(own->same_namespace_as_reader);
    EXPECT_TRUE(DevicesMountedAt(own->entries, dir + "/region").empty());  // chroot hides it
    auto whole = ReadNamespaceMounts(child.pid(), own->start_time, own->mount_namespace);
    ASSERT_TRUE(whole.ok()) << whole.status().message();
    auto at = std::find_if(whole->begin(), whole->end(),
                           [&](const MountEntry& e) { return e.mount_point == dir + "/region"; });
    ASSERT_NE(at, whole->end());
    EXPECT_EQ(at->fs_type, "tmpfs");
    // Another process's start time or namespace: nothing is read.
    EXPECT_FALSE(ReadNamespaceMounts(child.pid(), own->start_time + 1, own->mount_namespace).ok());
    auto mine = ReadProcessMounts(getpid());
    ASSERT_TRUE(mine.ok());
    EXPECT_FALSE(ReadNamespaceMounts(child.pid(), own->start_time, mine->mount_namespace).ok());
    // The reader itself is where it was.
    auto after = ReadProcessMounts(getpid());
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->mount_namespace, mine->mount_namespace);
    EXPECT_TRUE(DevicesMountedAt(after->entries, dir + "/region").empty());
  }
  std::filesystem::remove_all(dir);
}

// The host pid of the child of `parent` (by PPid), 0 if none yet.
pid_t ChildOf(pid_t parent) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(e.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("PPid:", 0) == 0 && std::stoi(line.substr(5)) == parent) return std::stoi(name);
  }
  return 0;
}

TEST(ReadPidNamespaces, NamesANestedNamespaceAndEachParentBelowTheReaders) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (PID namespaces)";
  auto self = ReadPidNamespaces(getpid());
  ASSERT_TRUE(self.ok()) << self.status().message();
  EXPECT_TRUE(self->chain.empty());
  // helper (here) -> outer: pid 1 of a namespace -> inner: pid 1 of a namespace inside it.
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t helper = fork();
  if (helper == 0) {
    close(p[0]);
    if (unshare(CLONE_NEWPID) != 0) _exit(1);
    pid_t outer = fork();
    if (outer == 0) {
      if (unshare(CLONE_NEWPID) != 0) _exit(1);
      if (fork() == 0) pause();
      pause();
    }
    Tell(p[1], std::to_string(outer));
    pause();
    _exit(0);
  }
  close(p[1]);
  pid_t outer = static_cast<pid_t>(std::strtol(ReadLine(p[0]).c_str(), nullptr, 10));
  close(p[0]);
  ASSERT_GT(outer, 0);
  pid_t inner = 0;
  ASSERT_TRUE(WaitUntil([&] { return (inner = ChildOf(outer)) > 0; })) << "no child of " << outer;
  auto o = ReadPidNamespaces(outer), in = ReadPidNamespaces(inner);
  ASSERT_TRUE(o.ok()) << o.status().message();
  ASSERT_TRUE(in.ok()) << in.status().message();
  EXPECT_EQ(o->ns_pid, 1u);
  EXPECT_EQ(in->ns_pid, 1u);
  EXPECT_EQ(o->start_time, ProcessStartTime(outer));
  ASSERT_EQ(o->chain.size(), 1u);
  ASSERT_EQ(in->chain.size(), 2u);
  EXPECT_NE(in->chain[0], o->chain[0]);
  EXPECT_EQ(in->chain[1], o->chain[0]);  // the inner namespace's parent is the outer one
  EXPECT_EQ(PidInOwnNamespace(inner), 1u);
  auto index = IndexPidNamespaces();
  auto& outer_ns = index[o->chain[0]];
  EXPECT_NE(std::find(outer_ns.begin(), outer_ns.end(), static_cast<uint32_t>(outer)), outer_ns.end());
  EXPECT_EQ(std::find(outer_ns.begin(), outer_ns.end(), static_cast<uint32_t>(inner)), outer_ns.end());
  EXPECT_EQ(index[in->chain[0]], std::vector<uint32_t>{static_cast<uint32_t>(inner)});
  kill(outer, SIGKILL);  // pid 1 of its namespace: the inner one goes with it
  kill(helper, SIGKILL);
  waitpid(helper, nullptr, 0);
  EXPECT_FALSE(ReadPidNamespaces(0x3fffffff).ok());
}

}  // namespace
}  // namespace gs::host
