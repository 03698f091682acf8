#include "src/sim/runtime.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "src/common/raw_log.h"
#include "src/sim/registration.h"

namespace gs::sim {
namespace {

Runtime g_runtime;
Runtime* g_ready = nullptr;
pthread_once_t g_once = PTHREAD_ONCE_INIT;
// Reset in every forked child: its first GetRuntime gives it a process slot of its own.
pthread_once_t g_child_once = PTHREAD_ONCE_INIT;
// The registration with the node daemon (src/sim/registration.h), open for the process's
// lifetime, and the pid (in this process's own namespace) that registered it.
int g_registration_fd = -1;
pid_t g_registered_as = 0;
char g_socket_path[700];
// The node's state file, which every exported memory descriptor opens (OpenExportFile):
// its absolute path and its identity when the process attached.
char g_export_path[PATH_MAX];
struct stat g_export_file;

// The connection is the parent's: a child holding it would keep the parent registered
// after the parent is gone.
void AfterForkInChild() {
  g_child_once = PTHREAD_ONCE_INIT;
  if (g_registration_fd >= 0) close(g_registration_fd);
  g_registration_fd = -1;
}

// Learns this process's identity from the node daemon; false (logged) when it cannot.
bool Register(NodeIdentity* id) {
  char err[900];
  int fd = RegisterWithNode(g_socket_path, id, err, sizeof(err));
  if (fd < 0) {
    GS_LOG(kError, "%s", err);
    return false;
  }
  g_registration_fd = fd;
  g_registered_as = getpid();
  return true;
}

// A child forked after the library attached still held its parent's identity and slot. A
// real driver knows each process on its own (NVML lists the child by its own pid).
void ReattachIfForked() {
  if (g_ready == nullptr || getpid() == g_registered_as) return;
  NodeIdentity id;
  if (!Register(&id)) {
    g_ready = nullptr;
    return;
  }
  g_ready->node->SetPidNamespaces(id.namespaces);
  if (!g_ready->node->ReattachAs(id.pid, id.start_time)) {
    GS_LOG(kError, "simulated node has no free process slot for forked child %d (%d in use)", static_cast<int>(id.pid),
           kMaxProcesses);
    g_ready = nullptr;
  }
}

void ConfigureLogging() {
  SetRawLogPrefix("gpuslice-sim");
  const char* level = getenv("GPUSLICE_SIM_LOG_LEVEL");
  SetRawLogLevel(level ? static_cast<int>(strtol(level, nullptr, 10)) : 1);
}

// Fills root with our own library's simulated root ("" if not in one).
void FindOwnRoot(char* root, size_t size) {
  root[0] = 0;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&GetRuntime), &info) == 0 || info.dli_fname == nullptr) return;
  // <root>/usr/lib/<triple>/libcuda.so.1 (Debian layout) or <root>/usr/lib64/... (RHEL).
  const char* at = strstr(info.dli_fname, "/usr/lib/");
  if (at == nullptr) at = strstr(info.dli_fname, "/usr/lib64/");
  if (at == nullptr) return;
  size_t n = static_cast<size_t>(at - info.dli_fname);
  if (n >= size) return;
  memcpy(root, info.dli_fname, n);
  root[n] = 0;
}

bool DeviceNodePresent(const char* dev_dir, unsigned minor) {
  char path[700];
  snprintf(path, sizeof(path), "%s/nvidia%u", dev_dir, minor);
  return access(path, F_OK) == 0;
}

// CUDA_VISIBLE_DEVICES: comma list of indices into the NVML-visible list or UUID
// prefixes ("GPU-" optional). The first invalid entry ends the list.
void ApplyCudaVisibleDevices(Runtime* rt, const State* s) {
  const char* env = getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) {
    rt->cuda_count = rt->nvml_count;
    memcpy(rt->cuda_devices, rt->nvml_devices, sizeof(rt->cuda_devices));
    return;
  }
  rt->cuda_count = 0;
  const char* p = env;
  while (*p) {
    char item[128];
    size_t n = 0;
    while (*p && *p != ',' && n + 1 < sizeof(item)) item[n++] = *p++;
    item[n] = 0;
    if (*p == ',') ++p;
    int found = -1;
    char* end = nullptr;
    long idx = strtol(item, &end, 10);
    if (n > 0 && *end == 0) {
      if (idx >= 0 && idx < rt->nvml_count) found = rt->nvml_devices[idx];
    } else if (n > 0) {
      const char* want = strncmp(item, "GPU-", 4) == 0 ? item : nullptr;
      for (int i = 0; i < rt->nvml_count && found < 0; ++i) {
        const char* uuid = s->spec[rt->nvml_devices[i]].uuid;
        if (want ? strncmp(uuid, want, n) == 0 : strncmp(uuid + 4, item, n) == 0) found = rt->nvml_devices[i];
      }
    }
    if (found < 0) break;
    bool dup = false;
    for (int i = 0; i < rt->cuda_count; ++i) dup |= rt->cuda_devices[i] == found;
    if (dup) break;
    rt->cuda_devices[rt->cuda_count++] = found;
  }
}

