#include "gpuslice/api/server.h"

#include <iostream>
#include <utility>
#include <vector>

#include "api/auth.h"
#include "api/http_message.h"
#include "api/http_server.h"
#include "api/replies.h"
#include "api/router.h"
#include "api/routes.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {
namespace {

using nlohmann::json;

// A row's route handler: authenticates the caller unless the row needs none, refuses a role the
// row does not allow, then runs the row's handler (src/api/routes.h).
Router::Handler Dispatcher(RequestAuthenticator* authenticator, Route route) {
  return [authenticator, access = std::move(route.access), handler = std::move(route.handler)](
             const http::Request& req, http::Response& res) {
    if (!access.authenticate) return handler(alloc::Caller{}, req, res);
    std::int64_t retry_after_s = 0;
    absl::StatusOr<alloc::Caller> caller = authenticator->Identify(req, &retry_after_s);
    if (!caller.ok()) {
      Fail(res, caller.status());
      if (retry_after_s > 0) {
        res.status = 429;
        res.set_header("Retry-After", std::to_string(retry_after_s));
      }
      return;
    }
    if (!access.Allows(caller->role)) {
      return Fail(res, absl::PermissionDeniedError(access.refusal));
    }
    handler(*caller, req, res);
  };
}

}  // namespace

std::vector<Route> RouteTable(alloc::Service& service, const ServerOptions& options) {
  std::vector<Route> table;
  for (std::vector<Route> group :
       {ClusterRoutes(service, options), UserRoutes(service), ConfigRoutes(service),
        LeaseRoutes(service), NodeRoutes(service), UsageRoutes(service), LayoutRoutes(service),
        AuditRoutes(service), AlertRoutes(service)}) {
    for (Route& route : group) table.push_back(std::move(route));
  }
  return table;
}

ApiServer::ApiServer(alloc::Service& service, ServerOptions options)
    : service_(service), options_(std::move(options)), router_(std::make_unique<Router>()) {
  authenticator_ = std::make_unique<RequestAuthenticator>(
      service_, RequestAuthenticator::Options{options_.agents_need_client_certificates,
                                              AuthLimits{.max_failures = options_.auth_max_failures,
                                                         .window_s = options_.auth_window_s,
                                                         .lockout_s = options_.auth_lockout_s},
                                              options_.auth_clock_s});
  Routes();
}

ApiServer::~ApiServer() { Stop(); }

void ApiServer::Routes() {
  for (Route& route : RouteTable(service_, options_)) {
    const std::string method = route.method;
    const std::string pattern = route.pattern;
    router_->Add(method, pattern, Dispatcher(authenticator_.get(), std::move(route)));
  }
}

void ApiServer::Handle(http::Request& req, http::Response& res) const {
  // The size limit holds for what is parsed: no compressed request bodies.
  if (req.has_header("Content-Encoding") &&
      req.get_header_value("Content-Encoding") != "identity") {
    Reply(res, 415, json{{"error", "compressed bodies are not accepted"}});
    return;
  }
  try {
    router_->Route(req, res);
  } catch (const std::exception& e) {
    std::cerr << "gpuslice: internal error answering " << req.method << " " << req.path << ": "
              << e.what() << std::endl;
    res = http::Response{};
    Reply(res, 500, json{{"error", "internal error"}});
  }
}

absl::Status ApiServer::Start() {
  http::TransportOptions transport;
  transport.host = options_.host;
  transport.port = options_.port;
  transport.max_body_bytes = options_.max_body_bytes;
  transport.worker_threads = options_.worker_threads;
  transport.header_timeout_ms = options_.header_timeout_ms;
  transport.body_timeout_ms = options_.body_timeout_ms;
  transport.idle_timeout_ms = options_.idle_timeout_ms;
  transport.write_timeout_ms = options_.write_timeout_ms;
  transport.max_connections = options_.max_connections;
  transport.max_connections_per_source = options_.max_connections_per_source;
  transport.tls = options_.tls;
  transport_ = std::make_unique<http::Transport>(
      transport, [this](http::Request& req, http::Response& res) { Handle(req, res); });
  if (absl::Status st = transport_->Start(); !st.ok()) {
    transport_.reset();
    return st;
  }
  port_ = transport_->port();
  return absl::OkStatus();
}

void ApiServer::Stop() {
  if (transport_ != nullptr) transport_->Stop();
}

}  // namespace gpuslice::api
