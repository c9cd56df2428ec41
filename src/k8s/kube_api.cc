#include "gpuslice/k8s/kube_api.h"

#include <httplib.h>

#include <cstdlib>
#include <fstream>
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

// The API server's message in an error reply (a v1.Status), else the body.
std::string ReplyMessage(const std::string& body) {
  try {
    const json parsed = json::parse(body);
    if (parsed.is_object() && parsed.contains("message") && parsed["message"].is_string()) {
      return parsed["message"].get<std::string>();
    }
  } catch (const json::exception&) {
  }
  return body;
}

absl::Status ReplyError(const std::string& what, int status, const std::string& body) {
  const std::string text = absl::StrCat(what, ": HTTP ", status, ": ", ReplyMessage(body));
  switch (status) {
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

absl::Status KubeApiClient::Bind(const BindingTarget& target) const {
  absl::StatusOr<std::unique_ptr<httplib::Client>> client = Connect();
  if (!client.ok()) return client.status();
  const std::string path = BindingPath(target);
  httplib::Result result = (*client)->Post(path, BindingBody(target).dump(), "application/json");
  if (!result) {
    return absl::UnavailableError(
        absl::StrCat("POST ", options_.server, path, ": ", httplib::to_string(result.error())));
  }
  if (result->status == 200 || result->status == 201) return absl::OkStatus();
  return ReplyError(absl::StrCat("POST ", path), result->status, result->body);
}

absl::StatusOr<nlohmann::json> KubeApiClient::ListPods() const {
  absl::StatusOr<std::unique_ptr<httplib::Client>> client = Connect();
  if (!client.ok()) return client.status();
  const std::string path = "/api/v1/pods";
  httplib::Result result = (*client)->Get(path);
  if (!result) {
    return absl::UnavailableError(
        absl::StrCat("GET ", options_.server, path, ": ", httplib::to_string(result.error())));
  }
  if (result->status != 200)
    return ReplyError(absl::StrCat("GET ", path), result->status, result->body);
  try {
    return json::parse(result->body);
  } catch (const json::exception& error) {
    return absl::InternalError(absl::StrCat("GET ", path, ": not JSON: ", error.what()));
  }
}

Binder KubeApiClient::AsBinder() const {
  KubeApiClient copy = *this;
  return [copy](const BindingTarget& target) { return copy.Bind(target); };
}

}  // namespace gpuslice::k8s
