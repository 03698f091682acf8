#include "src/container/cdi.h"

#include <yaml-cpp/yaml.h>

#include <regex>

#include "src/container/library_dirs.h"

namespace gs::container {
namespace {

nlohmann::json Node(const DeviceNodeEdit& n) {
  nlohmann::json j{{"path", n.container_path}};
  if (n.host_path != n.container_path) j["hostPath"] = n.host_path;  // needs cdiVersion 0.5.0
  return j;
}

nlohmann::json Mount(const MountEdit& m) {
  return {{"hostPath", m.host_path},
          {"containerPath", m.container_path},
          {"options", m.writable ? std::vector<std::string>{"rw", "nosuid", "nodev", "bind"}
                                 : std::vector<std::string>{"ro", "nosuid", "nodev", "bind"}}};
}

void Emit(YAML::Emitter& out, const nlohmann::json& j) {
  if (j.is_object()) {
    out << YAML::BeginMap;
    for (auto it = j.begin(); it != j.end(); ++it) {
      out << YAML::Key << it.key() << YAML::Value;
      Emit(out, it.value());
    }
    out << YAML::EndMap;
  } else if (j.is_array()) {
    out << YAML::BeginSeq;
    for (const auto& v : j) Emit(out, v);
    out << YAML::EndSeq;
  } else if (j.is_string()) {
    out << YAML::DoubleQuoted << j.get<std::string>();
  } else if (j.is_boolean()) {
    out << j.get<bool>();
  } else if (j.is_number_integer()) {
    out << j.get<int64_t>();
  } else {
    out << YAML::Null;
  }
}

}  // namespace

std::string MinimumCdiVersion(const nlohmann::json& spec) {
  bool host_path = false;
  auto scan = [&](const nlohmann::json& edits) {
    if (edits.contains("deviceNodes"))
      for (const auto& n : edits["deviceNodes"]) host_path |= n.contains("hostPath");
  };
  if (spec.contains("containerEdits")) scan(spec["containerEdits"]);
  for (const auto& d : spec["devices"]) scan(d["containerEdits"]);
  return host_path ? "0.5.0" : "0.3.0";
}

StatusOr<nlohmann::json> GenerateCdiSpec(const CdiOptions& o, const std::vector<model::Gpu>& gpus) {
  auto all_plan = PlanEdits(o.plan, gpus);
  if (!all_plan.ok()) return all_plan.status();
  PlaceLibraries(&*all_plan, DefaultImageLibraryDirs());  // the image is not known yet
  nlohmann::json spec;
  spec["kind"] = o.kind;
  spec["devices"] = nlohmann::json::array();
  nlohmann::json all_nodes = nlohmann::json::array();
  for (size_t i = 0; i < gpus.size(); ++i) {
    nlohmann::json node = Node(all_plan->gpu_nodes[i]);
    all_nodes.push_back(node);
    for (const std::string& name : {std::to_string(gpus[i].index), gpus[i].uuid})
      spec["devices"].push_back({{"name", name}, {"containerEdits", {{"deviceNodes", {node}}}}});
  }
  spec["devices"].push_back({{"name", "all"}, {"containerEdits", {{"deviceNodes", all_nodes}}}});
  nlohmann::json common;
  common["deviceNodes"] = nlohmann::json::array();
  for (const auto& n : all_plan->control_nodes) common["deviceNodes"].push_back(Node(n));
  common["mounts"] = nlohmann::json::array();
  for (const auto& m : all_plan->mounts) common["mounts"].push_back(Mount(m));
  if (!all_plan->env.empty()) common["env"] = all_plan->env;
  if (!SimulatorState(o.plan.driver_root).empty())
    common["env"].push_back(std::string("GPUSLICE_SIM_STATE=") + kSimStateContainerPath);
  // No hooks: libraries go to the loader's default directories of both image families and
  // the enforcer is named by absolute path, so nothing needs to run in the container (and
  // no hook can inherit an image's env).
  spec["containerEdits"] = common;
  spec["cdiVersion"] = MinimumCdiVersion(spec);
  return spec;
}

std::string ToYaml(const nlohmann::json& spec) {
  YAML::Emitter out;
  Emit(out, spec);
  return std::string(out.c_str()) + "\n";
}

StatusOr<std::vector<std::string>> CdiDeviceNames(const nlohmann::json& spec) {
  static const std::regex kind_re(R"(^[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$)");
  static const std::regex name_re(R"(^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$)");
  if (!spec.is_object()) return InvalidArgument("a CDI spec is a JSON/YAML object");
  for (auto it = spec.begin(); it != spec.end(); ++it)
    if (it.key() != "cdiVersion" && it.key() != "kind" && it.key() != "devices" && it.key() != "containerEdits" &&
        it.key() != "annotations")
      return InvalidArgument("unknown field '" + it.key() + "' (strict loaders reject the spec)");
  if (!spec.contains("cdiVersion") || !spec["cdiVersion"].is_string()) return InvalidArgument("cdiVersion is missing");
  if (!spec.contains("kind") || !std::regex_match(spec["kind"].get<std::string>(), kind_re))
    return InvalidArgument("kind must be vendor/class");
  if (!spec.contains("devices") || !spec["devices"].is_array() || spec["devices"].empty())
    return InvalidArgument("a CDI spec needs at least one device");
  std::string need = MinimumCdiVersion(spec), have = spec["cdiVersion"];
  if (have < need) return InvalidArgument("cdiVersion " + have + " is below " + need + ", which its fields need");
  std::vector<std::string> names;
  for (const auto& d : spec["devices"]) {
    std::string name = d.value("name", "");
    if (!std::regex_match(name, name_re)) return InvalidArgument("device name '" + name + "' is not a valid CDI name");
    if (!d.contains("containerEdits")) return InvalidArgument("device " + name + " has no containerEdits");
    names.push_back(spec["kind"].get<std::string>() + "=" + name);
  }
  return names;
}

}  // namespace gs::container
