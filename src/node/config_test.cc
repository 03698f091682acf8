#include "src/node/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace gs::node {
namespace {

StatusOr<Config> Load(std::vector<std::string> args) {
  std::string usage;
  return LoadConfig(args, &usage);
}

TEST(NodeConfig, OriginalVgpuPluginFlagsKeepTheirMeaning) {
  auto c = Load({"--device-split-count", "4", "--device-memory-scaling", "2", "--device-cores-scaling", "4",
                 "--fail-on-init-error=false", "--enable-legacy-preferred"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->split.split_count, 4);
  EXPECT_TRUE(c->split.oversubscribed());
  EXPECT_EQ(c->split.SliceShare(), 0u);  // C = K: no compute limit
  EXPECT_FALSE(c->fail_on_init_error);
  EXPECT_TRUE(c->enable_legacy_preferred);
  EXPECT_EQ(c->resource_name, "nvidia.com/gpu");
  EXPECT_EQ(c->metrics_addr, ":9396");
}

TEST(NodeConfig, PrecedenceIsFlagThenEnvironmentThenFile) {
  char tmpl[] = "/tmp/gs-node-config-XXXXXX";
  int fd = mkstemp(tmpl);
  close(fd);
  std::ofstream(tmpl) << "deviceSplitCount: 8\nresourceName: example.com/vgpu\nmetricsAddr: ':1234'\n";
  setenv("DEVICE_SPLIT_COUNT", "6", 1);
  auto c = Load({"--config", tmpl});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->split.split_count, 6);               // env beats file
  EXPECT_EQ(c->resource_name, "example.com/vgpu");  // file beats default
  EXPECT_EQ(c->metrics_addr, ":1234");
  c = Load({"--config", tmpl, "--device-split-count", "3"});
  EXPECT_EQ(c->split.split_count, 3);  // flag beats env
  unsetenv("DEVICE_SPLIT_COUNT");
  unlink(tmpl);
}

TEST(NodeConfig, BadValuesNameTheFlagAndRange) {
  auto expect = [](std::vector<std::string> args, const char* fragment) {
    auto c = Load(args);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find(fragment), std::string::npos) << c.status().message();
  };
  expect({"--device-split-count", "0"}, "--device-split-count: 0 is out of range [1, 64]");
  expect({"--device-split-count", "four"}, "--device-split-count: 'four' is not an integer");
  expect({"--device-cores-scaling", "9", "--device-split-count", "4"}, "--device-cores-scaling");
  expect({"--device-list-strategy", "volume-mounts"}, "'volume-mounts' is not one of envvar, cdi-cri");
  expect({"--resource-name", "gpu"}, "not an extended resource");
  expect({"--packing", "tight"}, "--packing");
  expect({"--frobnicate"}, "unknown flag --frobnicate");
  expect({"--shared-dir-size", "lots"}, "--shared-dir-size: 'lots' is not a size");
  expect({"--shared-dir-size", "64k"}, "--shared-dir-size: at least 1Mi");
  unsetenv("NODE_NAME");
  expect({"--scheduler-decisions"}, "--scheduler-decisions needs --node-name");
  auto c = Load({"--scheduler-decisions", "--node-name", "n1", "--kubeconfig", "/etc/kube.conf"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->scheduler_decisions);
  EXPECT_EQ(c->node_name, "n1");
  EXPECT_EQ(c->kubeconfig, "/etc/kube.conf");
}

TEST(NodeConfig, FileErrorsNameTheKey) {
  Config c;
  EXPECT_NE(ApplyConfigYaml("deviceSplitcount: 3\n", &c).message().find("unknown key 'deviceSplitcount'"),
            std::string::npos);
  EXPECT_NE(ApplyConfigYaml("deviceSplitCount: [1\n", &c).message().find("not valid YAML"), std::string::npos);
  EXPECT_TRUE(ApplyConfigYaml("ignoredXids: [13, 43]\ndeviceListStrategy: [envvar, cdi-cri]\n", &c).ok());
  EXPECT_EQ(c.ignored_xids.size(), 2u);
  EXPECT_EQ(c.device_list_strategy.size(), 2u);
  EXPECT_NE(ApplyConfigYaml("sharedDirSize: huge\n", &c).message().find("sharedDirSize 'huge' is not a size"),
            std::string::npos);
  EXPECT_TRUE(ApplyConfigYaml("sharedDirSize: 8Mi\n", &c).ok());
  EXPECT_EQ(c.shared_dir_bytes, 8ull << 20);
}

TEST(NodeConfig, EachContainerDirectoryIsASmallTmpfsUnlessTurnedOff) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->shared_dir_bytes, 4ull << 20);
  c = Load({"--shared-dir-size", "0"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->shared_dir_bytes, 0u);
}

TEST(NodeConfig, TheMemoryWatchdogIsOnUnlessTurnedOff) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->memory_watchdog);
  c = Load({"--memory-watchdog=false"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->memory_watchdog);
  Config f;
  ASSERT_TRUE(ApplyConfigYaml("memoryWatchdog: false\n", &f).ok());
  EXPECT_FALSE(f.memory_watchdog);
}

TEST(NodeConfig, ProcessesWithoutTheEnforcerAreStoppedUnlessTurnedOff) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->require_enforcer);
  c = Load({"--require-enforcer=false"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->require_enforcer);
  EXPECT_TRUE(c->memory_watchdog);  // the two rules are turned off apart
  Config f;
  ASSERT_TRUE(ApplyConfigYaml("requireEnforcer: false\n", &f).ok());
  EXPECT_FALSE(f.require_enforcer);
  EXPECT_TRUE(f.memory_watchdog);
}

}  // namespace
}  // namespace gs::node
