#include "src/kube/config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

#include "src/common/file.h"
#include "src/kube/base64.h"

namespace gs::kube {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t start = 0;
  while (start < s.size() && (s[start] == ' ' || s[start] == '\t' || s[start] == '\n')) ++start;
  return s.substr(start);
}

// One kubeconfig being read: the file's name and directory for messages and paths.
class Kubeconfig {
 public:
  explicit Kubeconfig(std::string path) : path_(std::move(path)) {
    dir_ = std::filesystem::path(path_).parent_path().string();
  }

  Status Error(const std::string& field, const std::string& why) const {
    return InvalidArgument("kubeconfig " + path_ + ": " + field + ": " + why);
  }

  // The entry named `name` in the list `key` (clusters, users, contexts): its `inner` map.
  StatusOr<YAML::Node> Find(const YAML::Node& root, const std::string& key, const std::string& inner,
                            const std::string& name) const {
    YAML::Node list = root[key];
    if (!list || !list.IsSequence()) return Error(key, "missing or not a list");
    for (size_t i = 0; i < list.size(); ++i) {
      YAML::Node entry = list[i];
      if (!entry.IsMap()) return Error(key + "[" + std::to_string(i) + "]", "not a map");
      if (entry["name"] && entry["name"].IsScalar() && entry["name"].as<std::string>() == name) {
        YAML::Node body = entry[inner];
        if (!body || !body.IsMap()) return Error(key + "[" + name + "]." + inner, "missing or not a map");
        return body;
      }
    }
    return Error(key, "no entry named '" + name + "'");
  }

  // A string field (empty when absent); a non-scalar value is an error.
  StatusOr<std::string> String(const YAML::Node& map, const std::string& where, const std::string& field) const {
    YAML::Node v = map[field];
    if (!v || v.IsNull()) return std::string();
    if (!v.IsScalar()) return Error(where + "." + field, "not a string");
    return v.as<std::string>();
  }

  StatusOr<bool> Bool(const YAML::Node& map, const std::string& where, const std::string& field) const {
    YAML::Node v = map[field];
    if (!v || v.IsNull()) return false;
    bool b = false;
    if (!v.IsScalar() || !YAML::convert<bool>::decode(v, b)) return Error(where + "." + field, "not a boolean");
    return b;
  }

  StatusOr<std::string> Data(const YAML::Node& map, const std::string& where, const std::string& field) const {
    auto text = String(map, where, field);
    if (!text.ok() || text->empty()) return text;
    auto bytes = Base64Decode(*text);
    if (!bytes.ok()) return Error(where + "." + field, bytes.status().message());
    return bytes;
  }

  std::string Resolve(const std::string& file) const {
    if (file.empty() || file[0] == '/' || dir_.empty()) return file;
    return (std::filesystem::path(dir_) / file).string();
  }

  // A file named by `field` must exist now (a later failure would name only curl's view).
  StatusOr<std::string> File(const YAML::Node& map, const std::string& where, const std::string& field) const {
    auto name = String(map, where, field);
    if (!name.ok() || name->empty()) return name;
    std::string resolved = Resolve(*name);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(resolved, ec)) return Error(where + "." + field, resolved + ": no such file");
    return resolved;
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_, dir_;
};

}  // namespace

StatusOr<ClientConfig> InClusterConfig(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0')
    return FailedPrecondition(
        "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set (not running in a pod?)");
  ClientConfig c;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // an IPv6 address
  c.server = "https://" + h + ":" + port;
  c.token_file = sa_dir + "/token";
  c.ca_file = sa_dir + "/ca.crt";
  c.source = "in-cluster service account " + sa_dir;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(c.token_file, ec))
    return NotFound("in-cluster config: " + c.token_file + ": no service-account token");
  if (!std::filesystem::is_regular_file(c.ca_file, ec))
    return NotFound("in-cluster config: " + c.ca_file + ": no service-account CA");
  if (auto ns = ReadFile(sa_dir + "/namespace"); ns.ok()) c.default_namespace = Trim(*ns);
  return c;
}

