// Initialisation of the enforcer: configuration at load, the real driver and the region
// on first use. See enforcer.h for the life cycle.
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "src/common/proc_identity.h"
#include "src/common/raw_log.h"
#include "src/enforcer/charging.h"
#include "src/enforcer/child_reset_mutex.h"
#include "src/enforcer/enforcer.h"
#include "src/enforcer/limits.h"

extern char** environ;

namespace gs::enforcer {

// constinit: the library constructor fills these before C++ dynamic initialisers would run.
constinit State g_state;
constinit RealCuda g_cuda;
constinit RealNvml g_nvml;

namespace {

pthread_once_t g_cuda_once = PTHREAD_ONCE_INIT;
pthread_once_t g_nvml_once = PTHREAD_ONCE_INIT;
pthread_once_t g_region_once = PTHREAD_ONCE_INIT;
ChildResetMutex g_map_mu;

// Reads a limits file into text and splits it into vars; false (errno set) when it cannot
// be opened.
bool ReadLimitsFile(const char* path, char* text, size_t size, const char** vars, size_t max) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, text, size - 1);
  close(fd);
  text[n > 0 ? n : 0] = 0;
  SplitLimitsFile(text, vars, max);
  return true;
}

void LoadConfig() {
  // The limits file: fixed path; a test-only override is honoured only when the real
  // file is absent, so a container cannot point the enforcer elsewhere.
  const char* path = kLimitsFile;
  if (access(kLimitsFile, F_OK) != 0) {
    const char* alt = getenv(contract::kEnvLimitsFileOverride);
    path = alt && *alt ? alt : nullptr;
  }
  static char text[16384], run_text[16384];
  static const char* file_vars[256];
  static const char* run_vars[256];
  const char* const* file = nullptr;
  if (path) {
    if (ReadLimitsFile(path, text, sizeof(text), file_vars, 256))
      file = file_vars;
    else if (path == kLimitsFile || errno != ENOENT)
      GS_LOG(kError, "cannot read limits file %s: %s", path, strerror(errno));
  }
  BuildConfig(file, environ, &g_state.cfg);
  SetRawLogPrefix("gpuslice");
  SetRawLogLevel(g_state.cfg.log_level);
  // `gpuslice run`'s limits file binds its slice to the granted cards; it can only bind
  // and tighten, and is not read at all under the limits file.
  const char* run = getenv(contract::kEnvRunLimitsFile);
  if (run && *run && !g_state.cfg.limits_file_used) {
    if (ReadLimitsFile(run, run_text, sizeof(run_text), run_vars, 256))
      ApplyRunLimits(run_vars, &g_state.cfg);
    else
      GS_LOG(kError, "cannot read %s=%s: %s; the environment's limits apply, bound by position",
             contract::kEnvRunLimitsFile, run, strerror(errno));
  }
  if (g_state.cfg.errors[0]) GS_LOG(kError, "configuration: %s", g_state.cfg.errors);
}

__attribute__((constructor)) void OnLoad() {
  LoadConfig();
  InstallForkHandlers();
}

void WriteLimits(region::Region* r) {
  const Config& c = g_state.cfg;
  for (int i = 0; i < region::kMaxDevices; ++i) {
    r->devices[i].memory_limit.store(c.memory_limit[i]);
    r->devices[i].sm_limit.store(c.sm_limit[i]);
  }
  r->core_policy.store(static_cast<uint32_t>(c.core_policy));
  r->oversubscribe.store(c.oversubscribe);
  r->initialized.store(1);
}

void JoinRegion() {
  const char* path = g_state.cfg.region_path;
  region::Region* r = nullptr;
  if (path[0]) {
    region::OpenError err;
    char msg[512];
    r = region::OpenRegion(path, &err, msg, sizeof(msg));
    if (r == nullptr && g_state.cfg.limits_file_used) {
      // The operator named this region: a private one would give every process of the
      // container its own full limit. Fail closed.
      GS_LOG(kError, "%s; device memory is refused (the limits file names this region)", msg);
      g_state.region_refused = true;
    } else if (r == nullptr) {
      GS_LOG(kError, "%s; limits are enforced for this process alone (no container-wide accounting)", msg);
    }
  }
  if (r == nullptr) {
    r = region::CreatePrivateRegion();
    g_state.private_region = true;
    if (r == nullptr) {
      GS_LOG(kError, "cannot create even a private region: device memory is not limited");
      return;
    }
  }
  region::Lock(r);
  if (r->initialized.load() == 0) WriteLimits(r);
  region::Unlock(r);
  region::ProcessSlot* slot = ClaimProcessSlot(r);
  if (slot == nullptr)
    GS_LOG(kError, "region %s has no free process slot (%d live processes); allocations are refused", path,
           region::kMaxProcesses);
  g_state.region = r;
  g_state.slot = slot;
  g_state.slot_pid.store(getpid());
}

void* OpenDriver(const char* soname) {
  void* h = dlopen(soname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  if (h == nullptr) h = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
  return h;
}

void LoadCuda() {
  pthread_once(&g_region_once, JoinRegion);
  void* h = OpenDriver("libcuda.so.1");
  if (h == nullptr) {
    GS_LOG(kWarn, "libcuda.so.1 not found: no CUDA driver in this container");
    return;
  }
  DlsymFn sym = RealDlsym();
#define GS_CUDA_SYM(name, params, args) g_cuda.name = reinterpret_cast<CUresult(*) params>(sym(h, #name));
#include "src/platform/cuda_symbols.def"
#undef GS_CUDA_SYM
  g_state.cuda_loaded = g_cuda.cuInit != nullptr;
}

void LoadNvml() {
  pthread_once(&g_region_once, JoinRegion);
  void* h = OpenDriver("libnvidia-ml.so.1");
  if (h == nullptr) return;
  DlsymFn sym = RealDlsym();
#define GS_NVML_SYM(ret, name, params, args) g_nvml.name = reinterpret_cast<ret(*) params>(sym(h, #name));
#include "src/platform/nvml_symbols.def"
#undef GS_NVML_SYM
  g_state.nvml_loaded = g_nvml.nvmlInit_v2 != nullptr;
}

}  // namespace

