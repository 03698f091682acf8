#include "src/scheduler/webhook_http.h"

#include <httplib.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <mutex>

#include "src/common/raw_log.h"

namespace gs::scheduler {
namespace {

// The serving certificate, read again from its files when they change (cert-manager and
// kubelet-mounted Secrets replace them in place, by a symlink swap): every TLS handshake
// asks for the current one (SSL_CTX_set_cert_cb), and the files are looked at no more than
// once a second. A pair that does not load, or whose key does not match, is not taken: the
// old one is served, and the problem logged, until the files are right.
class ReloadingCertificate {
 public:
  ReloadingCertificate(std::string cert_file, std::string key_file)
      : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)) {}
  ~ReloadingCertificate() { Free(current_); }

  Status Load() {
    std::lock_guard<std::mutex> l(mu_);
    stamp_ = Stamp();
    Pair next;
    GS_RETURN_IF_ERROR(Read(&next));
    Free(current_);
    current_ = next;
    checked_ = std::chrono::steady_clock::now();
    return Status::Ok();
  }

  // For one handshake: the certificate, its chain and key, refreshed first if the files
  // changed. Returns 1 (go on) or 0 (fail the handshake), as OpenSSL's cert callback.
  int UseOn(SSL* ssl) {
    std::lock_guard<std::mutex> l(mu_);
    auto now = std::chrono::steady_clock::now();
    if (now - checked_ >= std::chrono::seconds(1)) {
      checked_ = now;
      std::string stamp = Stamp();
      if (stamp != stamp_) {
        stamp_ = stamp;
        Pair next;
        if (Status s = Read(&next); !s.ok()) {
          GS_LOG(kError, "%s; still serving the previous certificate", s.message().c_str());
        } else {
          Free(current_);
          current_ = next;
          GS_LOG(kInfo, "webhook TLS: serving the new certificate in %s", cert_file_.c_str());
        }
      }
    }
    if (current_.leaf == nullptr) return 0;
    return SSL_use_cert_and_key(ssl, current_.leaf, current_.key, current_.chain, 1) == 1 ? 1 : 0;
  }

 private:
  struct Pair {
    X509* leaf = nullptr;
    STACK_OF(X509) * chain = nullptr;
    EVP_PKEY* key = nullptr;
  };
  static void Free(Pair& p) {
    if (p.leaf) X509_free(p.leaf);
    if (p.chain) sk_X509_pop_free(p.chain, X509_free);
    if (p.key) EVP_PKEY_free(p.key);
    p = Pair{};
  }
  // What changes when either file is replaced (followed through links, as mounted
  // Secrets are).
  std::string Stamp() const {
    std::string out;
    for (const auto& f : {cert_file_, key_file_}) {
      struct stat st {};
      if (stat(f.c_str(), &st) == 0)
        out += std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) +
               "." + std::to_string(st.st_mtim.tv_nsec) + ";";
    }
    return out;
  }
  Status Read(Pair* out) const {
    std::string what = "webhook TLS: cannot load certificate " + cert_file_ + " with key " + key_file_;
    BIO* cert = BIO_new_file(cert_file_.c_str(), "r");
    BIO* key = BIO_new_file(key_file_.c_str(), "r");
    Pair p;
    if (cert && key) {
      p.leaf = PEM_read_bio_X509(cert, nullptr, nullptr, nullptr);
      p.chain = sk_X509_new_null();
      while (X509* more = PEM_read_bio_X509(cert, nullptr, nullptr, nullptr)) sk_X509_push(p.chain, more);
      ERR_clear_error();  // the end of the file reads as an error
      p.key = PEM_read_bio_PrivateKey(key, nullptr, nullptr, nullptr);
    }
    if (cert) BIO_free(cert);
    if (key) BIO_free(key);
    if (p.leaf == nullptr || p.key == nullptr || X509_check_private_key(p.leaf, p.key) != 1) {
      Free(p);
      ERR_clear_error();
      return InvalidArgument(what);
    }
    *out = p;
    return Status::Ok();
  }

  const std::string cert_file_, key_file_;
  std::mutex mu_;
  Pair current_;
  std::string stamp_;
  std::chrono::steady_clock::time_point checked_;
};

}  // namespace

struct WebhookHttpsServer::Impl {
  WebhookOptions options;
  std::unique_ptr<ReloadingCertificate> certificate;
  std::unique_ptr<httplib::SSLServer> server;
};

WebhookHttpsServer::WebhookHttpsServer(WebhookOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}

WebhookHttpsServer::~WebhookHttpsServer() {
  Stop();
}

StatusOr<int> WebhookHttpsServer::Bind(const std::string& host, int port, const std::string& cert_file,
                                       const std::string& key_file) {
  std::error_code ec;
  for (const std::string& f : {cert_file, key_file})
    if (f.empty() || !std::filesystem::is_regular_file(f, ec))
      return NotFound("webhook TLS: '" + f + "': no such file");
  auto certificate = std::make_unique<ReloadingCertificate>(cert_file, key_file);
  GS_RETURN_IF_ERROR(certificate->Load());
  impl_->certificate = std::move(certificate);
  ReloadingCertificate* current = impl_->certificate.get();
  impl_->server = std::make_unique<httplib::SSLServer>([current](SSL_CTX& ctx) {
    SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
    SSL_CTX_set_cert_cb(
        &ctx, [](SSL* ssl, void* arg) { return static_cast<ReloadingCertificate*>(arg)->UseOn(ssl); }, current);
    return true;
  });
  if (!impl_->server->is_valid()) return Internal("webhook TLS: cannot set up the TLS context");
  Impl* im = impl_.get();
  im->server->Post(R"((.*/)?mutate)", [im](const httplib::Request& req, httplib::Response& res) {
    res.set_content(MutatePodReview(req.body, im->options), "application/json");
  });
  im->server->Get("/healthz",
                  [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  im->server->set_payload_max_length(16u << 20);
  // As for the extender (extender_http.cc): a reply's two sends must not wait for a delayed
  // ACK, or every admission on a kept-alive connection costs 40 ms more.
  im->server->set_tcp_nodelay(true);
  int bound = port == 0 ? im->server->bind_to_any_port(host.c_str())
                        : (im->server->bind_to_port(host.c_str(), port) ? port : -1);
  if (bound < 0) return Unavailable("webhook: cannot listen on " + host + ":" + std::to_string(port));
  return bound;
}

bool WebhookHttpsServer::Serve() {
  return impl_->server && impl_->server->listen_after_bind();
}

void WebhookHttpsServer::Stop() {
  if (impl_->server) impl_->server->stop();
}

}  // namespace gs::scheduler
