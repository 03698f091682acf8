#include "src/node/slice_book.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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

AllocationRecord FromJson(const nlohmann::json& j) {
  return {j.at("id").get<std::string>(), j.at("devices").get<std::vector<std::string>>(),
          j.at("created").get<int64_t>()};
}

}  // namespace

SliceBook::~SliceBook() {
  if (journal_fd_ >= 0) close(journal_fd_);
}

Status SliceBook::Load() {
  std::lock_guard<std::mutex> l(mu_);
  std::string snapshot = state_dir_ + "/allocations.json", journal = state_dir_ + "/allocations.log";
  if (std::ifstream in(snapshot); in) {
    try {
      nlohmann::json j = nlohmann::json::parse(in);  // named: a range-for over a temporary's member dangles
      for (const auto& r : j.at("allocations")) {
        AllocationRecord rec = FromJson(r);
        records_[rec.id] = rec;
      }
    } catch (const std::exception& e) {
      return Internal(snapshot + " is damaged: " + e.what());
    }
  }
  std::ifstream in(journal);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
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
      if (in.peek() == EOF) break;  // the last line, torn by a crash mid-append
      return Internal(journal + " line " + std::to_string(line_no) + " is damaged: " + e.what());
    }
  }
  return CompactLocked();
}

// Writes all records as a new snapshot, then empties the journal. A crash between the two
// replays the journal onto the new snapshot, which changes nothing (adds and removes are
// idempotent).
Status SliceBook::CompactLocked() {
  nlohmann::json j;
  j["allocations"] = nlohmann::json::array();
  for (const auto& [id, r] : records_) j["allocations"].push_back(ToJson(r));
  std::string path = state_dir_ + "/allocations.json", tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    if (!out) return Internal("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Internal("cannot replace " + path + ": " + ec.message());
  std::string journal = state_dir_ + "/allocations.log";
  if (journal_fd_ < 0) journal_fd_ = open(journal.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (journal_fd_ < 0) return Internal("cannot open " + journal + ": " + strerror(errno));
  if (ftruncate(journal_fd_, 0) != 0) return Internal("cannot truncate " + journal + ": " + strerror(errno));
  journal_entries_ = 0;
  return Status::Ok();
}

Status SliceBook::AppendLocked(const std::string& lines) {
  if (journal_fd_ < 0 || ++journal_entries_ >= kCompactEvery) return CompactLocked();
  // One write: with O_APPEND the lines land whole after what is there.
  if (write(journal_fd_, lines.data(), lines.size()) != static_cast<ssize_t>(lines.size()))
    return Internal("cannot append to " + state_dir_ + "/allocations.log: " + strerror(errno));
  return Status::Ok();
}

Status SliceBook::Add(const AllocationRecord& r, std::vector<std::string>* dropped) {
  std::lock_guard<std::mutex> l(mu_);
  // The kubelet never gives a slice to two running containers: an older record holding
  // one of these slices belongs to a container that is gone (or an init container).
  std::string lines;
  for (auto it = records_.begin(); it != records_.end();) {
    bool shares = false;
    for (const auto& d : it->second.device_ids)
      shares |= std::find(r.device_ids.begin(), r.device_ids.end(), d) != r.device_ids.end();
    if (shares) {
      dropped->push_back(it->first);
      lines += nlohmann::json{{"remove", it->first}}.dump() + "\n";
    }
    it = shares ? records_.erase(it) : std::next(it);
  }
  records_[r.id] = r;
  lines += nlohmann::json{{"add", ToJson(r)}}.dump() + "\n";
  // Records do not change the device list: ListAndWatch has nothing new to send.
  return AppendLocked(lines);
}

void SliceBook::Remove(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  if (records_.erase(id)) (void)AppendLocked(nlohmann::json{{"remove", id}}.dump() + "\n");
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

}  // namespace gs::node
