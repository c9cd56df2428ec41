// gpuslice/api/tls.h — TLS for the allocation service's listeners (OpenSSL).
//
// `gpuslice serve` speaks TLS by default: with --tls-cert/--tls-key it uses the operator's pair;
// without them it makes a self-signed pair on its first start (an ECDSA P-256 key, written 0600,
// and a certificate for localhost, 127.0.0.1, ::1 and this machine's name) and prints its
// SHA-256 fingerprint, so the quick start is encrypted with no extra step and clients trust the
// certificate file (--ca) the way they read the admin token file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace gpuslice::api {

// An SSL_CTX for a server, freed with it.
class TlsServerContext {
 public:
  // Loads a PEM certificate chain and its private key (which must match). With `client_ca`
  // (a PEM file), clients are asked for a certificate it signed (mutual TLS): one that is sent
  // must verify, and the API then knows its names (ServerOptions::
  // agents_need_client_certificates); otherwise none is asked for. TLS 1.2 and later only.
  static absl::StatusOr<std::unique_ptr<TlsServerContext>> Load(const std::string& cert_file,
                                                                const std::string& key_file,
                                                                const std::string& client_ca = "");
  ~TlsServerContext();
  TlsServerContext(const TlsServerContext&) = delete;
  TlsServerContext& operator=(const TlsServerContext&) = delete;

  SSL_CTX* get() const { return ctx_; }
  // The certificate's SHA-256 fingerprint, "AB:CD:..." as `openssl x509 -fingerprint -sha256`
  // prints it.
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  explicit TlsServerContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
  std::string fingerprint_;
};

// Makes a self-signed server certificate for `names` (DNS names and IP addresses; the first is
// the subject's common name), valid for `days` from now, with a new ECDSA P-256 key. The key is
// written 0600 (gpuslice/util/private_file.h), the certificate 0644. Overwrites both.
absl::Status MakeSelfSignedCertificate(const std::string& cert_file, const std::string& key_file,
                                       const std::vector<std::string>& names, int days = 825);

}  // namespace gpuslice::api
