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
  a.devices = {{"GPU-aaaa", 0, 3000ull << 20, 30, 7}, {"GPU-bbbb", 3, 5ull << 30, 0}};
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
  EXPECT_EQ(c.card_entry[0], 7 + 1);  // the card entry the host handed out
  EXPECT_EQ(c.card_entry[1], 0);      // none: no share on that card
  EXPECT_STREQ(c.region_path, "/var/run/gpuslice/region");
  EXPECT_STREQ(c.cards_dir, "/var/run/gpuslice-cards");
  EXPECT_TRUE(c.oversubscribe);
  EXPECT_EQ(c.priority, 0);
  EXPECT_EQ(c.card_best_priority, 0);  // 1 written, but never worse than the container's own
  EXPECT_EQ(c.core_policy, contract::CorePolicy::kForce);
}

// The priority floor every enforcer applies to other tenants' card entries: what the node
// agent grants (1, as every container's priority) is what the enforcer believes at best,
// and the environment may only lower it (defer to more tenants), never raise it.
TEST(LimitsContract, TheCardPriorityFloorComesFromTheFile) {
  model::Allocation a;
  a.devices = {{"GPU-aaaa", 0, 0, 30}};
  std::string text = model::LimitsFileText(a, "/var/run/gpuslice/region", "/var/run/gpuslice-cards", "t");
  EXPECT_NE(text.find("\nGPUSLICE_CARD_BEST_PRIORITY=1\n"), std::string::npos) << text;
  EXPECT_EQ(Read(text, {}).card_best_priority, 1);
  EXPECT_EQ(Read(text, {"GPUSLICE_CARD_BEST_PRIORITY=0"}).card_best_priority, 0);  // lower: taken
  EXPECT_EQ(Read(text, {"GPUSLICE_CARD_BEST_PRIORITY=7", "CUDA_TASK_PRIORITY=9"}).card_best_priority, 1);
  enforcer::Config garbage = Read(text, {"GPUSLICE_CARD_BEST_PRIORITY=-5"});
  EXPECT_EQ(garbage.card_best_priority, 1);
  EXPECT_NE(std::string(garbage.errors).find("GPUSLICE_CARD_BEST_PRIORITY=-5"), std::string::npos);
  // Without the file (HAMi-style environment only) nothing is assumed: 0.
  const char* env[] = {nullptr};
  enforcer::Config none;
  enforcer::BuildConfig(nullptr, env, &none);
  EXPECT_EQ(none.card_best_priority, 0);
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