bool CudaReady() {
  pthread_once(&g_cuda_once, LoadCuda);
  return g_state.cuda_loaded;
}

bool NvmlReady() {
  pthread_once(&g_nvml_once, LoadNvml);
  return g_state.nvml_loaded;
}

void FormatUuid(const CUuuid& u, char* out, size_t size) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  snprintf(out, size, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
           b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

namespace {
// Records the card a region device was first bound to (caller holds g_map_mu).
void KeepDeviceUuid(int idx, const char* uuid) {
  if (idx >= 0 && idx < region::kMaxDevices && g_state.device_uuid[idx][0] == 0)
    snprintf(g_state.device_uuid[idx], sizeof(g_state.device_uuid[idx]), "%s", uuid);
}
}  // namespace

void MapCudaDevices() {
  region::Region* r = g_state.region;
  if (r == nullptr) return;
  int count = 0;
  if (g_cuda.cuDeviceGetCount(&count) != CUDA_SUCCESS) return;
  g_map_mu.lock();
  region::Lock(r);
  for (int ord = 0; ord < count && ord < 64; ++ord) {
    CUuuid u;
    if (g_cuda.cuDeviceGetUuid_v2(&u, ord) != CUDA_SUCCESS) continue;
    char uuid[96];
    FormatUuid(u, uuid, sizeof(uuid));
    int idx = BindDevice(r, uuid, ord);
    g_state.ordinal_to_device[ord] = idx + 1;
    KeepDeviceUuid(idx, uuid);
    g_state.ordinal_not_granted[ord] = idx < 0 && CardsNamed();
    size_t total = 0;
    if (idx >= 0 && g_cuda.cuDeviceTotalMem_v2(&total, ord) == CUDA_SUCCESS) g_state.physical_total[idx] = total;
  }
  g_state.devices_mapped.store(true);
  region::Unlock(r);
  g_map_mu.unlock();
}

int DeviceOfOrdinal(CUdevice ordinal) {
  if (ordinal < 0 || ordinal >= 64) return -1;
  // A program that reached the real cuInit around our hook still has its devices mapped.
  if (!g_state.devices_mapped.load(std::memory_order_acquire) && g_state.cuda_loaded) MapCudaDevices();
  return g_state.ordinal_to_device[ordinal] - 1;
}

bool NotGranted(CUdevice ordinal) {
  if (ordinal < 0 || ordinal >= 64) return false;
  if (!g_state.devices_mapped.load(std::memory_order_acquire) && g_state.cuda_loaded) MapCudaDevices();
  return g_state.ordinal_not_granted[ordinal];
}

int CurrentDevice() {
  CUdevice ord;
  if (g_cuda.cuCtxGetDevice == nullptr || g_cuda.cuCtxGetDevice(&ord) != CUDA_SUCCESS) return -1;
  return DeviceOfOrdinal(ord);
}

CUdevice OrdinalOfContext(CUcontext ctx) {
  if (ctx == nullptr || g_cuda.cuCtxGetDevice == nullptr || g_cuda.cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS) return -1;
  CUdevice ordinal = -1;
  if (g_cuda.cuCtxGetDevice(&ordinal) != CUDA_SUCCESS) ordinal = -1;
  CUcontext popped;
  g_cuda.cuCtxPopCurrent_v2(&popped);
  return ordinal;
}

void DeviceMapAfterForkInChild() {
  g_map_mu.ResetInChild();
}

int DeviceOfNvml(nvmlDevice_t device) {
  region::Region* r = g_state.region;
  if (r == nullptr || g_nvml.nvmlDeviceGetUUID == nullptr) return -1;
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  if (g_nvml.nvmlDeviceGetUUID(device, uuid, sizeof(uuid)) != NVML_SUCCESS) return -1;
  // A view only: the index CUDA bound this card to, when it did (a renamed entry only
  // changes what this process's NVML shows, never what it may allocate).
  bool keyed = g_state.cfg.device_uuid[0][0] != 0;
  for (int i = 0; i < region::kMaxDevices && !keyed; ++i)
    if (strcmp(r->devices[i].uuid, uuid) == 0) return i;
  // An NVML-only process (nvidia-smi) may come before any CUDA process: register the
  // device in NVML order, which matches CUDA's default order in a container.
  unsigned index = 0;
  if (g_nvml.nvmlDeviceGetIndex(device, &index) != NVML_SUCCESS) return -1;
  g_map_mu.lock();
  region::Lock(r);
  int idx = BindDevice(r, uuid, static_cast<int>(index));
  KeepDeviceUuid(idx, uuid);
  region::Unlock(r);
  g_map_mu.unlock();
  nvmlMemory_t mem;
  if (idx >= 0 && g_nvml.nvmlDeviceGetMemoryInfo(device, &mem) == NVML_SUCCESS) g_state.physical_total[idx] = mem.total;
  return idx;
}

}  // namespace gs::enforcer
