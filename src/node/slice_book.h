// The node agent's book of GPUs and slices: inventory, health, and the allocations it
// handed out (which slices, which per-container directory). ListAndWatch streams wait on
// it for changes. Records persist so a restart of the agent keeps running containers'
// directories: a snapshot (<state_dir>/allocations.json) plus a journal
// (allocations.log, one JSON line per change, appended with one checked write(2) before
// the change counts; not fsync'ed, see AppendLocked), folded into a new snapshot at load and every kCompactEvery
// changes. An Allocate then costs an append, not a rewrite of every record.
//
// Crash safety: a failed append (full disk, I/O error) is cut back, so it never leaves half
// a line, and the book stays as it was; a line torn by a crash is cut at load; compaction
// writes a temporary file, syncs it, renames it and syncs the directory, and a failure
// there loses nothing (the journal still holds every change).
//
// Thread-safe: one mutex; Wait() blocks on a condition variable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/model/container_edits.h"
#include "src/model/slices.h"

namespace gs::node {

struct AllocationRecord {
  std::string id;                       // directory name under <state_dir>/containers
  std::vector<std::string> device_ids;  // slice IDs
  int64_t created_unix = 0;
};

struct DeviceState {
  std::string id;
  bool healthy = true;
  int numa_node = -1;
};

class SliceBook {
 public:
  SliceBook(std::vector<model::Gpu> gpus, model::SplitPolicy policy, std::string state_dir);
  ~SliceBook();
  SliceBook(const SliceBook&) = delete;
  SliceBook& operator=(const SliceBook&) = delete;
  static constexpr int kCompactEvery = 1024;

  const model::SplitPolicy& policy() const { return policy_; }
  std::vector<model::Gpu> Gpus() const;
  std::vector<DeviceState> Devices() const;
  uint64_t version() const;

  // Health (by GPU UUID). Returns true when it changed.
  bool SetHealthy(const std::string& uuid, bool healthy);

  // Waits until version() != seen or the timeout; returns the current version.
  uint64_t Wait(uint64_t seen, std::chrono::milliseconds timeout) const;

  // Allocation records. Load replays snapshot and journal (missing files: empty; a torn
  // last journal line from a crash is cut, with a log line), then compacts. An error means
  // damage (a snapshot that does not parse, a damaged line inside the journal): records
  // may be missing, so the caller must not remove directories no record names. What could
  // be read is loaded all the same, and the damaged files are kept as *.damaged.
  Status Load();
  // True while a *.damaged file of an earlier Load is still there: records may have been
  // lost then, so no start removes unrecorded directories until an operator has checked
  // them and removed the *.damaged files (a later clean Load does not bring records back).
  bool HasDamagedRecords() const;
  // Adds r; older records sharing one of its slices belong to containers that are gone:
  // they are dropped and their IDs appended to *dropped (the caller removes their
  // directories). On an error (the journal could not take it) nothing changed.
  Status Add(const AllocationRecord& r, std::vector<std::string>* dropped);
  void Remove(const std::string& id);
  std::vector<AllocationRecord> Records() const;
  std::map<std::string, int> InUse() const;  // slices in use per GPU UUID
  std::set<std::string> TakenIds() const;
  // <state_dir>/containers/<id>: holds `limits` (mounted read-only) and `shared/`, the
  // region directory mounted read-write. The limits file is deliberately outside the
  // writable directory, so a container can never reach it through a writable mount.
  std::string ContainerDir(const std::string& id) const;
  std::string ContainersDir() const;  // where every ContainerDir is
  // <state_dir>/cards: one card region per GPU (src/node/card_files.h), shared by every
  // container on the node so their enforcers take turns on a card.
  std::string CardsDir() const { return state_dir_ + "/cards"; }
  std::string SharedDir(const std::string& id) const { return ContainerDir(id) + "/shared"; }
  std::string RegionFile(const std::string& id) const { return SharedDir(id) + "/region"; }
  std::string LimitsFile(const std::string& id) const { return ContainerDir(id) + "/limits"; }
  // What container `id` was granted, card by card, as its limits file says: the one record
  // of the decided UUIDs, memory and cores (with --scheduler-decisions they are the
  // scheduler's, not those of the slice IDs the kubelet passed). Empty when the file
  // cannot be read.
  std::vector<model::DeviceGrant> Grants(const std::string& id) const;

 private:
  Status CompactLocked();
  // Records a change (journal lines) on disk, then applies it to records_; on an error
  // nothing changed.
  Status CommitLocked(const std::string& lines, const std::function<void()>& apply);
  Status AppendLocked(const std::string& lines);
  void MaybeCompactLocked();

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<model::Gpu> gpus_;
  model::SplitPolicy policy_;
  std::string state_dir_;
  uint64_t version_ = 1;
  std::map<std::string, AllocationRecord> records_;
  int journal_fd_ = -1;
  int journal_entries_ = 0;
};

}  // namespace gs::node
