#include "src/host/card_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "src/common/clock.h"
#include "src/region/card.h"
#include "tests/temp_dir.h"

namespace gs::host {
namespace {

TEST(CardReader, ReadsEachTenantsGpuTime) {
  gs::testing::TempDir tmp("gs-card");
  std::string path = tmp.path() + "/GPU-1";
  char msg[256];
  region::Card* c = region::OpenCard(path.c_str(), msg, sizeof(msg));
  ASSERT_NE(c, nullptr) << msg;
  int64_t now = MonotonicNowNs();
  int t = region::JoinCard(c, 42, 30, true, 1, now);
  ASSERT_GE(t, 0);
  region::Charge(c, t, 5'000'000, now, 0);
  region::CloseCard(c);
  auto tenants = ReadCardTenants(path);
  ASSERT_TRUE(tenants.ok()) << tenants.status().message();
  ASSERT_EQ(tenants->size(), 1u);
  EXPECT_EQ((*tenants)[0].id, 42u);
  EXPECT_EQ((*tenants)[0].used_ns, 5'000'000u);
}

TEST(CardReader, RefusesWhatIsNotACardAndAcceptsOneNotYetInitialised) {
  gs::testing::TempDir tmp("gs-card");
  EXPECT_EQ(ReadCardTenants(tmp.path() + "/none").status().code(), StatusCode::kNotFound);
  std::string zero = tmp.path() + "/zero";
  int fd = open(zero.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_EQ(ftruncate(fd, sizeof(region::Card)), 0);
  close(fd);
  auto none = ReadCardTenants(zero);
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none->empty());
  std::ofstream(tmp.path() + "/short") << "x";
  EXPECT_NE(ReadCardTenants(tmp.path() + "/short").status().message().find("shorter"), std::string::npos);
}

}  // namespace
}  // namespace gs::host
