#include "src/container/runtime_config.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/common/flags.h"

namespace fs = std::filesystem;

namespace gs::container {
namespace {

std::string HookJson(const RuntimeConfigRequest& r) {
  std::vector<std::string> args = {"gpuslice", "hook", "--enforcer", r.enforcer_path};
  if (!r.driver_root.empty()) args.insert(args.end(), {"--driver-root", r.driver_root});
  if (!r.state_dir.empty()) args.insert(args.end(), {"--state-dir", r.state_dir});
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

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

StatusOr<ConfigChange> PlanRuntimeConfig(const RuntimeConfigRequest& r) {
  if (r.mode != "cdi" && r.mode != "hook") return InvalidArgument("--mode must be cdi or hook, not '" + r.mode + "'");
  if (r.runtime == "containerd") {
    if (r.mode == "hook")
      return InvalidArgument("containerd runs OCI hooks only from the image's config: use --mode cdi");
    return ConfigChange{"/etc/containerd/config.toml",
                        "\n# added by gpuslice runtime configure: CDI for containerd 1.7 (on by default in 2.x)\n"
                        "[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = true\n"
                        "  cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\n",
                        "restart containerd; pods get devices through the node agent's cdi-cri strategy"};
  }
  if (r.runtime == "crio") {
    if (r.mode == "hook")
      return ConfigChange{"/usr/share/containers/oci/hooks.d/gpuslice.json", HookJson(r), "CRI-O reads hooks_dir"};
    return ConfigChange{"/etc/crio/crio.conf.d/99-gpuslice.conf",
                        "# added by gpuslice runtime configure\n[crio.runtime]\n"
                        "cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\n",
                        "CDI is on by default since CRI-O 1.23; this names the spec directories"};
  }
  if (r.runtime == "docker") {
    if (r.mode == "hook")
      return InvalidArgument(
          "docker calls NVIDIA's own hook for --gpus: use --mode cdi and docker run --device gpuslice.io/gpu=0");
    return ConfigChange{"/etc/docker/daemon.json", R"({"features": {"cdi": true}})",
                        "docker >= 25 (on by default from 28.2); then: docker run --device gpuslice.io/gpu=all"};
  }
  if (r.runtime == "podman") {
    if (r.mode == "hook")
      return ConfigChange{"/usr/share/containers/oci/hooks.d/gpuslice.json", HookJson(r),
                          "then: podman run -v /dev/null:/var/run/nvidia-container-devices/0:ro ... (the hook ignores "
                          "NVIDIA_VISIBLE_DEVICES of unprivileged containers unless its args get "
                          "--accept-env-when-unprivileged)"};
    return ConfigChange{"", "",
                        "podman reads CDI specs from /etc/cdi and /var/run/cdi: nothing to configure; "
                        "podman run --device gpuslice.io/gpu=0 ..."};
  }
  return InvalidArgument("--runtime must be containerd, crio, docker or podman, not '" + r.runtime + "'");
}

Status ApplyRuntimeConfig(const RuntimeConfigRequest& r, const ConfigChange& c) {
  if (c.path.empty()) return Status::Ok();
  std::string path = r.root + c.path;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::string current = fs::exists(path) ? ReadFile(path) : "";
  std::string next;
  if (r.runtime == "docker") {
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
  } else if (r.runtime == "containerd") {
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

int RuntimeCommand(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "configure") {
    std::cerr
        << "usage: gpuslice runtime configure --runtime containerd|crio|docker|podman [--mode cdi|hook] [--write]\n";
    return 2;
  }
  RuntimeConfigRequest r;
  bool write = false;
  FlagSet f("runtime configure", "Prints (or applies) the runtime configuration for CDI or the OCI hook.");
  f.String("runtime", &r.runtime, "containerd, crio, docker or podman");
  f.String("mode", &r.mode, "cdi or hook");
  f.Bool("write", &write, "apply it (merging into existing files)");
  f.String("root", &r.root, "apply under this directory instead of / (for images and tests)");
  f.String("gpuslice", &r.gpuslice_path, "path of gpuslice for the hook");
  f.String("enforcer", &r.enforcer_path, "libgpuslice.so for the hook to inject");
  f.String("driver-root", &r.driver_root, "driver root for the hook (a simulated node's root)");
  f.String("state-dir", &r.state_dir, "state directory for the hook");
  std::vector<std::string> rest;
  if (Status s = f.Parse(std::vector<std::string>(args.begin() + 1, args.end()), &rest); !s.ok()) {
    std::cerr << "gpuslice runtime: " << s.message() << "\n";
    return 2;
  }
  if (f.help_requested()) return std::cout << f.Usage(), 0;
  auto change = PlanRuntimeConfig(r);
  if (!change.ok()) {
    std::cerr << "gpuslice runtime: " << change.status().message() << "\n";
    return 2;
  }
  if (!write) {
    if (!change->path.empty()) std::cout << "# " << change->path << "\n" << change->content << "\n";
    std::cout << "# " << change->note << "\n";
    return 0;
  }
  if (Status s = ApplyRuntimeConfig(r, *change); !s.ok()) {
    std::cerr << "gpuslice runtime: " << s.message() << "\n";
    return 1;
  }
  std::cout << (change->path.empty() ? "nothing to change" : "updated " + r.root + change->path) << "\n# "
            << change->note << "\n";
  return 0;
}

}  // namespace gs::container
