// HAMi's wire formats, so HAMi pod specs, its device plugin and its tooling keep working
// with gpuslice (facts from Project-HAMi/HAMi pkg/device/devices.go,
// pkg/device/nvidia/device.go, pkg/util/types.go; see docs/scheduler.md):
//
//  - node annotation hami.io/node-nvidia-register: a JSON array of
//    {"id","index","count","devmem","devcore","type","numa","mode","health"} with Go's
//    omitempty (a zero value, health=false included, is left out); the older
//    "id,count,devmem,devcore,type,numa,health[,index,mode]:" form is read too;
//  - node annotation hami.io/node-handshake: "Requesting_<2006-01-02 15:04:05>" written by
//    the scheduler, "Reported <time>" by older device plugins, "Deleted_<time>";
//  - pod decision annotations hami.io/vgpu-devices-to-allocate and
//    hami.io/vgpu-devices-allocated: per container "uuid,NVIDIA,memMiB,cores:" for each
//    card, each container closed by ";" (a container without GPUs is an empty entry);
//    hami.io/vgpu-node, hami.io/vgpu-time and hami.io/bind-time (Unix seconds),
//    hami.io/bind-phase (allocating|success|failed);
//  - pod request annotations nvidia.com/use-gputype, nouse-gputype, use-gpuuuid,
//    nouse-gpuuuid (comma lists), use-gpuindexes, nouse-gpuindexes (comma lists of card
//    indexes, from HAMi's pull request #1313: the register's "index"),
//    nvidia.com/numa-bind (Go ParseBool), hami.io/gpu-scheduler-policy and
//    hami.io/node-scheduler-policy (binpack|spread), nvidia.com/vgpu-mode.
//
// What a pod may state in HAMi but gpuslice does not implement is never dropped: the
// request records it as refused (request.h) and the pod is placed nowhere, with the
// reason. That covers the GPU policies mutex, topology-aware and numa,
// nvidia.com/vgpu-mode other than hami-core, hami.io/device-scoring-weights and any other
// nvidia.com/use-* or nouse-* annotation. A value that cannot be read (an index that is
// not a number, numa-bind that Go's ParseBool rejects, an unknown policy) is an error.
//
// Pure functions; errors name the annotation and the field.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/common/status.h"
#include "src/scheduler/inventory.h"
#include "src/scheduler/ledger.h"
#include "src/scheduler/request.h"

namespace gs::scheduler::hami {

inline constexpr const char kResourceGpu[] = "nvidia.com/gpu";
inline constexpr const char kResourceMemory[] = "nvidia.com/gpumem";
inline constexpr const char kResourceMemoryPercent[] = "nvidia.com/gpumem-percentage";
inline constexpr const char kResourceCores[] = "nvidia.com/gpucores";
// HAMi's task priority resource (its webhook turns it into CUDA_TASK_PRIORITY); not
// implemented: a container asking for it is refused.
inline constexpr const char kResourcePriority[] = "nvidia.com/priority";

inline constexpr const char kUseType[] = "nvidia.com/use-gputype";
inline constexpr const char kNoUseType[] = "nvidia.com/nouse-gputype";
inline constexpr const char kUseUuid[] = "nvidia.com/use-gpuuuid";
inline constexpr const char kNoUseUuid[] = "nvidia.com/nouse-gpuuuid";
inline constexpr const char kUseIndexes[] = "nvidia.com/use-gpuindexes";
inline constexpr const char kNoUseIndexes[] = "nvidia.com/nouse-gpuindexes";
inline constexpr const char kNumaBind[] = "nvidia.com/numa-bind";
inline constexpr const char kVgpuMode[] = "nvidia.com/vgpu-mode";
inline constexpr const char kDeviceScoringWeights[] = "hami.io/device-scoring-weights";
inline constexpr const char kGpuPolicy[] = "hami.io/gpu-scheduler-policy";
inline constexpr const char kNodePolicy[] = "hami.io/node-scheduler-policy";

inline constexpr const char kAssignedNode[] = "hami.io/vgpu-node";
inline constexpr const char kAssignedTime[] = "hami.io/vgpu-time";
inline constexpr const char kDevicesToAllocate[] = "hami.io/vgpu-devices-to-allocate";
inline constexpr const char kDevicesAllocated[] = "hami.io/vgpu-devices-allocated";
inline constexpr const char kBindTime[] = "hami.io/bind-time";
inline constexpr const char kBindPhase[] = "hami.io/bind-phase";

inline constexpr const char kNodeRegister[] = "hami.io/node-nvidia-register";
inline constexpr const char kNodeHandshake[] = "hami.io/node-handshake";
// A node's cards taken out of new placements (comma list of UUIDs), as HAMi reads it;
// containers already on them stay.
inline constexpr const char kDeviceCordon[] = "hami.io/device-cordon";

inline constexpr const char kDeviceType[] = "NVIDIA";  // the "type" field of a pod's device entry

using Annotations = std::map<std::string, std::string>;

// hami.io/node-nvidia-register. `count` is HAMi's per-card slot count.
std::string EncodeNodeRegister(const std::vector<GpuDevice>& gpus);
StatusOr<NodeInventory> DecodeNodeRegister(const std::string& node_name, std::string_view text);
// Marks the cards hami.io/device-cordon names (blanks around entries and empty entries
// ignored, as HAMi does; a UUID the node does not have is ignored).
void ApplyDeviceCordon(std::string_view text, NodeInventory* node);

// hami.io/node-handshake.
enum class HandshakeState { kRequesting, kReported, kDeleted };
struct Handshake {
  HandshakeState state = HandshakeState::kReported;
  std::string time;  // as written
};
// `date_time` is "2006-01-02 15:04:05" (Go's time.DateTime), local time.
std::string EncodeRequestingHandshake(const std::string& date_time);
StatusOr<Handshake> DecodeHandshake(std::string_view text);

// hami.io/vgpu-devices-{to-allocate,allocated}.
std::string EncodePodDevices(const PodDecision& decision);
StatusOr<std::vector<std::vector<DeviceShare>>> DecodePodDevices(std::string_view text);

// Everything bind writes on the pod: node, devices (both keys), times, phase=allocating.
Annotations DecisionAnnotations(const PodDecision& decision, int64_t now_unix_seconds);

// The decision recorded on a pod, for rebuilding the ledger after a restart; nullopt if
// the pod carries none. Reads hami.io/vgpu-node and hami.io/vgpu-devices-allocated.
StatusOr<std::optional<LedgerRecord>> RecordFromAnnotations(const std::string& pod_uid, const Annotations& annos);

// Reads the request annotations into `request` (types, UUIDs, indexes, numa-bind,
// policies) and adds to request->refused what it states that gpuslice does not do.
Status ApplyRequestAnnotations(const Annotations& annos, PodRequest* request);

// Adds "<what> is not supported by gpuslice" to request->refused.
void Refuse(PodRequest* request, const std::string& what);

// Go's strconv.ParseBool.
std::optional<bool> ParseGoBool(std::string_view text);

}  // namespace gs::scheduler::hami
