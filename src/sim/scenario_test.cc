#include "src/sim/scenario.h"

#include <gtest/gtest.h>

namespace gs::sim {
namespace {

TEST(Scenario, PresetsWithCountsInOneLine) {
  auto sc = ParseScenario("gpus: 2xH100-80GB,1xT4\n");
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  ASSERT_EQ(sc->gpus.size(), 3u);
  EXPECT_EQ(sc->gpus[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(sc->gpus[0].memory_bytes, 81559ull << 20);
  EXPECT_EQ(sc->gpus[0].sm_count, 132u);
  EXPECT_EQ(sc->gpus[2].name, "Tesla T4");
  EXPECT_EQ(sc->gpus[2].sm_count, 40u);
  EXPECT_NE(sc->gpus[0].uuid, sc->gpus[1].uuid);
  EXPECT_EQ(sc->gpus[1].minor, 1u);
  EXPECT_EQ(sc->gpus[0].numa_node, 0);
  EXPECT_EQ(sc->gpus[2].numa_node, 1);
}

// Context footprints: the H100's 518 MiB as measured (NVML per-process, own pid,
// docs/measurements/h100-driver.md); the cards nobody measured keep 256 MiB.
TEST(Scenario, EveryPresetHasItsRealSize) {
  struct {
    const char* key;
    uint64_t mib;
    uint32_t sms;
    uint64_t context_mib;
  } want[] = {{"T4", 15360, 40, 256},         {"L4", 23034, 58, 256},         {"A100-40GB", 40960, 108, 256},
              {"A100-80GB", 81920, 108, 256}, {"H100-80GB", 81559, 132, 518}, {"H200-141GB", 143771, 132, 256}};
  for (auto& w : want) {
    auto sc = ParseScenario(std::string("gpus: [") + w.key + "]\n");
    ASSERT_TRUE(sc.ok()) << w.key << ": " << sc.status().message();
    EXPECT_EQ(sc->gpus[0].memory_bytes, w.mib << 20) << w.key;
    EXPECT_EQ(sc->gpus[0].sm_count, w.sms) << w.key;
    EXPECT_EQ(sc->gpus[0].context_memory, w.context_mib << 20) << w.key;
  }
}

TEST(Scenario, ContextMemoryComesFromThePresetUnlessTheScenarioSaysOtherwise) {
  auto sc = ParseScenario("gpus: [H100-80GB, T4, {name: Mine, memory: 8Gi, sms: 10}]\n");
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  EXPECT_FALSE(sc->context_memory.has_value());
  EXPECT_EQ(sc->gpus[0].context_memory, 518ull << 20);
  EXPECT_EQ(sc->gpus[1].context_memory, 256ull << 20);
  EXPECT_EQ(sc->gpus[2].context_memory, 256ull << 20);  // by hand: not measured
  // The top-level key overrides every card; a card's own key overrides that.
  sc = ParseScenario("context_memory: 100Mi\ngpus: [H100-80GB, {preset: H100-80GB, context_memory: 1Gi}]\n");
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  EXPECT_EQ(sc->gpus[0].context_memory, 100ull << 20);
  EXPECT_EQ(sc->gpus[1].context_memory, 1ull << 30);
  sc = ParseScenario("gpus: [{preset: T4, context_memory: lots}]\n");
  ASSERT_FALSE(sc.ok());
  EXPECT_NE(sc.status().message().find("gpus[0].context_memory"), std::string::npos) << sc.status().message();
}

TEST(Scenario, ByHandWithFaults) {
  auto sc = ParseScenario(R"(
driver_version: "570.1"
cuda_version: "12.8"
context_memory: 0
gpus:
  - name: Custom
    memory: 16Gi
    sms: 40
    uuid: GPU-11111111-2222-3333-4444-555555555555
    pci_bus_id: "00000000:3B:00.0"
    numa: 1
    compute_capability: "8.6"
  - preset: A100-40GB
    count: 2
faults:
  - {at: 2s, gpu: 1, xid: 48}
  - {at: 500ms, gpu: 2, lost: true}
)");
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  EXPECT_EQ(sc->cuda_version, 12080);
  EXPECT_EQ(sc->context_memory, 0u);
  ASSERT_EQ(sc->gpus.size(), 3u);
  for (const auto& g : sc->gpus) EXPECT_EQ(g.context_memory, 0u) << g.name;
  EXPECT_EQ(sc->gpus[0].uuid, "GPU-11111111-2222-3333-4444-555555555555");
  EXPECT_EQ(sc->gpus[0].numa_node, 1);
  EXPECT_EQ(sc->gpus[0].cc_minor, 6u);
  ASSERT_EQ(sc->faults.size(), 2u);
  EXPECT_DOUBLE_EQ(sc->faults[1].at_seconds, 0.5);
  EXPECT_EQ(sc->faults[1].xid, 79u);
}

TEST(Scenario, ErrorsNameTheProblem) {
  auto expect_error = [](const char* yaml, const char* fragment) {
    auto sc = ParseScenario(yaml);
    ASSERT_FALSE(sc.ok()) << yaml;
    EXPECT_NE(sc.status().message().find(fragment), std::string::npos) << sc.status().message();
  };
  expect_error("gpus: 2xB999\n", "unknown GPU preset 'B999'");
  expect_error("gpus: []\n", "no GPUs");
  expect_error("gpu: 1xT4\n", "unknown key 'gpu'");
  expect_error("gpus: [{name: X, memory: lots, sms: 1}]\n", "gpus[0].memory");
  expect_error("gpus: [T4]\nfaults: [{at: 1s, gpu: 3, xid: 1}]\n", "faults[0].gpu");
  expect_error("gpus: [T4]\nfaults: [{at: soon, gpu: 0, xid: 1}]\n", "not a duration");
  expect_error("gpus: [{preset: T4, colour: red}]\n", "unknown key 'colour'");
  expect_error("gpus: 17xT4\n", "count must be");
  expect_error("gpus: [unclosed\n", "not valid YAML");
  // Found by fuzz/scenario_fuzzer.cc: numbers past int or double were an uncaught
  // std::out_of_range (regressions in fuzz/regressions/scenario/).
  expect_error("gpus: 99999999999xT4\n", "count must be");
  expect_error("gpus: 0000xT4\n", "count must be");
  std::string far = "gpus: [T4]\nfaults: [{at: " + std::string(400, '9') + "m, gpu: 0, xid: 48}]\n";
  expect_error(far.c_str(), "too long a duration");
  auto tiny = ParseScenario("gpus: 00002xT4\nfaults: [{at: 0." + std::string(400, '0') + "1s, gpu: 0, xid: 48}]\n");
  ASSERT_TRUE(tiny.ok()) << tiny.status().message();
  EXPECT_EQ(tiny->gpus.size(), 2u);
  EXPECT_GE(tiny->faults[0].at_seconds, 0);
  EXPECT_LT(tiny->faults[0].at_seconds, 1e-300);
}

TEST(Scenario, ACardCanAnswerNvmlMemoryQueriesNotSupported) {
  auto sc = ParseScenario("gpus:\n  - {preset: H100-80GB, memory_info: not_supported}\n  - H100-80GB\n");
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  EXPECT_TRUE(sc->gpus[0].memory_info_unsupported);
  EXPECT_FALSE(sc->gpus[1].memory_info_unsupported);
  EXPECT_GT(sc->gpus[0].memory_bytes, 0u);  // CUDA still reports the memory
  auto bad = ParseScenario("gpus: [{preset: T4, memory_info: none}]\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gpus[0].memory_info: 'none' is not supported or not_supported"),
            std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace gs::sim
