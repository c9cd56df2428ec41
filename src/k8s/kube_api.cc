#include "gpuslice/k8s/kube_api.h"

#include <httplib.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace gpuslice::k8s {

using nlohmann::json;

absl::StatusOr<KubeApiOptions> InClusterOptions(
    KubeApiOptions options, const std::function<const char*(const char*)>& getenv) {
  if (!options.server.empty()) return options;
  auto lookup = [&](const char* name) -> std::string {
    const char* value = getenv ? getenv(name) : std::getenv(name);
    return value == nullptr ? "" : value;
  };
  const std::string host = lookup("KUBERNETES_SERVICE_HOST");
  const std::string port = lookup("KUBERNETES_SERVICE_PORT");
  if (host.empty() || port.empty()) {
    return absl::FailedPreconditionError(
        "no Kubernetes API server: give one, or run in a pod (KUBERNETES_SERVICE_HOST and "
        "KUBERNETES_SERVICE_PORT are unset)");
  }
  const bool ipv6 = host.find(':') != std::string::npos;
  options.server = absl::StrCat("https://", ipv6 ? "[" : "", host, ipv6 ? "]" : "", ":", port);
  if (options.ca_file.empty()) options.ca_file = std::string(kServiceAccountCaFile);
  return options;
}

json BindingBody(const BindingTarget& target) {
  json metadata = {{"name", target.pod_name}, {"namespace", target.pod_namespace}};
  if (!target.pod_uid.empty()) metadata["uid"] = target.pod_uid;
  return {{"apiVersion", "v1"},
          {"kind", "Binding"},
          {"metadata", std::move(metadata)},
          {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", target.node}}}};
}

std::string BindingPath(const BindingTarget& target) {
  // Kubernetes names are DNS labels/subdomains: nothing to escape.
  return absl::StrCat("/api/v1/namespaces/", target.pod_namespace, "/pods/", target.pod_name,
                      "/binding");
}

std::string HttpReply::Message() const {
  if (body.is_object() && body.contains("message") && body["message"].is_string()) {
    return body["message"].get<std::string>();
  }
  return text;
}

absl::StatusOr<KubeApiClient> KubeApiClient::Create(KubeApiOptions options) {
  const std::string& server = options.server;
  const bool https = server.starts_with("https://");
  if (!https && !server.starts_with("http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("Kubernetes API server '", server, "': expected http(s)://host[:port]"));
  }
  const std::string rest = server.substr(https ? 8 : 7);
  if (rest.empty() || rest.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("Kubernetes API server '", server,
                                                   "': expected http(s)://host[:port], no path"));
  }
  if (options.timeout_s <= 0) options.timeout_s = 5;
  return KubeApiClient(std::move(options));
}

namespace {

absl::Status ReplyError(const std::string& what, const HttpReply& reply) {
  const std::string text = absl::StrCat(what, ": HTTP ", reply.status, ": ", reply.Message());
  switch (reply.status) {
    case 401:
    case 403:
      return absl::PermissionDeniedError(text);
    case 404:
      return absl::NotFoundError(text);
    case 409:
      return absl::AlreadyExistsError(text);
    default:
      return absl::InternalError(text);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<httplib::Client>> KubeApiClient::Connect() const {
  std::string token;
  if (!options_.token_file.empty()) {
    std::ifstream in(options_.token_file);
    if (!in) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot read the token file ", options_.token_file));
    }
    std::stringstream text;
    text << in.rdbuf();
    token = std::string(absl::StripAsciiWhitespace(text.str()));
  }
  auto client = std::make_unique<httplib::Client>(options_.server);
  if (!client->is_valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Kubernetes API server '", options_.server, "' is not usable"));
  }
  client->set_connection_timeout(options_.timeout_s);
  client->set_read_timeout(options_.timeout_s);
  client->set_write_timeout(options_.timeout_s);
  if (options_.server.starts_with("https://")) {
    if (!options_.ca_file.empty()) client->set_ca_cert_path(options_.ca_file);
    client->enable_server_certificate_verification(!options_.insecure_skip_tls_verify);
  }
  if (!token.empty()) client->set_bearer_token_auth(token);
  return client;
}

absl::StatusOr<HttpReply> KubeApiClient::Call(std::string_view method, const std::string& path,
                                              const json* body,
                                              std::string_view content_type) const {
  static constexpr std::string_view kMethods[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};
  if (std::find(std::begin(kMethods), std::end(kMethods), method) == std::end(kMethods)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported HTTP method ", std::string(method)));
  }
  absl::StatusOr<std::unique_ptr<httplib::Client>> client = Connect();
  if (!client.ok()) return client.status();
  httplib::Request request;
  request.method = std::string(method);
  request.path = path;
  if (body != nullptr) {
    request.body = body->dump();
    request.set_header("Content-Type", std::string(content_type));
  }
  request.set_header("Accept", "application/json");
  httplib::Result result = (*client)->send(request);
  if (!result) {
    return absl::UnavailableError(absl::StrCat(std::string(method), " ", options_.server, path,
                                               ": ", httplib::to_string(result.error())));
  }
  HttpReply reply;
  reply.status = result->status;
  reply.text = std::move(result->body);
  if (!reply.text.empty())
    reply.body = json::parse(reply.text, nullptr, /*allow_exceptions=*/false);
  return reply;
}

absl::Status KubeApiClient::Bind(const BindingTarget& target) const {
  const std::string path = BindingPath(target);
  const json body = BindingBody(target);
  absl::StatusOr<HttpReply> reply = Call("POST", path, &body);
  if (!reply.ok()) return reply.status();
  if (reply->status == 200 || reply->status == 201) return absl::OkStatus();
  return ReplyError(absl::StrCat("POST ", path), *reply);
}

absl::StatusOr<nlohmann::json> KubeApiClient::ListPods() const {
  const std::string path = "/api/v1/pods";
  absl::StatusOr<HttpReply> reply = Call("GET", path, nullptr);
  if (!reply.ok()) return reply.status();
  if (reply->status != 200) return ReplyError(absl::StrCat("GET ", path), *reply);
  if (reply->body.is_discarded() || reply->body.is_null()) {
    return absl::InternalError(absl::StrCat("GET ", path, ": the reply is not JSON"));
  }
  return std::move(reply->body);
}

Binder KubeApiClient::AsBinder() const {
  KubeApiClient copy = *this;
  return [copy](const BindingTarget& target) { return copy.Bind(target); };
}

}  // namespace gpuslice::k8s
