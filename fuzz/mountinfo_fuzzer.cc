// /proc/<pid>/mountinfo as the node agent's memory watchdog reads it for every process NVML
// lists (src/host/proc_mounts.h ParseMountinfo, DevicesMountedAt). A container with mount
// rights shapes its own mount table (mount points with spaces, newlines, backslashes), so
// the text is outside input.
//
// Checked (the header's promises): every entry came from one line of the input that has
// the separator " - " and a type after it; its mount point has no newline unless the input
// spelled one as \012; DevicesMountedAt returns exactly the entries at that point, in order.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/host/proc_mounts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = gs::fuzz::AsText(data, size);
  auto entries = gs::host::ParseMountinfo(text);
  size_t lines = text.empty() ? 0 : 1;
  for (char c : text) lines += c == '\n';
  GS_FUZZ_CHECK(entries.size() <= lines);
  const bool escaped_newline = text.find("\\012") != std::string_view::npos;
  for (const auto& e : entries) {
    GS_FUZZ_CHECK(!e.mount_point.empty() && !e.fs_type.empty());
    GS_FUZZ_CHECK(escaped_newline || e.mount_point.find('\n') == std::string::npos);
  }
  for (const char* point : {"/var/run/gpuslice", "/run/gpuslice"}) {
    auto devs = gs::host::DevicesMountedAt(entries, point);
    size_t k = 0;
    for (const auto& e : entries)
      if (e.mount_point == point) {
        GS_FUZZ_CHECK(k < devs.size() && devs[k].first == e.major && devs[k].second == e.minor);
        ++k;
      }
    GS_FUZZ_CHECK(k == devs.size());
  }
  return 0;
}
