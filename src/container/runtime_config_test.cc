#include "src/container/runtime_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "src/common/file.h"
#include "tests/temp_dir.h"

namespace gs::container {
namespace {

std::string Read(const std::string& p) {
  auto text = ReadFile(p);
  EXPECT_TRUE(text.ok()) << text.status().message();
  return text.ok() ? *text : "";
}

class RuntimeConfigTest : public ::testing::Test {
 protected:
  Status Apply(const std::string& runtime, const std::string& mode = "cdi") {
    RuntimeConfigRequest r;
    r.runtime = runtime;
    r.mode = mode;
    r.root = root_;
    auto c = PlanRuntimeConfig(r);
    if (!c.ok()) return c.status();
    return ApplyRuntimeConfig(r, *c);
  }
  gs::testing::TempDir tmp_{"gs-runtime-config"};
  const std::string root_ = tmp_.path();
};

TEST_F(RuntimeConfigTest, DockerMergesKeepingOtherSettings) {
  std::filesystem::create_directories(root_ + "/etc/docker");
  std::ofstream(root_ + "/etc/docker/daemon.json") << R"({"log-driver": "journald", "features": {"buildkit": true}})";
  ASSERT_TRUE(Apply("docker").ok());
  auto j = nlohmann::json::parse(Read(root_ + "/etc/docker/daemon.json"));
  EXPECT_EQ(j["log-driver"], "journald");
  EXPECT_EQ(j["features"]["buildkit"], true);
  EXPECT_EQ(j["features"]["cdi"], true);
  std::ofstream(root_ + "/etc/docker/daemon.json") << "{broken";
  EXPECT_NE(Apply("docker").message().find("is not valid JSON"), std::string::npos);
}

TEST_F(RuntimeConfigTest, ContainerdIsAppendedOnceAndNeverContradicted) {
  ASSERT_TRUE(Apply("containerd").ok());
  ASSERT_TRUE(Apply("containerd").ok());
  std::string t = Read(root_ + "/etc/containerd/config.toml");
  EXPECT_EQ(t.find("enable_cdi = true"), t.rfind("enable_cdi = true"));  // once
  std::ofstream(root_ + "/etc/containerd/config.toml")
      << "[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = false\n";
  EXPECT_NE(Apply("containerd").message().find("set enable_cdi = true"), std::string::npos);
  EXPECT_FALSE(Apply("containerd", "hook").ok());
}

TEST_F(RuntimeConfigTest, HookFilesCarryAnExplicitEnv) {
  ASSERT_TRUE(Apply("podman", "hook").ok());
  auto j = nlohmann::json::parse(Read(root_ + "/usr/share/containers/oci/hooks.d/gpuslice.json"));
  EXPECT_EQ(j["stages"][0], "prestart");
  ASSERT_TRUE(j["hook"].contains("env"));
  EXPECT_EQ(j["hook"]["env"].size(), 1u);
  EXPECT_TRUE(Apply("crio").ok());
  EXPECT_NE(Read(root_ + "/etc/crio/crio.conf.d/99-gpuslice.conf").find("cdi_spec_dirs"), std::string::npos);
  EXPECT_FALSE(Apply("lxc").ok());
}

// The hook's own options reach its command line; asked for with CDI, they are refused
// (they would silently do nothing).
TEST_F(RuntimeConfigTest, HookOptionsGoIntoItsArguments) {
  RuntimeConfigRequest r;
  r.runtime = "podman";
  r.mode = "hook";
  r.root = root_;
  r.hook_log = "/var/log/gpuslice-hook.log";
  r.accept_env_when_unprivileged = true;
  auto c = PlanRuntimeConfig(r);
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE(ApplyRuntimeConfig(r, *c).ok());
  auto args = nlohmann::json::parse(Read(root_ + "/usr/share/containers/oci/hooks.d/gpuslice.json"))["hook"]["args"];
  std::vector<std::string> got = args.get<std::vector<std::string>>();
  auto at = std::find(got.begin(), got.end(), "--log");
  ASSERT_NE(at, got.end());
  EXPECT_EQ(*(at + 1), "/var/log/gpuslice-hook.log");
  EXPECT_NE(std::find(got.begin(), got.end(), "--accept-env-when-unprivileged"), got.end());
  // Without them, the hook runs with its safe default.
  EXPECT_TRUE(Apply("podman", "hook").ok());
  got = nlohmann::json::parse(Read(root_ + "/usr/share/containers/oci/hooks.d/gpuslice.json"))["hook"]["args"]
            .get<std::vector<std::string>>();
  EXPECT_EQ(std::find(got.begin(), got.end(), "--accept-env-when-unprivileged"), got.end());
  r.mode = "cdi";
  auto refused = PlanRuntimeConfig(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("only with --mode hook"), std::string::npos);
}

TEST(RuntimeTable, EveryRowIsNamedAndRefusalsSayWhatToDoInstead) {
  EXPECT_EQ(RuntimeNames(), "containerd, crio, docker or podman");
  RuntimeConfigRequest r;
  r.runtime = "lxc";
  EXPECT_EQ(PlanRuntimeConfig(r).status().message(), "--runtime must be containerd, crio, docker or podman, not 'lxc'");
  r.runtime = "docker";
  r.mode = "hook";
  EXPECT_NE(PlanRuntimeConfig(r).status().message().find("use --mode cdi"), std::string::npos);
  r.runtime = "podman";
  r.mode = "cdi";
  auto c = PlanRuntimeConfig(r);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->path, "");  // nothing to configure
}

}  // namespace
}  // namespace gs::container
