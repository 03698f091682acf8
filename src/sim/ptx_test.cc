#include "src/sim/ptx.h"

#include <gtest/gtest.h>

namespace gs::sim {
namespace {

TEST(Ptx, FindsEveryEntry) {
  const char* ptx = R"(
.version 8.0
.target sm_75
.address_size 64
.visible .entry gpuslice_spin(
  .param .u64 gpuslice_spin_param_0
) { ret; }
.entry _Z6kernelPf(.param .u64 p) { ret; }
)";
  std::vector<std::string> names;
  ASSERT_TRUE(ParsePtxEntries(ptx, &names));
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], "gpuslice_spin");
  EXPECT_EQ(names[1], "_Z6kernelPf");
  EXPECT_TRUE(IsSpinKernel(names[0]));
  EXPECT_FALSE(IsSpinKernel(names[1]));
}

TEST(Ptx, RejectsNonPtx) {
  std::vector<std::string> names;
  EXPECT_FALSE(
      ParsePtxEntries("\x7f"
                      "ELF binary .entry",
                      &names));
  EXPECT_FALSE(ParsePtxEntries(".version 8.0\n// no kernels", &names));
}

}  // namespace
}  // namespace gs::sim
