#include "src/node/slice_book.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>

#include "src/common/file.h"
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

// A crash mid-append leaves half a line at the end of the journal: the next start cuts it
// off, so what is appended after it starts a line of its own and a later start reads
// every record.
TEST_F(SliceBookTest, ATornTailIsCutSoLaterAppendsStayReadable) {
  {
    auto b = Book();
    std::vector<std::string> dropped;
    ASSERT_TRUE(b->Add({"r1", {"GPU-a::0"}, 1}, &dropped).ok());
  }
  // Compaction at this start must fail, so the journal is appended to, not emptied.
  auto torn = std::string("{\"add\":{\"id\":\"r2\",\"dev");
  std::ofstream(dir_ + "/allocations.log", std::ios::app) << torn;
  fs::create_directories(dir_ + "/allocations.json.tmp");
  {
    auto b = Book();  // Load() succeeds: a torn tail is not damage
    EXPECT_EQ(Ids(*b), std::set<std::string>{"r1"});
    std::vector<std::string> dropped;
    ASSERT_TRUE(b->Add({"r3", {"GPU-a::3"}, 3}, &dropped).ok());
  }
  auto read = ReadFile(dir_ + "/allocations.log");
  ASSERT_TRUE(read.ok()) << read.status().message();
  std::string journal = std::move(*read);
  EXPECT_EQ(journal.find("\"r2\""), std::string::npos) << journal;
  fs::remove(dir_ + "/allocations.json.tmp");
  EXPECT_EQ(Ids(*Book()), (std::set<std::string>{"r1", "r3"}));
}

// A full disk mid-append (here: the file size limit) fails the Add, leaves the book as it
// was and no half line behind; the next Add and a restart see a consistent journal.
TEST_F(SliceBookTest, AFailedAppendLeavesNoHalfLineAndChangesNothing) {
  auto b = Book();
  std::vector<std::string> dropped;
  ASSERT_TRUE(b->Add({"r1", {"GPU-a::0"}, 1}, &dropped).ok());
  off_t size = static_cast<off_t>(fs::file_size(dir_ + "/allocations.log"));
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails (EFBIG) or is short
  struct rlimit small = old_limit;
  small.rlim_cur = static_cast<rlim_t>(size + 10);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  Status s = b->Add({"r2", {"GPU-a::0", "GPU-b::0"}, 2}, &dropped);  // would drop r1
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  signal(SIGXFSZ, SIG_DFL);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("allocations.log"), std::string::npos) << s.message();
  EXPECT_TRUE(dropped.empty());
  EXPECT_EQ(Ids(*b), std::set<std::string>{"r1"});                                // r1 not dropped, r2 not added
  EXPECT_EQ(static_cast<off_t>(fs::file_size(dir_ + "/allocations.log")), size);  // cut back
  ASSERT_TRUE(b->Add({"r3", {"GPU-a::2"}, 3}, &dropped).ok());
  b.reset();
  model::SplitPolicy p;
  SliceBook again({}, p, dir_);
  EXPECT_TRUE(again.Load().ok());
  EXPECT_EQ(Ids(again), (std::set<std::string>{"r1", "r3"}));
}

// Compaction that cannot write its snapshot loses nothing: the journal keeps every change
// and the old snapshot stays.
TEST_F(SliceBookTest, AFailedCompactionLosesNoRecord) {
  {
    auto b = Book();
    std::vector<std::string> dropped;
    ASSERT_TRUE(b->Add({"r0", {"GPU-a::3"}, 1}, &dropped).ok());
  }
  Book();                                                  // r0 folded into the snapshot
  fs::create_directories(dir_ + "/allocations.json.tmp");  // the next snapshot cannot be written
  {
    auto b = Book();
    std::vector<std::string> dropped;
    for (int i = 0; i < SliceBook::kCompactEvery + 5; ++i)
      ASSERT_TRUE(b->Add({Numbered("r", i + 1), {Numbered("GPU-a::", i % 3)}, i}, &dropped).ok());
    EXPECT_GT(fs::file_size(dir_ + "/allocations.log"), 2000u);  // not emptied: nothing was folded in
  }
  fs::remove(dir_ + "/allocations.json.tmp");
  auto n = std::to_string(SliceBook::kCompactEvery + 5);
  auto ids = Ids(*Book());
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids.count("r0"), 1u);
  EXPECT_EQ(ids.count("r" + n), 1u);
}

