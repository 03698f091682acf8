#include "src/node/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace gs::node {
namespace {

// "<what> <path>: <errno text>", built by appending (GCC 12 reports a false -Wrestrict
// overlap for a literal + std::string chain here).
Status ErrnoStatus(const char* what, const std::string& path) {
  std::string m = what;
  m += ' ';
  m += path;
  m += ": ";
  m += strerror(errno);
  return Internal(std::move(m));
}

bool WriteFully(int fd, const std::string& text) {
  for (size_t off = 0; off < text.size();) {
    ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = ENOSPC;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Status WriteFileDurably(const std::string& path, const std::string& text, mode_t mode) {
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoStatus("cannot write", tmp);
  bool written = WriteFully(fd, text) && fsync(fd) == 0;
  int e = errno;
  if (close(fd) != 0 && written) {
    written = false;
    e = errno;
  }
  errno = e;
  if (!written) {
    Status s = ErrnoStatus("cannot write", tmp);
    unlink(tmp.c_str());
    return s;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = ErrnoStatus("cannot replace", path);
    unlink(tmp.c_str());
    return s;
  }
  // The rename is durable once the directory holding it is synced.
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? std::string(".") : std::string(path, 0, slash ? slash : 1);
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return ErrnoStatus("cannot open", dir);
  bool synced = fsync(dfd) == 0;
  e = errno;
  close(dfd);
  errno = e;
  return synced ? Status::Ok() : ErrnoStatus("cannot sync", dir);
}

}  // namespace gs::node
