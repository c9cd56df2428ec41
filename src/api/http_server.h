// The allocation service's HTTP/1.1 transport: connections, deadlines, limits and TLS.
//
// One reactor thread owns every connection that is not being answered: it accepts, completes
// TLS handshakes, reads request heads and bodies without blocking (src/api/http_message.h parses
// them strictly), enforces the deadlines and the connection limits, and hands each complete
// request to a pool of workers. A worker runs the handler, writes the response (with a write
// deadline) and gives the connection back. So a slow or idle client costs a socket and a buffer,
// never a worker: 1,000 slow connections do not stop the API for anyone else.
//
// Deadlines (each ends the connection; the reading ones answer 408 first):
//   * header_timeout_ms: from a request's first byte (or from the accept, for the first request
//     and the TLS handshake) to the end of its head;
//   * body_timeout_ms: from the end of the head to the end of the body;
//   * idle_timeout_ms: a keep-alive connection between requests;
//   * write_timeout_ms: a response not taken by the client within it.
// Limits: `max_connections` in all and `max_connections_per_source` per peer address (past it a
// new connection is answered 429 over plain HTTP, or closed over TLS); a head over
// `head_limits` (431) and a body over `max_body_bytes` (413, before it is read).
// Any error answer closes the connection: the bytes after a bad request are never parsed.
//
// Thread-safety: Start and Stop from one thread; the handler runs on the workers, concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "api/http_message.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace gpuslice::api::http {

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  std::size_t max_body_bytes = 64 * 1024;
  HeadLimits head_limits;
  int worker_threads = 64;  // requests answered at once
  int header_timeout_ms = 10'000;
  int body_timeout_ms = 10'000;
  int idle_timeout_ms = 30'000;
  int write_timeout_ms = 10'000;
  int max_connections = 10'000;
  int max_connections_per_source = 256;
  // TLS: every connection is TLS with this context (owned by the caller, outliving the
  // transport); null: plain HTTP.
  SSL_CTX* tls = nullptr;
};

// Runs for each complete request on a worker. `response.close` ends the connection after it.
using Handler = std::function<void(Request& request, Response& response)>;

// What the transport has done, for tests and logs.
struct TransportCounters {
  std::int64_t accepted = 0;
  std::int64_t open = 0;
  std::int64_t refused_per_source = 0;  // over max_connections_per_source
  std::int64_t refused_total = 0;       // over max_connections
  std::int64_t timed_out = 0;           // a deadline passed
  std::int64_t bad_requests = 0;        // a head or framing error answered and closed
  std::int64_t tls_failures = 0;        // handshakes that failed
  std::int64_t requests = 0;            // handed to the handler
};

class Transport {
 public:
  Transport(TransportOptions options, Handler handler);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Binds, listens and starts the reactor and the workers. Fails if the address cannot be bound.
  absl::Status Start();
  int port() const { return port_; }
  // Stops accepting, closes idle connections, lets the requests in flight finish, joins.
  // Idempotent.
  void Stop();
  TransportCounters counters() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace gpuslice::api::http
