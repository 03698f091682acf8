#include "src/enforcer/limiter.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "src/common/clock.h"
#include "src/common/raw_log.h"
#include "src/enforcer/enforcer.h"

namespace gs::enforcer {
namespace {

constexpr int64_t kPeriodNs = 50'000'000;      // controller step
constexpr int64_t kBurstNs = 100'000'000;      // unused budget kept at most (x share)
constexpr int64_t kMaxDebtNs = 2'000'000'000;  // debt beyond this is forgiven (stuck measurements)
// What a launch pre-pays before its cost has been learned: enough to hold back a deep
// asynchronous queue from the first launch; the first measurement corrects it.
constexpr int64_t kInitialLaunchCostNs = 1'000'000;

std::atomic<bool> g_controller_started{false};
std::atomic<int> g_captures{0};
thread_local CUcontext t_ctx = nullptr;
thread_local int t_dev = -1;

bool AnyLimit() {
  static const bool any = [] {
    if (g_state.cfg.core_policy == CorePolicy::kDisable) return false;
    for (unsigned s : g_state.cfg.sm_limit)
      if (s) return true;
    return false;
  }();
  return any;
}

int LaunchDevice() {
  CUcontext ctx = nullptr;
  if (g_cuda.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) return -1;
  if (ctx != t_ctx) {  // rare: the thread switched contexts
    t_ctx = ctx;
    t_dev = CurrentDevice();
  }
  return t_dev;
}

// The container's and everyone else's SM utilisation on a device since `since_us`.
bool Measure(nvmlDevice_t d, unsigned long long since_us, unsigned* mine, unsigned* others) {
  nvmlProcessUtilizationSample_t samples[256];
  unsigned n = 256;
  nvmlReturn_t rc = g_nvml.nvmlDeviceGetProcessUtilization(d, samples, &n, since_us);
  *mine = *others = 0;
  if (rc == NVML_ERROR_NOT_FOUND) return true;  // nobody ran anything
  if (rc != NVML_SUCCESS) return false;
  for (unsigned i = 0; i < n; ++i) {
    bool ours = false;
    for (const auto& slot : g_state.region->procs)
      if (slot.pid.load() && slot.host_pid.load() == samples[i].pid) ours = true;
    (ours ? *mine : *others) += samples[i].smUtil;
  }
  *mine = std::min(*mine, 100u);
  *others = std::min(*others, 100u);
  return true;
}

void* ControllerMain(void*) {
  if (!NvmlReady() || g_nvml.nvmlInit_v2() != NVML_SUCCESS) {
    GS_LOG(kError, "NVML is unavailable: the compute share cannot be measured and is NOT enforced");
    return nullptr;
  }
  nvmlDevice_t handles[region::kMaxDevices] = {};
  unsigned long long last_us[region::kMaxDevices] = {};
  for (;;) {
    SleepUntilNs(MonotonicNowNs() + kPeriodNs / 2);
    region::Region* r = g_state.region;
    for (int dev = 0; dev < region::kMaxDevices; ++dev) {
      region::Device& d = r->devices[dev];
      unsigned limit = d.sm_limit.load();
      if (g_state.cfg.sm_limit[dev] && (limit == 0 || g_state.cfg.sm_limit[dev] < limit))
        limit = g_state.cfg.sm_limit[dev];
      if (limit == 0 || d.uuid[0] == 0) continue;
      // The node's priority arbiter (CUDA_TASK_PRIORITY): while a higher-priority container
      // is active on this card, keep only a small share and never take idle capacity; when
      // only lower-priority ones are active beside us, their use counts as idle capacity.
      bool arbitrated = MonotonicNowNs() - d.arbiter_ns.load() < region::kArbiterFreshNs;
      bool yield = arbitrated && d.yield.load() != 0;
      bool boost = arbitrated && d.boost.load() != 0 && !yield;
      if (yield) limit = std::min(limit, region::kYieldShare);
      if (handles[dev] == nullptr && g_nvml.nvmlDeviceGetHandleByUUID(d.uuid, &handles[dev]) != NVML_SUCCESS) continue;
      int64_t now = MonotonicNowNs(), prev = d.controller_ns.load();
      if (now - prev < kPeriodNs || !d.controller_ns.compare_exchange_strong(prev, now)) continue;
      if (prev == 0) prev = now - kPeriodNs;
      timespec wall;
      clock_gettime(CLOCK_REALTIME, &wall);
      unsigned long long now_us = static_cast<unsigned long long>(wall.tv_sec) * 1'000'000 + wall.tv_nsec / 1000;
      unsigned long long since = now_us - static_cast<unsigned long long>((now - prev) / 1000);
      if (last_us[dev] == 0) last_us[dev] = since;
      unsigned mine = 0, others = 0;
      if (!Measure(handles[dev], since, &mine, &others)) continue;
      bool force = r->core_policy.load() == static_cast<uint32_t>(CorePolicy::kForce);
      Limiter::Step s =
          Limiter::Reconcile(d.lead_ns.load(), d.charged_ns.exchange(0), d.launches.exchange(0),
                             d.launch_cost_ns.load(), limit, force || yield, mine, boost ? 0 : others, now - prev);
      d.lead_ns.store(s.lead_ns);
      // Launches take from tokens concurrently: add the delta, then clamp.
      int64_t t = d.tokens.fetch_add(s.token_delta) + s.token_delta;
      int64_t hi = kBurstNs * s.share / 100;
      if (t > hi) d.tokens.fetch_sub(t - hi);
      if (t < -kMaxDebtNs) d.tokens.fetch_add(-kMaxDebtNs - t);
      d.launch_cost_ns.store(s.launch_cost_ns);
      d.measured_util.store(mine);
      d.effective_share.store(s.share);
      GS_LOG(kDebug,
             "limiter: device %d used %u%% (others %u%%) of %lld ms, share %u%%, budget %lld us, launch cost %lld us",
             dev, mine, others, static_cast<long long>((now - prev) / 1000000), s.share,
             static_cast<long long>(d.tokens.load() / 1000), static_cast<long long>(s.launch_cost_ns / 1000));
    }
  }
  return nullptr;
}

void StartController() {
  bool expected = false;
  if (!g_controller_started.compare_exchange_strong(expected, true)) return;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, ControllerMain, nullptr) != 0)
    GS_LOG(kError, "cannot start the compute limiter thread: the SM share is NOT enforced");
  pthread_attr_destroy(&attr);
}

