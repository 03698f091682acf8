// A kubeconfig (src/kube/config.h LoadKubeconfig), read from a file as `gpuslice
// scheduler --kubeconfig` reads it: the input is written to a scratch file first.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/kube/base64.h"
#include "src/kube/config.h"

namespace {

const std::string& Path() {
  static const std::string path = [] {
    std::string tmpl = "/tmp/gs-fuzz-kube-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    static std::string scratch = tmpl;  // removed when libFuzzer exits
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch, ec);
    });
    return tmpl + "/kubeconfig";
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = gs::fuzz::AsText(data, size);
  {
    std::ofstream f(Path(), std::ios::trunc | std::ios::binary);
    f << text;
  }
  for (const char* context : {"", "other"}) {
    auto c = gs::kube::LoadKubeconfig(Path(), context);
    if (!c.ok()) continue;
    GS_FUZZ_CHECK(c->server.rfind("https://", 0) == 0 || c->server.rfind("http://", 0) == 0);
  }
  // The *-data fields: base64 that decodes encodes back to the same bytes, minus blanks.
  auto bytes = gs::kube::Base64Decode(text);
  if (bytes.ok()) GS_FUZZ_CHECK(gs::kube::Base64Decode(gs::kube::Base64Encode(*bytes)).value() == *bytes);
  return 0;
}
