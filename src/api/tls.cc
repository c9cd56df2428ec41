#include "gpuslice/api/tls.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpuslice/util/private_file.h"

namespace gpuslice::api {
namespace {

// OpenSSL's last error, as text.
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "unknown error";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  ERR_clear_error();
  return text;
}

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, Free>;

std::string Fingerprint(X509* cert) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (X509_digest(cert, EVP_sha256(), digest, &length) != 1) return "";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    absl::StrAppendFormat(&out, "%s%02X", i == 0 ? "" : ":", digest[i]);
  }
  return out;
}

bool IsIpAddress(const std::string& name) {
  unsigned char buf[16];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

// The PEM text of `write(bio)`.
template <typename Write>
absl::StatusOr<std::string> Pem(Write write) {
  Owned<BIO> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || write(bio.get()) != 1) {
    return absl::InternalError(absl::StrCat("cannot write PEM: ", OpenSslError()));
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(size));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsServerContext>> TlsServerContext::Load(
    const std::string& cert_file, const std::string& key_file, const std::string& client_ca) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new failed: " + OpenSslError());
  std::unique_ptr<TlsServerContext> out(new TlsServerContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert ", cert_file, ": cannot load: ", OpenSslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key ", key_file, ": cannot load: ", OpenSslError()));
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key ", key_file, " does not belong to --tls-cert ", cert_file));
  }
  if (!client_ca.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, client_ca.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-client-ca ", client_ca, ": cannot load: ", OpenSslError()));
    }
    // Asked for, not required: users connect without one; a certificate that is presented
    // must verify, and the API requires one of agents (ServerOptions).
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(client_ca.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(ctx, names);
  }
  out->fingerprint_ = Fingerprint(SSL_CTX_get0_certificate(ctx));
  return out;
}

TlsServerContext::~TlsServerContext() { SSL_CTX_free(ctx_); }

absl::Status MakeSelfSignedCertificate(const std::string& cert_file, const std::string& key_file,
                                       const std::vector<std::string>& names, int days) {
  if (names.empty()) return absl::InvalidArgumentError("a certificate needs at least one name");
  Owned<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (key == nullptr) return absl::InternalError("cannot make a key: " + OpenSslError());
  Owned<X509> cert(X509_new());
  if (cert == nullptr) return absl::InternalError("X509_new failed");
  X509_set_version(cert.get(), 2);
  // A random serial: two certificates made here never share one.
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return absl::InternalError("no randomness");
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 86400);
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("gpuslice"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(names[0].c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), subject);
  X509_set_pubkey(cert.get(), key.get());
  std::string san;
  for (const std::string& name : names) {
    absl::StrAppend(&san, san.empty() ? "" : ",", IsIpAddress(name) ? "IP:" : "DNS:", name);
  }
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, cert.get(), cert.get(), nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair<int, std::string>{NID_subject_alt_name, san},
                                   {NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                                   {NID_key_usage, "critical,digitalSignature,keyCertSign"},
                                   {NID_ext_key_usage, "serverAuth,clientAuth"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
    if (ext == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("certificate name '", value, "': ", OpenSslError()));
    }
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) {
    return absl::InternalError("cannot sign the certificate: " + OpenSslError());
  }
  absl::StatusOr<std::string> key_pem = Pem([&](BIO* bio) {
    return PEM_write_bio_PrivateKey(bio, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  });
  absl::StatusOr<std::string> cert_pem =
      Pem([&](BIO* bio) { return PEM_write_bio_X509(bio, cert.get()); });
  if (!key_pem.ok()) return key_pem.status();
  if (!cert_pem.ok()) return cert_pem.status();
  if (absl::Status st = util::WritePrivateFile(key_file, *key_pem); !st.ok()) return st;
  if (absl::Status st = util::WritePrivateFile(cert_file, *cert_pem); !st.ok()) return st;
  // The certificate is public: clients on this machine read it to trust the server.
  if (::chmod(cert_file.c_str(), 0644) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot chmod ", cert_file));
  }
  return absl::OkStatus();
}

}  // namespace gpuslice::api
