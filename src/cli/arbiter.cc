#include "src/cli/arbiter.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <map>
#include <set>

#include "src/common/clock.h"
#include "src/common/raw_log.h"
#include "src/model/priorities.h"
#include "src/region/region.h"

namespace gs::cli {
namespace {

struct Member {
  size_t region;  // index in the step's regions
  int device;     // index in the region
  size_t user;    // index in its card's user list
};

uint64_t WallMicros() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000 + static_cast<uint64_t>(t.tv_nsec) / 1000;
}

}  // namespace

void PriorityArbiter::Step(const std::vector<std::string>& region_paths) {
  std::vector<region::Region*> regions;
  for (const auto& path : region_paths) {
    if (access(path.c_str(), F_OK) != 0) continue;  // OpenRegion would create it
    region::OpenError err;
    char msg[256];
    if (region::Region* r = region::OpenRegion(path.c_str(), &err, msg, sizeof(msg))) regions.push_back(r);
  }
  // Per card: the users (one per region using it) and where each decision goes.
  std::map<std::string, std::vector<model::CardUser>> users;
  std::map<std::string, std::vector<Member>> members;
  std::vector<std::set<uint32_t>> pids(regions.size());
  for (size_t i = 0; i < regions.size(); ++i) {
    region::Region* r = regions[i];
    int priority = INT_MAX;
    for (const auto& slot : r->procs) {
      if (slot.pid.load() == 0) continue;
      priority = std::min(priority, static_cast<int>(slot.priority.load()));
      if (uint32_t host = slot.host_pid.load()) pids[i].insert(host);
    }
    if (priority == INT_MAX) continue;  // no live process
    for (int dev = 0; dev < region::kMaxDevices; ++dev) {
      const char* uuid = r->devices[dev].uuid;
      if (uuid[0] == 0) continue;
      members[uuid].push_back({i, dev, users[uuid].size()});
      users[uuid].push_back({priority, 0});
    }
  }
  uint64_t since = WallMicros() - kWindowUs;
  for (auto& [uuid, card] : users) {
    // Equal priorities decide nothing whatever the use: no driver query then (the usual case).
    bool mixed = std::any_of(card.begin(), card.end(), [&](const auto& u) { return u.priority != card[0].priority; });
    auto samples = mixed ? driver_->ProcessUtilization(uuid, since)
                         : StatusOr<std::vector<platform::ProcessUtil>>(std::vector<platform::ProcessUtil>());
    if (samples.ok())
      for (const auto& m : members[uuid]) {
        unsigned util = 0;
        for (const auto& s : *samples)
          if (pids[m.region].count(s.pid)) util += s.sm_util;
        card[m.user].util = std::min(util, 100u);
      }
    auto decisions = model::ArbitrateCard(card);
    for (size_t i = 0; i < card.size(); ++i)
      GS_LOG(kDebug, "priorities on %s: user %zu priority %d util %u%% -> yield %d boost %d", uuid.c_str(), i,
             card[i].priority, card[i].util, decisions[i].yield ? 1 : 0, decisions[i].boost ? 1 : 0);
    int64_t now = MonotonicNowNs();
    for (const auto& m : members[uuid]) {
      region::Device& d = regions[m.region]->devices[m.device];
      d.yield.store(decisions[m.user].yield ? 1 : 0);
      d.boost.store(decisions[m.user].boost ? 1 : 0);
      d.arbiter_ns.store(now);
    }
  }
  for (region::Region* r : regions) region::CloseRegion(r);
}

}  // namespace gs::cli
