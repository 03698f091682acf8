// A driver-API program for integration tests: runs the commands given on its command
// line against whatever libcuda.so.1 / libnvidia-ml.so.1 the process loads (simulator,
// real driver, with or without the enforcer preloaded) and prints one line per command.
//
//   cuda_probe [--via linked|dlsym|getproc] CMD...
//   init [DEV]                     cuInit, retain and set DEV's primary context
//   alloc KIND SIZE                KIND: mem pitch managed async pool vmm vmmhost array
//                                  array3d mipmap graph graphnode (graph: an allocation node
//                                  by cuGraphAddMemAllocNode, graphnode: by cuGraphAddNode)
//                                  -> "alloc ok" / "alloc err NAME"
//   free                           frees the newest allocation
//   freesync                       frees the newest device pointer by cuMemFree, whatever
//                                  allocated it (a pool's too) -> "freesync ok|ERR"
//   release                        cuMemRelease of the newest VMM allocation's handle while it
//                                  stays mapped (free then only unmaps) -> "release ok|ERR"
//   poolkeep SIZE / pooltrim SIZE  the current pool's release threshold / cuMemPoolTrimTo
//   graphexec / execfree           instantiates the newest allocation's graph (kept) / destroys
//                                  the newest executable graph -> "graphexec ok|ERR", "execfree ..."
//   graphlaunch                    launches the newest executable graph and synchronizes
//   graphfree                      cuMemFreeAsync of the newest graph allocation's pointer (it
//                                  outlives its graph once launched) and a synchronize
//   graphtrim                      cuDeviceGraphMemTrim -> "graphtrim ok|ERR"
//   graphclone                     cuGraphClone of the newest allocation's graph; the clone is
//                                  the newest allocation then -> "graphclone ok|ERR"
//   graphchild                     moves the newest allocation's graph into a new graph as a
//                                  child graph node (cuGraphAddNode, ownership MOVE); the new
//                                  graph is the allocation's graph then. Also tries to destroy
//                                  and to instantiate the moved child on its own:
//                                  "graphchild ok|ERR DESTROY INSTANTIATE" (their results)
//   graphchildclone                cuGraphAddChildGraphNode (a clone) of the newest
//                                  allocation's graph into a new graph -> "graphchildclone ok|ERR"
//   graphfreenode                  adds a free node of the newest graph allocation's pointer
//                                  to its graph (before graphexec) -> "graphfreenode ok|ERR"
//   fill SIZE SEED / check SIZE SEED   write / verify a pattern in the newest allocation
//   meminfo                        "meminfo FREE TOTAL" (cuMemGetInfo) and cuDeviceTotalMem
//   nvml                           "nvml TOTAL USED FREE v2TOTAL v2USED v2FREE PROCS MYMEM"
//   unlisted                       "unlisted V2USED LISTED PROCS": NVML's used memory of the
//                                  device (version 2), the sum of what it lists under each
//                                  compute process whose memory it reports, and how many:
//                                  the node agent's figure of memory under no process is
//                                  V2USED - LISTED
//   atexit                         (before init) at this process's normal exit, after the
//                                  driver's own exit work: "atexit own=MIB free=ERR alloc=ERR"
//                                  (NVML's figure for this process, a free of the newest
//                                  allocation, a 64 MiB cuMemAlloc)
//   spawnexit SIZE                 (before init) a forked child makes a context, allocates
//                                  SIZE and exits normally: "spawnexit HELD AFTER", the device's
//                                  used MiB (NVML) above the start while the child holds it
//                                  and at once after waitpid returns
//   forkafter                      (after init) a forked child calls cuInit and retains device
//                                  0's primary context, then exits: "forkafter init=ERR
//                                  retain=ERR" (what the driver answers a child of a process
//                                  that initialised CUDA)
//   inittimed                      init on device 0, timed: "inittimed ok|ERR INIT_US CTX_US"
//                                  (cuInit; cuDeviceGet and the primary context's retain)
//   nvmlcost                       the first NVML use of this process, timed: "nvmlcost
//                                  INIT_US HANDLE_US PROCS_US" (nvmlInit_v2 with the library's
//                                  load, the handle by UUID, the running-process list)
//   pids                           "pids PID..." (NVML's running compute processes) and
//                                  "samplepids PID..." (the pids in NVML's per-process samples)
//   waitpids MS                    "pids" once NVML lists any process (or MS ms have passed)
//   shares MS                      NVML's per-process samples as an outside observer reads
//                                  them for MS ms: "share PID AVG_SMUTIL SAMPLES" per pid
//   cardwatch MS                   for MS ms or until SIGTERM, every 0.5 ms: NVML's used memory
//                                  of the device, version 2 (what every process holds, and
//                                  what the driver keeps listed under none, as a pool's
//                                  memory freed while imported; not what the driver reserves
//                                  for itself, which version 1 counts); then
//                                  "watching" once it watches, "cardwatch MAX SAMPLES FIRST"
//                                  at the end (run without the enforcer: what the card held
//                                  at most and at the first sample, as an outside observer
//                                  sees it)
//   launch N NS                    N launches of the spin kernel (NS per wave); async
//   launchex N NS / coop N NS / graph N NS    the same through cuLaunchKernelEx,
//                                  cooperative launches, a captured graph replayed N times
//   culaunch N NS / grid N NS / gridasync N NS   the same through the deprecated cuLaunch,
//                                  cuLaunchGrid, cuLaunchGridAsync (state set by
//                                  cuFuncSetBlockShape, cuParamSetSize, cuParamSetv)
//   multidev N NS                  the same through cuLaunchCooperativeKernelMultiDevice,
//                                  one device (a stream of its own)
//   multidev2 DEV                  one cuLaunchCooperativeKernelMultiDevice of the spin kernel
//                                  (0 ns) on this device and DEV -> "multidev2 ok|ERR"
//   sync                           cuCtxSynchronize
//   mixburn MS SN SNS LN LNS       for MS ms, rounds of SN launches of SNS ns, a sync, LN
//                                  launches of LNS ns, a sync: a program that teaches the
//                                  limiter a short launch cost, then queues long kernels;
//                                  "mixburn UTIL" (kernel time completed over the elapsed
//                                  time, percent)
//   sleep MS / util                "util GPU" (NVML device utilisation)
//   utilperiod MS                  kernels of random lengths and pauses for MS ms while NVML's
//                                  device utilisation is polled: "utilperiod changes=N
//                                  median_ms=M", the median time between changes of its value
//   at UNIX_MS                     waits until that wall-clock instant (ms since the epoch):
//                                  processes started apart begin their timed work together
//   xid TIMEOUT_MS                 waits for an XID event: "events armed" once registered for
//                                  every card's, then "xid N" or "xid timeout"
//   symbols                        resolves every symbol of the table via cuGetProcAddress
//   maps                           "maps enforcer loaded|absent" (is libgpuslice.so mapped?)
//   modload / libload              loads the spin kernel by cuModuleLoadData / cuLibraryLoadData
//   modglobal SIZE                 loads a module declaring SIZE bytes of .global variables
//   modunload / libunload          unloads the newest one
//   modcode SIZE / libcode SIZE    loads a module / library whose kernel gs_code's body is
//                                  SIZE bytes of PTX (the simulator's code size for it)
//   getfunc                        cuModuleGetFunction(newest module, gs_code)
//   getkernel / kernelfunc         cuLibraryGetKernel(newest library, gs_code) /
//                                  cuKernelGetFunction of that kernel
//   launchcode                     launches the newest gs_code function (else kernel)
//   graphcode                      a graph with one gs_code kernel node: instantiated,
//                                  launched, synchronised
//   loadingmode                    "loadingmode lazy|eager" (cuModuleGetLoadingMode)
//   attrs DEV                      "attrs THREADS/SM BLOCKS/SM SMS TEX1D TEX2D TEX3D"
//   stack BYTES                    cuCtxSetLimit(CU_LIMIT_STACK_SIZE) -> "stack ok|ERR"
//   array2d W H                    a W x H float CUDA array -> "array2d ok|ERR" (kept)
// Green contexts (kept, newest last):
//   greenctx                       a green context on the device with half its SMs
//                                  (cuDevSmResourceSplitByCount), what it added to this
//                                  process in NVML, and whether cuCtxFromGreenCtx names the
//                                  primary context: "greenctx ok MIB same|distinct" / "greenctx ERR"
//   greencurrent                   makes the newest one's context current -> "greencurrent ok|ERR"
//   greendestroy                   destroys the newest one, the primary context current again
//                                  -> "greendestroy ok|ERR MIB" (MIB: NVML's figure after it went)
//   greenburn MS NS                for MS ms, with no context current, rounds of 8 spin
//                                  launches of NS ns on a stream of the newest green context
//                                  (cuGreenCtxStreamCreate) and a synchronize of it:
//                                  "greenburn UTIL" (kernel time completed over elapsed, percent)
// Multicast:
//   mckeeps                        does a multicast binding keep a released handle's memory?
//                                  A 512 MiB handle bound to a multicast object of this device,
//                                  released, unbound, the object released; NVML's figure for
//                                  this process after each: "mckeeps BOUND RELEASED UNBOUND GONE"
//                                  (MiB), or "mckeeps unsupported" when the device has no
//                                  multicast (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED 0)
//   sharemodel KIND MIB            what the card does with memory shared between processes
//                                  (docs/measurements/shared-memory.md): MIB MiB allocated here
//                                  (ipc: cuMemAlloc, exported by cuIpcGetMemHandle; fd:
//                                  cuMemCreate, mapped, exported as a POSIX descriptor; pool:
//                                  cuMemAllocFromPoolAsync from a pool made exportable as a
//                                  POSIX descriptor, the pool and the pointer exported;
//                                  ipc-pidns: as ipc, the importer in a PID namespace of its
//                                  own, unshare --pid --fork --mount-proc, root only), an
//                                  importer (this program, fork and exec) opens and maps it
//                                  ("shareimport ok added=B": what the import added to its own
//                                  NVML figure; or "shareimport [CALL] ERR"; fd: first
//                                  "sharepartialmap RC", whether mapping only its first
//                                  granule works); then this process frees
//                                  it (pool: cuMemFreeAsync and a synchronize), then the
//                                  importer closes it (pool: cuMemFree). After each:
//                                  "sharemodel STAGE owner=B importer=B used=B" (NVML's
//                                  per-process used memory of both, the device's used memory;
//                                  pool: then "reserved=B pool_used=B", the owner pool's
//                                  attributes), STAGE imported|owner-freed|importer-closed;
//                                  pool: then the owner trims its pool to 0 (owner-trimmed)
//                                  and destroys it (pool-destroyed)
//   shareownerexit KIND MIB        the same sharing, but the owner (this program, started
//                                  anew: shareowner) exits normally while the importer holds
//                                  the memory; this process watches through NVML:
//                                  "sharemodel STAGE owner=B importer=B used=B", STAGE
//                                  imported|owner-exited|importer-closed
//   shareimport ipc HEX|fd FD:BYTES|pool FD:HEX RFD WFD  the importer's side (started by sharemodel)
//   shareowner KIND MIB RFD WFD OUT IN  the owner's side (started by shareownerexit)
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "src/cli/burn_ptx.h"
#include "src/common/quantity.h"
#include "src/platform/cuda_api.h"
#include "src/platform/driver_loader.h"
#include "src/platform/nvml_api.h"
#include "src/platform/proc_address.h"

