// deploy/: the Kustomize bases and overlays hold together, the DaemonSet has what a node
// agent needs, the scheduler's pieces (kube-scheduler configuration, extender, webhook,
// certificates, RBAC) agree with each other and with the flags `gpuslice` really has,
// the Grafana dashboard queries only metrics the agent exports, and the node image
// builds with buildah (when present) and runs.
#include <glob.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "src/common/file.h"
#include "src/node/metrics.h"
#include "tests/harness.h"

namespace fs = std::filesystem;

namespace gs::testing {
namespace {

std::string Src() {
  return SourceDir();
}

std::vector<YAML::Node> Docs(const std::string& path) {
  return YAML::LoadAllFromFile(path);
}

std::string Str(const YAML::Node& n) {
  return n && n.IsScalar() ? n.as<std::string>() : std::string();
}

using ObjectKey = std::pair<std::string, std::string>;  // kind, name

// Kinds that have no namespace; every other object must name one (or get it from its
// kustomization), or `kubectl apply` puts it in the user's current namespace.
bool ClusterScoped(const std::string& kind) {
  static const std::set<std::string> kinds = {"Namespace", "ClusterRole", "ClusterRoleBinding",
                                              "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"};
  return kinds.count(kind) > 0;
}

bool HasPartOfLabel(const YAML::Node& labels_field) {
  for (const auto& l : labels_field)
    if (Str(l["pairs"]["app.kubernetes.io/part-of"]) == "gpuslice") return true;
  return false;
}

// Every kustomization's resources, generator files and patches exist and parse; every
// document has kind and name, a namespace where it needs one, and the part-of label; a
// patch or a generator with `behavior` targets something the bases define. `objects`
// collects the resources' documents by (kind, name).
void CheckKustomization(const std::string& dir, std::map<ObjectKey, YAML::Node>* objects, bool labelled_above = false,
                        bool namespaced_above = false) {
  SCOPED_TRACE(dir);
  YAML::Node k = YAML::LoadFile(dir + "/kustomization.yaml");
  ASSERT_EQ(k["kind"].as<std::string>(), "Kustomization");
  bool labelled = labelled_above || HasPartOfLabel(k["labels"]);
  bool namespaced = namespaced_above || !Str(k["namespace"]).empty();
  for (const auto& r : k["resources"]) {
    std::string p = dir + "/" + r.as<std::string>();
    ASSERT_TRUE(fs::exists(p)) << p;
    if (fs::is_directory(p)) {
      CheckKustomization(p, objects, labelled, namespaced);
      continue;
    }
    for (const auto& d : Docs(p)) {
      ASSERT_TRUE(d["apiVersion"] && d["kind"] && d["metadata"]["name"]) << p;
      std::string kind = d["kind"].as<std::string>(), name = d["metadata"]["name"].as<std::string>();
      if (!ClusterScoped(kind)) {
        EXPECT_TRUE(namespaced || !Str(d["metadata"]["namespace"]).empty())
            << p << ": " << kind << " " << name << " names no namespace";
      }
      EXPECT_TRUE(labelled || Str(d["metadata"]["labels"]["app.kubernetes.io/part-of"]) == "gpuslice")
          << p << ": " << kind << " " << name << " lacks app.kubernetes.io/part-of: gpuslice";
      (*objects)[{kind, name}] = d;
    }
  }
  for (const auto& g : k["configMapGenerator"]) {
    std::string name = Str(g["name"]);
    ASSERT_FALSE(name.empty());
    EXPECT_TRUE(namespaced || !Str(g["namespace"]).empty()) << "ConfigMap " << name << " names no namespace";
    if (g["behavior"] && Str(g["behavior"]) != "create") {
      EXPECT_TRUE(objects->count({"ConfigMap", name})) << "generator " << name << " replaces nothing";
    }
    YAML::Node cm;
    cm["kind"] = "ConfigMap";
    cm["metadata"]["name"] = name;
    for (const auto& f : g["files"]) {
      std::string spec = f.as<std::string>();
      std::string key = spec.substr(0, spec.find('=')), file = spec.substr(spec.find('=') + 1);
      if (spec.find('=') == std::string::npos) key = fs::path(file).filename();
      std::string p = dir + "/" + file;
      ASSERT_TRUE(fs::exists(p)) << p;
      auto text = ReadFile(p);
      ASSERT_TRUE(text.ok()) << text.status().message();
      EXPECT_NO_THROW(YAML::Load(*text)) << p;  // JSON is YAML too
      cm["data"][key] = *text;
    }
    (*objects)[{"ConfigMap", name}] = cm;
  }
  for (const auto& patch : k["patches"]) {
    std::string p = dir + "/" + patch["path"].as<std::string>();
    ASSERT_TRUE(fs::exists(p)) << p;
    if (patch["target"]) {  // a JSON patch: a list of operations on the target
      ObjectKey target{Str(patch["target"]["kind"]), Str(patch["target"]["name"])};
      EXPECT_TRUE(objects->count(target)) << p << " targets " << target.first << " " << target.second;
      YAML::Node ops = YAML::LoadFile(p);
      ASSERT_TRUE(ops.IsSequence()) << p;
      for (const auto& op : ops) EXPECT_TRUE(op["op"] && op["path"]) << p;
      continue;
    }
    for (const auto& d : Docs(p)) {  // a patch must target something the bases define
      ObjectKey target{d["kind"].as<std::string>(), d["metadata"]["name"].as<std::string>()};
      EXPECT_TRUE(objects->count(target)) << p;
      // Annotations and labels merge as kustomize merges them (cert-manager's lives in a patch).
      for (const char* field : {"annotations", "labels"})
        for (auto kv : d["metadata"][field]) (*objects)[target]["metadata"][field][kv.first] = kv.second;
    }
  }
}

const char* const kKustomizations[] = {"base",
                                       "overlays/cdi",
                                       "overlays/hook",
                                       "scheduler",
                                       "overlays/fractional",
                                       "overlays/scheduler-v1.20",
                                       "overlays/scheduler-cert-manager"};

// An object by kind and name; undefined (false) if there is none.
YAML::Node Get(const std::map<ObjectKey, YAML::Node>& objects, const ObjectKey& key) {
  auto it = objects.find(key);
  return it == objects.end() ? YAML::Node(YAML::NodeType::Undefined) : it->second;
}

std::map<ObjectKey, YAML::Node> Objects(const std::string& kustomization) {
  std::map<ObjectKey, YAML::Node> objects;
  CheckKustomization(Src() + "/deploy/" + kustomization, &objects);
  return objects;
}

TEST(Deploy, KustomizationsHoldTogether) {
  // Every kustomization in deploy/ is checked here and rendered below.
  std::set<std::string> listed(std::begin(kKustomizations), std::end(kKustomizations));
  for (const auto& e : fs::recursive_directory_iterator(Src() + "/deploy")) {
    if (e.path().filename() != "kustomization.yaml") continue;
    EXPECT_TRUE(listed.count(fs::relative(e.path().parent_path(), Src() + "/deploy").string()))
        << e.path() << " is not in kKustomizations";
  }
  for (const char* d : kKustomizations) {
    auto objects = Objects(d);
    std::string dir = d;
    bool scheduler = dir == "scheduler" || dir == "overlays/fractional" || dir.rfind("overlays/scheduler-", 0) == 0;
    EXPECT_EQ(objects.count({"DaemonSet", "gpuslice-node"}), dir == "scheduler" ? 0u : 1u) << d;
    EXPECT_EQ(objects.count({"Deployment", "gpuslice-scheduler"}), scheduler ? 1u : 0u) << d;
  }
}

TEST(Deploy, DaemonSetHasWhatTheAgentNeeds) {
  YAML::Node ds;
  for (const auto& d : Docs(Src() + "/deploy/base/daemonset.yaml"))
    if (d["kind"].as<std::string>() == "DaemonSet") ds = d;
  ASSERT_TRUE(ds);
  auto spec = ds["spec"]["template"]["spec"];
  EXPECT_TRUE(spec["nodeSelector"]);
  // Host pids of container processes are resolved from the host's /proc (src/node/host_pids.h).
  EXPECT_TRUE(spec["hostPID"] && spec["hostPID"].as<bool>()) << "the agent needs hostPID: true";
  auto c = spec["containers"][0];
  // Liveness restarts a stuck agent; readiness also waits for the kubelet's registration.
  EXPECT_EQ(c["livenessProbe"]["httpGet"]["path"].as<std::string>(), "/livez");
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/healthz");
  EXPECT_TRUE(c["resources"]["requests"]);
  // The per-container tmpfs mounts the agent makes under the state directory must reach the
  // host, where the runtime bind-mounts them into containers.
  bool propagated = false;
  for (const auto& m : c["volumeMounts"])
    if (m["mountPath"].as<std::string>() == "/var/lib/gpuslice")
      propagated = m["mountPropagation"] && m["mountPropagation"].as<std::string>() == "Bidirectional";
  EXPECT_TRUE(propagated) << "the state volume needs mountPropagation: Bidirectional";
  std::map<std::string, std::string> host_paths;
  for (const auto& v : spec["volumes"])
    if (v["hostPath"]) host_paths[v["name"].as<std::string>()] = v["hostPath"]["path"].as<std::string>();
  std::set<std::string> mounted;
  for (const auto& m : c["volumeMounts"]) mounted.insert(m["mountPath"].as<std::string>());
  // Directories, not sockets: the kubelet recreates its sockets on restart.
  EXPECT_EQ(host_paths["device-plugins"], "/var/lib/kubelet/device-plugins");
  EXPECT_EQ(host_paths["pod-resources"], "/var/lib/kubelet/pod-resources");
  EXPECT_EQ(host_paths["state"], "/var/lib/gpuslice");
  for (const char* m :
       {"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources", "/var/lib/gpuslice", "/host"})
    EXPECT_TRUE(mounted.count(m)) << m;
}

TEST(Deploy, DashboardQueriesOnlyMetricsTheAgentExports) {
  node::GpuUsage g;
  g.uuid = "GPU-1";
  node::SliceUsage s;
  std::string exposition = node::RenderMetrics({g}, {s}, {});
  std::set<std::string> exported;
  std::regex name_re(R"(^# TYPE (\S+) (\S+))");
  std::istringstream in(exposition);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, name_re)) continue;
    exported.insert(m[1]);
    if (m[2] == "histogram")  // a histogram's series carry these suffixes
      for (const char* suffix : {"_bucket", "_sum", "_count"}) exported.insert(m[1].str() + suffix);
  }
  std::ifstream f(Src() + "/deploy/grafana/gpuslice-dashboard.json");
  nlohmann::json dash = nlohmann::json::parse(f);
  ASSERT_TRUE(dash.contains("panels"));
  ASSERT_GE(dash["panels"].size(), 6u);
  std::regex metric_re(R"((gpuslice_[a-z_]+|container_accelerator_[a-z_]+))");
  int queries = 0;
  std::set<int> ids;
  for (const auto& p : dash["panels"]) {
    EXPECT_TRUE(ids.insert(p["id"].get<int>()).second) << "duplicate panel id";
    EXPECT_TRUE(p.contains("gridPos") && p.contains("type") && p.contains("title"));
    for (const auto& t : p["targets"]) {
      std::string expr = t["expr"];
      ++queries;
      for (std::sregex_iterator it(expr.begin(), expr.end(), metric_re), end; it != end; ++it)
        EXPECT_TRUE(exported.count((*it)[1])) << (*it)[1] << " is not exported by the node agent";
    }
  }
  EXPECT_GT(queries, 8);
  for (const auto& v : dash["templating"]["list"]) {
    if (!v.contains("query") || !v["query"].is_string()) continue;
    std::string q = v["query"];
    for (std::sregex_iterator it(q.begin(), q.end(), metric_re), end; it != end; ++it) {
      EXPECT_TRUE(exported.count((*it)[1])) << (*it)[1];
    }
  }
}

