#include "src/node/node_registrar.h"

#include <time.h>

#include <nlohmann/json.hpp>

#include "src/scheduler/hami_format.h"
#include "src/scheduler/inventory.h"

namespace gs::node {
namespace {

using nlohmann::json;

constexpr std::chrono::milliseconds kCallTimeout{5000};

std::string NodePath(const std::string& node) {
  return "/api/v1/nodes/" + node;
}

// Go's time.DateTime in local time, as HAMi writes its handshake.
std::string DateTimeNow() {
  time_t now = time(nullptr);
  tm local;
  localtime_r(&now, &local);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

}  // namespace

std::string NodeRegisterValue(const std::vector<model::Gpu>& gpus, const model::SplitPolicy& policy) {
  std::vector<scheduler::GpuDevice> devices;
  for (const auto& g : gpus) {
    scheduler::GpuDevice d;
    d.uuid = g.uuid;
    d.index = g.index;
    d.model = "NVIDIA-" + g.name;  // HAMi's "type": vendor, dash, NVML's name
    d.memory_mib = static_cast<int64_t>(static_cast<double>(g.memory >> 20) * policy.memory_scaling);
    d.cores = static_cast<int>(100 * policy.cores_scaling);
    d.slots = policy.split_count;
    d.numa = g.numa_node < 0 ? 0 : g.numa_node;
    d.healthy = g.healthy;
    devices.push_back(std::move(d));
  }
  return scheduler::hami::EncodeNodeRegister(devices);
}

NodeRegistrar::NodeRegistrar(kube::Client* client, std::string node_name, std::function<std::vector<model::Gpu>()> gpus,
                             model::SplitPolicy policy, std::chrono::seconds period,
                             std::function<void(const std::string&)> log)
    : client_(client),
      node_(std::move(node_name)),
      gpus_(std::move(gpus)),
      policy_(policy),
      period_(period),
      log_(std::move(log)) {}

NodeRegistrar::~NodeRegistrar() {
  Stop();
}

Status NodeRegistrar::Publish() {
  json patch = {{"metadata",
                 {{"annotations",
                   {{scheduler::hami::kNodeRegister, NodeRegisterValue(gpus_(), policy_)},
                    {scheduler::hami::kNodeHandshake, "Reported " + DateTimeNow()}}}}}};
  auto r = client_->Patch(NodePath(node_), patch.dump(), kube::PatchType::kMerge, kCallTimeout);
  if (!r.ok()) return Unavailable("publishing the cards on node " + node_ + ": " + r.status().message());
  return Status::Ok();
}

Status NodeRegistrar::Start() {
  Status s = Publish();
  thread_ = std::jthread([this](std::stop_token stop) { Loop(stop); });
  return s;
}

void NodeRegistrar::Poke() {
  std::lock_guard<std::mutex> lock(mu_);
  poked_ = true;
  wake_.notify_all();
}

void NodeRegistrar::Stop() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
}

void NodeRegistrar::Loop(std::stop_token stop) {
  bool failing = false;
  while (!stop.stop_requested()) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // After a failure, try again sooner than the period.
      auto wait = failing ? std::min<std::chrono::seconds>(period_, std::chrono::seconds(5)) : period_;
      wake_.wait_for(lock, stop, wait, [this] { return poked_; });
      poked_ = false;
    }
    if (stop.stop_requested()) break;
    Status s = Publish();
    if (!s.ok() && log_) log_(s.message());
    if (s.ok() && failing && log_) log_("published the cards on node " + node_ + " again");
    failing = !s.ok();
  }
}

}  // namespace gs::node
