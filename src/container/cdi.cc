#include "src/container/cdi.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "src/common/file.h"
#include "src/container/library_dirs.h"

namespace gs::container {
namespace {

nlohmann::json Node(const model::DeviceNode& n) {
  nlohmann::json j{{"path", n.container_path}};
  if (n.host_path != n.container_path) j["hostPath"] = n.host_path;  // needs cdiVersion 0.5.0
  return j;
}

nlohmann::json Mount(const model::Mount& m) {
  return {{"hostPath", m.host_path},
          {"containerPath", m.container_path},
          {"options", m.read_only ? std::vector<std::string>{"ro", "nosuid", "nodev", "bind"}
                                  : std::vector<std::string>{"rw", "nosuid", "nodev", "bind"}}};
}

void Emit(YAML::Emitter& out, const nlohmann::json& j) {
  if (j.is_object()) {
    out << YAML::BeginMap;
    for (auto it = j.begin(); it != j.end(); ++it) {
      // YAML reads an implicit key ("key: value") of at most 1024 characters as written
      // (escapes count): a longer one, which a loaded spec may hold, goes as "? key".
      if (it.key().size() > 200) out << YAML::LongKey;
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

}  // namespace

std::string MinimumCdiVersion(const nlohmann::json& spec) {
  bool host_path = false;
  // Only what is there: a const operator[] of a missing key is undefined behaviour (an
  // assertion in nlohmann), and a loaded spec may lack any of these.
  auto scan = [&](const nlohmann::json& edits) {
    if (edits.contains("deviceNodes"))
      for (const auto& n : edits["deviceNodes"]) host_path |= n.contains("hostPath");
  };
  if (spec.contains("containerEdits")) scan(spec["containerEdits"]);
  if (spec.contains("devices"))
    for (const auto& d : spec["devices"])
      if (d.contains("containerEdits")) scan(d["containerEdits"]);
  return host_path ? "0.5.0" : "0.3.0";
}

StatusOr<nlohmann::json> GenerateCdiSpec(const CdiOptions& o, const std::vector<model::Gpu>& gpus) {
  GS_ASSIGN_OR_RETURN(model::ContainerEdits edits, PlanEdits(o.plan, gpus));
  PlaceLibraries(&edits, DefaultImageLibraryDirs());  // the image is not known yet
  nlohmann::json spec;
  spec["kind"] = o.kind;
  spec["devices"] = nlohmann::json::array();
  nlohmann::json all_nodes = nlohmann::json::array();
  for (size_t i = 0; i < gpus.size(); ++i) {  // PlanEdits: the GPUs' nodes come first
    nlohmann::json node = Node(edits.devices[i]);
    all_nodes.push_back(node);
    for (const std::string& name : {std::to_string(gpus[i].index), gpus[i].uuid})
      spec["devices"].push_back({{"name", name}, {"containerEdits", {{"deviceNodes", {node}}}}});
  }
  spec["devices"].push_back({{"name", "all"}, {"containerEdits", {{"deviceNodes", all_nodes}}}});
  nlohmann::json common;
  common["deviceNodes"] = nlohmann::json::array();
  for (size_t i = gpus.size(); i < edits.devices.size(); ++i) common["deviceNodes"].push_back(Node(edits.devices[i]));
  common["mounts"] = nlohmann::json::array();
  for (const auto& m : edits.mounts) common["mounts"].push_back(Mount(m));
  for (const auto& [k, v] : edits.env) common["env"].push_back(k + "=" + v);
  // Libraries go to the loader's default directories of both image families and the
  // enforcer is named by absolute path, so nothing needs to run in the container. The only
  // hooks run on the host: the container's slice is made once the runtime has created it
  // (its device nodes tell which GPUs it got, its env what it asks for) and removed after it.
  if (!o.slice_hooks.gpuslice.empty()) {
    std::vector<std::string> args = {o.slice_hooks.gpuslice,    "hook",        "--driver-root",
                                     o.slice_hooks.driver_root, "--state-dir", o.slice_hooks.state_dir};
    const nlohmann::json env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
    auto hook = [&](const char* name, const char* stage) {
      std::vector<std::string> a = args;
      a.push_back(stage);
      return nlohmann::json{{"hookName", name}, {"path", o.slice_hooks.gpuslice}, {"args", a}, {"env", env}};
    };
    common["hooks"] = {hook("createRuntime", "slice"), hook("poststop", "poststop")};
  }
  spec["containerEdits"] = common;
  spec["cdiVersion"] = MinimumCdiVersion(spec);
  return spec;
}

std::string ToYaml(const nlohmann::json& spec) {
  YAML::Emitter out;
  Emit(out, spec);
  return std::string(out.c_str()) + "\n";
}

StatusOr<std::string> SaveCdiSpec(const std::string& text, std::string output, const std::string& format) {
  std::error_code ec;
  if (std::filesystem::is_directory(output, ec) || output.back() == '/') {
    std::filesystem::create_directories(output, ec);
    output += "/gpuslice." + format;
  }
  std::string tmp = output + ".tmp";
  std::ofstream(tmp) << text;
  std::filesystem::rename(tmp, output, ec);  // runtimes never see a half-written spec
  if (ec) return Internal("cannot write " + output + ": " + ec.message());
  return output;
}

StatusOr<nlohmann::json> LoadCdiSpec(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return NotFound("cannot read " + text.status().message());
  try {
    nlohmann::json spec = path.size() > 5 && path.substr(path.size() - 5) == ".json" ? nlohmann::json::parse(*text)
                                                                                     : YamlToJson(YAML::Load(*text));
    // A spec is text: YAML lets bytes that are not UTF-8 through, which JSON parsing
    // refuses and writing the spec back cannot do. dump() throws on them.
    (void)spec.dump();
    return spec;
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": " + e.what());
  }
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
  if (!spec.contains("kind") || !spec["kind"].is_string() ||
      !std::regex_match(spec["kind"].get<std::string>(), kind_re))
    return InvalidArgument("kind must be vendor/class");
  if (!spec.contains("devices") || !spec["devices"].is_array() || spec["devices"].empty())
    return InvalidArgument("a CDI spec needs at least one device");
  std::string need = MinimumCdiVersion(spec), have = spec["cdiVersion"];
  if (have < need) return InvalidArgument("cdiVersion " + have + " is below " + need + ", which its fields need");
  std::vector<std::string> names;
  for (const auto& d : spec["devices"]) {
    // value("name", "") throws when d is not an object or its name not a string.
    std::string name = d.contains("name") && d["name"].is_string() ? d["name"].get<std::string>() : "";
    if (!std::regex_match(name, name_re)) return InvalidArgument("device name '" + name + "' is not a valid CDI name");
    if (!d.contains("containerEdits")) return InvalidArgument("device " + name + " has no containerEdits");
    names.push_back(spec["kind"].get<std::string>() + "=" + name);
  }
  return names;
}

}  // namespace gs::container
