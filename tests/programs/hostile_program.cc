// A hostile program for tests/hostile_program_test.cc: it tries the ways around the
// enforcer's memory limit that an in-process enforcer must close. It reaches the driver
// by dlopen (no link-time libcuda) and runs its steps in order, one output line each:
//   dlvsym       resolve every later driver function through glibc's dlsym, obtained with
//                dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34") (or the base version)
//   init         cuInit, retain and make current the primary context of device 0
//   device ORD   retain and make current the primary context of device ORD (after init):
//                "device <result>"
//   ctxv1        create a context with the v1 cuCtxCreate and make it current
//   fill N       allocate 64 MiB pieces with cuMemAlloc_v2 until refused or N pieces;
//                prints "fill <MiB allocated>"
//   fillsmall N  the same in 2 MiB pieces (the driver's granularity): a slice to its last
//                piece; prints "fill <MiB allocated>"
//   alloc N      one cuMemAlloc_v2 of N bytes (N: digits, or digits and m for MiB):
//                prints "alloc <result>"
//   v1alloc      one 64 MiB cuMemAlloc (v1): prints "v1alloc <result>"
//   v1array      one cuArrayCreate (v1), 4096 x 4096 x 4 bytes: "v1array <result>"
//   stack KIB    cuCtxSetLimit(CU_LIMIT_STACK_SIZE, KIB KiB): "stack <result>"
//   heap MIB     cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, MIB MiB): "heap <result>"
//   reset        cuDevicePrimaryCtxReset_v2(0): "reset <result>"
//   touch        cuDriverGetVersion only: the enforcer joins the region, CUDA stays
//                uninitialised
//   fork MS      fork; the parent exits after MS, the child goes on with the next steps
//   sleep MS     sleep
// Virtual memory management (cuMemCreate on device 0, mapped whole into a fresh
// reservation with read-write access):
//   vmm-leak N   N times: create 64 MiB, map, cuMemRelease while mapped (the driver keeps
//                mapped memory until it is unmapped); stops at the first failure:
//                "vmm-leak <MiB left mapped>"
//   vmm-hold N   N times: create 64 MiB and map it, handle kept: "vmm-hold <MiB mapped>"
//   vmmcreate MIB  one handle of MIB MiB: "vmmcreate <result>"
//   vmmmap       maps the newest handle at a fresh address: "vmmmap <result>"
//   vmmrelease   releases the newest handle (its mappings stay): "vmmrelease <result>"
//   vmmunmap     unmaps the newest mapping and frees its addresses: "vmmunmap <result>"
//   vmmunmaphalf cuMemUnmap of the first half of the newest mapping (a sub-range; the
//                mapping stays listed): "vmmunmaphalf <result>"
//   vmmpair MIB  two handles of MIB MiB mapped side by side in one reservation, both
//                released, then one cuMemUnmap over both: "vmmpair <result of the unmap>"
//   modglobal MIB  loads a module (cuModuleLoadData) declaring MIB MiB of .global memory:
//                "modglobal <result>"
//   room         64 MiB cuMemAlloc_v2 pieces until refused, held 30 ms, then all freed again:
//                "room <MiB that fitted>"
// Green contexts (on device 0, half its SMs; each holds a reference to the primary context):
//   green-leak N  N green contexts made and never destroyed; stops at the first failure:
//                "green-leak <contexts made> <result that stopped it>"
//   green        one green context, made current (cuCtxFromGreenCtx, cuCtxSetCurrent):
//                "green <result>"
//   greendestroy destroys the newest green context and makes the primary context current
//                again: "greendestroy <result>"
// Multicast (one object of device 0, as large as N pieces, made by the first mc-leak):
//   mc-leak N    N times: create 64 MiB, bind it to the multicast object at the next offset
//                (cuMulticastBindMem), cuMemRelease while bound; stops at the first failure:
//                "mc-leak <MiB left bound> <result that stopped it>"
//   mc-release   releases the multicast object (cuMemRelease of its handle): "mc-release <result>"
// Graph memory (the driver keeps a launched allocation node's memory on the card after its
// graph and executable are destroyed, until the pointer is freed and the device's graph
// memory trimmed):
//   graph-leak N  N times: a graph of one 64 MiB allocation node on device 0, instantiated,
//                launched, synchronised, its executable and graph destroyed, the pointer
//                never freed; stops at the first failure: "graph-leak <MiB launched>"
//   graph-node-leak N  the same with 512 MiB nodes made by cuGraphAddNode:
//                "graph-node-leak <MiB launched> <result that stopped it>"
//   graph-clone-leak N  one graph of one 512 MiB allocation node, then N times: cloned
//                (cuGraphClone), the clone instantiated, launched, synchronised, its
//                executable and the clone destroyed; stops at the first failure:
//                "graph-clone-leak <MiB launched> <result that stopped it>"
//   graph-capture N  captures on a stream of its own N cuMemAllocAsync of 64 MiB, then
//                their N cuMemFreeAsync (a graph whose launch holds them all at once), and
//                instantiates it: "graph-capture <result>"
//   graph-run    launches that executable graph and synchronises: "graph-run <result>"
// Memory shared between processes. The importer is this program again, started by fork and
// exec with the same environment, talking over a socket pair (legacy IPC handles as bytes,
// POSIX descriptors by SCM_RIGHTS); it opens or imports and maps each piece it is sent,
// checks the word written into it, writes the next value, and holds everything until told:
//   ipc-leak N MIB  N times: MIB MiB by cuMemAlloc_v2, exported (cuIpcGetMemHandle), sent
//                to the importer, then freed here at once and the next one allocated; stops
//                at the first failure: "ipc-leak <MiB freed while the importer held them>
//                <pieces whose data both sides saw>"
//   fd-leak N MIB  the same with cuMemCreate handles made exportable as POSIX descriptors,
//                mapped here, exported (cuMemExportToShareableHandle), then unmapped and
//                released: "fd-leak <MiB> <pieces whose data both sides saw>"
//   pool-leak N MIB  the same with allocations of a pool of the current device made
//                exportable as a POSIX descriptor (cuMemPoolCreate; the first pool-leak
//                makes it):
//                cuMemAllocFromPoolAsync, the pool exported (cuMemPoolExportToShareableHandle)
//                and the pointer (cuMemPoolExportPointer), freed here by cuMemFreeAsync; the
//                importer imports the pool once and each pointer (cuMemPoolImportPointer),
//                and frees them with cuMemFree: "pool-leak <MiB> <pieces whose data both
//                sides saw>"
//   pool-share N MIB  as pool-leak, but the pieces stay allocated here: "pool-share <MiB
//                shared> <pieces whose data both sides saw>"
//   ipc-share N MIB  as ipc-leak, but the pieces stay allocated here: "ipc-share <MiB
//                shared> <pieces whose data both sides saw>"
//   pool-noexport  a pool made without a handle type, exported as a descriptor, and one
//                allocation of it exported: "pool-noexport <result> <result>"
//   importer-pidns  the importer (started by the next ipc-leak, fd-leak or pool-leak) runs
//                in a PID namespace of its own (unshare --pid --fork; /proc stays the one
//                this process sees), where it is pid 1
//   importer-container PATH LIMIT  the importer (started by the next ipc-leak, fd-leak or
//                pool-leak) belongs to another container: its region is PATH
//                (CUDA_DEVICE_MEMORY_SHARED_CACHE), its slice LIMIT (CUDA_DEVICE_MEMORY_LIMIT)
//   importer-modglobal MIB  the importer loads a module with MIB MiB of .global variables:
//                "importer-modglobal <result>"
//   importer-done  the importer closes and releases what it imported and exits:
//                "importer-done <its exit status>" (it prints "importer <pieces> <closed>")
//   importer-holds MS  the importer is left on its own: it keeps what it imported for MS ms
//                more, then lets go and exits; this program does not wait for it:
//                "importer-holds ok"
//   share-pool-destroy  destroys the pool pool-leak made (cuMemPoolDestroy):
//                "share-pool-destroy <result>"
//   vmmcreatefd MIB  as vmmcreate, exportable as a POSIX descriptor: "vmmcreatefd <result>"
//   vmmexport    exports the newest handle as a descriptor: "vmmexport <result>"
//   vmmimport    imports that descriptor in this process: a new newest handle:
//                "vmmimport <result>"
//   vmmreleasefirst  releases the oldest handle (its mappings stay): "vmmreleasefirst <result>"
//   ipc-save MIB PATH  MIB MiB by cuMemAlloc_v2, 0x5a5a5a5a in its first word, exported; the
//                handle's bytes written to PATH: "ipc-save <result>"
//   ipc-open-file PATH  opens the handle saved in PATH and reads its first word:
//                "ipc-open-file <result> <ok|bad>"
//   ipc-close    closes the pointer the newest ipc-open-file opened (cuIpcCloseMemHandle),
//                then reads its first word again: "ipc-close <result> <ok|gone>"
//   ipc-open-race PATH N  N rounds: two threads open the handle saved in PATH at once, then
//                each closes what it opened: "ipc-open-race <rounds both opened> <closes
//                that failed>"
//   ipc-self     cuIpcOpenMemHandle of a handle this process exported (1 MiB):
//                "ipc-self <result>"
// Against the region the container may write (the region's path as argument):
//   uuid PATH    renames device 0 in the region at PATH to a card that does not exist:
//                "uuid <result of the write>"
//   race-zeroed PATH THREADS MIB   THREADS threads allocate MIB MiB pieces with cuMemAlloc_v2
//                until each is refused, all starting at once, while another thread holds
//                the mutex of the region at PATH for 300 ms, then keeps zeroing device 0's
//                total and this process's slot there:
//                "race-zeroed <MiB allocated by the threads together>"
//   fork-while WHAT N  a thread does WHAT over and over while the program forks N times;
//                each child makes WHAT's call once and exits (CUDA is not a forked child's:
//                the simulator answers CUDA_ERROR_NOT_INITIALIZED, and a child that gets it
//                has reached the driver past the enforcer's locks). WHAT: ipc:PATH
//                (open and close the IPC handle saved in PATH; the child opens it) or ctx
//                (create and destroy a context; the child retains the primary context). A
//                child not gone 15 s after its fork is killed as hung, and the forking
//                stops there: "fork-while <children answered> <hung> <the thread's calls>"
//   child        fork; the parent stays as it is (in a container: its first process, still
//                in the container's namespaces), waits for the child and exits with its
//                status (1 when it was killed); the child goes on with the next steps
//   chroot DIR   chroot(DIR), chdir("/"): its /proc/<pid>/mountinfo then lists only the
//                mounts under DIR, none at the region directory
//   leave-mounts DIR  a mount namespace of its own (unshare), in which the mount at DIR is
//                detached: what an unprivileged container can do in a user namespace of its
//                own (there the runtime's mounts can only go with the whole root, by
//                pivot_root). Run before init: the driver may start threads
// And attacks on the node through what a container may write (no driver needed):
//   scribble PATH MS  for MS ms, random bytes at random places of the file PATH (its
//                     region), with the file's lock held, now and then shrinking it and
//                     writing it back: "scribble <writes>"
//   fill-dir DIR      writes DIR/junk until refused, then makes empty files until refused:
//                     "fill-dir <MiB> <files> <error of the last refusal>"
//   card PATH MS ATTACKS  for MS ms, forges the card region PATH (src/region/card.h) that
//                     the honest tenants of a GPU take turns through, running no kernel
//                     itself; ATTACKS is a comma list of:
//                       priority  an entry of its own with priority INT_MIN, share 100 and a
//                                 fresh wish for the card, never taking a turn it is handed
//                       seize     the turn word names it as holder, the deadline 10 s ahead,
//                                 the sequence bumped every 100 ms
//                       credit    every other entry's credit and wish zeroed, its share 1 and
//                                 priority 999; its own credit huge, its wish fresh
//                       garbage   a holder that is no tenant, no deadline, its own entry's
//                                 share 0 and credit stamps at the ends of int64
//                       fill      every free entry taken by a made-up tenant that looks
//                                 alive (fresh heartbeat) and never asks for the card; the
//                                 card file is made if it does not exist yet
//                       drain     its own drain heartbeat always fresh (with seize: a holder
//                                 that claims to wait for a kernel longer than its turn)
//                     prints "card <rewrites>"
// Exit code 0 unless a step could not run at all.
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "src/common/fd_passing.h"
#include "src/platform/cuda_api.h"
#include "src/region/card.h"
#include "src/region/region.h"

