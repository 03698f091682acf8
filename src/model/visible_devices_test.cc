#include "src/model/visible_devices.h"

#include <gtest/gtest.h>

namespace gs::model {
namespace {

std::vector<Gpu> Three() {
  return {
      {"GPU-aa01", 0, "T4", 1, 0, 0, true}, {"GPU-bb02", 1, "T4", 1, 0, 1, true}, {"GPU-cc03", 2, "T4", 1, 0, 5, true}};
}

TEST(VisibleDevices, KindsAsTheToolkitDefinesThem) {
  EXPECT_EQ(ParseVisibleDevices("", false)->kind, Visibility::kVoid);
  EXPECT_EQ(ParseVisibleDevices("", true)->kind, Visibility::kVoid);
  EXPECT_EQ(ParseVisibleDevices("void", true)->kind, Visibility::kVoid);
  EXPECT_EQ(ParseVisibleDevices("none", true)->kind, Visibility::kNone);
  EXPECT_EQ(ParseVisibleDevices("all", true)->kind, Visibility::kAll);
  auto list = ParseVisibleDevices("2, GPU-aa01,2", true);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->kind, Visibility::kList);
  auto gpus = SelectGpus(*list, Three());
  ASSERT_TRUE(gpus.ok());
  ASSERT_EQ(gpus->size(), 2u);  // duplicates collapse
  EXPECT_EQ((*gpus)[0].minor, 5u);
  EXPECT_EQ((*gpus)[1].uuid, "GPU-aa01");
  EXPECT_EQ(SelectGpus(*ParseVisibleDevices("all", true), Three())->size(), 3u);
}

TEST(VisibleDevices, BadEntriesAreNamed) {
  EXPECT_NE(ParseVisibleDevices("0,../../etc", true).status().message().find("'../../etc' is not a GPU index"),
            std::string::npos);
  EXPECT_NE(ParseVisibleDevices("MIG-1234", true).status().message().find("MIG"), std::string::npos);
  EXPECT_FALSE(ParseVisibleDevices("/var/run/nvidia-container-devices", true).ok());
  EXPECT_NE(SelectGpus(*ParseVisibleDevices("7", true), Three()).status().message().find("no GPU '7'"),
            std::string::npos);
  EXPECT_FALSE(SelectGpus(*ParseVisibleDevices("GPU-dead", true), Three()).ok());
}

}  // namespace
}  // namespace gs::model
