#include "src/host/region_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "src/common/proc_identity.h"
#include "src/region/region.h"
#include "tests/temp_dir.h"

namespace gs::host {
namespace {

namespace rg = gs::region;

class ContainerRegionTest : public ::testing::Test {
 protected:
  // A region as a container's enforcer leaves it: one device, one process with 1 GiB.
  std::string MakeRegion(const std::string& name) {
    std::string path = tmp_.path() + "/" + name;
    rg::OpenError err;
    char msg[256];
    rg::Region* r = rg::OpenRegion(path.c_str(), &err, msg, sizeof(msg));
    EXPECT_NE(r, nullptr) << msg;
    snprintf(r->devices[0].uuid, sizeof(r->devices[0].uuid), "GPU-1234-abcd");
    r->devices[0].memory_limit.store(4ull << 30);
    r->devices[0].card_tenant_id.store(77);
    r->device_count.store(1);
    rg::ProcessSlot* slot = rg::ClaimSlot(r, getpid(), ProcessStartTime(getpid()), OwnPidNamespace());
    EXPECT_NE(slot, nullptr);
    slot->pid_namespace.store(OwnPidNamespace());
    EXPECT_TRUE(rg::Reserve(r, slot, 0, 1ull << 30, false, 0));
    rg::CloseRegion(r);
    return path;
  }
  // Overwrites bytes of the file at offset, as a container may.
  void Poke(const std::string& path, size_t offset, const void* bytes, size_t size) {
    int fd = open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, bytes, size, static_cast<off_t>(offset)), static_cast<ssize_t>(size));
    close(fd);
  }
  gs::testing::TempDir tmp_{"gs-host"};
};

TEST_F(ContainerRegionTest, ReadsWhatTheEnforcerWroteAndWritesOnlyTheHostPid) {
  std::string path = MakeRegion("region");
  auto r = ContainerRegion::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->consistent());
  EXPECT_EQ(r->rejected(), 0);
  ASSERT_EQ(r->devices().size(), 1u);
  EXPECT_EQ(r->devices()[0].uuid, "GPU-1234-abcd");
  EXPECT_EQ(r->devices()[0].memory_limit, 4ull << 30);
  EXPECT_GE(r->devices()[0].memory_used, 1ull << 30);
  EXPECT_EQ(r->devices()[0].card_tenant_id, 77u);
  ASSERT_EQ(r->processes().size(), 1u);
  const RegionProcess p = r->processes()[0];
  EXPECT_EQ(p.pid, static_cast<uint32_t>(getpid()));
  EXPECT_EQ(p.start_time, ProcessStartTime(getpid()));
  EXPECT_EQ(p.pid_namespace, OwnPidNamespace());
  EXPECT_NE(p.pid_namespace, 0u);

  ASSERT_TRUE(r->WriteHostPid(p.slot, p.pid, 4242).ok());
  EXPECT_FALSE(r->WriteHostPid(p.slot, p.pid + 1, 1).ok());  // the slot is no longer that process's
  ASSERT_TRUE(r->Read().ok());
  EXPECT_EQ(r->processes()[0].host_pid, 4242u);
  EXPECT_GE(r->devices()[0].memory_used, 1ull << 30);  // nothing else changed
}

