// Pins the NVML ABI as gpuslice declares it against the public NVML documentation and
// nvml.h: sizes and offsets of every struct the simulator fills and the enforcer
// rewrites inside programs built with the real header. x86_64 / aarch64 LP64 ABI.
#include "src/platform/nvml_api.h"

#include <gtest/gtest.h>

#include <cstddef>

namespace {

static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(offsetof(nvmlMemory_t, total) == 0 && offsetof(nvmlMemory_t, free) == 8 &&
              offsetof(nvmlMemory_t, used) == 16);

static_assert(sizeof(nvmlMemory_v2_t) == 40);
static_assert(offsetof(nvmlMemory_v2_t, version) == 0 && offsetof(nvmlMemory_v2_t, total) == 8 &&
              offsetof(nvmlMemory_v2_t, reserved) == 16 && offsetof(nvmlMemory_v2_t, free) == 24 &&
              offsetof(nvmlMemory_v2_t, used) == 32);
static_assert(nvmlMemory_v2 == 0x02000028u, "NVML_STRUCT_VERSION(Memory, 2) = sizeof | 2 << 24");

static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
static_assert(offsetof(nvmlProcessInfo_v1_t, usedGpuMemory) == 8);
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24);
static_assert(offsetof(nvmlProcessInfo_v2_t, gpuInstanceId) == 16 &&
              offsetof(nvmlProcessInfo_v2_t, computeInstanceId) == 20);
static_assert(sizeof(nvmlProcessInfo_t) == 24);
static_assert(offsetof(nvmlProcessInfo_t, usedGpuMemory) == 8 && offsetof(nvmlProcessInfo_t, computeInstanceId) == 20);

static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32);
static_assert(offsetof(nvmlProcessUtilizationSample_t, timeStamp) == 8 &&
              offsetof(nvmlProcessUtilizationSample_t, smUtil) == 16 &&
              offsetof(nvmlProcessUtilizationSample_t, memUtil) == 20 &&
              offsetof(nvmlProcessUtilizationSample_t, encUtil) == 24 &&
              offsetof(nvmlProcessUtilizationSample_t, decUtil) == 28);

static_assert(sizeof(nvmlUtilization_t) == 8 && offsetof(nvmlUtilization_t, memory) == 4);

static_assert(sizeof(nvmlPciInfo_t) == 68);
static_assert(offsetof(nvmlPciInfo_t, domain) == 16 && offsetof(nvmlPciInfo_t, bus) == 20 &&
              offsetof(nvmlPciInfo_t, device) == 24 && offsetof(nvmlPciInfo_t, pciDeviceId) == 28 &&
              offsetof(nvmlPciInfo_t, pciSubSystemId) == 32 && offsetof(nvmlPciInfo_t, busId) == 36);

static_assert(sizeof(nvmlEventData_t) == 32);
static_assert(offsetof(nvmlEventData_t, eventType) == 8 && offsetof(nvmlEventData_t, eventData) == 16 &&
              offsetof(nvmlEventData_t, gpuInstanceId) == 24 && offsetof(nvmlEventData_t, computeInstanceId) == 28);

static_assert(sizeof(nvmlBAR1Memory_t) == 24);
static_assert(sizeof(nvmlReturn_t) == 4 && sizeof(nvmlClockType_t) == 4 && sizeof(nvmlEnableState_t) == 4);

TEST(NvmlAbi, ReturnCodesMatchNvmlH) {
  EXPECT_EQ(NVML_ERROR_INSUFFICIENT_SIZE, 7);
  EXPECT_EQ(NVML_ERROR_GPU_IS_LOST, 15);
  EXPECT_EQ(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, 25);
  EXPECT_EQ(NVML_ERROR_UNKNOWN, 999);
}

TEST(NvmlAbi, EventTypeBits) {
  EXPECT_EQ(nvmlEventTypeXidCriticalError, 0x8);
  EXPECT_EQ(nvmlEventTypeDoubleBitEccError, 0x2);
}

}  // namespace
