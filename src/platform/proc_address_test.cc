#include "src/platform/proc_address.h"

#include <gtest/gtest.h>

#include <cstring>

#include "src/platform/cuda_api.h"

namespace gs::platform {
namespace {

std::string Resolve(const char* sym, int version, uint64_t flags = 0) {
  const char* name = nullptr;
  auto r = ResolveCudaExport(sym, version, flags, &name);
  if (r == ProcLookup::kNotFound) return "<not found>";
  if (r == ProcLookup::kVersionNotSufficient) return "<version>";
  return name;
}

TEST(ProcAddress, TableIsSortedForBinarySearch) {
  size_t n = 0;
  const char* const* names = CudaSymbolNames(&n);
  ASSERT_GT(n, 600u);
  for (size_t i = 1; i < n; ++i) EXPECT_LT(strcmp(names[i - 1], names[i]), 0) << names[i];
}

TEST(ProcAddress, VersionPicksTheExportOfThatEra) {
  EXPECT_EQ(Resolve("cuMemAlloc", 2000), "cuMemAlloc");
  EXPECT_EQ(Resolve("cuMemAlloc", 3020), "cuMemAlloc_v2");
  EXPECT_EQ(Resolve("cuMemAlloc", 13000), "cuMemAlloc_v2");
  EXPECT_EQ(Resolve("cuCtxCreate", 11040), "cuCtxCreate_v3");
  EXPECT_EQ(Resolve("cuCtxCreate", 12080), "cuCtxCreate_v4");
  EXPECT_EQ(Resolve("cuGetProcAddress", 12000), "cuGetProcAddress_v2");
  EXPECT_EQ(Resolve("cuInit", 2000), "cuInit");
}

TEST(ProcAddress, PerThreadDefaultStreamVariants) {
  const uint64_t ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  EXPECT_EQ(Resolve("cuLaunchKernel", 13000, ptds), "cuLaunchKernel_ptsz");
  EXPECT_EQ(Resolve("cuMemcpyHtoD", 13000, ptds), "cuMemcpyHtoD_v2_ptds");
  EXPECT_EQ(Resolve("cuMemAllocAsync", 13000, ptds), "cuMemAllocAsync_ptsz");
  EXPECT_EQ(Resolve("cuLaunchKernel", 13000, 0), "cuLaunchKernel");
  EXPECT_EQ(Resolve("cuMemAlloc", 13000, ptds), "cuMemAlloc_v2");  // no stream: no variant
}

TEST(ProcAddress, UnknownAndTooOld) {
  EXPECT_EQ(Resolve("cuNoSuchThing", 13000), "<not found>");
  EXPECT_EQ(Resolve("cuGetProcAddress", 11000), "<version>");
  EXPECT_EQ(Resolve(nullptr, 13000), "<not found>");
}

}  // namespace
}  // namespace gs::platform
