#include "src/common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gs {
namespace {

Status Failed(const std::string& path, int err) {
  std::string m = path + ": " + strerror(err);
  return err == ENOENT || err == ENOTDIR ? NotFound(std::move(m)) : FailedPrecondition(std::move(m));
}

}  // namespace

StatusOr<std::string> ReadFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Failed(path, errno);
  struct stat st;
  const size_t size = fstat(fd, &st) == 0 && st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0;
  StatusOr<std::string> text = ReadToEnd(fd, path, size);
  close(fd);
  return text;
}

StatusOr<std::string> ReadToEnd(int fd, const std::string& path, size_t size_hint) {
  // One byte more than the hint, so that the read which finds the end needs no growth;
  // /proc files report size 0 (4 KiB then) and a file may grow while it is read.
  std::string text(size_hint != 0 ? size_hint + 1 : 4096, '\0');
  size_t got = 0;
  for (;;) {
    if (got == text.size()) text.resize(text.size() * 2);
    ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Failed(path, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

}  // namespace gs
