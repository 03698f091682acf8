// The per-container directories the node agent hands out (SliceBook::ContainerDir(id):
// a `limits` file and the writable `shared/` region directory). A background thread (at
// the lowest CPU priority) keeps a few ready (spares: directories in place that no record
// names yet): Allocate only takes one and fills its limits file.
// A discarded directory is recycled under a new id: its contents (which the container
// could write) go, the limits file included (a container that is still running keeps the
// old inode mounted, and must never see its limits rewritten for the next one), and it is
// filled anew; the directory itself is reused.
//
// `shared/` is the only place a container can write on the host. With a size (the
// default, --shared-dir-size), the container's directory is a tmpfs of that size and at
// most kSharedDirInodes files, mounted nosuid,nodev,noexec, holding `limits` and `shared/`:
// a container that writes there cannot fill the node's disk (and with it every other
// container's region pages and the agent's records), and what it wrote is gone with the
// mount. That makes the state disk's only work per container one directory (a new inode
// when no discarded one is left to recycle): on ext4 under churn each inode takes up to a
// millisecond (its allocator scans recently freed inodes), and that work competes with the
// Allocate calls. Mounting needs CAP_SYS_ADMIN; when it fails, Take() fails with the
// reason (fail closed: the pod is not started with an unbounded directory). With size 0
// it is a plain directory on the state disk.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/common/status.h"
#include "src/node/slice_book.h"

namespace gs::node {

class ContainerDirs {
 public:
  // shared_dir_bytes: the size of each container directory's tmpfs; 0 = a plain directory.
  explicit ContainerDirs(const SliceBook* book, size_t spares = 8, uint64_t shared_dir_bytes = 0);
  ~ContainerDirs();
  ContainerDirs(const ContainerDirs&) = delete;
  ContainerDirs& operator=(const ContainerDirs&) = delete;

  // Removes directories no allocation record names (spares and leftovers of a previous
  // run; call after the book is loaded) unless keep_unrecorded (the book's load failed:
  // they may be running containers' whose records are lost), then starts the background
  // thread.
  void Start(bool keep_unrecorded = false);
  // With a size, each container's directory is a tmpfs the agent mounts: when the agent runs
  // in a mount namespace other than the host's (a container of its own), the runtime sees
  // those mounts only if the containers directory is on a shared mount with a peer or slave
  // in the host's namespace (the state directory's volume with mountPropagation:
  // Bidirectional); without, containers would start with an empty directory and no limits
  // file. The host is the first process of the agent's PID namespace (hostPID); one that
  // cannot be read is assumed to be the agent's own namespace, with a warning. Fails with
  // the reason and the way out.
  Status CheckMountsReachTheRuntime() const;
  // A fresh directory, now at book->ContainerDir(*id), with an empty `limits` file (a
  // new inode) for the caller to write and an empty `shared/` (mode 0777: container processes run as
  // any user). Made on the spot (from a discarded one if there is one) when no spare is ready.
  Status Take(std::string* id);
  // The container is gone: its directory is recycled or removed in the background.
  void Discard(const std::string& id);
  // Waits until the background thread is idle (tests). Never while holding a Call: work it
  // holds back would never be done.
  void Settle();

  // While a Call lives (the Allocate handler runs), and for kQuietAfterCall after the last
  // one ended (its reply is still on its way to the kubelet), the background thread starts
  // no file system work (recycling, making spares: mounts, renames, removals), so it does
  // not compete with the call for the CPUs and the file system. It works one directory at a
  // time, so a call that comes in meanwhile waits for one directory's work at most. When
  // spares run short (fewer than kUrgentSpares ready) or more than kMaxDiscardedWaiting
  // directories wait, it works regardless.
  class Call {
   public:
    explicit Call(ContainerDirs* dirs);
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    ContainerDirs* dirs_;
  };
  static constexpr size_t kUrgentSpares = 2;
  static constexpr std::chrono::microseconds kQuietAfterCall{1000};
  static constexpr size_t kMaxDiscardedWaiting = 16;

  // Files (inodes) a container's tmpfs holds at most: its root, `limits` and `shared/`,
  // the region and what the enforcer's processes may add beside it, with room to spare;
  // millions of empty files a container could otherwise make cost the node's kernel
  // memory, not the tmpfs's size.
  static constexpr int kSharedDirInodes = 64;

 private:
  StatusOr<std::string> MakeSpare();
  // Turns a discarded container directory into a spare ("" when it cannot be reused).
  std::string Recycle(const std::string& id);
  // A discarded directory recycled into a spare when one is wanted and it can be (the
  // spare's id), else removed ("").
  std::string RecycleOrRemove(const std::string& id, bool spare_wanted);
  void Run();
  // Nothing to remove and every spare ready (mu_ held).
  bool Idle() const { return discarded_.empty() && ready_.size() >= want_; }
  // Spares run short, or directories wait to be recycled (each holds its tmpfs's memory and
  // its card entries) while calls keep coming closer together than kQuietAfterCall.
  bool Urgent() const {
    return (want_ > 0 && ready_.size() < kUrgentSpares) || discarded_.size() > kMaxDiscardedWaiting;
  }
  // When the background thread may start its next directory's work (mu_ held): now when
  // urgent, never while a call runs, else once the last call's quiet time is over.
  std::optional<std::chrono::steady_clock::time_point> NextWork() const;

  // Mounts the tmpfs at the empty directory `dir` (with a size), then makes an empty
  // `limits` and `shared/` in it.
  Status Fill(const std::string& dir) const;
  // Unmounts the directory's tmpfs: what it was.
  enum class Mount { kNone, kUnmounted, kStillMounted };
  Mount Unmount(const std::string& dir) const;
  // Unmounts the directory's tmpfs and removes the directory.
  void Remove(const std::string& dir) const;

  const SliceBook* book_;
  const size_t want_;
  const uint64_t shared_dir_bytes_;
  std::mutex mu_;
  std::condition_variable cv_, settled_;
  std::deque<std::string> ready_;       // spare ids
  std::vector<std::string> discarded_;  // container dirs to remove
  bool stop_ = false, busy_ = false;
  int calls_ = 0;  // Calls alive
  std::chrono::steady_clock::time_point last_call_end_{};
  std::thread thread_;
};

}  // namespace gs::node
