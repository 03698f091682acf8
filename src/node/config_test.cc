#include "src/node/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace gs::node {
namespace {

StatusOr<Config> Load(const std::vector<std::string>& args) {
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
  auto expect = [](const std::vector<std::string>& args, const char* fragment) {
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

TEST(NodeConfig, HamiDevicePluginSettingsAreFlagsAndKeys) {
  auto c = Load({"--exclude-devices", "GPU-8d3c0b5e-0000-0000-0000-000000000001,3", "--core-policy", "force",
                 "--enforcer-log-level", "3", "--pre-configured-device-memory", "122880", "--gdrcopy-enabled",
                 "--gds-enabled", "--mofed-enabled"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->exclude_devices, (std::vector<std::string>{"GPU-8d3c0b5e-0000-0000-0000-000000000001", "3"}));
  EXPECT_EQ(c->EffectiveCorePolicy(), contract::CorePolicy::kForce);
  EXPECT_EQ(c->enforcer_log_level, 3);
  EXPECT_EQ(c->pre_configured_device_memory, 120ull << 30);  // a bare number is MiB, as in HAMi
  EXPECT_TRUE(c->gdrcopy_enabled && c->gds_enabled && c->mofed_enabled);
  c = Load({"--disable-core-limit", "--pre-configured-device-memory", "96Gi"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->EffectiveCorePolicy(), contract::CorePolicy::kDisable);
  EXPECT_EQ(c->pre_configured_device_memory, 96ull << 30);
  c = Load({});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->EffectiveCorePolicy(), contract::CorePolicy::kDefault);
  EXPECT_EQ(c->enforcer_log_level, -1);
  EXPECT_TRUE(c->exclude_devices.empty());

  Config f;
  ASSERT_TRUE(ApplyConfigYaml("excludeDevices: [GPU-1, 0]\ncorePolicy: disable\nenforcerLogLevel: 4\n"
                              "preConfiguredDeviceMemory: 1024\ngdsEnabled: true\ndisableCoreLimit: false\n",
                              &f)
                  .ok());
  EXPECT_EQ(f.exclude_devices, (std::vector<std::string>{"GPU-1", "0"}));
  EXPECT_EQ(f.EffectiveCorePolicy(), contract::CorePolicy::kDisable);
  EXPECT_EQ(f.enforcer_log_level, 4);
  EXPECT_EQ(f.pre_configured_device_memory, 1ull << 30);
  EXPECT_TRUE(f.gds_enabled);
}

TEST(NodeConfig, MalformedHamiSettingsNameTheEntry) {
  auto expect = [](const std::vector<std::string>& args, const char* fragment) {
    auto c = Load(args);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find(fragment), std::string::npos) << c.status().message();
  };
  expect({"--exclude-devices", "GPU-1,gpu1"}, "--exclude-devices: 'gpu1' is neither a card index");
  expect({"--exclude-devices", "01"}, "'01' is neither a card index");
  expect({"--exclude-devices", "-1"}, "'-1' is neither a card index");
  expect({"--core-policy", "strict"}, "--core-policy: 'strict' is not default, force or disable");
  expect({"--enforcer-log-level", "5"}, "--enforcer-log-level: '5' is not a log level 0 (errors) to 4 (debug)");
  expect({"--pre-configured-device-memory", "lots"}, "--pre-configured-device-memory: 'lots' is not MiB or a size");
  Config f;
  EXPECT_NE(ApplyConfigYaml("excludeDevices: [x]\n", &f).message().find("excludeDevices: 'x' is neither"),
            std::string::npos);
}

TEST(NodeConfig, ANodeSectionOverridesTheTopLevelOnItsNodeOnly) {
  const std::string yaml =
      "deviceSplitCount: 4\n"
      "corePolicy: force\n"
      "nodeConfig:\n"
      "  - name: gpu-a\n"
      "    deviceSplitCount: 8\n"
      "    excludeDevices: [0]\n"
      "  - name: gpu-b\n"
      "    corePolicy: default\n"
      "    enforcerLogLevel: 2\n";
  Config a;
  ASSERT_TRUE(ApplyConfigYaml(yaml, &a, "gpu-a").ok());
  EXPECT_EQ(a.split.split_count, 8);
  EXPECT_EQ(a.exclude_devices, (std::vector<std::string>{"0"}));
  EXPECT_EQ(a.core_policy, contract::CorePolicy::kForce);  // from the top level
  EXPECT_EQ(a.enforcer_log_level, -1);                     // gpu-b's section is not gpu-a's
  Config b;
  ASSERT_TRUE(ApplyConfigYaml(yaml, &b, "gpu-b").ok());
  EXPECT_EQ(b.split.split_count, 4);
  EXPECT_EQ(b.core_policy, contract::CorePolicy::kDefault);
  EXPECT_EQ(b.enforcer_log_level, 2);
  Config other;
  ASSERT_TRUE(ApplyConfigYaml(yaml, &other, "gpu-c").ok());
  EXPECT_EQ(other.split.split_count, 4);
  EXPECT_TRUE(other.exclude_devices.empty());

  // Through LoadConfig: the node's name from NODE_NAME or --node-name; flags still win.
  char tmpl[] = "/tmp/gs-node-config-XXXXXX";
  int fd = mkstemp(tmpl);
  close(fd);
  std::ofstream(tmpl) << yaml;
  setenv("NODE_NAME", "gpu-a", 1);
  auto c = Load({"--config", tmpl});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->split.split_count, 8);
  EXPECT_EQ(c->node_name, "gpu-a");
  c = Load({"--config", tmpl, "--node-name", "gpu-b"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->split.split_count, 4);
  EXPECT_EQ(c->enforcer_log_level, 2);
  c = Load({"--config", tmpl, "--device-split-count", "3"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->split.split_count, 3);
  unsetenv("NODE_NAME");
  unlink(tmpl);
}

TEST(NodeConfig, NodeSectionMistakesStopTheAgentOnEveryNode) {
  Config c;
  EXPECT_EQ(ApplyConfigYaml("nodeConfig:\n  - name: elsewhere\n    devicesplitcount: 3\n", &c, "here").message(),
            "config file: nodeConfig 'elsewhere': unknown key 'devicesplitcount'");
  EXPECT_EQ(ApplyConfigYaml("nodeConfig:\n  - name: elsewhere\n    corePolicy: strict\n", &c, "here").message(),
            "config file: nodeConfig 'elsewhere': corePolicy: 'strict' is not default, force or disable");
  EXPECT_EQ(ApplyConfigYaml("nodeConfig:\n  - deviceSplitCount: 3\n", &c, "here").message(),
            "config file: nodeConfig[0]: needs a name (the node it is for)");
  EXPECT_EQ(ApplyConfigYaml("nodeConfig:\n  - name: a\n  - name: a\n", &c, "a").message(),
            "config file: nodeConfig[1]: a second section for node 'a'");
  EXPECT_EQ(ApplyConfigYaml("nodeConfig:\n  name: a\n", &c, "a").message(),
            "config file: nodeConfig must be a list of sections, each with a name");
  EXPECT_EQ(ApplyConfigYaml("nodeConfig:\n  - name: a\n    nodeName: b\n", &c, "a").message(),
            "config file: nodeConfig 'a': unknown key 'nodeName'");
}

}  // namespace
}  // namespace gs::node
