// The node's cards for `gpuslice scheduler`: hami.io/node-nvidia-register (HAMi's JSON
// form) and hami.io/node-handshake ("Reported <time>") written on the Node at start,
// whenever the cards' health changes and every `period` (docs/scheduler.md, "The hand-off").
//
// Thread-safe: the registrar runs its own thread. Never prints: problems come back as
// Status or go to the `log` callback.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/common/status.h"
#include "src/kube/client.h"
#include "src/model/slices.h"

namespace gs::node {

// The node's cards as hami.io/node-nvidia-register: memory after --device-memory-scaling,
// cores 100 x --device-cores-scaling, `split_count` containers per card.
std::string NodeRegisterValue(const std::vector<model::Gpu>& gpus, const model::SplitPolicy& policy);

class NodeRegistrar {
 public:
  // `gpus` is called on each publish (health may change).
  NodeRegistrar(kube::Client* client, std::string node_name, std::function<std::vector<model::Gpu>()> gpus,
                model::SplitPolicy policy, std::chrono::seconds period, std::function<void(const std::string&)> log);
  ~NodeRegistrar();
  NodeRegistrar(const NodeRegistrar&) = delete;
  NodeRegistrar& operator=(const NodeRegistrar&) = delete;

  // Publishes once now (the error, if any), then keeps publishing on its thread.
  Status Start();
  // Publish soon (health changed).
  void Poke();
  void Stop();

 private:
  Status Publish();
  void Loop(std::stop_token stop);

  kube::Client* client_;
  std::string node_;
  std::function<std::vector<model::Gpu>()> gpus_;
  model::SplitPolicy policy_;
  std::chrono::seconds period_;
  std::function<void(const std::string&)> log_;
  std::mutex mu_;
  std::condition_variable_any wake_;
  bool poked_ = false;
  std::jthread thread_;
};

}  // namespace gs::node