namespace {

gs::platform::CudaApi c;
gs::platform::NvmlApi n;
bool nvml_ready = false;
CUdevice g_dev = 0;
CUmodule g_mod = nullptr;
std::vector<CUmodule> g_modules;     // modload
std::vector<CUlibrary> g_libraries;  // libload
CUfunction g_spin = nullptr;
CUfunction g_code_fn = nullptr;    // getfunc / kernelfunc
CUkernel g_code_kernel = nullptr;  // getkernel
volatile sig_atomic_t g_stop = 0;  // cardwatch: SIGTERM ends the watch

struct Alloc {
  std::string kind;
  CUdeviceptr ptr = 0;
  CUarray array = nullptr;
  CUmipmappedArray mip = nullptr;
  CUmemGenericAllocationHandle vmm = 0;
  CUgraph graph = nullptr;
  size_t size = 0, map_size = 0;
};
std::vector<Alloc> g_allocs;
std::vector<CUgraphExec> g_execs;       // graphexec: executable graphs, newest last
std::vector<CUdeviceptr> g_graph_ptrs;  // the pointers graph allocation nodes hand out, newest last

// PTX of one kernel, gs_code, whose body is `body` bytes long (at least 8).
std::string CodePtx(uint64_t body) {
  std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry gs_code(.param .u64 p)\n";
  const std::string line = " add.u32 %r1, %r1, 1;\n";  // 22 bytes
  std::string b = "{\n";
  while (b.size() + line.size() + 8 <= body) b += line;
  b.append(body > b.size() + 8 ? body - b.size() - 8 : 0, ' ');
  b += "\n ret;\n}";
  return ptx + b + "\n";
}

const char* Name(CUresult rc) {
  const char* s = nullptr;
  if (c.cuGetErrorName && c.cuGetErrorName(rc, &s) == CUDA_SUCCESS && s) return s;
  static char buf[32];
  snprintf(buf, sizeof(buf), "CUresult_%d", static_cast<int>(rc));
  return buf;
}

uint64_t Size(const char* s) {
  uint64_t v = 0;
  if (!gs::ParseByteQuantity(s, &v)) {
    fprintf(stderr, "bad size %s\n", s);
    exit(2);
  }
  return v;
}

void BindLinked() {
#define GS_CUDA_SYM(name, params, args) c.name = &::name;
#include "src/platform/cuda_symbols.def"
#undef GS_CUDA_SYM
}

void BindGetProc() {
  gs::platform::CudaApi base;
  if (!gs::platform::LoadCuda("/", &base).ok()) exit(3);
  c.cuInit = base.cuInit;
  c.cuGetProcAddress_v2 = base.cuGetProcAddress_v2;
  c.cuInit(0);
  // As the CUDA runtime does: base names, the toolkit's version, default flags.
  auto get = [&](const char* base_name, void** out) {
    CUdriverProcAddressQueryResult st;
    base.cuGetProcAddress_v2(base_name, out, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st);
  };
#define GET(field, name) get(name, reinterpret_cast<void**>(&c.field))
  GET(cuInit, "cuInit");
  GET(cuDeviceGet, "cuDeviceGet");
  GET(cuDeviceGetCount, "cuDeviceGetCount");
  GET(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  GET(cuCtxSetCurrent, "cuCtxSetCurrent");
  GET(cuCtxSynchronize, "cuCtxSynchronize");
  GET(cuGetErrorName, "cuGetErrorName");
  GET(cuMemAlloc_v2, "cuMemAlloc");
  GET(cuMemFree_v2, "cuMemFree");
  GET(cuMemAllocPitch_v2, "cuMemAllocPitch");
  GET(cuMemAllocManaged, "cuMemAllocManaged");
  GET(cuMemAllocAsync, "cuMemAllocAsync");
  GET(cuMemFreeAsync, "cuMemFreeAsync");
  GET(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync");
  GET(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool");
  GET(cuMemCreate, "cuMemCreate");
  GET(cuMemRelease, "cuMemRelease");
  GET(cuMemAddressReserve, "cuMemAddressReserve");
  GET(cuMemAddressFree, "cuMemAddressFree");
  GET(cuMemMap, "cuMemMap");
  GET(cuMemUnmap, "cuMemUnmap");
  GET(cuMemSetAccess, "cuMemSetAccess");
  GET(cuArrayCreate_v2, "cuArrayCreate");
  GET(cuArray3DCreate_v2, "cuArray3DCreate");
  GET(cuArrayDestroy, "cuArrayDestroy");
  GET(cuMipmappedArrayCreate, "cuMipmappedArrayCreate");
  GET(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy");
  GET(cuGraphCreate, "cuGraphCreate");
  GET(cuGraphDestroy, "cuGraphDestroy");
  GET(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode");
  GET(cuMemGetInfo_v2, "cuMemGetInfo");
  GET(cuDeviceTotalMem_v2, "cuDeviceTotalMem");
  GET(cuMemcpyHtoD_v2, "cuMemcpyHtoD");
  GET(cuMemcpyDtoH_v2, "cuMemcpyDtoH");
  GET(cuModuleLoadData, "cuModuleLoadData");
  GET(cuModuleUnload, "cuModuleUnload");
  GET(cuLibraryLoadData, "cuLibraryLoadData");
  GET(cuLibraryUnload, "cuLibraryUnload");
  GET(cuModuleGetFunction, "cuModuleGetFunction");
  GET(cuCtxSetLimit, "cuCtxSetLimit");
  GET(cuLibraryGetKernel, "cuLibraryGetKernel");
  GET(cuKernelGetFunction, "cuKernelGetFunction");
  GET(cuModuleGetLoadingMode, "cuModuleGetLoadingMode");
  GET(cuGraphAddKernelNode_v2, "cuGraphAddKernelNode");
  GET(cuLaunchKernel, "cuLaunchKernel");
  GET(cuLaunchKernelEx, "cuLaunchKernelEx");
  GET(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel");
  GET(cuLaunchCooperativeKernelMultiDevice, "cuLaunchCooperativeKernelMultiDevice");
  GET(cuLaunch, "cuLaunch");
  GET(cuLaunchGrid, "cuLaunchGrid");
  GET(cuLaunchGridAsync, "cuLaunchGridAsync");
  GET(cuFuncSetBlockShape, "cuFuncSetBlockShape");
  GET(cuFuncSetSharedSize, "cuFuncSetSharedSize");
  GET(cuParamSetSize, "cuParamSetSize");
  GET(cuParamSetv, "cuParamSetv");
  GET(cuCtxGetCurrent, "cuCtxGetCurrent");
  GET(cuStreamCreate, "cuStreamCreate");
  GET(cuStreamBeginCapture_v2, "cuStreamBeginCapture");
  GET(cuStreamEndCapture, "cuStreamEndCapture");
  GET(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
  GET(cuGraphExecDestroy, "cuGraphExecDestroy");
  GET(cuDeviceGetMemPool, "cuDeviceGetMemPool");
  GET(cuMemPoolSetAttribute, "cuMemPoolSetAttribute");
  GET(cuMemPoolTrimTo, "cuMemPoolTrimTo");
  GET(cuGraphLaunch, "cuGraphLaunch");
  GET(cuStreamSynchronize, "cuStreamSynchronize");
  GET(cuDeviceGetAttribute, "cuDeviceGetAttribute");
  GET(cuDeviceGetUuid_v2, "cuDeviceGetUuid");
#undef GET
}

Alloc* Newest() {
  return g_allocs.empty() ? nullptr : &g_allocs.back();
}

CUresult DoAlloc(const std::string& kind, uint64_t size) {
  Alloc a;
  a.kind = kind;
  a.size = size;
  CUresult rc = CUDA_ERROR_INVALID_VALUE;
  if (kind == "mem")
    rc = c.cuMemAlloc_v2(&a.ptr, size);
  else if (kind == "pitch") {
    size_t pitch = 0;
    rc = c.cuMemAllocPitch_v2(&a.ptr, &pitch, size / 1024, 1024, 4);
  } else if (kind == "managed")
    rc = c.cuMemAllocManaged(&a.ptr, size, CU_MEM_ATTACH_GLOBAL);
  else if (kind == "async") {
    rc = c.cuMemAllocAsync(&a.ptr, size, nullptr);
  } else if (kind == "pool") {
    CUmemoryPool pool;
    rc = c.cuDeviceGetDefaultMemPool(&pool, g_dev);
    if (rc == CUDA_SUCCESS) rc = c.cuMemAllocFromPoolAsync(&a.ptr, size, pool, nullptr);
  } else if (kind == "vmm" || kind == "vmmhost") {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = kind == "vmm" ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
    prop.location.id = kind == "vmm" ? g_dev : 0;
    size_t gran = 2u << 20;
    a.map_size = (size + gran - 1) / gran * gran;
    rc = c.cuMemCreate(&a.vmm, a.map_size, &prop, 0);
    if (rc == CUDA_SUCCESS) rc = c.cuMemAddressReserve(&a.ptr, a.map_size, 0, 0, 0);
    if (rc == CUDA_SUCCESS) rc = c.cuMemMap(a.ptr, a.map_size, 0, a.vmm, 0);
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = g_dev;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (rc == CUDA_SUCCESS) rc = c.cuMemSetAccess(a.ptr, a.map_size, &access, 1);
  } else if (kind == "array") {
    // Within the card's 2D texture extent (131072 x 65536): a real driver refuses more.
    CUDA_ARRAY_DESCRIPTOR d{};
    d.Width = size / 4 / 4096;
    d.Height = 4096;
    d.Format = CU_AD_FORMAT_FLOAT;
    d.NumChannels = 1;
    rc = c.cuArrayCreate_v2(&a.array, &d);
  } else if (kind == "array3d") {
    CUDA_ARRAY3D_DESCRIPTOR d{};
    d.Width = size / 4 / 256 / 256;  // within the 3D extent, 16384 a side
    d.Height = 256;
    d.Depth = 256;
    d.Format = CU_AD_FORMAT_UNSIGNED_INT8;
    d.NumChannels = 4;
    rc = c.cuArray3DCreate_v2(&a.array, &d);
  } else if (kind == "mipmap") {
    CUDA_ARRAY3D_DESCRIPTOR d{};
    d.Width = size / 4 / 4096;
    d.Height = 4096;
    d.Format = CU_AD_FORMAT_FLOAT;
    d.NumChannels = 1;
    rc = c.cuMipmappedArrayCreate(&a.mip, &d, 1);
  } else if (kind == "graph") {
    rc = c.cuGraphCreate(&a.graph, 0);
    CUDA_MEM_ALLOC_NODE_PARAMS p{};
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = g_dev;
    p.bytesize = size;
    CUgraphNode node;
    if (rc == CUDA_SUCCESS) rc = c.cuGraphAddMemAllocNode(&node, a.graph, nullptr, 0, &p);
    if (rc == CUDA_SUCCESS) g_graph_ptrs.push_back(p.dptr);
    if (rc != CUDA_SUCCESS && a.graph) c.cuGraphDestroy(a.graph);
  } else if (kind == "graphnode") {  // the same node through cuGraphAddNode
    rc = c.cuGraphCreate(&a.graph, 0);
    CUgraphNodeParams p{};
    p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    p.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.alloc.poolProps.location.id = g_dev;
    p.alloc.bytesize = size;
    CUgraphNode node;
    if (rc == CUDA_SUCCESS) rc = c.cuGraphAddNode(&node, a.graph, nullptr, 0, &p);
    if (rc == CUDA_SUCCESS) g_graph_ptrs.push_back(p.alloc.dptr);
    if (rc != CUDA_SUCCESS && a.graph) c.cuGraphDestroy(a.graph);
  }
  if (rc == CUDA_SUCCESS) g_allocs.push_back(a);
  return rc;
}

CUresult DoFree() {
  Alloc* a = Newest();
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = CUDA_SUCCESS;
  if (a->kind == "async" || a->kind == "pool")
    rc = c.cuMemFreeAsync(a->ptr, nullptr);
  else if (a->kind == "vmm" || a->kind == "vmmhost") {
    rc = c.cuMemUnmap(a->ptr, a->map_size);
    c.cuMemAddressFree(a->ptr, a->map_size);
    if (a->vmm != 0) rc = c.cuMemRelease(a->vmm);  // 0: released already, while mapped
  } else if (a->kind == "array" || a->kind == "array3d")
    rc = c.cuArrayDestroy(a->array);
  else if (a->kind == "mipmap")
    rc = c.cuMipmappedArrayDestroy(a->mip);
  else if (a->graph != nullptr)
    rc = c.cuGraphDestroy(a->graph);
  else
    rc = c.cuMemFree_v2(a->ptr);
  g_allocs.pop_back();
  return rc;
}

uint32_t Pattern(uint64_t i, uint32_t seed) {
  return static_cast<uint32_t>((i * 2654435761u) ^ seed);
}

CUresult EnsureModule() {
  if (g_spin) return CUDA_SUCCESS;
  CUresult rc = c.cuModuleLoadData(&g_mod, kBurnPtx);
  if (rc == CUDA_SUCCESS) rc = c.cuModuleGetFunction(&g_spin, g_mod, "gpuslice_spin");
  return rc;
}

CUresult Launch(const std::string& how, int count, unsigned long long ns) {
  CUresult rc = EnsureModule();
  if (rc != CUDA_SUCCESS) return rc;
  int sms = 1;
  c.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g_dev);
  void* params[] = {&ns};
  if (how == "graph") {
    CUstream s;
    CUgraph g;
    CUgraphExec e;
    rc = c.cuStreamCreate(&s, 0);
    if (rc == CUDA_SUCCESS) rc = c.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    if (rc == CUDA_SUCCESS) rc = c.cuLaunchKernel(g_spin, sms, 1, 1, 128, 1, 1, 0, s, params, nullptr);
    if (rc == CUDA_SUCCESS) rc = c.cuStreamEndCapture(s, &g);
    if (rc == CUDA_SUCCESS) rc = c.cuGraphInstantiateWithFlags(&e, g, 0);
    for (int i = 0; i < count && rc == CUDA_SUCCESS; ++i) rc = c.cuGraphLaunch(e, s);
    if (rc == CUDA_SUCCESS) rc = c.cuStreamSynchronize(s);
    return rc;
  }
  // The deprecated entry points launch with the state set on the function.
  const bool legacy = how == "culaunch" || how == "grid" || how == "gridasync";
  if (legacy) {
    rc = c.cuFuncSetBlockShape(g_spin, 128, 1, 1);
    if (rc == CUDA_SUCCESS) rc = c.cuFuncSetSharedSize(g_spin, 0);
    if (rc == CUDA_SUCCESS) rc = c.cuParamSetSize(g_spin, sizeof(ns));
    if (rc == CUDA_SUCCESS) rc = c.cuParamSetv(g_spin, 0, &ns, sizeof(ns));
  }
  CUstream own = nullptr;  // gridasync and multidev launch on a stream of their own
  if (rc == CUDA_SUCCESS && (how == "gridasync" || how == "multidev")) rc = c.cuStreamCreate(&own, 0);
  for (int i = 0; i < count && rc == CUDA_SUCCESS; ++i) {
    if (how == "launch") {
      rc = c.cuLaunchKernel(g_spin, sms, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
    } else if (how == "launchex") {
      CUlaunchConfig cfg{};
      cfg.gridDimX = sms;
      cfg.gridDimY = cfg.gridDimZ = 1;
      cfg.blockDimX = 128;
      cfg.blockDimY = cfg.blockDimZ = 1;
      rc = c.cuLaunchKernelEx(&cfg, g_spin, params, nullptr);
    } else if (how == "culaunch") {
      rc = c.cuLaunch(g_spin);  // one block: one wave, as sms blocks are
    } else if (how == "grid") {
      rc = c.cuLaunchGrid(g_spin, sms, 1);
    } else if (how == "gridasync") {
      rc = c.cuLaunchGridAsync(g_spin, sms, 1, own);
    } else if (how == "multidev") {
      CUDA_LAUNCH_PARAMS p{};
      p.function = g_spin;
      p.gridDimX = sms;
      p.gridDimY = p.gridDimZ = 1;
      p.blockDimX = 128;
      p.blockDimY = p.blockDimZ = 1;
      p.hStream = own;
      p.kernelParams = params;
      rc = c.cuLaunchCooperativeKernelMultiDevice(&p, 1, 0);
    } else {
      rc = c.cuLaunchCooperativeKernel(g_spin, sms, 1, 1, 128, 1, 1, 0, nullptr, params);
    }
  }
  return rc;
}

// One cooperative launch of the spin kernel on this device and on `other`, each on a
// stream of its own, the kernel loaded into each device's context.
CUresult LaunchOnTwoDevices(CUdevice other) {
  CUresult rc = EnsureModule();
  CUcontext mine = nullptr, theirs = nullptr;
  CUdevice dev = 0;
  CUmodule mod = nullptr;
  CUfunction spin = nullptr;
  CUstream s[2] = {};
  if (rc == CUDA_SUCCESS) rc = c.cuCtxGetCurrent(&mine);
  if (rc == CUDA_SUCCESS) rc = c.cuStreamCreate(&s[0], 0);
  if (rc == CUDA_SUCCESS) rc = c.cuDeviceGet(&dev, other);
  if (rc == CUDA_SUCCESS) rc = c.cuDevicePrimaryCtxRetain(&theirs, dev);
  if (rc == CUDA_SUCCESS) rc = c.cuCtxSetCurrent(theirs);
  if (rc == CUDA_SUCCESS) rc = c.cuModuleLoadData(&mod, kBurnPtx);
  if (rc == CUDA_SUCCESS) rc = c.cuModuleGetFunction(&spin, mod, "gpuslice_spin");
  if (rc == CUDA_SUCCESS) rc = c.cuStreamCreate(&s[1], 0);
  if (mine) c.cuCtxSetCurrent(mine);
  if (rc != CUDA_SUCCESS) return rc;
  unsigned long long ns = 0;
  void* params[] = {&ns};
  CUDA_LAUNCH_PARAMS p[2] = {};
  for (int k = 0; k < 2; ++k) {
    p[k].function = k == 0 ? g_spin : spin;
    p[k].gridDimX = p[k].gridDimY = p[k].gridDimZ = 1;
    p[k].blockDimX = 128;
    p[k].blockDimY = p[k].blockDimZ = 1;
    p[k].hStream = s[k];
    p[k].kernelParams = params;
  }
  return c.cuLaunchCooperativeKernelMultiDevice(p, 2, 0);
}

nvmlDevice_t NvmlDevice() {
  if (!nvml_ready) {
    if (!gs::platform::LoadNvml("/", &n).ok() || n.nvmlInit_v2() != NVML_SUCCESS) return nullptr;
    nvml_ready = true;
  }
  // The NVML device with the UUID of our CUDA device.
  CUuuid u;
  nvmlDevice_t d = nullptr;
  if (c.cuDeviceGetUuid_v2 && c.cuDeviceGetUuid_v2(&u, g_dev) == CUDA_SUCCESS) {
    char uuid[96];
    const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
    snprintf(uuid, sizeof(uuid), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    if (n.nvmlDeviceGetHandleByUUID(uuid, &d) == NVML_SUCCESS) return d;
  }
  n.nvmlDeviceGetHandleByIndex_v2(0, &d);
  return d;
}

// What NVML says this process holds on the device, in MiB; -1 when NVML cannot tell.
long long OwnMib() {
  nvmlDevice_t d = NvmlDevice();
  if (d == nullptr) return -1;
  nvmlProcessInfo_t procs[64];
  unsigned count = 64;
  if (n.nvmlDeviceGetComputeRunningProcesses_v3(d, &count, procs) != NVML_SUCCESS) return -1;
  for (unsigned k = 0; k < count; ++k)
    if (procs[k].pid == static_cast<unsigned>(getpid())) return static_cast<long long>(procs[k].usedGpuMemory >> 20);
  return 0;
}

void ReportAtExit() {
  CUresult freed = DoFree();
  CUdeviceptr p = 0;
  CUresult alloc = c.cuMemAlloc_v2(&p, 64ull << 20);
  printf("atexit own=%lld free=%s alloc=%s\n", OwnMib(), Name(freed), Name(alloc));
  fflush(stdout);
}

// The device's used memory in MiB (NVML), -1 when NVML cannot tell.
long long DeviceUsedMib() {
  nvmlDevice_t d = NvmlDevice();
  nvmlMemory_t m{};
  if (d == nullptr || n.nvmlDeviceGetMemoryInfo(d, &m) != NVML_SUCCESS) return -1;
  return static_cast<long long>(m.used >> 20);
}

// forkafter: what a child forked after this process's cuInit gets from the driver.
void ForkAfterInit() {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    CUcontext ctx = nullptr;
    CUresult init = c.cuInit(0);
    CUresult retain = c.cuDevicePrimaryCtxRetain(&ctx, 0);
    printf("forkafter init=%s retain=%s\n", Name(init), Name(retain));
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
    printf("forkafter child-died-%d\n", WIFSIGNALED(status) ? WTERMSIG(status) : -1);
}

// spawnexit: "spawnexit HELD AFTER" (MiB above the start), or "spawnexit ERR".
void SpawnAndExit(uint64_t size) {
  const long long base = DeviceUsedMib();
  int to_parent[2], to_child[2];
  if (base < 0 || pipe(to_parent) != 0 || pipe(to_child) != 0) {
    printf("spawnexit no-nvml-or-pipe\n");
    return;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    char ok = c.cuInit(0) == CUDA_SUCCESS && c.cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
                      c.cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && c.cuCtxSetCurrent(ctx) == CUDA_SUCCESS &&
                      c.cuMemAlloc_v2(&p, size) == CUDA_SUCCESS
                  ? '1'
                  : '0';
    (void)!write(to_parent[1], &ok, 1);
    char go;
    (void)!read(to_child[0], &go, 1);
    exit(0);  // a normal exit: the driver's exit work runs
  }
  char ok = '0';
  (void)!read(to_parent[0], &ok, 1);
  const long long held = DeviceUsedMib();
  (void)!write(to_child[1], "x", 1);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const long long after = DeviceUsedMib();
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
  if (ok != '1')
    printf("spawnexit child-failed\n");
  else
    printf("spawnexit %lld %lld\n", held - base, after - base);
}

std::vector<CUgreenCtx> g_greens;

// A green context with half the device's SMs (at least one group).
CUresult MakeGreen(CUgreenCtx* green) {
  CUdevResource all{}, half{}, rest{};
  unsigned groups = 1;
  CUresult rc = c.cuDeviceGetDevResource(g_dev, &all, CU_DEV_RESOURCE_TYPE_SM);
  if (rc == CUDA_SUCCESS) rc = c.cuDevSmResourceSplitByCount(&half, &groups, &all, &rest, 0, all.sm.smCount / 2);
  CUdevResourceDesc desc = nullptr;
  if (rc == CUDA_SUCCESS) rc = c.cuDevResourceGenerateDesc(&desc, &half, 1);
  if (rc == CUDA_SUCCESS) rc = c.cuGreenCtxCreate(green, desc, g_dev, CU_GREEN_CTX_DEFAULT_STREAM);
  return rc;
}

// Kernel time completed over elapsed time, in percent, of rounds of spin launches on a
// stream of the newest green context, launched with no context current.
CUresult GreenBurn(int ms, unsigned long long ns, double* util) {
  if (g_greens.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult rc = EnsureModule();
  CUstream s = nullptr;
  if (rc == CUDA_SUCCESS) rc = c.cuGreenCtxStreamCreate(&s, g_greens.back(), CU_STREAM_NON_BLOCKING, 0);
  CUcontext was = nullptr;
  c.cuCtxGetCurrent(&was);
  if (rc == CUDA_SUCCESS) rc = c.cuCtxSetCurrent(nullptr);
  int sms = 1;
  c.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g_dev);
  void* params[] = {&ns};
  double work_ns = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::milliseconds(ms);
  while (rc == CUDA_SUCCESS && std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 8 && rc == CUDA_SUCCESS; ++i)
      rc = c.cuLaunchKernel(g_spin, sms, 1, 1, 128, 1, 1, 0, s, params, nullptr);
    if (rc == CUDA_SUCCESS) rc = c.cuStreamSynchronize(s);
    if (rc == CUDA_SUCCESS) work_ns += 8 * double(ns);
  }
  double elapsed = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  *util = 100 * work_ns / elapsed;
  c.cuCtxSetCurrent(was);
  if (s) c.cuStreamDestroy_v2(s);
  return rc;
}

// mckeeps (see the header). Prints its own line.
void MulticastKeeps() {
  int supported = 0;
  c.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, g_dev);
  if (!supported) {
    printf("mckeeps unsupported\n");
    return;
  }
  const size_t size = 512ull << 20;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = g_dev;
  CUmulticastObjectProp mprop{};
  mprop.numDevices = 1;
  mprop.size = size;
  CUmemGenericAllocationHandle mem = 0, mc = 0;
  CUresult rc = c.cuMemCreate(&mem, size, &prop, 0);
  if (rc == CUDA_SUCCESS) rc = c.cuMulticastCreate(&mc, &mprop);
  if (rc == CUDA_SUCCESS) rc = c.cuMulticastAddDevice(mc, g_dev);
  if (rc == CUDA_SUCCESS) rc = c.cuMulticastBindMem(mc, 0, mem, 0, size, 0);
  if (rc != CUDA_SUCCESS) {
    printf("mckeeps %s\n", Name(rc));
    return;
  }
  long long bound = OwnMib();
  c.cuMemRelease(mem);
  long long released = OwnMib();
  c.cuMulticastUnbind(mc, g_dev, 0, size);
  long long unbound = OwnMib();
  c.cuMemRelease(mc);
  printf("mckeeps %lld %lld %lld %lld\n", bound, released, unbound, OwnMib());
}

// NVML's used memory of process `pid` on our device (0 when not listed), and the device's.
uint64_t NvmlBytesOf(uint32_t pid) {
  nvmlDevice_t d = NvmlDevice();
  nvmlProcessInfo_t procs[128];
  unsigned count = 128;
  if (d == nullptr || n.nvmlDeviceGetComputeRunningProcesses_v3(d, &count, procs) != NVML_SUCCESS) return 0;
  for (unsigned k = 0; k < count && k < 128; ++k)
    if (procs[k].pid == pid && procs[k].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE_ULL) return procs[k].usedGpuMemory;
  return 0;
}
uint64_t NvmlDeviceUsed() {
  nvmlDevice_t d = NvmlDevice();
  nvmlMemory_t m{};
  return d != nullptr && n.nvmlDeviceGetMemoryInfo(d, &m) == NVML_SUCCESS ? m.used : 0;
}

std::string Hex(const void* data, size_t size) {
  std::string out;
  for (size_t k = 0; k < size; ++k) {
    char hex[3];
    snprintf(hex, sizeof(hex), "%02x", static_cast<const unsigned char*>(data)[k]);
    out += hex;
  }
  return out;
}

void FromHex(const std::string& hex, void* data, size_t size) {
  for (size_t k = 0; k < size && 2 * k + 1 < hex.size(); ++k)
    static_cast<unsigned char*>(data)[k] = static_cast<unsigned char>(std::stoi(hex.substr(2 * k, 2), nullptr, 16));
}

// An allocation exported for sharemodel and shareowner, and how an importer opens it
// (`token`; a descriptor in it is inherited through fork and exec).
struct Exported {
  CUresult rc = CUDA_SUCCESS;
  CUmemoryPool pool = nullptr;
  CUdeviceptr p = 0;
  CUmemGenericAllocationHandle h = 0;
  size_t bytes = 0;
  int fd = -1;
  std::string token;
};

// The properties of device memory on g_dev that cuMemCreate makes exportable as a POSIX
// descriptor.
CUmemAllocationProp DescriptorProp() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = g_dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// What a VMM handle's POSIX descriptor is, as the kernel sees it: the file it opens
// (readlink of /proc/self/fd) and its device and inode, for the handle exported again and
// for a second handle. An H100 gives one inode for all (opens of /dev/nvidiactl): an
// importer cannot tell two exports apart by their descriptors.
// "shareidentity file=F ino=D:I again=D:I other=D:I".
void PrintDescriptorIdentity(const Exported& e) {
  auto identity = [](int fd) {
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return std::string("?");
    return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  };
  char file[256] = {};
  if (readlink(("/proc/self/fd/" + std::to_string(e.fd)).c_str(), file, sizeof(file) - 1) < 0) strcpy(file, "?");
  int again = -1, other = -1;
  CUmemGenericAllocationHandle h2 = 0;
  c.cuMemExportToShareableHandle(&again, e.h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  const CUmemAllocationProp prop = DescriptorProp();
  size_t gran = 0;
  if (c.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS &&
      c.cuMemCreate(&h2, gran, &prop, 0) == CUDA_SUCCESS)
    c.cuMemExportToShareableHandle(&other, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  for (char* ch = file; *ch != 0; ++ch)
    if (*ch == ' ') *ch = '_';
  printf("shareidentity file=%s ino=%s again=%s other=%s\n", file, identity(e.fd).c_str(), identity(again).c_str(),
         identity(other).c_str());
  if (again >= 0) close(again);
  if (other >= 0) close(other);
  if (h2 != 0) c.cuMemRelease(h2);
}

Exported Export(const std::string& kind, size_t bytes) {
  Exported e;
  e.bytes = bytes;
  if (kind == "ipc") {
    CUipcMemHandle ipc{};
    e.rc = c.cuMemAlloc_v2(&e.p, bytes);
    if (e.rc == CUDA_SUCCESS) e.rc = c.cuIpcGetMemHandle(&ipc, e.p);
    e.token = Hex(ipc.reserved, sizeof(ipc.reserved));
  } else if (kind == "pool") {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = g_dev;
    CUmemPoolPtrExportData data{};
    e.rc = c.cuMemPoolCreate(&e.pool, &props);
    if (e.rc == CUDA_SUCCESS) e.rc = c.cuMemAllocFromPoolAsync(&e.p, bytes, e.pool, nullptr);
    if (e.rc == CUDA_SUCCESS) e.rc = c.cuCtxSynchronize();
    if (e.rc == CUDA_SUCCESS)
      e.rc = c.cuMemPoolExportToShareableHandle(&e.fd, e.pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (e.rc == CUDA_SUCCESS) e.rc = c.cuMemPoolExportPointer(&data, e.p);
    e.token = std::to_string(e.fd) + ":" + Hex(data.reserved, sizeof(data.reserved));
  } else {
    const CUmemAllocationProp prop = DescriptorProp();
    size_t gran = 0;
    e.rc = c.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (e.rc == CUDA_SUCCESS) e.bytes = (bytes + gran - 1) / gran * gran;
    if (e.rc == CUDA_SUCCESS) e.rc = c.cuMemCreate(&e.h, e.bytes, &prop, 0);
    if (e.rc == CUDA_SUCCESS) e.rc = c.cuMemAddressReserve(&e.p, e.bytes, 0, 0, 0);
    if (e.rc == CUDA_SUCCESS) e.rc = c.cuMemMap(e.p, e.bytes, 0, e.h, 0);
    if (e.rc == CUDA_SUCCESS)
      e.rc = c.cuMemExportToShareableHandle(&e.fd, e.h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    e.token = std::to_string(e.fd) + ":" + std::to_string(e.bytes);
  }
  // Whether the driver made the descriptor close-on-exec (the importer, started by exec,
  // gets it only once that is cleared).
  if (e.rc == CUDA_SUCCESS && e.fd >= 0) printf("shareexport cloexec=%d\n", (fcntl(e.fd, F_GETFD) & FD_CLOEXEC) != 0);
  if (e.rc == CUDA_SUCCESS && kind == "fd") PrintDescriptorIdentity(e);
  return e;
}

// Starts the importer (this program, shareimport) with the pipe ends rfd and wfd, in a PID
// namespace of its own when in_pidns. Its pid, -1 when it could not start.
pid_t SpawnImporter(const std::string& kind, const std::string& token, int rfd, int wfd, bool in_pidns) {
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return -1;
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    fcntl(rfd, F_SETFD, 0);
    fcntl(wfd, F_SETFD, 0);
    if (kind == "fd" || kind == "pool") fcntl(atoi(token.c_str()), F_SETFD, 0);  // the exported descriptor
    std::string r = std::to_string(rfd), w = std::to_string(wfd);
    if (in_pidns)
      execlp("unshare", "unshare", "--pid", "--fork", "--mount-proc", self, "init", "shareimport", kind.c_str(),
             token.c_str(), r.c_str(), w.c_str(), static_cast<char*>(nullptr));
    else
      execl(self, "cuda_probe", "init", "shareimport", kind.c_str(), token.c_str(), r.c_str(), w.c_str(),
            static_cast<char*>(nullptr));
    _exit(127);
  }
  return child;
}

// "sharemodel STAGE owner=B importer=B used=B": NVML's figures once they settled.
void ReportShare(const char* stage, pid_t owner, pid_t importer, bool end_line = true) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // NVML's figures settle
  printf("sharemodel %s owner=%llu importer=%llu used=%llu%s", stage,
         static_cast<unsigned long long>(NvmlBytesOf(static_cast<uint32_t>(owner))),
         static_cast<unsigned long long>(NvmlBytesOf(static_cast<uint32_t>(importer))),
         static_cast<unsigned long long>(NvmlDeviceUsed()), end_line ? "\n" : "");
}

// sharemodel: see the header. Returns false when a step could not run.
bool ShareModel(std::string kind, size_t bytes) {
  const bool in_pidns = kind == "ipc-pidns";
  if (in_pidns) kind = "ipc";
  Exported e = Export(kind, bytes);
  if (e.rc != CUDA_SUCCESS) {
    printf("sharemodel export %s\n", Name(e.rc));
    return false;
  }
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) return false;
  pid_t child = SpawnImporter(kind, e.token, to_child[0], from_child[1], in_pidns);
  if (child < 0) return false;
  close(to_child[0]);
  close(from_child[1]);
  if (e.fd >= 0) close(e.fd);
  char got = 0;
  bool imported = read(from_child[0], &got, 1) == 1 && got == 'i';
  auto report = [&](const char* stage) {
    ReportShare(stage, getpid(), child, false);
    cuuint64_t reserved = 0, used = 0;
    if (e.pool != nullptr &&
        c.cuMemPoolGetAttribute(e.pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) == CUDA_SUCCESS &&
        c.cuMemPoolGetAttribute(e.pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) == CUDA_SUCCESS)
      printf(" reserved=%llu pool_used=%llu", static_cast<unsigned long long>(reserved),
             static_cast<unsigned long long>(used));
    printf("\n");
  };
  if (!imported) printf("sharemodel import failed\n");
  if (imported) report("imported");
  CUresult rc;
  if (kind == "ipc") {
    rc = c.cuMemFree_v2(e.p);
  } else if (kind == "pool") {
    // The synchronize lets the pool give back what it holds free (release threshold 0).
    rc = c.cuMemFreeAsync(e.p, nullptr);
    if (rc == CUDA_SUCCESS) rc = c.cuCtxSynchronize();
  } else {
    rc = c.cuMemUnmap(e.p, e.bytes);
    if (rc == CUDA_SUCCESS) rc = c.cuMemRelease(e.h);
    c.cuMemAddressFree(e.p, e.bytes);
  }
  if (imported) report(rc == CUDA_SUCCESS ? "owner-freed" : "owner-free-failed");
  close(to_child[1]);  // the importer closes what it imported, says so, and waits for EOF
  if (imported && read(from_child[0], &got, 1) == 1 && got == 'c') report("importer-closed");
  close(from_child[0]);
  int status = 0;
  waitpid(child, &status, 0);
  // What a pool the owner freed an imported allocation of keeps on the card, and what lets
  // it go: the importer is gone by now.
  if (imported && e.pool != nullptr) {
    if (c.cuMemPoolTrimTo(e.pool, 0) == CUDA_SUCCESS && c.cuCtxSynchronize() == CUDA_SUCCESS) report("owner-trimmed");
    CUmemoryPool gone = e.pool;
    e.pool = nullptr;
    if (c.cuMemPoolDestroy(gone) == CUDA_SUCCESS) report("pool-destroyed");
  }
  return imported;
}

// shareowner: the owner's side of shareownerexit. Exports, starts the importer on the
// observer's pipe ends (rfd, wfd), tells the observer the importer's pid on `out`, and
// returns (the program then exits normally) once the observer writes to, or closes, `in`.
bool ShareOwner(const std::string& kind, size_t bytes, int rfd, int wfd, int out, int in) {
  Exported e = Export(kind, bytes);
  pid_t importer = e.rc == CUDA_SUCCESS ? SpawnImporter(kind, e.token, rfd, wfd, false) : -1;
  close(rfd);
  close(wfd);
  if (e.fd >= 0) close(e.fd);
  if (importer < 0) printf("shareowner export %s\n", Name(e.rc));
  dprintf(out, "%d\n", static_cast<int>(importer));
  close(out);
  char go;
  (void)!read(in, &go, 1);
  return importer > 0;
}

// shareownerexit: see the header.
bool ShareOwnerExit(const std::string& kind, const std::string& mib) {
  int to_importer[2], from_importer[2], from_owner[2], to_owner[2];
  for (int* p : {to_importer, from_importer, from_owner, to_owner})
    if (pipe2(p, O_CLOEXEC) != 0) return false;
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return false;
  fflush(stdout);
  pid_t owner = fork();
  if (owner == 0) {
    for (int fd : {to_importer[0], from_importer[1], from_owner[1], to_owner[0]}) fcntl(fd, F_SETFD, 0);
    std::string a = std::to_string(to_importer[0]), b = std::to_string(from_importer[1]);
    std::string o = std::to_string(from_owner[1]), i = std::to_string(to_owner[0]);
    execl(self, "cuda_probe", "init", "shareowner", kind.c_str(), mib.c_str(), a.c_str(), b.c_str(), o.c_str(),
          i.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int fd : {to_importer[0], from_importer[1], from_owner[1], to_owner[0]}) close(fd);
  char line[32] = {};
  ssize_t got = read(from_owner[0], line, sizeof(line) - 1);
  close(from_owner[0]);
  const pid_t importer = got > 0 ? static_cast<pid_t>(atoi(line)) : -1;
  char b = 0;
  const bool imported = importer > 0 && read(from_importer[0], &b, 1) == 1 && b == 'i';
  if (!imported) printf("sharemodel import failed\n");
  if (imported) ReportShare("imported", owner, importer);
  close(to_owner[1]);  // the owner exits normally
  int status = 0;
  waitpid(owner, &status, 0);
  if (imported) ReportShare("owner-exited", owner, importer);
  close(to_importer[1]);  // the importer closes what it imported and says so
  if (imported && read(from_importer[0], &b, 1) == 1 && b == 'c') ReportShare("importer-closed", owner, importer);
  close(from_importer[0]);
  return imported;
}

// shareimport: the importer's side of sharemodel.
bool ShareImport(const std::string& kind, const std::string& token, int rfd, int wfd) {
  CUdeviceptr p = 0;
  CUmemGenericAllocationHandle h = 0;
  size_t bytes = 0;
  CUresult rc;
  const char* failed_at = "";  // the call that failed, where there are several
  const long long before = OwnMib();
  if (kind == "ipc") {
    CUipcMemHandle ipc{};
    FromHex(token, ipc.reserved, sizeof(ipc.reserved));
    rc = c.cuIpcOpenMemHandle_v2(&p, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  } else if (kind == "pool") {
    int fd = atoi(token.c_str());
    CUmemPoolPtrExportData data{};
    FromHex(token.substr(std::min(token.find(':') + 1, token.size())), data.reserved, sizeof(data.reserved));
    CUmemoryPool pool = nullptr;
    rc = c.cuMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    close(fd);
    if (rc == CUDA_SUCCESS) rc = c.cuMemPoolImportPointer(&p, pool, &data);
  } else {
    // FD:BYTES: the descriptor does not carry the allocation's size, the exporter says it.
    int fd = atoi(token.c_str());
    bytes = strtoull(token.substr(std::min(token.find(':') + 1, token.size())).c_str(), nullptr, 10);
    rc = c.cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    failed_at = "cuMemImportFromShareableHandle";
    CUmemAllocationProp prop{};
    if (rc == CUDA_SUCCESS) failed_at = "cuMemGetAllocationPropertiesFromHandle";
    if (rc == CUDA_SUCCESS) rc = c.cuMemGetAllocationPropertiesFromHandle(&prop, h);
    if (rc == CUDA_SUCCESS) failed_at = "cuMemAddressReserve";
    if (rc == CUDA_SUCCESS) rc = c.cuMemAddressReserve(&p, bytes, 0, 0, 0);
    // Whether the driver maps a part of an imported allocation (its first granule) is
    // recorded, then the whole is mapped.
    size_t gran = 0;
    if (rc == CUDA_SUCCESS &&
        c.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS &&
        gran < bytes) {
      CUresult part = c.cuMemMap(p, gran, 0, h, 0);
      printf("sharepartialmap %s\n", Name(part));
      if (part == CUDA_SUCCESS) c.cuMemUnmap(p, gran);
    }
    if (rc == CUDA_SUCCESS) failed_at = "cuMemMap";
    if (rc == CUDA_SUCCESS) rc = c.cuMemMap(p, bytes, 0, h, 0);
  }
  if (rc == CUDA_SUCCESS)
    printf("shareimport ok added=%lld\n", (OwnMib() - before) << 20);
  else
    printf("shareimport %s%s%s\n", failed_at, *failed_at ? " " : "", Name(rc));
  char b = 'i';
  if (rc != CUDA_SUCCESS || write(wfd, &b, 1) != 1) return false;
  while (read(rfd, &b, 1) > 0) {
  }
  if (kind == "ipc") {
    c.cuIpcCloseMemHandle(p);
  } else if (kind == "pool") {
    c.cuMemFree_v2(p);
  } else {
    c.cuMemUnmap(p, bytes);
    c.cuMemAddressFree(p, bytes);
    c.cuMemRelease(h);
  }
  b = 'c';
  return write(wfd, &b, 1) == 1;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  int i = 1;
  std::string via = "dlsym";
  if (i + 1 < argc && strcmp(argv[i], "--via") == 0) {
    via = argv[i + 1];
    i += 2;
  }
  if (via == "linked")
    BindLinked();
  else if (via == "getproc")
    BindGetProc();
  else if (!gs::platform::LoadCuda("/", &c).ok()) {
    printf("load failed\n");
    return 3;
  }
  int failures = 0;
  for (; i < argc; ++i) {
    std::string cmd = argv[i];
    auto arg = [&](int k) -> const char* {
      if (i + k >= argc) {
        fprintf(stderr, "%s needs %d argument(s)\n", cmd.c_str(), k);
        exit(2);
      }
      return argv[i + k];
    };
    CUresult rc = CUDA_SUCCESS;
    if (cmd == "inittimed") {
      auto us = [](std::chrono::steady_clock::time_point a) {
        return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - a).count();
      };
      CUcontext ctx;
      auto t = std::chrono::steady_clock::now();
      rc = c.cuInit(0);
      const long long init_us = us(t);
      t = std::chrono::steady_clock::now();
      if (rc == CUDA_SUCCESS) rc = c.cuDeviceGet(&g_dev, 0);
      if (rc == CUDA_SUCCESS) rc = c.cuDevicePrimaryCtxRetain(&ctx, g_dev);
      const long long retain_us = us(t);
      if (rc == CUDA_SUCCESS) rc = c.cuCtxSetCurrent(ctx);
      printf("inittimed %s %lld %lld\n", rc == CUDA_SUCCESS ? "ok" : Name(rc), init_us, retain_us);
    } else if (cmd == "init") {
      int dev = i + 1 < argc && isdigit(argv[i + 1][0]) ? atoi(argv[++i]) : 0;
      CUcontext ctx;
      rc = c.cuInit(0);
      if (rc == CUDA_SUCCESS) rc = c.cuDeviceGet(&g_dev, dev);
      if (rc == CUDA_SUCCESS) rc = c.cuDevicePrimaryCtxRetain(&ctx, g_dev);
      if (rc == CUDA_SUCCESS) rc = c.cuCtxSetCurrent(ctx);
      printf("init %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "alloc") {
      rc = DoAlloc(arg(1), Size(arg(2)));
      i += 2;
      if (rc == CUDA_SUCCESS)
        printf("alloc ok\n");
      else
        printf("alloc err %s\n", Name(rc));
      continue;
    } else if (cmd == "free") {
      rc = DoFree();
      printf("free %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "freesync") {
      Alloc* a = Newest();
      rc = a == nullptr || a->ptr == 0 ? CUDA_ERROR_INVALID_VALUE : c.cuMemFree_v2(a->ptr);
      if (rc == CUDA_SUCCESS) g_allocs.pop_back();
      printf("freesync %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "release") {
      Alloc* a = Newest();
      rc = a == nullptr || a->vmm == 0 ? CUDA_ERROR_INVALID_VALUE : c.cuMemRelease(a->vmm);
      if (rc == CUDA_SUCCESS) a->vmm = 0;
      printf("release %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "sharemodel") {
      if (!ShareModel(arg(1), static_cast<size_t>(atol(arg(2))) << 20)) ++failures;
      i += 2;
      continue;
    } else if (cmd == "shareowner") {
      if (!ShareOwner(arg(1), static_cast<size_t>(atol(arg(2))) << 20, atoi(arg(3)), atoi(arg(4)), atoi(arg(5)),
                      atoi(arg(6))))
        ++failures;
      i += 6;
      continue;
    } else if (cmd == "shareownerexit") {
      if (!ShareOwnerExit(arg(1), arg(2))) ++failures;
      i += 2;
      continue;
    } else if (cmd == "shareimport") {
      if (!ShareImport(arg(1), arg(2), atoi(arg(3)), atoi(arg(4)))) ++failures;
      i += 4;
      continue;
    } else if (cmd == "atexit") {
      atexit(ReportAtExit);
      printf("atexit armed\n");
    } else if (cmd == "forkafter") {
      ForkAfterInit();
    } else if (cmd == "spawnexit") {
      SpawnAndExit(Size(arg(1)));
      ++i;
      continue;
    } else if (cmd == "nvmlcost") {
      using Clock = std::chrono::steady_clock;
      auto us = [](Clock::time_point a, Clock::time_point b) {
        return static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(b - a).count());
      };
      const auto t0 = Clock::now();
      const bool loaded = gs::platform::LoadNvml("/", &n).ok() && n.nvmlInit_v2() == NVML_SUCCESS;
      const auto t1 = Clock::now();
      nvml_ready = loaded;
      nvmlDevice_t d = loaded ? NvmlDevice() : nullptr;
      const auto t2 = Clock::now();
      nvmlProcessInfo_t procs[64];
      unsigned count = 64;
      const bool listed = d != nullptr && n.nvmlDeviceGetComputeRunningProcesses_v3(d, &count, procs) == NVML_SUCCESS;
      const auto t3 = Clock::now();
      if (!listed) {
        ++failures;
        printf("nvmlcost unavailable\n");
      } else {
        printf("nvmlcost %lld %lld %lld\n", us(t0, t1), us(t1, t2), us(t2, t3));
      }
    } else if (cmd == "graphexec") {
      Alloc* a = Newest();
      CUgraphExec exec = nullptr;
      rc = a == nullptr || a->graph == nullptr ? CUDA_ERROR_INVALID_VALUE
                                               : c.cuGraphInstantiateWithFlags(&exec, a->graph, 0);
      if (rc == CUDA_SUCCESS) g_execs.push_back(exec);
      printf("graphexec %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "graphlaunch") {
      rc = g_execs.empty() ? CUDA_ERROR_INVALID_VALUE : c.cuGraphLaunch(g_execs.back(), nullptr);
      if (rc == CUDA_SUCCESS) rc = c.cuCtxSynchronize();
      printf("graphlaunch %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "graphfree") {
      rc = g_graph_ptrs.empty() ? CUDA_ERROR_INVALID_VALUE : c.cuMemFreeAsync(g_graph_ptrs.back(), nullptr);
      if (rc == CUDA_SUCCESS) rc = c.cuCtxSynchronize();
      if (!g_graph_ptrs.empty()) g_graph_ptrs.pop_back();
      printf("graphfree %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "graphfreenode") {
      Alloc* a = Newest();
      CUgraphNode node;
      rc = a == nullptr || a->graph == nullptr || g_graph_ptrs.empty()
               ? CUDA_ERROR_INVALID_VALUE
               : c.cuGraphAddMemFreeNode(&node, a->graph, nullptr, 0, g_graph_ptrs.back());
      printf("graphfreenode %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "graphclone") {
      Alloc* a = Newest();
      Alloc clone{"graphclone"};
      rc = a == nullptr || a->graph == nullptr ? CUDA_ERROR_INVALID_VALUE : c.cuGraphClone(&clone.graph, a->graph);
      if (rc == CUDA_SUCCESS) g_allocs.push_back(clone);
      printf("graphclone %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "graphchild") {
      Alloc* a = Newest();
      CUgraph parent = nullptr;
      CUgraphNode node = nullptr;
      rc = a == nullptr || a->graph == nullptr ? CUDA_ERROR_INVALID_VALUE : c.cuGraphCreate(&parent, 0);
      if (rc == CUDA_SUCCESS) {
        CUgraphNodeParams p{};
        p.type = CU_GRAPH_NODE_TYPE_GRAPH;
        p.graph.graph = a->graph;
        p.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
        rc = c.cuGraphAddNode(&node, parent, nullptr, 0, &p);
        if (rc != CUDA_SUCCESS) c.cuGraphDestroy(parent);
      }
      if (rc != CUDA_SUCCESS) {
        printf("graphchild %s\n", Name(rc));
      } else {
        CUgraph child = a->graph;
        a->graph = parent;
        // Instantiated first: a driver that let the destroy through would leave no graph.
        CUgraphExec exec = nullptr;
        CUresult instantiated = c.cuGraphInstantiateWithFlags(&exec, child, 0);
        if (instantiated == CUDA_SUCCESS) g_execs.push_back(exec);
        CUresult destroyed = c.cuGraphDestroy(child);
        printf("graphchild ok %s %s\n", Name(destroyed), Name(instantiated));
      }
    } else if (cmd == "graphchildclone") {
      Alloc* a = Newest();
      CUgraph parent = nullptr;
      CUgraphNode node = nullptr;
      rc = a == nullptr || a->graph == nullptr ? CUDA_ERROR_INVALID_VALUE : c.cuGraphCreate(&parent, 0);
      if (rc == CUDA_SUCCESS) rc = c.cuGraphAddChildGraphNode(&node, parent, nullptr, 0, a->graph);
      if (parent != nullptr) c.cuGraphDestroy(parent);
      printf("graphchildclone %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "graphtrim") {
      rc = c.cuDeviceGraphMemTrim == nullptr ? CUDA_ERROR_NOT_SUPPORTED : c.cuDeviceGraphMemTrim(g_dev);
      printf("graphtrim %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "execfree") {
      rc = g_execs.empty() ? CUDA_ERROR_INVALID_VALUE : c.cuGraphExecDestroy(g_execs.back());
      if (!g_execs.empty()) g_execs.pop_back();
      printf("execfree %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "fill" || cmd == "check") {
      uint64_t size = Size(arg(1));
      uint32_t seed = static_cast<uint32_t>(atoi(arg(2)));
      i += 2;
      Alloc* a = Newest();
      std::vector<uint32_t> buf(size / 4);
      if (cmd == "fill") {
        for (size_t k = 0; k < buf.size(); ++k) buf[k] = Pattern(k, seed);
        rc = c.cuMemcpyHtoD_v2(a->ptr, buf.data(), size);
        printf("fill %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
      } else {
        rc = c.cuMemcpyDtoH_v2(buf.data(), a->ptr, size);
        bool same = rc == CUDA_SUCCESS;
        for (size_t k = 0; same && k < buf.size(); ++k) same = buf[k] == Pattern(k, seed);
        printf("check %s\n", rc != CUDA_SUCCESS ? Name(rc) : same ? "ok" : "CORRUPT");
      }
      continue;
    } else if (cmd == "meminfo") {
      size_t free_b = 0, total = 0, dev_total = 0;
      rc = c.cuMemGetInfo_v2(&free_b, &total);
      c.cuDeviceTotalMem_v2(&dev_total, g_dev);
      printf("meminfo %zu %zu %zu\n", free_b, total, dev_total);
    } else if (cmd == "nvml") {
      nvmlDevice_t d = NvmlDevice();
      nvmlMemory_t m{};
      nvmlMemory_v2_t m2{};
      m2.version = nvmlMemory_v2;
      n.nvmlDeviceGetMemoryInfo(d, &m);
      n.nvmlDeviceGetMemoryInfo_v2(d, &m2);
      nvmlProcessInfo_t procs[64];
      unsigned count = 64;
      n.nvmlDeviceGetComputeRunningProcesses_v3(d, &count, procs);
      unsigned long long mine = 0;
      for (unsigned k = 0; k < count; ++k)
        if (procs[k].pid == static_cast<unsigned>(getpid())) mine = procs[k].usedGpuMemory;
      printf("nvml %llu %llu %llu %llu %llu %llu %u %llu\n", m.total, m.used, m.free, m2.total, m2.used, m2.free, count,
             mine);
    } else if (cmd == "unlisted") {
      nvmlDevice_t d = NvmlDevice();
      nvmlMemory_v2_t m2{};
      m2.version = nvmlMemory_v2;
      nvmlProcessInfo_t procs[128];
      unsigned count = 128;
      if (d == nullptr || n.nvmlDeviceGetMemoryInfo_v2(d, &m2) != NVML_SUCCESS ||
          n.nvmlDeviceGetComputeRunningProcesses_v3(d, &count, procs) != NVML_SUCCESS) {
        printf("unlisted nvml-unavailable\n");
        return 1;
      }
      unsigned long long listed = 0;
      unsigned measured = 0;
      for (unsigned k = 0; k < count && k < 128; ++k)
        if (procs[k].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE_ULL) {
          listed += procs[k].usedGpuMemory;
          ++measured;
        }
      printf("unlisted %llu %llu %u\n", m2.used, listed, measured);
    } else if (cmd == "pids" || cmd == "waitpids") {
      nvmlDevice_t d = NvmlDevice();
      if (d == nullptr) {
        printf("pids nvml-unavailable\n");
        return 1;
      }
      nvmlProcessInfo_t procs[64];
      unsigned count = 64;
      auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(cmd == "waitpids" ? atoi(arg(1)) : 0);
      for (;;) {
        count = 64;
        if (n.nvmlDeviceGetComputeRunningProcesses_v3(d, &count, procs) != NVML_SUCCESS) count = 0;
        if (count > 0 || std::chrono::steady_clock::now() >= until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (cmd == "waitpids") ++i;
      printf("pids");
      for (unsigned k = 0; k < count && k < 64; ++k) printf(" %u", procs[k].pid);
      nvmlProcessUtilizationSample_t samples[128];
      unsigned nsamples = 128;
      if (n.nvmlDeviceGetProcessUtilization(d, samples, &nsamples, 0) != NVML_SUCCESS) nsamples = 0;
      printf("\nsamplepids");
      for (unsigned k = 0; k < nsamples && k < 128; ++k) printf(" %u", samples[k].pid);
      printf("\n");
    } else if (cmd == "shares") {
      nvmlDevice_t d = NvmlDevice();
      if (d == nullptr) {
        printf("shares nvml-unavailable\n");
        return 1;
      }
      std::vector<std::pair<unsigned, std::pair<unsigned long long, int>>> per_pid;  // pid -> (sum, count)
      unsigned long long last = 0;
      bool first = true;
      auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(atoi(arg(1)));
      while (std::chrono::steady_clock::now() < until) {
        nvmlProcessUtilizationSample_t samples[128];
        unsigned count = 128;
        if (n.nvmlDeviceGetProcessUtilization(d, samples, &count, last) == NVML_SUCCESS) {
          for (unsigned k = 0; k < count && k < 128; ++k) {
            last = std::max(last, samples[k].timeStamp);
            if (first) continue;  // the first answer is history from before the window
            auto it = std::find_if(per_pid.begin(), per_pid.end(), [&](auto& e) { return e.first == samples[k].pid; });
            if (it == per_pid.end()) it = per_pid.insert(per_pid.end(), {samples[k].pid, {0, 0}});
            it->second.first += samples[k].smUtil;
            it->second.second += 1;
          }
          first = false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      for (auto& [pid, sum] : per_pid)
        printf("share %u %.1f %d\n", pid, sum.second ? static_cast<double>(sum.first) / sum.second : 0.0, sum.second);
      ++i;
      continue;
    } else if (cmd == "cardwatch") {
      auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(atoi(arg(1)));
      signal(SIGTERM, [](int) { g_stop = 1; });
      nvmlDevice_t d = NvmlDevice();
      printf("watching\n");
      unsigned long long most = 0, samples = 0, first = 0;
      while (!g_stop && std::chrono::steady_clock::now() < end) {
        nvmlMemory_v2_t m{};
        m.version = nvmlMemory_v2;
        if (n.nvmlDeviceGetMemoryInfo_v2(d, &m) == NVML_SUCCESS) {
          most = std::max(most, static_cast<unsigned long long>(m.used));
          if (samples++ == 0) first = m.used;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
      if (samples == 0) ++failures;
      printf("cardwatch %llu %llu %llu\n", most, samples, first);
      ++i;
      continue;
    } else if (cmd == "launch" || cmd == "launchex" || cmd == "coop" || cmd == "graph" || cmd == "culaunch" ||
               cmd == "grid" || cmd == "gridasync" || cmd == "multidev") {
      rc = Launch(cmd, atoi(arg(1)), strtoull(arg(2), nullptr, 10));
      i += 2;
      printf("%s %s\n", cmd.c_str(), rc == CUDA_SUCCESS ? "ok" : Name(rc));
      if (rc != CUDA_SUCCESS) ++failures;
      continue;
    } else if (cmd == "multidev2") {
      rc = LaunchOnTwoDevices(atoi(arg(1)));
      ++i;
      printf("multidev2 %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
      continue;
    } else if (cmd == "mixburn") {
      const auto start = std::chrono::steady_clock::now();
      const auto end = start + std::chrono::milliseconds(atoi(arg(1)));
      const int short_n = atoi(arg(2)), long_n = atoi(arg(4));
      const unsigned long long short_ns = strtoull(arg(3), nullptr, 10), long_ns = strtoull(arg(5), nullptr, 10);
      double work_ns = 0;
      while (rc == CUDA_SUCCESS && std::chrono::steady_clock::now() < end) {
        rc = Launch("launch", short_n, short_ns);
        if (rc == CUDA_SUCCESS) rc = c.cuCtxSynchronize();
        if (rc == CUDA_SUCCESS) rc = Launch("launch", long_n, long_ns);
        if (rc == CUDA_SUCCESS) rc = c.cuCtxSynchronize();
        if (rc == CUDA_SUCCESS) work_ns += short_n * double(short_ns) + long_n * double(long_ns);
      }
      double elapsed = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
      i += 5;
      if (rc != CUDA_SUCCESS) {
        ++failures;
        printf("mixburn %s\n", Name(rc));
      } else {
        printf("mixburn %.1f\n", 100 * work_ns / elapsed);
      }
      continue;
    } else if (cmd == "greenctx") {
      CUcontext primary = nullptr, green_ctx = nullptr;
      c.cuCtxGetCurrent(&primary);
      long long before = OwnMib();
      CUgreenCtx green = nullptr;
      rc = MakeGreen(&green);
      if (rc == CUDA_SUCCESS) {
        g_greens.push_back(green);
        c.cuCtxFromGreenCtx(&green_ctx, green);
        printf("greenctx ok %lld %s\n", OwnMib() - before, green_ctx == primary ? "same" : "distinct");
      } else {
        ++failures;
        printf("greenctx %s\n", Name(rc));
      }
      continue;
    } else if (cmd == "greencurrent") {
      CUcontext ctx = nullptr;
      rc = g_greens.empty() ? CUDA_ERROR_INVALID_CONTEXT : c.cuCtxFromGreenCtx(&ctx, g_greens.back());
      if (rc == CUDA_SUCCESS) rc = c.cuCtxSetCurrent(ctx);
      printf("greencurrent %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
      continue;
    } else if (cmd == "greendestroy") {
      rc = g_greens.empty() ? CUDA_ERROR_INVALID_CONTEXT : c.cuGreenCtxDestroy(g_greens.back());
      if (rc == CUDA_SUCCESS) g_greens.pop_back();
      CUcontext primary = nullptr;
      if (c.cuDevicePrimaryCtxRetain(&primary, g_dev) == CUDA_SUCCESS) {
        c.cuCtxSetCurrent(primary);
        c.cuDevicePrimaryCtxRelease_v2(g_dev);
      }
      printf("greendestroy %s %lld\n", rc == CUDA_SUCCESS ? "ok" : Name(rc), OwnMib());
      continue;
    } else if (cmd == "greenburn") {
      double util = 0;
      rc = GreenBurn(atoi(arg(1)), strtoull(arg(2), nullptr, 10), &util);
      i += 2;
      if (rc != CUDA_SUCCESS) {
        ++failures;
        printf("greenburn %s\n", Name(rc));
      } else {
        printf("greenburn %.1f\n", util);
      }
      continue;
    } else if (cmd == "mckeeps") {
      MulticastKeeps();
      continue;
    } else if (cmd == "sync") {
      rc = c.cuCtxSynchronize();
      printf("sync %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "poolkeep" || cmd == "pooltrim") {
      CUmemoryPool pool = nullptr;
      cuuint64_t bytes = Size(arg(1));
      ++i;
      rc = c.cuDeviceGetMemPool(&pool, g_dev);
      if (rc == CUDA_SUCCESS)
        rc = cmd == "poolkeep" ? c.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &bytes)
                               : c.cuMemPoolTrimTo(pool, bytes);
      printf("%s %s\n", cmd.c_str(), rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "sleep") {
      std::this_thread::sleep_for(std::chrono::milliseconds(atoi(arg(1))));
      ++i;
      continue;
    } else if (cmd == "at") {
      std::this_thread::sleep_until(std::chrono::system_clock::time_point(std::chrono::milliseconds(atoll(arg(1)))));
      ++i;
      continue;
    } else if (cmd == "util") {
      nvmlUtilization_t u{};
      nvmlDevice_t d = NvmlDevice();  // loads NVML: before reading n's pointers
      n.nvmlDeviceGetUtilizationRates(d, &u);
      printf("util %u\n", u.gpu);
    } else if (cmd == "utilperiod") {
      // How often the card's utilisation changes: for MS milliseconds, kernels of 1-80 ms
      // with pauses of 0-80 ms (so each of NVML's periods reads differently), while the
      // device utilisation is polled every 2 ms; prints the median time between changes of
      // its value: "utilperiod changes=N median_ms=M".
      nvmlDevice_t d = NvmlDevice();
      std::vector<double> gaps;
      unsigned last = 1000;
      auto changed = std::chrono::steady_clock::now();
      const auto until = changed + std::chrono::milliseconds(atoi(arg(1)));
      auto next_kernel = changed;
      unsigned seed = 12345;
      for (auto now = changed; now < until && rc == CUDA_SUCCESS; now = std::chrono::steady_clock::now()) {
        if (now >= next_kernel && c.cuStreamQuery(nullptr) == CUDA_SUCCESS) {
          seed = seed * 1103515245 + 12345;
          const unsigned kernel_ms = 1 + (seed >> 16) % 80, pause_ms = (seed >> 8) % 80;
          rc = Launch("launch", 1, kernel_ms * 1'000'000ull);
          next_kernel = now + std::chrono::milliseconds(kernel_ms + pause_ms);
        }
        nvmlUtilization_t u{};
        if (n.nvmlDeviceGetUtilizationRates(d, &u) == NVML_SUCCESS && u.gpu != last) {
          if (last != 1000) gaps.push_back(std::chrono::duration<double, std::milli>(now - changed).count());
          last = u.gpu;
          changed = now;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      c.cuCtxSynchronize();
      std::sort(gaps.begin(), gaps.end());
      printf("utilperiod changes=%zu median_ms=%.1f\n", gaps.size(), gaps.empty() ? 0.0 : gaps[gaps.size() / 2]);
      ++i;
    } else if (cmd == "procutil") {
      // NVML's per-process feed as the limiter polls it: the NULL-buffer sizing answer,
      // then polls every 20 ms for MS milliseconds, asking only for samples newer than the
      // newest seen. Prints the sizing and "procutil new=N notfound=M max_smutil=U".
      nvmlDevice_t d = NvmlDevice();
      unsigned cap = 0;
      nvmlReturn_t r = n.nvmlDeviceGetProcessUtilization(d, nullptr, &cap, 0);
      printf("procutil-size %s %u\n", r == NVML_ERROR_INSUFFICIENT_SIZE ? "insufficient" : n.nvmlErrorString(r), cap);
      unsigned long long last = 0;
      int fresh = 0, not_found = 0;
      unsigned max_util = 0;
      auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(atoi(arg(1)));
      while (std::chrono::steady_clock::now() < until) {
        nvmlProcessUtilizationSample_t samples[128];
        unsigned count = 128;
        r = n.nvmlDeviceGetProcessUtilization(d, samples, &count, last);
        if (r == NVML_ERROR_NOT_FOUND) {
          ++not_found;
        } else if (r == NVML_SUCCESS) {
          if (last != 0) ++fresh;  // the first call returns history
          for (unsigned k = 0; k < count; ++k) {
            last = std::max(last, samples[k].timeStamp);
            max_util = std::max(max_util, samples[k].smUtil);
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      printf("procutil new=%d notfound=%d max_smutil=%u\n", fresh, not_found, max_util);
      ++i;
      continue;
    } else if (cmd == "xid") {
      nvmlDevice_t d = NvmlDevice();
      nvmlEventSet_t set;
      n.nvmlEventSetCreate(&set);
      unsigned count = 0;
      n.nvmlDeviceGetCount_v2(&count);
      for (unsigned k = 0; k < count; ++k) {
        nvmlDevice_t h;
        n.nvmlDeviceGetHandleByIndex_v2(k, &h);
        n.nvmlDeviceRegisterEvents(h, nvmlEventTypeXidCriticalError, set);
      }
      printf("events armed\n");  // an event from now on reaches the set
      nvmlEventData_t data{};
      nvmlReturn_t r = n.nvmlEventSetWait_v2(set, &data, static_cast<unsigned>(atoi(arg(1))));
      ++i;
      if (r == NVML_SUCCESS)
        printf("xid %llu %s\n", data.eventData, data.device == d ? "this-device" : "other-device");
      else
        printf("xid %s\n", r == NVML_ERROR_TIMEOUT ? "timeout" : n.nvmlErrorString(r));
      continue;
    } else if (cmd == "modload" || cmd == "libload") {
      // Loads the spin kernel's module (cuModuleLoadData) or library (cuLibraryLoadData).
      if (cmd == "modload") {
        CUmodule m = nullptr;
        rc = c.cuModuleLoadData(&m, kBurnPtx);
        if (rc == CUDA_SUCCESS) g_modules.push_back(m);
      } else {
        CUlibrary l = nullptr;
        rc = c.cuLibraryLoadData(&l, kBurnPtx, nullptr, nullptr, 0, nullptr, nullptr, 0);
        if (rc == CUDA_SUCCESS) g_libraries.push_back(l);
      }
      printf("%s %s\n", cmd.c_str(), rc == CUDA_SUCCESS ? "ok" : Name(rc));
      continue;
    } else if (cmd == "modglobal") {
      std::string ptx = std::string(kBurnPtx) + ".visible .global .align 1 .b8 gs_probe_globals[" +
                        std::to_string(Size(arg(1))) + "];\n";
      ++i;
      CUmodule m = nullptr;
      rc = c.cuModuleLoadData(&m, ptx.c_str());
      if (rc == CUDA_SUCCESS) g_modules.push_back(m);
      printf("modglobal %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
      continue;
    } else if (cmd == "modcode" || cmd == "libcode") {
      std::string ptx = CodePtx(Size(arg(1)));
      ++i;
      if (cmd == "modcode") {
        CUmodule m = nullptr;
        rc = c.cuModuleLoadData(&m, ptx.c_str());
        if (rc == CUDA_SUCCESS) g_modules.push_back(m);
      } else {
        CUlibrary l = nullptr;
        rc = c.cuLibraryLoadData(&l, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0);
        if (rc == CUDA_SUCCESS) g_libraries.push_back(l);
      }
      printf("%s %s\n", cmd.c_str(), rc == CUDA_SUCCESS ? "ok" : Name(rc));
      continue;
    } else if (cmd == "getfunc") {
      rc = g_modules.empty() ? CUDA_ERROR_INVALID_HANDLE
                             : c.cuModuleGetFunction(&g_code_fn, g_modules.back(), "gs_code");
      printf("getfunc %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "getkernel") {
      rc = g_libraries.empty() ? CUDA_ERROR_INVALID_HANDLE
                               : c.cuLibraryGetKernel(&g_code_kernel, g_libraries.back(), "gs_code");
      g_code_fn = nullptr;  // launchcode / graphcode use this kernel now
      printf("getkernel %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "kernelfunc") {
      rc = c.cuKernelGetFunction(&g_code_fn, g_code_kernel);
      printf("kernelfunc %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "launchcode") {
      // A CUkernel may be launched as a CUfunction (CUDA 12): how the runtime launches.
      CUfunction f = g_code_fn ? g_code_fn : reinterpret_cast<CUfunction>(g_code_kernel);
      unsigned long long p = 0;
      void* params[] = {&p};
      rc = c.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr);
      if (rc == CUDA_SUCCESS) rc = c.cuCtxSynchronize();
      printf("launchcode %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "graphcode") {
      CUfunction f = g_code_fn ? g_code_fn : reinterpret_cast<CUfunction>(g_code_kernel);
      unsigned long long p = 0;
      void* params[] = {&p};
      CUgraph g = nullptr;
      CUgraphExec e = nullptr;
      CUgraphNode node;
      CUDA_KERNEL_NODE_PARAMS kp{};
      kp.func = f;
      kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
      kp.blockDimX = 32;
      kp.blockDimY = kp.blockDimZ = 1;
      kp.kernelParams = params;
      rc = c.cuGraphCreate(&g, 0);
      if (rc == CUDA_SUCCESS) rc = c.cuGraphAddKernelNode_v2(&node, g, nullptr, 0, &kp);
      if (rc == CUDA_SUCCESS) rc = c.cuGraphInstantiateWithFlags(&e, g, 0);
      if (rc == CUDA_SUCCESS) rc = c.cuGraphLaunch(e, nullptr);
      if (rc == CUDA_SUCCESS) rc = c.cuCtxSynchronize();
      printf("graphcode %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "loadingmode") {
      CUmoduleLoadingMode mode{};
      rc = c.cuModuleGetLoadingMode(&mode);
      printf("loadingmode %s\n", rc != CUDA_SUCCESS ? Name(rc) : mode == CU_MODULE_LAZY_LOADING ? "lazy" : "eager");
    } else if (cmd == "attrs") {
      CUdevice d = atoi(arg(1));
      ++i;
      c.cuInit(0);
      const CUdevice_attribute kAttrs[] = {
          CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
          CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,           CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH,
          CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH,        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT,
          CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH,        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT,
          CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH};
      int v[9] = {};
      for (int k = 0; k < 9 && rc == CUDA_SUCCESS; ++k) rc = c.cuDeviceGetAttribute(&v[k], kAttrs[k], d);
      if (rc == CUDA_SUCCESS)
        printf("attrs %d %d %d %d %dx%d %dx%dx%d\n", v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
      else
        printf("attrs %s\n", Name(rc));
      continue;
    } else if (cmd == "stack") {
      rc = c.cuCtxSetLimit(CU_LIMIT_STACK_SIZE, Size(arg(1)));
      ++i;
      printf("stack %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
      continue;
    } else if (cmd == "array2d") {
      Alloc a;
      a.kind = "array";
      CUDA_ARRAY_DESCRIPTOR d{};
      d.Width = Size(arg(1));
      d.Height = Size(arg(2));
      i += 2;
      d.Format = CU_AD_FORMAT_FLOAT;
      d.NumChannels = 1;
      rc = c.cuArrayCreate_v2(&a.array, &d);
      if (rc == CUDA_SUCCESS) g_allocs.push_back(a);
      printf("array2d %s\n", rc == CUDA_SUCCESS ? "ok" : Name(rc));
      continue;
    } else if (cmd == "modunload" || cmd == "libunload") {
      if (cmd == "modunload" && !g_modules.empty()) {
        rc = c.cuModuleUnload(g_modules.back());
        g_modules.pop_back();
      } else if (cmd == "libunload" && !g_libraries.empty()) {
        rc = c.cuLibraryUnload(g_libraries.back());
        g_libraries.pop_back();
      }
      printf("%s %s\n", cmd.c_str(), rc == CUDA_SUCCESS ? "ok" : Name(rc));
    } else if (cmd == "maps") {
      std::ifstream maps("/proc/self/maps");
      std::string line;
      bool loaded = false;
      while (std::getline(maps, line)) loaded |= line.find("libgpuslice.so") != std::string::npos;
      printf("maps enforcer %s\n", loaded ? "loaded" : "absent");
    } else if (cmd == "symbols") {
      size_t count = 0;
      const char* const* names = gs::platform::CudaSymbolNames(&count);
      int found = 0;
      for (size_t k = 0; k < count; ++k) {
        void* fn = nullptr;
        CUdriverProcAddressQueryResult st;
        if (c.cuGetProcAddress_v2(names[k], &fn, 13000, 0, &st) == CUDA_SUCCESS && fn) ++found;
      }
      printf("symbols %d/%zu\n", found, count);
    } else {
      fprintf(stderr, "unknown command %s\n", cmd.c_str());
      return 2;
    }
  }
  return failures ? 1 : 0;
}
