#include "src/node/durable_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <string>

#include "src/common/file.h"
#include "tests/temp_dir.h"

namespace gs::node {
namespace {

std::string Read(const std::string& path) {
  auto text = ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status().message();
  return text.ok() ? *text : "";
}

TEST(WriteFileDurably, ReplacesTheFileWhole) {
  gs::testing::TempDir tmp("gs-durable");
  std::string path = tmp.path() + "/spec.json";
  ASSERT_TRUE(WriteFileDurably(path, "one\n").ok());
  ASSERT_TRUE(WriteFileDurably(path, "two\n").ok());
  EXPECT_EQ(Read(path), "two\n");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

// A full disk (here: the file size limit) fails the write with the path named, and the
// old text stays as it was, with no temporary file left behind.
TEST(WriteFileDurably, AFullDiskLeavesTheOldFile) {
  gs::testing::TempDir tmp("gs-durable");
  std::string path = tmp.path() + "/allocations.json";
  ASSERT_TRUE(WriteFileDurably(path, "old\n").ok());
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 100;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  Status s = WriteFileDurably(path, std::string(4096, 'x'));
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  signal(SIGXFSZ, SIG_DFL);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path + ".tmp"), std::string::npos) << s.message();
  EXPECT_EQ(Read(path), "old\n");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_FALSE(WriteFileDurably(tmp.path() + "/no/such/dir/f", "x").ok());
}

}  // namespace
}  // namespace gs::node