namespace {

using DlsymFn = void* (*)(void*, const char*);
void* g_libcuda = nullptr;
DlsymFn g_lookup = dlsym;

template <typename Fn>
Fn Get(const char* name) {
  void* p = g_lookup(g_libcuda, name);
  if (p == nullptr) {
    fprintf(stderr, "hostile: %s not found\n", name);
    exit(2);
  }
  return reinterpret_cast<Fn>(p);
}

const char* Name(CUresult rc) {
  const char* s = nullptr;
  auto fn = reinterpret_cast<CUresult (*)(CUresult, const char**)>(dlsym(g_libcuda, "cuGetErrorName"));
  if (fn == nullptr || fn(rc, &s) != CUDA_SUCCESS || s == nullptr) return "CUDA_ERROR_UNKNOWN";
  return s;
}

// Garbles PATH for `ms` milliseconds; returns the number of writes, -1 if it cannot open it.
long Scribble(const char* path, long ms) {
  int fd = open(path, O_RDWR);
  if (fd < 0) return -1;
  flock(fd, LOCK_EX);  // never released: a reader that waits for it waits forever
  struct stat st;
  fstat(fd, &st);
  std::vector<char> original(static_cast<size_t>(st.st_size));
  if (pread(fd, original.data(), original.size(), 0) < 0) return -1;
  std::mt19937_64 rng(std::random_device{}());
  size_t size = original.empty() ? 4096 : original.size();
  char junk[64];
  long writes = 0;
  for (auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
       std::chrono::steady_clock::now() < end; ++writes) {
    if (writes % 200 == 199) {  // shrink it under the reader, then put it back
      (void)!ftruncate(fd, static_cast<off_t>(rng() % size));
      (void)!pwrite(fd, original.data(), original.size(), 0);
    }
    for (auto& c : junk) c = static_cast<char>(rng());
    size_t len = 1 + rng() % sizeof(junk);
    (void)!pwrite(fd, junk, len, static_cast<off_t>(rng() % size));
    if (writes % 64 == 0) usleep(100);  // leave the machine to the others now and then
  }
  return writes;
}

// Fills DIR: one file as large as it will take, then empty files.
void FillDir(const std::string& dir) {
  long mib = 0, files = 0;
  int err = 0;
  int fd = open((dir + "/junk").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0) err = errno;
  std::vector<char> block(1 << 20, 'x');
  while (fd >= 0 && mib < 1024) {
    if (write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size())) {
      err = errno;
      break;
    }
    ++mib;
  }
  if (fd >= 0) close(fd);
  for (; files < 100000; ++files) {
    int f = open((dir + "/f" + std::to_string(files)).c_str(), O_CREAT | O_WRONLY | O_EXCL, 0644);
    if (f < 0) {
      err = errno;
      break;
    }
    close(f);
  }
  printf("fill-dir %ld %ld %s\n", mib, files, strerror(err));
}

int64_t Now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// Forges the card at PATH for `ms` milliseconds (see the header); the number of rewrites.
long ForgeCard(const char* path, long ms, const std::string& attacks) {
  namespace rg = gs::region;
  auto has = [&](const char* a) { return ("," + attacks + ",").find("," + std::string(a) + ",") != std::string::npos; };
  void* p = MAP_FAILED;
  if (has("fill")) {  // made as the first tenant makes it, before any honest tenant joins
    char msg[512];
    rg::Card* made = rg::OpenCard(path, msg, sizeof(msg));
    if (made == nullptr) {
      fprintf(stderr, "%s\n", msg);
      return -1;
    }
    p = made;
  } else {
    int fd = open(path, O_RDWR);
    if (fd < 0) return -1;
    p = mmap(nullptr, sizeof(rg::Card), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return -1;
  }
  auto* c = static_cast<rg::Card*>(p);
  // An entry of its own: the last free one.
  int mine = rg::kCardTenants - 1;
  for (int i = rg::kCardTenants - 1; i >= 0; --i)
    if (c->tenants[i].id.load() == 0) {
      mine = i;
      break;
    }
  rg::CardTenant& me = c->tenants[mine];
  me.id.store(0x6e656b6f74736f68ULL);
  long rewrites = 0;
  uint32_t seq = rg::TurnSeq(c->turn.load()) + 1000;
  int64_t bumped = 0;
  for (int64_t end = Now() + ms * 1'000'000; Now() < end; ++rewrites) {
    int64_t now = Now();
    me.seen_ns.store(now);
    if (has("priority")) {
      me.priority.store(INT32_MIN);
      me.share.store(100);
      me.force.store(0);
      me.wants_ns.store(now);
    }
    if (has("seize")) {
      if (now - bumped > 100'000'000) {
        ++seq;
        bumped = now;
      }
      c->turn.store(rg::PackTurn(seq, static_cast<uint32_t>(mine), 1));
      c->turn_start_ns.store(now);
      c->deadline_ns.store(now + 10'000'000'000);
      c->deadline_seq.store(seq);
    }
    if (has("drain")) me.drain_ns.store(now);
    if (has("credit")) {
      for (int i = 0; i < rg::kCardTenants; ++i) {
        if (i == mine || c->tenants[i].id.load() == 0) continue;
        rg::CardTenant& t = c->tenants[i];
        t.credit_ns.store(-1'000'000'000);
        t.credit_at_ns.store(now);
        t.wants_ns.store(0);
        t.share.store(1);
        t.priority.store(999);
      }
      me.credit_ns.store(INT64_MAX);
      me.credit_at_ns.store(now);
      me.wants_ns.store(now);
    }
    if (has("garbage")) {
      c->turn.store(rg::PackTurn(seq, 0xFFF0, 0xFFFF));
      c->deadline_seq.store(seq + 7);
      c->deadline_ns.store(INT64_MIN);
      c->turn_start_ns.store(INT64_MAX);
      me.share.store(0);
      me.credit_ns.store(INT64_MIN);
      me.credit_at_ns.store(INT64_MIN);
      me.wants_ns.store(INT64_MAX);
      me.priority.store(INT32_MIN);
    }
    if (has("fill"))
      for (int i = 0; i < rg::kCardTenants; ++i) {
        rg::CardTenant& t = c->tenants[i];
        const uint64_t made_up = 0x66696c6c00000000ULL + static_cast<uint64_t>(i);  // "fill"
        uint64_t cur = 0;
        if (t.id.compare_exchange_strong(cur, made_up)) {
          t.share.store(1);
          t.priority.store(rg::kWorstPriority);
          t.wants_ns.store(0);
        }
        if (t.id.load() == made_up) t.seen_ns.store(now);
      }
    usleep(1000);
  }
  munmap(p, sizeof(rg::Card));
  return rewrites;
}

// ---- virtual memory management --------------------------------------------------------

struct VmmMapping {
  CUdeviceptr ptr = 0;
  size_t size = 0;
};
std::vector<std::pair<CUmemGenericAllocationHandle, size_t>> g_handles;  // newest last
std::vector<VmmMapping> g_mappings;                                      // newest last
int g_exported_fd = -1;                                                  // vmmexport

CUresult VmmCreate(size_t bytes, CUmemGenericAllocationHandle* handle) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return Get<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long)>(
      "cuMemCreate")(handle, bytes, &prop, 0);
}

CUresult VmmAccess(CUdeviceptr ptr, size_t size) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return Get<CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t)>("cuMemSetAccess")(ptr, size, &access,
                                                                                                  1);
}

