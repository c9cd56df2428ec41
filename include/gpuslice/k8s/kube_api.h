// gpuslice/k8s/kube_api.h: a small Kubernetes API client. The scheduler extender binds pods to
// nodes (POST /api/v1/namespaces/{namespace}/pods/{name}/binding with a v1.Binding) and lists pods;
// other callers (the DRA driver, gpuslice/dra/kube_client.h) make any REST call through Call.
//
// Transport: cpp-httplib. `server` is "https://host:port" or "http://host:port" (no path). For
// https the server certificate is verified against `ca_file` (the system's CAs when empty) unless
// `insecure_skip_tls_verify`. The bearer token is read from `token_file` on every call (projected
// service-account tokens rotate); an empty token_file sends no Authorization header.
// In-cluster defaults (InClusterOptions): server https://$KUBERNETES_SERVICE_HOST:
// $KUBERNETES_SERVICE_PORT, the service account's token and CA files.
// Bind and ListPods: a reply other than 201/200 is an error carrying the status code and the API
// server's message. Call returns every HTTP reply as a value; only a failed transport is an error.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuslice/k8s/extender.h"
#include "nlohmann/json.hpp"

namespace httplib {
class Client;
}

namespace gpuslice::k8s {

inline constexpr std::string_view kServiceAccountTokenFile =
    "/var/run/secrets/kubernetes.io/serviceaccount/token";
inline constexpr std::string_view kServiceAccountCaFile =
    "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

struct KubeApiOptions {
  std::string server;  // "https://10.0.0.1:443" or "http://127.0.0.1:8080"
  std::string token_file = std::string(kServiceAccountTokenFile);
  std::string ca_file;  // https only; empty = system CAs
  bool insecure_skip_tls_verify = false;
  int timeout_s = 5;
};

// `options` with the server filled from the environment when empty (`getenv` looks variables up;
// null = std::getenv), and the service account's CA file when the server came from there and no
// CA file is set. FailedPrecondition when no server is given and the variables are unset.
absl::StatusOr<KubeApiOptions> InClusterOptions(
    KubeApiOptions options, const std::function<const char*(const char*)>& getenv = nullptr);

// The v1.Binding body for a target (pure).
nlohmann::json BindingBody(const BindingTarget& target);
// The API path of a pod's binding subresource (pure).
std::string BindingPath(const BindingTarget& target);

// One HTTP reply of the API server, whatever its status.
struct HttpReply {
  int status = 0;
  std::string text;     // the body as received
  nlohmann::json body;  // parsed: null when `text` is empty, discarded (is_discarded()) if not JSON
  // The message of a v1.Status body, else `text`.
  std::string Message() const;
};

class KubeApiClient {
 public:
  // InvalidArgument for a server that is not http(s)://host[:port].
  static absl::StatusOr<KubeApiClient> Create(KubeApiOptions options);
  // Posts the Binding. Errors: Unavailable (no connection), PermissionDenied (401/403),
  // NotFound (404), AlreadyExists (409), Internal otherwise; the message has the reply's text.
  absl::Status Bind(const BindingTarget& target) const;
  // A Binder for Extender::Bind.
  Binder AsBinder() const;
  // GET /api/v1/pods (every namespace): the v1.PodList, for Extender::ReleaseGone. Errors as Bind.
  absl::StatusOr<nlohmann::json> ListPods() const;
  // One request: `method` is GET, POST, PUT, PATCH or DELETE; `path` starts with '/' and may carry
  // an already URL-encoded query; `body` (may be null) is sent as `content_type`. Errors:
  // FailedPrecondition (token file unreadable), InvalidArgument (unknown method), Unavailable
  // (no connection or no reply); any HTTP status is a reply.
  absl::StatusOr<HttpReply> Call(std::string_view method, const std::string& path,
                                 const nlohmann::json* body,
                                 std::string_view content_type = "application/json") const;

  const KubeApiOptions& options() const { return options_; }

 private:
  explicit KubeApiClient(KubeApiOptions options) : options_(std::move(options)) {}
  // A client for one call: timeouts, TLS settings and the token read now.
  absl::StatusOr<std::unique_ptr<httplib::Client>> Connect() const;
  KubeApiOptions options_;
};

}  // namespace gpuslice::k8s
