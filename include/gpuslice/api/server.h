// gpuslice/api/server.h
//
// The allocation service's HTTP/JSON API, version 1 (docs/api/openapi.yaml describes it):
//
//   GET    /v1/health                      no authentication: status, store, GPUs
//   GET    /v1/inventory                   nodes and GPUs with what is allocated on them
//   GET    /v1/classes                     PUT/DELETE /v1/classes/{name} (admin)
//   GET    /v1/tenants                     PUT/DELETE /v1/tenants/{name} (admin)
//   POST   /v1/users                       (admin) create a user; answers its token once
//   POST   /v1/leases                      acquire: 201 granted, 202 queued, 409 refused
//   GET    /v1/leases[?all=true]           GET /v1/leases/{id}
//   POST   /v1/leases/{id}/renew           DELETE /v1/leases/{id} (release)
//   GET    /v1/queue                       DELETE /v1/queue/{id} (cancel)
//   GET    /v1/audit?tenant=&since=&limit=
//   GET    /metrics                        (admin or agent) Prometheus text format, when enabled
//
// Every endpoint but health needs `Authorization: Bearer <token>`; a tenant sees and changes
// only its own leases, queue entries and audit. Bodies are JSON objects; unknown fields, wrong
// types, absurd amounts, bodies over 64 KiB (413), chunked (411) or compressed (415) bodies get a
// 4xx with {"error": "..."} and change nothing. Tokens are never logged.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "gpuslice/alloc/service.h"

namespace httplib {
class Server;
}

namespace gpuslice::api {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8470;  // 0: any free port
  std::size_t max_body_bytes = 64 * 1024;
  int worker_threads = 128;  // concurrent connections served
  // GET /metrics (admin or agent token): the Prometheus exposition text this returns, made at
  // each scrape; unset: no /metrics.
  std::function<absl::StatusOr<std::string>()> metrics;
};

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
  // Stops accepting, finishes the requests in flight, joins the thread. Idempotent.
  void Stop();

 private:
  void Routes();
  alloc::Service& service_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int listen_socket_ = -1;
  int port_ = 0;
};

}  // namespace gpuslice::api
