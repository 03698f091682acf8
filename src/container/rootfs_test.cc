#include "src/container/rootfs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/temp_dir.h"

namespace fs = std::filesystem;

namespace gs::container {
namespace {

class RootFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(root_);
    fs::create_directories(host_);
  }
  StatusOr<int> Target(const std::string& path) {
    auto r = RootFs::Open(root_);
    EXPECT_TRUE(r.ok());
    auto fd = r->Target(path, false);
    if (fd.ok()) close(*fd);
    return fd;
  }
  gs::testing::TempDir base_{"gs-rootfs"};
  const std::string root_ = base_.path() + "/rootfs", host_ = base_.path() + "/host";
};

TEST_F(RootFsTest, CreatesMissingDirectoriesAndTheFileInsideTheRoot) {
  ASSERT_TRUE(Target("/usr/lib/x86_64-linux-gnu/libcuda.so.1").ok());
  EXPECT_TRUE(fs::is_regular_file(root_ + "/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
}

TEST_F(RootFsTest, DistributionDirectoryLinksAreFollowedInsideTheRoot) {
  fs::create_directories(root_ + "/run");
  fs::create_directories(root_ + "/var");
  fs::create_symlink("/run", root_ + "/var/run");  // absolute, as Debian has it
  ASSERT_TRUE(Target("/var/run/gpuslice-sim/state").ok());
  EXPECT_TRUE(fs::is_regular_file(root_ + "/run/gpuslice-sim/state"));
}

TEST_F(RootFsTest, LinkToAHostDirectoryIsRefusedAndTheHostIsUntouched) {
  fs::create_directories(root_ + "/usr/lib");
  fs::create_symlink(host_, root_ + "/usr/lib/x86_64-linux-gnu");
  auto fd = Target("/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("'/usr/lib/x86_64-linux-gnu' is a symbolic link"), std::string::npos)
      << fd.status().message();
  EXPECT_TRUE(fs::is_empty(host_));
}

TEST_F(RootFsTest, RelativeLinkClimbingOutStaysInsideTheRoot) {
  // ../../../.. from /usr/lib would leave the root on the host; resolved in the root it
  // stops at the root, and the file lands in the container's own /etc.
  fs::create_directories(root_ + "/usr/lib");
  fs::create_directories(root_ + "/etc");
  fs::create_symlink("../../../../../../etc", root_ + "/usr/lib/x86_64-linux-gnu");
  std::string name = "gs-rootfs-test-" + std::to_string(getpid());
  ASSERT_TRUE(Target("/usr/lib/x86_64-linux-gnu/" + name).ok());
  EXPECT_TRUE(fs::exists(root_ + "/etc/" + name));
  EXPECT_FALSE(fs::exists("/etc/" + name));
}

TEST_F(RootFsTest, LinkAsTheLastComponentIsRefused) {
  fs::create_directories(root_ + "/etc");
  std::ofstream(host_ + "/preload") << "host\n";
  fs::create_symlink(host_ + "/preload", root_ + "/etc/ld.so.preload");
  EXPECT_FALSE(Target("/etc/ld.so.preload").ok());
  fs::create_symlink("passwd", root_ + "/etc/inside");  // even one that stays inside
  EXPECT_FALSE(Target("/etc/inside").ok());
}

TEST_F(RootFsTest, DotDotIsRefused) {
  auto fd = Target("/usr/../../etc/passwd");
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("'..'"), std::string::npos);
}

}  // namespace
}  // namespace gs::container
