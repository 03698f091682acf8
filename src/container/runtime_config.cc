#include "src/container/runtime_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "src/common/file.h"

namespace fs = std::filesystem;

namespace gs::container {
namespace {

std::string HookJson(const RuntimeConfigRequest& r) {
  std::vector<std::string> args = {"gpuslice", "hook", "--enforcer", r.enforcer_path};
  if (!r.driver_root.empty()) args.insert(args.end(), {"--driver-root", r.driver_root});
  if (!r.state_dir.empty()) args.insert(args.end(), {"--state-dir", r.state_dir});
  if (!r.hook_log.empty()) args.insert(args.end(), {"--log", r.hook_log});
  if (r.accept_env_when_unprivileged) args.push_back("--accept-env-when-unprivileged");
  nlohmann::json hook = {{"version", "1.0.0"},
                         {"hook",
                          {{"path", r.gpuslice_path},
                           {"args", args},
                           // Explicit and minimal: the container image's environment never reaches the hook.
                           {"env", {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}}}},
                         {"when", {{"always", true}}},  // containers without NVIDIA_VISIBLE_DEVICES are left alone
                         // One command line for both: the hook tells poststop by the state's status.
                         {"stages", {"prestart", "poststop"}}};
  return hook.dump(2) + "\n";
}

// `s` as one word of a POSIX shell command line.
std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// The executable dockerd runs as `nvidia-container-runtime-hook prestart`. It hands the
// state on stdin to `gpuslice hook` with an explicit minimal environment (whatever dockerd,
// containerd and runc had stays out). docker adds the hook, and sets NVIDIA_VISIBLE_DEVICES
// after the image's and `-e`'s, only for containers started with --gpus: the hook takes the
// device list from that variable (--accept-env-when-unprivileged).
std::string DockerHookScript(const RuntimeConfigRequest& r) {
  std::vector<std::string> args = {r.gpuslice_path, "hook", "--enforcer", r.enforcer_path};
  if (!r.driver_root.empty()) args.insert(args.end(), {"--driver-root", r.driver_root});
  if (!r.state_dir.empty()) args.insert(args.end(), {"--state-dir", r.state_dir});
  if (!r.hook_log.empty()) args.insert(args.end(), {"--log", r.hook_log});
  args.push_back("--accept-env-when-unprivileged");
  std::string command = "exec /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  for (const auto& a : args) command += " " + ShellQuote(a);
  return std::string("#!/bin/sh\n") + kDockerHookMarker +
         "\n# dockerd runs this for `docker run --gpus ...` as `nvidia-container-runtime-hook prestart`, the\n"
         "# container's state on stdin. Rewritten by the same command; remove it and restart dockerd to undo.\n" +
         command + " \"$@\"\n";
}

// The paths the docker hook's script names: absolute (the hook runs in the container's
// bundle directory), one line each.
Status CheckDockerHookPaths(const RuntimeConfigRequest& r) {
  const std::pair<const char*, const std::string*> paths[] = {
      {"--hook-dir", &r.hook_dir},       {"--gpuslice", &r.gpuslice_path}, {"--enforcer", &r.enforcer_path},
      {"--driver-root", &r.driver_root}, {"--state-dir", &r.state_dir},    {"--hook-log", &r.hook_log}};
  for (const auto& [flag, value] : paths) {
    if (value->empty() && std::string(flag) != "--hook-dir" && std::string(flag) != "--gpuslice") continue;
    if (value->empty() || (*value)[0] != '/')
      return InvalidArgument(std::string(flag) + " must be an absolute path, not '" + *value + "'");
    for (unsigned char ch : *value)
      if (ch < 0x20 || ch == 0x7f) return InvalidArgument(std::string(flag) + " contains a control character");
  }
  return Status::Ok();
}

// One route (CDI or the hook) of one runtime: the change, or why the route is not offered.
struct Route {
  const char* refusal;  // not null: not offered, and what to do instead
  const char* path;     // "" = nothing to write
  const char* content;  // null: the hook's file (HookJson)
  const char* note;
  ConfigMerge merge;
};

struct Runtime {
  const char* name;
  Route cdi, hook;
};

constexpr char kHooksDir[] = "/usr/share/containers/oci/hooks.d/gpuslice.json";

// One row per runtime.
constexpr Runtime kRuntimes[] = {
    {"containerd",
     {nullptr, "/etc/containerd/config.toml",
      "\n# added by gpuslice runtime configure: CDI for containerd 1.7 (on by default in 2.x)\n"
      "[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = true\n"
      "  cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\n",
      "restart containerd; pods get devices through the node agent's cdi-cri strategy", ConfigMerge::kTomlAppend},
     {"containerd runs OCI hooks only from the image's config: use --mode cdi", "", "", "", ConfigMerge::kReplace}},
    {"crio",
     {nullptr, "/etc/crio/crio.conf.d/99-gpuslice.conf",
      "# added by gpuslice runtime configure\n[crio.runtime]\n"
      "cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\n",
      "CDI is on by default since CRI-O 1.23; this names the spec directories", ConfigMerge::kReplace},
     {nullptr, kHooksDir, nullptr, "CRI-O reads hooks_dir", ConfigMerge::kReplace}},
    {"docker",
     {nullptr, "/etc/docker/daemon.json", R"({"features": {"cdi": true}})",
      "docker >= 25 (on by default from 28.2); then: docker run --device gpuslice.io/gpu=all",
      ConfigMerge::kJsonFeaturesCdi},
     {nullptr, "", nullptr,
      "restart dockerd: it looks for nvidia-container-runtime-hook on its PATH only when it starts; then "
      "docker run --gpus 1 -e CUDA_DEVICE_MEMORY_LIMIT=2g -e CUDA_DEVICE_SM_LIMIT=30 IMAGE",
      ConfigMerge::kDockerHook}},
    {"podman",
     {nullptr, "", "",
      "podman reads CDI specs from /etc/cdi and /var/run/cdi: nothing to configure; "
      "podman run --device gpuslice.io/gpu=0 ...",
      ConfigMerge::kReplace},
     {nullptr, kHooksDir, nullptr,
      "then: podman run -v /dev/null:/var/run/nvidia-container-devices/0:ro ... (the hook ignores "
      "NVIDIA_VISIBLE_DEVICES of unprivileged containers unless configured with "
      "--accept-env-when-unprivileged, for single-tenant hosts only)",
      ConfigMerge::kReplace}},
};

}  // namespace

std::string RuntimeNames(const std::string& separator, const std::string& last_separator) {
  std::string out;
  const size_t n = std::size(kRuntimes);
  for (size_t i = 0; i < n; ++i)
    out += (i == 0 ? "" : i + 1 == n ? last_separator : separator) + std::string(kRuntimes[i].name);
  return out;
}

StatusOr<ConfigChange> PlanRuntimeConfig(const RuntimeConfigRequest& r) {
  if (r.mode != "cdi" && r.mode != "hook") return InvalidArgument("--mode must be cdi or hook, not '" + r.mode + "'");
  if (r.mode != "hook" && (!r.hook_log.empty() || r.accept_env_when_unprivileged))
    return InvalidArgument(
        "--hook-log and --accept-env-when-unprivileged are options of the OCI hook: only with --mode hook");
  for (const auto& rt : kRuntimes) {
    if (r.runtime != rt.name) continue;
    const Route& route = r.mode == "hook" ? rt.hook : rt.cdi;
    if (route.refusal != nullptr) return InvalidArgument(route.refusal);
    if (r.force && route.merge != ConfigMerge::kDockerHook)
      return InvalidArgument(
          "--force replaces another program's nvidia-container-runtime-hook: only with "
          "--runtime docker --mode hook");
    if (route.merge == ConfigMerge::kDockerHook) {
      GS_RETURN_IF_ERROR(CheckDockerHookPaths(r));
      return ConfigChange{r.hook_dir + "/" + kDockerHookName, DockerHookScript(r), route.note, route.merge};
    }
    return ConfigChange{route.path, route.content != nullptr ? route.content : HookJson(r), route.note, route.merge};
  }
  return InvalidArgument("--runtime must be " + RuntimeNames() + ", not '" + r.runtime + "'");
}

HookFileOwner ClassifyHookFile(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return errno == ENOENT ? HookFileOwner::kAbsent : HookFileOwner::kForeign;
  if (!S_ISREG(st.st_mode)) return HookFileOwner::kForeign;
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return HookFileOwner::kForeign;
  char buf[512];
  ssize_t n = read(fd, buf, sizeof(buf));
  close(fd);
  if (n <= 0) return HookFileOwner::kForeign;
  std::string head(buf, static_cast<size_t>(n));
  size_t first = head.find('\n');
  if (first == std::string::npos) return HookFileOwner::kForeign;
  size_t second = head.find('\n', first + 1);
  if (second == std::string::npos) return HookFileOwner::kForeign;
  return head.substr(first + 1, second - first - 1) == kDockerHookMarker ? HookFileOwner::kOurs
                                                                         : HookFileOwner::kForeign;
}

std::vector<std::string> OtherDockerHooks(const std::string& root, const std::string& ours) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const char* dir : {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}) {
    std::string path = std::string(dir) + "/" + kDockerHookName;
    fs::file_status st = fs::symlink_status(root + path, ec);
    if (ec || !fs::exists(st)) continue;
    if (fs::equivalent(root + path, root + ours, ec) || path == ours) continue;  // /bin may be /usr/bin
    out.push_back(path);
  }
  return out;
}

