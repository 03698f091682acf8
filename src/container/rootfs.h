// Paths inside a container's root file system, resolved and created without ever leaving
// it or following a link the image planted (CVE-2024-0132, CVE-2025-23267 escaped that
// way). Every component is opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS) relative to its parent's fd; missing directories are created
// with mkdirat on that fd; a symlink anywhere on the way is refused with an error that
// names it. Mounts target the resulting fd (/proc/self/fd/N), never a path string.
#pragma once

#include <string>

#include "src/common/status.h"

namespace gs::container {

class RootFs {
 public:
  static StatusOr<RootFs> Open(const std::string& host_path);
  RootFs(RootFs&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  ~RootFs();

  // An O_PATH fd for `path` (absolute inside the container), creating what is missing:
  // directories, and for !dir an empty regular file. The caller closes the fd.
  StatusOr<int> Target(const std::string& path, bool dir);
  // A character device node at `path` (kept if one with the same numbers exists).
  Status CharDevice(const std::string& path, unsigned major, unsigned minor);

 private:
  explicit RootFs(int fd) : fd_(fd) {}
  StatusOr<int> Parent(const std::string& path, std::string* leaf);
  int fd_;
};

// Bind-mounts the file or directory open as source_fd onto target_fd.
Status BindMount(int source_fd, int target_fd, const std::string& what);
// Sets the flags of the mount open as mount_fd (an fd re-opened on the mount, not the
// one beneath it): nosuid, nodev, and read-only unless writable.
Status RestrictMount(int mount_fd, bool writable, const std::string& what);

}  // namespace gs::container
