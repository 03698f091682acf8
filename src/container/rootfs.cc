#include "src/container/rootfs.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <vector>

namespace gs::container {
namespace {

int OpenBeneath(int dirfd, const std::string& name, uint64_t flags) {
  open_how how{};
  how.flags = flags | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, dirfd, name.c_str(), &how, sizeof(how)));
}

// "/a/b" -> "a/b": openat2 resolves relative to the root's fd.
std::string Relative(const std::string& path) {
  size_t start = path.find_first_not_of('/');
  return start == std::string::npos ? "" : path.substr(start);
}

// Opens `path` (absolute inside the root) resolving links as if rootfd were "/": no
// component, link target or ".." can leave the root.
int OpenInRoot(int rootfd, const std::string& path, uint64_t flags) {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  return static_cast<int>(syscall(SYS_openat2, rootfd, Relative(path).c_str(), &how, sizeof(how)));
}

bool IsLink(int dirfd, const std::string& name) {
  struct stat st;
  return fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
}

std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream in(path);
  for (std::string p; std::getline(in, p, '/');)
    if (!p.empty() && p != ".") parts.push_back(p);
  return parts;
}

// `err` from opening `name` beneath dirfd. A symlink shows as ELOOP (O_NOFOLLOW) or, with
// O_DIRECTORY, as ENOTDIR: look at what is there to say which.
Status Refuse(const std::string& path, const std::string& at, int err, int dirfd, const std::string& name) {
  struct stat st;
  if (err == ENOTDIR && fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) err = ELOOP;
  if (err == ELOOP || err == EXDEV)
    return FailedPrecondition("refusing " + path + ": '" + at +
                              "' is a symbolic link in the container image that does not lead to a directory inside "
                              "it (it could point out of the container)");
  return Internal("cannot resolve " + path + " at '" + at + "': " + strerror(err));
}

}  // namespace

StatusOr<RootFs> RootFs::Open(const std::string& host_path) {
  int fd = open(host_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Internal("cannot open container root " + host_path + ": " + strerror(errno));
  return RootFs(fd);
}

RootFs::~RootFs() {
  if (fd_ >= 0) close(fd_);
}

StatusOr<int> RootFs::Parent(const std::string& path, std::string* leaf) {
  auto parts = Components(path);
  for (const auto& p : parts)
    if (p == "..") return InvalidArgument("refusing " + path + ": '..' in a container path");
  if (parts.empty()) return InvalidArgument("refusing an empty container path");
  *leaf = parts.back();
  int cur = dup(fd_);
  std::string at;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    at += "/" + parts[i];
    int next = OpenBeneath(cur, parts[i], O_PATH | O_DIRECTORY);
    if (next < 0 && errno == ENOENT) {
      if (mkdirat(cur, parts[i].c_str(), 0755) != 0 && errno != EEXIST) {
        int e = errno;
        close(cur);
        return Internal("cannot create " + at + " in the container: " + strerror(e));
      }
      next = OpenBeneath(cur, parts[i], O_PATH | O_DIRECTORY);
    }
    if (next < 0) {
      int e = errno;
      // A link to a directory inside the image (Debian's /var/run -> /run, a merged /usr's
      // /lib -> usr/lib) is followed the way the kernel resolves it within the root;
      // one whose target is not a directory in the image is refused.
      if (IsLink(cur, parts[i])) next = OpenInRoot(fd_, at, O_PATH | O_DIRECTORY);
      if (next < 0) {
        Status s = Refuse(path, at, e, cur, parts[i]);
        close(cur);
        return s;
      }
    }
    close(cur);
    cur = next;
  }
  return cur;
}

StatusOr<int> RootFs::Target(const std::string& path, bool dir) {
  std::string leaf;
  auto parent = Parent(path, &leaf);
  if (!parent.ok()) return parent.status();
  int pfd = *parent;
  int fd = OpenBeneath(pfd, leaf, O_PATH | (dir ? O_DIRECTORY : 0));
  if (fd < 0 && errno == ENOENT) {
    if (dir) {
      mkdirat(pfd, leaf.c_str(), 0755);
    } else {
      int f = openat(pfd, leaf.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (f >= 0) close(f);
    }
    fd = OpenBeneath(pfd, leaf, O_PATH | (dir ? O_DIRECTORY : 0));
  }
  int e = errno;
  if (fd < 0) {
    Status s = Refuse(path, path, e, pfd, leaf);
    close(pfd);
    return s;
  }
  close(pfd);
  struct stat st;
  fstat(fd, &st);
  // A file target: a regular file or a device, or a socket (a simulated node's driver
  // socket, once it is mounted there).
  if (!dir && !S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode) && !S_ISSOCK(st.st_mode)) {
    close(fd);
    return FailedPrecondition("refusing " + path + ": it exists in the image and is not a regular file");
  }
  return fd;
}

Status RootFs::CharDevice(const std::string& path, unsigned major, unsigned minor) {
  std::string leaf;
  auto parent = Parent(path, &leaf);
  if (!parent.ok()) return parent.status();
  int pfd = *parent;
  struct stat st;
  if (fstatat(pfd, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    close(pfd);
    if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(major, minor)) return Status::Ok();
    return FailedPrecondition("refusing " + path + ": something else is already there in the container");
  }
  int rc = mknodat(pfd, leaf.c_str(), S_IFCHR | 0666, makedev(major, minor));
  int e = errno;
  close(pfd);
  if (rc != 0) return Internal("cannot create device " + path + " in the container: " + strerror(e));
  return Status::Ok();
}

bool RootFs::HasRegularFile(const std::string& path) const {
  std::string relative = Relative(path);
  if (relative.empty()) return false;
  int fd = OpenBeneath(fd_, relative, O_PATH);
  if (fd < 0) return false;
  struct stat st;
  bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  close(fd);
  return regular;
}

Status BindMount(int source_fd, int target_fd, const std::string& what) {
  std::string src = "/proc/self/fd/" + std::to_string(source_fd), dst = "/proc/self/fd/" + std::to_string(target_fd);
  if (mount(src.c_str(), dst.c_str(), nullptr, MS_BIND, nullptr) != 0)
    return Internal("cannot bind-mount " + what + ": " + strerror(errno));
  return Status::Ok();
}

Status RestrictMount(int mount_fd, bool writable, const std::string& what, bool noexec) {
  std::string dst = "/proc/self/fd/" + std::to_string(mount_fd);
  unsigned long flags =
      MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (writable ? 0 : MS_RDONLY) | (noexec ? MS_NOEXEC : 0);
  if (mount(nullptr, dst.c_str(), nullptr, flags, nullptr) != 0)
    return Internal("cannot restrict the mount of " + what + ": " + strerror(errno));
  return Status::Ok();
}

}  // namespace gs::container
