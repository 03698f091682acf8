// Where the Kubernetes API server is and how to authenticate to it: from the pod's
// service account (InClusterConfig) or from a kubeconfig file (LoadKubeconfig).
//
// Called once at start by `gpuslice scheduler` (and tests); the result goes to
// kube::Client. Pure apart from reading the files named; thread-compatible. Errors name
// the file and the field.
#pragma once

#include <string>

#include "src/common/status.h"

namespace gs::kube {

inline constexpr const char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

struct ClientConfig {
  std::string server;  // "https://host:port", no trailing slash
  // Trust: the CA bundle (PEM) as a file or as data; empty both = the system's CAs.
  std::string ca_file, ca_data;
  // Client certificate and key (PEM), each as a file or as data.
  std::string cert_file, cert_data;
  std::string key_file, key_data;
  // Bearer token; a token_file is read again for every request, so the kubelet's
  // rotation of a projected service-account token is picked up.
  std::string token, token_file;
  bool insecure_skip_tls_verify = false;
  std::string default_namespace;  // the context's or the service account's namespace
  std::string source;             // where this came from, for messages
};

// KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT and <sa_dir>/{token,ca.crt,namespace}.
// The token is used as a file (re-read); the CA must exist.
StatusOr<ClientConfig> InClusterConfig(const std::string& sa_dir = kServiceAccountDir);

// A kubeconfig: `context` or, if empty, current-context; its cluster (server,
// certificate-authority[-data], insecure-skip-tls-verify) and user
// (client-certificate[-data], client-key[-data], token, tokenFile). Relative paths are
// relative to the kubeconfig's directory. exec and auth-provider users are refused, and
// so is tls-server-name (not supported).
StatusOr<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");

}  // namespace gs::kube
