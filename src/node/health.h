// Watches GPU health: critical XIDs from NVML event sets (application XIDs ignored,
// configurable) and GPUs falling off the bus make a GPU's slices Unhealthy; a GPU that
// stays quiet for the recovery period (and is not lost) is Healthy again. Each second it
// also logs memory a card holds under no process (src/node/unlisted_memory.h).
// Runs on its own thread; talks to the SliceBook only.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>

#include "src/node/config.h"
#include "src/node/slice_book.h"
#include "src/node/unlisted_memory.h"
#include "src/platform/gpu_driver.h"

namespace gs::node {

class HealthWatcher {
 public:
  HealthWatcher(const Config& cfg, platform::GpuDriver* driver, SliceBook* book);
  // Until stop; calls beat() once per iteration (at least every ~1.5 s while it runs).
  void Run(const std::atomic<bool>& stop, const std::function<void()>& beat);

 private:
  void Check();
  const Config& cfg_;
  platform::GpuDriver* driver_;
  SliceBook* book_;
  std::map<std::string, int64_t> last_error_;  // GPU UUID -> monotonic seconds
  UnlistedMemoryWatch unlisted_;
};

}  // namespace gs::node
