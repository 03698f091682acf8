#include "src/container/runtime_config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
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

// docker --gpus: an executable nvidia-container-runtime-hook in a directory on dockerd's
// PATH. Written where there is none, rewritten where it is gpuslice's, never over another
// program's (NVIDIA's) unless forced.
class DockerHookTest : public RuntimeConfigTest {
 protected:
  RuntimeConfigRequest Request() {
    RuntimeConfigRequest r;
    r.runtime = "docker";
    r.mode = "hook";
    r.root = root_;
    r.gpuslice_path = root_ + "/fake-gpuslice";
    r.state_dir = "/var/lib/gpu slice's";  // a space and a quote reach the hook as one word
    return r;
  }
  Status Write(const RuntimeConfigRequest& r) {
    auto c = PlanRuntimeConfig(r);
    if (!c.ok()) return c.status();
    return ApplyRuntimeConfig(r, *c);
  }
  std::string hook_ = root_ + "/usr/local/bin/nvidia-container-runtime-hook";
};

TEST_F(DockerHookTest, AbsentIsWrittenAsAnExecutableThatRunsTheHookWithAMinimalEnvironment) {
  EXPECT_EQ(ClassifyHookFile(hook_), HookFileOwner::kAbsent);
  ASSERT_TRUE(Write(Request()).ok());
  EXPECT_EQ(ClassifyHookFile(hook_), HookFileOwner::kOurs);
  struct stat st;
  ASSERT_EQ(stat(hook_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  // What dockerd does: run it as `nvidia-container-runtime-hook prestart` with the state on
  // stdin. A stand-in gpuslice prints its arguments, environment and stdin.
  std::ofstream(root_ + "/fake-gpuslice") << "#!/bin/sh\nfor a in \"$@\"; do echo \"arg $a\"; done\nenv | sed "
                                             "'s/^/env /'\nsed 's/^/stdin /'\n";
  chmod((root_ + "/fake-gpuslice").c_str(), 0755);
  std::string out = root_ + "/out";
  ASSERT_EQ(system(("echo '{\"pid\": 1}' | SECRET=x " + hook_ + " prestart > " + out).c_str()), 0);
  std::string got = Read(out);
  EXPECT_NE(got.find("arg hook\narg --enforcer\narg /usr/lib/gpuslice/libgpuslice.so\narg --state-dir\narg "
                     "/var/lib/gpu slice's\narg --accept-env-when-unprivileged\narg prestart\n"),
            std::string::npos)
      << got;
  EXPECT_EQ(got.find("SECRET"), std::string::npos) << got;  // dockerd's environment stays out
  EXPECT_NE(got.find("stdin {\"pid\": 1}"), std::string::npos) << got;
}

TEST_F(DockerHookTest, OursIsRewrittenForeignIsRefusedUnlessForced) {
  ASSERT_TRUE(Write(Request()).ok());
  ASSERT_TRUE(Write(Request()).ok());  // idempotent
  RuntimeConfigRequest r = Request();
  r.driver_root = "/opt/driver";
  ASSERT_TRUE(Write(r).ok());  // ours: rewritten with the new flags
  EXPECT_NE(Read(hook_).find("'--driver-root' '/opt/driver'"), std::string::npos) << Read(hook_);

  // Another program of the same name: NVIDIA's binary, or a link to it.
  std::ofstream(hook_) << "\x7f"
                          "ELF\x02\x01 nvidia-container-toolkit\n\n";
  EXPECT_EQ(ClassifyHookFile(hook_), HookFileOwner::kForeign);
  Status refused = Write(Request());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find(hook_ + " exists and is not gpuslice's"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("--force"), std::string::npos) << refused.message();
  EXPECT_NE(Read(hook_).find("nvidia-container-toolkit"), std::string::npos);  // untouched
  std::filesystem::remove(hook_);
  std::ofstream(root_ + "/nvidia-hook") << "#!/bin/sh\n" << kDockerHookMarker << "\n";
  std::filesystem::create_symlink(root_ + "/nvidia-hook", hook_);
  EXPECT_EQ(ClassifyHookFile(hook_), HookFileOwner::kForeign);  // a link is never ours
  EXPECT_FALSE(Write(Request()).ok());
  r = Request();
  r.force = true;
  ASSERT_TRUE(Write(r).ok());
  EXPECT_EQ(ClassifyHookFile(hook_), HookFileOwner::kOurs);
  EXPECT_EQ(Read(root_ + "/nvidia-hook"), std::string("#!/bin/sh\n") + kDockerHookMarker + "\n");  // not followed
}

TEST_F(DockerHookTest, BadPathsAndOptionsAreRefusedNamingTheFlag) {
  RuntimeConfigRequest r = Request();
  r.hook_dir = "bin";
  EXPECT_EQ(PlanRuntimeConfig(r).status().message(), "--hook-dir must be an absolute path, not 'bin'");
  r = Request();
  r.enforcer_path = "libgpuslice.so";
  EXPECT_EQ(PlanRuntimeConfig(r).status().message(), "--enforcer must be an absolute path, not 'libgpuslice.so'");
  r = Request();
  r.state_dir = "/var/lib/a\nrm -rf /";
  EXPECT_EQ(PlanRuntimeConfig(r).status().message(), "--state-dir contains a control character");
  r = Request();
  r.runtime = "podman";
  r.force = true;
  EXPECT_NE(PlanRuntimeConfig(r).status().message().find("--force"), std::string::npos);
  // Without --write nothing is touched: planning only names the file.
  auto c = PlanRuntimeConfig(Request());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->path, "/usr/local/bin/nvidia-container-runtime-hook");
  EXPECT_FALSE(std::filesystem::exists(hook_));
}

TEST_F(DockerHookTest, OtherHooksOnDockerdsPathAreNamed) {
  std::filesystem::create_directories(root_ + "/usr/bin");
  std::ofstream(root_ + "/usr/bin/nvidia-container-runtime-hook") << "nvidia\n";
  ASSERT_TRUE(Write(Request()).ok());
  EXPECT_EQ(OtherDockerHooks(root_, "/usr/local/bin/nvidia-container-runtime-hook"),
            std::vector<std::string>{"/usr/bin/nvidia-container-runtime-hook"});
}

TEST(RuntimeTable, EveryRowIsNamedAndRefusalsSayWhatToDoInstead) {
  EXPECT_EQ(RuntimeNames(), "containerd, crio, docker or podman");
  RuntimeConfigRequest r;
  r.runtime = "lxc";
  EXPECT_EQ(PlanRuntimeConfig(r).status().message(), "--runtime must be containerd, crio, docker or podman, not 'lxc'");
  r.runtime = "containerd";
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
