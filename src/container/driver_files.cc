#include "src/container/driver_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/common/file.h"
#include "src/model/container_edits.h"

namespace fs = std::filesystem;

namespace gs::container {
namespace {

// File name prefixes per capability (NVIDIA container toolkit conventions).
struct CapFiles {
  const char* cap;
  std::vector<const char*> libs;
  std::vector<const char*> bins;
};
const std::vector<CapFiles>& Table() {
  static const std::vector<CapFiles> t = {
      {"compute",
       {"libcuda.so", "libcudadebugger.so", "libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so", "libnvidia-opencl.so",
        "libnvidia-allocator.so", "libnvidia-gpucomp.so"},
       {}},
      {"utility", {"libnvidia-ml.so", "libnvidia-cfg.so"}, {"nvidia-smi", "nvidia-debugdump"}},
      {"video", {"libnvcuvid.so", "libnvidia-encode.so", "libnvidia-opticalflow.so"}, {}},
      {"graphics",
       {"libnvidia-glcore.so", "libnvidia-tls.so", "libnvidia-glsi.so", "libEGL_nvidia.so", "libGLX_nvidia.so",
        "libGLESv2_nvidia.so"},
       {}},
      {"display", {}, {}},
      {"ngx", {"libnvidia-ngx.so"}, {}},
      {"compat32", {}, {}},
  };
  return t;
}

const char* const kLibDirs[] = {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/lib/x86_64-linux-gnu",
                                "/usr/lib/aarch64-linux-gnu"};

}  // namespace

StatusOr<std::set<std::string>> ParseCapabilities(const std::string& text) {
  std::set<std::string> caps;
  if (text.empty()) return model::DefaultCapabilities();
  std::stringstream in(text);
  for (std::string c; std::getline(in, c, ',');) {
    if (c.empty()) continue;
    if (c == "all") {
      for (const auto& t : Table()) caps.insert(t.cap);
      continue;
    }
    bool known = false;
    for (const auto& t : Table()) known |= c == t.cap;
    if (!known) return InvalidArgument("NVIDIA_DRIVER_CAPABILITIES: unknown capability '" + c + "'");
    caps.insert(c);
  }
  if (caps.count("video") || caps.count("graphics") || caps.count("display")) caps.insert("compute");
  return caps;
}

std::vector<HostFile> FindDriverFiles(const std::string& driver_root, const std::set<std::string>& caps) {
  std::string root = driver_root == "/" ? "" : driver_root;
  std::vector<HostFile> out;
  std::set<std::string> seen;
  for (const auto& t : Table()) {
    if (!caps.count(t.cap)) continue;
    for (const char* dir : kLibDirs) {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(root + dir, ec)) {
        std::string name = e.path().filename().string();
        bool match = false;
        for (const char* prefix : t.libs) match |= name.rfind(prefix, 0) == 0;
        if (!match) continue;
        // Mount the file a name resolves to, under the name: soname links keep working.
        std::string resolved = fs::canonical(e.path(), ec).string();
        if (ec || !fs::is_regular_file(resolved) || !seen.insert(name).second) continue;
        out.push_back({resolved, std::string(dir) + "/" + name, true});
      }
    }
    for (const char* bin : t.bins) {
      std::string p = root + "/usr/bin/" + bin;
      struct stat st;
      // A simulated root's nvidia-smi is a script naming host paths: not for containers.
      if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && SimulatorState(driver_root).empty())
        out.push_back({p, std::string("/usr/bin/") + bin});
    }
  }
  return out;
}

std::string SimulatorState(const std::string& driver_root) {
  if (driver_root.empty() || driver_root == "/") return "";
  std::string p = driver_root + "/state";
  return access(p.c_str(), R_OK) == 0 ? p : "";
}

namespace {
uint64_t Fnv1a(const std::string& data) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : data) h = (h ^ c) * 1099511628211ULL;
  return h;
}
}  // namespace

StatusOr<EnforcerInstall> InstallEnforcer(const std::string& source, const std::string& state_dir) {
  auto read = ReadFile(source);
  if (!read.ok()) return FailedPrecondition("enforcer library not found at " + source + " (set --enforcer)");
  std::string bytes = std::move(*read);
  char tag[64];
  snprintf(tag, sizeof(tag), "%s-%08llx", GS_VERSION, static_cast<unsigned long long>(Fnv1a(bytes) & 0xffffffffULL));
  EnforcerInstall e;
  std::string dir = state_dir + "/lib/" + tag;
  e.host_path = dir + "/libgpuslice.so";
  e.container_path = std::string("/usr/lib/gpuslice/") + tag + "/libgpuslice.so";
  e.preload_file = dir + "/ld.so.preload";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Internal("cannot create " + dir + ": " + ec.message());
  // Hooks of containers starting at once install side by side: each writes its own
  // temporary file and links it into place, so no one ever sees a half-written file. An
  // installed file is never replaced, not even by an identical one: running containers have
  // it mounted (an empty preload file, even for an instant, would start a process without
  // the enforcer), and a hook that opened it to bind-mount it would then fail: the kernel
  // does not bind-mount a file that was renamed over (ENOENT). link() fails on an existing
  // file where rename() would replace it, so the first hook's file stays.
  const std::string preload_text = e.container_path + "\n";
  auto install = [&](const std::string& path, const std::string& text, mode_t mode) -> Status {
    if (access(path.c_str(), F_OK) == 0) return Status::Ok();
    std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(gettid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << text;
      out.flush();
      if (!out) return Internal("cannot write " + tmp);
    }
    chmod(tmp.c_str(), mode);
    int linked = link(tmp.c_str(), path.c_str()) == 0 || errno == EEXIST ? 0 : errno;
    unlink(tmp.c_str());
    if (linked != 0) return Internal("cannot install " + path + ": " + strerror(linked));
    return Status::Ok();
  };
  GS_RETURN_IF_ERROR(install(e.host_path, bytes, 0755));
  GS_RETURN_IF_ERROR(install(e.preload_file, preload_text, 0644));
  return e;
}

}  // namespace gs::container
