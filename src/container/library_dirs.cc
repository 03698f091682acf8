#include "src/container/library_dirs.h"

namespace gs::container {
namespace {

#if defined(__aarch64__)
constexpr const char* kTriple = "aarch64-linux-gnu";
#else
constexpr const char* kTriple = "x86_64-linux-gnu";
#endif

std::string BaseName(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
}

}  // namespace

std::vector<std::string> DefaultImageLibraryDirs() {
  return {std::string("/usr/lib/") + kTriple, "/usr/lib64"};
}

std::string ImageLibraryDir(const RootFs& root) {
  // Merged-/usr images reach /lib* through a link, so the /usr directories come first.
  const std::string candidates[] = {
      std::string("/usr/lib/") + kTriple, "/usr/lib64", std::string("/lib/") + kTriple, "/lib64", "/usr/lib", "/lib"};
  for (const auto& dir : candidates)
    if (root.HasRegularFile(dir + "/libc.so.6")) return dir;
  return "";
}

void PlaceLibraries(model::ContainerEdits* edits, const std::vector<std::string>& dirs) {
  if (dirs.empty()) return;
  std::vector<model::Mount> placed;
  for (const auto& m : edits->mounts) {
    if (!m.library) {
      placed.push_back(m);
      continue;
    }
    for (const auto& dir : dirs) {
      model::Mount copy = m;
      copy.container_path = dir + "/" + BaseName(m.container_path);
      placed.push_back(copy);
    }
  }
  edits->mounts = std::move(placed);
}

}  // namespace gs::container
