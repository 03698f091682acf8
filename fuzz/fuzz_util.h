// Helpers shared by the fuzz targets (docs/fuzzing.md): splitting one input into the
// several texts a parser takes, and a check that turns a broken invariant into a crash
// libFuzzer reports and keeps. Fuzz-only code: never linked into gpuslice.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
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

// A directory of the target's own, made at the first call (under /dev/shm when there is
// one: a tmpfs, so a target that writes files per input does no disk I/O) and removed when
// libFuzzer exits. One per process: two targets running at once never share it.
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::error_code ec;
    std::string tmpl = std::filesystem::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0
                           ? "/dev/shm/gs-fuzz-XXXXXX"
                           : "/tmp/gs-fuzz-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    static std::string scratch = tmpl;
    std::atexit([] {
      std::error_code e;
      std::filesystem::remove_all(scratch, e);
    });
    return tmpl;
  }();
  return dir;
}

// Writes `bytes` to `path` (replacing it); aborts when it cannot (the scratch directory
// is the target's own: a failure is the harness's bug, not the parser's).
inline void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
    std::abort();
  }
}

// The bytes of `path`; `*found` false when it cannot be read.
inline std::string ReadFile(const std::string& path, bool* found = nullptr) {
  std::ifstream f(path, std::ios::binary);
  if (found != nullptr) *found = static_cast<bool>(f);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Takes fixed-size little-endian numbers off the front of an input (0 once it runs out).
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  uint64_t Take(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes && left_ > 0; ++i, ++p_, --left_) v |= static_cast<uint64_t>(*p_) << (8 * i);
    return v;
  }
  // Up to n bytes (fewer at the end of the input).
  std::string_view Bytes(size_t n) {
    n = n < left_ ? n : left_;
    std::string_view out(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    left_ -= n;
    return out;
  }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
};

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
