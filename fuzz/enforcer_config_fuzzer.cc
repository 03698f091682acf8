// The enforcer's configuration (src/enforcer/config.h): the limits file the node agent
// mounts and the environment a container sets, parsed into fixed buffers inside every
// process of the container. Input: the limits file, a line "----", then the environment
// as "KEY=VALUE" lines ("NOFILE" as the file means there is none). Every string must stay
// terminated within its buffer.
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "src/enforcer/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = gs::fuzz::SplitParts(gs::fuzz::AsText(data, size), 2);
  bool has_file = parts[0] != "NOFILE";
  // The enforcer reads the file into a buffer and splits it in place, as here.
  std::string file(parts[0]);
  std::vector<char> text(file.begin(), file.end());
  text.push_back('\0');
  const char* file_vars[64];
  std::memset(file_vars, 0xff, sizeof file_vars);
  gs::enforcer::SplitLimitsFile(text.data(), file_vars, 64);
  size_t n = 0;
  while (n < 64 && file_vars[n] != nullptr) ++n;
  GS_FUZZ_CHECK(n < 64);
  for (size_t i = 0; i < n; ++i) {
    GS_FUZZ_CHECK(file_vars[i] >= text.data() && file_vars[i] < text.data() + text.size());
  }

  std::vector<std::string> env_lines = parts.size() > 1 ? gs::fuzz::Lines(parts[1]) : std::vector<std::string>{};
  std::vector<const char*> env;
  for (const auto& l : env_lines) env.push_back(l.c_str());
  env.push_back(nullptr);

  gs::enforcer::Config config;
  gs::enforcer::BuildConfig(has_file ? file_vars : nullptr, env.data(), &config);
  GS_FUZZ_CHECK(strnlen(config.region_path, sizeof config.region_path) < sizeof config.region_path);
  GS_FUZZ_CHECK(strnlen(config.cards_dir, sizeof config.cards_dir) < sizeof config.cards_dir);
  GS_FUZZ_CHECK(strnlen(config.errors, sizeof config.errors) < sizeof config.errors);
  for (const auto& uuid : config.device_uuid) GS_FUZZ_CHECK(strnlen(uuid, sizeof uuid) < sizeof uuid);
  for (uint32_t sm : config.sm_limit) GS_FUZZ_CHECK(sm < 100);
  if (!has_file) GS_FUZZ_CHECK(!config.limits_file_used);
  return 0;
}
