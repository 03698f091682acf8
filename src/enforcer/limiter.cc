#include "src/enforcer/limiter.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "src/common/clock.h"
#include "src/common/raw_log.h"
#include "src/enforcer/card_busy.h"
#include "src/enforcer/card_guard.h"
#include "src/enforcer/child_reset_mutex.h"
#include "src/enforcer/enforcer.h"
#include "src/enforcer/launch_cost.h"
#include "src/enforcer/limits.h"
#include "src/enforcer/nvml_cards.h"
#include "src/enforcer/part_decision.h"
#include "src/enforcer/starvation_guard.h"
#include "src/region/card.h"
#include "src/region/turn.h"

namespace gs::enforcer {
namespace {

namespace rg = gs::region;

// After draining, how long the controller waits for a thread of this process to ask for
// the card again before leaving the turn. A loop that synchronises after each kernel
// (burn, inference with a sync per step) asks again within microseconds of its sync
// returning; without this wait the controller, woken by the same completion, hands the
// card on first and that tenant is never seen waiting when the next holder is chosen, so
// turns just alternate whatever the shares and priorities say.
constexpr int64_t kRelaunchNs = 300'000;
// The controller looks at a held turn this often.
constexpr int64_t kPollNs = 250'000;
// A turn is not reopened for less than this (nor for less than two launches at the learned
// cost): each part ends in a drain that leaves the card idle until the next launch, and a
// part of one short kernel measures mostly that overhead, which would teach the launch cost
// too high.
constexpr int64_t kShortestPartNs = 1'000'000;

// This process on one device, split by who may touch what.
enum class Part : int { kOut, kIn, kLeaving };

// The card this process takes turns on: written once under g_join_mu before `joined` is
// released, read-only after.
struct Membership {
  std::atomic<bool> joined{false};  // joined lazily on the first slow-path launch
  bool join_failed = false;
  rg::Card* card = nullptr;
  int tenant = -1;
};

// The launch gate: what every launching thread reads and bumps on the fast path.
struct LaunchGate {
  std::atomic<bool> open{false};  // launches may go ahead now
  std::atomic<uint64_t> launches{0};
  // Launches this part of a turn may take: its time over the cost of a launch, so a deep
  // asynchronous queue cannot run far beyond the turn.
  std::atomic<int64_t> in_turn{0};
  std::atomic<int64_t> budget{0};
};

// What the thread that opens a part (a launching thread joining, or the controller
// reopening) writes before it publishes the part (TurnPart::state = kIn), and only the
// controller touches after, until it stores kOut.
struct OpenedPart {
  uint32_t seq = 0;  // the turn this process is part of
  int64_t joined_ns = 0;
  uint64_t launches_at_join = 0;
  PartProgress progress;
};

// This process's part in its container's turn: the hand-off word, what it hands over, and
// what launching threads and the controller share (atomics).
struct TurnPart {
  std::atomic<int> state{static_cast<int>(Part::kOut)};
  OpenedPart opened;
  std::atomic<int64_t> start{0};  // this process's part of the turn counts from here
  // When this process last left a turn, and which: rejoining that turn (other processes of
  // the container stayed in it) counts from then, not again from the turn's start.
  std::atomic<int64_t> left_at{0};
  std::atomic<uint32_t> left_seq{0};
  std::atomic<int> asking{0};  // threads of this process waiting in WaitForTurn
  // The contexts whose queued work the controller drains: each context this process
  // launched in on the device (a green context is one of its own), up to kDrainContexts.
  static constexpr int kDrainContexts = 8;
  std::atomic<CUcontext> ctxs[kDrainContexts] = {};
};

// What this process's waiters saw of the card: the turn word as first seen, and when (a
// turn that never changes hands and has no believable deadline is stuck), and when the
// turn was last another's.
struct TurnSeen {
  std::atomic<uint64_t> word{0};
  std::atomic<int64_t> at{0};
  std::atomic<int64_t> not_ours_at{0};
};

struct DeviceTurns {
  Membership member;
  LaunchGate gate;
  TurnPart part;
  LaunchCost cost;  // measured by the controller, read by launching threads
  TurnSeen seen;
  StarvationGuard guard;  // the starvation guard's ledger, in process memory only
  // The controller's alone: the time this process held turns here in all (its parts, up to
  // their last look), and how busy the card was in them.
  int64_t held_ns = 0;
  CardBusy busy;
};

DeviceTurns g_turns[rg::kMaxDevices];
ChildResetMutex g_join_mu;
ChildResetMutex g_turn_mu;  // joining a turn, per process
std::atomic<bool> g_controller_started{false};
// Set by the exit handler: the controller ends every part at once and reopens none.
std::atomic<bool> g_exiting{false};
std::atomic<bool> g_exit_handler_set{false};
// How long the exit handler waits for the controller to leave this process's turns.
constexpr int64_t kExitWaitNs = 20'000'000;
// The controller sleeps on this word between looks; a launch refused because its turn's
// launches are spent wakes it at once, so the turn goes on without an idle gap and the
// time the launches took is seen when they took it (not up to kPollNs later).
std::atomic<uint32_t> g_kick{0};
std::atomic<int> g_captures{0};
// The drain heartbeat: while the controller waits in cuCtxSynchronize for a turn's work (a
// kernel may run far past its turn), a thread of its own keeps the tenant's drain
// heartbeat on the card fresh. g_drain_seq is odd while a drain runs, for g_drain_entry.
std::atomic<bool> g_beat_started{false};
std::atomic<uint32_t> g_drain_seq{0};
std::atomic<rg::CardTenant*> g_drain_entry{nullptr};
constexpr int64_t kDrainBeatNs = 10'000'000;  // the drain heartbeat's period
// What a launching thread last resolved: its current context's device, and an explicit
// stream's. Valid while g_contexts_seen is unchanged: a context or stream that goes away
// bumps it, so a handle value the driver hands out again is resolved anew.
std::atomic<uint32_t> g_contexts_seen{0};
thread_local CUcontext t_ctx = nullptr;
thread_local int t_dev = -1;
thread_local uint32_t t_ctx_seen = 0;
thread_local CUstream t_stream = nullptr;
thread_local int t_stream_dev = -1;
thread_local uint32_t t_stream_seen = 0;

// Adds ctx to the contexts the controller drains on dev.
void NoteContext(int dev, CUcontext ctx) {
  if (dev < 0 || dev >= rg::kMaxDevices || ctx == nullptr) return;
  std::atomic<CUcontext>* ctxs = g_turns[dev].part.ctxs;
  for (int i = 0; i < TurnPart::kDrainContexts; ++i)
    if (ctxs[i].load() == ctx) return;
  for (int i = 0; i < TurnPart::kDrainContexts; ++i) {
    CUcontext none = nullptr;
    if (ctxs[i].compare_exchange_strong(none, ctx) || none == ctx) return;
  }
  // Full: the oldest is replaced, its work then drained only by the card's own order.
  GS_LOG(kInfo, "device %d: more than %d contexts launched in; the turn drains the newest", dev,
         TurnPart::kDrainContexts);
  for (int i = 0; i + 1 < TurnPart::kDrainContexts; ++i) ctxs[i].store(ctxs[i + 1].load());
  ctxs[TurnPart::kDrainContexts - 1].store(ctx);
}

// The best priority believed of another tenant (src/common/contract.h, kCardBestPriority).
int BestBelievedPriority() {
  return g_state.cfg.card_best_priority;
}

// Inlined: it is the whole launch path without a share.
__attribute__((always_inline)) inline bool AnyLimit() {
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
  const uint32_t seen = g_contexts_seen.load(std::memory_order_relaxed);
  if (ctx != t_ctx || seen != t_ctx_seen) {  // rare: the thread switched contexts
    t_ctx = ctx;
    t_ctx_seen = seen;
    t_dev = CurrentDevice();
    NoteContext(t_dev, ctx);
  }
  return t_dev;
}

// The device a launch on an explicit stream runs on: its stream's context's, which need not
// be the current one (a green context's stream, or a library's kernel launched with no
// context current, runs in the stream's context). The null and per-thread streams are the
// current context's.
int StreamDevice(CUstream stream) {
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return LaunchDevice();
  const uint32_t seen = g_contexts_seen.load(std::memory_order_relaxed);
  if (stream == t_stream && seen == t_stream_seen) return t_stream_dev;
  CUcontext ctx = nullptr;
  if (g_cuda.cuStreamGetCtx == nullptr || g_cuda.cuStreamGetCtx(stream, &ctx) != CUDA_SUCCESS || ctx == nullptr)
    return LaunchDevice();
  int dev = DeviceOfOrdinal(OrdinalOfContext(ctx));
  NoteContext(dev, ctx);
  t_stream = stream;
  t_stream_seen = seen;
  t_stream_dev = dev;
  return dev;
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, int64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000), static_cast<long>(timeout_ns % 1'000'000'000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  word->fetch_add(1);
  FutexWake(word);
}

void* BeatMain(void*) {
  for (;;) {
    uint32_t seq = g_drain_seq.load();
    if ((seq & 1) == 0) {
      FutexWait(&g_drain_seq, seq, 1'000'000'000);
      continue;
    }
    SleepUntilNs(MonotonicNowNs() + kDrainBeatNs);
    if (rg::CardTenant* e = g_drain_entry.load(); e != nullptr && g_drain_seq.load() == seq) {
      int64_t now = MonotonicNowNs();
      e->seen_ns.store(now);
      e->drain_ns.store(now);
    }
  }
  return nullptr;
}

// Starts `main` on a detached thread the first time `started` is found false; false when
// that start failed.
bool StartDetachedOnce(std::atomic<bool>* started, void* (*main)(void*)) {
  bool expected = false;
  if (!started->compare_exchange_strong(expected, true)) return true;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  bool ok = pthread_create(&t, &attr, main, nullptr) == 0;
  pthread_attr_destroy(&attr);
  return ok;
}

void StartBeat() {
  if (!StartDetachedOnce(&g_beat_started, BeatMain))
    GS_LOG(kWarn, "cannot start the drain heartbeat thread: a kernel longer than 200 ms past its turn may lose it");
}

// The container's identity on the card: one id per container and device, kept in the
// container's region so all its processes are one tenant.
uint64_t TenantId(int dev) {
  std::atomic<uint64_t>& id = g_state.region->devices[dev].card_tenant_id;
  uint64_t cur = id.load();
  if (cur != 0) return cur;
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  uint64_t fresh = (static_cast<uint64_t>(t.tv_nsec) * 0x9E3779B97F4A7C15ULL) ^
                   (static_cast<uint64_t>(getpid()) << 32) ^ static_cast<uint64_t>(t.tv_sec) ^
                   reinterpret_cast<uintptr_t>(&id);
  if (fresh == 0) fresh = 1;
  return id.compare_exchange_strong(cur, fresh) ? fresh : cur;
}

// Where the card region of a device is: GPUSLICE_CARDS_DIR/<uuid>, else a cards/
// directory beside the container's region (the container's processes then coordinate
// only among themselves), else an anonymous one for this process alone.
bool CardPath(int dev, char* out, size_t size) {
  const char* uuid = g_state.region->devices[dev].uuid;
  if (uuid[0] == 0 || memchr(uuid, '/', sizeof(g_state.region->devices[dev].uuid)) != nullptr) return false;
  if (g_state.cfg.cards_dir[0]) {
    snprintf(out, size, "%s/%.96s", g_state.cfg.cards_dir, uuid);
    return true;
  }
  if (g_state.private_region || g_state.cfg.region_path[0] == 0) return false;
  char dir[512];
  snprintf(dir, sizeof(dir), "%s", g_state.cfg.region_path);
  char* slash = strrchr(dir, '/');
  if (slash == nullptr) return false;
  snprintf(slash, sizeof(dir) - static_cast<size_t>(slash - dir), "/cards");
  mkdir(dir, 0777);
  snprintf(out, size, "%s/%.96s", dir, uuid);
  return true;
}

bool Join(int dev) {
  DeviceTurns& turns = g_turns[dev];
  if (turns.member.joined.load(std::memory_order_acquire)) return true;
  g_join_mu.lock();
  if (!turns.member.joined.load() && !turns.member.join_failed) {
    char path[640], msg[768];
    bool shared = CardPath(dev, path, sizeof(path));
    turns.member.card = rg::OpenCard(shared ? path : nullptr, msg, sizeof(msg));
    if (turns.member.card == nullptr && shared) {
      GS_LOG(kError, "%s: the compute share of device %d is coordinated within this process only", msg, dev);
      turns.member.card = rg::OpenCard(nullptr, msg, sizeof(msg));
    }
    if (turns.member.card) {
      // The entry the host handed the container when it made its slice, else one claimed
      // from the card (which a tenant that fills the card can deny).
      bool force = g_state.cfg.core_policy == CorePolicy::kForce;
      turns.member.tenant = CardEntry(dev) >= 0
                                ? rg::TakeCardEntry(turns.member.card, CardEntry(dev), TenantId(dev), SmShare(dev),
                                                    force, g_state.cfg.priority, MonotonicNowNs())
                                : rg::JoinCard(turns.member.card, TenantId(dev), SmShare(dev), force,
                                               g_state.cfg.priority, MonotonicNowNs());
      if (turns.member.tenant < 0)
        GS_LOG(kError, "the card region of device %d is full: its compute share is NOT enforced", dev);
      if (shared && turns.member.tenant >= 0)
        GuardCard(dev, turns.member.card, turns.member.tenant, TenantId(dev), SmShare(dev),
                  g_state.cfg.core_policy == CorePolicy::kForce, g_state.cfg.priority);
    }
    if (turns.member.card && turns.member.tenant >= 0)
      turns.member.joined.store(true, std::memory_order_release);
    else
      turns.member.join_failed = true;
  }
  g_join_mu.unlock();
  return turns.member.joined.load();
}

// This process leaves the turn it is part of; the last one of the container to leave
// hands the card on.
void Leave(DeviceTurns& turns) {
  turns.part.left_seq.store(turns.part.opened.seq);
  turns.part.left_at.store(MonotonicNowNs());
  if (rg::LeaveTurn(turns.member.card, static_cast<uint32_t>(turns.member.tenant), turns.part.opened.seq,
                    MonotonicNowNs(), BestBelievedPriority(), turns.busy.Permille()))
    FutexWakeAll(&turns.member.card->turn_futex);
  turns.part.state.store(static_cast<int>(Part::kOut));
}

void* ControllerMain(void*);

bool InAnyPart() {
  for (const DeviceTurns& turns : g_turns)
    if (turns.part.state.load() != static_cast<int>(Part::kOut)) return true;
  return false;
}

// At exit(): the parts of turns this process is in end now, so that the card goes to the
// next tenant at once rather than after the grace a holder that died in its turn gets
// (StuckGrace, 200 ms). Registered after the driver's own exit handler (the first launch
// comes after cuInit), so it runs first and the drain still reaches the driver. The
// controller ends the parts (one actor per part); this waits for it at most kExitWaitNs,
// after which the card recovers from this process as from a dead holder. A forked child
// inherits the registration and starts with no controller and no part.
void LeaveTurnsAtExit() {
  if (!g_controller_started.load()) return;
  g_exiting.store(true);
  FutexWakeAll(&g_kick);
  for (const int64_t give_up = MonotonicNowNs() + kExitWaitNs; InAnyPart() && MonotonicNowNs() < give_up;)
    SleepUntilNs(MonotonicNowNs() + 50'000);
}

void StartController() {
  if (!StartDetachedOnce(&g_controller_started, ControllerMain))
    GS_LOG(kError, "cannot start the compute limiter thread: the SM share is NOT enforced");
  bool unset = false;
  if (g_exit_handler_set.compare_exchange_strong(unset, true)) atexit(LeaveTurnsAtExit);
}

// This process takes part in the current turn until `deadline`: launches counted from
// now, as many allowed as the learned cost fits in the time left, the gate open. Its part
// counts from `start` (stored before the part is published, for the controller).
void OpenPart(DeviceTurns& turns, int64_t deadline, int64_t now, int64_t start, int64_t launches_taken) {
  turns.part.opened.progress.Saw(turns.gate.launches.load(), now);
  turns.part.opened.launches_at_join = turns.part.opened.progress.seen_launches;
  turns.part.opened.joined_ns = now;
  turns.gate.budget.store(std::max<int64_t>(1, (deadline - now) / turns.cost.Admit(now)));
  turns.part.start.store(start);
  turns.gate.in_turn.store(launches_taken);
  turns.part.state.store(static_cast<int>(Part::kIn));
  turns.gate.open.store(true, std::memory_order_release);
}

// Joins the turn of our tenant when it holds the card; true when launches may go ahead.
bool TryJoinTurn(DeviceTurns& turns, uint64_t w, int64_t now) {
  rg::Card* c = turns.member.card;
  g_turn_mu.lock();
  bool joined = false;
  int64_t deadline = 0;
  if (turns.part.state.load() == static_cast<int>(Part::kOut) &&
      rg::JoinTurn(c, static_cast<uint32_t>(turns.member.tenant), w, now, BestBelievedPriority(), &deadline)) {
    turns.part.opened.seq = rg::TurnSeq(w);
    // The card charges the turn from its hand-over; we count it from then too, but never
    // from before a waiter of ours last saw the turn another's (turn_start_ns may be forged).
    int64_t handed = std::min(now, c->turn_start_ns.load());
    int64_t from = std::max(handed, turns.seen.not_ours_at.load());
    if (turns.part.left_seq.load() == turns.part.opened.seq) from = std::max(from, turns.part.left_at.load());
    OpenPart(turns, deadline, now, std::min(from, now), /*launches_taken=*/1);  // this launch
    joined = true;
  } else if (turns.part.state.load() == static_cast<int>(Part::kIn) && turns.gate.open.load()) {
    joined = true;  // another thread of this process joined meanwhile
  }
  g_turn_mu.unlock();
  if (joined) StartController();
  return joined;
}

// The share this process is owed while it waits (StarvationGuard): its own, from the limits
// file, or kYieldShare while a tenant of better believed priority is active.
unsigned TrustedShare(int dev, const DeviceTurns& turns, int64_t now) {
  unsigned share = std::clamp(SmShare(dev), 1u, 100u);
  if (rg::BetterPriorityActive(turns.member.card, turns.member.tenant, g_state.cfg.priority, BestBelievedPriority(),
                               now))
    share = std::min(share, rg::kYieldShare);
  return share;
}

// A launch while a self-granted part runs (StarvationGuard): true when it goes ahead. The
// first launch after the part drains the queue (as the end of a turn does) and counts the
// part as got.
bool InGrant(int dev, DeviceTurns& turns, int64_t now) {
  switch (turns.guard.TakeGrantLaunch(now)) {
    case StarvationGuard::GrantLaunch::kNone:
      return false;
    case StarvationGuard::GrantLaunch::kGo:
      return true;
    case StarvationGuard::GrantLaunch::kEnded:
      break;
  }
  g_cuda.cuCtxSynchronize();  // the launching thread's context: the one this device's launches use
  int64_t end = MonotonicNowNs();
  turns.guard.EndGrant(end, TrustedShare(dev, turns, end));
  return false;
}

// Starts a self-granted part when the card owes this process more than the guard's bound.
bool StartGrant(int dev, DeviceTurns& turns, int64_t now) {
  if (!turns.guard.StartGrant(now, turns.cost.Learned())) return InGrant(dev, turns, now);
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    GS_LOG(kWarn,
           "compute limiter: the card of device %d is not handing out turns fairly (owed %lld ms of GPU time at a "
           "%u %% share): going ahead without the turn for %lld ms at a time while that lasts",
           dev, static_cast<long long>(turns.guard.owed() / 1'000'000), TrustedShare(dev, turns, now),
           static_cast<long long>(StarvationGuard::kOwedBoundNs / 1'000'000));
  return true;
}

// Our entry as this process trusts it: re-published when it waits, so that another tenant
// rewriting it (a worse priority, a smaller share) is undone while we compete. An entry
// the host handed us is ours whatever id another wrote into it.
void Republish(int dev, rg::CardTenant& t) {
  if (CardEntry(dev) >= 0) t.id.store(TenantId(dev), std::memory_order_relaxed);
  t.share.store(std::clamp(SmShare(dev), 1u, 100u), std::memory_order_relaxed);
  t.force.store(g_state.cfg.core_policy == CorePolicy::kForce ? 1 : 0, std::memory_order_relaxed);
  t.priority.store(g_state.cfg.priority, std::memory_order_relaxed);
}

void WaitForTurn(int dev) {
  DeviceTurns& turns = g_turns[dev];
  if (!Join(dev)) return;  // no card: not enforced (logged once in Join)
  rg::Card* c = turns.member.card;
  const uint32_t me = static_cast<uint32_t>(turns.member.tenant);
  if (TakeCardLost(dev))
    GS_LOG(kError,
           "the card region of device %d was shrunk under us (another tenant?): its compute share is now "
           "coordinated within this process only",
           dev);
  const int64_t asked = MonotonicNowNs();
  if (InGrant(dev, turns, asked)) return;
  Republish(dev, c->tenants[me]);
  struct Asking {
    std::atomic<int>& n;
    // The first thread to ask starts the stretch the guard counts as waited.
    Asking(std::atomic<int>& a, StarvationGuard& guard) : n(a) {
      if (n.fetch_add(1) == 0) guard.StartWaiting(MonotonicNowNs());
    }
    ~Asking() { n.fetch_sub(1); }
  } asking(turns.part.asking, turns.guard);
  for (;;) {
    int64_t now = MonotonicNowNs();
    uint32_t futex = c->turn_futex.load();
    uint64_t w = c->turn.load();
    c->tenants[me].seen_ns.store(now);
    // A turn that never changes hands and has no believable deadline ends kTurnMaxNs after
    // a waiter of ours first saw it (ReadTurn). (A holder that keeps moving a believable
    // deadline and bumping the sequence is left to the starvation guard.)
    uint64_t seen = turns.seen.word.load();
    if (seen != w && turns.seen.word.compare_exchange_strong(seen, w)) turns.seen.at.store(now);
    const rg::BelievedTurn turn = rg::ReadTurn(c, w, me, turns.seen.at.load(), now);
    const uint32_t holder = turn.holder;
    if (holder != me) turns.seen.not_ours_at.store(now);
    if (holder == me && turns.part.state.load() == static_cast<int>(Part::kOut)) {
      bool expired = turn.deadline_known && now >= turn.deadline;
      if (!expired && TryJoinTurn(turns, w, now)) {
        GS_LOG(kDebug, "device %d: joined a turn with %lld launches allowed, after asking for %.3f ms", dev,
               static_cast<long long>(turns.gate.budget.load()), (now - asked) / 1e6);
        return;
      }
      // Our turn is over and no process of ours is in it any more: hand it on ourselves.
      if (expired && turn.active == 0 && rg::HandOverTurn(c, me, w, now, BestBelievedPriority()))
        FutexWakeAll(&c->turn_futex);
    } else if (holder == me && turns.gate.open.load()) {
      if (turns.gate.in_turn.fetch_add(1) < turns.gate.budget.load()) return;
      // The turn's launches are spent: the controller drains them, then goes on or hands over.
      FutexWakeAll(&g_kick);
    } else if (holder == rg::kNoHolder && rg::GiveFreeCard(c, me, w, now, BestBelievedPriority())) {
      FutexWakeAll(&c->turn_futex);
      continue;
    }
    // A holder far past its deadline is stuck, dead or hostile: take the card from it. That
    // includes a dead process of a tenant whose slot we have since taken over (then the
    // holder is "us", but no process of ours is in the turn), and a holder that is no
    // tenant at all (a garbage turn word).
    bool ours_inside = holder == me && turns.part.state.load() != static_cast<int>(Part::kOut);
    if (rg::TurnIsStuck(c, turn, ours_inside, now) && rg::TakeStuckTurn(c, w)) {
      // A turn restored as it was is not believed again before another kTurnMaxNs.
      turns.seen.word.store(rg::PackTurn(turn.seq + 1, rg::kNoHolder, 0));
      turns.seen.at.store(now);
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true))
        GS_LOG(kWarn, "compute limiter: the tenant holding device %d overran its turn by %lld ms; taking it", dev,
               static_cast<long long>((now - turn.deadline) / 1'000'000));
      FutexWakeAll(&c->turn_futex);
      continue;
    }
    // Whatever the turn's state (ours ending, another's, none), we want the card: the
    // next holder is chosen among the tenants seen wanting it.
    c->tenants[me].wants_ns.store(now);
    if (turns.part.state.load() == static_cast<int>(Part::kOut)) {
      // Another tenant draining a kernel past its believed deadline: that wait is excused.
      bool overrun = holder != me && holder != rg::kNoHolder && turn.deadline_known && now > turn.deadline &&
                     rg::Draining(c, holder, now);
      turns.guard.AccrueWaiting(now, TrustedShare(dev, turns, now), overrun);
      if (StartGrant(dev, turns, now)) return;
    }
    // Sleep until the turn changes hands, re-announcing the wish before it goes stale.
    FutexWait(&c->turn_futex, futex, std::min<int64_t>(rg::kWantFreshNs / 2, 1'000'000));
  }
}

// Called by the controller after draining, when a thread of ours asked for the card again
// before the turn's deadline: this process takes part in the turn again (the turn word
// still counts it). False when the turn is no longer ours.
bool ReopenTurn(DeviceTurns& turns, int64_t now) {
  rg::Card* c = turns.member.card;
  if (!rg::HoldsTurn(c, static_cast<uint32_t>(turns.member.tenant), turns.part.opened.seq)) return false;
  int64_t deadline = rg::TurnDeadline(c, turns.part.opened.seq, now);
  // Too little time left for a part worth its drain: the turn ends here, and what is left
  // of it is not charged (the tenant keeps that credit for its next turn). The learned cost,
  // not the remembered high one: after a long kernel a turn admits one launch a part, and
  // going on with those is still better than handing the card over after each.
  if (deadline <= now || deadline - now < std::max(kShortestPartNs, 2 * turns.cost.Learned())) return false;
  OpenPart(turns, deadline, now, now, /*launches_taken=*/0);
  FutexWakeAll(&c->turn_futex);  // our waiting threads sleep on it
  return true;
}

// Waits for the work this process queued on this device (cuCtxSynchronize in its context),
// keeping the tenant's drain heartbeat on the card meanwhile, so that waiters neither take
// the card from it nor count the wait as the card's unfairness while a long kernel ends.
// The last heartbeat stays: the card is handed over or the turn goes on within kRelaunchNs,
// and it is stale kDrainFreshNs later anyway.
void Drain(DeviceTurns& turns) {
  rg::CardTenant& me = turns.member.card->tenants[turns.member.tenant];
  bool draining = false;
  for (auto& slot : turns.part.ctxs) {
    CUcontext ctx = slot.load();
    if (ctx == nullptr || g_cuda.cuCtxSetCurrent(ctx) != CUDA_SUCCESS) continue;
    if (!draining) {
      me.drain_ns.store(MonotonicNowNs());
      g_drain_entry.store(&me);
      g_drain_seq.fetch_add(1);  // odd: draining
      FutexWake(&g_drain_seq);
      draining = true;
    }
    g_cuda.cuCtxSynchronize();
  }
  if (draining) g_drain_seq.fetch_add(1);
}

// A part of a turn this process held for `held` until `now`: what the starvation guard
// counts as got, and the held time the card's busy figure is taken over.
void CountHeldPart(int dev, DeviceTurns& turns, int64_t held, int64_t now) {
  turns.guard.CountHeld(held, now, TrustedShare(dev, turns, now));
  turns.held_ns += held;
}

// Our part of a turn another tenant took from us (a stuck-turn recovery), its work
// drained by `now`: nobody hands this turn over, so we charge what we held of it ourselves,
// from our own clock rather than the card's turn start; otherwise a tenant whose turns are
// taken would never pay for them and keep being picked. Each process of a container in the
// turn charges its own part.
void ChargeOwnPart(int dev, DeviceTurns& turns, int64_t now) {
  const int64_t held = now - turns.part.start.load();
  rg::Charge(turns.member.card, turns.member.tenant, held, now, BestBelievedPriority());
  CountHeldPart(dev, turns, held, now);
  turns.part.state.store(static_cast<int>(Part::kOut));
}

// How busy the card was in this process's turns on region device dev (CardBusy), for a
// tenant held to its share: asked of NVML every CardBusy::kSampleNs.
void SampleCardBusy(int dev, DeviceTurns& turns) {
  if (g_state.cfg.core_policy != CorePolicy::kForce || !turns.member.joined.load(std::memory_order_acquire)) return;
  const int64_t now = MonotonicNowNs();
  if (g_exiting.load()) return turns.busy.Unknown(now);  // NVML may be shutting down: whole turns
  if (!turns.busy.Due(now)) return;
  nvmlDevice_t card;
  nvmlUtilization_t util{};
  // NVML's start is not waited for here (the controller must not miss a deadline for it):
  // until it is done, whole turns are charged.
  if (!NvmlStarted() || g_nvml.nvmlDeviceGetUtilizationRates == nullptr || g_state.device_uuid[dev][0] == 0 ||
      !NvmlCardByUuid(g_state.device_uuid[dev], &card) ||
      g_nvml.nvmlDeviceGetUtilizationRates(card, &util) != NVML_SUCCESS)
    return turns.busy.Unknown(now);
  // Held so far: the parts counted, and the one this process is in now.
  const int64_t in_part = turns.part.state.load() == static_cast<int>(Part::kOut) ? 0 : now - turns.part.start.load();
  turns.busy.Sample(now, util.gpu, turns.held_ns + std::max<int64_t>(0, in_part));
}

// Ends this process's part of a turn when its time is up or it stopped launching.
void* ControllerMain(void*) {
  StartBeat();
  for (;;) {
    bool any = false;
    for (int dev = 0; dev < rg::kMaxDevices; ++dev) {
      DeviceTurns& turns = g_turns[dev];
      SampleCardBusy(dev, turns);
      if (turns.part.state.load() != static_cast<int>(Part::kIn)) continue;
      any = true;
      rg::Card* c = turns.member.card;
      int64_t now = MonotonicNowNs();
      c->tenants[turns.member.tenant].seen_ns.store(now);
      const uint32_t me = static_cast<uint32_t>(turns.member.tenant);
      // The turn's start before the word: a turn handed on after this look has a new start,
      // so an extension from this one is refused rather than made to another's turn.
      const int64_t start_seen = c->turn_start_ns.load();
      PartLook look;
      look.now = now;
      look.holds_turn = rg::HoldsTurn(c, me, turns.part.opened.seq);
      look.launches = turns.gate.launches.load(std::memory_order_relaxed);
      look.deadline = look.holds_turn ? rg::TurnDeadline(c, turns.part.opened.seq, INT64_MAX) : INT64_MAX;
      look.others_wait = look.holds_turn && now >= look.deadline && rg::OthersWait(c, turns.member.tenant, now);
      look.in_turn = turns.gate.in_turn.load();
      look.budget = turns.gate.budget.load();
      PartDecision decision = DecidePart(look, &turns.part.opened.progress);
      const bool exiting = g_exiting.load();
      if (exiting && (decision.action == PartAction::kGoOn || decision.action == PartAction::kExtendAlone))
        decision = {PartAction::kEnd, EndReason::kExit};
      if (decision.action == PartAction::kGoOn) continue;
      if (decision.action == PartAction::kTakenFromUs) {
        turns.gate.open.store(false);  // taken from us: a stuck-turn recovery by another tenant
        turns.part.state.store(static_cast<int>(Part::kLeaving));
        Drain(turns);
        ChargeOwnPart(dev, turns, MonotonicNowNs());
        continue;
      }
      if (decision.action == PartAction::kExtendAlone) {
        // Alone on the card: keep it without draining.
        int64_t length = 0;
        const rg::Extension e = rg::ExtendTurnAlone(c, me, start_seen, g_state.cfg.core_policy == CorePolicy::kForce,
                                                    now, BestBelievedPriority(), &length, turns.busy.Permille());
        if (e == rg::Extension::kExtended)
          turns.gate.budget.fetch_add(std::max<int64_t>(1, length / turns.cost.Admit(now)));
        if (e != rg::Extension::kNotAllowed) continue;
      }
      // Close the gate, let our queued work finish, then leave the turn.
      turns.part.state.store(static_cast<int>(Part::kLeaving));
      turns.gate.open.store(false);
      int64_t closed = MonotonicNowNs();
      Drain(turns);
      int64_t drained = MonotonicNowNs();
      // The card ran only our container's work since we joined: what one launch costs.
      const uint64_t launched = turns.gate.launches.load() - turns.part.opened.launches_at_join;
      turns.cost.Learn(launched, turns.part.opened.joined_ns, closed, drained);
      GS_LOG(kDebug,
             "device %d: turn part ended (%s) after %.3f ms, drained in %.3f ms, %llu launches of %lld allowed, a "
             "launch now counts %lld ns, the card busy %u per mille of the turns",
             dev, EndReasonName(decision.reason), (closed - turns.part.opened.joined_ns) / 1e6,
             (drained - closed) / 1e6, static_cast<unsigned long long>(launched),
             static_cast<long long>(turns.gate.budget.load()), static_cast<long long>(turns.cost.Admit(drained)),
             turns.busy.Permille());
      if (!rg::HoldsTurn(c, me, turns.part.opened.seq)) {
        ChargeOwnPart(dev, turns, drained);  // taken from us while we drained (longer than the card believed)
        continue;
      }
      while (!exiting && turns.part.asking.load() == 0 && MonotonicNowNs() - drained < kRelaunchNs)
        SleepUntilNs(MonotonicNowNs() + 20'000);
      now = MonotonicNowNs();
      // Our part so far; a reopened one counts from now.
      CountHeldPart(dev, turns, now - turns.part.start.load(), now);
      if (!exiting && turns.part.asking.load() > 0) {
        if (now < look.deadline && ReopenTurn(turns, now)) continue;  // asked again in time: the turn goes on
        c->tenants[turns.member.tenant].wants_ns.store(now);          // chosen among the waiters when handing over
      }
      Leave(turns);
    }
    FutexWait(&g_kick, g_kick.load(), any ? kPollNs : 2'000'000);
  }
  return nullptr;
}

__attribute__((constructor)) void RegisterAtFork() {
  // The child of a fork has no controller thread and is part of no turn.
  pthread_atfork(nullptr, nullptr, [] {
    g_controller_started.store(false);
    g_exiting.store(false);
    g_beat_started.store(false);
    g_drain_seq.store(0);
    g_join_mu.ResetInChild();
    g_turn_mu.ResetInChild();
    t_ctx = nullptr;
    for (DeviceTurns& turns : g_turns) {
      turns.gate.open.store(false);
      turns.part.state.store(static_cast<int>(Part::kOut));
      turns.part.left_seq.store(0);
      turns.guard.Reset();  // the guard's ledger is per process: the child starts with none
      turns.held_ns = 0;    // and so are its held time and the card's busy figure
      turns.busy = CardBusy{};
    }
  });
}

}  // namespace

void Limiter::CaptureStarted() {
  g_captures.fetch_add(1, std::memory_order_relaxed);
}
bool Limiter::AnyCapture() {
  return g_captures.load(std::memory_order_relaxed) > 0;
}
void Limiter::CaptureEnded() {
  int cur = g_captures.load(std::memory_order_relaxed);
  while (cur > 0 && !g_captures.compare_exchange_weak(cur, cur - 1, std::memory_order_relaxed)) {
  }
}

namespace {
// The gate of region device dev (Gate): the fast path while this process is part of a turn
// with launches left, else the capture check and the wait for a turn.
__attribute__((always_inline)) inline void Admit(int dev, CUstream stream) {
  DeviceTurns& turns = g_turns[dev];
  if (turns.gate.open.load(std::memory_order_relaxed) &&
      turns.gate.in_turn.fetch_add(1, std::memory_order_relaxed) < turns.gate.budget.load(std::memory_order_relaxed)) {
    turns.gate.launches.fetch_add(1, std::memory_order_relaxed);  // our turn: the fast path
    return;
  }
  // A launch into a capturing stream only records a graph node: the graph's launches pay.
  // The driver is asked only while some capture is in progress.
  if (g_captures.load(std::memory_order_relaxed) > 0) {
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (g_cuda.cuStreamIsCapturing && g_cuda.cuStreamIsCapturing(stream, &capture) == CUDA_SUCCESS &&
        capture != CU_STREAM_CAPTURE_STATUS_NONE)
      return;
  }
  if (SmShare(dev) == 0) return;
  WaitForTurn(dev);
  turns.gate.launches.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

void Limiter::Gate(CUstream stream) {
  if (!AnyLimit() || g_state.region == nullptr) return;
  int dev = StreamDevice(stream);
  if (dev < 0) return;
  Admit(dev, stream);
}

void Limiter::GateOn(int dev, CUcontext ctx, CUstream stream) {
  if (!Shared(dev)) return;
  // The controller drains the turn's work in this context.
  NoteContext(dev, ctx);
  Admit(dev, stream);
}

void Limiter::ContextGone(CUcontext ctx) {
  g_contexts_seen.fetch_add(1);
  if (ctx == nullptr) return;
  for (auto& turns : g_turns)
    for (auto& slot : turns.part.ctxs) {
      CUcontext was = ctx;
      slot.compare_exchange_strong(was, nullptr);
    }
}

void Limiter::StreamGone() {
  g_contexts_seen.fetch_add(1);
}

bool Limiter::Active() {
  return AnyLimit() && g_state.region != nullptr;
}

bool Limiter::Shared(int dev) {
  return dev >= 0 && dev < rg::kMaxDevices && Active() && SmShare(dev) > 0;
}

}  // namespace gs::enforcer
