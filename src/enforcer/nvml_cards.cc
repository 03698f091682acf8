#include "src/enforcer/nvml_cards.h"

#include <pthread.h>

#include <cstring>

#include "src/common/clock.h"
#include "src/common/raw_log.h"
#include "src/enforcer/enforcer.h"

namespace gs::enforcer {
namespace {

enum class Start { kNotStarted, kRunning, kDone };

constexpr int kMaxCards = 64;
struct Card {
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  nvmlDevice_t handle;
};

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_done = PTHREAD_COND_INITIALIZER;
Start g_start = Start::kNotStarted;  // guarded by g_mu
// Written by the starting thread before kDone, read only after it.
bool g_ok = false;
Card g_cards[kMaxCards];
unsigned g_card_count = 0;

void StartNvml() {
  const int64_t begun = MonotonicNowNs();
  bool ok = NvmlReady() && g_nvml.nvmlInit_v2 && g_nvml.nvmlInit_v2() == NVML_SUCCESS;
  const int64_t inited = MonotonicNowNs();
  unsigned count = 0;
  if (ok && g_nvml.nvmlDeviceGetCount_v2 && g_nvml.nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS) count = 0;
  unsigned kept = 0;
  for (unsigned i = 0; ok && i < count && kept < kMaxCards; ++i) {
    Card& c = g_cards[kept];
    if (g_nvml.nvmlDeviceGetHandleByIndex_v2 == nullptr || g_nvml.nvmlDeviceGetUUID == nullptr ||
        g_nvml.nvmlDeviceGetHandleByIndex_v2(i, &c.handle) != NVML_SUCCESS ||
        g_nvml.nvmlDeviceGetUUID(c.handle, c.uuid, sizeof(c.uuid)) != NVML_SUCCESS)
      continue;
    ++kept;
  }
  GS_LOG(kDebug, "NVML started in %.3f ms (nvmlInit %.3f ms, %u cards named)", (MonotonicNowNs() - begun) / 1e6,
         (inited - begun) / 1e6, kept);
  pthread_mutex_lock(&g_mu);
  g_ok = ok;
  g_card_count = kept;
  g_start = Start::kDone;
  pthread_cond_broadcast(&g_done);
  pthread_mutex_unlock(&g_mu);
}

void* StartNvmlThread(void*) {
  StartNvml();
  return nullptr;
}

// Claims the start for the caller when nobody has it.
bool ClaimStart() {
  pthread_mutex_lock(&g_mu);
  bool mine = g_start == Start::kNotStarted;
  if (mine) g_start = Start::kRunning;
  pthread_mutex_unlock(&g_mu);
  return mine;
}

}  // namespace

void StartNvmlInBackground() {
  if (!ClaimStart()) return;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  bool started = pthread_create(&thread, &attr, StartNvmlThread, nullptr) == 0;
  pthread_attr_destroy(&attr);
  if (!started) StartNvml();  // no thread to be had: here, then
}

bool NvmlCardByUuid(const char* uuid, nvmlDevice_t* out) {
  if (ClaimStart()) StartNvml();
  pthread_mutex_lock(&g_mu);
  while (g_start != Start::kDone) pthread_cond_wait(&g_done, &g_mu);
  pthread_mutex_unlock(&g_mu);
  if (!g_ok) return false;
  for (unsigned i = 0; i < g_card_count; ++i)
    if (strcmp(g_cards[i].uuid, uuid) == 0) {
      *out = g_cards[i].handle;
      return true;
    }
  // A card NVML did not enumerate (hidden from its index, or added later): ask by name.
  return g_nvml.nvmlDeviceGetHandleByUUID && g_nvml.nvmlDeviceGetHandleByUUID(uuid, out) == NVML_SUCCESS;
}

bool NvmlStarted() {
  pthread_mutex_lock(&g_mu);
  const bool started = g_start == Start::kDone && g_ok;
  pthread_mutex_unlock(&g_mu);
  return started;
}

void NvmlCardsAfterForkInChild() {
  pthread_mutex_init(&g_mu, nullptr);
  pthread_cond_init(&g_done, nullptr);
  if (g_start == Start::kRunning) g_start = Start::kNotStarted;
}

}  // namespace gs::enforcer
