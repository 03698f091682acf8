// The node agent's YAML config file (src/node/config.h ApplyConfigYaml). Whatever the
// file holds, the answer is a Status: no exception may escape (yaml-cpp throws on bad
// input and on conversions).
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/node/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gs::node::Config c;
  gs::Status s = gs::node::ApplyConfigYaml(std::string(gs::fuzz::AsText(data, size)), &c);
  (void)s;
  return 0;
}
