#include "gpuslice/server/metrics_listener.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gpuslice/metrics/exposition.h"

namespace gpuslice::server {

absl::StatusOr<std::optional<ListenAddress>> ParseMetricsListenOption(const std::string& text) {
  if (text.empty()) return std::optional<ListenAddress>();
  absl::StatusOr<ListenAddress> address = ParseListenAddress(text);
  if (!address.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen: ", address.status().message()));
  }
  return std::optional<ListenAddress>(*address);
}

absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  ListenAddress address;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(text.substr(colon + 1), &address.port) || address.port < 0 ||
      address.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': give HOST:PORT, e.g. 127.0.0.1:9401"));
  }
  address.host = text.substr(0, colon);
  if (address.host.size() >= 2 && address.host.front() == '[' && address.host.back() == ']') {
    address.host = address.host.substr(1, address.host.size() - 2);  // [::1]
  }
  if (address.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "': the host is missing"));
  }
  return address;
}

MetricsListener::MetricsListener(Provider provider) : provider_(std::move(provider)) {}

MetricsListener::~MetricsListener() { Stop(); }

absl::Status MetricsListener::Start(const ListenAddress& address) {
  if (server_ != nullptr) return absl::FailedPreconditionError("the listener runs already");
  auto server = std::make_unique<httplib::Server>();
  // Scrapes are few: two connection threads instead of httplib's one per core. Short keep-alive
  // and read timeouts bound how long Stop waits for an idle connection.
  server->new_task_queue = [] { return new httplib::ThreadPool(2); };
  server->set_keep_alive_timeout(2);
  server->set_read_timeout(5);
  server->set_write_timeout(5);
  server->set_payload_max_length(64 * 1024);
  // httplib's default is SO_REUSEPORT, with which a second process binds the same port without an
  // error and takes some of the scrapes; SO_REUSEADDR alone refuses a port in use.
  server->set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (!token_.empty() && req.get_header_value("Authorization") != "Bearer " + token_) {
      res.status = 401;
      res.set_content("gpuslice: /metrics needs the agent's metrics token (Bearer)\n",
                      "text/plain; charset=utf-8");
      return;
    }
    absl::StatusOr<std::string> text = provider_();
    if (!text.ok()) {
      res.status = 500;
      res.set_content(absl::StrCat("gpuslice: the metrics cannot be collected: ",
                                   text.status().message(), "\n"),
                      "text/plain; charset=utf-8");
      return;
    }
    res.set_content(*std::move(text), metrics::kContentType);
  });
  server->set_error_handler(
      httplib::Server::Handler([](const httplib::Request&, httplib::Response& res) {
        if (res.status == 404) {
          res.set_content("not found: this listener answers GET /metrics\n",
                          "text/plain; charset=utf-8");
        }
      }));
  int port = address.port;
  if (port == 0) {
    port = server->bind_to_any_port(address.host);
    if (port <= 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", address.host));
    }
  } else if (!server->bind_to_port(address.host, port)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address.host, ":", port, " (in use, or not an address)"));
  }
  // Bound and listening: connections queue from here on, before the accept loop runs.
  httplib::Server* running = server.get();
  server_ = std::move(server);
  port_ = port;
  loop_ended_ = false;
  thread_ = std::thread([this, running] {
    running->listen_after_bind();
    loop_ended_ = true;
  });
  // httplib's stop() does nothing before the loop has started, so Stop must not come earlier.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!running->is_running() && !loop_ended_ && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

void MetricsListener::Stop() {
  if (server_ == nullptr) return;
  if (thread_.joinable()) {
    // httplib's stop() is lost when it comes before the accept loop has started (Start waits
    // for the loop, so this wait is only a guard).
    while (!server_->is_running() && !loop_ended_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    server_->stop();
    thread_.join();
  }
  server_.reset();
  port_ = 0;
}

}  // namespace gpuslice::server

namespace gpuslice::server {

bool NeedsToken(const ListenAddress& address) {
  const std::string& host = address.host;
  return !(host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0);
}

}  // namespace gpuslice::server