StatusOr<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  Kubeconfig kc(path);
  auto text = ReadFile(path);
  if (!text.ok()) return NotFound("kubeconfig " + text.status().message());
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    return kc.Error("(file)", std::string("not YAML: ") + e.what());
  }
  if (!root.IsMap()) return kc.Error("(file)", "not a map");

  std::string context_name = context;
  if (context_name.empty()) {
    GS_ASSIGN_OR_RETURN(context_name, kc.String(root, "(top)", "current-context"));
    if (context_name.empty()) return kc.Error("current-context", "not set and no context was named");
  }
  YAML::Node ctx, cluster, user;
  GS_ASSIGN_OR_RETURN(ctx, kc.Find(root, "contexts", "context", context_name));
  std::string where_ctx = "contexts[" + context_name + "].context";
  std::string cluster_name, user_name;
  ClientConfig c;
  GS_ASSIGN_OR_RETURN(cluster_name, kc.String(ctx, where_ctx, "cluster"));
  GS_ASSIGN_OR_RETURN(user_name, kc.String(ctx, where_ctx, "user"));
  GS_ASSIGN_OR_RETURN(c.default_namespace, kc.String(ctx, where_ctx, "namespace"));
  if (cluster_name.empty()) return kc.Error(where_ctx + ".cluster", "missing");
  GS_ASSIGN_OR_RETURN(cluster, kc.Find(root, "clusters", "cluster", cluster_name));
  std::string where_cluster = "clusters[" + cluster_name + "].cluster";

  GS_ASSIGN_OR_RETURN(c.server, kc.String(cluster, where_cluster, "server"));
  if (c.server.empty()) return kc.Error(where_cluster + ".server", "missing");
  if (c.server.rfind("https://", 0) != 0 && c.server.rfind("http://", 0) != 0)
    return kc.Error(where_cluster + ".server", "'" + c.server + "' is not an http(s) URL");
  while (c.server.size() > 8 && c.server.back() == '/') c.server.pop_back();
  GS_ASSIGN_OR_RETURN(c.ca_file, kc.File(cluster, where_cluster, "certificate-authority"));
  GS_ASSIGN_OR_RETURN(c.ca_data, kc.Data(cluster, where_cluster, "certificate-authority-data"));
  GS_ASSIGN_OR_RETURN(c.insecure_skip_tls_verify, kc.Bool(cluster, where_cluster, "insecure-skip-tls-verify"));
  if (cluster["tls-server-name"]) return kc.Error(where_cluster + ".tls-server-name", "not supported");

  if (!user_name.empty()) {
    GS_ASSIGN_OR_RETURN(user, kc.Find(root, "users", "user", user_name));
    std::string where_user = "users[" + user_name + "].user";
    GS_ASSIGN_OR_RETURN(c.cert_file, kc.File(user, where_user, "client-certificate"));
    GS_ASSIGN_OR_RETURN(c.cert_data, kc.Data(user, where_user, "client-certificate-data"));
    GS_ASSIGN_OR_RETURN(c.key_file, kc.File(user, where_user, "client-key"));
    GS_ASSIGN_OR_RETURN(c.key_data, kc.Data(user, where_user, "client-key-data"));
    GS_ASSIGN_OR_RETURN(c.token, kc.String(user, where_user, "token"));
    GS_ASSIGN_OR_RETURN(c.token_file, kc.File(user, where_user, "tokenFile"));
    bool has_cert = !c.cert_file.empty() || !c.cert_data.empty();
    bool has_key = !c.key_file.empty() || !c.key_data.empty();
    if (has_cert != has_key)
      return kc.Error(where_user + (has_cert ? ".client-key" : ".client-certificate"),
                      "missing (a client certificate needs its key)");
    for (const char* unsupported : {"exec", "auth-provider", "username"})
      if (user[unsupported] && !has_cert && c.token.empty() && c.token_file.empty())
        return kc.Error(where_user + "." + unsupported, "not supported (use a token or a client certificate)");
  }
  c.source = "kubeconfig " + path + " context " + context_name;
  return c;
}

}  // namespace gs::kube
