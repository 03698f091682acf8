// The simulated CUDA driver API, memory on the synchronous paths (device, pitch, managed,
// host, registered), copies and memsets.
// Shared state and helpers: src/sim/cuda_driver.h.
#include <algorithm>
#include <cstring>

#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

#define GS_CURRENT_DEVICE(var)                                 \
  Context* var##_ctx = CurrentContext();                       \
  if (var##_ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT; \
  int var = var##_ctx->device

GS_SIM_CUDA(cuMemGetInfo_v2)(size_t* free, size_t* total) {
  GS_REQUIRE_INIT();
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GS_CURRENT_DEVICE(dev);
  *total = Spec(dev).memory_total;
  *free = node()->MemoryFree(dev);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemAlloc_v2)(CUdeviceptr* dptr, size_t bytesize) {
  GS_REQUIRE_INIT();
  GS_CURRENT_DEVICE(dev);
  return AllocateDevice(dev, bytesize, AllocKind::kDevice, nullptr, dptr);
}

GS_SIM_CUDA(cuMemAllocPitch_v2)
(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes) {
  GS_REQUIRE_INIT();
  if (pPitch == nullptr || (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
    return CUDA_ERROR_INVALID_VALUE;
  GS_CURRENT_DEVICE(dev);
  size_t pitch = RoundUp(WidthInBytes, 512);  // the texture pitch alignment of current GPUs
  CUresult rc = AllocateDevice(dev, pitch * Height, AllocKind::kPitch, nullptr, dptr);
  if (rc == CUDA_SUCCESS) *pPitch = pitch;
  return rc;
}

GS_SIM_CUDA(cuMemAllocManaged)(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  GS_REQUIRE_INIT();
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  GS_CURRENT_DEVICE(dev);
  return AllocateDevice(dev, bytesize, AllocKind::kManaged, nullptr, dptr);
}

GS_SIM_CUDA(cuMemFree_v2)(CUdeviceptr dptr) {
  GS_REQUIRE_INIT();
  if (dptr == 0) return CUDA_SUCCESS;
  return FreeAllocation(static_cast<uintptr_t>(dptr), false);
}

GS_SIM_CUDA(cuMemHostAlloc)(void** pp, size_t bytesize, unsigned int) {
  GS_REQUIRE_INIT();
  if (pp == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t map_size = RoundUp(bytesize, 4096);
  void* p = MapLazy(map_size);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  g_driver->allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{bytesize, map_size, -1, AllocKind::kHost, nullptr};
  *pp = p;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemAllocHost_v2)(void** pp, size_t bytesize) {
  return gs_sim_cuda_cuMemHostAlloc(pp, bytesize, 0);
}

GS_SIM_CUDA(cuMemFreeHost)(void* p) {
  GS_REQUIRE_INIT();
  return FreeAllocation(reinterpret_cast<uintptr_t>(p), true);
}

GS_SIM_CUDA(cuMemHostRegister_v2)(void* p, size_t bytesize, unsigned int) {
  GS_REQUIRE_INIT();
  if (p == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  g_driver->allocations[reinterpret_cast<uintptr_t>(p)] =
      Allocation{bytesize, 0, -1, AllocKind::kHostRegistered, nullptr};
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemHostUnregister)(void* p) {
  GS_REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_driver->allocations.end() || it->second.kind != AllocKind::kHostRegistered)
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  g_driver->allocations.erase(it);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemHostGetDevicePointer_v2)(CUdeviceptr* pdptr, void* p, unsigned int) {
  GS_REQUIRE_INIT();
  if (pdptr == nullptr || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: same address
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemGetAddressRange_v2)(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  GS_REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->allocations.upper_bound(static_cast<uintptr_t>(dptr));
  if (it == g_driver->allocations.begin()) return CUDA_ERROR_NOT_FOUND;
  --it;
  if (dptr >= it->first + it->second.size) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = it->first;
  if (psize) *psize = it->second.size;
  return CUDA_SUCCESS;
}

// What a program may ask of a pointer: the device it is on (the enforcer charges an
// imported pool piece there) and whether it is managed. Other attributes are not simulated
// (CUDA_ERROR_NOT_SUPPORTED, as for a function not simulated).
GS_SIM_CUDA(cuPointerGetAttribute)(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  GS_REQUIRE_INIT();
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->allocations.upper_bound(static_cast<uintptr_t>(ptr));
  if (it == g_driver->allocations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  const Allocation& a = it->second;
  if (ptr >= it->first + a.size) return CUDA_ERROR_INVALID_VALUE;
  const bool host = a.kind == AllocKind::kHost || a.kind == AllocKind::kHostRegistered;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      // The device it was allocated on (an imported piece: its owner's).
      if (host || a.device < 0) return CUDA_ERROR_NOT_SUPPORTED;  // host memory's device: not simulated
      for (int ord = 0; ord < g_driver->rt->cuda_count; ++ord) {
        if (StateIndex(ord) != a.device) continue;
        *static_cast<int*>(data) = ord;
        return CUDA_SUCCESS;
      }
      return CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<int*>(data) = a.kind == AllocKind::kManaged;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

// Copies. Device pointers are host addresses; device sides are checked against the
// registry so a bad pointer is an error, not a crash.
GS_SIM_CUDA(cuMemcpyHtoD_v2)(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  GS_REQUIRE_INIT();
  if (CheckDevice(dstDevice, ByteCount) != CUDA_SUCCESS || srcHost == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Context* c = CurrentContext()) WaitContext(c);
  memcpy(reinterpret_cast<void*>(dstDevice), srcHost, ByteCount);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2)

GS_SIM_CUDA(cuMemcpyDtoH_v2)(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  GS_REQUIRE_INIT();
  if (CheckDevice(srcDevice, ByteCount) != CUDA_SUCCESS || dstHost == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Context* c = CurrentContext()) WaitContext(c);
  memcpy(dstHost, reinterpret_cast<const void*>(srcDevice), ByteCount);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2)

GS_SIM_CUDA(cuMemcpyDtoD_v2)(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  GS_REQUIRE_INIT();
  if (CheckDevice(dstDevice, ByteCount) != CUDA_SUCCESS || CheckDevice(srcDevice, ByteCount) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  memmove(reinterpret_cast<void*>(dstDevice), reinterpret_cast<const void*>(srcDevice), ByteCount);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2)

GS_SIM_CUDA(cuMemcpy)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  GS_REQUIRE_INIT();
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  if (Context* c = CurrentContext()) WaitContext(c);
  memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuMemcpy_ptds, cuMemcpy)

namespace {
// Async copies and sets: ordered after the stream's queued work by waiting for it; the
// simulator does not model copy-engine time.
CUresult StreamCopy(CUstream s, void* dst, const void* src, size_t n) {
  Stream* st = ResolveStream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (st->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  WaitStream(st);
  memmove(dst, src, n);
  return CUDA_SUCCESS;
}
}  // namespace

GS_SIM_CUDA(cuMemcpyHtoDAsync_v2)(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream) {
  GS_REQUIRE_INIT();
  if (CheckDevice(dstDevice, ByteCount) != CUDA_SUCCESS || srcHost == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return StreamCopy(hStream, reinterpret_cast<void*>(dstDevice), srcHost, ByteCount);
}
GS_SIM_CUDA_SAME(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2)

GS_SIM_CUDA(cuMemcpyDtoHAsync_v2)(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  GS_REQUIRE_INIT();
  if (CheckDevice(srcDevice, ByteCount) != CUDA_SUCCESS || dstHost == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return StreamCopy(hStream, dstHost, reinterpret_cast<const void*>(srcDevice), ByteCount);
}
GS_SIM_CUDA_SAME(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2)

GS_SIM_CUDA(cuMemcpyDtoDAsync_v2)(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  GS_REQUIRE_INIT();
  if (CheckDevice(dstDevice, ByteCount) != CUDA_SUCCESS || CheckDevice(srcDevice, ByteCount) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  return StreamCopy(hStream, reinterpret_cast<void*>(dstDevice), reinterpret_cast<const void*>(srcDevice), ByteCount);
}
GS_SIM_CUDA_SAME(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2)

GS_SIM_CUDA(cuMemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  GS_REQUIRE_INIT();
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  return StreamCopy(hStream, reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount);
}
GS_SIM_CUDA_SAME(cuMemcpyAsync_ptsz, cuMemcpyAsync)

namespace {
template <typename T>
CUresult Fill(CUdeviceptr dst, T value, size_t count) {
  if (CheckDevice(dst, count * sizeof(T)) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  if (Context* c = CurrentContext()) WaitContext(c);
  T* p = reinterpret_cast<T*>(dst);
  if (sizeof(T) == 1)
    memset(p, static_cast<int>(value), count);
  else
    std::fill(p, p + count, value);
  return CUDA_SUCCESS;
}
}  // namespace

GS_SIM_CUDA(cuMemsetD8_v2)(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  GS_REQUIRE_INIT();
  return Fill(dstDevice, uc, N);
}
GS_SIM_CUDA_SAME(cuMemsetD8_v2_ptds, cuMemsetD8_v2)
GS_SIM_CUDA(cuMemsetD16_v2)(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  GS_REQUIRE_INIT();
  return Fill(dstDevice, us, N);
}
GS_SIM_CUDA_SAME(cuMemsetD16_v2_ptds, cuMemsetD16_v2)
GS_SIM_CUDA(cuMemsetD32_v2)(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  GS_REQUIRE_INIT();
  return Fill(dstDevice, ui, N);
}
GS_SIM_CUDA_SAME(cuMemsetD32_v2_ptds, cuMemsetD32_v2)
GS_SIM_CUDA(cuMemsetD8Async)(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream) {
  GS_REQUIRE_INIT();
  return Fill(dstDevice, uc, N);
}
GS_SIM_CUDA_SAME(cuMemsetD8Async_ptsz, cuMemsetD8Async)
GS_SIM_CUDA(cuMemsetD32Async)(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream) {
  GS_REQUIRE_INIT();
  return Fill(dstDevice, ui, N);
}
GS_SIM_CUDA_SAME(cuMemsetD32Async_ptsz, cuMemsetD32Async)