// --- the scheduler (deploy/scheduler and the overlays that use it) ---------------------

// Flags of `gpuslice <command>`, from its --help: name -> whether it takes a value.
std::map<std::string, bool> HelpFlags(const std::string& command, std::string* help = nullptr) {
  Result r = RunProcess({GpusliceBin(), command, "--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  std::map<std::string, bool> flags;
  std::regex flag_re(R"(^\s+--([a-z0-9-]+)(?: (string|int|number))?(\s|$))");
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, flag_re)) flags[m[1]] = m[2].matched;
  }
  EXPECT_GT(flags.size(), 5u) << r.out;
  if (help != nullptr) *help = r.out;
  return flags;
}

std::vector<std::string> Strings(const YAML::Node& seq) {
  std::vector<std::string> out;
  for (const auto& v : seq) out.push_back(v.as<std::string>());
  return out;
}

// A container's args as `gpuslice` reads them: the command, then --flag value, --flag=value
// or a bare boolean --flag. Each must be a flag the command has.
std::map<std::string, std::string> ParseArgs(const std::vector<std::string>& args,
                                             const std::map<std::string, bool>& known, std::string* command) {
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      if (i == 0)
        *command = a;
      else
        ADD_FAILURE() << "stray argument '" << a << "'";
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = known.find(name);
    if (it == known.end()) {
      ADD_FAILURE() << "--" << name << " is not a flag of `gpuslice " << *command << "`";
      continue;
    }
    if (!has_value) {
      if (!it->second) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        ADD_FAILURE() << "--" << name << " has no value";
      }
    }
    out[name] = value;
  }
  return out;
}

