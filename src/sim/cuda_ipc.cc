// The simulated CUDA driver API, memory shared between processes: legacy IPC of cuMemAlloc
// memory (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle) and POSIX file
// descriptors of cuMemCreate memory (cuMemExportToShareableHandle,
// cuMemImportFromShareableHandle; each descriptor an open of one file, as a card's are of
// /dev/nvidiactl). Both sides map one memfd, so what one writes the other reads; the node's
// table (src/sim/node_shares.cc) keeps the memory on the card until no process holds it, in
// its owner's slot. Importing puts nothing new on the card. Pool allocations are shared the
// same way (ShareAllocation, OpenSharedAllocation; src/sim/cuda_pool_ipc.cc). Shared state
// and helpers: src/sim/cuda_driver.h.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

namespace gs::sim {

void ReleaseAllocationMemory(const Allocation& a) {
  if (a.share >= 0) {
    node()->LeaveShare(a.share, a.share_id, a.kind != AllocKind::kIpc && a.kind != AllocKind::kPoolImport);
    if (a.share_fd >= 0) close(a.share_fd);
    return;
  }
  if (a.device >= 0) node()->Release(a.device, a.size);
}

void ReleasePhysicalMemory(const PhysicalMemory& p) {
  if (p.share >= 0)
    node()->LeaveShare(p.share, p.share_id, !p.imported);
  else if (p.device >= 0)
    node()->Release(p.device, p.size);
}

namespace {

// Moves the bytes of [addr, addr + size) (private anonymous memory) into a fresh memfd
// mapped shared at the same address: only pages ever touched are copied, the rest stay
// holes. Returns the memfd, -1 on failure (nothing changed then).
int MoveIntoMemfd(uintptr_t addr, size_t size) {
  int fd = NewBacking("gpuslice-sim-ipc");
  if (fd < 0) return -1;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  bool ok = ftruncate(fd, static_cast<off_t>(size)) == 0 &&
            mincore(reinterpret_cast<void*>(addr), size, resident.data()) == 0;
  for (size_t i = 0; ok && i < resident.size(); ++i) {
    if (!(resident[i] & 1)) continue;
    size_t off = i * page;
    ok = pwrite(fd, reinterpret_cast<const void*>(addr + off), page, static_cast<off_t>(off)) ==
         static_cast<ssize_t>(page);
  }
  if (ok)
    ok = mmap(reinterpret_cast<void*>(addr), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) != MAP_FAILED;
  if (!ok) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int NewBacking(const char* name) {
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd == 0) {  // this process closed its standard input
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 1);
    close(fd);
    fd = moved;
  }
  return fd;
}

bool FileIdentity(int fd, uint64_t* inode, uint64_t* fs_dev) {
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  *inode = st.st_ino;
  *fs_dev = st.st_dev;
  return true;
}

CUresult ShareAllocation(uintptr_t addr, Allocation* a, SharePayload* out) {
  if (a->share < 0) {
    int fd = MoveIntoMemfd(addr, a->map_size);
    uint64_t inode = 0, fs_dev = 0;
    if (fd < 0 || !FileIdentity(fd, &inode, &fs_dev)) {
      if (fd >= 0) close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t id = 0;
    ShareWay way = a->kind == AllocKind::kPool ? ShareWay::kPoolPointer : ShareWay::kLegacyIpc;
    int index = node()->Share(a->device, a->size, inode, fs_dev, fd, way, &id);
    if (index < 0) {
      close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->share = index;
    a->share_id = id;
    a->share_fd = fd;
  }
  *out = SharePayload{a->share_id, a->share, 0, a->size, a->map_size};
  return CUDA_SUCCESS;
}

CUresult OpenSharedAllocation(const SharePayload& p, const ShareInfo& info, Context* ctx, AllocKind kind,
                              CUdeviceptr* out) {
  if (!node()->JoinShare(p.index, p.id)) return CUDA_ERROR_INVALID_VALUE;
  // From the node, as the kernel driver maps it: the importer may run in a PID namespace
  // with a /proc of its own, where the owner is not to be seen.
  int fd = OpenShareBacking(p.index, p.id);
  uint64_t inode = 0, fs_dev = 0;
  void* m = MAP_FAILED;
  // The descriptor must still be the owner's backing (not a number it reused since).
  if (fd >= 0 && FileIdentity(fd, &inode, &fs_dev) && inode == info.inode && fs_dev == info.fs_dev)
    m = mmap(nullptr, p.map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  if (m == MAP_FAILED) {
    node()->LeaveShare(p.index, p.id, false);
    return CUDA_ERROR_INVALID_VALUE;
  }
  Allocation a{p.size, p.map_size, info.device, kind, nullptr, ctx};
  a.share = p.index;
  a.share_id = p.id;
  a.opens = 1;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  g_driver->allocations[reinterpret_cast<uintptr_t>(m)] = a;
  *out = reinterpret_cast<CUdeviceptr>(m);
  return CUDA_SUCCESS;
}

}  // namespace gs::sim

namespace {

// Where an exported descriptor's position names share (index, id): index in the low bits,
// kept under 2^44, about the largest file offset ext4 allows, which the export file may
// live on. The position is a name only the simulator reads; a process of the node could
// forge one, as it could write the node's state itself: the simulator is no security
// boundary between the processes of a node.
constexpr int kIndexBits = 8;
static_assert(kMaxShared <= (1 << kIndexBits));
constexpr uint64_t kMaxExportId = 1ULL << (44 - kIndexBits);

off_t ExportPosition(int index, uint64_t id) {
  return id < kMaxExportId ? static_cast<off_t>((id << kIndexBits) | static_cast<uint64_t>(index)) : -1;
}

bool ShareAtPosition(off_t position, int* index, uint64_t* id) {
  if (position <= 0) return false;
  *index = static_cast<int>(static_cast<uint64_t>(position) & ((1U << kIndexBits) - 1));
  *id = static_cast<uint64_t>(position) >> kIndexBits;
  return *index < kMaxShared && *id != 0;
}

// What a CUipcMemHandle carries: a mark that it is ours, the entry of the node's table
// (the owner's node-wide pid and its descriptor of the backing are there), with the sizes,
// and the exporter's pid as it sees it (getpid()).
struct IpcPayload {
  uint64_t magic;
  SharePayload share;
  uint32_t exporter_pid;
  uint32_t reserved;  // 0: the handle's bytes are all written
};
static_assert(sizeof(IpcPayload) <= sizeof(CUipcMemHandle), "the handle is 64 bytes");
constexpr uint64_t kIpcMagic = 0x4350494d49534753ULL;  // "GSSIMIPC"

}  // namespace

GS_SIM_CUDA(cuIpcGetMemHandle)(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  GS_REQUIRE_INIT();
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->allocations.find(static_cast<uintptr_t>(dptr));
  // Only memory of cuMemAlloc (and cuMemAllocPitch) can be shared this way.
  if (it == g_driver->allocations.end() ||
      (it->second.kind != AllocKind::kDevice && it->second.kind != AllocKind::kPitch))
    return CUDA_ERROR_INVALID_VALUE;
  IpcPayload p{kIpcMagic, {}, static_cast<uint32_t>(getpid()), 0};
  CUresult rc = ShareAllocation(it->first, &it->second, &p.share);
  if (rc != CUDA_SUCCESS) return rc;
  memset(pHandle, 0, sizeof(*pHandle));
  memcpy(pHandle->reserved, &p, sizeof(p));
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuIpcOpenMemHandle_v2)(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  GS_REQUIRE_INIT();
  if (pdptr == nullptr || (Flags & ~CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = CurrentContext();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  IpcPayload p;
  memcpy(&p, handle.reserved, sizeof(p));
  if (p.magic != kIpcMagic) return CUDA_ERROR_INVALID_VALUE;
  // One open at a time, so that two threads opening the same handle get one mapping.
  static std::mutex open_mu;
  std::lock_guard<std::mutex> opening(open_mu);
  {
    // Opened in this context already: the same pointer, one more open (whether its owner
    // still holds it or not).
    std::lock_guard<std::mutex> lock(g_driver->mu);
    for (auto& [addr, a] : g_driver->allocations) {
      if (a.kind != AllocKind::kIpc || a.ctx != ctx || a.share != p.share.index || a.share_id != p.share.id) continue;
      ++a.opens;
      *pdptr = addr;
      return CUDA_SUCCESS;
    }
  }
  ShareInfo info;
  if (!node()->ShareOf(p.share.index, p.share.id, &info) || info.owner_pid == 0) return CUDA_ERROR_INVALID_VALUE;
  // CUDA documents that a process cannot open its own handles. The driver tells by the pids
  // the two processes see as their own, so an importer whose pid in its namespace is the
  // exporter's in its own (two containers' pid 1s) is refused the same way, as measured on
  // an H100 (docs/measurements/shared-memory.md, "Across PID namespaces").
  if ((info.owner_pid == static_cast<uint32_t>(node()->pid()) && info.owner_start == node()->start_time()) ||
      p.exporter_pid == static_cast<uint32_t>(getpid()))
    return CUDA_ERROR_INVALID_CONTEXT;
  return OpenSharedAllocation(p.share, info, ctx, AllocKind::kIpc, pdptr);
}
GS_SIM_CUDA_SAME(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2)

GS_SIM_CUDA(cuIpcCloseMemHandle)(CUdeviceptr dptr) {
  GS_REQUIRE_INIT();
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(g_driver->mu);
    auto it = g_driver->allocations.find(static_cast<uintptr_t>(dptr));
    if (it == g_driver->allocations.end() || it->second.kind != AllocKind::kIpc) return CUDA_ERROR_INVALID_VALUE;
    if (--it->second.opens > 0) return CUDA_SUCCESS;  // opened again in its context: still mapped
    a = it->second;
    g_driver->allocations.erase(it);
  }
  munmap(reinterpret_cast<void*>(dptr), a.map_size);
  ReleaseAllocationMemory(a);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemExportToShareableHandle)
(void* shareableHandle, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType handleType,
 unsigned long long flags) {
  GS_REQUIRE_INIT();
  if (shareableHandle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;  // Linux: fds only
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->physical.find(handle);
  if (it == g_driver->physical.end() || it->second->released) return CUDA_ERROR_INVALID_VALUE;
  PhysicalMemory& phys = *it->second;
  // Only handle types asked for at cuMemCreate can be exported.
  if (!(phys.prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) return CUDA_ERROR_INVALID_VALUE;
  if (phys.share < 0) {
    uint64_t inode = 0, fs_dev = 0, id = 0;
    if (!FileIdentity(phys.fd, &inode, &fs_dev)) return CUDA_ERROR_OUT_OF_MEMORY;
    int index = node()->Share(phys.device, phys.size, inode, fs_dev, phys.fd, ShareWay::kDescriptor, &id);
    if (index < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    phys.share = index;
    phys.share_id = id;
  }
  // An open of the one export file, its position naming the share; close-on-exec, as an
  // H200 hands it out (docs/measurements/shared-memory.md): a child started with fork and
  // exec gets it only once the exporter clears the flag.
  int fd = OpenExportFile();
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (lseek(fd, ExportPosition(phys.share, phys.share_id), SEEK_SET) < 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemImportFromShareableHandle)
(CUmemGenericAllocationHandle* handle, void* osHandle, CUmemAllocationHandleType shHandleType) {
  GS_REQUIRE_INIT();
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  int given = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  if (given < 0 || !IsExportFile(given)) return CUDA_ERROR_INVALID_VALUE;
  const off_t position = lseek(given, 0, SEEK_CUR);
  int index = 0;
  uint64_t id = 0;
  ShareInfo info;
  if (!ShareAtPosition(position, &index, &id) || !node()->ShareOf(index, id, &info) ||
      info.way != ShareWay::kDescriptor || !node()->JoinShare(index, id))
    return CUDA_ERROR_INVALID_VALUE;
  // The bytes, from the node, as the kernel driver maps them: the owner may be in another
  // PID namespace.
  int fd = OpenShareBacking(index, id);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != info.inode ||
      static_cast<uint64_t>(st.st_dev) != info.fs_dev) {
    if (fd >= 0) close(fd);
    node()->LeaveShare(index, id, false);
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto phys = std::make_unique<PhysicalMemory>();
  phys->device = info.device;
  phys->size = static_cast<size_t>(st.st_size);
  phys->fd = fd;
  phys->share = index;
  phys->share_id = id;
  phys->imported = true;
  phys->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  phys->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  phys->prop.location.type = info.device >= 0 ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
  for (int ord = 0; info.device >= 0 && ord < g_driver->rt->cuda_count; ++ord)
    if (StateIndex(ord) == info.device) phys->prop.location.id = ord;
  auto key = reinterpret_cast<CUmemGenericAllocationHandle>(phys.get());
  std::lock_guard<std::mutex> lock(g_driver->mu);
  g_driver->physical[key] = std::move(phys);
  *handle = key;
  return CUDA_SUCCESS;
}
