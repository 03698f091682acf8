#include "src/container/library_dirs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/temp_dir.h"

namespace fs = std::filesystem;

namespace gs::container {
namespace {

class ImageLibraryDirTest : public ::testing::Test {
 protected:
  void File(const std::string& path) {
    fs::create_directories(fs::path(root_ + path).parent_path());
    std::ofstream(root_ + path) << "x";
  }
  std::string Detect() {
    auto r = RootFs::Open(root_);
    EXPECT_TRUE(r.ok());
    return ImageLibraryDir(*r);
  }
  gs::testing::TempDir tmp_{"gs-libdir"};
  const std::string root_ = tmp_.path();
};

TEST_F(ImageLibraryDirTest, DebianFamilyImageUsesItsMultiarchDirectory) {
  File("/usr/lib/x86_64-linux-gnu/libc.so.6");
  fs::create_directories(root_ + "/usr/lib64");   // bookworm has it too, for the loader's link
  fs::create_symlink("usr/lib", root_ + "/lib");  // merged /usr
  EXPECT_EQ(Detect(), "/usr/lib/x86_64-linux-gnu");
}

TEST_F(ImageLibraryDirTest, RhelFamilyImageUsesLib64) {
  File("/usr/lib64/libc.so.6");
  File("/usr/lib/os-release");
  fs::create_symlink("usr/lib64", root_ + "/lib64");
  EXPECT_EQ(Detect(), "/usr/lib64");
}

TEST_F(ImageLibraryDirTest, UnmergedImageUsesLibMultiarch) {
  File("/lib/x86_64-linux-gnu/libc.so.6");
  EXPECT_EQ(Detect(), "/lib/x86_64-linux-gnu");
}

TEST_F(ImageLibraryDirTest, StaticImageHasNone) {
  File("/bin/busybox");
  EXPECT_EQ(Detect(), "");
}

TEST_F(ImageLibraryDirTest, LinksPlantedInTheImageAreNotFollowed) {
  // A libc.so.6 that is a link (anywhere on the way) might lead out of the root: not used.
  fs::create_directories(root_ + "/usr/lib64");
  fs::create_symlink("/usr/lib/x86_64-linux-gnu/libc.so.6", root_ + "/usr/lib64/libc.so.6");
  fs::create_directories(root_ + "/usr/lib");
  fs::create_symlink("/usr/lib/x86_64-linux-gnu", root_ + "/usr/lib/x86_64-linux-gnu");
  EXPECT_EQ(Detect(), "");
}

TEST(PlaceLibraries, MovesOnlyLibrariesIntoEachDirectory) {
  model::ContainerEdits edits;
  edits.mounts = {{"/host/usr/lib64/libcuda.so.550.1", "/usr/lib64/libcuda.so.1", true, true},
                  {"/state/lib/v/libgpuslice.so", "/usr/lib/gpuslice/v/libgpuslice.so", true, false},
                  {"/host/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi", true, false}};
  PlaceLibraries(&edits, {"/usr/lib/x86_64-linux-gnu", "/usr/lib64"});
  ASSERT_EQ(edits.mounts.size(), 4u);
  EXPECT_EQ(edits.mounts[0].container_path, "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  EXPECT_EQ(edits.mounts[1].container_path, "/usr/lib64/libcuda.so.1");
  EXPECT_EQ(edits.mounts[0].host_path, "/host/usr/lib64/libcuda.so.550.1");
  EXPECT_EQ(edits.mounts[2].container_path, "/usr/lib/gpuslice/v/libgpuslice.so");
  EXPECT_EQ(edits.mounts[3].container_path, "/usr/bin/nvidia-smi");
  PlaceLibraries(&edits, {});
  EXPECT_EQ(edits.mounts.size(), 4u);
}

}  // namespace
}  // namespace gs::container
