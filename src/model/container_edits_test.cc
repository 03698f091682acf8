#include "src/model/container_edits.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gs::model {
namespace {

Allocation TwoSlices() {
  Allocation a;
  a.devices = {{"GPU-aaaa", 0, 20ull << 30, 25}, {"GPU-bbbb", 3, 10ull << 30, 0}};
  return a;
}

TEST(ContainerEdits, HamiCompatibleLimitVariables) {
  auto env = LimitVariables(TwoSlices(), "/var/run/gpuslice/region");
  EXPECT_EQ(env["CUDA_DEVICE_MEMORY_LIMIT_0"], "20480m");
  EXPECT_EQ(env["CUDA_DEVICE_MEMORY_LIMIT_1"], "10240m");
  EXPECT_EQ(env["CUDA_DEVICE_SM_LIMIT_0"], "25");
  EXPECT_EQ(env.count("CUDA_DEVICE_SM_LIMIT_1"), 0u);  // 0 = no compute limit: not set
  EXPECT_EQ(env["CUDA_DEVICE_MEMORY_SHARED_CACHE"], "/var/run/gpuslice/region");
  EXPECT_EQ(env["CUDA_OVERSUBSCRIBE"], "false");
  EXPECT_EQ(env["GPU_CORE_UTILIZATION_POLICY"], "default");
}

TEST(ContainerEdits, OddByteLimitsStayExact) {
  EXPECT_EQ(FormatMemoryLimit(1000), "1000");
}

// What the agent's readers (metrics, the memory watchdog) take a container's grant from.
TEST(ContainerEdits, TheLimitsFileReadsBackAsTheGrantsItRecords) {
  Allocation a = TwoSlices();
  for (int i = 0; i < 10; ++i) a.devices.push_back({"GPU-" + std::to_string(i), 0, (1ull + i) << 30, 10u + i});
  auto grants = GrantsInLimitsFile(LimitsFileText(a, "/var/run/gpuslice/region", "/cards", "written by a test"));
  ASSERT_EQ(grants.size(), a.devices.size());
  for (size_t i = 0; i < grants.size(); ++i) {  // in device order, also past index 9
    EXPECT_EQ(grants[i].uuid, a.devices[i].uuid) << i;
    EXPECT_EQ(grants[i].memory_limit, a.devices[i].memory_limit) << i;
    EXPECT_EQ(grants[i].sm_share, a.devices[i].sm_share) << i;
  }
}

TEST(ContainerEdits, AGrantNeedsItsCardAndValuesThatParse) {
  auto grants = GrantsInLimitsFile(
      "# written by gpuslice node for allocation x; authoritative, mounted read-only\n"
      "CUDA_DEVICE_MEMORY_LIMIT_0=2039m\n"
      "CUDA_DEVICE_MEMORY_LIMIT_1=3000000000\n"
      "CUDA_DEVICE_MEMORY_LIMIT_2=lots\n"
      "CUDA_DEVICE_MEMORY_LIMIT_3=1g\n"
      "CUDA_DEVICE_SM_LIMIT_0=25\n"
      "CUDA_DEVICE_SM_LIMIT_1=x5\n"
      "GPUSLICE_DEVICE_UUID_0=GPU-a\n"
      "GPUSLICE_DEVICE_UUID_1=GPU-b\n"
      "GPUSLICE_DEVICE_UUID_2=GPU-c\n"
      "GPUSLICE_DEVICE_UUID_99=GPU-z\n"
      "CUDA_DEVICE_MEMORY_SHARED_CACHE=/var/run/gpuslice/region\n");
  ASSERT_EQ(grants.size(), 3u);  // index 3 names no card; 99 is past kMaxDevices
  EXPECT_EQ(grants[0].uuid, "GPU-a");
  EXPECT_EQ(grants[0].memory_limit, 2039ull << 20);
  EXPECT_EQ(grants[0].sm_share, 25u);
  EXPECT_EQ(grants[1].memory_limit, 3000000000u);
  EXPECT_EQ(grants[1].sm_share, 0u);  // "x5" is no share
  EXPECT_EQ(grants[2].uuid, "GPU-c");
  EXPECT_EQ(grants[2].memory_limit, 0u);  // "lots" does not parse
  EXPECT_TRUE(GrantsInLimitsFile("").empty());
}

TEST(ContainerEdits, ContainerGetsDevicesEnforcerPreloadAndRegion) {
  EditOptions o;
  o.enforcer_host_path = "/var/lib/gpuslice/lib/0.1.0/libgpuslice.so";
  o.enforcer_container_path = "/usr/lib/gpuslice/0.1.0/libgpuslice.so";
  o.preload_file_host_path = "/var/lib/gpuslice/ld.so.preload";
  o.limits_file_host_path = "/var/lib/gpuslice/containers/abc/limits";
  o.region_host_dir = "/var/lib/gpuslice/containers/abc";
  ContainerEdits e = ToContainerEdits(TwoSlices(), o);
  EXPECT_EQ(e.env["NVIDIA_VISIBLE_DEVICES"], "GPU-aaaa,GPU-bbbb");
  ASSERT_EQ(e.devices.size(), 5u);
  EXPECT_EQ(e.devices[0].container_path, "/dev/nvidia0");
  EXPECT_EQ(e.devices[1].container_path, "/dev/nvidia3");
  bool preload_ro = false, region_rw = false, limits_ro = false;
  for (const auto& m : e.mounts) {
    if (m.container_path == "/etc/ld.so.preload") preload_ro = m.read_only;
    if (m.container_path == "/var/run/gpuslice") region_rw = !m.read_only;
    if (m.container_path == "/etc/gpuslice/limits") limits_ro = m.read_only;
  }
  EXPECT_TRUE(preload_ro);
  EXPECT_TRUE(region_rw);
  EXPECT_TRUE(limits_ro);
  EXPECT_EQ(e.env.count("LD_PRELOAD"), 0u);  // preloaded by the read-only file, not env
}

TEST(ContainerEdits, ContainerGetsOneDeviceMarkerMountPerGrantedCard) {
  ContainerEdits e = ToContainerEdits(TwoSlices(), EditOptions{});
  std::vector<std::string> markers;
  for (const auto& m : e.mounts)
    if (m.container_path.rfind(std::string(kDeviceMarkerDir) + "/", 0) == 0) {
      EXPECT_EQ(m.host_path, "/dev/null") << m.container_path;
      EXPECT_TRUE(m.read_only) << m.container_path;
      markers.push_back(m.container_path);
    }
  EXPECT_EQ(markers, (std::vector<std::string>{"/var/run/nvidia-container-devices/GPU-aaaa",
                                               "/var/run/nvidia-container-devices/GPU-bbbb"}));
}

TEST(ContainerEdits, StandaloneUsesPreloadEnvAndVisibleDevices) {
  EditOptions o;
  o.standalone = true;
  o.enforcer_host_path = "/opt/gpuslice/libgpuslice.so";
  o.region_host_dir = "/tmp/run1";
  o.existing_ld_preload = "/usr/lib/libfoo.so";
  o.limits_file_host_path = "/tmp/run1/limits";
  ContainerEdits e = ToContainerEdits(TwoSlices(), o);
  EXPECT_EQ(e.env["LD_PRELOAD"], "/opt/gpuslice/libgpuslice.so:/usr/lib/libfoo.so");
  EXPECT_EQ(e.env["CUDA_VISIBLE_DEVICES"], "GPU-aaaa,GPU-bbbb");
  EXPECT_EQ(e.env["CUDA_DEVICE_MEMORY_SHARED_CACHE"], "/tmp/run1/region");
  // The limits bound to the cards, not to the order the program may give them.
  EXPECT_EQ(e.env["GPUSLICE_RUN_LIMITS_FILE"], "/tmp/run1/limits");
  EXPECT_EQ(e.env["GPUSLICE_DEVICE_UUID_1"], "GPU-bbbb");
  EXPECT_TRUE(e.devices.empty());
  EXPECT_TRUE(e.mounts.empty());  // `gpuslice run` has no container: no marker either
}

TEST(ContainerEdits, ControlNodesFollowTheCapabilities) {
  auto paths = [](const std::set<std::string>& caps) {
    std::vector<std::string> out;
    for (const auto& n : DeviceNodes({2}, caps, "/sim/dev")) out.push_back(n.container_path);
    return out;
  };
  EXPECT_EQ(paths(DefaultCapabilities()),
            (std::vector<std::string>{"/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}));
  EXPECT_EQ(paths({"utility"}), (std::vector<std::string>{"/dev/nvidia2", "/dev/nvidiactl"}));
  EXPECT_EQ(paths({"compute", "display"}).back(), "/dev/nvidia-modeset");
  EXPECT_EQ(DeviceNodes({2}, {"utility"}, "/sim/dev")[0].host_path, "/sim/dev/nvidia2");
  EXPECT_EQ(DevRoot("/"), "/dev");
  EXPECT_EQ(DevRoot("/sim"), "/sim/dev");
}

TEST(ContainerEdits, TheEnforcerLogLevelIsPutInTheEnvironmentWhenSet) {
  EditOptions o;
  EXPECT_EQ(ToContainerEdits(TwoSlices(), o).env.count("LIBCUDA_LOG_LEVEL"), 0u);
  o.log_level = 3;
  EXPECT_EQ(ToContainerEdits(TwoSlices(), o).env["LIBCUDA_LOG_LEVEL"], "3");
  // Only logging: never in the limits file, so a container's own value still applies.
  EXPECT_EQ(LimitsFileText(TwoSlices(), "/r", "", "c").find("LIBCUDA_LOG_LEVEL"), std::string::npos);
}

}  // namespace
}  // namespace gs::model
