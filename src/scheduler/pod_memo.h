// What the extender remembers about the few pods it saw last, so the Filter and
// Prioritize calls kube-scheduler makes for one pod do each piece of work once:
//  - the PodRequest parsed from the Pod's exact JSON text (kube-scheduler sends the same
//    text to both verbs; a different text is parsed afresh);
//  - Filter's score for every node it checked (placement.h's ScoreMemo), taken by
//    Prioritize only for the same request, and only for a node whose version has not
//    moved since (a reserve, release or inventory change on that node moves it).
//
// Pure and not thread-safe (the extender holds a lock around calls). Entries are
// shared_ptr<const ...> so a reader keeps using one after the lock is gone. Capacity is
// a handful of pods: lookups are linear; a hit costs one comparison of the pod text.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "src/scheduler/placement.h"
#include "src/scheduler/request.h"

namespace gs::scheduler {

class PodMemo {
 public:
  explicit PodMemo(size_t capacity = 8) : capacity_(capacity) {}

  // The request parsed earlier from exactly this Pod text, or null.
  std::shared_ptr<const PodRequest> FindRequest(std::string_view pod_json) const;
  void PutRequest(std::string_view pod_json, std::shared_ptr<const PodRequest> request);

  // Filter's scores for `request` (compared in full, UID included), or null.
  std::shared_ptr<const ScoreMemo> FindScores(const PodRequest& request) const;
  void PutScores(const PodRequest& request, std::shared_ptr<const ScoreMemo> scores);

  // Drops everything about the pod with this UID.
  void Forget(std::string_view uid);

 private:
  struct Parsed {
    std::string text;
    std::shared_ptr<const PodRequest> request;
  };
  struct Scored {
    PodRequest request;
    std::shared_ptr<const ScoreMemo> scores;
  };
  size_t capacity_;
  std::vector<Parsed> parsed_;  // newest last
  std::vector<Scored> scored_;  // newest last
};

}  // namespace gs::scheduler
