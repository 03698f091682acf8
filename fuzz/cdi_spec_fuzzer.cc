// A CDI spec file as `gpuslice cdi list` reads it (src/container/cdi.h LoadCdiSpec,
// CdiDeviceNames): the node's spec in /var/run/cdi or /etc/cdi, JSON or YAML, written
// by anything with access there.
//
// Input: one byte naming the file (J: spec.json, parsed as JSON; anything else:
// spec.yaml, parsed as YAML), then the file's text.
//
// Checked: neither throws (nlohmann and yaml-cpp throw on bad input and on conversions);
// a load error names the file; an accepted spec's names are "<kind>=<name>", one per
// device, with the kind and name a strict loader accepts; and the spec, written back as
// YAML (ToYaml) and loaded again, offers the same names.
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/container/cdi.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string dir = gs::fuzz::ScratchDir();
  const std::string path = dir + (data[0] == 'J' ? "/spec.json" : "/spec.yaml");
  gs::fuzz::WriteFile(path, gs::fuzz::AsText(data + 1, size - 1));
  auto spec = gs::container::LoadCdiSpec(path);
  if (!spec.ok()) {
    GS_FUZZ_CHECK(spec.status().message().find(path) != std::string::npos);
    return 0;
  }
  auto names = gs::container::CdiDeviceNames(*spec);
  if (!names.ok()) {
    GS_FUZZ_CHECK(!names.status().message().empty());
    return 0;
  }
  const std::string kind = (*spec)["kind"].get<std::string>();
  GS_FUZZ_CHECK(kind.find('/') != std::string::npos && kind.find('=') == std::string::npos);
  GS_FUZZ_CHECK(!names->empty() && names->size() == (*spec)["devices"].size());
  for (const std::string& n : *names) {
    GS_FUZZ_CHECK(n.compare(0, kind.size() + 1, kind + "=") == 0);
    GS_FUZZ_CHECK(n.size() > kind.size() + 1 && n.find('/', kind.size()) == std::string::npos);
  }
  const std::string again = dir + "/again.yaml";
  gs::fuzz::WriteFile(again, gs::container::ToYaml(*spec));
  auto reloaded = gs::container::LoadCdiSpec(again);
  GS_FUZZ_CHECK(reloaded.ok());
  auto names_again = gs::container::CdiDeviceNames(*reloaded);
  GS_FUZZ_CHECK(names_again.ok() && *names_again == *names);
  return 0;
}
