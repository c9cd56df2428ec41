#include "gpuslice/api/client.h"

#include <httplib.h>

#include <algorithm>
#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpuslice::api {

using nlohmann::json;

std::string Response::Error() const {
  if (body.is_object() && body.contains("error") && body["error"].is_string()) {
    return body["error"].get<std::string>();
  }
  return text.empty() ? absl::StrCat("HTTP ", status) : text;
}

namespace {

constexpr char kHttpStatusUrl[] = "gpuslice.io/http-status";

absl::Status WithHttpStatus(absl::Status status, int http) {
  status.SetPayload(kHttpStatusUrl, absl::Cord(std::to_string(http)));
  return status;
}

}  // namespace

int HttpStatusOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kHttpStatusUrl);
  int http = 0;
  return payload.has_value() && absl::SimpleAtoi(std::string(*payload), &http) ? http : 0;
}

absl::Status Response::Check() const {
  if (ok()) return absl::OkStatus();
  return WithHttpStatus(StatusFor(status, Error()), status);
}

absl::Status Response::StatusFor(int status, const std::string& message) {
  switch (status) {
    case 400:
    case 411:
    case 413:
    case 415:
      return absl::InvalidArgumentError(message);
    case 401:
      return absl::UnauthenticatedError(message);
    case 403:
      return absl::PermissionDeniedError(message);
    case 404:
      return absl::NotFoundError(message);
    case 409:
      return absl::FailedPreconditionError(message);
    case 429:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<Client> Client::Make(ClientSettings settings) {
  if (!absl::StartsWith(settings.server, "http://") &&
      !absl::StartsWith(settings.server, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server ", settings.server,
                     ": not an http:// or https:// URL (for example http://127.0.0.1:8470)"));
  }
  if (settings.client_cert.empty() != settings.client_key.empty()) {
    return absl::InvalidArgumentError("--client-cert and --client-key go together");
  }
  return Client(std::move(settings));
}

namespace {

std::string Unreachable(const ClientSettings& s, httplib::Error error) {
  const bool tls =
      error == httplib::Error::SSLServerVerification || error == httplib::Error::SSLConnection;
  return absl::StrCat(
      "cannot reach ", s.server, " (", httplib::to_string(error), ")",
      tls ? absl::StrCat("; the server's TLS certificate is not trusted: pass the one `gpuslice "
                         "serve` printed with --ca FILE or GPUSLICE_CA (trusting now: ",
                         s.ca.empty() ? "the system's store" : s.ca, ")")
          : "; is `gpuslice serve` running? set --server or GPUSLICE_SERVER (http:// for a "
            "server started with --insecure)");
}

}  // namespace

absl::StatusOr<Response> Client::Call(const std::string& method, const std::string& path,
                                      const json* body) const {
  const ClientSettings& s = settings_;
  httplib::Client client(s.server, s.client_cert, s.client_key);
  if (!client.is_valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server ", s.server, ": not a URL this client can use",
                     s.client_cert.empty() ? "" : " (or the client certificate cannot be loaded)"));
  }
  if (absl::StartsWith(s.server, "https://")) {
    client.enable_server_certificate_verification(true);
    if (!s.ca.empty()) client.set_ca_cert_path(s.ca);
  }
  client.set_connection_timeout(std::min(s.timeout_s, 5));
  client.set_tcp_nodelay(true);
  client.set_read_timeout(s.timeout_s);
  client.set_write_timeout(s.timeout_s);
  httplib::Headers headers;
  if (!s.token.empty()) headers.emplace("Authorization", "Bearer " + s.token);
  const std::string payload = body == nullptr ? "" : body->dump();
  httplib::Result result = method == "GET"      ? client.Get(path, headers)
                           : method == "DELETE" ? client.Delete(path, headers)
                           : method == "PUT"
                               ? client.Put(path, headers, payload, "application/json")
                               : client.Post(path, headers, payload, "application/json");
  if (!result) return absl::UnavailableError(Unreachable(s, result.error()));
  Response response;
  response.status = result->status;
  response.body = json::parse(result->body, nullptr, false);
  response.text = std::move(result->body);
  return response;
}

absl::StatusOr<json> Client::Json(const std::string& method, const std::string& path,
                                  const json* body) const {
  absl::StatusOr<Response> response = Call(method, path, body);
  if (!response.ok()) return response.status();
  if (absl::Status s = response->Check(); !s.ok()) return s;
  return std::move(response->body);
}

bool IsRefusedCredential(const absl::Status& status) {
  return absl::IsUnauthenticated(status) || absl::IsPermissionDenied(status);
}

}  // namespace gpuslice::api
