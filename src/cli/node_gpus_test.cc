#include "src/cli/node_gpus.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "src/cli/commands.h"

namespace gs::cli {
namespace {

TEST(NodeGpus, TheDomainSeesWhatTheDriverReportsAndALostGpuIsUnhealthy) {
  platform::GpuInfo info;
  info.index = 3;
  info.uuid = "GPU-abcd";
  info.name = "NVIDIA H100 80GB HBM3";
  info.minor = 7;
  info.numa_node = 1;
  info.memory_total = 80ull << 30;
  model::Gpu g = ToModelGpu(info);
  EXPECT_EQ(g.uuid, "GPU-abcd");
  EXPECT_EQ(g.index, 3);
  EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g.memory, 80ull << 30);
  EXPECT_EQ(g.numa_node, 1);
  EXPECT_EQ(g.minor, 7u);
  EXPECT_TRUE(g.healthy);
  info.lost = true;
  EXPECT_FALSE(ToModelGpu(info).healthy);
}

TEST(NodeGpus, ADriverRootWithoutNvmlIsAnErrorThatSaysWhere) {
  auto n = OpenNodeGpus("/nonexistent-driver-root");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("/nonexistent-driver-root"), std::string::npos) << n.status().message();
}

TEST(Commands, EveryCommandHasOneRowWithASummary) {
  std::set<std::string> names;
  for (const auto& c : Commands()) {
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
    EXPECT_NE(std::string(c.summary), "") << c.name;
    EXPECT_NE(c.run, nullptr) << c.name;
  }
  for (const char* name : {"run", "smi", "burn", "sim", "node", "scheduler", "cdi", "hook", "runtime"})
    EXPECT_EQ(names.count(name), 1u) << name;
}

}  // namespace
}  // namespace gs::cli
