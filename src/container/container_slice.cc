#include "src/container/container_slice.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <vector>

#include "src/common/proc_identity.h"

namespace gs::container {
namespace {

constexpr time_t kOwnerlessGraceSeconds = 60;

Status Errno(const std::string& what, const std::string& path) {
  return Internal(what + " " + path + ": " + strerror(errno));
}

// Writes a new file (never an existing one, never through a link).
Status WriteNewFile(const std::string& path, const std::string& text, mode_t mode) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return Errno("cannot create", path);
  bool ok = fchmod(fd, mode) == 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int e = errno;
  close(fd);
  errno = e;
  return ok ? Status::Ok() : Errno("cannot write", path);
}

enum class Owner { kAlive, kGone, kUnknown };

Owner OwnerOf(const std::string& dir) {
  int fd = open((dir + "/owner").c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Owner::kUnknown;
  char buf[64] = {};
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return Owner::kUnknown;
  // "<pid> <start time>", as ClaimOwner writes it.
  char* end = nullptr;
  errno = 0;
  long long pid = strtoll(buf, &end, 10);
  if (end == buf || *end != ' ' || errno != 0 || pid <= 0 || pid > INT32_MAX) return Owner::kUnknown;
  const char* at = end + 1;
  unsigned long long start = strtoull(at, &end, 10);
  if (end == at || errno != 0) return Owner::kUnknown;
  return ProcessIsAlive(static_cast<pid_t>(pid), start) ? Owner::kAlive : Owner::kGone;
}

// The containers directory, made if missing: a real directory of root's, never a link.
Status PrepareContainersDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(dir).parent_path(), ec);
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Errno("cannot create", dir);
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) return Errno("cannot inspect", dir);
  if (!S_ISDIR(st.st_mode)) return FailedPrecondition(dir + " is not a directory");
  return Status::Ok();
}

}  // namespace

bool UsableContainerId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  for (char ch : id)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' ||
          ch == '+' || ch == '-'))
      return false;
  return true;
}

void RemoveContainerSlice(const std::string& dir) {
  // EINVAL (not a mount point): the mount failed or was never made.
  umount2((dir + "/shared").c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);  // never follows a link
}

StatusOr<std::string> MakeContainerSlice(const std::string& containers_dir, const std::string& id, pid_t pid,
                                         const LimitsTextFor& limits_text, uint64_t shared_bytes) {
  if (!UsableContainerId(id))
    return InvalidArgument("the container id \"" + id.substr(0, 80) +
                           "\" cannot name its slice's directory (1-128 of A-Z a-z 0-9 _ . + -)");
  GS_RETURN_IF_ERROR(PrepareContainersDir(containers_dir));
  const std::string dir = containers_dir + "/" + id;
  if (mkdir(dir.c_str(), 0755) != 0) {
    if (errno != EEXIST) return Errno("cannot create", dir);
    if (OwnerOf(dir) == Owner::kAlive)
      return FailedPrecondition("a running container already has the slice directory " + dir);
    RemoveContainerSlice(dir);  // an earlier container of this id, gone
    if (mkdir(dir.c_str(), 0755) != 0) return Errno("cannot create", dir);
  }
  auto fail = [&](Status s) -> StatusOr<std::string> {
    RemoveContainerSlice(dir);
    return s;
  };
  chmod(dir.c_str(), 0755);  // whatever the umask
  uint64_t start = ProcessStartTime(pid);
  if (start == 0) return fail(FailedPrecondition("the container's process " + std::to_string(pid) + " is gone"));
  if (Status s = WriteNewFile(dir + "/owner", std::to_string(pid) + " " + std::to_string(start) + "\n", 0644); !s.ok())
    return fail(s);
  StatusOr<std::string> limits = limits_text(dir);
  if (!limits.ok()) return fail(limits.status());
  if (Status s = WriteNewFile(dir + "/limits", *limits, 0644); !s.ok()) return fail(s);
  const std::string shared = dir + "/shared";
  if (mkdir(shared.c_str(), 0777) != 0) return fail(Errno("cannot create", shared));
  chmod(shared.c_str(), 0777);  // the container's first process, any user, creates the region
  std::string options =
      "size=" + std::to_string(shared_bytes) + ",nr_inodes=" + std::to_string(kSharedDirInodes) + ",mode=0777";
  if (mount("gpuslice-shared", shared.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.c_str()) != 0)
    return fail(FailedPrecondition("cannot mount a " + std::to_string(shared_bytes) + "-byte tmpfs at " + shared +
                                   ": " + strerror(errno) + " (the hook runs as root with CAP_SYS_ADMIN)"));
  return dir;
}

void RemoveStoppedContainerSlice(const std::string& containers_dir, const std::string& id) {
  if (!UsableContainerId(id)) return;
  const std::string dir = containers_dir + "/" + id;
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
  if (OwnerOf(dir) != Owner::kAlive) RemoveContainerSlice(dir);
}

int ReclaimContainerSlices(const std::string& containers_dir) {
  DIR* d = opendir(containers_dir.c_str());
  if (d == nullptr) return 0;
  std::vector<std::string> gone;
  const time_t now = time(nullptr);
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string dir = containers_dir + "/" + name;
    struct stat st;
    if (lstat(dir.c_str(), &st) != 0) continue;
    if (!S_ISDIR(st.st_mode)) {
      gone.push_back(dir);  // nothing the hook makes
      continue;
    }
    Owner owner = OwnerOf(dir);
    if (owner == Owner::kGone || (owner == Owner::kUnknown && now - st.st_mtime > kOwnerlessGraceSeconds))
      gone.push_back(dir);
  }
  closedir(d);
  for (const auto& dir : gone) RemoveContainerSlice(dir);
  return static_cast<int>(gone.size());
}

}  // namespace gs::container
