// The hand-off from the extender's bind to the node agent's Allocate, without a node
// lock (HAMi holds one per node from bind to Allocate, with a 5-minute expiry: #1130,
// #1367, #3096).
//
// kubelet's Allocate names no pod: it asks for N devices for "a container". The agent
// lists the pods bound to its node that still wait for cards (hami.io/bind-phase
// "allocating", an entry left in hami.io/vgpu-devices-to-allocate), picks one container
// entry with ChooseClaim, and claims it with a patch guarded by the pod's
// resourceVersion: two Allocates never take one entry, the loser gets a conflict and
// chooses again. The claim erases the entry from to-allocate; the last one sets
// bind-phase "success".
//
// Which pod kubelet is admitting follows from how kubelet works: it admits one pod at a
// time and allocates all of that pod's containers, in order, before the next pod. So:
//  1. a pod with some entries claimed and some left is the one being admitted;
//  2. otherwise any pod whose next entry has N cards. Pods with the same request
//     signature (the same per-container requests and constraints) are interchangeable:
//     swapping two such pods' decisions gives each what it asked for and leaves every
//     card's total unchanged, so the oldest bind (then the name) is as right as any;
//  3. pods with different signatures must not be waiting with the same card count in
//     any entry still to hand out at once (not only the next: a copy of the pod in the
//     middle that is a moment behind would hide rule 1): the extender keeps it so
//     (Confusable), delaying a bind only while a pod it could be mistaken for is still
//     allocating on that node — its Allocates, never a lock with an expiry.
//
// Pure; O(pods on the node).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/scheduler/hami_format.h"
#include "src/scheduler/pod_spec.h"
#include "src/scheduler/request.h"

namespace gs::scheduler {

// What makes two pods interchangeable for Allocate: every container's request (cards,
// memory, percentage, cores) and the card constraints (types, UUIDs, indexes, numa-bind).
// Scheduling policies are left out: they choose among valid placements.
std::string RequestSignature(const PodRequest& request);

// A pod bound to this node that still waits for cards.
struct PendingPod {
  std::string uid, namespace_name, name, resource_version;
  int64_t bind_time = 0;  // hami.io/bind-time (0 when absent or not a number)
  std::string signature;
  // Per container (init containers first), the cards still to hand out: empty for a
  // container without GPUs or one already claimed.
  std::vector<std::vector<DeviceShare>> to_allocate;
  bool started = false;  // some container's entry was claimed already

  // The first container still waiting, or -1.
  int next_container() const;
};

// The pod as pending on `node`, or nullopt when it is not: another node, not
// hami.io/bind-phase=allocating, nothing left to allocate, deleted or terminal.
// Malformed decision annotations are an error naming the pod and the annotation. The
// pod's request (for its signature) is read with `options`.
StatusOr<std::optional<PendingPod>> PendingPodFromJson(const nlohmann::json& pod, const std::string& node,
                                                       const PodSpecOptions& options = {});

struct Claim {
  size_t pod = 0;        // index into the pods given to ChooseClaim
  size_t container = 0;  // index into that pod's to_allocate
  std::vector<DeviceShare> cards;
  // The pod's annotations after the claim (a merge patch, sent with the pod's
  // resourceVersion): to-allocate without this entry, bind-phase "success" when it was
  // the last.
  hami::Annotations patch;
};

// The container entry an Allocate for `cards` devices takes (rules 1 and 2 above).
// NotFound, listing what is pending, when no pod waits for that many cards.
StatusOr<Claim> ChooseClaim(const std::vector<PendingPod>& pods, int cards);

// A pod pending on the node that an Allocate meant for `request` could take instead
// (different signature, and a card count of one of request's GPU containers in one of its
// entries still to hand out); nullopt when none. The extender does not bind `request` to
// that node while one exists.
std::optional<std::string> Confusable(const std::vector<PendingPod>& pending, const PodRequest& request);

}  // namespace gs::scheduler