TEST_F(ContainerRegionTest, RefusesWhatIsNotARegionAndNamesIt) {
  std::string path = MakeRegion("region");
  EXPECT_EQ(ContainerRegion::Open(tmp_.path() + "/none").status().code(), StatusCode::kNotFound);
  // A link is not followed, even to a valid region (a container could point it anywhere).
  std::filesystem::create_symlink(path, tmp_.path() + "/link");
  auto link = ContainerRegion::Open(tmp_.path() + "/link");
  EXPECT_NE(link.status().message().find("not a regular file"), std::string::npos) << link.status().message();
  // A FIFO is refused without blocking the reader.
  ASSERT_EQ(mkfifo((tmp_.path() + "/fifo").c_str(), 0666), 0);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(ContainerRegion::Open(tmp_.path() + "/fifo").ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  { std::ofstream touch(tmp_.path() + "/empty"); }
  EXPECT_EQ(ContainerRegion::Open(tmp_.path() + "/empty").status().code(), StatusCode::kUnavailable);
  std::ofstream(tmp_.path() + "/short") << "GSREGION";
  auto short_file = ContainerRegion::Open(tmp_.path() + "/short");
  EXPECT_NE(short_file.status().message().find("shorter than a region"), std::string::npos);
  uint64_t wrong = 0x1234;
  Poke(path, offsetof(rg::Region, magic), &wrong, sizeof(wrong));
  auto foreign = ContainerRegion::Open(path);
  EXPECT_NE(foreign.status().message().find("not a gpuslice region"), std::string::npos);
}

// Fields a container garbled are left out, never passed on.
TEST_F(ContainerRegionTest, GarbledFieldsAreRejected) {
  std::string path = MakeRegion("region");
  std::string unterminated(sizeof(rg::Device::uuid), 'A');  // strlen would run past the field
  Poke(path, offsetof(rg::Region, devices) + sizeof(rg::Device) + offsetof(rg::Device, uuid), unterminated.data(),
       unterminated.size());
  const char escape[] = "../../etc/passwd";
  Poke(path, offsetof(rg::Region, devices) + 2 * sizeof(rg::Device) + offsetof(rg::Device, uuid), escape,
       sizeof(escape));
  uint32_t huge_pid = 0xFFFFFFF0;
  Poke(path, offsetof(rg::Region, procs) + 5 * sizeof(rg::ProcessSlot) + offsetof(rg::ProcessSlot, pid), &huge_pid,
       sizeof(huge_pid));
  auto r = ContainerRegion::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->rejected(), 3);
  ASSERT_EQ(r->devices().size(), 1u);
  EXPECT_EQ(r->devices()[0].uuid, "GPU-1234-abcd");
  EXPECT_EQ(r->processes().size(), 1u);
}

// A hostile container process, while the host reads its region: truncates the file and
// writes it back, holds the file lock, forges the robust mutex (owned by a live process
// that will never unlock) and keeps the seqlock odd. The reader never faults, never
// blocks, and gets either a validated copy or an error naming the problem.
TEST_F(ContainerRegionTest, AHostileContainerCannotFaultOrBlockTheReader) {
  std::string path = MakeRegion("region");
  std::vector<char> good(sizeof(rg::Region));
  {
    std::ifstream in(path, std::ios::binary);
    in.read(good.data(), static_cast<std::streamsize>(good.size()));
  }
  pid_t hostile = fork();
  if (hostile == 0) {
    int fd = open(path.c_str(), O_RDWR);
    if (fd < 0) _exit(2);
    flock(fd, LOCK_EX);  // held for its whole life
    // The mutex word: "locked by pid 1", which never unlocks it.
    uint32_t owner = 1;
    uint64_t odd = 1;
    for (unsigned i = 0;; ++i) {
      switch (i % 4) {
        case 0:
          (void)!ftruncate(fd, 0);
          break;
        case 1:
          (void)!ftruncate(fd, 4096);
          break;
        case 2:
          (void)!pwrite(fd, good.data(), good.size(), 0);
          (void)!pwrite(fd, &owner, sizeof(owner), offsetof(rg::Region, mutex));
          (void)!pwrite(fd, &odd, sizeof(odd), offsetof(rg::Region, seq));
          break;
        default:
          (void)!pwrite(fd, good.data(), good.size(), 0);
          break;
      }
      usleep(200);
    }
  }
  ASSERT_GT(hostile, 0);
  int ok = 0, refused = 0;
  auto slowest = std::chrono::nanoseconds(0);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < end) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = ContainerRegion::Open(path);
    if (r.ok()) {
      ++ok;
      for (const auto& d : r->devices()) EXPECT_EQ(d.uuid, "GPU-1234-abcd");
      for (const auto& p : r->processes()) (void)r->WriteHostPid(p.slot, p.pid, 1);
    } else {
      ++refused;
    }
    slowest = std::max(slowest, std::chrono::steady_clock::now() - t0);
  }
  kill(hostile, SIGKILL);
  int status = 0;
  waitpid(hostile, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status)) << "the hostile process stopped early";
  std::cout << "reads: " << ok << " copies, " << refused << " refused; slowest "
            << std::chrono::duration<double, std::milli>(slowest).count() << " ms\n";
  EXPECT_GT(ok + refused, 100);
  EXPECT_GT(refused, 0);  // it did catch the file truncated
  EXPECT_LT(slowest, std::chrono::milliseconds(500));
}

}  // namespace
}  // namespace gs::host
