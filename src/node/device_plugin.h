// The kubelet device plugin service (v1beta1): lists slices with health and NUMA
// topology, prefers placements, and turns an allocation (the slices kubelet chose, or
// with --scheduler-decisions what the scheduler decided) into container edits: device
// nodes, the enforcer mounted from a versioned path, a read-only /etc/ld.so.preload and
// limits file, and a per-container region directory.
//
// Thread-safe: gRPC calls run on server threads; state lives in the SliceBook.
#pragma once

#include <atomic>
#include <set>
#include <string>
#include <vector>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "src/container/driver_files.h"
#include "src/container/edits_plan.h"
#include "src/node/claimed_allocation.h"
#include "src/node/config.h"
#include "src/node/container_dirs.h"
#include "src/node/latency_histogram.h"
#include "src/node/scheduler_decisions.h"
#include "src/node/slice_book.h"

namespace gs::node {

using container::EnforcerInstall;

// The extra device nodes (GDRCopy, GDS, MOFED) the configuration turns on.
container::ExtraDevices ExtraDevicesFor(const Config& cfg);

class DevicePluginService final : public v1beta1::DevicePlugin::Service {
 public:
  // `decisions` (may be null): with --scheduler-decisions, where Allocate learns the
  // cards, memory and cores decided for the container; the slice IDs kubelet chose then
  // only count the cards.
  DevicePluginService(const Config& cfg, SliceBook* book, ContainerDirs* dirs, EnforcerInstall enforcer,
                      DecisionSource* decisions = nullptr);
  void Stop();  // ends ListAndWatch streams

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* out) override;
  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status GetPreferredAllocation(grpc::ServerContext*, const v1beta1::PreferredAllocationRequest* req,
                                      v1beta1::PreferredAllocationResponse* out) override;
  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                        v1beta1::AllocateResponse* out) override;
  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override;

  // How long Allocate calls took inside the agent (for the metrics).
  const LatencyHistogram& allocate_latency() const { return allocate_latency_; }

  // One container's response (exposed for benchmarks and tests).
  StatusOr<v1beta1::ContainerAllocateResponse> AllocateContainer(const std::vector<std::string>& ids,
                                                                 std::string* record_id);

 private:
  // AllocateContainer, where `reserved` are the slices the request asks for (its other
  // containers'): a --enable-legacy-preferred remapping never takes one of them.
  StatusOr<v1beta1::ContainerAllocateResponse> AllocateContainer(const std::vector<std::string>& ids,
                                                                 const std::set<std::string>& reserved,
                                                                 std::string* record_id);
  // Allocate's work: every container of the request, or none.
  grpc::Status AllocateAll(const v1beta1::AllocateRequest& req, v1beta1::AllocateResponse* out);

  const Config& cfg_;
  SliceBook* book_;
  ContainerDirs* dirs_;
  EnforcerInstall enforcer_;
  DecisionSource* decisions_;
  std::atomic<bool> stopping_{false};
  LatencyHistogram allocate_latency_;
};

}  // namespace gs::node
