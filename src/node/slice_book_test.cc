#include "src/node/slice_book.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "src/node/container_dirs.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;

namespace gs::node {
namespace {

class SliceBookTest : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directories(dir_ + "/containers"); }
  std::unique_ptr<SliceBook> Book() {
    model::SplitPolicy p;
    p.split_count = 4;
    auto b = std::make_unique<SliceBook>(std::vector<model::Gpu>{{"GPU-a", 0, "T4", 16ull << 30, 0, 0, true}}, p, dir_);
    EXPECT_TRUE(b->Load().ok());
    return b;
  }
  std::set<std::string> Ids(const SliceBook& b) {
    std::set<std::string> ids;
    for (const auto& r : b.Records()) ids.insert(r.id);
    return ids;
  }
  gs::testing::TempDir tmp_{"gs-book"};
  const std::string dir_ = tmp_.path();
};

TEST_F(SliceBookTest, RecordsSurviveARestartThroughTheJournal) {
  {
    auto b = Book();
    std::vector<std::string> dropped;
    ASSERT_TRUE(b->Add({"r1", {"GPU-a::0"}, 1}, &dropped).ok());
    ASSERT_TRUE(b->Add({"r2", {"GPU-a::1"}, 2}, &dropped).ok());
    ASSERT_TRUE(b->Add({"r3", {"GPU-a::2"}, 3}, &dropped).ok());
    b->Remove("r2");
    // A new container on r1's slice: r1's container is gone.
    ASSERT_TRUE(b->Add({"r4", {"GPU-a::0"}, 4}, &dropped).ok());
    EXPECT_EQ(dropped, std::vector<std::string>{"r1"});
    EXPECT_GT(fs::file_size(dir_ + "/allocations.log"), 0u);  // appended, not yet folded in
  }
  auto again = Book();
  EXPECT_EQ(Ids(*again), (std::set<std::string>{"r3", "r4"}));
  EXPECT_EQ(fs::file_size(dir_ + "/allocations.log"), 0u);  // compacted into the snapshot at load
  EXPECT_EQ(Ids(*Book()), (std::set<std::string>{"r3", "r4"}));
}

TEST_F(SliceBookTest, TornLastLineFromACrashIsIgnoredAndADamagedOneIsReported) {
  {
    auto b = Book();
    std::vector<std::string> dropped;
    ASSERT_TRUE(b->Add({"r1", {"GPU-a::0"}, 1}, &dropped).ok());
  }
  std::ofstream(dir_ + "/allocations.log", std::ios::app) << "{\"add\":{\"id\":\"r2\",\"dev";
  EXPECT_EQ(Ids(*Book()), std::set<std::string>{"r1"});

  std::ofstream(dir_ + "/allocations.log", std::ios::app) << "not json\n{\"remove\":\"r1\"}\n";
  model::SplitPolicy p;
  SliceBook b({}, p, dir_);
  Status s = b.Load();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("allocations.log line 1 is damaged"), std::string::npos) << s.message();
}

// prefix + number, appended to a string that owns the prefix. Not "r" + std::to_string(i):
// that operator+ inserts the literal in front of the temporary, and GCC 12 at -O3 then
// reports an impossible overlap in the inlined memcpy (-Wrestrict, a known false positive).
std::string Numbered(const char* prefix, int i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

TEST_F(SliceBookTest, CompactsAfterManyChangesAndKeepsEveryRecord) {
  auto b = Book();
  std::vector<std::string> dropped;
  for (int i = 0; i < SliceBook::kCompactEvery + 10; ++i)
    ASSERT_TRUE(b->Add({Numbered("r", i), {Numbered("GPU-a::", i % 4)}, i}, &dropped).ok());
  EXPECT_LT(fs::file_size(dir_ + "/allocations.log"), 2000u);  // folded in once on the way
  b.reset();
  auto n = std::to_string(SliceBook::kCompactEvery + 9);
  EXPECT_EQ(Ids(*Book()).size(), 4u);
  EXPECT_EQ(Ids(*Book()).count("r" + n), 1u);
}

TEST_F(SliceBookTest, ContainerDirsAreReadyMadeAndRecycledWithNothingTheContainerLeft) {
  auto b = Book();
  std::vector<std::string> dropped;
  ASSERT_TRUE(b->Add({"kept", {"GPU-a::3"}, 1}, &dropped).ok());
  fs::create_directories(b->ContainerDir("kept"));      // a running container's
  fs::create_directories(b->ContainerDir("leftover"));  // a spare of a previous run
  ContainerDirs dirs(b.get(), 3);
  dirs.Start();
  dirs.Settle();
  EXPECT_FALSE(fs::exists(b->ContainerDir("leftover")));
  EXPECT_TRUE(fs::exists(b->ContainerDir("kept")));
  std::string id;
  ASSERT_TRUE(dirs.Take(&id).ok());
  struct stat st;
  ASSERT_EQ(stat(b->SharedDir(id).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0777u);  // container processes run as any user
  ASSERT_EQ(stat(b->ContainerDir(id).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0022, 0u);  // only the agent writes here
  EXPECT_TRUE(fs::is_regular_file(b->ContainerDir(id) + "/limits"));
  // The limits file is not inside the directory a container may write.
  EXPECT_NE((b->ContainerDir(id) + "/limits").rfind(b->SharedDir(id) + "/", 0), 0u);

  // What the container left behind: its region, a link out, a directory.
  std::ofstream(b->ContainerDir(id) + "/limits") << "CUDA_DEVICE_MEMORY_LIMIT_0=1g\n";
  std::ofstream(b->RegionFile(id)) << "x";
  fs::create_symlink("/etc", b->SharedDir(id) + "/escape");
  fs::create_directories(b->SharedDir(id) + "/deep/er");
  dirs.Discard(id);
  dirs.Settle();
  EXPECT_FALSE(fs::exists(b->ContainerDir(id)));
  EXPECT_TRUE(fs::exists("/etc/passwd"));  // the link was removed, not followed
  // Spares (recycled or new) come out empty, every id distinct, more takes than spares too.
  std::set<std::string> ids;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(dirs.Take(&id).ok());
    ids.insert(id);
    EXPECT_TRUE(fs::is_empty(b->SharedDir(id)));
    EXPECT_TRUE(fs::is_regular_file(b->ContainerDir(id) + "/limits"));
  }
  EXPECT_EQ(ids.size(), 10u);
}

}  // namespace
}  // namespace gs::node
