#include "src/container/driver_files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/temp_dir.h"

namespace gs::container {
namespace {

// Hooks of containers starting at once install the enforcer side by side, and each then
// bind-mounts the file it found. None may replace the file another hook already holds
// open: the kernel does not bind-mount a file that was renamed over.
TEST(InstallEnforcer, HooksInstallingAtOnceAllHoldTheOneInstalledFile) {
  gs::testing::TempDir tmp{"gs-install"};
  const std::string source = tmp.path() + "/libgpuslice.so";
  {
    std::ofstream out(source, std::ios::binary);
    out << std::string(8 << 20, 'x');  // as large as an enforcer, so the writes overlap
  }
  for (int round = 0; round < 5; ++round) {
    const std::string state = tmp.path() + "/state" + std::to_string(round);
    std::vector<int> held(8, -1);
    std::vector<std::thread> hooks;
    for (size_t i = 0; i < held.size(); ++i)
      hooks.emplace_back([&, i] {
        auto e = InstallEnforcer(source, state);
        ASSERT_TRUE(e.ok()) << e.status().message();
        held[i] = open(e->host_path.c_str(), O_PATH | O_CLOEXEC);
      });
    for (auto& h : hooks) h.join();
    for (size_t i = 0; i < held.size(); ++i) {
      struct stat st;
      ASSERT_GE(held[i], 0);
      ASSERT_EQ(fstat(held[i], &st), 0);
      EXPECT_EQ(st.st_nlink, 1u) << "hook " << i << " holds a file another hook replaced (round " << round << ")";
      close(held[i]);
    }
  }
}

}  // namespace
}  // namespace gs::container