namespace {

// The docker hook's executable: written only over nothing or over gpuslice's own, unless
// forced; through a new file renamed into place, so dockerd never finds half a script.
Status WriteDockerHook(const RuntimeConfigRequest& r, const std::string& path, const std::string& content) {
  const HookFileOwner owner = ClassifyHookFile(path);
  if (owner == HookFileOwner::kForeign && !r.force)
    return FailedPrecondition(path +
                              " exists and is not gpuslice's (the NVIDIA Container Toolkit's hook?): docker runs "
                              "the first " +
                              kDockerHookName +
                              " on its PATH for --gpus. Move it away, choose another --hook-dir, or run again "
                              "with --force to replace it");
  if (owner == HookFileOwner::kOurs) {
    if (auto current = ReadFile(path); current.ok() && *current == content) return Status::Ok();
  }
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::string tmp = path + ".gpuslice-tmp";
  unlink(tmp.c_str());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0755);
  if (fd < 0) return Internal("cannot write " + tmp + ": " + strerror(errno));
  bool ok = fchmod(fd, 0755) == 0 && write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = strerror(errno);
    unlink(tmp.c_str());
    return Internal("cannot write " + path + ": " + why);
  }
  return Status::Ok();
}

}  // namespace

Status ApplyRuntimeConfig(const RuntimeConfigRequest& r, const ConfigChange& c) {
  if (c.path.empty()) return Status::Ok();
  std::string path = r.root + c.path;
  if (c.merge == ConfigMerge::kDockerHook) return WriteDockerHook(r, path, c.content);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::string current;
  if (auto text = ReadFile(path); text.ok()) current = std::move(*text);
  std::string next;
  if (c.merge == ConfigMerge::kJsonFeaturesCdi) {
    nlohmann::json j = nlohmann::json::object();
    if (!current.empty()) {
      try {
        j = nlohmann::json::parse(current);
      } catch (const std::exception& e) {
        return FailedPrecondition(path + " is not valid JSON (" + e.what() + "): fix it, then run again");
      }
    }
    j["features"]["cdi"] = true;  // everything else stays as it was
    next = j.dump(2) + "\n";
  } else if (c.merge == ConfigMerge::kTomlAppend) {
    if (current.find("enable_cdi = true") != std::string::npos) return Status::Ok();
    if (current.find("enable_cdi") != std::string::npos)
      return FailedPrecondition(path + " sets enable_cdi otherwise: set enable_cdi = true and cdi_spec_dirs by hand");
    if (current.find("[plugins.\"io.containerd.grpc.v1.cri\"]") != std::string::npos)
      return FailedPrecondition(path +
                                " already has a [plugins.\"io.containerd.grpc.v1.cri\"] table: add "
                                "enable_cdi = true and cdi_spec_dirs to it by hand");
    next = current + c.content;
  } else {
    next = c.content;  // files gpuslice owns
  }
  std::string tmp = path + ".gpuslice-tmp";
  std::ofstream(tmp) << next;
  fs::rename(tmp, path, ec);
  return ec ? Internal("cannot write " + path + ": " + ec.message()) : Status::Ok();
}

}  // namespace gs::container
