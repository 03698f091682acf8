// Helpers shared by the fuzz targets (docs/fuzzing.md): splitting one input into the
// several texts a parser takes, and a check that turns a broken invariant into a crash
// libFuzzer reports and keeps. Fuzz-only code: never linked into gpuslice.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

// A broken invariant is a bug like a sanitizer report: print it and abort.
#define GS_FUZZ_CHECK(cond)                                                                  \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

namespace gs::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The parts of `text` between lines "----" (seed files stay readable; the dictionaries
// offer the separator to the mutator).
inline std::vector<std::string_view> SplitParts(std::string_view text, size_t max_parts) {
  static constexpr std::string_view kSep = "\n----\n";
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    size_t at = text.find(kSep);
    if (at == std::string_view::npos) break;
    parts.push_back(text.substr(0, at));
    text.remove_prefix(at + kSep.size());
  }
  parts.push_back(text);
  return parts;
}

// The lines of `text`, without their '\n'.
inline std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    out.emplace_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

}  // namespace gs::fuzz
