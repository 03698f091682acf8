// The OCI hook's stdin, the container state ({"ociVersion", "id", "status", "pid",
// "bundle"}), and the bundle's config.json it names (src/container/oci_hook.h
// ReadHookContainer). Input: the state, a line "----", the config.json; "BUNDLE" in the
// state is replaced by a scratch bundle directory holding that config.json.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/container/oci_hook.h"

namespace {

const std::string& BundleDir() {
  static const std::string dir = [] {
    std::string tmpl = "/tmp/gs-fuzz-bundle-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    static std::string scratch = tmpl;  // removed when libFuzzer exits
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch, ec);
    });
    return tmpl;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& bundle = BundleDir();
  auto parts = gs::fuzz::SplitParts(gs::fuzz::AsText(data, size), 2);
  std::string state(parts[0]);
  for (size_t at = state.find("BUNDLE"); at != std::string::npos; at = state.find("BUNDLE", at + bundle.size()))
    state.replace(at, 6, bundle);
  {
    std::ofstream f(bundle + "/config.json", std::ios::trunc | std::ios::binary);
    if (parts.size() > 1) f << parts[1];
  }
  std::istringstream in(state);
  auto c = gs::container::ReadHookContainer(in);
  if (c.ok()) {
    GS_FUZZ_CHECK(c->pid > 0);
    GS_FUZZ_CHECK(!c->config.rootfs.empty() && c->config.rootfs[0] == '/');
  }
  return 0;
}
