#include "src/kube/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>

#include "src/common/file.h"

namespace gs::kube {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The PEM text of a file-or-data pair; "" when neither is set.
StatusOr<std::string> Pem(const std::string& file, const std::string& data, const std::string& what) {
  if (!data.empty()) return data;
  if (file.empty()) return std::string();
  auto text = ReadFile(file);
  if (!text.ok()) return FailedPrecondition(what + " " + text.status().message());
  return std::move(*text);
}

}  // namespace

std::string LastOpenSslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "";
  char text[256];
  ERR_error_string_n(e, text, sizeof(text));
  return text;
}

StatusOr<TlsMaterial> LoadTlsMaterial(const ClientConfig& config) {
  TlsMaterial m;
  auto ca = Pem(config.ca_file, config.ca_data, "CA bundle");
  if (!ca.ok()) return ca.status();
  if (!ca->empty()) {
    m.ca.reset(X509_STORE_new());
    Bio bio = MemoryBio(*ca);
    int added = 0;
    while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      X509_STORE_add_cert(m.ca.get(), x);
      X509_free(x);
      ++added;
    }
    ERR_clear_error();  // the end of the bundle reads as an error
    if (added == 0)
      return InvalidArgument(config.source + ": the CA bundle " +
                             (config.ca_data.empty() ? config.ca_file : std::string("(certificate-authority-data)")) +
                             " holds no PEM certificate");
  }
  auto cert = Pem(config.cert_file, config.cert_data, "client certificate");
  if (!cert.ok()) return cert.status();
  auto key = Pem(config.key_file, config.key_data, "client key");
  if (!key.ok()) return key.status();
  if (cert->empty() != key->empty())
    return InvalidArgument(config.source + ": a client certificate needs its key, and a key its certificate");
  if (cert->empty()) return m;
  Bio cert_bio = MemoryBio(*cert);
  m.cert.reset(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (!m.cert) return InvalidArgument(config.source + ": the client certificate is not PEM: " + LastOpenSslError());
  // What follows the first certificate is its chain, in the order given.
  char* rest = nullptr;
  long rest_len = BIO_get_mem_data(cert_bio.get(), &rest);
  if (rest_len > 0) m.chain_pem.assign(rest, static_cast<size_t>(rest_len));
  Bio key_bio = MemoryBio(*key);
  m.key.reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!m.key)
    return InvalidArgument(config.source + ": the client key is not a PEM private key: " + LastOpenSslError());
  if (X509_check_private_key(m.cert.get(), m.key.get()) != 1)
    return InvalidArgument(config.source + ": the client key does not belong to the client certificate");
  return m;
}

Status AddChain(SSL_CTX* ctx, const TlsMaterial& material) {
  if (material.chain_pem.empty()) return Status::Ok();
  Bio bio = MemoryBio(material.chain_pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add0_chain_cert(ctx, x) != 1) {  // takes `x` on success
      X509_free(x);
      return Internal("cannot add an intermediate certificate: " + LastOpenSslError());
    }
  }
  ERR_clear_error();
  return Status::Ok();
}

}  // namespace gs::kube