CUresult VmmReserve(size_t size, CUdeviceptr* ptr) {
  return Get<CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long)>("cuMemAddressReserve")(
      ptr, size, 0, 0, 0);
}

CUresult VmmMap(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle) {
  return Get<CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long)>("cuMemMap")(
      ptr, size, 0, handle, 0);
}

CUresult VmmUnmap(CUdeviceptr ptr, size_t size) {
  return Get<CUresult (*)(CUdeviceptr, size_t)>("cuMemUnmap")(ptr, size);
}

CUresult VmmRelease(CUmemGenericAllocationHandle handle) {
  return Get<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease")(handle);
}

// Maps the whole of handle at a fresh reservation, read-write; the mapping is listed.
CUresult VmmMapFresh(CUmemGenericAllocationHandle handle, size_t size) {
  CUdeviceptr ptr = 0;
  CUresult rc = VmmReserve(size, &ptr);
  if (rc == CUDA_SUCCESS) rc = VmmMap(ptr, size, handle);
  if (rc == CUDA_SUCCESS) rc = VmmAccess(ptr, size);
  if (rc == CUDA_SUCCESS) g_mappings.push_back({ptr, size});
  return rc;
}

// `pieces` times: a 64 MiB handle mapped; released at once while mapped when `release`.
// Returns the MiB left mapped.
long VmmPieces(long pieces, bool release) {
  long mapped = 0;
  for (long k = 0; k < pieces; ++k) {
    CUmemGenericAllocationHandle h = 0;
    if (VmmCreate(64ull << 20, &h) != CUDA_SUCCESS) break;
    if (VmmMapFresh(h, 64ull << 20) != CUDA_SUCCESS) {
      VmmRelease(h);
      break;
    }
    mapped += 64;
    if (release && VmmRelease(h) != CUDA_SUCCESS) break;
    if (!release) g_handles.push_back({h, 64ull << 20});
  }
  return mapped;
}

// ---- green contexts and multicast --------------------------------------------------------

std::vector<CUgreenCtx> g_greens;
CUmemGenericAllocationHandle g_multicast = 0;

CUresult MakeGreen(CUgreenCtx* green) {
  CUdevResource all{}, half{};
  unsigned groups = 1;
  CUresult rc = Get<CUresult (*)(CUdevice, CUdevResource*, CUdevResourceType)>("cuDeviceGetDevResource")(
      0, &all, CU_DEV_RESOURCE_TYPE_SM);
  if (rc == CUDA_SUCCESS)
    rc = Get<CUresult (*)(CUdevResource*, unsigned*, const CUdevResource*, CUdevResource*, unsigned, unsigned)>(
        "cuDevSmResourceSplitByCount")(&half, &groups, &all, nullptr, 0, all.sm.smCount / 2);
  CUdevResourceDesc desc = nullptr;
  if (rc == CUDA_SUCCESS)
    rc = Get<CUresult (*)(CUdevResourceDesc*, CUdevResource*, unsigned)>("cuDevResourceGenerateDesc")(&desc, &half, 1);
  if (rc == CUDA_SUCCESS)
    rc = Get<CUresult (*)(CUgreenCtx*, CUdevResourceDesc, CUdevice, unsigned)>("cuGreenCtxCreate")(
        green, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM);
  return rc;
}

CUresult GreenCurrent(CUgreenCtx green) {
  CUcontext ctx = nullptr;
  CUresult rc = Get<CUresult (*)(CUcontext*, CUgreenCtx)>("cuCtxFromGreenCtx")(&ctx, green);
  if (rc == CUDA_SUCCESS) rc = Get<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(ctx);
  return rc;
}

