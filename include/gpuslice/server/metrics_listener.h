// A small HTTP listener that answers GET /metrics in the Prometheus text format (version 0.0.4),
// for `gpuslice agent --metrics-listen HOST:PORT`. It runs cpp-httplib's server on its own thread
// (and a small pool of its own for connections); the text comes from a provider callback, called
// on a listener thread for each scrape:
//   GET /metrics   200 with the provider's text and Content-Type metrics::kContentType;
//                  500 with a one-line message when the provider fails;
//   anything else  404.
// With a token (RequireToken), a scrape must send `Authorization: Bearer <token>` (401
// otherwise; Prometheus's `authorization` / `bearer_token_file`). Without one the listener must
// be on a loopback address (NeedsToken tells; `gpuslice agent` refuses otherwise).
//
// Start binds and starts serving before it returns (the port then accepts connections), or fails
// with InvalidArgument (a bad address) or Unavailable (the port cannot be bound) and no thread.
// Stop (and the destructor) stops accepting, waits for the scrapes in flight and joins the thread;
// it may be called more than once. Start and Stop are called from one thread; the provider must be
// safe to call from the listener's threads (one scrape at a time is not promised).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace gpuslice::server {

struct ListenAddress {
  std::string host;
  int port = 0;  // 0: any free port
};

// "HOST:PORT" (e.g. "127.0.0.1:9401", "[::1]:9401", "0.0.0.0:0"); InvalidArgument otherwise.
absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& text);

// The value of a --metrics-listen option: nullopt when empty (no listener), else
// ParseListenAddress's answer with its error prefixed by "--metrics-listen: ".
absl::StatusOr<std::optional<ListenAddress>> ParseMetricsListenOption(const std::string& text);

// True unless `address` is a loopback one (127.0.0.0/8, ::1, localhost): a listener anyone on the
// network reaches must ask for a token.
bool NeedsToken(const ListenAddress& address);

class MetricsListener {
 public:
  using Provider = std::function<absl::StatusOr<std::string>()>;

  explicit MetricsListener(Provider provider);
  ~MetricsListener();
  MetricsListener(const MetricsListener&) = delete;
  MetricsListener& operator=(const MetricsListener&) = delete;

  // Scrapes must carry this bearer token (set before Start; empty: none).
  void RequireToken(std::string token) { token_ = std::move(token); }
  absl::Status Start(const ListenAddress& address);
  void Stop();

  // The port it listens on (the one chosen for port 0); 0 before Start.
  int port() const { return port_; }

 private:
  Provider provider_;
  std::string token_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> loop_ended_{false};
  int port_ = 0;
};

}  // namespace gpuslice::server
