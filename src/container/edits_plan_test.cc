#include "src/container/edits_plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/temp_dir.h"

namespace gs::container {
namespace {

class PlanEditsTest : public ::testing::Test {
 protected:
  // A simulated node's devices: regular files stand in for the nodes.
  void Node(const std::string& name) {
    std::filesystem::create_directories(root_ + "/dev");
    std::ofstream(root_ + "/dev/" + name) << "";
  }
  gs::testing::TempDir tmp_{"gs-edits-plan"};
  const std::string root_ = tmp_.path();
};

TEST_F(PlanEditsTest, GpuNodesComeFirstThenTheControlNodesTheNodeHas) {
  for (const char* n : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"}) Node(n);
  PlanOptions o;
  o.driver_root = root_;
  model::Gpu g1{"GPU-b", 1, "H100", 0, -1, 1, true}, g0{"GPU-a", 0, "H100", 0, -1, 0, true};
  auto e = PlanEdits(o, {g1, g0});
  ASSERT_TRUE(e.ok()) << e.status().message();
  std::vector<std::string> paths;
  for (const auto& d : e->devices) paths.push_back(d.container_path);
  // No nvidia-uvm-tools on this node: left out.
  EXPECT_EQ(paths, (std::vector<std::string>{"/dev/nvidia1", "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"}));
  EXPECT_EQ(e->devices[0].host_path, root_ + "/dev/nvidia1");
  EXPECT_EQ(e->devices[0].major, 195u);
  EXPECT_EQ(e->devices[0].minor, 1u);
  EXPECT_EQ(e->devices[2].minor, 255u);
  EXPECT_EQ(e->devices[3].major, 510u);
  EXPECT_TRUE(e->env.empty());  // no enforcer, not a simulator root
}

TEST_F(PlanEditsTest, AGpuWithoutItsNodeIsAnError) {
  Node("nvidiactl");
  PlanOptions o;
  o.driver_root = root_;
  auto e = PlanEdits(o, {model::Gpu{"GPU-a", 0, "H100", 0, -1, 3, true}});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("GPU GPU-a has no device node"), std::string::npos) << e.status().message();
}

TEST_F(PlanEditsTest, TheEnforcerIsPreloadedThroughAReadOnlyFile) {
  PlanOptions o;
  o.driver_root = root_;
  o.enforcer = {"/state/lib/v/libgpuslice.so", "/usr/lib/gpuslice/v/libgpuslice.so", "/state/lib/v/ld.so.preload"};
  auto e = PlanEdits(o, {});
  ASSERT_TRUE(e.ok()) << e.status().message();
  ASSERT_EQ(e->mounts.size(), 2u);
  EXPECT_EQ(e->mounts[1].container_path, "/etc/ld.so.preload");
  EXPECT_TRUE(e->mounts[0].read_only && e->mounts[1].read_only);
  EXPECT_EQ(e->env.at("CUDA_DEVICE_MEMORY_SHARED_CACHE"), kContainerRegion);
}

TEST_F(PlanEditsTest, GdrcopyGdsAndMofedNodesFollowTheControlNodesWhereTheNodeHasThem) {
  for (const char* n : {"nvidia0", "nvidiactl", "gdrdrv", "nvidia-fs1", "nvidia-fs0"}) Node(n);
  std::filesystem::create_directories(root_ + "/dev/nvidia-fs.d");  // a directory: not a device
  std::filesystem::create_directories(root_ + "/dev/infiniband");
  for (const char* n : {"uverbs0", "rdma_cm"}) std::ofstream(root_ + "/dev/infiniband/" + n) << "";
  PlanOptions o;
  o.driver_root = root_;
  model::Gpu g0{"GPU-a", 0, "H100", 0, -1, 0, true};
  auto paths = [&] {
    auto e = PlanEdits(o, {g0});
    EXPECT_TRUE(e.ok()) << e.status().message();
    std::vector<std::string> out;
    for (const auto& d : e->devices) out.push_back(d.container_path);
    return out;
  };
  EXPECT_EQ(paths(), (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidiactl"}));  // off by default
  o.extras = {true, true, true};
  EXPECT_EQ(paths(),
            (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidiactl", "/dev/gdrdrv", "/dev/nvidia-fs0",
                                      "/dev/nvidia-fs1", "/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0"}));
  EXPECT_EQ(ExtraDeviceNodes(root_ + "/dev", {false, false, true})[1].host_path, root_ + "/dev/infiniband/uverbs0");
  // Absent: nothing added, as NVIDIA's toolkit adds nothing.
  std::filesystem::remove_all(root_ + "/dev/infiniband");
  std::filesystem::remove(root_ + "/dev/gdrdrv");
  EXPECT_TRUE(ExtraDeviceNodes(root_ + "/dev", {true, false, true}).empty());
}

}  // namespace
}  // namespace gs::container