YAML::Node Container(const YAML::Node& workload, const std::string& name) {
  for (const auto& c : workload["spec"]["template"]["spec"]["containers"])
    if (Str(c["name"]) == name) return c;
  return YAML::Node(YAML::NodeType::Undefined);
}

// A port given by number or by the name of one of the container's ports; -1 if neither.
int PortOf(const YAML::Node& container, const YAML::Node& port) {
  std::string p = Str(port);
  if (!p.empty() && std::all_of(p.begin(), p.end(), ::isdigit)) return std::stoi(p);
  for (const auto& cp : container["ports"])
    if (Str(cp["name"]) == p) return cp["containerPort"].as<int>();
  return -1;
}

bool Contains(const YAML::Node& seq, const std::string& value) {
  for (const auto& v : seq)
    if (Str(v) == value) return true;
  return false;
}

// The resources `gpuslice scheduler` reads with these flags (HAMi's names where a flag is
// not given), each with its ignoredByScheduler: only the card count is checked by
// kube-scheduler, against the node's allocatable (the node agent's slots).
std::map<std::string, bool> SchedulerResources(const std::map<std::string, std::string>& flags) {
  auto name = [&](const char* flag, const char* hami) {
    auto it = flags.find(flag);
    return it == flags.end() || it->second.empty() ? std::string(hami) : it->second;
  };
  return {{name("resource-count-name", "nvidia.com/gpu"), false},
          {name("resource-memory-name", "nvidia.com/gpumem"), true},
          {name("resource-memory-percentage-name", "nvidia.com/gpumem-percentage"), true},
          {name("resource-core-name", "nvidia.com/gpucores"), true}};
}

// One extender entry, in KubeSchedulerConfiguration or (legacy) Policy form, against the
// flags the gpuslice container runs with.
void CheckExtender(const YAML::Node& e, bool legacy, const std::map<std::string, std::string>& flags) {
  std::smatch m;
  std::string url = Str(e["urlPrefix"]);
  ASSERT_TRUE(std::regex_match(url, m, std::regex(R"(http://([^/:]+):([0-9]+)/?)"))) << url;
  EXPECT_EQ(m[1].str(), flags.at("address")) << url;
  EXPECT_EQ(m[2].str(), flags.at("port")) << url << ": not the port `gpuslice scheduler` listens on";
  // The verbs the extender serves (extender_http.cc): POST .../filter, /prioritize, /bind.
  EXPECT_EQ(Str(e["filterVerb"]), "filter");
  EXPECT_EQ(Str(e["prioritizeVerb"]), "prioritize");
  EXPECT_EQ(Str(e["bindVerb"]), "bind");
  EXPECT_GE(e["weight"].as<int>(), 1);
  EXPECT_EQ(Str(e[legacy ? "enableHttps" : "enableHTTPS"]), "false") << "the extender serves plain HTTP";
  EXPECT_EQ(Str(e["nodeCacheCapable"]), "true") << "the extender reads NodeNames only";
  EXPECT_NE(Str(e["ignorable"]), "true") << "a GPU pod placed without the extender has no decision";
  if (legacy)  // time.Duration in the Policy form: nanoseconds, not "10s"
    EXPECT_GE(std::stoll(Str(e["httpTimeout"])), 1000000000LL);
  else
    EXPECT_TRUE(std::regex_match(Str(e["httpTimeout"]), std::regex("[0-9]+(ms|s|m)"))) << Str(e["httpTimeout"]);
  std::map<std::string, bool> managed;
  for (const auto& r : e["managedResources"]) managed[Str(r["name"])] = Str(r["ignoredByScheduler"]) == "true";
  EXPECT_EQ(managed, SchedulerResources(flags))
      << "managedResources must be the four resources of `gpuslice scheduler`'s --resource-*-name flags (HAMi's "
         "by default), only the card count checked by kube-scheduler against the node's allocatable";
}

