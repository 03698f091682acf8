#include "src/container/runtime_config.h"

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
                         {"stages", {"prestart"}}};
  return hook.dump(2) + "\n";
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
     {"docker calls NVIDIA's own hook for --gpus: use --mode cdi and docker run --device gpuslice.io/gpu=0", "", "", "",
      ConfigMerge::kReplace}},
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
    return ConfigChange{route.path, route.content != nullptr ? route.content : HookJson(r), route.note, route.merge};
  }
  return InvalidArgument("--runtime must be " + RuntimeNames() + ", not '" + r.runtime + "'");
}

Status ApplyRuntimeConfig(const RuntimeConfigRequest& r, const ConfigChange& c) {
  if (c.path.empty()) return Status::Ok();
  std::string path = r.root + c.path;
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
