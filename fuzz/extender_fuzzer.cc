// The kube-scheduler extender's verbs on a small cluster (src/scheduler/extender.h):
// Filter and Prioritize take ExtenderArgs, Bind takes ExtenderBindingArgs. Input: up to 4
// requests separated by lines "----", each a verb letter (F, P, B; O observes a pod as the
// watch reports it; R rebuilds the ledger from a listed pod, as after a restart) and its
// body. Every reply must be JSON, and the ledger must stay
// consistent after each request.
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/scheduler/extender.h"

using nlohmann::json;

namespace {

// The API side of bind: every call succeeds, and no pod is known beyond what Filter saw.
class Binder : public gs::scheduler::KubeBinder {
 public:
  gs::Status BindPod(const std::string&, const std::string&, const std::string&, const std::string&,
                     const gs::scheduler::hami::Annotations&) override {
    return gs::Status::Ok();
  }
  gs::StatusOr<std::string> GetPod(const std::string& ns, const std::string& name) override {
    return gs::NotFound("pod " + ns + "/" + name);
  }
};

gs::scheduler::NodeInventory Node(const std::string& name, int cards) {
  gs::scheduler::NodeInventory n;
  n.name = name;
  for (int i = 0; i < cards; ++i) {
    gs::scheduler::GpuDevice g;
    g.uuid = "GPU-" + name + "-" + std::to_string(i);
    g.index = i;
    g.model = "NVIDIA-H100-80GB-HBM3";
    g.memory_mib = 81559;
    g.slots = 10;
    g.numa = i % 2;
    n.gpus.push_back(g);
  }
  return n;
}

bool IsJson(const std::string& text) {
  return !json::parse(text, nullptr, /*allow_exceptions=*/false).is_discarded();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Binder binder;
  gs::scheduler::ExtenderOptions options;
  options.now_unix_seconds = [] { return int64_t{1790000000}; };
  options.handoff_wait = std::chrono::milliseconds(0);
  gs::scheduler::Extender extender(options, &binder);
  GS_FUZZ_CHECK(extender.UpsertNode(Node("node-a", 2)).ok());
  GS_FUZZ_CHECK(extender.UpsertNode(Node("node-b", 4)).ok());

  for (std::string_view request : gs::fuzz::SplitParts(gs::fuzz::AsText(data, size), 4)) {
    if (request.empty()) continue;
    char verb = request[0];
    std::string_view body = request.substr(1);
    std::string reply;
    switch (verb) {
      case 'F':
        reply = extender.Filter(body);
        break;
      case 'P':
        reply = extender.Prioritize(body);
        break;
      case 'B':
        reply = extender.Bind(body);
        break;
      case 'O': {
        auto pod = json::parse(body, nullptr, false);
        if (!pod.is_discarded()) extender.ObservePod(pod);
        continue;
      }
      case 'R':
        (void)extender.RebuildFromPods({std::string(body)});
        GS_FUZZ_CHECK(extender.CheckConsistency().ok());
        continue;
      default:
        continue;
    }
    if (!IsJson(reply)) {
      std::fprintf(stderr, "reply is not JSON: %s\n", reply.c_str());
      std::abort();
    }
    GS_FUZZ_CHECK(extender.CheckConsistency().ok());
  }
  return 0;
}