// kube-scheduler decodes its configuration strictly since v1 (1.25): a key its types do not
// have stops it at start. The keys of kubescheduler.config.k8s.io/v1 that this config may
// use (k8s.io/kube-scheduler config/v1 types.go, component-base's LeaderElection and
// ClientConnection), so a misspelt key fails here and not on a cluster.
void ExpectOnlyV1Keys(const YAML::Node& node, const std::set<std::string>& known, const std::string& where) {
  ASSERT_TRUE(node.IsMap()) << where;
  for (const auto& kv : node)
    EXPECT_TRUE(known.count(kv.first.as<std::string>()))
        << where << "." << kv.first.as<std::string>() << ": not a field of kube-scheduler's v1 configuration";
}

void ExpectStrictV1Config(const YAML::Node& c) {
  ExpectOnlyV1Keys(c,
                   {"apiVersion", "kind", "parallelism", "leaderElection", "clientConnection", "enableProfiling",
                    "enableContentionProfiling", "percentageOfNodesToScore", "podInitialBackoffSeconds",
                    "podMaxBackoffSeconds", "profiles", "extenders", "delayCacheUntilActive"},
                   "");
  if (c["leaderElection"])
    ExpectOnlyV1Keys(c["leaderElection"],
                     {"leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock", "resourceName",
                      "resourceNamespace"},
                     "leaderElection");
  if (c["clientConnection"])
    ExpectOnlyV1Keys(c["clientConnection"], {"kubeconfig", "acceptContentTypes", "contentType", "qps", "burst"},
                     "clientConnection");
  for (const auto& p : c["profiles"])
    ExpectOnlyV1Keys(p, {"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"}, "profiles[]");
  for (const auto& e : c["extenders"]) {
    ExpectOnlyV1Keys(e,
                     {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
                      "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"},
                     "extenders[]");
    for (const auto& r : e["managedResources"])
      ExpectOnlyV1Keys(r, {"name", "ignoredByScheduler"}, "extenders[].managedResources[]");
  }
}

void CheckSchedulerConfig(const std::string& text, const std::string& api_version,
                          const std::map<std::string, std::string>& flags, const std::string& ns) {
  YAML::Node c = YAML::Load(text);
  if (api_version == "kubescheduler.config.k8s.io/v1") ExpectStrictV1Config(c);
  EXPECT_EQ(Str(c["apiVersion"]), api_version);
  EXPECT_EQ(Str(c["kind"]), "KubeSchedulerConfiguration");
  bool profile = false;
  for (const auto& p : c["profiles"]) profile |= Str(p["schedulerName"]) == flags.at("scheduler-name");
  EXPECT_TRUE(profile) << "no profile named --scheduler-name " << flags.at("scheduler-name")
                       << ": the webhook would send GPU pods to a scheduler that does not exist";
  // Its own lease, in our namespace: the default lease is the cluster scheduler's.
  EXPECT_EQ(Str(c["leaderElection"]["leaderElect"]), "true");
  EXPECT_FALSE(Str(c["leaderElection"]["resourceName"]).empty());
  EXPECT_NE(Str(c["leaderElection"]["resourceName"]), "kube-scheduler");
  EXPECT_EQ(Str(c["leaderElection"]["resourceNamespace"]), ns);
  ASSERT_EQ(c["extenders"].size(), 1u);
  CheckExtender(c["extenders"][0], false, flags);
}

