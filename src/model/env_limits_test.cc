#include "src/model/env_limits.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gs::model {
namespace {

const std::vector<DeviceGrant> kTwoCards = {{"GPU-aaaa", 0, 0, 0}, {"GPU-bbbb", 3, 0, 0}};

TEST(EnvLimits, HamiVariablesBecomeTheLimitsFileTheEnforcerReads) {
  auto a = AllocationFromEnvironment(
      {"PATH=/bin", "CUDA_DEVICE_MEMORY_LIMIT=2g", "CUDA_DEVICE_MEMORY_LIMIT_1=512m", "CUDA_DEVICE_SM_LIMIT=30",
       "GPU_CORE_UTILIZATION_POLICY=force", "CUDA_TASK_PRIORITY=3", "CUDA_OVERSUBSCRIBE=true"},
      kTwoCards, 1);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_EQ(a->devices.size(), 2u);
  EXPECT_EQ(a->devices[0].memory_limit, 2ull << 30);
  EXPECT_EQ(a->devices[1].memory_limit, 512ull << 20);  // a card's own limit wins over the unsuffixed one
  EXPECT_EQ(a->devices[0].sm_share, 30u);
  EXPECT_EQ(a->devices[1].sm_share, 30u);
  EXPECT_EQ(a->devices[1].minor, 3u);
  EXPECT_TRUE(a->oversubscribe);
  EXPECT_EQ(a->priority, 3);
  EXPECT_EQ(a->card_best_priority, 1);
  EXPECT_EQ(a->core_policy, CorePolicy::kForce);
  std::string text = LimitsFileText(*a, "/var/run/gpuslice/region", "/var/run/gpuslice-cards", "test");
  EXPECT_NE(text.find("\nCUDA_DEVICE_MEMORY_LIMIT_0=2048m\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nCUDA_DEVICE_MEMORY_LIMIT_1=512m\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nGPUSLICE_DEVICE_UUID_1=GPU-bbbb\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nCUDA_DEVICE_MEMORY_SHARED_CACHE=/var/run/gpuslice/region\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nGPUSLICE_CARDS_DIR=/var/run/gpuslice-cards\n"), std::string::npos) << text;
  auto grants = GrantsInLimitsFile(text);
  ASSERT_EQ(grants.size(), 2u);
  EXPECT_EQ(grants[1].memory_limit, 512ull << 20);
}

TEST(EnvLimits, NothingAskedIsNoLimitAndTheLastDefinitionWins) {
  auto none = AllocationFromEnvironment({"HOME=/"}, kTwoCards, 1);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->devices[0].memory_limit, 0u);
  EXPECT_EQ(none->devices[0].sm_share, 0u);
  EXPECT_FALSE(none->oversubscribe);
  EXPECT_EQ(none->priority, 1);
  auto last = AllocationFromEnvironment({"CUDA_DEVICE_MEMORY_LIMIT=bad", "CUDA_DEVICE_MEMORY_LIMIT=1g"}, kTwoCards, 1);
  ASSERT_TRUE(last.ok()) << last.status().message();
  EXPECT_EQ(last->devices[0].memory_limit, 1ull << 30);
  // A card the container does not have: its limit is checked, and changes nothing.
  auto beyond = AllocationFromEnvironment({"CUDA_DEVICE_MEMORY_LIMIT_5=1g"}, kTwoCards, 1);
  ASSERT_TRUE(beyond.ok());
  EXPECT_EQ(beyond->devices[0].memory_limit, 0u);
}

TEST(EnvLimits, AValueThatDoesNotParseIsRefusedNamingTheVariable) {
  struct Case {
    std::string entry, variable;
  } cases[] = {{"CUDA_DEVICE_MEMORY_LIMIT=2gb!", "CUDA_DEVICE_MEMORY_LIMIT"},
               {"CUDA_DEVICE_MEMORY_LIMIT_1=lots", "CUDA_DEVICE_MEMORY_LIMIT_1"},
               {"CUDA_DEVICE_MEMORY_LIMIT_7=-1", "CUDA_DEVICE_MEMORY_LIMIT_7"},
               {"CUDA_DEVICE_SM_LIMIT=130", "CUDA_DEVICE_SM_LIMIT"},
               {"CUDA_DEVICE_SM_LIMIT_0=30%", "CUDA_DEVICE_SM_LIMIT_0"},
               {"GPU_CORE_UTILIZATION_POLICY=mutex", "GPU_CORE_UTILIZATION_POLICY"},
               {"CUDA_TASK_PRIORITY=high", "CUDA_TASK_PRIORITY"},
               {"CUDA_TASK_PRIORITY=0", "CUDA_TASK_PRIORITY"},  // better than granted
               {"CUDA_OVERSUBSCRIBE=yes", "CUDA_OVERSUBSCRIBE"}};
  for (const auto& c : cases) {
    auto a = AllocationFromEnvironment({c.entry}, kTwoCards, 1);
    ASSERT_FALSE(a.ok()) << c.entry;
    EXPECT_EQ(a.status().message().rfind(c.variable + "=", 0), 0u) << a.status().message();
  }
  auto control = AllocationFromEnvironment({std::string("CUDA_DEVICE_MEMORY_LIMIT=\x1b[2J") + std::string(100, 'x')},
                                           kTwoCards, 1);
  ASSERT_FALSE(control.ok());
  EXPECT_EQ(control.status().message().find('\x1b'), std::string::npos);  // printable, cut short
  EXPECT_LT(control.status().message().size(), 160u);
}

}  // namespace
}  // namespace gs::model