void Init() {
  ConfigureLogging();
  char root[512];
  FindOwnRoot(root, sizeof(root));
  char state_path[600], dev_dir[600];  // root is at most 511 bytes
  const char* env_state = getenv("GPUSLICE_SIM_STATE");
  if (env_state && *env_state)
    snprintf(state_path, sizeof(state_path), "%s", env_state);
  else if (root[0])
    snprintf(state_path, sizeof(state_path), "%s/state", root);
  else if (access("/var/run/gpuslice-sim/state", F_OK) == 0)
    // In a container, the hook or the CDI spec mounts the node's state here.
    snprintf(state_path, sizeof(state_path), "/var/run/gpuslice-sim/state");
  else {
    GS_LOG(kError,
           "no simulated node: set GPUSLICE_SIM_STATE or load the library from a "
           "simulated root (gpuslice sim up)");
    return;
  }
  const char* env_dev = getenv("GPUSLICE_SIM_DEV_DIR");
  if (env_dev && *env_dev)
    snprintf(dev_dir, sizeof(dev_dir), "%s", env_dev);
  else if (root[0])
    snprintf(dev_dir, sizeof(dev_dir), "%s/dev", root);
  else
    snprintf(dev_dir, sizeof(dev_dir), "/dev");

  char err[512];
  State* s = MapState(state_path, err, sizeof(err));
  // Absolute, so that a later chdir does not lose it.
  if (realpath(state_path, g_export_path) == nullptr || stat(g_export_path, &g_export_file) != 0) {
    GS_LOG(kWarn, "cannot resolve %s: %s; memory cannot be exported as a POSIX descriptor", state_path,
           strerror(errno));
    g_export_path[0] = 0;
  }
  if (s == nullptr) {
    GS_LOG(kError, "%s", err);
    return;
  }
  // Every process is known to the node by its pid in the node's namespace, as the kernel
  // driver knows it; a process that cannot register is refused, like one whose device
  // nodes are missing, never run under its own namespace's pid.
  if (!DriverSocketPath(state_path, g_socket_path, sizeof(g_socket_path))) {
    GS_LOG(kError, "simulator state path %s is too long", state_path);
    return;
  }
  NodeIdentity id;
  if (!Register(&id)) return;
  static RealClock clock;
  static Node node(s, &clock, id.pid, id.start_time);
  node.SetPidNamespaces(id.namespaces);
  if (!node.Attach()) {
    GS_LOG(kError, "simulated node %s has no free process slot (%d in use)", state_path, kMaxProcesses);
    return;
  }
  Runtime* rt = &g_runtime;
  rt->node = &node;
  for (uint32_t i = 0; i < s->device_count && i < kMaxDevices; ++i)
    if (DeviceNodePresent(dev_dir, s->spec[i].minor)) rt->nvml_devices[rt->nvml_count++] = static_cast<int>(i);
  ApplyCudaVisibleDevices(rt, s);
  timespec rt_ts, mono_ts;
  clock_gettime(CLOCK_REALTIME, &rt_ts);
  clock_gettime(CLOCK_MONOTONIC, &mono_ts);
  rt->realtime_minus_monotonic_ns =
      (rt_ts.tv_sec - mono_ts.tv_sec) * 1'000'000'000LL + (rt_ts.tv_nsec - mono_ts.tv_nsec);
  pthread_atfork(nullptr, nullptr, AfterForkInChild);
  GS_LOG(kDetail, "attached to %s: %d GPU(s) visible to NVML, %d to CUDA", state_path, rt->nvml_count, rt->cuda_count);
  g_ready = rt;
}

}  // namespace

Runtime* GetRuntime() {
  pthread_once(&g_once, Init);
  pthread_once(&g_child_once, ReattachIfForked);
  return g_ready;
}

void LeaveNode() {
  if (g_ready == nullptr || g_registration_fd < 0 || getpid() != g_registered_as) return;
  g_ready->node->Depart();
  // A second is ample for the daemon's few microseconds; without an answer it frees at the
  // connection's close instead.
  SayGoodbye(g_registration_fd, 1000);
}

int OpenShareBacking(int index, uint64_t id) {
  if (GetRuntime() == nullptr) return -1;
  return FetchShareBacking(g_socket_path, index, id);
}

int OpenExportFile() {
  if (GetRuntime() == nullptr) return -1;
  if (g_export_path[0] == 0) return -1;
  // Still the file this process attached to (not a node that replaced it since).
  int fd = open(g_export_path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && !IsExportFile(fd)) {
    close(fd);
    fd = -1;
  }
  return fd;
}

bool IsExportFile(int fd) {
  struct stat given;
  return GetRuntime() != nullptr && g_export_path[0] != 0 && fstat(fd, &given) == 0 &&
         given.st_ino == g_export_file.st_ino && given.st_dev == g_export_file.st_dev;
}

int FindDeviceByUuid(const Runtime* rt, const char* uuid) {
  const State* s = rt->node->state();
  for (int i = 0; i < rt->nvml_count; ++i)
    if (strcmp(s->spec[rt->nvml_devices[i]].uuid, uuid) == 0) return rt->nvml_devices[i];
  return -1;
}

}  // namespace gs::sim