TEST(Deploy, SchedulerPiecesAgree) {
  // The widest overlay: base, scheduler, the node agent's changes and the certificates.
  auto objects = Objects("overlays/scheduler-cert-manager");
  YAML::Node dep = Get(objects, {"Deployment", "gpuslice-scheduler"});
  YAML::Node ds = Get(objects, {"DaemonSet", "gpuslice-node"});
  ASSERT_TRUE(dep && ds);
  const std::string ns = Str(dep["metadata"]["namespace"]);
  EXPECT_EQ(ns, "gpuslice-system");
  EXPECT_EQ(dep["spec"]["replicas"].as<int>(), 1) << "the ledger is in-process: one instance";
  EXPECT_EQ(Str(dep["spec"]["strategy"]["type"]), "Recreate") << "never two ledgers at once";
  YAML::Node pod = dep["spec"]["template"];
  for (auto kv : dep["spec"]["selector"]["matchLabels"])
    EXPECT_EQ(Str(pod["metadata"]["labels"][kv.first.as<std::string>()]), Str(kv.second));

  YAML::Node g = Container(dep, "gpuslice"), ks = Container(dep, "kube-scheduler");
  ASSERT_TRUE(g && ks);
  EXPECT_EQ(Str(g["image"]), Str(Container(ds, "node")["image"])) << "one image for both roles";
  std::string command;
  auto flags = ParseArgs(Strings(g["args"]), HelpFlags("scheduler"), &command);
  EXPECT_EQ(command, "scheduler");
  EXPECT_EQ(flags["in-cluster"], "true");
  EXPECT_EQ(flags["address"], "127.0.0.1") << "bind is unauthenticated: loopback, for the pod's kube-scheduler";
  ASSERT_FALSE(flags["port"].empty());
  ASSERT_FALSE(flags["webhook-port"].empty());
  ASSERT_FALSE(flags["scheduler-name"].empty());
  const int webhook_port = std::stoi(flags["webhook-port"]);

  // The card count the scheduler reads is the resource the node agents serve (their
  // --resource-name, RESOURCE_NAME or config key resourceName), or no node would have it.
  {
    YAML::Node agent = Container(ds, "node");
    std::string node_command;
    auto node_flags = ParseArgs(Strings(agent["args"]), HelpFlags("node"), &node_command);
    std::string served = node_flags["resource-name"];
    for (const auto& e : agent["env"])
      if (served.empty() && Str(e["name"]) == "RESOURCE_NAME") served = Str(e["value"]);
    if (served.empty() && !node_flags["config"].empty()) {
      std::map<std::string, std::string> config_maps;
      for (const auto& v : ds["spec"]["template"]["spec"]["volumes"])
        if (v["configMap"]) config_maps[Str(v["name"])] = Str(v["configMap"]["name"]);
      for (const auto& m : agent["volumeMounts"])
        if (node_flags["config"].rfind(Str(m["mountPath"]) + "/", 0) == 0) {
          YAML::Node data = Get(objects, {"ConfigMap", config_maps[Str(m["name"])]})["data"];
          ASSERT_TRUE(data) << "--config " << node_flags["config"] << " is in no ConfigMap of the overlay";
          served = Str(YAML::Load(Str(data[fs::path(node_flags["config"]).filename().string()]))["resourceName"]);
        }
    }
    if (served.empty()) served = "nvidia.com/gpu";
    std::string count_name = flags["resource-count-name"].empty() ? "nvidia.com/gpu" : flags["resource-count-name"];
    EXPECT_EQ(served, count_name) << "the node agents serve " << served << ", the scheduler reads the card count as "
                                  << count_name << " (--resource-count-name)";
  }

  // The trusted users are the two service accounts that write decisions.
  std::set<std::string> trusted;
  std::stringstream users(flags["webhook-trusted-users"]);
  for (std::string u; std::getline(users, u, ',');) trusted.insert(u);
  const std::string sched_sa = Str(pod["spec"]["serviceAccountName"]);
  const std::string node_sa = Str(ds["spec"]["template"]["spec"]["serviceAccountName"]);
  const std::string node_ns = Str(ds["metadata"]["namespace"]).empty() ? ns : Str(ds["metadata"]["namespace"]);
  EXPECT_TRUE(objects.count({"ServiceAccount", sched_sa}));
  EXPECT_EQ(trusted, (std::set<std::string>{"system:serviceaccount:" + ns + ":" + sched_sa,
                                            "system:serviceaccount:" + node_ns + ":" + node_sa}));

  // The TLS files come from the secret the Certificate writes.
  std::map<std::string, std::string> volume_secret, volume_config;
  for (const auto& v : pod["spec"]["volumes"]) {
    if (v["secret"]) volume_secret[Str(v["name"])] = Str(v["secret"]["secretName"]);
    if (v["configMap"]) volume_config[Str(v["name"])] = Str(v["configMap"]["name"]);
  }
  auto secret_of = [&](const std::string& file) {
    for (const auto& m : g["volumeMounts"])
      if (file.rfind(Str(m["mountPath"]) + "/", 0) == 0) return volume_secret[Str(m["name"])];
    return std::string();
  };
  const std::string tls_secret = secret_of(flags["tls-cert"]);
  EXPECT_FALSE(tls_secret.empty()) << flags["tls-cert"] << " is in no secret volume";
  EXPECT_EQ(secret_of(flags["tls-key"]), tls_secret);

  // Probes: the webhook's HTTPS /healthz (the extender's is on loopback).
  EXPECT_EQ(Str(g["readinessProbe"]["httpGet"]["path"]), "/healthz");
  EXPECT_EQ(PortOf(g, g["readinessProbe"]["httpGet"]["port"]), webhook_port);
  EXPECT_EQ(Str(g["readinessProbe"]["httpGet"]["scheme"]), "HTTPS");
  EXPECT_EQ(Str(ks["readinessProbe"]["httpGet"]["path"]), "/healthz");
  EXPECT_GT(PortOf(ks, ks["readinessProbe"]["httpGet"]["port"]), 0);

  // kube-scheduler reads the generated ConfigMap's config.yaml.
  std::string config_file;
  for (const auto& a : Strings(ks["command"]))
    if (a.rfind("--config=", 0) == 0) config_file = a.substr(9);
  std::string config_map;
  for (const auto& m : ks["volumeMounts"])
    if (config_file.rfind(Str(m["mountPath"]) + "/", 0) == 0) config_map = volume_config[Str(m["name"])];
  ASSERT_FALSE(config_map.empty()) << "--config=" << config_file << " is in no ConfigMap volume";
  const std::string key = fs::path(config_file).filename();
  CheckSchedulerConfig(Str(Get(objects, {"ConfigMap", config_map})["data"][key]), "kubescheduler.config.k8s.io/v1",
                       flags, ns);
  {
    SCOPED_TRACE("overlays/scheduler-v1.20");
    auto old = Objects("overlays/scheduler-v1.20");
    YAML::Node data = Get(old, {"ConfigMap", config_map})["data"];
    CheckSchedulerConfig(Str(data[key]), "kubescheduler.config.k8s.io/v1beta1", flags, ns);
    YAML::Node policy = YAML::Load(Str(data["policy.json"]));
    EXPECT_EQ(Str(policy["kind"]), "Policy");
    ASSERT_EQ(policy["extenders"].size(), 1u);
    CheckExtender(policy["extenders"][0], true, flags);
  }

  // The webhook: Service -> the gpuslice container's --webhook-port, on a path it serves.
  YAML::Node mwc = Get(objects, {"MutatingWebhookConfiguration", "gpuslice-scheduler"});
  ASSERT_TRUE(mwc);
  ASSERT_GE(mwc["webhooks"].size(), 1u);
  for (const auto& w : mwc["webhooks"]) {
    YAML::Node ref = w["clientConfig"]["service"];
    YAML::Node svc = Get(objects, {"Service", Str(ref["name"])});
    ASSERT_TRUE(svc) << "no Service " << Str(ref["name"]);
    EXPECT_EQ(Str(ref["namespace"]), Str(svc["metadata"]["namespace"]));
    for (auto kv : svc["spec"]["selector"])
      EXPECT_EQ(Str(pod["metadata"]["labels"][kv.first.as<std::string>()]), Str(kv.second))
          << "the Service does not select the scheduler pod";
    int port = ref["port"] ? ref["port"].as<int>() : 443, target = -1;
    for (const auto& sp : svc["spec"]["ports"])
      if (sp["port"].as<int>() == port) target = PortOf(g, sp["targetPort"] ? sp["targetPort"] : sp["port"]);
    EXPECT_EQ(target, webhook_port) << "Service port " << port << " does not reach --webhook-port";
    // webhook_http.cc serves POST on any path ending in /mutate.
    EXPECT_TRUE(std::regex_match(Str(ref["path"]), std::regex("/(.*/)?mutate"))) << Str(ref["path"]);
    EXPECT_TRUE(Str(w["failurePolicy"]) == "Ignore" || Str(w["failurePolicy"]) == "Fail");
    EXPECT_EQ(Str(w["sideEffects"]), "None");
    EXPECT_TRUE(Contains(w["admissionReviewVersions"], "v1")) << "the webhook answers admission.k8s.io/v1";
    bool pods_create = false, pods_update = false;
    for (const auto& r : w["rules"]) {
      if (!Contains(r["apiGroups"], "") || !Contains(r["resources"], "pods")) continue;
      pods_create |= Contains(r["operations"], "CREATE");
      pods_update |= Contains(r["operations"], "UPDATE");
    }
    EXPECT_TRUE(pods_create && pods_update) << "pods CREATE (scheduler name) and UPDATE (annotation guard)";
    std::set<std::string> excluded;
    for (const auto& e : w["namespaceSelector"]["matchExpressions"])
      if (Str(e["key"]) == "kubernetes.io/metadata.name" && Str(e["operator"]) == "NotIn")
        for (const auto& v : e["values"]) excluded.insert(Str(v));
    EXPECT_TRUE(excluded.count(ns) && excluded.count("kube-system")) << "the webhook's own namespace must be "
                                                                        "excluded, or its pod waits on itself";
    // cert-manager: the caBundle from the Certificate that writes the mounted secret,
    // valid for the name the API server connects to.
    std::string inject = Str(mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]);
    ASSERT_EQ(inject.find('/'), ns.size()) << inject;
    EXPECT_EQ(inject.substr(0, ns.size()), ns);
    YAML::Node cert = Get(objects, {"Certificate", inject.substr(ns.size() + 1)});
    ASSERT_TRUE(cert) << inject;
    EXPECT_EQ(Str(cert["spec"]["secretName"]), tls_secret);
    EXPECT_TRUE(Contains(cert["spec"]["dnsNames"], Str(ref["name"]) + "." + Str(ref["namespace"]) + ".svc"));
    EXPECT_TRUE(objects.count({Str(cert["spec"]["issuerRef"]["kind"]), Str(cert["spec"]["issuerRef"]["name"])}));
  }
}

