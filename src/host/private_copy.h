// The primitives of reading what a container wrote as a private copy (src/host): read
// exactly n bytes with pread, take a field out of the copied bytes by its offset in the
// layout (the copy is bytes, never an object: no atomics or mutex of a container's making
// are touched as objects), and read a /proc text file to its end. Internal to src/host.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

namespace gs::host::internal {

template <typename T>
T Field(const unsigned char* copy, size_t offset) {
  T v;
  memcpy(&v, copy + offset, sizeof(T));
  return v;
}

// Reads exactly size bytes at offset; false when the file is shorter (it shrank) or on error.
inline bool PreadAll(int fd, void* buf, size_t size, off_t offset) {
  auto* p = static_cast<unsigned char*>(buf);
  for (size_t done = 0; done < size;) {
    ssize_t n = pread(fd, p + done, size - done, offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Reads fd to its end (/proc files report size 0), keeping at most about `cap` bytes: a
// process with millions of mounts cannot make the reader hold them all. False on error.
inline bool ReadToEnd(int fd, size_t cap, std::string* out) {
  out->clear();
  char buf[16384];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > cap) return true;
  }
}

}  // namespace gs::host::internal
