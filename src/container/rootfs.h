// Paths inside a container's root file system, resolved and created without ever leaving
// it (CVE-2024-0132 and CVE-2025-23267 escaped through links the image planted). Each
// component is opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) relative to its
// parent's fd. A directory link is followed only as the kernel resolves it inside the root
// (RESOLVE_IN_ROOT), and only to a directory that exists there (Debian's /var/run -> /run);
// any other link, and a link as the last component, is refused with an error naming it.
// Missing directories are created with mkdirat on the parent's fd; mounts target the
// resulting fd (/proc/self/fd/N), never a path string.
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
  // Whether `path` is a regular file reached without any link; creates nothing.
  bool HasRegularFile(const std::string& path) const;

 private:
  explicit RootFs(int fd) : fd_(fd) {}
  StatusOr<int> Parent(const std::string& path, std::string* leaf);
  int fd_;
};

// Bind-mounts the file or directory open as source_fd onto target_fd.
Status BindMount(int source_fd, int target_fd, const std::string& what);
// Sets the flags of the mount open as mount_fd (an fd re-opened on the mount, not the
// one beneath it): nosuid, nodev, read-only unless writable, noexec if asked.
Status RestrictMount(int mount_fd, bool writable, const std::string& what, bool noexec = false);

}  // namespace gs::container