// Whether RBAC objects among `objects` let a service account do `verb` on `resource`
// (namespace "" = cluster-wide, as for lists over all namespaces).
bool Allows(const std::map<ObjectKey, YAML::Node>& objects, const std::string& sa_ns, const std::string& sa,
            const std::string& group, const std::string& resource, const std::string& verb, const std::string& ns = "",
            const std::string& resource_name = "") {
  auto any_or = [](const YAML::Node& seq, const std::string& v) { return Contains(seq, "*") || Contains(seq, v); };
  for (const auto& [key, b] : objects) {
    if (key.first != "ClusterRoleBinding" && key.first != "RoleBinding") continue;
    bool bound = false;
    for (const auto& s : b["subjects"])
      bound |= Str(s["kind"]) == "ServiceAccount" && Str(s["name"]) == sa && Str(s["namespace"]) == sa_ns;
    if (!bound) continue;
    if (key.first == "RoleBinding" && Str(b["metadata"]["namespace"]) != ns) continue;
    auto role = objects.find({Str(b["roleRef"]["kind"]), Str(b["roleRef"]["name"])});
    if (role == objects.end()) continue;
    if (role->first.first == "Role" && Str(role->second["metadata"]["namespace"]) != ns) continue;
    for (const auto& r : role->second["rules"])
      if (any_or(r["apiGroups"], group) && any_or(r["resources"], resource) && any_or(r["verbs"], verb) &&
          (!r["resourceNames"] || Contains(r["resourceNames"], resource_name)))
        return true;
  }
  return false;
}

// A binding of the service account to a role the cluster itself defines.
bool BoundTo(const std::map<ObjectKey, YAML::Node>& objects, const std::string& sa_ns, const std::string& sa,
             const std::string& binding_kind, const std::string& role, const std::string& ns = "") {
  for (const auto& [key, b] : objects) {
    if (key.first != binding_kind || Str(b["roleRef"]["name"]) != role) continue;
    if (!ns.empty() && Str(b["metadata"]["namespace"]) != ns) continue;
    for (const auto& s : b["subjects"])
      if (Str(s["kind"]) == "ServiceAccount" && Str(s["name"]) == sa && Str(s["namespace"]) == sa_ns) return true;
  }
  return false;
}

