#include "src/enforcer/card_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>

#include "src/common/clock.h"
#include "src/region/region.h"

namespace gs::enforcer {
namespace {

namespace rg = gs::region;

struct Guarded {
  std::atomic<rg::Card*> card{nullptr};
  int tenant = -1;
  uint64_t id = 0;
  unsigned share = 0;
  bool force = false;
  int priority = 0;
  std::atomic<bool> lost{false};
};

Guarded g_guarded[rg::kMaxDevices];
struct sigaction g_previous;
std::atomic<bool> g_installed{false};

size_t MappedBytes() {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (sizeof(rg::Card) + page - 1) / page * page;
}

// Replaces the mapping of a lost card with a private, initialised one.
bool ReplaceLostCard(Guarded& g) {
  rg::Card* card = g.card.load();
  void* p = mmap(card, MappedBytes(), PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  rg::InitCard(card);
  if (g.tenant >= 0) {
    rg::CardTenant& t = card->tenants[g.tenant];
    int64_t now = MonotonicNowNs();
    t.share.store(g.share);
    t.force.store(g.force ? 1 : 0);
    t.priority.store(g.priority);
    t.credit_at_ns.store(now);
    t.seen_ns.store(now);
    t.id.store(g.id);
  }
  g.lost.store(true);
  return true;
}

void OnBus(int sig, siginfo_t* info, void* context) {
  auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Guarded& g : g_guarded) {
    auto base = reinterpret_cast<uintptr_t>(g.card.load());
    if (base != 0 && addr >= base && addr < base + MappedBytes() && ReplaceLostCard(g)) return;  // runs again
  }
  // Not a card: what the program had, else the default action (the fault repeats on return).
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler == SIG_IGN) {
    return;
  } else if (g_previous.sa_handler != SIG_DFL && (g_previous.sa_flags & SA_SIGINFO) == 0) {
    g_previous.sa_handler(sig);
  } else {
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGBUS, &dfl, nullptr);
  }
}

}  // namespace

void GuardCard(int dev, region::Card* card, int tenant, uint64_t id, unsigned share, bool force, int priority) {
  if (dev < 0 || dev >= rg::kMaxDevices || card == nullptr) return;
  Guarded& g = g_guarded[dev];
  g.tenant = tenant;
  g.id = id;
  g.share = share;
  g.force = force;
  g.priority = priority;
  g.card.store(card);
  if (g_installed.exchange(true)) return;
  struct sigaction sa = {};
  sa.sa_sigaction = OnBus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &g_previous);
}

bool TakeCardLost(int dev) {
  return dev >= 0 && dev < rg::kMaxDevices && g_guarded[dev].lost.exchange(false);
}

}  // namespace gs::enforcer
