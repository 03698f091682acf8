// PodMemo: a request is found only for the exact Pod text, scores only for an equal
// request, a few pods at most are kept, and Forget drops a pod's entries.
#include "src/scheduler/pod_memo.h"

#include <gtest/gtest.h>

namespace gs::scheduler {
namespace {

std::shared_ptr<const PodRequest> Request(const std::string& uid, int64_t mem) {
  auto r = std::make_shared<PodRequest>();
  r->uid = uid;
  r->containers = {ContainerRequest{1, mem, 0, 10}};
  return r;
}

TEST(PodMemo, RequestsByExactTextScoresByEqualRequest) {
  PodMemo m(2);
  m.PutRequest(R"({"a":1})", Request("a", 1000));
  EXPECT_EQ(m.FindRequest(R"({"a":1})")->uid, "a");
  EXPECT_EQ(m.FindRequest(R"({"a": 1})"), nullptr) << "another text is parsed afresh";

  auto scores = std::make_shared<ScoreMemo>();
  m.PutScores(*Request("a", 1000), scores);
  EXPECT_EQ(m.FindScores(*Request("a", 1000)), scores);
  EXPECT_EQ(m.FindScores(*Request("a", 2000)), nullptr) << "same UID, other request (an edited pod)";
  PodRequest policy = *Request("a", 1000);
  policy.node_policy = Policy::kSpread;
  EXPECT_EQ(m.FindScores(policy), nullptr);
  m.PutScores(*Request("a", 2000), std::make_shared<ScoreMemo>());
  EXPECT_EQ(m.FindScores(*Request("a", 1000)), nullptr) << "one entry per UID, the newest";

  m.PutRequest(R"({"b":1})", Request("b", 1));
  m.PutRequest(R"({"c":1})", Request("c", 1));
  EXPECT_EQ(m.FindRequest(R"({"a":1})"), nullptr) << "capacity 2: the oldest goes";
  EXPECT_NE(m.FindRequest(R"({"b":1})"), nullptr);

  m.PutScores(*Request("b", 1), std::make_shared<ScoreMemo>());
  m.Forget("b");
  EXPECT_EQ(m.FindRequest(R"({"b":1})"), nullptr);
  EXPECT_EQ(m.FindScores(*Request("b", 1)), nullptr);
  EXPECT_NE(m.FindRequest(R"({"c":1})"), nullptr);
}

}  // namespace
}  // namespace gs::scheduler