TEST(Deploy, RbacCoversWhatTheComponentsCall) {
  auto objects = Objects("overlays/fractional");
  YAML::Node dep = Get(objects, {"Deployment", "gpuslice-scheduler"});
  YAML::Node ds = Get(objects, {"DaemonSet", "gpuslice-node"});
  ASSERT_TRUE(dep && ds);
  const std::string ns = "gpuslice-system";
  const std::string sched = Str(dep["spec"]["template"]["spec"]["serviceAccountName"]);
  const std::string node = Str(ds["spec"]["template"]["spec"]["serviceAccountName"]);
  // The extender: informers on nodes, pods and resource quotas; bind creates the Binding,
  // which carries the decision.
  for (const char* verb : {"get", "list", "watch"}) EXPECT_TRUE(Allows(objects, ns, sched, "", "nodes", verb)) << verb;
  for (const char* verb : {"get", "list", "watch"}) EXPECT_TRUE(Allows(objects, ns, sched, "", "pods", verb)) << verb;
  EXPECT_TRUE(Allows(objects, ns, sched, "", "pods/binding", "create"));
  for (const char* verb : {"list", "watch"})
    EXPECT_TRUE(Allows(objects, ns, sched, "", "resourcequotas", verb)) << verb;
  // kube-scheduler: the built-in roles, the authentication configmap, its own lease.
  EXPECT_TRUE(BoundTo(objects, ns, sched, "ClusterRoleBinding", "system:kube-scheduler"));
  EXPECT_TRUE(BoundTo(objects, ns, sched, "ClusterRoleBinding", "system:volume-scheduler"));
  EXPECT_TRUE(BoundTo(objects, ns, sched, "RoleBinding", "extension-apiserver-authentication-reader", "kube-system"));
  YAML::Node lease = YAML::Load(Str(Get(objects, {"ConfigMap", "gpuslice-scheduler-config"})["data"]["config.yaml"]));
  const std::string lease_ns = Str(lease["leaderElection"]["resourceNamespace"]);
  const std::string lease_name = Str(lease["leaderElection"]["resourceName"]);
  EXPECT_TRUE(Allows(objects, ns, sched, "coordination.k8s.io", "leases", "create", lease_ns));
  for (const char* verb : {"get", "update"})
    EXPECT_TRUE(Allows(objects, ns, sched, "coordination.k8s.io", "leases", verb, lease_ns, lease_name)) << verb;
  // The node agent with --scheduler-decisions: claims decisions on its node's pods, and
  // publishes its GPUs on its Node.
  for (const char* verb : {"get", "patch"}) EXPECT_TRUE(Allows(objects, ns, node, "", "nodes", verb)) << verb;
  for (const char* verb : {"list", "watch", "patch"}) EXPECT_TRUE(Allows(objects, ns, node, "", "pods", verb)) << verb;
  // And the check itself tells a missing right: nobody lets the agent delete pods.
  EXPECT_FALSE(Allows(objects, ns, node, "", "pods", "delete"));
  EXPECT_FALSE(Allows(objects, ns, node, "", "pods/binding", "create"));
}

TEST(Deploy, FractionalOverlayTurnsOnSchedulerDecisions) {
  const std::string dir = Src() + "/deploy/overlays/fractional";
  auto objects = Objects("overlays/fractional");
  YAML::Node ds = YAML::Clone(Get(objects, {"DaemonSet", "gpuslice-node"}));
  ASSERT_TRUE(ds);
  // Apply the overlay's patches the way kustomize does, as far as they go here: JSON
  // patch appends to args; strategic merge patches merge env by name.
  YAML::Node k = YAML::LoadFile(dir + "/kustomization.yaml");
  for (const auto& patch : k["patches"]) {
    std::string p = dir + "/" + Str(patch["path"]);
    if (patch["target"]) {
      if (Str(patch["target"]["kind"]) != "DaemonSet") continue;
      for (const auto& op : YAML::LoadFile(p)) {
        std::smatch m;
        std::string path = Str(op["path"]);
        ASSERT_TRUE(std::regex_match(path, m, std::regex(R"(/spec/template/spec/containers/([0-9]+)/args/-)"))) << path;
        ASSERT_EQ(Str(op["op"]), "add");
        YAML::Node c = ds["spec"]["template"]["spec"]["containers"][std::stoi(m[1])];
        ASSERT_EQ(Str(c["name"]), "node") << "the JSON patch's index does not point at the agent";
        c["args"].push_back(Str(op["value"]));
      }
      continue;
    }
    for (const auto& d : Docs(p)) {
      if (Str(d["kind"]) != "DaemonSet") continue;
      for (const auto& pc : d["spec"]["template"]["spec"]["containers"]) {
        YAML::Node c = Container(ds, Str(pc["name"]));
        ASSERT_TRUE(c) << "the patch names container " << Str(pc["name"]);
        for (const auto& e : pc["env"]) c["env"].push_back(e);
      }
    }
  }
  YAML::Node c = Container(ds, "node");
  std::string help, command;
  auto flags = ParseArgs(Strings(c["args"]), HelpFlags("node", &help), &command);
  EXPECT_EQ(command, "node");
  EXPECT_EQ(flags["scheduler-decisions"], "true");
  // --node-name comes from NODE_NAME, set from the pod's node by the downward API.
  EXPECT_TRUE(std::regex_search(help, std::regex(R"(--node-name string[^\n]*\[env NODE_NAME\])"))) << help;
  std::string field;
  for (const auto& e : c["env"])
    if (Str(e["name"]) == "NODE_NAME") field = Str(e["valueFrom"]["fieldRef"]["fieldPath"]);
  EXPECT_EQ(field, "spec.nodeName");
  // The base's agent alone stays a plain device plugin.
  auto base = Objects("base");
  std::string base_command;
  auto base_flags = ParseArgs(Strings(Container(Get(base, {"DaemonSet", "gpuslice-node"}), "node")["args"]),
                              HelpFlags("node"), &base_command);
  EXPECT_EQ(base_command, "node");
  EXPECT_FALSE(base_flags.count("scheduler-decisions"));
}

