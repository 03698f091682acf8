// A directory under /tmp that lives as long as the object: made empty, removed with all it
// holds, mounts included (the node agent mounts a tmpfs per container directory, and
// leaves them when it stops, as it must for running containers). For unit and integration
// tests alike (header-only, no other dependency).
#pragma once

#include <stdlib.h>
#include <sys/mount.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace gs::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "gs-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp " + tmpl + " failed");
    path_ = tmpl;
  }
  ~TempDir() {
    UnmountUnder(path_);
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  // Detaches every mount at or below dir, deepest first (/proc/self/mountinfo's fifth
  // field is the mount point).
  static void UnmountUnder(const std::string& dir) {
    std::vector<std::string> points;
    std::ifstream info("/proc/self/mountinfo");
    for (std::string line; std::getline(info, line);) {
      std::istringstream in(line);
      std::string field, point;
      for (int i = 0; i < 5 && in >> field; ++i) point = field;
      if (point == dir || point.rfind(dir + "/", 0) == 0) points.push_back(point);
    }
    std::sort(points.rbegin(), points.rend());
    for (const auto& p : points) umount2(p.c_str(), MNT_DETACH);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace gs::testing
