// The simulated CUDA driver API, stream-ordered pools shared between processes: a pool made
// with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is exported as a descriptor
// (cuMemPoolExportToShareableHandle) that another process imports as a pool of its own
// (cuMemPoolImportFromShareableHandle); each allocation is then shared by its export data
// (cuMemPoolExportPointer, cuMemPoolImportPointer) and freed there with cuMemFree or
// cuMemFreeAsync. An exported allocation is shared as a legacy IPC handle is
// (src/sim/cuda_ipc.cc): both sides map one memfd, importing puts nothing new on the card,
// and the node's table (src/sim/node_shares.cc) keeps the memory on the card, in its
// owner's slot, until the owner and every importer let go; freed by its owner, it leaves
// its pool. Shared state and helpers: src/sim/cuda_driver.h.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

namespace {

// What a pool's descriptor holds: a mark that it is ours and the pool's card.
struct PoolName {
  uint64_t magic;
  int32_t device;  // state index
  uint32_t reserved;
};
constexpr uint64_t kPoolMagic = 0x4c4f4f504d495347ULL;  // "GSIMPOOL"

// What a pool allocation's export data carries: the pool's descriptor's identity and the
// allocation's entry in the node's table.
struct PointerPayload {
  uint64_t magic;
  uint64_t pool_inode, pool_fs_dev;
  SharePayload share;
};
static_assert(sizeof(PointerPayload) <= sizeof(CUmemPoolPtrExportData), "the export data is 64 bytes");
constexpr uint64_t kPointerMagic = 0x5254504c4f4f5053ULL;  // "SPOOLPTR"

// A pool of cuMemPoolCreate or cuMemPoolImportFromShareableHandle that is not destroyed.
// Caller holds g_driver->mu.
bool Exists(MemPool* p) {
  return g_driver->created_pools.count(p) != 0;
}

// The memfd naming pool p to other processes, made once. Caller holds g_driver->mu.
bool Name(MemPool* p) {
  if (p->fd >= 0) return true;
  int fd = memfd_create("gpuslice-sim-pool", MFD_CLOEXEC);
  if (fd < 0) return false;
  PoolName n{kPoolMagic, p->device, 0};
  if (pwrite(fd, &n, sizeof(n), 0) != static_cast<ssize_t>(sizeof(n)) || !FileIdentity(fd, &p->inode, &p->fs_dev)) {
    close(fd);
    return false;
  }
  p->fd = fd;
  return true;
}

bool SeenHere(int state_index) {
  for (int ord = 0; ord < g_driver->rt->cuda_count; ++ord)
    if (StateIndex(ord) == state_index) return true;
  return false;
}

}  // namespace

GS_SIM_CUDA(cuMemPoolExportToShareableHandle)
(void* handle_out, CUmemoryPool pool, CUmemAllocationHandleType handleType, unsigned long long flags) {
  GS_REQUIRE_INIT();
  auto* p = reinterpret_cast<MemPool*>(pool);
  if (handle_out == nullptr || p == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  // Only a pool made with this handle type can be exported (a device's default pool has
  // none); an imported pool is not exported again.
  if (!Exists(p) || p->imported || (p->handle_types & handleType) == 0) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;  // Linux: fds only
  if (!Name(p)) return CUDA_ERROR_OUT_OF_MEMORY;
  // Inheritable, as an H200 hands it out (docs/measurements/shared-memory.md): unlike a
  // cuMemCreate descriptor, it crosses exec as it is.
  int fd = fcntl(p->fd, F_DUPFD, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(handle_out) = fd;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemPoolImportFromShareableHandle)
(CUmemoryPool* pool_out, void* handle, CUmemAllocationHandleType handleType, unsigned long long flags) {
  GS_REQUIRE_INIT();
  if (pool_out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  int given = static_cast<int>(reinterpret_cast<intptr_t>(handle));
  PoolName n{};
  if (given < 0 || pread(given, &n, sizeof(n), 0) != static_cast<ssize_t>(sizeof(n)) || n.magic != kPoolMagic ||
      !SeenHere(n.device))
    return CUDA_ERROR_INVALID_VALUE;
  auto p = std::make_unique<MemPool>();
  p->device = n.device;
  p->imported = true;
  p->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  p->fd = fcntl(given, F_DUPFD_CLOEXEC, 0);
  if (p->fd < 0 || !FileIdentity(p->fd, &p->inode, &p->fs_dev)) {
    if (p->fd >= 0) close(p->fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lock(g_driver->mu);
  g_driver->created_pools.insert(p.get());
  *pool_out = reinterpret_cast<CUmemoryPool>(p.release());
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemPoolExportPointer)(CUmemPoolPtrExportData* shareData_out, CUdeviceptr ptr) {
  GS_REQUIRE_INIT();
  if (shareData_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->allocations.find(static_cast<uintptr_t>(ptr));
  // Only an allocation of a pool that can be exported.
  if (it == g_driver->allocations.end() || it->second.kind != AllocKind::kPool || it->second.pool == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  MemPool* p = it->second.pool;
  if ((p->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!Name(p)) return CUDA_ERROR_OUT_OF_MEMORY;
  PointerPayload d{kPointerMagic, p->inode, p->fs_dev, {}};
  CUresult rc = ShareAllocation(it->first, &it->second, &d.share);
  if (rc != CUDA_SUCCESS) return rc;
  memset(shareData_out, 0, sizeof(*shareData_out));
  memcpy(shareData_out->reserved, &d, sizeof(d));
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemPoolImportPointer)(CUdeviceptr* ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData* shareData) {
  GS_REQUIRE_INIT();
  auto* p = reinterpret_cast<MemPool*>(pool);
  if (ptr_out == nullptr || p == nullptr || shareData == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = CurrentContext();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  PointerPayload d;
  memcpy(&d, shareData->reserved, sizeof(d));
  {
    // From the pool it was exported from, imported here.
    std::lock_guard<std::mutex> lock(g_driver->mu);
    if (!Exists(p) || !p->imported || d.magic != kPointerMagic || d.pool_inode != p->inode ||
        d.pool_fs_dev != p->fs_dev)
      return CUDA_ERROR_INVALID_VALUE;
  }
  ShareInfo info;
  if (!node()->ShareOf(d.share.index, d.share.id, &info) || info.owner_pid == 0) return CUDA_ERROR_INVALID_VALUE;
  return OpenSharedAllocation(d.share, info, ctx, AllocKind::kPoolImport, ptr_out);
}
