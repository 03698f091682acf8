#include "src/common/proc_identity.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

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

TEST(ProcIdentity, CommandNamesWithSpacesAndParens) {
  // /proc/PID/stat's name field can hold ") (": the parser must use the last ')'.
  pid_t child = fork();
  if (child == 0) {
    execl("/bin/sh", "sh", "-c", "exec -a 'we ird) (x' sleep 5", static_cast<char*>(nullptr));
    _exit(1);
  }
  usleep(100000);
  EXPECT_GT(ProcessStartTime(child), ProcessStartTime(1));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

}  // namespace
}  // namespace gs
