#include "src/node/container_dirs.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "src/common/raw_log.h"
#include "src/host/proc_mounts.h"
#include "src/node/host_pids.h"

namespace gs::node {
namespace {

std::string RandomId() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(getpid()));
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace

ContainerDirs::ContainerDirs(const SliceBook* book, size_t spares, uint64_t shared_dir_bytes)
    : book_(book), want_(spares), shared_dir_bytes_(shared_dir_bytes) {}

ContainerDirs::~ContainerDirs() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ContainerDirs::Start(bool keep_unrecorded) {
  std::set<std::string> recorded;
  for (const auto& r : book_->Records()) recorded.insert(r.id);
  std::error_code ec;
  std::filesystem::create_directories(book_->ContainersDir(), ec);
  if (!keep_unrecorded)
    for (const auto& e : std::filesystem::directory_iterator(book_->ContainersDir(), ec))
      if (!recorded.count(e.path().filename().string())) Remove(e.path().string());
  thread_ = std::thread([this] { Run(); });
}

Status ContainerDirs::CheckMountsReachTheRuntime() const {
  if (shared_dir_bytes_ == 0) return Status::Ok();
  const std::string dir = book_->ContainersDir();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Internal("cannot create " + dir + ": " + ec.message());
  auto host = host::ReadProcessMounts(1);  // the first process of the agent's PID namespace
  if (!host.ok()) {
    GS_LOG(kWarn, "cannot tell whether the tmpfs mounts under %s reach the container runtime (%s): assuming they do",
           dir.c_str(), host.status().message().c_str());
    return Status::Ok();
  }
  // The host's own mount namespace: whatever the agent mounts, the runtime sees.
  if (host->same_namespace_as_reader && SeesHostPids()) return Status::Ok();
  auto id = host::MountIdOf(dir);
  auto own = host::ReadProcessMounts(getpid());
  if (!id.ok() || !own.ok())
    return Internal("cannot find the mount holding " + dir + ": " + (id.ok() ? own.status() : id.status()).message());
  const host::MountEntry* m = nullptr;
  for (const auto& e : own->entries)
    if (e.id == *id) m = &e;
  if (m == nullptr) return Internal("mount " + std::to_string(*id) + " holding " + dir + " is not in the mountinfo");
  bool reaches = false;
  if (host->same_namespace_as_reader) {
    // Without hostPID the host is out of sight: a shared mount is all it can check.
    reaches = m->peer_group != 0;
  } else {
    // A mount in the host's namespace of the same peer group, or a slave of it, gets them.
    for (const auto& e : host->entries)
      reaches |= m->peer_group != 0 && (e.peer_group == m->peer_group || e.master == m->peer_group);
  }
  if (reaches) return Status::Ok();
  return FailedPrecondition(
      "the tmpfs the agent mounts under " + dir + " for each container would not reach the container runtime (" +
      (m->peer_group == 0 ? "its mount " + m->mount_point + " is not shared"
                          : "its mount " + m->mount_point + "'s peer group " + std::to_string(m->peer_group) +
                                " has no mount in the host's mount namespace") +
      "), and containers would start without their limits file. Give the state directory's volume "
      "mountPropagation: Bidirectional, and the agent hostPID: true (deploy/base does both), or run with "
      "--shared-dir-size 0");
}

Status ContainerDirs::Fill(const std::string& dir) const {
  if (shared_dir_bytes_ > 0) {
    std::string options =
        "size=" + std::to_string(shared_dir_bytes_) + ",nr_inodes=" + std::to_string(kSharedDirInodes) + ",mode=0755";
    if (mount("gpuslice-shared", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.c_str()) != 0)
      return FailedPrecondition("cannot mount a " + std::to_string(shared_dir_bytes_) + "-byte tmpfs at " + dir + ": " +
                                strerror(errno) +
                                " (the agent needs CAP_SYS_ADMIN; --shared-dir-size 0 leaves the container's "
                                "directory unbounded on the node's disk)");
  }
  std::string limits = dir + "/limits", shared = dir + "/shared";
  int fd = open(limits.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Internal("cannot create " + limits + ": " + strerror(errno));
  close(fd);
  if (mkdir(shared.c_str(), 0777) != 0) return Internal("cannot create " + shared + ": " + strerror(errno));
  chmod(shared.c_str(), 0777);  // whatever the umask: the container's first process creates the region
  return Status::Ok();
}

ContainerDirs::Mount ContainerDirs::Unmount(const std::string& dir) const {
  // MNT_DETACH: a container still running from the directory keeps its files until it
  // exits; nothing here waits for it. EINVAL is "not a mount point": the plain-directory
  // case, and `shared/` of this layout. (Agents before this layout mounted the tmpfs at
  // `shared/` alone, and their containers' directories may still be recorded.) An agent
  // without the right to mount, which only makes plain directories, gets EPERM instead.
  umount2((dir + "/shared").c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
  if (umount2(dir.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) return Mount::kUnmounted;
  return errno == EINVAL || (errno == EPERM && shared_dir_bytes_ == 0) ? Mount::kNone : Mount::kStillMounted;
}

void ContainerDirs::Remove(const std::string& dir) const {
  Unmount(dir);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

StatusOr<std::string> ContainerDirs::MakeSpare() {
  std::string id = RandomId(), dir = book_->ContainerDir(id);
  if (mkdir(dir.c_str(), 0755) != 0) return Internal("cannot create " + dir + ": " + strerror(errno));
  if (Status s = Fill(dir); !s.ok()) {
    Remove(dir);
    return s;
  }
  return id;
}

std::string ContainerDirs::Recycle(const std::string& id) {
  std::string dir = book_->ContainerDir(id);
  Mount was = Unmount(dir);
  if (was == Mount::kStillMounted) return "";
  // Under a tmpfs that went, the directory is empty. A plain one holds the container's
  // limits file and whatever it left in shared/ (files, links, directories; remove_all
  // never follows a link). A container still running from it keeps its limits file: a
  // bind mount holds the inode, never the name.
  if (was == Mount::kNone) {
    std::error_code ec;
    std::vector<std::filesystem::path> left;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) left.push_back(e.path());
    for (const auto& p : left)
      if (!ec) std::filesystem::remove_all(p, ec);
    if (ec) return "";
  }
  // Renamed before it is mounted again: a mount point cannot be renamed (EBUSY).
  std::string fresh = RandomId();  // an id is never handed out twice
  std::string to = book_->ContainerDir(fresh);
  if (rename(dir.c_str(), to.c_str()) != 0) return "";
  if (!Fill(to).ok()) {
    Remove(to);
    return "";
  }
  return fresh;
}

std::string ContainerDirs::RecycleOrRemove(const std::string& id, bool spare_wanted) {
  std::string spare = spare_wanted ? Recycle(id) : "";
  if (spare.empty()) Remove(book_->ContainerDir(id));
  return spare;
}

Status ContainerDirs::Take(std::string* id) {
  id->clear();
  bool wake = false;
  std::string discarded;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!ready_.empty()) {
      *id = ready_.front();
      ready_.pop_front();
    } else if (!discarded_.empty()) {
      discarded = std::move(discarded_.back());
      discarded_.pop_back();
    }
    wake = Urgent() || (calls_ == 0 && !Idle());  // else the call's end wakes it
  }
  if (wake) cv_.notify_all();
  if (!id->empty()) return Status::Ok();
  // No spare ready (calls come faster than the background thread makes them): a discarded
  // directory recycled here costs the state disk no new inode, unlike a new one.
  if (!discarded.empty()) {
    *id = RecycleOrRemove(discarded, /*spare_wanted=*/true);
    if (!id->empty()) return Status::Ok();
  }
  auto made = MakeSpare();
  if (!made.ok()) return made.status();
  *id = *made;
  return Status::Ok();
}

void ContainerDirs::Discard(const std::string& id) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    discarded_.push_back(id);
    wake = calls_ == 0 || Urgent();  // else the call's end wakes it
  }
  if (wake) cv_.notify_all();
}

