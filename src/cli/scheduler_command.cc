#include "src/cli/scheduler_command.h"

#include <signal.h>

#include <atomic>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>
#include <vector>

#include "src/kube/client.h"
#include "src/scheduler/config.h"
#include "src/scheduler/extender.h"
#include "src/scheduler/hami_format.h"
#include "src/scheduler/serve.h"

namespace gs::cli {
namespace {

using nlohmann::json;

// Without an API server (--inventory alone), bind's API calls are printed (one JSON line
// each) instead of sent: the extender can be driven by hand or by a test harness.
class PrintingBinder : public scheduler::KubeBinder {
 public:
  Status BindPod(const std::string& ns, const std::string& name, const std::string& uid, const std::string& node,
                 const scheduler::hami::Annotations& a) override {
    Print(json{{"bind", ns + "/" + name}, {"uid", uid}, {"node", node}, {"annotations", a}});
    return Status::Ok();
  }
  StatusOr<std::string> GetPod(const std::string& ns, const std::string& name) override {
    return Unavailable("no Kubernetes API configured (--kubeconfig or --in-cluster): pod " + ns + "/" + name +
                       " must pass /filter first");
  }

 private:
  void Print(const json& j) {
    std::lock_guard<std::mutex> lock(mu_);
    std::cout << j.dump() << std::endl;
  }
  std::mutex mu_;
};

}  // namespace

int SchedulerCommand(const std::vector<std::string>& args) {
  std::string usage;
  auto cfg = scheduler::LoadSchedulerConfig(args, &usage);
  if (!usage.empty()) return std::cout << usage, 0;
  if (!cfg.ok()) {
    std::cerr << "gpuslice scheduler: " << cfg.status().message() << "\n";
    return 2;
  }
  std::unique_ptr<kube::Client> client;
  if (cfg->api) {
    auto c = kube::Client::Create(std::move(*cfg->api));
    if (!c.ok()) {
      std::cerr << "gpuslice scheduler: " << c.status().message() << "\n";
      return 1;
    }
    client = std::move(*c);
  }
  // Block the stop signals before any thread starts; one thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::atomic<bool> stop{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    stop = true;
  });

  PrintingBinder printing;
  scheduler::ServeOptions& o = cfg->serve;
  o.client = client.get();
  o.offline_binder = &printing;
  auto log_mu = std::make_shared<std::mutex>();
  o.log = [log_mu](const std::string& line) {
    std::lock_guard<std::mutex> lock(*log_mu);
    std::cerr << "gpuslice scheduler: " << line << std::endl;
  };
  Status served = scheduler::Serve(o, stop);
  if (!served.ok()) std::cerr << "gpuslice scheduler: " << served.message() << "\n";
  // Wakes the waiter (blocked in sigwait for SIGTERM) when Serve ended first; it ends itself.
  pthread_kill(waiter.native_handle(), SIGTERM);  // NOLINT(bugprone-bad-signal-to-kill-thread)
  waiter.join();
  return served.ok() ? 0 : 1;
}

}  // namespace gs::cli