__attribute__((constructor)) void RegisterAtFork() {
  // The child of a fork has no controller thread: let its first launch start one.
  pthread_atfork(nullptr, nullptr, [] {
    g_controller_started.store(false);
    t_ctx = nullptr;
  });
}

}  // namespace

Limiter::Step Limiter::Reconcile(int64_t lead_ns, int64_t charged_ns, uint64_t launches, int64_t launch_cost_ns,
                                 unsigned sm_limit, bool force, unsigned container_util, unsigned others_util,
                                 int64_t elapsed_ns) {
  Step s;
  // A container alone on its card may use idle capacity unless the policy is force.
  s.share = (!force && others_util == 0) ? 100 : sm_limit;
  int64_t used = elapsed_ns * container_util / 100;
  int64_t refill = elapsed_ns * s.share / 100;
  int64_t lead = lead_ns + charged_ns;
  int64_t matched = std::min(used, lead);
  lead -= matched;
  s.token_delta = refill - (used - matched);
  // The GPU had idle time: nothing of ours is waiting, the rest of the lead was an
  // over-estimate. (NVML percentages are whole numbers: leave a margin.)
  bool drained = container_util + others_util < 90;
  if (drained && lead > 0) {
    s.token_delta += lead;
    lead = 0;
  }
  s.lead_ns = lead;
  s.launch_cost_ns = launch_cost_ns;
  if (launches > 0 && used > 0) {
    int64_t per_launch = used / static_cast<int64_t>(launches);
    s.launch_cost_ns = launch_cost_ns == 0 ? per_launch : (launch_cost_ns * 3 + per_launch) / 4;
  } else if (launches > 0 && drained) {
    // Everything launched has run and NVML read 0 %: under 1 % of the period was used,
    // which bounds one launch's cost (many tiny kernels must not stay throttled).
    // At most halve per step: one misleading step (a launch at its very end) cannot
    // collapse the estimate.
    int64_t bound = std::max<int64_t>(1, elapsed_ns / 100 / static_cast<int64_t>(launches));
    int64_t cur = launch_cost_ns == 0 ? kInitialLaunchCostNs : launch_cost_ns;
    s.launch_cost_ns = std::max(bound, cur / 2);
  }
  return s;
}

void Limiter::CaptureStarted() {
  g_captures.fetch_add(1, std::memory_order_relaxed);
}
void Limiter::CaptureEnded() {
  int cur = g_captures.load(std::memory_order_relaxed);
  while (cur > 0 && !g_captures.compare_exchange_weak(cur, cur - 1, std::memory_order_relaxed)) {
  }
}

void Limiter::Gate(CUstream stream) {
  if (!AnyLimit() || g_state.region == nullptr) return;
  int dev = LaunchDevice();
  if (dev < 0) return;
  // A launch into a capturing stream only records a graph node: the graph's launches pay.
  // The driver is asked only while some capture is in progress.
  if (g_captures.load(std::memory_order_relaxed) > 0) {
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (g_cuda.cuStreamIsCapturing && g_cuda.cuStreamIsCapturing(stream, &capture) == CUDA_SUCCESS &&
        capture != CU_STREAM_CAPTURE_STATUS_NONE)
      return;
  }
  region::Device& d = g_state.region->devices[dev];
  unsigned limit = g_state.cfg.sm_limit[dev] ? g_state.cfg.sm_limit[dev] : d.sm_limit.load();
  if (limit == 0) return;
  if (!g_controller_started.load(std::memory_order_relaxed)) StartController();
  // Over budget: wait for time to pay the debt (the controller keeps reconciling). A launch
  // goes ahead while the budget is not negative and pays after, so the launch that
  // overdraws it still runs and its real cost shows up in the next measurement.
  int64_t left = d.tokens.load(std::memory_order_relaxed);
  while (left < 0) {
    unsigned share = std::max(1u, d.effective_share.load(std::memory_order_relaxed));
    int64_t wait = std::min<int64_t>(-left * 100 / share, 10'000'000);
    SleepUntilNs(MonotonicNowNs() + std::max<int64_t>(wait, 200'000));
    left = d.tokens.load(std::memory_order_relaxed);
  }
  int64_t cost = d.launch_cost_ns.load(std::memory_order_relaxed);
  if (cost == 0) cost = kInitialLaunchCostNs;
  d.launches.fetch_add(1, std::memory_order_relaxed);
  d.charged_ns.fetch_add(cost, std::memory_order_relaxed);
  d.tokens.fetch_sub(cost, std::memory_order_relaxed);
}

}  // namespace gs::enforcer
