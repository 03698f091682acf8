#include "src/container/cdi.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/temp_dir.h"

namespace gs::container {
namespace {

TEST(Cdi, VersionFollowsTheFieldsUsed) {
  nlohmann::json spec = {
      {"cdiVersion", "0.3.0"},
      {"kind", "gpuslice.io/gpu"},
      {"devices", {{{"name", "0"}, {"containerEdits", {{"deviceNodes", {{{"path", "/dev/nvidia0"}}}}}}}}}};
  EXPECT_EQ(MinimumCdiVersion(spec), "0.3.0");
  spec["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"] = "/sim/dev/nvidia0";
  EXPECT_EQ(MinimumCdiVersion(spec), "0.5.0");
  EXPECT_NE(CdiDeviceNames(spec).status().message().find("below 0.5.0"), std::string::npos);
  spec["cdiVersion"] = "0.5.0";
  auto names = CdiDeviceNames(spec);
  ASSERT_TRUE(names.ok()) << names.status().message();
  EXPECT_EQ((*names)[0], "gpuslice.io/gpu=0");
}

TEST(Cdi, StrictLoaderRules) {
  nlohmann::json spec = {{"cdiVersion", "0.3.0"}, {"kind", "gpuslice.io/gpu"}, {"devices", nlohmann::json::array()}};
  EXPECT_FALSE(CdiDeviceNames(spec).ok());
  spec["devices"].push_back({{"name", "-bad"}, {"containerEdits", nlohmann::json::object()}});
  EXPECT_NE(CdiDeviceNames(spec).status().message().find("not a valid CDI name"), std::string::npos);
  spec["devices"][0]["name"] = "GPU-1234";
  spec["extra"] = 1;
  EXPECT_NE(CdiDeviceNames(spec).status().message().find("unknown field 'extra'"), std::string::npos);
}

// Found by fuzz/cdi_spec_fuzzer.cc: a spec of the wrong shape is an error, never a throw or
// a read of a missing member (regressions in fuzz/regressions/cdi_spec/).
TEST(Cdi, ASpecOfTheWrongShapeIsAnErrorNotACrash) {
  auto names = [](const char* text) { return CdiDeviceNames(nlohmann::json::parse(text)); };
  auto device_without_edits = names(R"({"cdiVersion":"0.3.0","kind":"a/b","devices":[{"name":"gpu0"}]})");
  ASSERT_FALSE(device_without_edits.ok());
  EXPECT_NE(device_without_edits.status().message().find("gpu0 has no containerEdits"), std::string::npos)
      << device_without_edits.status().message();
  EXPECT_NE(names(R"({"cdiVersion":"0.3.0","kind":1,"devices":[{"name":"a","containerEdits":{}}]})")
                .status()
                .message()
                .find("kind must be vendor/class"),
            std::string::npos);
  EXPECT_NE(names(R"({"cdiVersion":"0.3.0","kind":"a/b","devices":[{"name":1,"containerEdits":{}}]})")
                .status()
                .message()
                .find("is not a valid CDI name"),
            std::string::npos);
  EXPECT_FALSE(names(R"({"cdiVersion":"0.3.0","kind":"a/b","devices":["gpu0"]})").ok());
  EXPECT_EQ(MinimumCdiVersion(nlohmann::json::object()), "0.3.0");
}

// YAML lets bytes that are not UTF-8 into a string; such a spec is refused, naming the file,
// as JSON parsing refuses it (the fuzzer found one accepted that could not be written back).
TEST(Cdi, ASpecWithAStringThatIsNotUtf8IsRefusedNamingTheFile) {
  gs::testing::TempDir dir("gs-cdi-utf8");
  const std::string path = dir.path() + "/spec.yaml";
  std::ofstream(path, std::ios::binary) << "cdiVersion: 0.3.0\nkind: nvidia.com/gpu\nannotations: {by: ab\xff\xfe}\n"
                                        << "devices: [{name: gpu0, containerEdits: {}}]\n";
  auto spec = LoadCdiSpec(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find(path), std::string::npos) << spec.status().message();
}

TEST(Cdi, YamlRoundTripsThroughTheSameNames) {
  nlohmann::json spec = {{"cdiVersion", "0.3.0"},
                         {"kind", "gpuslice.io/gpu"},
                         {"devices", {{{"name", "all"}, {"containerEdits", {{"env", {"A=1"}}}}}}}};
  std::string y = ToYaml(spec);
  EXPECT_NE(y.find("kind: \"gpuslice.io/gpu\""), std::string::npos) << y;
  EXPECT_NE(y.find("name: \"all\""), std::string::npos) << y;
}

}  // namespace
}  // namespace gs::container
