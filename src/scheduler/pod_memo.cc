#include "src/scheduler/pod_memo.h"

#include <algorithm>

namespace gs::scheduler {

std::shared_ptr<const PodRequest> PodMemo::FindRequest(std::string_view pod_json) const {
  for (auto it = parsed_.rbegin(); it != parsed_.rend(); ++it)
    if (it->text == pod_json) return it->request;
  return nullptr;
}

void PodMemo::PutRequest(std::string_view pod_json, std::shared_ptr<const PodRequest> request) {
  if (capacity_ == 0) return;
  std::erase_if(parsed_, [&](const Parsed& p) { return p.text == pod_json; });
  if (parsed_.size() >= capacity_) parsed_.erase(parsed_.begin());
  parsed_.push_back(Parsed{std::string(pod_json), std::move(request)});
}

std::shared_ptr<const ScoreMemo> PodMemo::FindScores(const PodRequest& request) const {
  for (auto it = scored_.rbegin(); it != scored_.rend(); ++it)
    if (it->request == request) return it->scores;
  return nullptr;
}

void PodMemo::PutScores(const PodRequest& request, std::shared_ptr<const ScoreMemo> scores) {
  if (capacity_ == 0) return;
  std::erase_if(scored_, [&](const Scored& s) { return s.request.uid == request.uid; });
  if (scored_.size() >= capacity_) scored_.erase(scored_.begin());
  scored_.push_back(Scored{request, std::move(scores)});
}

void PodMemo::Forget(std::string_view uid) {
  std::erase_if(parsed_, [&](const Parsed& p) { return p.request->uid == uid; });
  std::erase_if(scored_, [&](const Scored& s) { return s.request.uid == uid; });
}

}  // namespace gs::scheduler
