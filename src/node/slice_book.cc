#include "src/node/slice_book.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "src/common/file.h"
#include "src/common/raw_log.h"
#include "src/node/durable_file.h"

namespace gs::node {

SliceBook::SliceBook(std::vector<model::Gpu> gpus, model::SplitPolicy policy, std::string state_dir)
    : gpus_(std::move(gpus)), policy_(policy), state_dir_(std::move(state_dir)) {}

std::vector<model::Gpu> SliceBook::Gpus() const {
  std::lock_guard<std::mutex> l(mu_);
  return gpus_;
}

std::vector<DeviceState> SliceBook::Devices() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<DeviceState> out;
  for (const auto& s : model::Split(gpus_, policy_))
    out.push_back({s.id, gpus_[s.gpu].healthy, gpus_[s.gpu].numa_node});
  return out;
}

uint64_t SliceBook::version() const {
  std::lock_guard<std::mutex> l(mu_);
  return version_;
}

bool SliceBook::SetHealthy(const std::string& uuid, bool healthy) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& g : gpus_)
    if (g.uuid == uuid && g.healthy != healthy) {
      g.healthy = healthy;
      ++version_;
      cv_.notify_all();
      return true;
    }
  return false;
}

uint64_t SliceBook::Wait(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [&] { return version_ != seen; });
  return version_;
}

bool SliceBook::HasDamagedRecords() const {
  std::error_code ec;
  return std::filesystem::exists(state_dir_ + "/allocations.json.damaged", ec) ||
         std::filesystem::exists(state_dir_ + "/allocations.log.damaged", ec);
}

std::string SliceBook::ContainersDir() const {
  return state_dir_ + "/containers";
}

std::string SliceBook::ContainerDir(const std::string& id) const {
  return ContainersDir() + "/" + id;
}

namespace {

nlohmann::json ToJson(const AllocationRecord& r) {
  return {{"id", r.id}, {"devices", r.device_ids}, {"created", r.created_unix}};
}

// Throws (nlohmann's exceptions, std::invalid_argument) on what the agent never writes.
AllocationRecord FromJson(const nlohmann::json& j) {
  AllocationRecord r{j.at("id").get<std::string>(), j.at("devices").get<std::vector<std::string>>(), 0};
  // get<int64_t>() of a float outside int64_t's range is undefined behaviour.
  if (!j.at("created").is_number_integer()) throw std::invalid_argument("'created' is not an integer");
  r.created_unix = j.at("created").get<int64_t>();
  // The id names <state_dir>/containers/<id>, which the agent recycles and removes: one
  // path component, never "", "." or ".." (those would name the containers or state dir).
  if (r.id.empty() || r.id == "." || r.id == ".." || r.id.find_first_of(std::string("/\0", 2)) != std::string::npos)
    throw std::invalid_argument("id '" + r.id + "' is not a directory name");
  return r;
}

}  // namespace

SliceBook::~SliceBook() {
  if (journal_fd_ >= 0) close(journal_fd_);
}

namespace {

Status ErrnoStatus(const std::string& what) {
  return Internal(what + ": " + strerror(errno));
}

}  // namespace

