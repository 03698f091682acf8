// ContainerDirs' per-container tmpfs (the directory holding `limits` and the writable
// `shared/`): its size and file count are bounded, it cannot hold programs or devices, each
// container gets a fresh one, removal unmounts it, a directory of an older agent's layout is
// recycled too, and an agent that cannot mount fails closed with the reason.
#include "src/node/container_dirs.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/temp_dir.h"

namespace fs = std::filesystem;

namespace gs::node {
namespace {

bool Mounted(const std::string& path) {
  std::ifstream info("/proc/self/mountinfo");
  for (std::string line; std::getline(info, line);)
    if (line.find(" " + path + " ") != std::string::npos) return true;
  return false;
}

class ContainerDirsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ + "/containers");
    model::SplitPolicy p;
    p.split_count = 4;
    book_ = std::make_unique<SliceBook>(std::vector<model::Gpu>{{"GPU-a", 0, "T4", 16ull << 30, 0, 0, true}}, p, dir_);
    ASSERT_TRUE(book_->Load().ok());
  }
  gs::testing::TempDir tmp_{"gs-dirs"};
  const std::string dir_ = tmp_.path();
  std::unique_ptr<SliceBook> book_;
};

TEST_F(ContainerDirsTest, SharedDirectoryIsABoundedTmpfs) {
  if (geteuid() != 0) {
    std::cout << "NOTE: needs root (mount): the per-container tmpfs was NOT tested\n";
    GTEST_SKIP();
  }
  auto dirs = std::make_unique<ContainerDirs>(book_.get(), 2, 2ull << 20);
  dirs->Start();
  std::string id;
  ASSERT_TRUE(dirs->Take(&id).ok());
  std::string shared = book_->SharedDir(id), first = book_->ContainerDir(id);
  EXPECT_TRUE(Mounted(first));
  struct statfs sf;
  ASSERT_EQ(statfs(shared.c_str(), &sf), 0);
  EXPECT_EQ(sf.f_type, static_cast<decltype(sf.f_type)>(TMPFS_MAGIC));
  struct stat on_disk, limits, region_dir;
  ASSERT_EQ(stat(book_->ContainersDir().c_str(), &on_disk), 0);
  ASSERT_EQ(stat(book_->LimitsFile(id).c_str(), &limits), 0);
  ASSERT_EQ(stat(shared.c_str(), &region_dir), 0);
  EXPECT_NE(limits.st_dev, on_disk.st_dev) << "the limits file is on the state disk";
  EXPECT_EQ(limits.st_dev, region_dir.st_dev) << "limits and shared/ are on one tmpfs";
  EXPECT_EQ(static_cast<uint64_t>(sf.f_blocks) * sf.f_bsize, 2ull << 20);
  EXPECT_EQ(sf.f_flags & (ST_NOSUID | ST_NODEV | ST_NOEXEC),
            static_cast<unsigned long>(ST_NOSUID | ST_NODEV | ST_NOEXEC));
  struct stat st;
  ASSERT_EQ(stat(shared.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0777u);  // container processes run as any user

  // 3 MiB into a 2 MiB directory: refused at 2 MiB.
  int fd = open((shared + "/big").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  std::vector<char> mib(1 << 20, 'x');
  int written = 0;
  while (written < 3 && write(fd, mib.data(), mib.size()) == static_cast<ssize_t>(mib.size())) ++written;
  int err = errno;
  close(fd);
  EXPECT_EQ(written, 2);
  EXPECT_EQ(err, ENOSPC);
  int files = 0;
  for (; files < 1000; ++files) {
    int f = open((shared + "/f" + std::to_string(files)).c_str(), O_CREAT | O_WRONLY | O_EXCL, 0644);
    if (f < 0) break;
    close(f);
  }
  EXPECT_LT(files, ContainerDirs::kSharedDirInodes);

  // Recycled for the next container: a fresh, empty tmpfs; the old one is unmounted.
  dirs->Discard(id);
  dirs->Settle();
  EXPECT_FALSE(Mounted(first));
  std::vector<std::string> taken;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(dirs->Take(&id).ok());
    taken.push_back(id);
    EXPECT_TRUE(Mounted(book_->ContainerDir(id)));
    EXPECT_TRUE(fs::is_empty(book_->SharedDir(id)));
    EXPECT_EQ(fs::file_size(book_->LimitsFile(id)), 0u);
  }
  // A restart with no record of them removes them, mounts and all.
  dirs = std::make_unique<ContainerDirs>(book_.get(), 0, 2ull << 20);  // no spares: only the cleanup
  dirs->Start();
  dirs->Settle();
  for (const auto& t : taken) {
    EXPECT_FALSE(Mounted(book_->ContainerDir(t))) << t;
    EXPECT_FALSE(fs::exists(book_->ContainerDir(t))) << t;
  }
}

// A directory an older agent made (its tmpfs at `shared/` alone, the limits file on the
// state disk) and a container still uses when the agent is upgraded: once discarded it is
// recycled like any other, nothing of it left mounted or on the disk.
TEST_F(ContainerDirsTest, AnOlderAgentsDirectoryIsRecycledToo) {
  if (geteuid() != 0) {
    std::cout << "NOTE: needs root (mount): recycling an older agent's directory was NOT tested\n";
    GTEST_SKIP();
  }
  std::vector<std::string> dropped;
  ASSERT_TRUE(book_->Add({"old", {"GPU-a::0"}, 1}, &dropped).ok());
  const std::string dir = book_->ContainerDir("old");
  fs::create_directories(book_->SharedDir("old"));
  std::ofstream(book_->LimitsFile("old")) << "CUDA_DEVICE_MEMORY_LIMIT_0=1g\n";
  ASSERT_EQ(
      mount("gpuslice-shared", book_->SharedDir("old").c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1m"),
      0);
  std::ofstream(book_->RegionFile("old")) << "x";
  ContainerDirs dirs(book_.get(), 0, 2ull << 20);  // no spares: Take makes each directory
  dirs.Start();
  dirs.Settle();
  struct stat before;
  ASSERT_EQ(stat(dir.c_str(), &before), 0);
  book_->Remove("old");
  std::string id;
  {
    // Held back by a call, the background thread leaves the discarded directory to Take.
    ContainerDirs::Call call(&dirs);
    dirs.Discard("old");
    ASSERT_TRUE(dirs.Take(&id).ok());
  }
  struct stat after;
  ASSERT_EQ(stat(book_->ContainerDir(id).c_str(), &after), 0);
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_FALSE(Mounted(book_->SharedDir("old")));
  EXPECT_TRUE(Mounted(book_->ContainerDir(id)));
  EXPECT_TRUE(fs::is_empty(book_->SharedDir(id)));
  EXPECT_EQ(fs::file_size(book_->LimitsFile(id)), 0u);
  // The same directory on the state disk, under its tmpfs now: no new inode was made.
  struct stat disk;
  ASSERT_EQ(umount2(book_->ContainerDir(id).c_str(), MNT_DETACH), 0);
  ASSERT_EQ(stat(book_->ContainerDir(id).c_str(), &disk), 0);
  EXPECT_EQ(disk.st_ino, before.st_ino);
  EXPECT_TRUE(fs::is_empty(book_->ContainerDir(id))) << "the old limits file and shared/ are left on the disk";
}

// A container's directory discarded during an Allocate is recycled once the call ends, not
// beside it; when spares run short the background works during calls too.
TEST_F(ContainerDirsTest, BackgroundWorkWaitsForTheCallInProgress) {
  ContainerDirs dirs(book_.get(), 4, 0);
  dirs.Start();
  dirs.Settle();
  std::string gone, kept;
  ASSERT_TRUE(dirs.Take(&gone).ok());
  {
    ContainerDirs::Call call(&dirs);
    dirs.Discard(gone);
    // Nothing to wait for: the directory must still be there after the thread had ample
    // time to act, had it not been held back.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(fs::exists(book_->ContainerDir(gone))) << "recycled during the call";
  }
  dirs.Settle();
  EXPECT_FALSE(fs::exists(book_->ContainerDir(gone))) << "not recycled after the call";
  {
    ContainerDirs::Call call(&dirs);
    std::vector<std::string> taken(4);
    for (auto& id : taken) ASSERT_TRUE(dirs.Take(&id).ok());  // spares run out: urgent
    dirs.Settle();
    EXPECT_GT(std::distance(fs::directory_iterator(dir_ + "/containers"), fs::directory_iterator()), 4)
        << "no spare was made again during the call";
  }
}

// An agent without the right to mount makes plain directories (--shared-dir-size 0) and
// recycles them all the same: its unmount attempts are refused (EPERM), not failures.
TEST_F(ContainerDirsTest, PlainDirectoriesAreRecycledWithoutTheRightToMount) {
  if (geteuid() == 0) {
    fs::permissions(dir_, fs::perms::all);
    fs::permissions(dir_ + "/containers", fs::perms::all);
  }
  pid_t child = fork();
  if (child == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    ContainerDirs dirs(book_.get(), 0, 0);
    std::string first, second;
    if (!dirs.Take(&first).ok()) _exit(4);
    struct stat before, after;
    // Held open: were the directory removed and another made, it could not get its inode.
    int held = open(book_->ContainerDir(first).c_str(), O_PATH | O_DIRECTORY);
    if (held < 0 || fstat(held, &before) != 0) _exit(5);
    {
      ContainerDirs::Call call(&dirs);  // holds the background thread back: Take recycles
      dirs.Discard(first);
      if (!dirs.Take(&second).ok()) _exit(6);
    }
    if (stat(book_->ContainerDir(second).c_str(), &after) != 0) _exit(7);
    _exit(after.st_ino == before.st_ino && !fs::exists(book_->ContainerDir(first)) ? 0 : 8);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: cannot drop to nobody, 4/6: Take failed, 8: not recycled";
}

// Without the right to mount (an agent started without CAP_SYS_ADMIN), Take fails with
// the reason and the way out, and leaves nothing behind: no container gets an unbounded
// directory by accident.
TEST_F(ContainerDirsTest, WithoutTheRightToMountTakeFailsClosed) {
  if (geteuid() == 0) {
    // Drop to nobody in a child: the refusal must come from the kernel, as in a real
    // unprivileged agent.
    fs::permissions(dir_, fs::perms::all);
    fs::permissions(dir_ + "/containers", fs::perms::all);
  }
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t child = fork();
  if (child == 0) {
    close(pipefd[0]);
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    ContainerDirs dirs(book_.get(), 0, 4ull << 20);
    std::string id;
    Status s = dirs.Take(&id);
    std::string msg = s.ok() ? "ok" : s.message();
    (void)!write(pipefd[1], msg.data(), msg.size());
    _exit(0);
  }
  close(pipefd[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof(buf))) > 0;) msg.append(buf, n);
  close(pipefd[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NE(msg.find("cannot mount a 4194304-byte tmpfs at"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--shared-dir-size 0"), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_empty(dir_ + "/containers"));
}

}  // namespace
}  // namespace gs::node
