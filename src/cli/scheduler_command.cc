#include "src/cli/scheduler_command.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "src/common/flags.h"
#include "src/kube/client.h"
#include "src/kube/config.h"
#include "src/scheduler/extender.h"
#include "src/scheduler/hami_format.h"
#include "src/scheduler/pod_spec.h"
#include "src/scheduler/request.h"
#include "src/scheduler/serve.h"

namespace gs::cli {
namespace {

using nlohmann::json;

// Without an API server (--inventory alone), bind's API calls are printed (one JSON line
// each) instead of sent: the extender can be driven by hand or by a test harness.
class PrintingBinder : public scheduler::KubeBinder {
 public:
  Status BindPod(const std::string& ns, const std::string& name, const std::string& uid, const std::string& node,
                 const scheduler::hami::Annotations& a) override {
    Print(json{{"bind", ns + "/" + name}, {"uid", uid}, {"node", node}, {"annotations", a}});
    return Status::Ok();
  }
  StatusOr<std::string> GetPod(const std::string& ns, const std::string& name) override {
    return Unavailable("no Kubernetes API configured (--kubeconfig or --in-cluster): pod " + ns + "/" + name +
                       " must pass /filter first");
  }

 private:
  void Print(const json& j) {
    std::lock_guard<std::mutex> lock(mu_);
    std::cout << j.dump() << std::endl;
  }
  std::mutex mu_;
};

// Where the API server is: --in-cluster, --kubeconfig, or (when neither they nor
// --inventory are given) $KUBECONFIG. No API at all is offline mode (nullopt).
StatusOr<std::optional<kube::ClientConfig>> ApiConfig(bool in_cluster, std::string kubeconfig,
                                                      const std::string& context, bool have_inventory) {
  if (in_cluster && !kubeconfig.empty()) return InvalidArgument("--in-cluster and --kubeconfig exclude each other");
  if (!context.empty() && in_cluster) return InvalidArgument("--context needs a kubeconfig, not --in-cluster");
  if (in_cluster) {
    auto c = kube::InClusterConfig();
    if (!c.ok()) return c.status();
    return std::optional<kube::ClientConfig>(std::move(*c));
  }
  if (kubeconfig.empty() && !have_inventory) {
    const char* env = std::getenv("KUBECONFIG");
    if (env != nullptr) kubeconfig = env;
    if (kubeconfig.find(':') != std::string::npos)
      return InvalidArgument("KUBECONFIG lists several files (" + kubeconfig +
                             "); merging them is not supported: name one with --kubeconfig");
  }
  if (kubeconfig.empty()) {
    if (!context.empty()) return InvalidArgument("--context needs --kubeconfig (or KUBECONFIG)");
    return std::optional<kube::ClientConfig>();
  }
  auto c = kube::LoadKubeconfig(kubeconfig, context);
  if (!c.ok()) return c.status();
  return std::optional<kube::ClientConfig>(std::move(*c));
}

// The resource-name flags: each an extended resource name, no two alike. The error names
// the flag.
Status CheckResourceNames(const std::vector<std::pair<const char*, const std::string*>>& names) {
  for (size_t i = 0; i < names.size(); ++i) {
    Status s = scheduler::CheckExtendedResourceName(*names[i].second);
    if (!s.ok()) return InvalidArgument(std::string("--") + names[i].first + ": " + s.message());
    for (size_t j = 0; j < i; ++j)
      if (*names[j].second == *names[i].second)
        return InvalidArgument(std::string("--") + names[i].first + " and --" + names[j].first + " are both '" +
                               *names[i].second + "': each resource needs its own name");
  }
  return Status::Ok();
}

}  // namespace

int SchedulerCommand(const std::vector<std::string>& args) {
  std::string address = "127.0.0.1", inventory, node_policy = "binpack", gpu_policy = "spread";
  std::string kubeconfig, context;
  bool in_cluster = false;
  int64_t port = 9395;
  int64_t webhook_port = 0;
  std::string webhook_address = "0.0.0.0", tls_cert, tls_key, scheduler_name = "gpuslice-scheduler", trusted_users;
  scheduler::PodSpecOptions resources;
  int64_t default_memory = resources.default_memory_mib, default_cores = resources.default_cores,
          default_gpu_num = resources.default_gpu_num, memory_factor = resources.memory_factor;
  FlagSet flags(
      "scheduler",
      "kube-scheduler extender for fractional GPU requests (HAMi's resources and annotations).\n"
      "Serves POST <prefix>/filter, /prioritize, /bind (nodeCacheCapable: true), GET /healthz and GET /metrics.\n"
      "With --kubeconfig, --in-cluster or $KUBECONFIG, nodes' GPUs come from their\n"
      "hami.io/node-nvidia-register annotations, the ledger is rebuilt from the pods' decisions, and\n"
      "bind writes the decision and the Binding through the API (refused until that first sync).\n"
      "Offline, with --inventory alone, bind prints its API calls as JSON lines instead.");
  flags.String("address", &address, "address to listen on", "GS_SCHEDULER_ADDRESS");
  flags.Int("port", &port, "port to listen on (0 = any free port, printed)", 0, 65535, "GS_SCHEDULER_PORT");
  flags.String("inventory", &inventory, "JSON file {\"node\": <hami.io/node-nvidia-register value>, ...}",
               "GS_SCHEDULER_INVENTORY");
  flags.String("kubeconfig", &kubeconfig,
               "kubeconfig file of the API server to use (default $KUBECONFIG unless --inventory is given)");
  flags.String("context", &context, "kubeconfig context (default: its current-context)");
  flags.Bool("in-cluster", &in_cluster, "use the pod's service account and KUBERNETES_SERVICE_HOST/PORT");
  flags.Int("webhook-port", &webhook_port,
            "serve the mutating admission webhook (POST .../mutate) over HTTPS on this port (0 = no webhook)", 0,
            65535);
  flags.String("webhook-address", &webhook_address, "address the webhook listens on");
  flags.String("tls-cert", &tls_cert, "the webhook's TLS certificate (PEM file)");
  flags.String("tls-key", &tls_key, "the webhook's TLS private key (PEM file)");
  flags.String(
      "scheduler-name", &scheduler_name,
      "the webhook sets spec.schedulerName of GPU pods to this (kube-scheduler profile that uses the extender)");
  flags.String("webhook-trusted-users", &trusted_users,
               "comma list of users allowed to change hami.io decision annotations on pod updates (the scheduler's "
               "and the node agent's service accounts, as system:serviceaccount:<ns>:<name>)");
  flags.String("node-policy", &node_policy, "default node policy: binpack or spread (pods may override)");
  flags.String("gpu-policy", &gpu_policy, "default GPU policy: binpack or spread (pods may override)");
  flags.String("resource-count-name", &resources.count_name,
               "resource of a container's card count (HAMi's resourceCountName; the node agents' --resource-name)");
  flags.String("resource-memory-name", &resources.memory_name,
               "resource of a container's memory per card (HAMi's resourceMemoryName)");
  flags.String("resource-memory-percentage-name", &resources.memory_percent_name,
               "resource of a container's memory per card in percent (HAMi's resourceMemoryPercentageName)");
  flags.String("resource-core-name", &resources.cores_name,
               "resource of a container's compute share per card (HAMi's resourceCoreName)");
  flags.Int("default-memory", &default_memory,
            "MiB per card for a container asking no memory (HAMi's defaultMemory; 0 = the whole card)", 0,
            scheduler::kMaxDefaultMemoryMib);
  flags.Int("default-cores", &default_cores,
            "percent of each card for a container asking no cores and some memory (HAMi's defaultCores; a "
            "container asking no memory gets its cards exclusively)",
            0, 100);
  flags.Int("default-gpu-num", &default_gpu_num,
            "cards for a container asking memory or cores without a card count (HAMi's defaultGPUNum; 0 = such "
            "a container is refused)",
            0, scheduler::kMaxDefaultGpuNum);
  flags.Int("memory-factor", &memory_factor, "MiB per unit of the memory resource (HAMi's memoryFactor)", 1,
            scheduler::kMaxMemoryFactor);
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
  Status names = CheckResourceNames({{"resource-count-name", &resources.count_name},
                                     {"resource-memory-name", &resources.memory_name},
                                     {"resource-memory-percentage-name", &resources.memory_percent_name},
                                     {"resource-core-name", &resources.cores_name}});
  if (!names.ok()) {
    std::cerr << "gpuslice scheduler: " << names.message() << "\n";
    return 2;
  }
  resources.default_memory_mib = default_memory;
  resources.default_cores = static_cast<int>(default_cores);
  resources.default_gpu_num = static_cast<int>(default_gpu_num);
  resources.memory_factor = memory_factor;
  if (webhook_port > 0 && (tls_cert.empty() || tls_key.empty())) {
    std::cerr << "gpuslice scheduler: --webhook-port needs --tls-cert and --tls-key (the API server calls webhooks "
                 "over HTTPS only)\n";
    return 2;
  }
  if (webhook_port == 0 && (!tls_cert.empty() || !tls_key.empty())) {
    std::cerr << "gpuslice scheduler: --tls-cert/--tls-key are for the webhook: set --webhook-port too\n";
    return 2;
  }
  auto api = ApiConfig(in_cluster, kubeconfig, context, !inventory.empty());
  if (!api.ok()) {
    std::cerr << "gpuslice scheduler: " << api.status().message() << "\n";
    return 2;
  }
  if (api->has_value() && !inventory.empty()) {
    std::cerr << "gpuslice scheduler: --inventory is for offline use; with an API server the nodes' GPUs come from "
                 "their hami.io/node-nvidia-register annotations\n";
    return 2;
  }
  std::unique_ptr<kube::Client> client;
  if (api->has_value()) {
    auto c = kube::Client::Create(std::move(**api));
    if (!c.ok()) {
      std::cerr << "gpuslice scheduler: " << c.status().message() << "\n";
      return 1;
    }
    client = std::move(*c);
  }
  // Block the stop signals before any thread starts; one thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::atomic<bool> stop{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    stop = true;
  });

  PrintingBinder printing;
  scheduler::ServeOptions o;
  o.address = address;
  o.port = static_cast<int>(port);
  o.defaults = scheduler::Policies{*np, *gp};
  o.pod_spec = resources;
  o.client = client.get();
  o.offline_binder = &printing;
  o.inventory = inventory;
  o.webhook.port = static_cast<int>(webhook_port);
  o.webhook.address = webhook_address;
  o.webhook.tls_cert = tls_cert;
  o.webhook.tls_key = tls_key;
  o.webhook.scheduler_name = scheduler_name;
  std::stringstream users(trusted_users);
  for (std::string u; std::getline(users, u, ',');)
    if (!u.empty()) o.webhook.trusted_users.push_back(u);
  auto log_mu = std::make_shared<std::mutex>();
  o.log = [log_mu](const std::string& line) {
    std::lock_guard<std::mutex> lock(*log_mu);
    std::cerr << "gpuslice scheduler: " << line << std::endl;
  };
  Status served = scheduler::Serve(o, stop);
  if (!served.ok()) std::cerr << "gpuslice scheduler: " << served.message() << "\n";
  // Wakes the waiter (blocked in sigwait for SIGTERM) when Serve ended first; it ends itself.
  pthread_kill(waiter.native_handle(), SIGTERM);  // NOLINT(bugprone-bad-signal-to-kill-thread)
  waiter.join();
  return served.ok() ? 0 : 1;
}

}  // namespace gs::cli