// A kubectl whose kustomize reads these files (`labels:` needs kustomize >= 4.1, i.e.
// kubectl >= 1.22): the one on PATH, else the e2e build's. Empty, with the reasons, if none.
std::string FindKubectl(std::string* why_not) {
  std::vector<std::string> candidates;
  if (system("command -v kubectl >/dev/null 2>&1") == 0) candidates.push_back("kubectl");
  glob_t g;
  if (glob("/var/cache/gpuslice/kubernetes-*/bin/kubectl", 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) candidates.push_back(g.gl_pathv[i]);
  globfree(&g);
  if (candidates.empty()) *why_not = "no kubectl on PATH or in /var/cache/gpuslice/kubernetes-*/bin";
  for (const auto& k : candidates) {
    Result r = RunProcess({k, "kustomize", Src() + "/deploy/base"});
    if (r.code == 0 || r.err.find("unknown field \"labels\"") == std::string::npos) return k;  // a real error fails
    *why_not += (why_not->empty() ? "" : "; ") + k + ": its kustomize is too old for `labels:`";
  }
  return "";
}

TEST(Deploy, KubectlKustomizeRendersEachOverlay) {
  std::string why_not;
  std::string kubectl = FindKubectl(&why_not);
  if (kubectl.empty()) {
    std::cout << "NOTE: no usable kubectl (" << why_not
              << "): `kubectl kustomize` did NOT run; the structural checks above did\n";
    GTEST_SKIP();
  }
  std::cout << "rendering with " << kubectl << "\n";
  for (const char* d : kKustomizations) {
    SCOPED_TRACE(d);
    Result r = RunProcess({kubectl, "kustomize", Src() + "/deploy/" + d});
    ASSERT_EQ(r.code, 0) << r.err;
    std::map<ObjectKey, YAML::Node> out;
    for (const auto& doc : YAML::LoadAll(r.out)) {
      std::string kind = Str(doc["kind"]), name = Str(doc["metadata"]["name"]);
      out[{kind, name}] = doc;
      if (!ClusterScoped(kind)) {
        EXPECT_FALSE(Str(doc["metadata"]["namespace"]).empty()) << kind << " " << name << " names no namespace";
      }
      EXPECT_EQ(Str(doc["metadata"]["labels"]["app.kubernetes.io/part-of"]), "gpuslice") << kind << " " << name;
    }
    std::string dir = d;
    EXPECT_EQ(out.count({"DaemonSet", "gpuslice-node"}), dir == "scheduler" ? 0u : 1u);
    if (dir == "base" || dir == "overlays/cdi" || dir == "overlays/hook") continue;
    YAML::Node dep = Get(out, {"Deployment", "gpuslice-scheduler"});
    ASSERT_TRUE(dep);
    // The generated ConfigMap's hashed name reached the Deployment.
    std::string config_map;
    for (const auto& v : dep["spec"]["template"]["spec"]["volumes"])
      if (v["configMap"]) config_map = Str(v["configMap"]["name"]);
    ASSERT_TRUE(out.count({"ConfigMap", config_map})) << config_map;
    std::string config = Str(Get(out, {"ConfigMap", config_map})["data"]["config.yaml"]);
    std::string image = Str(Container(dep, "kube-scheduler")["image"]);
    if (dir == "overlays/scheduler-v1.20") {
      EXPECT_NE(config.find("kubescheduler.config.k8s.io/v1beta1"), std::string::npos);
      EXPECT_TRUE(std::regex_search(image, std::regex(":v1\\.2[012]\\.[0-9]+$"))) << image;
    } else {
      EXPECT_NE(config.find("kubescheduler.config.k8s.io/v1\n"), std::string::npos);
    }
    if (dir == "scheduler") continue;
    YAML::Node c = Container(Get(out, {"DaemonSet", "gpuslice-node"}), "node");
    EXPECT_TRUE(Contains(c["args"], "--scheduler-decisions"));
    bool node_name = false;
    for (const auto& e : c["env"])
      node_name |= Str(e["name"]) == "NODE_NAME" && Str(e["valueFrom"]["fieldRef"]["fieldPath"]) == "spec.nodeName";
    EXPECT_TRUE(node_name);
    YAML::Node mwc = Get(out, {"MutatingWebhookConfiguration", "gpuslice-scheduler"});
    EXPECT_EQ(Str(mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]).empty(),
              dir != "overlays/scheduler-cert-manager");
  }
}

TEST(Deploy, NodeImageBuildsWithBuildahAndRuns) {
  if (geteuid() != 0 || system("command -v buildah >/dev/null 2>&1") != 0 ||
      system("command -v podman >/dev/null 2>&1") != 0) {
    std::cout << "NOTE: needs root, buildah and podman: the image build did NOT run\n";
    GTEST_SKIP();
  }
  TempDir tmp("gs-image");
  const std::string& dir = tmp.path();
  std::ofstream(dir + "/storage.conf") << "[storage]\ndriver = \"vfs\"\ngraphroot = \"" << dir
                                       << "/root\"\nrunroot = \"" << dir << "/run\"\n";
  std::ofstream(dir + "/containers.conf") << "[containers]\ndefault_ulimits = [\"nofile=20000:20000\", "
                                             "\"nproc=20000:20000\"]\nnetns = \"none\"\n[engine]\nruntime = \"runc\"\n"
                                             "cgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n";
  Env env{{"CONTAINERS_STORAGE_CONF", dir + "/storage.conf"}, {"CONTAINERS_CONF", dir + "/containers.conf"}};
  Result rootfs = RunProcess({Src() + "/scripts/image-rootfs.sh", BuildDir(), dir + "/ctx"});
  ASSERT_EQ(rootfs.code, 0) << rootfs.err;
  Result bud = RunProcess({"buildah", "bud", "--isolation", "chroot", "-f", Src() + "/deploy/images/Containerfile",
                           "-t", "localhost/gpuslice-node:test", dir + "/ctx"},
                          env, 300);
  ASSERT_EQ(bud.code, 0) << bud.out << bud.err;
  Result run = RunProcess({"podman", "run", "--rm", "localhost/gpuslice-node:test", "version"}, env, 120);
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("gpuslice 0.1.0"), std::string::npos) << run.out << run.err;
  RunProcess({"podman", "rmi", "-f", "localhost/gpuslice-node:test"}, env);
}

}  // namespace
}  // namespace gs::testing
