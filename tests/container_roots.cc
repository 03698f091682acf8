#include "tests/container_roots.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/harness.h"

namespace fs = std::filesystem;

namespace gs::testing {

bool Have(const char* tool) {
  return system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) == 0;
}

void BusyboxRootfs(const std::string& r) {
  for (const char* d : {"bin", "etc", "dev", "proc", "sys", "tmp"}) fs::create_directories(r + "/" + d);
  fs::copy_file("/bin/busybox", r + "/bin/busybox", fs::copy_options::overwrite_existing);
  for (const char* a : {"sh", "ls", "cat", "env", "grep", "test", "readlink", "echo"}) {
    std::error_code ec;
    fs::create_symlink("busybox", r + "/bin/" + a, ec);
  }
  std::ofstream(r + "/etc/passwd") << "root:x:0:0:root:/:/bin/sh\n";
  std::ofstream(r + "/etc/group") << "root:x:0:\n";
}

void CopyProgram(const std::string& r, const std::string& bin, const std::string& dest, bool strip_debug) {
  if (strip_debug)
    RunProcess({"objcopy", "--strip-debug", bin, r + dest});
  else
    fs::copy_file(bin, r + dest, fs::copy_options::overwrite_existing);
  Result ldd = RunProcess({"ldd", bin});
  std::istringstream in(ldd.out);
  for (std::string line; std::getline(in, line);) {
    auto slash = line.find('/');
    if (slash == std::string::npos || line.find("libcuda") != std::string::npos) continue;
    std::string path = line.substr(slash, line.find(' ', slash) - slash);
    fs::create_directories(r + fs::path(path).parent_path().string());
    fs::copy_file(fs::canonical(path), r + path, fs::copy_options::overwrite_existing);
  }
}

void GlibcRootfs(const std::string& r) {
  BusyboxRootfs(r);
  CopyProgram(r, ProbeBin(), "/bin/cuda_probe");
}

}  // namespace gs::testing