CUresult GreenDestroy() {
  if (g_greens.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult rc = Get<CUresult (*)(CUgreenCtx)>("cuGreenCtxDestroy")(g_greens.back());
  if (rc == CUDA_SUCCESS) g_greens.pop_back();
  CUcontext primary = nullptr;
  if (Get<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain")(&primary, 0) == CUDA_SUCCESS) {
    Get<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(primary);
    Get<CUresult (*)(CUdevice)>("cuDevicePrimaryCtxRelease_v2")(0);
  }
  return rc;
}

// green-leak: green contexts made until refused or n.
void GreenLeak(long n) {
  long made = 0;
  CUresult rc = CUDA_SUCCESS;
  for (; made < n; ++made) {
    CUgreenCtx g = nullptr;
    if ((rc = MakeGreen(&g)) != CUDA_SUCCESS) break;
    g_greens.push_back(g);
  }
  printf("green-leak %ld %s\n", made, Name(rc));
}

// mc-leak: 64 MiB handles bound to one multicast object of device 0, each released while bound.
void MulticastLeak(long n) {
  using Release = CUresult (*)(CUmemGenericAllocationHandle);
  const size_t piece = 64ull << 20;
  CUresult rc = CUDA_SUCCESS;
  if (g_multicast == 0) {
    CUmulticastObjectProp prop{};
    prop.numDevices = 1;
    prop.size = static_cast<size_t>(n) * piece;
    rc = Get<CUresult (*)(CUmemGenericAllocationHandle*, const CUmulticastObjectProp*)>("cuMulticastCreate")(
        &g_multicast, &prop);
    if (rc == CUDA_SUCCESS)
      rc = Get<CUresult (*)(CUmemGenericAllocationHandle, CUdevice)>("cuMulticastAddDevice")(g_multicast, 0);
  }
  long bound = 0;
  for (; rc == CUDA_SUCCESS && bound < n; ++bound) {
    CUmemGenericAllocationHandle h = 0;
    if ((rc = VmmCreate(piece, &h)) != CUDA_SUCCESS) break;
    rc = Get<CUresult (*)(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle, size_t, size_t,
                          unsigned long long)>("cuMulticastBindMem")(g_multicast, bound * piece, h, 0, piece, 0);
    Get<Release>("cuMemRelease")(h);
    if (rc != CUDA_SUCCESS) break;
  }
  printf("mc-leak %ld %s\n", bound * 64, Name(rc));
}

// Two handles of `bytes` mapped side by side in one reservation and released, then one
// cuMemUnmap over both; returns that unmap's result.
CUresult VmmPair(size_t bytes) {
  CUmemGenericAllocationHandle a = 0, b = 0;
  CUdeviceptr ptr = 0;
  CUresult rc = VmmCreate(bytes, &a);
  if (rc == CUDA_SUCCESS) rc = VmmCreate(bytes, &b);
  if (rc == CUDA_SUCCESS) rc = VmmReserve(2 * bytes, &ptr);
  if (rc == CUDA_SUCCESS) rc = VmmMap(ptr, bytes, a);
  if (rc == CUDA_SUCCESS) rc = VmmMap(ptr + bytes, bytes, b);
  if (rc == CUDA_SUCCESS) rc = VmmAccess(ptr, 2 * bytes);
  if (rc == CUDA_SUCCESS) rc = VmmRelease(a);
  if (rc == CUDA_SUCCESS) rc = VmmRelease(b);
  if (rc != CUDA_SUCCESS) return rc;
  return VmmUnmap(ptr, 2 * bytes);
}

// ---- memory shared between processes ---------------------------------------------------

// How a piece is shared: a legacy IPC handle; a POSIX descriptor of a cuMemCreate handle;
// a pool allocation's export data, with the pool's descriptor.
// kHold: no memory; the importer holds what it imported for `value` ms after the socket closes.
// kModule: no memory; the importer loads a module with `value` MiB of .global variables.
enum class Route : uint32_t { kIpc, kFd, kPool, kHold, kModule };

struct ShareMsg {
  Route route;
  uint32_t value;  // the word the sender wrote at the start
  uint64_t size;
  union {
    CUipcMemHandle handle;
    CUmemPoolPtrExportData pool_ptr;
  };
};
struct ShareReply {
  int32_t rc;
  uint32_t seen_ok;  // the importer read `value` and wrote value + 1
};

int g_importer_fd = -1;
pid_t g_importer_pid = 0;
bool g_importer_pidns = false;
// The importer's container when it is another one: its region and its slice.
const char* g_importer_region = nullptr;
const char* g_importer_limit = nullptr;
CUmemoryPool g_share_pool = nullptr;
std::vector<CUdeviceptr> g_ipc_opened;  // by ipc-open-file, newest last

// Written and on the card before it returns: a copy from pageable memory may return once
// the bytes are staged, before they reach the device, and another process reads them next.
CUresult ToDevice(CUdeviceptr p, uint32_t v) {
  CUresult rc = Get<CUresult (*)(CUdeviceptr, const void*, size_t)>("cuMemcpyHtoD_v2")(p, &v, sizeof(v));
  return rc == CUDA_SUCCESS ? Get<CUresult (*)()>("cuCtxSynchronize")() : rc;
}
uint32_t FromDevice(CUdeviceptr p) {
  uint32_t v = 0;
  if (Get<CUresult (*)(void*, CUdeviceptr, size_t)>("cuMemcpyDtoH_v2")(&v, p, sizeof(v)) != CUDA_SUCCESS) return 0;
  return v;
}

// A module whose .global variables take `mib` MiB (cuModuleLoadData).
CUresult LoadModuleWithGlobals(long mib) {
  std::string ptx =
      ".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry gs_nothing()\n{\n ret;\n}\n"
      ".visible .global .align 1 .b8 gs_globals[" +
      std::to_string(mib << 20) + "];\n";
  CUmodule m = nullptr;
  return Get<CUresult (*)(CUmodule*, const void*)>("cuModuleLoadData")(&m, ptx.c_str());
}

// Starts the importer: this program, `init importer FD`.
bool SpawnImporter() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return false;
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    fcntl(sv[1], F_SETFD, 0);  // the importer's end survives exec
    if (g_importer_region != nullptr) {
      setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", g_importer_region, 1);
      setenv("CUDA_DEVICE_MEMORY_LIMIT", g_importer_limit, 1);
    }
    std::string fd = std::to_string(sv[1]);
    char self[PATH_MAX] = {};
    if (g_importer_pidns && readlink("/proc/self/exe", self, sizeof(self) - 1) > 0)
      execlp("unshare", "unshare", "--pid", "--fork", self, "init", "importer", fd.c_str(),
             static_cast<char*>(nullptr));
    else if (!g_importer_pidns)
      execl("/proc/self/exe", "hostile_program", "init", "importer", fd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(sv[1]);
  g_importer_fd = sv[0];
  g_importer_pid = pid;
  return true;
}

bool SendShare(const ShareMsg& m, int fd, ShareReply* reply) {
  if (!gs::SendWithDescriptor(g_importer_fd, &m, sizeof(m), fd)) return false;
  return recv(g_importer_fd, reply, sizeof(*reply), MSG_WAITALL) == static_cast<ssize_t>(sizeof(*reply));
}

// The importer's side: serves until the socket closes, then lets everything go.
int Importer(int sock) {
  struct Held {
    Route route;
    CUdeviceptr ptr;
    size_t size;
    CUmemGenericAllocationHandle handle;
  };
  std::vector<Held> held;
  CUmemoryPool pool = nullptr;  // imported from the first pool descriptor
  uint32_t hold_ms = 0;         // after the socket closes
  for (;;) {
    ShareMsg m{};
    int fd = -1;
    if (!gs::ReceiveWithDescriptor(sock, &m, sizeof(m), &fd)) break;
    if (m.route == Route::kHold) {
      hold_ms = m.value;
      continue;
    }
    if (m.route == Route::kModule) {
      ShareReply r{static_cast<int32_t>(LoadModuleWithGlobals(m.value)), 0};
      if (send(sock, &r, sizeof(r), 0) != static_cast<ssize_t>(sizeof(r))) break;
      continue;
    }
    Held x{m.route, 0, m.size, 0};
    CUresult rc = CUDA_SUCCESS;
    if (x.route == Route::kIpc) {
      rc = Get<CUresult (*)(CUdeviceptr*, CUipcMemHandle, unsigned)>("cuIpcOpenMemHandle_v2")(
          &x.ptr, m.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    } else if (x.route == Route::kPool) {
      if (pool == nullptr)
        rc = Get<CUresult (*)(CUmemoryPool*, void*, CUmemAllocationHandleType, unsigned long long)>(
            "cuMemPoolImportFromShareableHandle")(&pool, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      if (rc == CUDA_SUCCESS)
        rc = Get<CUresult (*)(CUdeviceptr*, CUmemoryPool, CUmemPoolPtrExportData*)>("cuMemPoolImportPointer")(
            &x.ptr, pool, &m.pool_ptr);
    } else {
      rc = Get<CUresult (*)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType)>(
          "cuMemImportFromShareableHandle")(&x.handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      if (rc == CUDA_SUCCESS) rc = VmmReserve(x.size, &x.ptr);
      if (rc == CUDA_SUCCESS) rc = VmmMap(x.ptr, x.size, x.handle);
      if (rc == CUDA_SUCCESS) rc = VmmAccess(x.ptr, x.size);
    }
    if (fd >= 0) close(fd);
    ShareReply r{static_cast<int32_t>(rc), 0};
    if (rc == CUDA_SUCCESS) {
      r.seen_ok = FromDevice(x.ptr) == m.value && ToDevice(x.ptr, m.value + 1) == CUDA_SUCCESS;
      held.push_back(x);
    }
    if (send(sock, &r, sizeof(r), 0) != static_cast<ssize_t>(sizeof(r))) break;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  long closed = 0;
  for (const Held& x : held) {
    CUresult rc;
    if (x.route == Route::kIpc) {
      rc = Get<CUresult (*)(CUdeviceptr)>("cuIpcCloseMemHandle")(x.ptr);
    } else if (x.route == Route::kPool) {
      rc = Get<CUresult (*)(CUdeviceptr)>("cuMemFree_v2")(x.ptr);
    } else {
      rc = VmmUnmap(x.ptr, x.size);
      Get<CUresult (*)(CUdeviceptr, size_t)>("cuMemAddressFree")(x.ptr, x.size);
      if (rc == CUDA_SUCCESS) rc = VmmRelease(x.handle);
    }
    closed += rc == CUDA_SUCCESS;
  }
  printf("importer %zu %ld\n", held.size(), closed);
  return 0;
}

// Two threads of this process open one saved legacy IPC handle at the same moment, `rounds`
// times, each closing what it opened: "<rounds both opened> <closes that failed>".
std::string IpcOpenRace(const char* path, long rounds) {
  CUipcMemHandle h{};
  FILE* f = fopen(path, "rb");
  const bool read_ok = f != nullptr && fread(&h, sizeof(h), 1, f) == 1;
  if (f != nullptr) fclose(f);
  if (!read_ok) return "no-handle";
  auto open = Get<CUresult (*)(CUdeviceptr*, CUipcMemHandle, unsigned)>("cuIpcOpenMemHandle_v2");
  auto close = Get<CUresult (*)(CUdeviceptr)>("cuIpcCloseMemHandle");
  CUcontext ctx = nullptr;
  Get<CUresult (*)(CUcontext*)>("cuCtxGetCurrent")(&ctx);
  long both = 0, failed = 0;
  for (long round = 0; round < rounds; ++round) {
    std::atomic<int> ready{0};
    CUdeviceptr p[2] = {};
    CUresult rc[2] = {};
    auto opener = [&](int k) {
      Get<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(ctx);
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      rc[k] = open(&p[k], h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    };
    std::thread a(opener, 0), b(opener, 1);
    a.join();
    b.join();
    both += rc[0] == CUDA_SUCCESS && rc[1] == CUDA_SUCCESS;
    for (int k = 0; k < 2; ++k)
      if (rc[k] == CUDA_SUCCESS) failed += close(p[k]) != CUDA_SUCCESS;
  }
  return std::to_string(both) + " " + std::to_string(failed);
}

// Forks N times while a thread makes `call` over and over; each child makes `call` once.
std::string ForkWhile(const std::function<CUresult()>& call, long children) {
  CUcontext ctx = nullptr;
  Get<CUresult (*)(CUcontext*)>("cuCtxGetCurrent")(&ctx);
  std::atomic<bool> stop{false};
  std::atomic<long> calls{0};
  std::thread busy([&] {
    Get<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(ctx);
    while (!stop.load()) {
      call();
      calls.fetch_add(1);
    }
  });
  long answered = 0, hung = 0;
  for (long k = 0; k < children && hung == 0; ++k) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) break;
    if (pid == 0) _exit(call() == CUDA_ERROR_NOT_INITIALIZED ? 0 : 1);
    int status = 0;
    bool gone = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (!(gone = waitpid(pid, &status, WNOHANG) == pid) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!gone) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
    answered += gone && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    hung += !gone;
  }
  stop.store(true);
  busy.join();
  return std::to_string(answered) + " " + std::to_string(hung) + " " + std::to_string(calls.load());
}

std::string ForkWhile(const char* what, long children) {
  if (strncmp(what, "ipc:", 4) == 0) {
    CUipcMemHandle h{};
    FILE* f = fopen(what + 4, "rb");
    const bool read_ok = f != nullptr && fread(&h, sizeof(h), 1, f) == 1;
    if (f != nullptr) fclose(f);
    if (!read_ok) return "no-handle";
    auto open = Get<CUresult (*)(CUdeviceptr*, CUipcMemHandle, unsigned)>("cuIpcOpenMemHandle_v2");
    auto close = Get<CUresult (*)(CUdeviceptr)>("cuIpcCloseMemHandle");
    return ForkWhile(
        [&] {
          CUdeviceptr p = 0;
          CUresult rc = open(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
          if (rc == CUDA_SUCCESS) close(p);
          return rc;
        },
        children);
  }
  if (strcmp(what, "ctx") == 0) {
    auto create = Get<CUresult (*)(CUcontext*, unsigned, CUdevice)>("cuCtxCreate_v2");
    auto destroy = Get<CUresult (*)(CUcontext)>("cuCtxDestroy_v2");
    auto retain = Get<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain");
    const pid_t parent = getpid();
    return ForkWhile(
        [&] {
          CUcontext c = nullptr;
          if (getpid() != parent) return retain(&c, 0);
          CUresult rc = create(&c, 0, 0);
          if (rc == CUDA_SUCCESS) destroy(c);
          return rc;
        },
        children);
  }
  return "unknown";
}

CUresult VmmCreateExportable(size_t bytes, CUmemGenericAllocationHandle* handle) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return Get<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long)>(
      "cuMemCreate")(handle, bytes, &prop, 0);
}

CUresult VmmExport(CUmemGenericAllocationHandle h, int* fd) {
  return Get<CUresult (*)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long)>(
      "cuMemExportToShareableHandle")(fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
}

// A pool of device 0 whose allocations can be shared as POSIX descriptors, or without a
// handle type.
CUresult PoolCreate(CUmemAllocationHandleType types, CUmemoryPool* pool) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = types;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUdevice current = 0;
  Get<CUresult (*)(CUdevice*)>("cuCtxGetDevice")(&current);
  props.location.id = current;
  return Get<CUresult (*)(CUmemoryPool*, const CUmemPoolProps*)>("cuMemPoolCreate")(pool, &props);
}

CUresult PoolExport(CUmemoryPool pool, int* fd) {
  return Get<CUresult (*)(void*, CUmemoryPool, CUmemAllocationHandleType, unsigned long long)>(
      "cuMemPoolExportToShareableHandle")(fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
}

CUresult PoolAlloc(CUmemoryPool pool, size_t bytes, CUdeviceptr* p) {
  return Get<CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream)>("cuMemAllocFromPoolAsync")(p, bytes, pool,
                                                                                                    nullptr);
}

CUresult PoolExportPointer(CUdeviceptr p, CUmemPoolPtrExportData* data) {
  return Get<CUresult (*)(CUmemPoolPtrExportData*, CUdeviceptr)>("cuMemPoolExportPointer")(data, p);
}

// `pieces` times: `mib` MiB made here, shared with the importer, freed here at once (unless
// `keep`), the next one made. Prints "<step> <MiB shared> <pieces whose data both sides saw>".
void ShareLeak(const char* step, long pieces, long mib, Route route, bool keep = false) {
  auto alloc = Get<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
  auto free_fn = Get<CUresult (*)(CUdeviceptr)>("cuMemFree_v2");
  auto get_handle = Get<CUresult (*)(CUipcMemHandle*, CUdeviceptr)>("cuIpcGetMemHandle");
  const size_t bytes = static_cast<size_t>(mib) << 20;
  long freed = 0, seen = 0;
  if (g_importer_fd < 0 && !SpawnImporter()) {
    printf("%s spawn-failed\n", step);
    return;
  }
  const bool vmm = route == Route::kFd;
  for (long k = 0; k < pieces; ++k) {
    ShareMsg m{};
    m.route = route;
    m.value = 0x1000u + static_cast<uint32_t>(k);
    m.size = bytes;
    CUdeviceptr p = 0;
    CUmemGenericAllocationHandle h = 0;
    int fd = -1;
    CUresult rc = CUDA_SUCCESS;
    if (route == Route::kIpc) {
      rc = alloc(&p, bytes);
      if (rc == CUDA_SUCCESS) rc = ToDevice(p, m.value);
      if (rc == CUDA_SUCCESS) rc = get_handle(&m.handle, p);
    } else if (route == Route::kPool) {
      if (g_share_pool == nullptr) rc = PoolCreate(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, &g_share_pool);
      if (rc == CUDA_SUCCESS) rc = PoolAlloc(g_share_pool, bytes, &p);
      if (rc == CUDA_SUCCESS) rc = ToDevice(p, m.value);
      if (rc == CUDA_SUCCESS) rc = PoolExport(g_share_pool, &fd);
      if (rc == CUDA_SUCCESS) rc = PoolExportPointer(p, &m.pool_ptr);
    } else {
      rc = VmmCreateExportable(bytes, &h);
      if (rc == CUDA_SUCCESS) rc = VmmReserve(bytes, &p);
      if (rc == CUDA_SUCCESS) rc = VmmMap(p, bytes, h);
      if (rc == CUDA_SUCCESS) rc = VmmAccess(p, bytes);
      if (rc == CUDA_SUCCESS) rc = ToDevice(p, m.value);
      if (rc == CUDA_SUCCESS) rc = VmmExport(h, &fd);
    }
    ShareReply r{};
    bool shared = rc == CUDA_SUCCESS && SendShare(m, fd, &r) && r.rc == CUDA_SUCCESS;
    if (fd >= 0) close(fd);
    if (shared && r.seen_ok && FromDevice(p) == m.value + 1) ++seen;
    // Freed at once, while the importer holds it.
    if (route == Route::kIpc && p && !keep) free_fn(p);
    if (route == Route::kPool && p && !keep) Get<CUresult (*)(CUdeviceptr, CUstream)>("cuMemFreeAsync")(p, nullptr);
    if (vmm && p) {
      VmmUnmap(p, bytes);
      Get<CUresult (*)(CUdeviceptr, size_t)>("cuMemAddressFree")(p, bytes);
    }
    if (vmm && h) VmmRelease(h);
    if (!shared) break;
    freed += mib;
  }
  printf("%s %ld %ld\n", step, freed, seen);
}

int ImporterDone() {
  if (g_importer_fd < 0) return -1;
  close(g_importer_fd);
  g_importer_fd = -1;
  int status = 0;
  while (waitpid(g_importer_pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// 64 MiB pieces until refused, then every piece freed; the MiB that fitted.
long Room() {
  auto alloc = Get<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
  auto free_fn = Get<CUresult (*)(CUdeviceptr)>("cuMemFree_v2");
  std::vector<CUdeviceptr> got;
  for (CUdeviceptr p; got.size() < 4096 && alloc(&p, 64ull << 20) == CUDA_SUCCESS;) got.push_back(p);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // held long enough to be seen on the card
  for (CUdeviceptr p : got) free_fn(p);
  return static_cast<long>(got.size()) * 64;
}

// How a graph leak's graphs get their allocation node: cuGraphAddMemAllocNode,
// cuGraphAddNode, or cuGraphClone of one graph made with cuGraphAddMemAllocNode.
enum class GraphRoute { kAllocNode, kAddNode, kClone };

// `pieces` graphs of one allocation node of `mib` MiB each: instantiated, launched, their
// executable and graph destroyed, the allocation left unfreed. Returns the MiB launched;
// the result that stopped the loop in *stop.
long GraphLeak(long pieces, long mib, GraphRoute route, CUresult* stop) {
  auto create = Get<CUresult (*)(CUgraph*, unsigned)>("cuGraphCreate");
  auto add_alloc = Get<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUDA_MEM_ALLOC_NODE_PARAMS*)>(
      "cuGraphAddMemAllocNode");
  auto add_node =
      Get<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*)>("cuGraphAddNode");
  auto clone = Get<CUresult (*)(CUgraph*, CUgraph)>("cuGraphClone");
  auto instantiate = Get<CUresult (*)(CUgraphExec*, CUgraph, unsigned long long)>("cuGraphInstantiateWithFlags");
  auto launch = Get<CUresult (*)(CUgraphExec, CUstream)>("cuGraphLaunch");
  auto sync = Get<CUresult (*)()>("cuCtxSynchronize");
  auto exec_destroy = Get<CUresult (*)(CUgraphExec)>("cuGraphExecDestroy");
  auto destroy = Get<CUresult (*)(CUgraph)>("cuGraphDestroy");
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  const size_t bytes = static_cast<size_t>(mib) << 20;
  // A graph with one allocation node, made with cuGraphAddMemAllocNode.
  auto make = [&](CUgraph* g) {
    CUgraphNode node = nullptr;
    CUDA_MEM_ALLOC_NODE_PARAMS p{};
    p.poolProps = props;
    p.bytesize = bytes;
    CUresult rc = create(g, 0);
    if (rc == CUDA_SUCCESS) rc = add_alloc(&node, *g, nullptr, 0, &p);
    return rc;
  };
  CUgraph original = nullptr;
  *stop = route == GraphRoute::kClone ? make(&original) : CUDA_SUCCESS;
  long launched = 0;
  for (long k = 0; k < pieces && *stop == CUDA_SUCCESS; ++k) {
    CUgraph g = nullptr;
    CUgraphExec e = nullptr;
    CUresult rc = CUDA_SUCCESS;
    if (route == GraphRoute::kAllocNode) {
      rc = make(&g);
    } else if (route == GraphRoute::kAddNode) {
      CUgraphNode node = nullptr;
      CUgraphNodeParams p{};
      p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
      p.alloc.poolProps = props;
      p.alloc.bytesize = bytes;
      rc = create(&g, 0);
      if (rc == CUDA_SUCCESS) rc = add_node(&node, g, nullptr, 0, &p);
    } else {
      rc = clone(&g, original);
    }
    if (rc == CUDA_SUCCESS) rc = instantiate(&e, g, 0);
    if (rc == CUDA_SUCCESS) rc = launch(e, nullptr);
    if (rc == CUDA_SUCCESS) rc = sync();
    if (e) exec_destroy(e);
    if (g) destroy(g);
    *stop = rc;
    if (rc == CUDA_SUCCESS) launched += mib;
  }
  if (original) destroy(original);
  return launched;
}

CUgraphExec g_captured = nullptr;
CUstream g_capture_stream = nullptr;

// A captured graph of `pieces` 64 MiB allocations, all freed at its end, instantiated.
CUresult GraphCapture(long pieces) {
  auto stream_create = Get<CUresult (*)(CUstream*, unsigned)>("cuStreamCreate");
  auto begin = Get<CUresult (*)(CUstream, CUstreamCaptureMode)>("cuStreamBeginCapture_v2");
  auto end = Get<CUresult (*)(CUstream, CUgraph*)>("cuStreamEndCapture");
  auto alloc = Get<CUresult (*)(CUdeviceptr*, size_t, CUstream)>("cuMemAllocAsync");
  auto free_fn = Get<CUresult (*)(CUdeviceptr, CUstream)>("cuMemFreeAsync");
  auto instantiate = Get<CUresult (*)(CUgraphExec*, CUgraph, unsigned long long)>("cuGraphInstantiateWithFlags");
  CUresult rc = stream_create(&g_capture_stream, 0);
  if (rc == CUDA_SUCCESS) rc = begin(g_capture_stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  if (rc != CUDA_SUCCESS) return rc;
  std::vector<CUdeviceptr> ptrs;
  for (long k = 0; k < pieces && rc == CUDA_SUCCESS; ++k) {
    CUdeviceptr p = 0;
    rc = alloc(&p, 64ull << 20, g_capture_stream);
    if (rc == CUDA_SUCCESS) ptrs.push_back(p);
  }
  for (CUdeviceptr p : ptrs)
    if (rc == CUDA_SUCCESS) rc = free_fn(p, g_capture_stream);
  CUgraph g = nullptr;
  CUresult end_rc = end(g_capture_stream, &g);
  if (rc == CUDA_SUCCESS) rc = end_rc;
  if (rc == CUDA_SUCCESS) rc = instantiate(&g_captured, g, 0);
  return rc;
}

CUresult GraphRun() {
  if (g_captured == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = Get<CUresult (*)(CUgraphExec, CUstream)>("cuGraphLaunch")(g_captured, g_capture_stream);
  if (rc == CUDA_SUCCESS) rc = Get<CUresult (*)(CUstream)>("cuStreamSynchronize")(g_capture_stream);
  return rc;
}

// ---- the region's lock held and its totals zeroed while threads allocate -----------------

long RaceZeroed(const char* path, int threads, size_t mib) {
  namespace rg = gs::region;
  int fd = open(path, O_RDWR);
  if (fd < 0) return -1;
  void* p = mmap(nullptr, sizeof(rg::Region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return -1;
  auto* r = static_cast<rg::Region*>(p);
  rg::ProcessSlot* mine = nullptr;
  for (auto& slot : r->procs)
    if (slot.pid.load() == static_cast<uint32_t>(getpid())) mine = &slot;
  CUcontext ctx = nullptr;
  Get<CUresult (*)(CUcontext*)>("cuCtxGetCurrent")(&ctx);
  auto set_current = Get<CUresult (*)(CUcontext)>("cuCtxSetCurrent");
  auto alloc = Get<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
  // The enforcer compares its books with NVML at most every 100 ms, inside a charge: one
  // charge now, past that interval, so that none of the racing charges stops for it.
  std::this_thread::sleep_for(std::chrono::milliseconds(110));
  CUdeviceptr small = 0;
  if (alloc(&small, 2u << 20) == CUDA_SUCCESS) Get<CUresult (*)(CUdeviceptr)>("cuMemFree_v2")(small);
  std::atomic<bool> locked{false}, go{false}, stop{false};
  std::atomic<int> ready{0};
  std::atomic<long> pieces{0};
  // The region's mutex lives in the region too: held until every allocating thread waits
  // for it, then let go while the totals they are checked against are zeroed again and again.
  std::thread zeroer([&] {
    pthread_mutex_lock(&r->mutex);
    locked.store(true);
    while (!go.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    pthread_mutex_unlock(&r->mutex);
    while (!stop.load(std::memory_order_relaxed)) {
      r->devices[0].memory_used.store(0);
      if (mine) mine->memory[0].store(0);
    }
  });
  while (!locked.load()) std::this_thread::yield();
  std::vector<std::thread> allocators;
  for (int t = 0; t < threads; ++t)
    allocators.emplace_back([&] {
      set_current(ctx);
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      CUdeviceptr d;
      while (alloc(&d, mib << 20) == CUDA_SUCCESS) pieces.fetch_add(1);
    });
  while (ready.load() < threads) std::this_thread::yield();
  go.store(true);
  for (auto& t : allocators) t.join();
  stop.store(true);
  zeroer.join();
  munmap(p, sizeof(rg::Region));
  return pieces.load() * static_cast<long>(mib);
}

}  // namespace

int main(int argc, char** argv) {
  // Attacks on the node's files need no driver.
  if (argc == 4 && strcmp(argv[1], "scribble") == 0) {
    printf("scribble %ld\n", Scribble(argv[2], atol(argv[3])));
    return 0;
  }
  if (argc == 5 && strcmp(argv[1], "card") == 0) {
    printf("card %ld\n", ForgeCard(argv[2], atol(argv[3]), argv[4]));
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "fill-dir") == 0) {
    FillDir(argv[2]);
    return 0;
  }
  g_libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (g_libcuda == nullptr) {
    fprintf(stderr, "hostile: no libcuda.so.1: %s\n", dlerror());
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    const char* step = argv[i];
    const char* arg = i + 1 < argc ? argv[i + 1] : "0";
    if (strcmp(step, "dlvsym") == 0) {
      void* p = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
      if (p == nullptr) p = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
      if (p == nullptr) return 2;
      g_lookup = reinterpret_cast<DlsymFn>(p);
      printf("dlvsym ok\n");
    } else if (strcmp(step, "init") == 0) {
      CUresult rc = Get<CUresult (*)(unsigned)>("cuInit")(0);
      CUcontext ctx = nullptr;
      if (rc == CUDA_SUCCESS) rc = Get<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain")(&ctx, 0);
      if (rc == CUDA_SUCCESS) rc = Get<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(ctx);
      printf("init %s\n", Name(rc));
    } else if (strcmp(step, "device") == 0) {
      CUcontext ctx = nullptr;
      CUresult rc = Get<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain")(&ctx, atoi(arg));
      if (rc == CUDA_SUCCESS) rc = Get<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(ctx);
      printf("device %s\n", Name(rc));
      ++i;
    } else if (strcmp(step, "ctxv1") == 0) {
      CUresult rc = Get<CUresult (*)(unsigned)>("cuInit")(0);
      CUcontext ctx = nullptr;
      if (rc == CUDA_SUCCESS) rc = Get<CUresult (*)(CUcontext*, unsigned, CUdevice)>("cuCtxCreate")(&ctx, 0, 0);
      printf("ctxv1 %s\n", Name(rc));
    } else if (strcmp(step, "fill") == 0 || strcmp(step, "fillsmall") == 0) {
      auto alloc = Get<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
      const long piece_mib = strcmp(step, "fill") == 0 ? 64 : 2;
      long n = atol(arg), got = 0;
      for (; got < n; ++got) {
        CUdeviceptr p;
        if (alloc(&p, static_cast<size_t>(piece_mib) << 20) != CUDA_SUCCESS) break;
      }
      printf("fill %ld\n", got * piece_mib);
      ++i;
    } else if (strcmp(step, "alloc") == 0) {
      char* end = nullptr;
      unsigned long long bytes = strtoull(arg, &end, 10);
      if (end != nullptr && *end == 'm') bytes <<= 20;
      CUdeviceptr p;
      printf("alloc %s\n", Name(Get<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2")(&p, bytes)));
      ++i;
    } else if (strcmp(step, "v1alloc") == 0) {
      auto alloc = Get<CUresult (*)(CUdeviceptr_v1*, unsigned)>("cuMemAlloc");
      CUdeviceptr_v1 p = 0;
      printf("v1alloc %s\n", Name(alloc(&p, 64u << 20)));
    } else if (strcmp(step, "v1array") == 0) {
      auto create = Get<CUresult (*)(CUarray*, const CUDA_ARRAY_DESCRIPTOR_v1*)>("cuArrayCreate");
      CUDA_ARRAY_DESCRIPTOR_v1 d{};
      d.Width = 4096;
      d.Height = 4096;
      d.Format = CU_AD_FORMAT_UNSIGNED_INT8;
      d.NumChannels = 4;
      CUarray a = nullptr;
      printf("v1array %s\n", Name(create(&a, &d)));
    } else if (strcmp(step, "stack") == 0 || strcmp(step, "heap") == 0) {
      bool stack = strcmp(step, "stack") == 0;
      size_t value = static_cast<size_t>(atol(arg)) << (stack ? 10 : 20);
      CUresult rc = Get<CUresult (*)(CUlimit, size_t)>("cuCtxSetLimit")(
          stack ? CU_LIMIT_STACK_SIZE : CU_LIMIT_MALLOC_HEAP_SIZE, value);
      printf("%s %s\n", step, Name(rc));
      ++i;
    } else if (strcmp(step, "reset") == 0) {
      printf("reset %s\n", Name(Get<CUresult (*)(CUdevice)>("cuDevicePrimaryCtxReset_v2")(0)));
    } else if (strcmp(step, "touch") == 0) {
      int v = 0;
      printf("touch %s\n", Name(Get<CUresult (*)(int*)>("cuDriverGetVersion")(&v)));
    } else if (strcmp(step, "fork") == 0) {
      fflush(stdout);
      pid_t pid = fork();
      if (pid < 0) return 2;
      if (pid > 0) {  // the parent leaves after MS; the child carries on
        std::this_thread::sleep_for(std::chrono::milliseconds(atol(arg)));
        _exit(0);
      }
      ++i;
    } else if (strcmp(step, "vmm-leak") == 0 || strcmp(step, "vmm-hold") == 0) {
      printf("%s %ld\n", step, VmmPieces(atol(arg), strcmp(step, "vmm-leak") == 0));
      ++i;
    } else if (strcmp(step, "vmmcreate") == 0) {
      CUmemGenericAllocationHandle h = 0;
      size_t bytes = static_cast<size_t>(atol(arg)) << 20;
      CUresult rc = VmmCreate(bytes, &h);
      if (rc == CUDA_SUCCESS) g_handles.push_back({h, bytes});
      printf("vmmcreate %s\n", Name(rc));
      ++i;
    } else if (strcmp(step, "vmmmap") == 0) {
      printf("vmmmap %s\n",
             g_handles.empty() ? "none" : Name(VmmMapFresh(g_handles.back().first, g_handles.back().second)));
    } else if (strcmp(step, "vmmrelease") == 0) {
      printf("vmmrelease %s\n", g_handles.empty() ? "none" : Name(VmmRelease(g_handles.back().first)));
    } else if (strcmp(step, "vmmunmap") == 0) {
      if (g_mappings.empty()) {
        printf("vmmunmap none\n");
      } else {
        VmmMapping m = g_mappings.back();
        g_mappings.pop_back();
        CUresult rc = VmmUnmap(m.ptr, m.size);
        Get<CUresult (*)(CUdeviceptr, size_t)>("cuMemAddressFree")(m.ptr, m.size);
        printf("vmmunmap %s\n", Name(rc));
      }
    } else if (strcmp(step, "vmmunmaphalf") == 0) {
      printf("vmmunmaphalf %s\n",
             g_mappings.empty() ? "none" : Name(VmmUnmap(g_mappings.back().ptr, g_mappings.back().size / 2)));
    } else if (strcmp(step, "vmmpair") == 0) {
      printf("vmmpair %s\n", Name(VmmPair(static_cast<size_t>(atol(arg)) << 20)));
      ++i;
    } else if (strcmp(step, "green-leak") == 0) {
      GreenLeak(atol(arg));
      ++i;
    } else if (strcmp(step, "green") == 0) {
      CUgreenCtx g = nullptr;
      CUresult rc = MakeGreen(&g);
      if (rc == CUDA_SUCCESS) g_greens.push_back(g), rc = GreenCurrent(g);
      printf("green %s\n", Name(rc));
    } else if (strcmp(step, "greendestroy") == 0) {
      printf("greendestroy %s\n", Name(GreenDestroy()));
    } else if (strcmp(step, "mc-leak") == 0) {
      MulticastLeak(atol(arg));
      ++i;
    } else if (strcmp(step, "mc-release") == 0) {
      CUresult rc = g_multicast == 0 ? CUDA_ERROR_INVALID_VALUE
                                     : Get<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease")(g_multicast);
      if (rc == CUDA_SUCCESS) g_multicast = 0;
      printf("mc-release %s\n", Name(rc));
    } else if (strcmp(step, "graph-leak") == 0) {
      CUresult stop = CUDA_SUCCESS;
      printf("graph-leak %ld\n", GraphLeak(atol(arg), 64, GraphRoute::kAllocNode, &stop));
      ++i;
    } else if (strcmp(step, "graph-node-leak") == 0 || strcmp(step, "graph-clone-leak") == 0) {
      CUresult stop = CUDA_SUCCESS;
      GraphRoute route = strcmp(step, "graph-node-leak") == 0 ? GraphRoute::kAddNode : GraphRoute::kClone;
      long mib = GraphLeak(atol(arg), 512, route, &stop);
      printf("%s %ld %s\n", step, mib, Name(stop));
      ++i;
    } else if (strcmp(step, "graph-capture") == 0) {
      printf("graph-capture %s\n", Name(GraphCapture(atol(arg))));
      ++i;
    } else if (strcmp(step, "graph-run") == 0) {
      printf("graph-run %s\n", Name(GraphRun()));
    } else if (strcmp(step, "room") == 0) {
      printf("room %ld\n", Room());
    } else if (strcmp(step, "uuid") == 0) {
      const char name[] = "GPU-00000000-0000-0000-0000-000000000000";
      int fd = open(arg, O_WRONLY);
      bool ok = fd >= 0 && pwrite(fd, name, sizeof(name), offsetof(gs::region::Region, devices)) ==
                               static_cast<ssize_t>(sizeof(name));
      if (fd >= 0) close(fd);
      printf("uuid %s\n", ok ? "ok" : strerror(errno));
      ++i;
    } else if (strcmp(step, "modglobal") == 0) {
      printf("modglobal %s\n", Name(LoadModuleWithGlobals(atol(arg))));
      ++i;
    } else if (strcmp(step, "importer-modglobal") == 0) {
      ShareMsg m{};
      m.route = Route::kModule;
      m.value = static_cast<uint32_t>(atol(arg));
      ShareReply r{-1, 0};
      const bool sent = g_importer_fd >= 0 && SendShare(m, -1, &r);
      printf("importer-modglobal %s\n", sent ? Name(static_cast<CUresult>(r.rc)) : "no-importer");
      ++i;
    } else if (strcmp(step, "race-zeroed") == 0) {
      if (i + 3 >= argc) return 2;
      printf("race-zeroed %ld\n", RaceZeroed(argv[i + 1], atoi(argv[i + 2]), strtoul(argv[i + 3], nullptr, 10)));
      i += 3;
    } else if (strcmp(step, "child") == 0) {
      fflush(stdout);
      pid_t pid = fork();
      if (pid < 0) return 2;
      if (pid > 0) {
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
      }
    } else if (strcmp(step, "chroot") == 0) {
      bool ok = chroot(arg) == 0 && chdir("/") == 0;
      printf("chroot %s\n", ok ? "ok" : strerror(errno));
      if (!ok) return 2;
      ++i;
    } else if (strcmp(step, "leave-mounts") == 0) {
      bool ok = unshare(CLONE_NEWNS) == 0 && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
                umount2(arg, MNT_DETACH) == 0;
      printf("leave-mounts %s\n", ok ? "ok" : strerror(errno));
      if (!ok) return 2;
      ++i;
    } else if (strcmp(step, "importer") == 0) {
      return Importer(atoi(arg));
    } else if (strcmp(step, "ipc-leak") == 0 || strcmp(step, "fd-leak") == 0 || strcmp(step, "pool-leak") == 0) {
      if (i + 2 >= argc) return 2;
      Route route = step[0] == 'i' ? Route::kIpc : step[0] == 'f' ? Route::kFd : Route::kPool;
      ShareLeak(step, atol(argv[i + 1]), atol(argv[i + 2]), route);
      i += 2;
    } else if (strcmp(step, "pool-share") == 0 || strcmp(step, "ipc-share") == 0) {
      if (i + 2 >= argc) return 2;
      ShareLeak(step, atol(argv[i + 1]), atol(argv[i + 2]), step[0] == 'p' ? Route::kPool : Route::kIpc,
                /*keep=*/true);
      i += 2;
    } else if (strcmp(step, "pool-noexport") == 0) {
      CUmemoryPool pool = nullptr;
      CUdeviceptr p = 0;
      CUmemPoolPtrExportData data{};
      int fd = -1;
      CUresult rc = PoolCreate(CU_MEM_HANDLE_TYPE_NONE, &pool);
      CUresult pool_rc = rc == CUDA_SUCCESS ? PoolExport(pool, &fd) : rc;
      if (rc == CUDA_SUCCESS) rc = PoolAlloc(pool, 1 << 20, &p);
      CUresult ptr_rc = rc == CUDA_SUCCESS ? PoolExportPointer(p, &data) : rc;
      printf("pool-noexport %s %s\n", Name(pool_rc), Name(ptr_rc));
    } else if (strcmp(step, "importer-pidns") == 0) {
      g_importer_pidns = true;
    } else if (strcmp(step, "importer-container") == 0) {
      if (i + 2 >= argc) return 2;
      g_importer_region = argv[i + 1];
      g_importer_limit = argv[i + 2];
      i += 2;
    } else if (strcmp(step, "importer-done") == 0) {
      printf("importer-done %d\n", ImporterDone());
    } else if (strcmp(step, "importer-holds") == 0) {
      ShareMsg m{};
      m.route = Route::kHold;
      m.value = static_cast<uint32_t>(atol(arg));
      const bool sent = g_importer_fd >= 0 && gs::SendWithDescriptor(g_importer_fd, &m, sizeof(m), -1);
      printf("importer-holds %s\n", sent ? "ok" : "no-importer");
      if (sent) {  // on its own from now on: nobody waits for it
        close(g_importer_fd);
        g_importer_fd = -1;
      }
      ++i;
    } else if (strcmp(step, "share-pool-destroy") == 0) {
      CUresult rc = Get<CUresult (*)(CUmemoryPool)>("cuMemPoolDestroy")(g_share_pool);
      if (rc == CUDA_SUCCESS) g_share_pool = nullptr;
      printf("share-pool-destroy %s\n", Name(rc));
    } else if (strcmp(step, "vmmcreatefd") == 0) {
      CUmemGenericAllocationHandle h = 0;
      size_t bytes = static_cast<size_t>(atol(arg)) << 20;
      CUresult rc = VmmCreateExportable(bytes, &h);
      if (rc == CUDA_SUCCESS) g_handles.push_back({h, bytes});
      printf("vmmcreatefd %s\n", Name(rc));
      ++i;
    } else if (strcmp(step, "vmmexport") == 0) {
      printf("vmmexport %s\n", g_handles.empty() ? "none" : Name(VmmExport(g_handles.back().first, &g_exported_fd)));
    } else if (strcmp(step, "vmmimport") == 0) {
      CUmemGenericAllocationHandle h = 0;
      CUresult rc = Get<CUresult (*)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType)>(
          "cuMemImportFromShareableHandle")(&h, reinterpret_cast<void*>(static_cast<intptr_t>(g_exported_fd)),
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      if (rc == CUDA_SUCCESS) g_handles.push_back({h, g_handles.back().second});
      printf("vmmimport %s\n", Name(rc));
    } else if (strcmp(step, "vmmreleasefirst") == 0) {
      printf("vmmreleasefirst %s\n", g_handles.empty() ? "none" : Name(VmmRelease(g_handles.front().first)));
    } else if (strcmp(step, "ipc-save") == 0) {
      if (i + 2 >= argc) return 2;
      CUdeviceptr p = 0;
      CUipcMemHandle h{};
      CUresult rc =
          Get<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2")(&p, static_cast<size_t>(atol(argv[i + 1])) << 20);
      if (rc == CUDA_SUCCESS) rc = ToDevice(p, 0x5a5a5a5a);
      if (rc == CUDA_SUCCESS) rc = Get<CUresult (*)(CUipcMemHandle*, CUdeviceptr)>("cuIpcGetMemHandle")(&h, p);
      if (rc == CUDA_SUCCESS) {
        FILE* f = fopen(argv[i + 2], "wb");
        if (f == nullptr || fwrite(&h, sizeof(h), 1, f) != 1) rc = CUDA_ERROR_UNKNOWN;
        if (f != nullptr) fclose(f);
      }
      printf("ipc-save %s\n", Name(rc));
      i += 2;
    } else if (strcmp(step, "ipc-open-file") == 0) {
      CUipcMemHandle h{};
      FILE* f = fopen(arg, "rb");
      bool read_ok = f != nullptr && fread(&h, sizeof(h), 1, f) == 1;
      if (f != nullptr) fclose(f);
      CUdeviceptr p = 0;
      CUresult rc = read_ok ? Get<CUresult (*)(CUdeviceptr*, CUipcMemHandle, unsigned)>("cuIpcOpenMemHandle_v2")(
                                  &p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
                            : CUDA_ERROR_INVALID_VALUE;
      printf("ipc-open-file %s %s\n", Name(rc), rc == CUDA_SUCCESS && FromDevice(p) == 0x5a5a5a5a ? "ok" : "bad");
      if (rc == CUDA_SUCCESS) g_ipc_opened.push_back(p);
      ++i;
    } else if (strcmp(step, "ipc-open-race") == 0) {
      if (i + 2 >= argc) return 2;
      printf("ipc-open-race %s\n", IpcOpenRace(argv[i + 1], atol(argv[i + 2])).c_str());
      i += 2;
    } else if (strcmp(step, "fork-while") == 0) {
      if (i + 2 >= argc) return 2;
      printf("fork-while %s\n", ForkWhile(argv[i + 1], atol(argv[i + 2])).c_str());
      i += 2;
    } else if (strcmp(step, "ipc-close") == 0) {
      CUdeviceptr p = g_ipc_opened.empty() ? 0 : g_ipc_opened.back();
      if (!g_ipc_opened.empty()) g_ipc_opened.pop_back();
      CUresult rc = Get<CUresult (*)(CUdeviceptr)>("cuIpcCloseMemHandle")(p);
      printf("ipc-close %s %s\n", Name(rc), FromDevice(p) == 0x5a5a5a5a ? "ok" : "gone");
    } else if (strcmp(step, "ipc-self") == 0) {
      CUdeviceptr p = 0, q = 0;
      CUipcMemHandle h{};
      CUresult rc = Get<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2")(&p, 1 << 20);
      if (rc == CUDA_SUCCESS) rc = Get<CUresult (*)(CUipcMemHandle*, CUdeviceptr)>("cuIpcGetMemHandle")(&h, p);
      if (rc == CUDA_SUCCESS)
        rc = Get<CUresult (*)(CUdeviceptr*, CUipcMemHandle, unsigned)>("cuIpcOpenMemHandle_v2")(
            &q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      printf("ipc-self %s\n", Name(rc));
    } else if (strcmp(step, "sleep") == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(atol(arg)));
      ++i;
    } else {
      fprintf(stderr, "hostile: unknown step %s\n", step);
      return 2;
    }
    fflush(stdout);
  }
  if (g_importer_fd >= 0) ImporterDone();
  return 0;
}
