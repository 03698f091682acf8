// The per-container directories the node agent hands out (SliceBook::ContainerDir(id):
// a `limits` file and the writable `shared/` region directory). Making them allocates
// inodes, and on ext4 under churn that takes up to a millisecond each (its allocator scans
// recently freed inodes), so a background thread (at the lowest CPU priority) keeps a few
// ready (spares: directories in place that no record names yet): Allocate only takes one
// and fills its limits file.
// A discarded directory is recycled under a new id: its `shared/` (which the container
// could write) is removed and made anew, and its limits file is replaced by a new, empty
// one (a new inode: a container that is still running keeps the old file mounted, and
// must never see its limits rewritten for the next one); the directory itself is reused.
//
// `shared/` is the only place a container can write on the host. With a size (the
// default, --shared-dir-size), it is a tmpfs of that size and at most kSharedDirInodes
// files, mounted nosuid,nodev,noexec: a container that writes there cannot fill the
// node's disk (and with it every other container's region pages and the agent's records),
// and what it wrote is gone with the mount. Mounting needs CAP_SYS_ADMIN; when it fails,
// Take() fails with the reason (fail closed: the pod is not started with an unbounded
// directory). With size 0 it is a plain directory on the state disk.
//
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/common/status.h"
#include "src/node/slice_book.h"

namespace gs::node {

class ContainerDirs {
 public:
  // shared_dir_bytes: the size of each `shared/` tmpfs; 0 = a plain directory.
  explicit ContainerDirs(const SliceBook* book, size_t spares = 8, uint64_t shared_dir_bytes = 0);
  ~ContainerDirs();
  ContainerDirs(const ContainerDirs&) = delete;
  ContainerDirs& operator=(const ContainerDirs&) = delete;

  // Removes directories no allocation record names (spares and leftovers of a previous
  // run; call after the book is loaded) unless keep_unrecorded (the book's load failed:
  // they may be running containers' whose records are lost), then starts the background
  // thread.
  void Start(bool keep_unrecorded = false);
  // A fresh directory, now at book->ContainerDir(*id), with an empty `limits` file (a
  // new inode) for the caller to write and an empty `shared/` (mode 0777: container processes run as
  // any user). Made on the spot when no spare is ready.
  Status Take(std::string* id);
  // The container is gone: its directory is recycled or removed in the background.
  void Discard(const std::string& id);
  // Waits until the background thread is idle (tests). Never while holding a Call: work it
  // holds back would never be done.
  void Settle();

  // While a Call lives (the Allocate handler runs), the background thread starts no file
  // system work (recycling, making spares: mounts, renames, removals), so it does not
  // compete with the handler for the CPUs and the file system's journal; a batch already
  // under way finishes. When spares run short (fewer than kUrgentSpares ready) it works
  // regardless.
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

  // Files (inodes) a `shared/` tmpfs holds at most: the region and what the enforcer's
  // processes may add beside it, with room to spare; millions of empty files a container
  // could otherwise make cost the node's kernel memory, not the tmpfs's size.
  static constexpr int kSharedDirInodes = 64;

 private:
  StatusOr<std::string> MakeSpare();
  // Turns a discarded container directory into a spare ("" when it cannot be reused).
  std::string Recycle(const std::string& id);
  void Run();
  // Nothing to remove and more than half the spares ready (mu_ held): refills come in
  // batches, so their file system work rarely runs beside an Allocate. (No spares wanted:
  // idle once nothing is left to remove.)
  bool Idle() const { return discarded_.empty() && (want_ == 0 || ready_.size() > want_ / 2); }
  // There is work and nothing holds it back (mu_ held).
  bool MayWork() const { return !Idle() && (calls_ == 0 || (want_ > 0 && ready_.size() < kUrgentSpares)); }

  Status MakeSharedDir(const std::string& dir) const;
  // Unmounts `shared/` (if it is a mount) and removes the directory.
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
  std::thread thread_;
};

}  // namespace gs::node