Status SliceBook::Load() {
  std::lock_guard<std::mutex> l(mu_);
  std::string snapshot = state_dir_ + "/allocations.json", journal = state_dir_ + "/allocations.log";
  Status damage = Status::Ok();
  std::string text;
  if (auto read = ReadFile(snapshot); read.ok()) {
    text = std::move(*read);
    try {
      nlohmann::json j = nlohmann::json::parse(text);  // named: a range-for over a temporary's member dangles
      for (const auto& r : j.at("allocations")) {
        AllocationRecord rec = FromJson(r);
        records_[rec.id] = rec;
      }
    } catch (const std::exception& e) {
      damage = Internal(snapshot + " is damaged: " + e.what());
      // Kept for the operator; the next compaction would otherwise overwrite it.
      std::error_code ec;
      std::filesystem::rename(snapshot, snapshot + ".damaged", ec);
    }
  }
  text.clear();
  if (auto read = ReadFile(journal); read.ok()) {
    text = std::move(*read);
    // Every append ends with a newline, so text after the last one is a line torn by a
    // crash (or a full disk) mid-append: cut it, so the next append starts a line of its own.
    size_t complete = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if (complete < text.size()) {
      GS_LOG(kWarn, "%s: cutting a torn last line of %zu bytes (an append interrupted by a crash)", journal.c_str(),
             text.size() - complete);
      if (truncate(journal.c_str(), static_cast<off_t>(complete)) != 0)
        GS_LOG(kError, "cannot cut %s: %s", journal.c_str(), strerror(errno));
      text.resize(complete);
    }
    int line_no = 0;
    for (size_t at = 0; at < text.size();) {
      size_t eol = text.find('\n', at);
      std::string line = text.substr(at, eol - at);
      at = eol + 1;
      ++line_no;
      try {
        auto j = nlohmann::json::parse(line);
        if (j.contains("add")) {
          AllocationRecord rec = FromJson(j["add"]);
          records_[rec.id] = rec;
        } else {
          records_.erase(j.at("remove").get<std::string>());
        }
      } catch (const std::exception& e) {
        // Records may be missing from here on; the rest of the journal is still applied.
        if (damage.ok()) damage = Internal(journal + " line " + std::to_string(line_no) + " is damaged: " + e.what());
      }
    }
    if (!damage.ok()) {
      std::error_code ec;
      std::filesystem::copy_file(journal, journal + ".damaged", std::filesystem::copy_options::overwrite_existing, ec);
    }
  }
  journal_fd_ = open(journal.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (journal_fd_ < 0 && damage.ok()) damage = ErrnoStatus("cannot open " + journal);
  if (Status s = CompactLocked(); !s.ok()) GS_LOG(kWarn, "%s; the records stay in the journal", s.message().c_str());
  return damage;
}

// Writes all records as a new snapshot (temp file, fsync, rename, fsync of the
// directory), then empties the journal. A crash between the two replays the journal onto
// the new snapshot, which changes nothing (adds and removes are idempotent). On an error
// nothing is lost: the old snapshot and the journal are untouched.
Status SliceBook::CompactLocked() {
  nlohmann::json j;
  j["allocations"] = nlohmann::json::array();
  for (const auto& [id, r] : records_) j["allocations"].push_back(ToJson(r));
  GS_RETURN_IF_ERROR(WriteFileDurably(state_dir_ + "/allocations.json", j.dump(2) + "\n"));
  std::string journal = state_dir_ + "/allocations.log";
  if (journal_fd_ < 0) journal_fd_ = open(journal.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (journal_fd_ < 0) return ErrnoStatus("cannot open " + journal);
  if (ftruncate(journal_fd_, 0) != 0 || fsync(journal_fd_) != 0) return ErrnoStatus("cannot empty " + journal);
  journal_entries_ = 0;
  return Status::Ok();
}

Status SliceBook::CommitLocked(const std::string& lines, const std::function<void()>& apply) {
  if (journal_fd_ >= 0) {
    GS_RETURN_IF_ERROR(AppendLocked(lines));
    apply();
    MaybeCompactLocked();
    return Status::Ok();
  }
  // No journal (it could not be opened, or not cut back after a failed append): the
  // snapshot is the record, and compaction starts a new, empty journal.
  auto before = records_;
  apply();
  Status s = CompactLocked();
  if (!s.ok()) records_ = std::move(before);
  return s;
}

Status SliceBook::AppendLocked(const std::string& lines) {
  std::string journal = state_dir_ + "/allocations.log";
  struct stat st;
  if (fstat(journal_fd_, &st) != 0) return ErrnoStatus("cannot append to " + journal);
  // One write (with O_APPEND the lines land whole after what is there), checked. Not
  // fsync'ed: the records describe running containers, and what ends the page cache (a
  // kernel crash, a power loss) ends those containers too, so the record must survive the
  // agent's own death (kill -9, OOM), which the page cache does. An fdatasync per append
  // cost 3.9 ms per Allocate on this VM (the write alone 25-55 us). Compaction, which
  // replaces the snapshot, is made durable (durable_file.h) so it never leaves a torn one.
  ssize_t n = write(journal_fd_, lines.data(), lines.size());
  if (n != static_cast<ssize_t>(lines.size())) {
    if (n >= 0 && n != static_cast<ssize_t>(lines.size())) errno = ENOSPC;  // a short write: the disk is full
    Status s = ErrnoStatus("cannot append to " + journal);
    // Take back what got in, so no half line is left for the next append to land after.
    if (ftruncate(journal_fd_, st.st_size) != 0) {
      GS_LOG(kError, "cannot cut %s back after a failed append: %s; the next change rewrites the snapshot",
             journal.c_str(), strerror(errno));
      close(journal_fd_);
      journal_fd_ = -1;
    }
    return s;
  }
  ++journal_entries_;
  return Status::Ok();
}

// Called once the change just appended is in records_ too (the snapshot must hold it
// before the journal is emptied).
void SliceBook::MaybeCompactLocked() {
  if (journal_entries_ < kCompactEvery) return;
  if (Status s = CompactLocked(); !s.ok()) GS_LOG(kWarn, "%s; the records stay in the journal", s.message().c_str());
}

Status SliceBook::Add(const AllocationRecord& r, std::vector<std::string>* dropped) {
  std::lock_guard<std::mutex> l(mu_);
  // The kubelet never gives a slice to two running containers: an older record holding
  // one of these slices belongs to a container that is gone (or an init container).
  std::string lines;
  std::vector<std::string> gone;
  for (const auto& [id, rec] : records_) {
    bool shares = false;
    for (const auto& d : rec.device_ids)
      shares |= std::find(r.device_ids.begin(), r.device_ids.end(), d) != r.device_ids.end();
    if (shares) {
      gone.push_back(id);
      lines += nlohmann::json{{"remove", id}}.dump() + "\n";
    }
  }
  lines += nlohmann::json{{"add", ToJson(r)}}.dump() + "\n";
  // Changed in memory only once on disk: a failed Add leaves the book as it was.
  GS_RETURN_IF_ERROR(CommitLocked(lines, [&] {
    for (const auto& id : gone) records_.erase(id);
    records_[r.id] = r;
  }));
  dropped->insert(dropped->end(), gone.begin(), gone.end());
  // Records do not change the device list: ListAndWatch has nothing new to send.
  return Status::Ok();
}

void SliceBook::Remove(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  if (!records_.count(id)) return;
  // When this fails the record stays, and the caller's next sweep removes it again.
  if (Status s = CommitLocked(nlohmann::json{{"remove", id}}.dump() + "\n", [&] { records_.erase(id); }); !s.ok())
    GS_LOG(kError, "%s", s.message().c_str());
}

std::vector<AllocationRecord> SliceBook::Records() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<AllocationRecord> out;
  for (const auto& [id, r] : records_) out.push_back(r);
  return out;
}

std::map<std::string, int> SliceBook::InUse() const {
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, int> use;
  for (const auto& [id, r] : records_)
    for (const auto& d : r.device_ids) {
      std::string uuid;
      int k;
      if (model::ParseSliceId(d, &uuid, &k)) ++use[uuid];
    }
  return use;
}

std::set<std::string> SliceBook::TakenIds() const {
  std::lock_guard<std::mutex> l(mu_);
  std::set<std::string> ids;
  for (const auto& [id, r] : records_) ids.insert(r.device_ids.begin(), r.device_ids.end());
  return ids;
}

std::vector<model::DeviceGrant> SliceBook::Grants(const std::string& id) const {
  auto text = ReadFile(LimitsFile(id));
  if (!text.ok()) return {};
  return model::GrantsInLimitsFile(*text);
}

}  // namespace gs::node
