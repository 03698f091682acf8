#include "src/cli/cdi_command.h"

#include <iostream>

#include "src/cli/node_gpus.h"
#include "src/cli/paths.h"
#include "src/common/flags.h"
#include "src/container/cdi.h"

namespace gs::cli {
namespace {

int Fail(const std::string& m) {
  std::cerr << "gpuslice cdi: " << m << "\n";
  return 1;
}

StatusOr<nlohmann::json> NodeSpec(const std::string& driver_root, const std::string& kind, const std::string& caps,
                                  const std::string& enforcer, const std::string& state_dir, bool slices) {
  container::CdiOptions o;
  o.kind = kind;
  o.plan.driver_root = driver_root;
  GS_ASSIGN_OR_RETURN(o.plan.capabilities, container::ParseCapabilities(caps));
  if (!enforcer.empty()) {
    GS_ASSIGN_OR_RETURN(o.plan.enforcer, container::InstallEnforcer(enforcer, state_dir));
    if (slices) {
      o.slice_hooks.gpuslice = SelfExecutable();
      if (o.slice_hooks.gpuslice.empty() || o.slice_hooks.gpuslice[0] != '/')
        return FailedPrecondition(
            "cannot tell where this gpuslice binary is, which the slice hooks run "
            "(--slices=false: no slices)");
      o.slice_hooks.driver_root = driver_root;
      o.slice_hooks.state_dir = state_dir;
    }
  }
  GS_ASSIGN_OR_RETURN(NodeGpus node, OpenNodeGpus(driver_root));
  return container::GenerateCdiSpec(o, node.gpus);
}

int Generate(const std::vector<std::string>& args) {
  std::string driver_root = "/", output, format = "json", kind = "gpuslice.io/gpu", state_dir = "/var/lib/gpuslice",
              enforcer, caps = "utility,compute";
  bool slices = true;
  FlagSet f("cdi generate", "Writes a CDI spec for this node's GPUs (by index, by UUID, and all).");
  f.String("driver-root", &driver_root, "root of the driver installation", "NVIDIA_DRIVER_ROOT");
  f.String("output", &output, "file, or directory (then <dir>/gpuslice.<format>); default stdout");
  f.String("format", &format, "json or yaml");
  f.String("kind", &kind, "CDI kind (vendor/class)");
  f.String("capabilities", &caps, "driver capabilities to inject (NVIDIA_DRIVER_CAPABILITIES syntax)");
  f.String("state-dir", &state_dir, "where the enforcer is installed for containers");
  f.String("enforcer", &enforcer, "libgpuslice.so to inject (empty: no enforcer)", "GPUSLICE_ENFORCER");
  f.Bool("slices", &slices,
         "with the enforcer: hooks that give each container a slice of its own from its environment "
         "(CUDA_DEVICE_MEMORY_LIMIT, CUDA_DEVICE_SM_LIMIT, ...), shared by all its processes, and turns on "
         "each card with the other containers; they run this gpuslice binary");
  std::vector<std::string> rest;
  if (Status s = f.Parse(args, &rest); !s.ok()) return Fail(s.message());
  if (f.help_requested()) return std::cout << f.Usage(), 0;
  if (format != "json" && format != "yaml") return Fail("--format must be json or yaml, not '" + format + "'");
  auto spec = NodeSpec(driver_root, kind, caps, enforcer, state_dir, slices);
  if (!spec.ok()) return Fail(spec.status().message());
  std::string text = format == "json" ? spec->dump(2) + "\n" : container::ToYaml(*spec);
  if (output.empty()) {
    std::cout << text;
    return 0;
  }
  auto path = container::SaveCdiSpec(text, output, format);
  if (!path.ok()) return Fail(path.status().message());
  std::cout << "wrote " << *path << " (cdiVersion " << (*spec)["cdiVersion"].get<std::string>() << ", "
            << (*spec)["devices"].size() << " devices)\n";
  return 0;
}

int List(const std::vector<std::string>& args) {
  std::string path = "/var/run/cdi/gpuslice.json";
  FlagSet f("cdi list", "Shows the device names a CDI spec offers.");
  f.String("spec", &path, "spec file (json or yaml)");
  std::vector<std::string> rest;
  if (Status s = f.Parse(args, &rest); !s.ok()) return Fail(s.message());
  if (f.help_requested()) return std::cout << f.Usage(), 0;
  auto spec = container::LoadCdiSpec(path);
  if (!spec.ok()) return Fail(spec.status().message());
  auto names = container::CdiDeviceNames(*spec);
  if (!names.ok()) return Fail(path + ": " + names.status().message());
  for (const auto& n : *names) std::cout << n << "\n";
  return 0;
}

}  // namespace

int CdiCommand(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: gpuslice cdi <generate|list> [flags]\n";
    return args.empty() ? 2 : 0;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "generate") return Generate(rest);
  if (args[0] == "list") return List(rest);
  std::cerr << "gpuslice cdi: unknown subcommand '" << args[0] << "'\n";
  return 2;
}

}  // namespace gs::cli
