// gpuslice/api/server.h
//
// The allocation service's HTTP/JSON API, version 1 (docs/api/openapi.yaml describes it):
//
//   GET    /v1/health                      no authentication: status, store, GPUs
//   GET    /v1/inventory                   nodes and GPUs with what is allocated on them
//   GET    /v1/classes                     PUT/DELETE /v1/classes/{name} (admin)
//   GET    /v1/tenants                     PUT/DELETE /v1/tenants/{name} (admin)
//   POST   /v1/users                       (admin) create a user; answers its token once
//   GET    /v1/users                       users (admin: all; others: themselves), no tokens
//   DELETE /v1/users/{name}                (admin) revoke a user and its token
//   POST   /v1/users/{name}/rotate         a new token (admin: anyone's; others: their own)
//   POST   /v1/leases                      acquire: 201 granted, 202 queued, 409 refused
//   GET    /v1/leases[?all=true]           GET /v1/leases/{id}
//   POST   /v1/leases/{id}/renew           DELETE /v1/leases/{id} (release)
//   GET    /v1/queue                       DELETE /v1/queue/{id} (cancel)
//   GET    /v1/audit?tenant=&since=&limit=
//   GET    /metrics                        (admin; an agent: its machine's series) Prometheus text
//
// Every endpoint but health needs `Authorization: Bearer <token>` (failures audited and limited
// per source, see src/api/auth.h); a tenant sees and changes
// only its own leases, queue entries and audit. Bodies are JSON objects; unknown fields, wrong
// types, absurd amounts, bodies over 64 KiB (413), chunked (411) or compressed (415) bodies get a
// 4xx with {"error": "..."} and change nothing. Tokens are never logged.
//
// The transport (src/api/http_server.h) parses strictly, holds no worker for an idle or slow
// client, enforces deadlines and per-source connection limits, closes a connection after any
// error in its framing, and speaks TLS when given a context.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/metrics/exposition.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace gpuslice::api {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8470;  // 0: any free port
  std::size_t max_body_bytes = 64 * 1024;
  int worker_threads = 64;         // requests answered at once (idle connections take none)
  int header_timeout_ms = 10'000;  // a request's head, from its first byte (or the accept)
  int body_timeout_ms = 10'000;    // a request's body, from the end of its head
  int idle_timeout_ms = 30'000;    // a keep-alive connection between requests
  int write_timeout_ms = 10'000;   // a response the client does not read
  int max_connections = 10'000;
  int max_connections_per_source = 256;  // per peer address; past it: 429 and closed
  SSL_CTX* tls = nullptr;  // TLS on every connection (the caller owns it); null: plain HTTP
  // Mutual TLS for agents: an agent's token is accepted only over a connection whose verified
  // client certificate names the agent's machine (the context must ask for client certificates).
  bool agents_need_client_certificates = false;
  // Failed authentications (an unknown or expired token) are audited; a source (an IPv4 address
  // or an IPv6 /64) failing `auth_max_failures` times within `auth_window_s` is answered 429 for
  // `auth_lockout_s`, its tokens unread. `auth_clock_s`: monotonic seconds (tests set it).
  int auth_max_failures = 10;
  int auth_window_s = 60;
  int auth_lockout_s = 60;
  std::function<std::int64_t()> auth_clock_s;
  // GET /metrics (admin or agent token): the families this returns, made at each scrape and
  // written in the Prometheus text format; unset: no /metrics. An admin reads them all; an
  // agent only the samples of its own machine (label "Hostname"), so the fleet's tenants,
  // leases and other machines stay out of a node's reach.
  std::function<absl::StatusOr<std::vector<metrics::Family>>()> metrics;
};

namespace http {
class Transport;
struct Request;
struct Response;
}  // namespace http
class Router;
class RequestAuthenticator;

class ApiServer {
 public:
  ApiServer(alloc::Service& service, ServerOptions options);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds and serves on a background thread. Fails if the address cannot be bound.
  absl::Status Start();
  // The port it listens on (after Start).
  int port() const { return port_; }
  // Stops accepting, finishes the requests in flight, joins the threads. Idempotent.
  void Stop();

  // Answers one request in-process, as the transport hands it over (tests and fuzzing call it
  // without a socket). May run on many threads at once.
  void Handle(http::Request& request, http::Response& response) const;

 private:
  void Routes();
  alloc::Service& service_;
  ServerOptions options_;
  std::unique_ptr<RequestAuthenticator> authenticator_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<http::Transport> transport_;
  int port_ = 0;
};

}  // namespace gpuslice::api
