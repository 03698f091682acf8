// What the API server answers (src/kube/client.h): an error body (a Status object) or a
// watch stream's ERROR event mapped to a Status, for any HTTP code. Input: the first two
// bytes pick the code, the rest is the body.
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "src/kube/client.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  long code = (data[0] << 8 | data[1]) % 1000;
  auto body = nlohmann::json::parse(gs::fuzz::AsText(data + 2, size - 2), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  // A watch's ERROR event comes with code 0: the body's own code counts then.
  gs::Status s = gs::kube::StatusFromApi(code, body, "GET /api/v1/pods");
  GS_FUZZ_CHECK(!s.ok());
  (void)gs::kube::QueryEscape(gs::fuzz::AsText(data + 2, size - 2));
  return 0;
}
