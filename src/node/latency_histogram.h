// How long the node agent took to answer the kubelet, as a Prometheus histogram: counts
// per upper bound, total seconds and calls, plus failed calls. The kubelet's own
// device_plugin_alloc_duration_seconds includes the gRPC transport; this one is the
// agent's share alone, so the two side by side tell where time goes.
//
// Thread-safe and lock-free: Observe() is on the Allocate path.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace gs::node {

class LatencyHistogram {
 public:
  // Upper bounds in seconds (the +Inf bucket is implied).
  static constexpr std::array<double, 10> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                                     0.005,  0.01,    0.025,  0.1,   1.0};
  struct Snapshot {
    std::array<uint64_t, kBounds.size() + 1> counts{};  // per bucket, not cumulative; last: +Inf
    uint64_t count = 0, failed = 0;                     // count: the sum of counts (so _count equals the +Inf bucket)
    double sum_seconds = 0;
  };

  void Observe(std::chrono::nanoseconds took, bool ok);
  Snapshot Read() const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts_{};
  std::atomic<uint64_t> failed_{0}, sum_ns_{0};
};

}  // namespace gs::node
