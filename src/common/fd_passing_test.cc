#include "src/common/fd_passing.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace gs {
namespace {

// A pipe's write end sent over a socket pair arrives as a descriptor of the same pipe,
// close-on-exec, with the message intact.
TEST(FdPassing, ADescriptorArrivesWithItsMessage) {
  int pair[2], pipe_fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  ASSERT_EQ(pipe(pipe_fds), 0);
  const char sent[4] = {'a', 'b', 'c', 'd'};
  ASSERT_TRUE(SendWithDescriptor(pair[0], sent, sizeof(sent), pipe_fds[1]));
  char got[4] = {};
  int fd = -1;
  ASSERT_TRUE(ReceiveWithDescriptor(pair[1], got, sizeof(got), &fd));
  EXPECT_EQ(memcmp(got, sent, sizeof(sent)), 0);
  ASSERT_GE(fd, 0);
  EXPECT_NE(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  ASSERT_EQ(write(fd, "x", 1), 1);
  char through = 0;
  ASSERT_EQ(read(pipe_fds[0], &through, 1), 1);
  EXPECT_EQ(through, 'x');
  for (int f : {fd, pipe_fds[0], pipe_fds[1], pair[0], pair[1]}) close(f);
}

// Without a descriptor the receiver gets -1; a message cut short by the peer's close is
// refused.
TEST(FdPassing, NoDescriptorOrAShortMessage) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  char one = 'q', got[2] = {};
  int fd = 7;
  ASSERT_TRUE(SendWithDescriptor(pair[0], &one, 1, -1));
  ASSERT_TRUE(ReceiveWithDescriptor(pair[1], got, 1, &fd));
  EXPECT_EQ(got[0], 'q');
  EXPECT_EQ(fd, -1);
  // Cut short with a descriptor attached: refused, and the descriptor is not left open
  // (the pipe's only write end is then the one sent, so the pipe reads EOF once it closes).
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  ASSERT_TRUE(SendWithDescriptor(pair[0], &one, 1, pipe_fds[1]));
  close(pipe_fds[1]);
  close(pair[0]);
  EXPECT_FALSE(ReceiveWithDescriptor(pair[1], got, sizeof(got), &fd));
  EXPECT_EQ(fd, -1);
  close(pair[1]);
  char end = 0;
  EXPECT_EQ(read(pipe_fds[0], &end, 1), 0) << "the descriptor of a refused message stayed open";
  close(pipe_fds[0]);
}

}  // namespace
}  // namespace gs
