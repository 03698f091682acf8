#include "src/enforcer/config.h"

#include <gtest/gtest.h>

#include <string>

namespace gs::enforcer {
namespace {

Config Build(std::initializer_list<const char*> env, std::initializer_list<const char*> file = {},
             bool has_file = false) {
  std::vector<const char*> e(env), f(file);
  e.push_back(nullptr);
  f.push_back(nullptr);
  Config c;
  BuildConfig(has_file ? f.data() : nullptr, e.data(), &c);
  return c;
}

TEST(EnforcerConfig, HamiEnvironment) {
  Config c = Build({"CUDA_DEVICE_MEMORY_LIMIT=4g", "CUDA_DEVICE_MEMORY_LIMIT_1=3000m", "CUDA_DEVICE_SM_LIMIT=30",
                    "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/x/region", "CUDA_OVERSUBSCRIBE=true",
                    "GPU_CORE_UTILIZATION_POLICY=force", "CUDA_TASK_PRIORITY=0", "LIBCUDA_LOG_LEVEL=4"});
  EXPECT_EQ(c.memory_limit[0], 4ull << 30);
  EXPECT_EQ(c.memory_limit[1], 3000ull << 20);
  EXPECT_EQ(c.memory_limit[5], 4ull << 30);
  EXPECT_EQ(c.sm_limit[3], 30u);
  EXPECT_STREQ(c.region_path, "/tmp/x/region");
  EXPECT_TRUE(c.oversubscribe);
  EXPECT_EQ(c.core_policy, CorePolicy::kForce);
  EXPECT_EQ(c.priority, 0);
  EXPECT_EQ(c.log_level, 4);
  EXPECT_FALSE(c.limits_file_used);
  EXPECT_STREQ(c.errors, "");
}

TEST(EnforcerConfig, SmLimitOfHundredOrMoreMeansNone) {
  EXPECT_EQ(Build({"CUDA_DEVICE_SM_LIMIT=100"}).sm_limit[0], 0u);
  EXPECT_EQ(Build({"CUDA_DEVICE_SM_LIMIT=250"}).sm_limit[0], 0u);
  EXPECT_EQ(Build({"CUDA_DEVICE_SM_LIMIT=0"}).sm_limit[0], 0u);
}

TEST(EnforcerConfig, LimitsFileIsAuthoritativeEnvOnlyTightens) {
  Config loosen =
      Build({"CUDA_DEVICE_MEMORY_LIMIT=64g", "CUDA_DEVICE_SM_LIMIT=90", "CUDA_OVERSUBSCRIBE=true"},
            {"CUDA_DEVICE_MEMORY_LIMIT_0=8g", "CUDA_DEVICE_SM_LIMIT_0=25", "CUDA_OVERSUBSCRIBE=false"}, true);
  EXPECT_EQ(loosen.memory_limit[0], 8ull << 30);
  EXPECT_EQ(loosen.sm_limit[0], 25u);
  EXPECT_FALSE(loosen.oversubscribe);
  EXPECT_TRUE(loosen.limits_file_used);
  Config tighten = Build({"CUDA_DEVICE_MEMORY_LIMIT_0=2g", "CUDA_DEVICE_SM_LIMIT_0=10"},
                         {"CUDA_DEVICE_MEMORY_LIMIT_0=8g", "CUDA_DEVICE_SM_LIMIT_0=25"}, true);
  EXPECT_EQ(tighten.memory_limit[0], 2ull << 30);
  EXPECT_EQ(tighten.sm_limit[0], 10u);
  // Unsetting in env cannot lift a limit the file sets.
  Config unset = Build({"CUDA_DEVICE_MEMORY_LIMIT_0=0"}, {"CUDA_DEVICE_MEMORY_LIMIT_0=8g"}, true);
  EXPECT_EQ(unset.memory_limit[0], 8ull << 30);
  // Priority: the file's is the best a container can have.
  Config prio = Build({"CUDA_TASK_PRIORITY=0"}, {"CUDA_TASK_PRIORITY=5"}, true);
  EXPECT_EQ(prio.priority, 5);
}

// `gpuslice run`'s limits file: binds the cards and tightens the environment, never loosens
// it, and counts for nothing under the limits file.
TEST(EnforcerConfig, RunLimitsFileBindsCardsAndOnlyTightens) {
  const char* run[] = {"CUDA_DEVICE_MEMORY_LIMIT_0=2g",
                       "CUDA_DEVICE_SM_LIMIT_0=30",
                       "GPUSLICE_DEVICE_UUID_0=GPU-b",
                       "CUDA_OVERSUBSCRIBE=true",
                       "CUDA_TASK_PRIORITY=0",
                       "CUDA_DEVICE_MEMORY_SHARED_CACHE=/elsewhere",
                       "GPU_CORE_UTILIZATION_POLICY=disable",
                       nullptr};
  Config c = Build({"CUDA_DEVICE_MEMORY_LIMIT_0=64g", "CUDA_DEVICE_SM_LIMIT_0=90", "CUDA_TASK_PRIORITY=3",
                    "CUDA_DEVICE_MEMORY_SHARED_CACHE=/run/region", "GPU_CORE_UTILIZATION_POLICY=force"});
  ApplyRunLimits(run, &c);
  EXPECT_STREQ(c.device_uuid[0], "GPU-b");
  EXPECT_EQ(c.memory_limit[0], 2ull << 30);
  EXPECT_EQ(c.sm_limit[0], 30u);
  // Nothing else is read from it.
  EXPECT_FALSE(c.oversubscribe);
  EXPECT_EQ(c.priority, 3);
  EXPECT_STREQ(c.region_path, "/run/region");
  EXPECT_EQ(c.core_policy, CorePolicy::kForce);
  // Tighter limits in the environment stay; limits it lacks come from the file.
  Config tight = Build({"CUDA_DEVICE_MEMORY_LIMIT_0=1g", "CUDA_DEVICE_SM_LIMIT_0=10"});
  ApplyRunLimits(run, &tight);
  EXPECT_EQ(tight.memory_limit[0], 1ull << 30);
  EXPECT_EQ(tight.sm_limit[0], 10u);
  Config unset = Build({});
  ApplyRunLimits(run, &unset);
  EXPECT_EQ(unset.memory_limit[0], 2ull << 30);
  // A file with no limits or garbage lifts nothing.
  const char* loose[] = {"CUDA_DEVICE_MEMORY_LIMIT_0=0", "CUDA_DEVICE_SM_LIMIT_0=lots", nullptr};
  Config kept = Build({"CUDA_DEVICE_MEMORY_LIMIT_0=1g", "CUDA_DEVICE_SM_LIMIT_0=10"});
  ApplyRunLimits(loose, &kept);
  EXPECT_EQ(kept.memory_limit[0], 1ull << 30);
  EXPECT_EQ(kept.sm_limit[0], 1u);  // garbage: the smallest share, as anywhere
  // Under the limits file it is not read: it could otherwise re-bind the file's limits.
  Config under = Build({}, {"CUDA_DEVICE_MEMORY_LIMIT_0=8g", "GPUSLICE_DEVICE_UUID_0=GPU-a"}, true);
  ApplyRunLimits(run, &under);
  EXPECT_STREQ(under.device_uuid[0], "GPU-a");
  EXPECT_EQ(under.memory_limit[0], 8ull << 30);
}

// The card entry the host handed the container comes from a file the host wrote (the
// limits file, `gpuslice run`'s), never from the environment; one out of range is an
// error and no entry (the enforcer then claims one from the card).
TEST(EnforcerConfig, CardEntriesComeOnlyFromAFileTheHostWrote) {
  Config file = Build({"GPUSLICE_CARD_ENTRY_0=9"}, {"GPUSLICE_CARD_ENTRY_0=3", "GPUSLICE_CARD_ENTRY_2=63"}, true);
  EXPECT_EQ(file.card_entry[0], 3 + 1);
  EXPECT_EQ(file.card_entry[1], 0);
  EXPECT_EQ(file.card_entry[2], 63 + 1);
  Config env = Build({"GPUSLICE_CARD_ENTRY_0=9"});
  EXPECT_EQ(env.card_entry[0], 0);
  const char* run[] = {"GPUSLICE_CARD_ENTRY_0=5", nullptr};
  ApplyRunLimits(run, &env);
  EXPECT_EQ(env.card_entry[0], 5 + 1);
  for (const char* bad : {"GPUSLICE_CARD_ENTRY_0=64", "GPUSLICE_CARD_ENTRY_0=-1", "GPUSLICE_CARD_ENTRY_0=x"}) {
    Config c = Build({}, {bad}, true);
    EXPECT_EQ(c.card_entry[0], 0) << bad;
    EXPECT_NE(std::string(c.errors).find("is not a card entry (0..63)"), std::string::npos) << bad << ": " << c.errors;
  }
}

TEST(EnforcerConfig, GarbageNeverLoosens) {
  Config c = Build({"CUDA_DEVICE_MEMORY_LIMIT=lots", "CUDA_DEVICE_SM_LIMIT=half", "GPU_CORE_UTILIZATION_POLICY=max"});
  EXPECT_EQ(c.memory_limit[0], 1u);  // denied, not unlimited
  EXPECT_EQ(c.sm_limit[0], 1u);
  std::string errors = c.errors;
  EXPECT_NE(errors.find("CUDA_DEVICE_MEMORY_LIMIT=lots is not a size"), std::string::npos) << errors;
  EXPECT_NE(errors.find("CUDA_DEVICE_SM_LIMIT=half"), std::string::npos) << errors;
  EXPECT_NE(errors.find("GPU_CORE_UTILIZATION_POLICY=max"), std::string::npos) << errors;
}

TEST(EnforcerConfig, LimitsFileSyntax) {
  char text[] = "# written by gpuslice node\n\nCUDA_DEVICE_MEMORY_LIMIT_0=1g  \nexport CUDA_DEVICE_SM_LIMIT_0=20\r\n";
  const char* vars[8];
  SplitLimitsFile(text, vars, 8);
  ASSERT_STREQ(vars[0], "CUDA_DEVICE_MEMORY_LIMIT_0=1g");
  ASSERT_STREQ(vars[1], "CUDA_DEVICE_SM_LIMIT_0=20");
  EXPECT_EQ(vars[2], nullptr);
  EXPECT_STREQ(FindVar(vars, "CUDA_DEVICE_SM_LIMIT_0"), "20");
  EXPECT_EQ(FindVar(vars, "CUDA_DEVICE_SM_LIMIT"), nullptr);  // no prefix matches
}

}  // namespace
}  // namespace gs::enforcer
