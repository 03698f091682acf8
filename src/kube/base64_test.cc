#include "src/kube/base64.h"

#include <gtest/gtest.h>

#include <vector>

namespace gs::kube {
namespace {

TEST(Base64Test, RoundTripsEveryPaddingLength) {
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    auto back = Base64Decode(Base64Encode(s));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(Base64Encode("hello"), "aGVsbG8=");
}

TEST(Base64Test, SkipsLineBreaksAndRefusesGarbage) {
  EXPECT_EQ(*Base64Decode("aGVs\nbG8=\n"), "hello");
  EXPECT_FALSE(Base64Decode("aGVsbG8").ok());
  EXPECT_FALSE(Base64Decode("aG!sbG8=").ok());
  EXPECT_FALSE(Base64Decode("aG=sbG8=").ok());
}

}  // namespace
}  // namespace gs::kube
