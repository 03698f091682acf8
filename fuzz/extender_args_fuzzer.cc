// kube-scheduler's ExtenderArgs body (src/scheduler/extender_args.h), checked against
// nlohmann-json, which the one-pass reader promises to agree with: what it accepts is
// JSON, the Pod is the "Pod" object, and the names are the "NodeNames" strings.
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/scheduler/extender_args.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body = gs::fuzz::AsText(data, size);
  gs::scheduler::ExtenderArgs args;
  gs::Status s = gs::scheduler::ParseExtenderArgs(body, &args);
  if (!s.ok()) return 0;
  GS_FUZZ_CHECK(args.names.size() == args.raw.size());
  auto tree = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  GS_FUZZ_CHECK(!tree.is_discarded());
  GS_FUZZ_CHECK(tree.is_object() && tree.contains("Pod") && tree["Pod"].is_object());
  GS_FUZZ_CHECK(nlohmann::json::parse(args.pod, nullptr, false) == tree["Pod"]);
  const auto& names = tree["NodeNames"];
  GS_FUZZ_CHECK(names.is_array() && names.size() == args.names.size());
  for (size_t i = 0; i < args.names.size(); ++i) {
    GS_FUZZ_CHECK(names[i].is_string() && names[i].get<std::string>() == args.names[i]);
    // The raw text, put back between quotes, is the same JSON string.
    std::string quoted = "\"" + std::string(args.raw[i]) + "\"";
    auto again = nlohmann::json::parse(quoted, nullptr, false);
    GS_FUZZ_CHECK(!again.is_discarded() && again == names[i]);
    // And AppendJsonString writes a literal that reads back as the name.
    std::string literal;
    gs::scheduler::AppendJsonString(args.names[i], &literal);
    auto lit = nlohmann::json::parse(literal, nullptr, false);
    GS_FUZZ_CHECK(!lit.is_discarded() && lit == names[i]);
  }
  return 0;
}
