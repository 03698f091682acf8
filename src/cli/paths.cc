#include "src/cli/paths.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>

namespace gs::cli {
namespace {
std::string Dir(const std::string& p) {
  return p.substr(0, p.find_last_of('/'));
}
bool Exists(const std::string& p) {
  return access(p.c_str(), F_OK) == 0;
}
}  // namespace

std::string SelfExecutable() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "gpuslice";
  buf[n] = 0;
  return buf;
}

std::string SimLibraryDir() {
  if (const char* env = getenv("GPUSLICE_SIM_LIB_DIR")) return env;
  std::string prefix = Dir(Dir(SelfExecutable()));
  for (const char* rel : {"/sim/lib", "/lib/gpuslice/sim"})
    if (Exists(prefix + rel + "/libcuda.so.1")) return prefix + rel;
  return prefix + "/sim/lib";
}

std::string EnforcerLibrary() {
  if (const char* env = getenv("GPUSLICE_ENFORCER")) return env;
  std::string prefix = Dir(Dir(SelfExecutable()));
  for (const char* rel : {"/enforcer/libgpuslice.so", "/lib/gpuslice/libgpuslice.so"})
    if (Exists(prefix + rel)) return prefix + rel;
  return prefix + "/enforcer/libgpuslice.so";
}

}  // namespace gs::cli
