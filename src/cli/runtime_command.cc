#include "src/cli/runtime_command.h"

#include <iostream>

#include "src/common/flags.h"
#include "src/container/runtime_config.h"

namespace gs::cli {

int RuntimeCommand(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "configure") {
    std::cerr << "usage: gpuslice runtime configure --runtime " << container::RuntimeNames("|", "|")
              << " [--mode cdi|hook] [--write]"
                 " [--hook-dir DIR] [--force]\n";
    return 2;
  }
  container::RuntimeConfigRequest r;
  bool write = false;
  FlagSet f("runtime configure", "Prints (or applies) the runtime configuration for CDI or the OCI hook.");
  f.String("runtime", &r.runtime, container::RuntimeNames());
  f.String("mode", &r.mode, "cdi or hook");
  f.Bool("write", &write, "apply it (merging into existing files)");
  f.String("root", &r.root, "apply under this directory instead of / (for images and tests)");
  f.String("gpuslice", &r.gpuslice_path, "path of gpuslice for the hook");
  f.String("enforcer", &r.enforcer_path, "libgpuslice.so for the hook to inject");
  f.String("driver-root", &r.driver_root, "driver root for the hook (a simulated node's root)");
  f.String("state-dir", &r.state_dir, "state directory for the hook");
  f.String("hook-log", &r.hook_log, "file the hook appends its refusals to (--mode hook)");
  f.Bool("accept-env-when-unprivileged", &r.accept_env_when_unprivileged,
         "the hook gives GPUs to unprivileged containers that only set NVIDIA_VISIBLE_DEVICES (--mode hook; "
         "single-tenant hosts only)");
  f.String("hook-dir", &r.hook_dir,
           "--runtime docker --mode hook: the directory on dockerd's PATH for nvidia-container-runtime-hook");
  f.Bool("force", &r.force,
         "--runtime docker --mode hook: replace an nvidia-container-runtime-hook that is not gpuslice's");
  std::vector<std::string> rest;
  if (Status s = f.Parse(std::vector<std::string>(args.begin() + 1, args.end()), &rest); !s.ok()) {
    std::cerr << "gpuslice runtime: " << s.message() << "\n";
    return 2;
  }
  if (f.help_requested()) return std::cout << f.Usage(), 0;
  auto change = container::PlanRuntimeConfig(r);
  if (!change.ok()) {
    std::cerr << "gpuslice runtime: " << change.status().message() << "\n";
    return 2;
  }
  // docker runs the first nvidia-container-runtime-hook on its PATH: say which others exist.
  std::string others;
  if (change->merge == container::ConfigMerge::kDockerHook)
    for (const auto& p : container::OtherDockerHooks(r.root, change->path))
      others += "# note: " + r.root + p + " exists too; dockerd runs whichever comes first on its PATH\n";
  if (!write) {
    if (!change->path.empty()) std::cout << "# " << change->path << "\n" << change->content << "\n";
    std::cout << "# " << change->note << "\n" << others;
    return 0;
  }
  if (Status s = container::ApplyRuntimeConfig(r, *change); !s.ok()) {
    std::cerr << "gpuslice runtime: " << s.message() << "\n";
    return 1;
  }
  std::cout << (change->path.empty() ? "nothing to change" : "updated " + r.root + change->path) << "\n# "
            << change->note << "\n"
            << others;
  return 0;
}

}  // namespace gs::cli
