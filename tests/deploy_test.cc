// deploy/: the Kustomize bases and overlays hold together, the DaemonSet has what a node
// agent needs, the Grafana dashboard queries only metrics the agent exports, and the
// node image builds with buildah (when present) and runs.
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

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

// Every kustomization's resources and patches exist; every document has kind and name.
void CheckKustomization(const std::string& dir, std::set<std::pair<std::string, std::string>>* objects) {
  SCOPED_TRACE(dir);
  YAML::Node k = YAML::LoadFile(dir + "/kustomization.yaml");
  ASSERT_EQ(k["kind"].as<std::string>(), "Kustomization");
  for (const auto& r : k["resources"]) {
    std::string p = dir + "/" + r.as<std::string>();
    ASSERT_TRUE(fs::exists(p)) << p;
    if (fs::is_directory(p)) {
      CheckKustomization(p, objects);
      continue;
    }
    for (const auto& d : Docs(p)) {
      ASSERT_TRUE(d["apiVersion"] && d["kind"] && d["metadata"]["name"]) << p;
      objects->insert({d["kind"].as<std::string>(), d["metadata"]["name"].as<std::string>()});
    }
  }
  for (const auto& patch : k["patches"]) {
    std::string p = dir + "/" + patch["path"].as<std::string>();
    ASSERT_TRUE(fs::exists(p)) << p;
    for (const auto& d : Docs(p))  // a patch must target something the bases define
      EXPECT_TRUE(objects->count({d["kind"].as<std::string>(), d["metadata"]["name"].as<std::string>()})) << p;
  }
}

TEST(Deploy, KustomizationsHoldTogether) {
  for (const char* d : {"base", "overlays/cdi", "overlays/hook"}) {
    std::set<std::pair<std::string, std::string>> objects;
    CheckKustomization(Src() + "/deploy/" + d, &objects);
    EXPECT_TRUE(objects.count({"DaemonSet", "gpuslice-node"})) << d;
  }
}

TEST(Deploy, DaemonSetHasWhatTheAgentNeeds) {
  YAML::Node ds;
  for (const auto& d : Docs(Src() + "/deploy/base/daemonset.yaml"))
    if (d["kind"].as<std::string>() == "DaemonSet") ds = d;
  ASSERT_TRUE(ds);
  auto spec = ds["spec"]["template"]["spec"];
  EXPECT_TRUE(spec["nodeSelector"]);
  auto c = spec["containers"][0];
  EXPECT_TRUE(c["livenessProbe"]);
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/healthz");
  EXPECT_TRUE(c["resources"]["requests"]);
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

TEST(Deploy, KubectlKustomizeRendersEachOverlay) {
  if (system("command -v kubectl >/dev/null 2>&1") != 0) {
    std::cout << "NOTE: kubectl is not installed (no Debian package): `kubectl kustomize` did NOT run; "
                 "the structural checks above did\n";
    GTEST_SKIP();
  }
  for (const char* d : {"base", "overlays/cdi", "overlays/hook"}) {
    Result r = RunProcess({"kubectl", "kustomize", Src() + "/deploy/" + d});
    EXPECT_EQ(r.code, 0) << d << r.err;
    EXPECT_NE(r.out.find("kind: DaemonSet"), std::string::npos) << d;
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
