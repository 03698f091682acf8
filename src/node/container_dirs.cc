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

namespace {

// Replaces the limits file with a new, empty inode (made beside it, renamed over it): a
// container still running from this directory keeps its file, unchanged. Take()'s owner
// then writes the new one in place.
Status FreshLimitsFile(const std::string& dir) {
  std::string limits = dir + "/limits", fresh = dir + "/limits.new";
  int fd = open(fresh.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Internal("cannot create " + fresh + ": " + strerror(errno));
  close(fd);
  if (rename(fresh.c_str(), limits.c_str()) != 0) {
    Status s = Internal("cannot replace " + limits + ": " + strerror(errno));
    unlink(fresh.c_str());
    return s;
  }
  return Status::Ok();
}

}  // namespace

Status ContainerDirs::MakeSharedDir(const std::string& dir) const {
  std::string shared = dir + "/shared";
  if (mkdir(shared.c_str(), 0777) != 0) return Internal("cannot create " + shared + ": " + strerror(errno));
  chmod(shared.c_str(), 0777);  // whatever the umask: the container's first process creates the region
  if (shared_dir_bytes_ == 0) return Status::Ok();
  std::string options =
      "size=" + std::to_string(shared_dir_bytes_) + ",nr_inodes=" + std::to_string(kSharedDirInodes) + ",mode=0777";
  if (mount("gpuslice-shared", shared.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.c_str()) != 0) {
    Status s = FailedPrecondition("cannot mount a " + std::to_string(shared_dir_bytes_) + "-byte tmpfs at " + shared +
                                  ": " + strerror(errno) +
                                  " (the agent needs CAP_SYS_ADMIN; --shared-dir-size 0 leaves the directory "
                                  "unbounded on the node's disk)");
    rmdir(shared.c_str());
    return s;
  }
  return Status::Ok();
}

void ContainerDirs::Remove(const std::string& dir) const {
  // MNT_DETACH: a container still running from the directory keeps its files until it
  // exits; nothing here waits for it. EINVAL (not a mount point) is the plain-directory case.
  umount2((dir + "/shared").c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

StatusOr<std::string> ContainerDirs::MakeSpare() {
  std::string id = RandomId(), dir = book_->ContainerDir(id);
  if (mkdir(dir.c_str(), 0755) != 0) return Internal("cannot create " + dir + ": " + strerror(errno));
  int fd = open((dir + "/limits").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  Status s = fd >= 0 ? MakeSharedDir(dir) : Internal("cannot create " + dir + "/limits: " + strerror(errno));
  if (fd >= 0) close(fd);
  if (!s.ok()) {
    Remove(dir);
    return s;
  }
  return id;
}

std::string ContainerDirs::Recycle(const std::string& id) {
  std::string dir = book_->ContainerDir(id);
  std::error_code ec;
  // Whatever the container left in shared/ (files, links, directories) goes with it (with
  // its tmpfs); remove_all never follows a link.
  umount2((dir + "/shared").c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
  std::filesystem::remove_all(dir + "/shared", ec);
  if (ec || !MakeSharedDir(dir).ok() || !FreshLimitsFile(dir).ok()) return "";
  std::string fresh = RandomId();  // an id is never handed out twice
  if (rename(dir.c_str(), book_->ContainerDir(fresh).c_str()) != 0) return "";
  return fresh;
}

Status ContainerDirs::Take(std::string* id) {
  id->clear();
  bool low = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!ready_.empty()) {
      *id = ready_.front();
      ready_.pop_front();
    }
    low = MayWork();
  }
  if (low) cv_.notify_all();
  if (!id->empty()) return Status::Ok();
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
    wake = MayWork();
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
    wake = --dirs_->calls_ == 0 && dirs_->MayWork();
  }
  if (wake) dirs_->cv_.notify_all();
}

void ContainerDirs::Settle() {
  std::unique_lock<std::mutex> l(mu_);
  settled_.wait(l, [&] { return stop_ || (!busy_ && Idle()); });
}

void ContainerDirs::Run() {
  // The lowest CPU priority for this thread alone: its inode work right after a call would
  // otherwise take a CPU from the reply still on its way to the kubelet. It is never
  // starved: a spare that is not ready is made by Take() itself, at the caller's priority.
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19) != 0)
    GS_LOG(kDetail, "container directories: cannot lower the background thread's priority: %s", strerror(errno));
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (!MayWork()) {
      if (Idle()) settled_.notify_all();
      cv_.wait(l);
      continue;
    }
    busy_ = true;
    std::vector<std::string> discarded;
    discarded.swap(discarded_);
    size_t missing = want_ > ready_.size() ? want_ - ready_.size() : 0;
    l.unlock();
    std::vector<std::string> made;
    for (const auto& id : discarded) {
      std::string spare = made.size() < missing ? Recycle(id) : "";
      if (!spare.empty())
        made.push_back(spare);
      else
        Remove(book_->ContainerDir(id));
    }
    Status failed;
    while (made.size() < missing && failed.ok()) {
      auto spare = MakeSpare();
      if (spare.ok())
        made.push_back(*spare);
      else
        failed = spare.status();
    }
    l.lock();
    busy_ = false;
    ready_.insert(ready_.end(), made.begin(), made.end());
    if (!failed.ok()) {
      // Take() makes directories itself meanwhile; try again a little later.
      GS_LOG(kError, "%s", failed.message().c_str());
      cv_.wait_for(l, std::chrono::seconds(1));
    }
  }
  settled_.notify_all();
}

}  // namespace gs::node
