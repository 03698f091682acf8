#include "src/node/slice_book.h"

#include <algorithm>
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

std::string SliceBook::ContainerDir(const std::string& id) const {
  return state_dir_ + "/containers/" + id;
}

Status SliceBook::Load() {
  std::ifstream in(state_dir_ + "/allocations.json");
  if (!in) return Status::Ok();
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& r : j.at("allocations")) {
      AllocationRecord rec{r.at("id").get<std::string>(), r.at("devices").get<std::vector<std::string>>(),
                           r.at("created").get<int64_t>()};
      records_[rec.id] = rec;
    }
  } catch (const std::exception& e) {
    return Internal(state_dir_ + "/allocations.json is damaged: " + e.what());
  }
  return Status::Ok();
}

Status SliceBook::SaveLocked() const {
  nlohmann::json j;
  j["allocations"] = nlohmann::json::array();
  for (const auto& [id, r] : records_)
    j["allocations"].push_back({{"id", r.id}, {"devices", r.device_ids}, {"created", r.created_unix}});
  std::string path = state_dir_ + "/allocations.json", tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    if (!out) return Internal("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return ec ? Internal("cannot replace " + path + ": " + ec.message()) : Status::Ok();
}

Status SliceBook::Add(const AllocationRecord& r, std::vector<std::string>* dropped) {
  std::lock_guard<std::mutex> l(mu_);
  // The kubelet never gives a slice to two running containers: an older record holding
  // one of these slices belongs to a container that is gone (or an init container).
  for (auto it = records_.begin(); it != records_.end();) {
    bool shares = false;
    for (const auto& d : it->second.device_ids)
      shares |= std::find(r.device_ids.begin(), r.device_ids.end(), d) != r.device_ids.end();
    if (shares) dropped->push_back(it->first);
    it = shares ? records_.erase(it) : std::next(it);
  }
  records_[r.id] = r;
  ++version_;
  return SaveLocked();
}

void SliceBook::Remove(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  if (records_.erase(id)) {
    ++version_;
    (void)SaveLocked();
  }
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
