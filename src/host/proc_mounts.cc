#include "src/host/proc_mounts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "src/common/file.h"
#include "src/common/proc_identity.h"
#include "src/host/private_copy.h"

namespace gs::host {
namespace {

// The next space-separated field of `line` from *at ("" at the end).
std::string_view NextField(std::string_view line, size_t* at) {
  while (*at < line.size() && line[*at] == ' ') ++*at;
  size_t start = *at;
  while (*at < line.size() && line[*at] != ' ') ++*at;
  return line.substr(start, *at - start);
}

bool ParseU32(std::string_view s, uint32_t* out) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// The kernel escapes space, tab, newline and backslash in paths as \ooo (show_path, mangle).
std::string Unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const char a = s[i + 1], b = s[i + 2], c = s[i + 3];
      if (a >= '0' && a <= '3' && b >= '0' && b <= '7' && c >= '0' && c <= '7') {
        out += static_cast<char>((a - '0') * 64 + (b - '0') * 8 + (c - '0'));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

bool ParseLine(std::string_view line, MountEntry* e) {
  size_t at = 0;
  uint32_t parent = 0;
  if (!ParseU32(NextField(line, &at), &e->id) || !ParseU32(NextField(line, &at), &parent)) return false;
  std::string_view dev = NextField(line, &at);
  size_t colon = dev.find(':');
  if (colon == std::string_view::npos || !ParseU32(dev.substr(0, colon), &e->major) ||
      !ParseU32(dev.substr(colon + 1), &e->minor))
    return false;
  if (NextField(line, &at).empty()) return false;  // root
  std::string_view point = NextField(line, &at);
  if (point.empty() || NextField(line, &at).empty()) return false;  // mount point, options
  // Optional fields (shared:N, master:N, ...) up to the separator.
  for (std::string_view f = NextField(line, &at); f != "-"; f = NextField(line, &at)) {
    if (f.empty()) return false;
    if (f.substr(0, 7) == "shared:" && !ParseU32(f.substr(7), &e->peer_group)) return false;
    if (f.substr(0, 7) == "master:" && !ParseU32(f.substr(7), &e->master)) return false;
  }
  std::string_view type = NextField(line, &at);
  if (type.empty()) return false;
  e->mount_point = Unescape(point);
  e->fs_type = Unescape(type);
  return true;
}

}  // namespace

StatusOr<uint32_t> MountIdOf(const std::string& path) {
  int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return Internal("cannot open " + path + ": " + strerror(errno));
  auto info = ReadFile("/proc/self/fdinfo/" + std::to_string(fd));
  close(fd);
  if (!info.ok()) return info.status();
  size_t at = info->find("mnt_id:");
  uint32_t id = 0;
  if (at == std::string::npos) return Internal("no mnt_id in /proc/self/fdinfo for " + path);
  at += 7;
  while (at < info->size() && ((*info)[at] == ' ' || (*info)[at] == '\t')) ++at;
  size_t end = info->find('\n', at);
  if (!ParseU32(std::string_view(*info).substr(at, end == std::string::npos ? std::string::npos : end - at), &id))
    return Internal("unreadable mnt_id in /proc/self/fdinfo for " + path);
  return id;
}

std::vector<MountEntry> ParseMountinfo(std::string_view text) {
  std::vector<MountEntry> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    MountEntry e;
    if (ParseLine(line, &e)) out.push_back(std::move(e));
  }
  return out;
}

std::vector<std::pair<uint32_t, uint32_t>> DevicesMountedAt(const std::vector<MountEntry>& entries,
                                                            std::string_view mount_point) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const auto& e : entries)
    if (e.mount_point == mount_point) out.emplace_back(e.major, e.minor);
  return out;
}

StatusOr<ProcessMounts> ReadProcessMounts(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  ProcessMounts m;
  m.start_time = ProcessStartTime(pid);
  if (m.start_time == 0) return Unavailable(dir + ": gone");
  struct stat mine, theirs;
  if (stat("/proc/self/ns/mnt", &mine) != 0 || stat((dir + "/ns/mnt").c_str(), &theirs) != 0)
    return Unavailable(dir + "/ns/mnt: " + strerror(errno));
  m.mount_namespace = {static_cast<uint64_t>(theirs.st_dev), static_cast<uint64_t>(theirs.st_ino)};
  m.same_namespace_as_reader = mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino;
  std::string text;
  int fd = open((dir + "/mountinfo").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  bool read_ok = fd >= 0 && internal::ReadToEnd(fd, kMaxMountinfoBytes, &text);
  int e = errno;
  if (fd >= 0) close(fd);
  if (!read_ok) return Unavailable(dir + "/mountinfo: " + strerror(e));
  m.entries = ParseMountinfo(text);
  // The same start time before and after: the namespace and mount table read were this
  // process's, not those of a process that reused its pid meanwhile.
  if (ProcessStartTime(pid) != m.start_time) return Unavailable(dir + ": gone");
  return m;
}

}  // namespace gs::host
