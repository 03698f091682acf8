// The mutating admission webhook (src/scheduler/webhook.h MutatePodReview): any
// AdmissionReview body. The reply must be an AdmissionReview with allowed=true whatever
// came in (the webhook never refuses a pod for its own trouble), and its JSONPatch must
// apply to the pod it was made for, as the API server will apply it.
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/kube/base64.h"
#include "src/scheduler/webhook.h"

using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const gs::scheduler::WebhookOptions options = [] {
    gs::scheduler::WebhookOptions o;
    o.trusted_users = {"system:serviceaccount:gpuslice-system:gpuslice-scheduler"};
    return o;
  }();
  std::string_view text = gs::fuzz::AsText(data, size);
  std::string reply = gs::scheduler::MutatePodReview(text, options);

  json out = json::parse(reply, nullptr, /*allow_exceptions=*/false);
  GS_FUZZ_CHECK(!out.is_discarded() && out.is_object());
  GS_FUZZ_CHECK(out.value("kind", "") == "AdmissionReview");
  GS_FUZZ_CHECK(out.contains("response") && out["response"].is_object());
  const json& response = out["response"];
  GS_FUZZ_CHECK(response.contains("allowed") && response["allowed"] == true);
  GS_FUZZ_CHECK(response.contains("uid") && response["uid"].is_string());
  if (!response.contains("patch")) return 0;

  GS_FUZZ_CHECK(response.value("patchType", "") == "JSONPatch" && response["patch"].is_string());
  auto decoded = gs::kube::Base64Decode(response["patch"].get<std::string>());
  GS_FUZZ_CHECK(decoded.ok());
  json patch = json::parse(*decoded, nullptr, false);
  GS_FUZZ_CHECK(!patch.is_discarded() && patch.is_array() && !patch.empty());

  // A patch is only made for a review that has a pod object with metadata (the API server
  // always sends one): it must apply to that object.
  json review = json::parse(text, nullptr, false);
  GS_FUZZ_CHECK(!review.is_discarded());
  const json& pod = review["request"]["object"];
  if (!pod.contains("metadata") || !pod["metadata"].is_object()) return 0;
  try {
    json patched = pod.patch(patch);
    GS_FUZZ_CHECK(patched.is_object());
  } catch (const json::exception& e) {
    std::fprintf(stderr, "patch does not apply: %s\npatch: %s\n", e.what(), patch.dump().c_str());
    std::abort();
  }
  return 0;
}
