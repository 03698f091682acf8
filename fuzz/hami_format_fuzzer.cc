// HAMi's annotations (src/scheduler/hami_format.h), which anyone able to edit a Node or a
// Pod can write: hami.io/node-nvidia-register (JSON and the older colon form),
// hami.io/vgpu-devices-*, hami.io/node-handshake and the request annotations. What
// decodes must encode back to the same value: the node agent and bind write these with
// the Encode functions, and the scheduler reads them back after a restart.
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/scheduler/hami_format.h"

namespace hami = gs::scheduler::hami;

namespace {

// Annotations reach the scheduler through the API server, which stores only valid UTF-8
// (Go replaces anything else with U+FFFD); the JSON encoders need it too.
bool ValidUtf8(std::string_view text) {
  try {
    (void)nlohmann::json(std::string(text)).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = gs::fuzz::AsText(data, size);
  if (!ValidUtf8(text)) return 0;

  auto node = hami::DecodeNodeRegister("node-a", text);
  if (node.ok()) {
    GS_FUZZ_CHECK(node->name == "node-a");
    auto again = hami::DecodeNodeRegister("node-a", hami::EncodeNodeRegister(node->gpus));
    GS_FUZZ_CHECK(again.ok() && again->gpus.size() == node->gpus.size());
  }

  auto shares = hami::DecodePodDevices(text);
  if (shares.ok()) {
    gs::scheduler::PodDecision d;
    d.node = "node-a";
    d.containers = *shares;
    auto again = hami::DecodePodDevices(hami::EncodePodDevices(d));
    GS_FUZZ_CHECK(again.ok() && *again == *shares);
  }

  auto hs = hami::DecodeHandshake(text);
  if (hs.ok() && hs->state == hami::HandshakeState::kRequesting) {
    auto again = hami::DecodeHandshake(hami::EncodeRequestingHandshake(hs->time));
    GS_FUZZ_CHECK(again.ok() && again->state == hami::HandshakeState::kRequesting);
  }
  (void)hami::ParseGoBool(text);

  // "key=value" lines as a pod's annotations.
  hami::Annotations annos;
  for (const std::string& line : gs::fuzz::Lines(text)) {
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    annos[line.substr(0, eq)] = line.substr(eq + 1);
  }
  gs::scheduler::PodRequest request;
  (void)hami::ApplyRequestAnnotations(annos, &request);
  auto record = hami::RecordFromAnnotations("uid-1", annos);
  if (record.ok() && record->has_value()) GS_FUZZ_CHECK((*record)->pod_uid == "uid-1");
  return 0;
}
