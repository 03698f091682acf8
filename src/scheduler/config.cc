#include "src/scheduler/config.h"

#include <cstdlib>
#include <sstream>
#include <utility>

#include "src/common/flags.h"
#include "src/scheduler/pod_spec.h"
#include "src/scheduler/request.h"

namespace gs::scheduler {
namespace {

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
    Status s = CheckExtendedResourceName(*names[i].second);
    if (!s.ok()) return InvalidArgument(std::string("--") + names[i].first + ": " + s.message());
    for (size_t j = 0; j < i; ++j)
      if (*names[j].second == *names[i].second)
        return InvalidArgument(std::string("--") + names[i].first + " and --" + names[j].first + " are both '" +
                               *names[i].second + "': each resource needs its own name");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<SchedulerConfig> LoadSchedulerConfig(const std::vector<std::string>& args, std::string* usage) {
  SchedulerConfig c;
  ServeOptions& o = c.serve;
  std::string node_policy = "binpack", gpu_policy = "spread", kubeconfig, context, trusted_users;
  o.webhook.scheduler_name = "gpuslice-scheduler";
  bool in_cluster = false;
  int64_t port = o.port, webhook_port = 0;
  PodSpecOptions& resources = o.pod_spec;
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
  flags.String("address", &o.address, "address to listen on", "GS_SCHEDULER_ADDRESS");
  flags.Int("port", &port, "port to listen on (0 = any free port, printed)", 0, 65535, "GS_SCHEDULER_PORT");
  flags.String("inventory", &o.inventory, "JSON file {\"node\": <hami.io/node-nvidia-register value>, ...}",
               "GS_SCHEDULER_INVENTORY");
  flags.String("kubeconfig", &kubeconfig,
               "kubeconfig file of the API server to use (default $KUBECONFIG unless --inventory is given)");
  flags.String("context", &context, "kubeconfig context (default: its current-context)");
  flags.Bool("in-cluster", &in_cluster, "use the pod's service account and KUBERNETES_SERVICE_HOST/PORT");
  flags.Int("webhook-port", &webhook_port,
            "serve the mutating admission webhook (POST .../mutate) over HTTPS on this port (0 = no webhook)", 0,
            65535);
  flags.String("webhook-address", &o.webhook.address, "address the webhook listens on");
  flags.String("tls-cert", &o.webhook.tls_cert, "the webhook's TLS certificate (PEM file)");
  flags.String("tls-key", &o.webhook.tls_key, "the webhook's TLS private key (PEM file)");
  flags.String(
      "scheduler-name", &o.webhook.scheduler_name,
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
            kMaxDefaultMemoryMib);
  flags.Int("default-cores", &default_cores,
            "percent of each card for a container asking no cores and some memory (HAMi's defaultCores; a "
            "container asking no memory gets its cards exclusively)",
            0, 100);
  flags.Int("default-gpu-num", &default_gpu_num,
            "cards for a container asking memory or cores without a card count (HAMi's defaultGPUNum; 0 = such "
            "a container is refused)",
            0, kMaxDefaultGpuNum);
  flags.Int("memory-factor", &memory_factor, "MiB per unit of the memory resource (HAMi's memoryFactor)", 1,
            kMaxMemoryFactor);
  std::vector<std::string> rest;
  Status parsed = flags.Parse(args, &rest);
  *usage = flags.help_requested() ? flags.Usage() : "";
  if (flags.help_requested()) return c;
  if (!parsed.ok()) return InvalidArgument(parsed.message() + "\n" + flags.Usage());

  auto np = ParsePolicy(node_policy);
  auto gp = ParsePolicy(gpu_policy);
  if (!np.ok() || !gp.ok())
    return InvalidArgument("--node-policy/--gpu-policy: " + (np.ok() ? gp.status() : np.status()).message());
  o.defaults = Policies{*np, *gp};
  GS_RETURN_IF_ERROR(CheckResourceNames({{"resource-count-name", &resources.count_name},
                                         {"resource-memory-name", &resources.memory_name},
                                         {"resource-memory-percentage-name", &resources.memory_percent_name},
                                         {"resource-core-name", &resources.cores_name}}));
  resources.default_memory_mib = default_memory;
  resources.default_cores = static_cast<int>(default_cores);
  resources.default_gpu_num = static_cast<int>(default_gpu_num);
  resources.memory_factor = memory_factor;
  o.port = static_cast<int>(port);
  o.webhook.port = static_cast<int>(webhook_port);
  if (webhook_port > 0 && (o.webhook.tls_cert.empty() || o.webhook.tls_key.empty()))
    return InvalidArgument(
        "--webhook-port needs --tls-cert and --tls-key (the API server calls webhooks over HTTPS "
        "only)");
  if (webhook_port == 0 && (!o.webhook.tls_cert.empty() || !o.webhook.tls_key.empty()))
    return InvalidArgument("--tls-cert/--tls-key are for the webhook: set --webhook-port too");
  std::stringstream users(trusted_users);
  for (std::string u; std::getline(users, u, ',');)
    if (!u.empty()) o.webhook.trusted_users.push_back(u);

  GS_ASSIGN_OR_RETURN(c.api, ApiConfig(in_cluster, kubeconfig, context, !o.inventory.empty()));
  if (c.api && !o.inventory.empty())
    return InvalidArgument(
        "--inventory is for offline use; with an API server the nodes' GPUs come from their "
        "hami.io/node-nvidia-register annotations");
  return c;
}

}  // namespace gs::scheduler
