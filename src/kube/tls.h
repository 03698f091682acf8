// The TLS side of a kube::Client connection: the cluster's CA bundle, the client
// certificate (with any intermediates after it) and its key, as OpenSSL objects made from
// PEM text. A ClientConfig names each as a file or as data; files are read when a
// connection is made, so a rotated certificate is picked up by the next one.
#pragma once

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

#include "src/common/status.h"
#include "src/kube/config.h"

namespace gs::kube {

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};

struct TlsMaterial {
  std::unique_ptr<X509_STORE, StoreFree> ca;  // null: the system's CAs
  std::unique_ptr<X509, X509Free> cert;       // null: no client certificate
  std::unique_ptr<EVP_PKEY, KeyFree> key;
  std::string chain_pem;  // intermediates sent after the client certificate
};

// Reads and parses what `config` names. Errors name the file or field and say why.
StatusOr<TlsMaterial> LoadTlsMaterial(const ClientConfig& config);

// Adds the intermediates of `material` to a context already holding its certificate.
Status AddChain(SSL_CTX* ctx, const TlsMaterial& material);

// OpenSSL's most recent error on this thread, as text ("" when none).
std::string LastOpenSslError();

}  // namespace gs::kube
