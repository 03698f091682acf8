#include "src/kube/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "src/kube/base64.h"
#include "tests/temp_dir.h"

namespace gs::kube {
namespace {

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

class KubeconfigTest : public ::testing::Test {
 protected:
  std::string Config(const std::string& text) {
    std::string path = dir_.path() + "/conf/kubeconfig";
    Write(path, text);
    return path;
  }
  gs::testing::TempDir dir_{"gs-kube"};
};

TEST_F(KubeconfigTest, ReadsTheCurrentContextWithFilesRelativeToTheKubeconfig) {
  Write(dir_.path() + "/conf/pki/ca.crt", "CA");
  Write(dir_.path() + "/conf/pki/admin.crt", "CERT");
  Write(dir_.path() + "/conf/pki/admin.key", "KEY");
  std::string path = Config(R"(apiVersion: v1
kind: Config
current-context: admin@prod
contexts:
- name: other
  context: {cluster: nowhere, user: nobody}
- name: admin@prod
  context:
    cluster: prod
    user: admin
    namespace: gpu
clusters:
- name: prod
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority: pki/ca.crt
users:
- name: admin
  user:
    client-certificate: pki/admin.crt
    client-key: pki/admin.key
)");
  auto c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->ca_file, dir_.path() + "/conf/pki/ca.crt");
  EXPECT_EQ(c->cert_file, dir_.path() + "/conf/pki/admin.crt");
  EXPECT_EQ(c->key_file, dir_.path() + "/conf/pki/admin.key");
  EXPECT_EQ(c->default_namespace, "gpu");
  EXPECT_FALSE(c->insecure_skip_tls_verify);
}

TEST_F(KubeconfigTest, ReadsInlineDataTokensAndANamedContext) {
  std::string path = Config(
      "current-context: a\n"
      "contexts:\n"
      "- {name: a, context: {cluster: c1, user: u1}}\n"
      "- {name: b, context: {cluster: c2, user: u2}}\n"
      "clusters:\n"
      "- {name: c1, cluster: {server: 'https://one'}}\n"
      "- name: c2\n"
      "  cluster:\n"
      "    server: https://two:443\n"
      "    certificate-authority-data: " +
      Base64Encode("CA-PEM") +
      "\n"
      "    insecure-skip-tls-verify: true\n"
      "users:\n"
      "- {name: u1, user: {token: abc}}\n"
      "- name: u2\n"
      "  user:\n"
      "    client-certificate-data: " +
      Base64Encode("CERT-PEM") +
      "\n"
      "    client-key-data: " +
      Base64Encode("KEY-PEM") + "\n");
  auto a = LoadKubeconfig(path);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->server, "https://one");
  EXPECT_EQ(a->token, "abc");
  auto b = LoadKubeconfig(path, "b");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->server, "https://two:443");
  EXPECT_EQ(b->ca_data, "CA-PEM");
  EXPECT_EQ(b->cert_data, "CERT-PEM");
  EXPECT_EQ(b->key_data, "KEY-PEM");
  EXPECT_TRUE(b->insecure_skip_tls_verify);
  EXPECT_TRUE(b->token.empty());
}

TEST_F(KubeconfigTest, ReadsATokenFile) {
  Write(dir_.path() + "/conf/token", "t0k3n\n");
  std::string path = Config(
      "current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
      "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:8001'}}]\n"
      "users: [{name: u, user: {tokenFile: token}}]\n");
  auto c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->token_file, dir_.path() + "/conf/token");
}

// Each bad kubeconfig's error names the file and the field.
TEST_F(KubeconfigTest, ErrorsNameTheFileAndTheField) {
  const std::string head = "contexts: [{name: a, context: {cluster: c, user: u}}]\n";
  struct Case {
    std::string text, context, field;
  } cases[] = {
      {"current-context: ''\n" + head, "", "current-context"},
      {"current-context: zz\n" + head + "clusters: []\n", "", "contexts"},
      {head + "users: []\n", "a", "clusters"},
      {head + "clusters: [{name: c, cluster: {}}]\n", "a", "clusters[c].cluster.server"},
      {head + "clusters: [{name: c, cluster: {server: 'ftp://x'}}]\n", "a", "clusters[c].cluster.server"},
      {head + "clusters: [{name: c, cluster: {server: 'https://x', certificate-authority-data: '!!'}}]\n", "a",
       "clusters[c].cluster.certificate-authority-data"},
      {head + "clusters: [{name: c, cluster: {server: 'https://x', certificate-authority: missing.crt}}]\n", "a",
       "clusters[c].cluster.certificate-authority"},
      {head + "clusters: [{name: c, cluster: {server: 'https://x', insecure-skip-tls-verify: maybe}}]\n", "a",
       "clusters[c].cluster.insecure-skip-tls-verify"},
      {head + "clusters: [{name: c, cluster: {server: 'https://x'}}]\nusers: [{name: u, user: {exec: {command: x}}}]\n",
       "a", "users[u].user.exec"},
      {head +
           "clusters: [{name: c, cluster: {server: 'https://x'}}]\n"
           "users: [{name: u, user: {client-certificate-data: " +
           Base64Encode("C") + "}}]\n",
       "a", "users[u].user.client-key"},
      {"[1, 2", "", "(file)"},
  };
  for (const Case& c : cases) {
    std::string path = Config(c.text);
    auto r = LoadKubeconfig(path, c.context);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.field + ":"), std::string::npos) << r.status().message();
  }
  auto missing = LoadKubeconfig(dir_.path() + "/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir_.path() + "/nope"), std::string::npos);
}

TEST(InClusterConfigTest, ReadsTheServiceAccountAndTheServiceAddress) {
  gs::testing::TempDir dir("gs-kube-sa");
  Write(dir.path() + "/token", "tok");
  Write(dir.path() + "/ca.crt", "CA");
  Write(dir.path() + "/namespace", "gpuslice-system\n");
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto c = InClusterConfig(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->token_file, dir.path() + "/token");
  EXPECT_EQ(c->ca_file, dir.path() + "/ca.crt");
  EXPECT_EQ(c->default_namespace, "gpuslice-system");

  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  EXPECT_EQ(InClusterConfig(dir.path())->server, "https://[fd00::1]:443");

  std::filesystem::remove(dir.path() + "/ca.crt");
  auto no_ca = InClusterConfig(dir.path());
  ASSERT_FALSE(no_ca.ok());
  EXPECT_NE(no_ca.status().message().find("ca.crt"), std::string::npos);

  unsetenv("KUBERNETES_SERVICE_HOST");
  auto outside = InClusterConfig(dir.path());
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("KUBERNETES_SERVICE_HOST"), std::string::npos);
  unsetenv("KUBERNETES_SERVICE_PORT");
}

}  // namespace
}  // namespace gs::kube
