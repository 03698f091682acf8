// Prometheus metrics of a node: per GPU (memory, utilisation, slices, health) and per
// container slice (memory used and limit, spilled bytes, SM utilisation and share)
// labelled pod/namespace/container/uuid, in gpuslice_* names and the classic cAdvisor
// accelerator names; how long the agent took to answer Allocate; the memory watchdog's
// samples and kills. Rendering is a pure function; Collect gathers the inputs.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "src/node/latency_histogram.h"
#include "src/node/memory_watchdog.h"
#include "src/node/pod_resources.h"
#include "src/node/slice_book.h"
#include "src/platform/gpu_driver.h"

namespace gs::node {

struct GpuUsage {
  platform::GpuInfo info;
  std::string uuid;  // from the book (valid even when the GPU is lost)
  int slices_total = 0, slices_allocated = 0;
  bool healthy = true;
};

struct SliceUsage {
  std::string pod, ns, container, allocation, uuid, model;
  uint64_t limit = 0, used = 0, spilled = 0;
  unsigned sm_util = 0, sm_share = 0;  // percent; share 0 = no limit
};

// kills: the memory watchdog's (src/node/memory_watchdog.h), per rule, container and GPU;
// watchdog_samples: the samples it has taken.
std::string RenderMetrics(const std::vector<GpuUsage>& gpus, const std::vector<SliceUsage>& slices,
                          const LatencyHistogram::Snapshot& allocate, const std::vector<KillCount>& kills = {},
                          uint64_t watchdog_samples = 0);

// A container's SM utilisation from the card regions: each tenant's turns add up the GPU
// time it was charged (src/region/card.h: a turn's length, or what the card was busy in it
// for a lone tenant under force), so the share of wall time it took between two
// collections is its utilisation. Keys are the caller's (allocation and GPU); a key not seen for 10
// minutes is forgotten. Thread-safe (scrapes run concurrently).
class SmUseMeter {
 public:
  // Percent (0..100) of wall time the tenant's turns took since this key's baseline, which
  // moves on once at least a second old (so close scrapes see the same figure); 0 for a
  // key seen for the first time.
  unsigned Percent(const std::string& key, uint64_t used_ns, int64_t now_ns);

 private:
  struct Baseline {
    uint64_t used_ns = 0;
    int64_t at_ns = 0, seen_ns = 0;
    unsigned percent = 0;
  };
  std::mutex mu_;
  std::map<std::string, Baseline> keys_;
};

// Gathers from the driver, the book, private copies of the regions and card regions
// (src/host: a container cannot fault or block a scrape), and pod-resources.
std::string CollectMetrics(platform::GpuDriver* driver, const SliceBook& book,
                           const std::vector<ContainerDevices>& pods, const LatencyHistogram& allocate,
                           SmUseMeter* sm_use, const std::vector<KillCount>& kills = {}, uint64_t watchdog_samples = 0);

}  // namespace gs::node