ContainerDirs::Call::Call(ContainerDirs* dirs) : dirs_(dirs) {
  std::lock_guard<std::mutex> l(dirs_->mu_);
  ++dirs_->calls_;
}

ContainerDirs::Call::~Call() {
  bool wake = false;
  {
    std::lock_guard<std::mutex> l(dirs_->mu_);
    wake = --dirs_->calls_ == 0 && !dirs_->Idle();
    dirs_->last_call_end_ = std::chrono::steady_clock::now();
  }
  if (wake) dirs_->cv_.notify_all();
}

void ContainerDirs::Settle() {
  std::unique_lock<std::mutex> l(mu_);
  settled_.wait(l, [&] { return stop_ || (!busy_ && (Idle() || (calls_ > 0 && !Urgent()))); });
}

std::optional<std::chrono::steady_clock::time_point> ContainerDirs::NextWork() const {
  if (Urgent()) return std::chrono::steady_clock::time_point{};
  if (calls_ > 0) return std::nullopt;
  return last_call_end_ + kQuietAfterCall;
}

void ContainerDirs::Run() {
  // The lowest CPU priority for this thread alone: its work must not take a CPU from a
  // call. It is never starved: a spare that is not ready is made by Take() itself, at the
  // caller's priority.
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19) != 0)
    GS_LOG(kDetail, "container directories: cannot lower the background thread's priority: %s", strerror(errno));
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    auto at = NextWork();
    if (Idle() || !at) {
      settled_.notify_all();  // nothing it may do now
      cv_.wait(l);
      continue;
    }
    if (std::chrono::steady_clock::now() < *at) {
      cv_.wait_until(l, *at);
      continue;
    }
    // One directory: a discarded one recycled into a spare (or removed when none is
    // missing), else a new spare.
    busy_ = true;
    std::string discarded;
    if (!discarded_.empty()) {
      discarded = std::move(discarded_.back());
      discarded_.pop_back();
    }
    const bool missing = ready_.size() < want_;
    l.unlock();
    std::string spare;
    Status failed;
    if (!discarded.empty()) {
      spare = RecycleOrRemove(discarded, missing);
    } else {
      auto made = MakeSpare();
      if (made.ok())
        spare = *made;
      else
        failed = made.status();
    }
    l.lock();
    busy_ = false;
    if (!spare.empty()) ready_.push_back(spare);
    if (!failed.ok()) {
      // Take() makes directories itself meanwhile; try again a little later.
      GS_LOG(kError, "%s", failed.message().c_str());
      cv_.wait_for(l, std::chrono::seconds(1));
    }
  }
  settled_.notify_all();
}

}  // namespace gs::node
