// gpuslice/api/client.h
//
// The client side of the allocation service's HTTP/JSON API (gpuslice/api/server.h), used by the
// CLI's client commands, the node agent and the tests: one call is one request with the bearer
// token, a JSON body or none, and the answer's status and JSON.
//
// Errors as values, in two kinds:
//   * the request got no answer (the server cannot be reached, its TLS certificate is not
//     trusted, the URL is not one this client speaks): Call's status is not OK — Unavailable for
//     an unreachable or untrusted server, InvalidArgument for settings that cannot work — with a
//     message that says what to do;
//   * the server answered: Call is OK and the Response carries the HTTP status, whatever it is
//     (a 409 is an acquire's refusal, a 400 an older server); Response::Check turns an error
//     answer into a status for callers that only want success.
//
// https:// servers are always verified: against `ca` when given, else the system's trust store.
// A Client holds no connection between calls and may be used from several threads at once.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {

struct ClientSettings {
  std::string server;  // http://HOST:PORT or https://HOST:PORT
  std::string token;   // sent as Authorization: Bearer; empty: none
  std::string ca;      // PEM file of the CA to trust for https://; empty: the system's store
  // Mutual TLS (agents): the client certificate and its key, both or neither.
  std::string client_cert;
  std::string client_key;
  int timeout_s = 10;  // reading and writing; connecting takes at most 5 of them
};

struct Response {
  int status = 0;       // the HTTP status
  nlohmann::json body;  // the parsed body; discarded (is_discarded()) when it is not JSON
  std::string text;     // the body as it came

  bool ok() const { return status >= 200 && status < 300; }
  // The server's error text ({"error": ...}), else the body as it came, else "HTTP <status>".
  std::string Error() const;
  // OK for a 2xx; otherwise the status an HTTP code stands for (401 Unauthenticated, 403
  // PermissionDenied, 404 NotFound, 409 FailedPrecondition, 400/411/413/415 InvalidArgument, 429
  // ResourceExhausted, anything else Internal), with Error() as its message and the HTTP status
  // attached (HttpStatusOf).
  absl::Status Check() const;

 private:
  static absl::Status StatusFor(int status, const std::string& message);
};

class Client {
 public:
  // InvalidArgument when the server is not an http:// or https:// URL, or only one of
  // client_cert and client_key is given.
  static absl::StatusOr<Client> Make(ClientSettings settings);

  // `method` is GET, PUT, POST or DELETE; `body` is sent as application/json (none for null).
  absl::StatusOr<Response> Call(const std::string& method, const std::string& path,
                                const nlohmann::json* body = nullptr) const;

  // Call, then Response::Check: the body of a 2xx answer, or the error.
  absl::StatusOr<nlohmann::json> Json(const std::string& method, const std::string& path,
                                      const nlohmann::json* body = nullptr) const;

  const ClientSettings& settings() const { return settings_; }

 private:
  explicit Client(ClientSettings settings) : settings_(std::move(settings)) {}
  ClientSettings settings_;
};

// The HTTP status an error answer came with (Response::Check); 0 for a status that is not one
// (no answer: the server unreachable, the settings unusable).
int HttpStatusOf(const absl::Status& status);

// True for the statuses that mean "this token may not do this" (401, 403): an agent stops on
// them instead of trying again.
bool IsRefusedCredential(const absl::Status& status);

}  // namespace gpuslice::api