// A damaged snapshot is an error the agent must not answer by deleting directories: the
// container directories stay, the snapshot is kept aside for the operator.
TEST_F(SliceBookTest, ADamagedSnapshotKeepsEveryContainerDirectory) {
  {
    auto b = Book();
    std::vector<std::string> dropped;
    ASSERT_TRUE(b->Add({"running", {"GPU-a::0"}, 1}, &dropped).ok());
    fs::create_directories(b->SharedDir("running"));
  }
  Book();
  std::ofstream(dir_ + "/allocations.json") << "{\"allocations\": [{\"id\": \"runn";  // torn by a bad disk
  model::SplitPolicy p;
  p.split_count = 4;
  SliceBook b({{"GPU-a", 0, "T4", 16ull << 30, 0, 0, true}}, p, dir_);
  Status s = b.Load();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("allocations.json is damaged"), std::string::npos) << s.message();
  EXPECT_TRUE(fs::exists(dir_ + "/allocations.json.damaged"));
  ContainerDirs dirs(&b, 2);
  dirs.Start(/*keep_unrecorded=*/!s.ok());
  dirs.Settle();
  EXPECT_TRUE(fs::exists(b.SharedDir("running")));
  // The next start loads cleanly (the damage was compacted away), but the record is still
  // lost: the directories stay until an operator removes the *.damaged files.
  SliceBook again({{"GPU-a", 0, "T4", 16ull << 30, 0, 0, true}}, p, dir_);
  EXPECT_TRUE(again.Load().ok());
  EXPECT_TRUE(again.HasDamagedRecords());
  fs::remove(dir_ + "/allocations.json.damaged");
  EXPECT_TRUE(again.HasDamagedRecords()) << "the journal as it was is kept too";
  fs::remove(dir_ + "/allocations.log.damaged");
  EXPECT_FALSE(again.HasDamagedRecords());
}

// Found by fuzz/journal_fuzzer.cc: a record the agent never writes is damage, not loaded:
// a time that is not an integer (reading a huge float as int64_t was undefined behaviour),
// an id that is not one directory name (the agent would recycle or remove
// <state>/containers/.., the state directory itself). Regressions in fuzz/regressions/journal/.
TEST_F(SliceBookTest, RecordsTheAgentNeverWritesAreDamageAndNotLoaded) {
  std::ofstream(dir_ + "/allocations.log") << R"({"add":{"id":"r1","devices":["GPU-a::0"],"created":1e300}}
{"add":{"id":"..","devices":["GPU-a::1"],"created":1}}
{"add":{"id":"","devices":[],"created":1}}
{"add":{"id":"../../etc","devices":[],"created":1}}
{"add":{"id":"r2","devices":["GPU-a::2"],"created":2}}
)";
  model::SplitPolicy p;
  SliceBook b({}, p, dir_);
  Status s = b.Load();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("allocations.log line 1 is damaged: 'created' is not an integer"), std::string::npos)
      << s.message();
  EXPECT_EQ(Ids(b), std::set<std::string>{"r2"});
  EXPECT_TRUE(fs::exists(dir_ + "/allocations.log.damaged"));
}

// A recycled directory's limits file is a new inode: a container still running from the
// directory keeps reading its own limits, never the next container's.
TEST_F(SliceBookTest, ARecycledDirectoryGetsANewLimitsInode) {
  auto b = Book();
  ContainerDirs dirs(b.get(), 1);
  dirs.Start();
  dirs.Settle();
  std::string id;
  ASSERT_TRUE(dirs.Take(&id).ok());
  std::string limits = b->ContainerDir(id) + "/limits";
  std::ofstream(limits) << "CUDA_DEVICE_MEMORY_LIMIT_0=1g\n";
  struct stat before;
  ASSERT_EQ(stat(limits.c_str(), &before), 0);
  int held = open(limits.c_str(), O_RDONLY);  // as the container's bind mount holds it
  ASSERT_GE(held, 0);
  dirs.Discard(id);
  dirs.Settle();
  std::string next;
  ASSERT_TRUE(dirs.Take(&next).ok());
  // The discarded directory was recycled (spares wanted, nothing else to reuse).
  std::string next_limits = b->ContainerDir(next) + "/limits";
  struct stat after;
  ASSERT_EQ(stat(next_limits.c_str(), &after), 0);
  EXPECT_NE(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_size, 0);
  std::ofstream(next_limits) << "CUDA_DEVICE_MEMORY_LIMIT_0=2g\n";
  char buf[64] = {};
  ASSERT_GT(pread(held, buf, sizeof(buf) - 1, 0), 0);
  EXPECT_STREQ(buf, "CUDA_DEVICE_MEMORY_LIMIT_0=1g\n");
  close(held);
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
