#include "src/common/proc_identity.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "src/common/file.h"
#include "tests/temp_dir.h"
#include "tests/wait_until.h"

namespace gs {
namespace {

TEST(ProcIdentity, SelfIsAliveWithItsStartTime) {
  uint64_t start = ProcessStartTime(getpid());
  ASSERT_NE(start, 0u);
  EXPECT_TRUE(ProcessIsAlive(getpid(), start));
  EXPECT_FALSE(ProcessIsAlive(getpid(), start + 1));  // same pid, another life: a reused PID
}

TEST(ProcIdentity, DeadChildIsNotAlive) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  uint64_t start = ProcessStartTime(child);
  int status;
  waitpid(child, &status, 0);
  EXPECT_FALSE(ProcessIsAlive(child, start));
  EXPECT_EQ(ProcessStartTime(child), 0u);
}

// A zombie (exited, its parent not waited yet) has let go of everything: not alive.
TEST(ProcIdentity, AnExitedChildNotYetWaitedForIsNotAlive) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  uint64_t start = ProcessStartTime(child);
  ASSERT_NE(start, 0u);
  siginfo_t info{};
  // Waits for the exit without reaping it (WNOWAIT): the child stays a zombie.
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_NE(ProcessStartTime(child), 0u);  // still in /proc
  EXPECT_FALSE(ProcessIsAlive(child, start));
  int status;
  waitpid(child, &status, 0);
}

// A process whose main thread exited (pthread_exit) while another thread runs on shows the
// zombie state in /proc/<pid>/stat: it is alive all the same.
TEST(ProcIdentity, AProcessWhoseMainThreadExitedIsAliveWhileAnotherRuns) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    pthread_t t;
    pthread_create(
        &t, nullptr,
        [](void* fd) -> void* {
          // Until the leader has exited: its task's state is Z ("x"; "t": not within 10 s).
          const std::string leader =
              "/proc/" + std::to_string(getpid()) + "/task/" + std::to_string(getpid()) + "/stat";
          const char* said = "t";
          for (int k = 0; k < 10000 && *said == 't'; ++k) {
            auto stat = ReadFile(leader);
            const size_t paren = stat.ok() ? stat->rfind(')') : std::string::npos;
            if (paren != std::string::npos && stat->compare(paren, 3, ") Z") == 0)
              said = "x";
            else
              usleep(1000);
          }
          (void)!write(static_cast<int>(reinterpret_cast<intptr_t>(fd)), said, 1);
          sleep(30);
          return nullptr;
        },
        reinterpret_cast<void*>(static_cast<intptr_t>(ready[1])));
    syscall(SYS_exit, 0);  // this thread only, as pthread_exit ends it, without unwinding
  }
  close(ready[1]);
  uint64_t start = ProcessStartTime(child);
  char b;
  ASSERT_EQ(read(ready[0], &b, 1), 1);
  close(ready[0]);
  EXPECT_EQ(b, 'x') << "the leader never showed as exited";
  EXPECT_TRUE(ProcessIsAlive(child, start));
  kill(child, SIGKILL);
  int status;
  waitpid(child, &status, 0);
}

TEST(ProcIdentity, CommandNamesWithSpacesAndParens) {
  // /proc/PID/stat's name field can hold ") (": the parser must use the last ')'. The name
  // is that of the file exec'd (not argv[0]): a link to sleep named so.
  testing::TempDir dir("gs-proc-identity");
  const std::string name = "we ird) (x", odd = dir.path() + "/" + name;
  ASSERT_EQ(symlink("/bin/sleep", odd.c_str()), 0) << strerror(errno);
  pid_t child = fork();
  if (child == 0) {
    execl(odd.c_str(), name.c_str(), "5", static_cast<char*>(nullptr));
    _exit(1);
  }
  // Once the child has exec'd: until then its name is this test's.
  EXPECT_TRUE(testing::WaitUntil([&] {
    std::ifstream in("/proc/" + std::to_string(child) + "/comm");
    std::string comm;
    return std::getline(in, comm) && comm == name;
  })) << "the child never took its name";
  EXPECT_GT(ProcessStartTime(child), ProcessStartTime(1));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

// Where /proc is this namespace's, the process is what getpid() and its own namespace say.
// (Under a /proc of an ancestor namespace: HostilePidNamespace in tests/hostile_program_test.cc.)
TEST(ProcView, WithItsOwnNamespacesProcAProcessIsItsGetpid) {
  ProcView me;
  ASSERT_TRUE(OwnProcView(&me));
  EXPECT_EQ(me.pid, getpid());
  EXPECT_EQ(me.start_time, ProcessStartTime(getpid()));
  EXPECT_EQ(me.pid_namespace, OwnPidNamespace());
  EXPECT_NE(me.pid_namespace, kUnknownPidNamespace);
  EXPECT_EQ(ProcPidNamespace(), OwnPidNamespace());
}

}  // namespace
}  // namespace gs
