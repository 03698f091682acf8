#include "src/cli/scheduler_command.h"

#include <signal.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "src/common/flags.h"
#include "src/scheduler/extender.h"
#include "src/scheduler/extender_http.h"
#include "src/scheduler/hami_format.h"

namespace gs::cli {
namespace {

using nlohmann::json;

// Until the Kubernetes client lands, bind's API calls are printed (one JSON line each)
// instead of sent: the extender can be driven by hand or by a test harness.
class PrintingBinder : public scheduler::KubeBinder {
 public:
  Status AnnotatePod(const std::string& ns, const std::string& name, const scheduler::hami::Annotations& a) override {
    Print(json{{"annotate", ns + "/" + name}, {"annotations", a}});
    return Status::Ok();
  }
  Status BindPod(const std::string& ns, const std::string& name, const std::string& uid,
                 const std::string& node) override {
    Print(json{{"bind", ns + "/" + name}, {"uid", uid}, {"node", node}});
    return Status::Ok();
  }
  StatusOr<std::string> GetPod(const std::string& ns, const std::string& name) override {
    return Unavailable("no Kubernetes API client yet: pod " + ns + "/" + name + " must pass /filter first");
  }

 private:
  void Print(const json& j) {
    std::lock_guard<std::mutex> lock(mu_);
    std::cout << j.dump() << std::endl;
  }
  std::mutex mu_;
};

// {"node-name": <hami.io/node-nvidia-register value, as a string or as the JSON array>}
Status LoadInventory(const std::string& path, scheduler::Extender* extender, int* nodes) {
  std::ifstream in(path);
  if (!in) return NotFound("inventory file " + path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  json doc = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object())
    return InvalidArgument("inventory file " + path + ": want {\"node\": <hami.io/node-nvidia-register>, ...}");
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    std::string reg = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
    auto node = scheduler::hami::DecodeNodeRegister(it.key(), reg);
    if (!node.ok())
      return InvalidArgument("inventory file " + path + " node " + it.key() + ": " + node.status().message());
    GS_RETURN_IF_ERROR(extender->UpsertNode(std::move(*node)));
    ++*nodes;
  }
  return Status::Ok();
}

}  // namespace

int SchedulerCommand(const std::vector<std::string>& args) {
  std::string address = "127.0.0.1", inventory, node_policy = "binpack", gpu_policy = "spread";
  int64_t port = 9395;
  FlagSet flags("scheduler",
                "kube-scheduler extender for fractional GPU requests (HAMi's resources and annotations).\n"
                "Serves POST <prefix>/filter, /prioritize, /bind (nodeCacheCapable: true) and GET /healthz.\n"
                "For now the node inventory comes from --inventory and bind prints its API calls.");
  flags.String("address", &address, "address to listen on", "GS_SCHEDULER_ADDRESS");
  flags.Int("port", &port, "port to listen on (0 = any free port, printed)", 0, 65535, "GS_SCHEDULER_PORT");
  flags.String("inventory", &inventory, "JSON file {\"node\": <hami.io/node-nvidia-register value>, ...}",
               "GS_SCHEDULER_INVENTORY");
  flags.String("node-policy", &node_policy, "default node policy: binpack or spread (pods may override)");
  flags.String("gpu-policy", &gpu_policy, "default GPU policy: binpack or spread (pods may override)");
  std::vector<std::string> rest;
  Status s = flags.Parse(args, &rest);
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  if (!s.ok()) {
    std::cerr << "gpuslice scheduler: " << s.message() << "\n" << flags.Usage();
    return 2;
  }
  auto np = scheduler::ParsePolicy(node_policy);
  auto gp = scheduler::ParsePolicy(gpu_policy);
  if (!np.ok() || !gp.ok()) {
    std::cerr << "gpuslice scheduler: --node-policy/--gpu-policy: " << (np.ok() ? gp.status() : np.status()).message()
              << "\n";
    return 2;
  }
  // Block the stop signals before any thread starts; one thread waits for them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  PrintingBinder binder;
  scheduler::ExtenderOptions options;
  options.defaults = scheduler::Policies{*np, *gp};
  options.now_unix_seconds = [] {
    return static_cast<int64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  };
  scheduler::Extender extender(options, &binder);
  int nodes = 0;
  if (!inventory.empty()) {
    s = LoadInventory(inventory, &extender, &nodes);
    if (!s.ok()) {
      std::cerr << "gpuslice scheduler: " << s.message() << "\n";
      return 1;
    }
  }
  scheduler::ExtenderHttpServer server(&extender);
  auto bound = server.Bind(address, static_cast<int>(port));
  if (!bound.ok()) {
    std::cerr << "gpuslice scheduler: " << bound.status().message() << "\n";
    return 1;
  }
  std::cerr << "gpuslice scheduler: listening on " << address << ":" << *bound << " with " << nodes
            << " node(s); policies node=" << node_policy << " gpu=" << gpu_policy << std::endl;
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop, &sig);
    server.Stop();
  });
  bool ok = server.Serve();
  pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter if Serve failed first
  waiter.join();
  return ok ? 0 : 1;
}

}  // namespace gs::cli
