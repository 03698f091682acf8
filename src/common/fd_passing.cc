#include "src/common/fd_passing.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gs {

bool SendWithDescriptor(int sock, const void* bytes, size_t size, int fd, bool dont_wait) {
  iovec iov{const_cast<void*>(bytes), size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ssize_t sent;
  do sent = sendmsg(sock, &msg, MSG_NOSIGNAL | (dont_wait ? MSG_DONTWAIT : 0));
  while (sent < 0 && errno == EINTR);
  return sent == static_cast<ssize_t>(size);
}

bool ReceiveWithDescriptor(int sock, void* bytes, size_t size, int* fd) {
  *fd = -1;
  iovec iov{bytes, size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got;
  do got = recvmsg(sock, &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC);
  while (got < 0 && errno == EINTR);
  // Room for one descriptor: the kernel installs none that does not fit.
  cmsghdr* c = got > 0 ? CMSG_FIRSTHDR(&msg) : nullptr;
  if (c != nullptr && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
    memcpy(fd, CMSG_DATA(c), sizeof(int));
  if (got == static_cast<ssize_t>(size)) return true;
  if (*fd >= 0) close(*fd);
  *fd = -1;
  return false;
}

}  // namespace gs
