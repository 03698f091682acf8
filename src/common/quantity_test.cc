#include "src/common/quantity.h"

#include <gtest/gtest.h>

namespace gs {
namespace {

uint64_t Parse(const char* s) {
  uint64_t v = 0;
  EXPECT_TRUE(ParseByteQuantity(s, &v)) << s;
  return v;
}

TEST(ParseByteQuantity, HamiSuffixesAreBinaryAnyCase) {
  EXPECT_EQ(Parse("1024"), 1024u);
  EXPECT_EQ(Parse("4k"), 4096u);
  EXPECT_EQ(Parse("4K"), 4096u);
  EXPECT_EQ(Parse("3000m"), 3000ull << 20);
  EXPECT_EQ(Parse("3000M"), 3000ull << 20);
  EXPECT_EQ(Parse("2g"), 2ull << 30);
  EXPECT_EQ(Parse("2G"), 2ull << 30);
  EXPECT_EQ(Parse("0"), 0u);
}

TEST(ParseByteQuantity, KubernetesStyleBinarySuffixes) {
  EXPECT_EQ(Parse("80Gi"), 80ull << 30);
  EXPECT_EQ(Parse("512Mi"), 512ull << 20);
  EXPECT_EQ(Parse("1GiB"), 1ull << 30);
  EXPECT_EQ(Parse("1t"), 1ull << 40);
  EXPECT_EQ(Parse("7b"), 7u);
  EXPECT_EQ(Parse(" 5m "), 5ull << 20);
}

TEST(ParseByteQuantity, RejectsJunkAndOverflow) {
  uint64_t v = 42;
  for (const char* bad : {"", "m", "-1", "1.5g", "12x", "1 g", "0x10", "99999999999999999999", "17179869184g", "4gg"})
    EXPECT_FALSE(ParseByteQuantity(bad, &v)) << bad;
  EXPECT_FALSE(ParseByteQuantity(nullptr, &v));
  EXPECT_EQ(v, 42u);  // untouched on failure
}

TEST(ParseUnsigned, DigitsOnly) {
  uint64_t v = 0;
  EXPECT_TRUE(ParseUnsigned("50", &v));
  EXPECT_EQ(v, 50u);
  EXPECT_FALSE(ParseUnsigned("50%", &v));
  EXPECT_FALSE(ParseUnsigned("", &v));
  EXPECT_FALSE(ParseUnsigned("-3", &v));
}

TEST(FormatBytes, HumanUnits) {
  char buf[32];
  EXPECT_STREQ(FormatBytes(512, buf, sizeof(buf)), "512 B");
  EXPECT_STREQ(FormatBytes(3ull << 30, buf, sizeof(buf)), "3.0 GiB");
  EXPECT_STREQ(FormatBytes(1536ull << 20, buf, sizeof(buf)), "1.5 GiB");
}

}  // namespace
}  // namespace gs
