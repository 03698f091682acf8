// The informer's list + watch loop against the fake API server: paging, resume, relist
// after 410, backoff.
#include "src/kube/informer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "src/kube/testing/fake_api_server.h"
#include "tests/wait_until.h"

namespace gs::kube {
namespace {

using gs::testing::WaitUntil;

using nlohmann::json;
using testing::FakeApiServer;

json Pod(const std::string& name, const std::string& label = "1") {
  return {{"metadata", {{"name", name}, {"namespace", "default"}, {"labels", {{"v", label}}}}}};
}

// Records the handler's calls as "add a", "update a", "delete a", "synced".
class Recorder {
 public:
  InformerHandler Handler() {
    auto name = [](const json& o) { return o["metadata"]["name"].get<std::string>(); };
    return {
        [this, name](const json& o) { Add("add " + name(o)); },
        [this, name](const json& o) { Add("update " + name(o)); },
        [this, name](const json& o) { Add("delete " + name(o) + " uid=" + o["metadata"].value("uid", "")); },
        [this] { Add("synced"); },
        [this](const Status& s) {
          std::lock_guard<std::mutex> lock(mu_);
          errors_.push_back(s);
        },
        [this] {
          std::lock_guard<std::mutex> lock(mu_);
          lists_.push_back("started");
        },
        [this, name](const std::vector<json>& items) {
          std::vector<std::string> names;
          for (const json& o : items) names.push_back(name(o));
          std::sort(names.begin(), names.end());
          std::string line = "listed";
          for (const auto& n : names) line += " " + n;
          std::lock_guard<std::mutex> lock(mu_);
          lists_.push_back(line);
        },
    };
  }
  // on_list_started and on_listed, in order ("started", "listed <names sorted>").
  std::vector<std::string> lists() {
    std::lock_guard<std::mutex> lock(mu_);
    return lists_;
  }
  // Waits until `n` calls were recorded; returns them all.
  std::vector<std::string> WaitFor(size_t n) {
    WaitUntil([&] {
      std::lock_guard<std::mutex> lock(mu_);
      return calls_.size() >= n;
    });
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.clear();
  }
  std::vector<Status> errors() {
    std::lock_guard<std::mutex> lock(mu_);
    return errors_;
  }

 private:
  void Add(std::string s) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::move(s));
  }
  std::mutex mu_;
  std::vector<std::string> calls_, lists_;
  std::vector<Status> errors_;
};

class InformerTest : public ::testing::Test {
 protected:
  void Start(int64_t page_size = 2) {
    ClientConfig c;
    c.server = api_.url();
    client_ = std::move(*Client::Create(c));
    InformerOptions o;
    o.path = "/api/v1/pods";
    o.page_size = page_size;
    o.backoff_initial = std::chrono::milliseconds(10);
    o.backoff_max = std::chrono::milliseconds(40);
    informer_ = std::make_unique<Informer>(client_.get(), o, recorder_.Handler());
    thread_ = std::jthread([this](std::stop_token stop) { informer_->Run(stop); });
  }
  void TearDown() override {
    if (thread_.joinable()) {
      auto asked = std::chrono::steady_clock::now();
      thread_.request_stop();
      thread_.join();
      EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(3)) << "Run did not stop promptly";
    }
  }
  // Waits until the fake has seen `n` watch requests.
  void WaitForWatches(int n) {
    ASSERT_TRUE(WaitUntil([&] { return api_.CountRequests("GET", "/api/v1/pods", true) >= n; }))
        << "the informer made fewer than " << n << " watch requests";
  }

  FakeApiServer api_;
  std::unique_ptr<Client> client_;
  Recorder recorder_;
  std::unique_ptr<Informer> informer_;
  std::jthread thread_;
};

TEST_F(InformerTest, ListsEveryPageThenWatchesChanges) {
  for (const char* n : {"a", "b", "c", "d", "e"}) api_.Put("pods", Pod(n));
  Start(/*page_size=*/2);
  EXPECT_EQ(recorder_.WaitFor(6), (std::vector<std::string>{"add a", "add b", "add c", "add d", "add e", "synced"}));
  EXPECT_TRUE(informer_->synced());
  EXPECT_EQ(api_.CountRequests("GET", "/api/v1/pods") - api_.CountRequests("GET", "/api/v1/pods", true), 3);
  WaitForWatches(1);
  recorder_.Clear();
  api_.Put("pods", Pod("f"));
  api_.Put("pods", Pod("a", "2"));
  api_.Delete("pods", "default", "b");
  EXPECT_EQ(recorder_.WaitFor(3), (std::vector<std::string>{"add f", "update a", "delete b uid=uid-b"}));
}

TEST_F(InformerTest, ResumesAWatchFromTheLastVersionItSaw) {
  api_.Put("pods", Pod("a"));
  Start();
  WaitForWatches(1);
  api_.Put("pods", Pod("b"));
  recorder_.WaitFor(3);  // add a, synced, add b
  std::string seen = std::to_string(api_.resource_version());
  api_.EndWatches();
  WaitForWatches(2);
  api_.Put("pods", Pod("c"));
  EXPECT_EQ(recorder_.WaitFor(4).back(), "add c");
  EXPECT_EQ(informer_->lists(), 1);
  auto requests = api_.requests();
  EXPECT_EQ(requests.back().params["resourceVersion"], seen);
}

TEST_F(InformerTest, ListsAgainWhenItsVersionIsGoneAndReportsWhatChanged) {
  api_.Put("pods", Pod("keep"));
  api_.Put("pods", Pod("change"));
  api_.Put("pods", Pod("gone"));
  Start();
  recorder_.WaitFor(4);
  WaitForWatches(1);
  recorder_.Clear();
  // The next watch waits while the cluster moves on and the server forgets the history.
  api_.SetHang(true);
  api_.EndWatches();
  WaitForWatches(2);
  api_.Put("pods", Pod("change", "2"));
  api_.Delete("pods", "default", "gone");
  api_.Put("pods", Pod("new"));
  api_.Compact();
  api_.SetHang(false);
  auto calls = recorder_.WaitFor(3);
  std::sort(calls.begin(), calls.end());
  EXPECT_EQ(calls, (std::vector<std::string>{"add new", "delete gone uid=uid-gone", "update change"}));
  EXPECT_EQ(informer_->lists(), 2);
  // Each list, the relist too, is announced before and handed over whole after: what a
  // caller needs to find objects of its own that the informer never saw.
  EXPECT_EQ(recorder_.lists(),
            (std::vector<std::string>{"started", "listed change gone keep", "started", "listed change keep new"}));
  bool saw_gone = false;
  for (const Status& s : recorder_.errors()) saw_gone |= s.code() == StatusCode::kOutOfRange;
  EXPECT_TRUE(saw_gone);
}

TEST_F(InformerTest, BacksOffAndRetriesAFailingList) {
  api_.Put("pods", Pod("a"));
  api_.FailNext(503, "etcd is busy", 3);
  Start();
  EXPECT_EQ(recorder_.WaitFor(2), (std::vector<std::string>{"add a", "synced"}));
  auto errors = recorder_.errors();
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].code(), StatusCode::kUnavailable);
  EXPECT_NE(errors[0].message().find("etcd is busy"), std::string::npos);
}

}  // namespace
}  // namespace gs::kube
