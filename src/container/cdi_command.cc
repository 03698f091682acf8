#include "src/container/cdi_command.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "src/common/flags.h"
#include "src/container/cdi.h"
#include "src/platform/gpu_driver.h"

namespace gs::container {
namespace {

int Fail(const std::string& m) {
  std::cerr << "gpuslice cdi: " << m << "\n";
  return 1;
}

nlohmann::json YamlToJson(const YAML::Node& n) {
  if (n.IsMap()) {
    nlohmann::json j = nlohmann::json::object();
    for (auto it = n.begin(); it != n.end(); ++it) j[it->first.as<std::string>()] = YamlToJson(it->second);
    return j;
  }
  if (n.IsSequence()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& v : n) j.push_back(YamlToJson(v));
    return j;
  }
  if (n.IsNull()) return nullptr;
  return n.as<std::string>();
}

int Generate(const std::vector<std::string>& args) {
  std::string driver_root = "/", output, format = "json", kind = "gpuslice.io/gpu", state_dir = "/var/lib/gpuslice",
              enforcer, caps = "utility,compute";
  FlagSet f("cdi generate", "Writes a CDI spec for this node's GPUs (by index, by UUID, and all).");
  f.String("driver-root", &driver_root, "root of the driver installation", "NVIDIA_DRIVER_ROOT");
  f.String("output", &output, "file, or directory (then <dir>/gpuslice.<format>); default stdout");
  f.String("format", &format, "json or yaml");
  f.String("kind", &kind, "CDI kind (vendor/class)");
  f.String("capabilities", &caps, "driver capabilities to inject (NVIDIA_DRIVER_CAPABILITIES syntax)");
  f.String("state-dir", &state_dir, "where the enforcer is installed for containers");
  f.String("enforcer", &enforcer, "libgpuslice.so to inject (empty: no enforcer)", "GPUSLICE_ENFORCER");
  std::vector<std::string> rest;
  if (Status s = f.Parse(args, &rest); !s.ok()) return Fail(s.message());
  if (f.help_requested()) return std::cout << f.Usage(), 0;
  if (format != "json" && format != "yaml") return Fail("--format must be json or yaml, not '" + format + "'");
  CdiOptions o;
  o.kind = kind;
  o.plan.driver_root = driver_root;
  auto parsed_caps = ParseCapabilities(caps);
  if (!parsed_caps.ok()) return Fail(parsed_caps.status().message());
  o.plan.capabilities = *parsed_caps;
  if (!enforcer.empty()) {
    auto e = InstallEnforcer(enforcer, state_dir);
    if (!e.ok()) return Fail(e.status().message());
    o.plan.enforcer = *e;
  }
  auto driver = platform::OpenNvmlGpuDriver(driver_root);
  if (!driver.ok()) return Fail(driver.status().message());
  auto infos = (*driver)->ListGpus();
  if (!infos.ok()) return Fail(infos.status().message());
  std::vector<model::Gpu> gpus;
  for (const auto& g : *infos) gpus.push_back({g.uuid, g.index, g.name, g.memory_total, g.numa_node, g.minor, !g.lost});
  auto spec = GenerateCdiSpec(o, gpus);
  if (!spec.ok()) return Fail(spec.status().message());
  std::string text = format == "json" ? spec->dump(2) + "\n" : ToYaml(*spec);
  if (output.empty()) {
    std::cout << text;
    return 0;
  }
  std::error_code ec;
  if (std::filesystem::is_directory(output, ec) || output.back() == '/') {
    std::filesystem::create_directories(output, ec);
    output += "/gpuslice." + format;
  }
  std::string tmp = output + ".tmp";
  std::ofstream(tmp) << text;
  std::filesystem::rename(tmp, output, ec);  // runtimes never see a half-written spec
  if (ec) return Fail("cannot write " + output + ": " + ec.message());
  std::cout << "wrote " << output << " (cdiVersion " << (*spec)["cdiVersion"].get<std::string>() << ", "
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
  std::ifstream in(path);
  if (!in) return Fail("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json spec;
  try {
    spec = path.size() > 5 && path.substr(path.size() - 5) == ".json" ? nlohmann::json::parse(ss.str())
                                                                      : YamlToJson(YAML::Load(ss.str()));
  } catch (const std::exception& e) {
    return Fail(path + ": " + e.what());
  }
  auto names = CdiDeviceNames(spec);
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

}  // namespace gs::container
