#include "src/common/file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/temp_dir.h"

namespace gs {
namespace {

TEST(ReadFile, ReadsTheWholeFileBinarySafe) {
  testing::TempDir dir("gs-file");
  std::string bytes("a\0b\nc", 5);
  bytes += std::string(200000, 'x');  // more than one read
  std::ofstream(dir.path() + "/f", std::ios::binary) << bytes;
  auto text = ReadFile(dir.path() + "/f");
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text, bytes);
}

TEST(ReadFile, ReadsAnEmptyFileAndProcFiles) {
  testing::TempDir dir("gs-file");
  { std::ofstream touch(dir.path() + "/empty"); }
  auto empty = ReadFile(dir.path() + "/empty");
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_EQ(*empty, "");
  // /proc files report size 0 and are read to their end all the same.
  auto cmdline = ReadFile("/proc/self/cmdline");
  ASSERT_TRUE(cmdline.ok()) << cmdline.status().message();
  EXPECT_FALSE(cmdline->empty());
  auto stat = ReadFile("/proc/" + std::to_string(getpid()) + "/stat");
  ASSERT_TRUE(stat.ok()) << stat.status().message();
  EXPECT_EQ(stat->rfind(std::to_string(getpid()) + " (", 0), 0u) << *stat;
}

TEST(ReadFile, NamesThePathAndTheReason) {
  testing::TempDir dir("gs-file");
  auto missing = ReadFile(dir.path() + "/missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), dir.path() + "/missing: No such file or directory");

  auto under_file = ReadFile("/proc/self/cmdline/x");  // a file where a directory should be
  ASSERT_FALSE(under_file.ok());
  EXPECT_EQ(under_file.status().code(), StatusCode::kNotFound);

  auto directory = ReadFile(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(directory.status().message(), dir.path() + ": Is a directory");
}

}  // namespace
}  // namespace gs
