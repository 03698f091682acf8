// The contract of src/common/contract.h end to end: the limits file the node agent writes
// for an allocation (model::LimitsFileText) is what the enforcer reads (SplitLimitsFile,
// BuildConfig), key by key, and the environment can only tighten it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/enforcer/config.h"
#include "src/model/container_edits.h"

namespace gs {
namespace {

enforcer::Config Read(const std::string& file_text, std::vector<const char*> env) {
  std::vector<char> text(file_text.begin(), file_text.end());
  text.push_back('\0');
  const char* file_vars[64];
  enforcer::SplitLimitsFile(text.data(), file_vars, 64);
  env.push_back(nullptr);
  enforcer::Config c;
  enforcer::BuildConfig(file_vars, env.data(), &c);
  return c;
}

model::Allocation TwoCards() {
  model::Allocation a;
  a.devices = {{"GPU-aaaa", 0, 3000ull << 20, 30}, {"GPU-bbbb", 3, 5ull << 30, 0}};
  a.oversubscribe = true;
  a.priority = 0;
  a.core_policy = contract::CorePolicy::kForce;
  return a;
}

TEST(LimitsContract, WhatTheAgentWritesIsWhatTheEnforcerReads) {
  std::string text =
      model::LimitsFileText(TwoCards(), "/var/run/gpuslice/region", "/var/run/gpuslice-cards", "written by a test");
  EXPECT_EQ(text.rfind("# written by a test\n", 0), 0u);
  enforcer::Config c = Read(text, {});
  EXPECT_TRUE(c.limits_file_used);
  EXPECT_STREQ(c.errors, "");
  EXPECT_EQ(c.memory_limit[0], 3000ull << 20);
  EXPECT_EQ(c.memory_limit[1], 5ull << 30);
  EXPECT_EQ(c.memory_limit[2], 0u);
  EXPECT_EQ(c.sm_limit[0], 30u);
  EXPECT_EQ(c.sm_limit[1], 0u);
  EXPECT_STREQ(c.device_uuid[0], "GPU-aaaa");
  EXPECT_STREQ(c.device_uuid[1], "GPU-bbbb");
  EXPECT_STREQ(c.region_path, "/var/run/gpuslice/region");
  EXPECT_STREQ(c.cards_dir, "/var/run/gpuslice-cards");
  EXPECT_TRUE(c.oversubscribe);
  EXPECT_EQ(c.priority, 0);
  EXPECT_EQ(c.core_policy, contract::CorePolicy::kForce);
}

TEST(LimitsContract, TheEnvironmentMayOnlyTightenTheFile) {
  std::string text = model::LimitsFileText(TwoCards(), "/var/run/gpuslice/region", "", "t");
  enforcer::Config c =
      Read(text, {"CUDA_DEVICE_MEMORY_LIMIT_0=1g", "CUDA_DEVICE_MEMORY_LIMIT_1=100g", "CUDA_DEVICE_SM_LIMIT_0=90",
                  "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/mine", "CUDA_TASK_PRIORITY=5"});
  EXPECT_EQ(c.memory_limit[0], 1ull << 30);  // lower: taken
  EXPECT_EQ(c.memory_limit[1], 5ull << 30);  // higher: ignored
  EXPECT_EQ(c.sm_limit[0], 30u);
  EXPECT_STREQ(c.region_path, "/var/run/gpuslice/region");  // the operator's, not the program's
  EXPECT_EQ(c.priority, 5);                                 // a worse priority is allowed
}

}  // namespace
}  // namespace gs
