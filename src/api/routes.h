// The API's routes as rows of one table: {method, path pattern, who may call it, handler}.
// The rows are grouped per resource, each group a function in its own source file that returns
// its rows; ApiServer (src/api/server.cc) puts them into a Router and dispatches each request
// from its row:
//   1. a row that needs authentication identifies the caller (src/api/auth.h) and answers the
//      refusal itself (401, or 429 with Retry-After for a locked-out source, or 403);
//   2. a caller whose role the row does not allow is answered 403 with the row's refusal (the
//      same text alloc::Service gives, so the answer does not depend on which of them refuses);
//   3. the handler runs; it keeps only the finer checks (an agent only for its own machine, a
//      tenant only for its own leases, a user rotating only its own token), most of them made by
//      alloc::Service.
// Internal to the API library.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "api/http_message.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/api/server.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {

// A route's handler, run once the row's access is granted. A row without authentication gets
// an empty Caller (no user, no tenant, no machine) that it must not act for.
using CallerHandler =
    std::function<void(const alloc::Caller&, const http::Request&, http::Response&)>;

// Who may call a route.
struct Access {
  bool authenticate = true;     // false: anyone, without a token (none is read)
  std::set<alloc::Role> roles;  // with authentication: the roles allowed
  std::string refusal;          // the 403's error for a caller of any other role
  bool Allows(alloc::Role role) const { return roles.contains(role); }
};

// The refusals alloc::Service gives for these roles (src/alloc/service_internal.h).
inline constexpr char kNeedsAdmin[] = "this operation needs the admin role";
inline constexpr char kNeedsAgentOrAdmin[] = "this operation needs the agent or admin role";

inline Access NoAuthentication() { return Access{false, {}, ""}; }
inline Access AnyRole() {
  return Access{true, {alloc::Role::kAdmin, alloc::Role::kTenant, alloc::Role::kAgent}, ""};
}
inline Access AdminOnly() { return Access{true, {alloc::Role::kAdmin}, kNeedsAdmin}; }
inline Access AdminOrAgent(std::string refusal = kNeedsAgentOrAdmin) {
  return Access{true, {alloc::Role::kAdmin, alloc::Role::kAgent}, std::move(refusal)};
}
inline Access AdminOrTenant(std::string refusal) {
  return Access{true, {alloc::Role::kAdmin, alloc::Role::kTenant}, std::move(refusal)};
}
inline Access TenantOnly(std::string refusal) {
  return Access{true, {alloc::Role::kTenant}, std::move(refusal)};
}

struct Route {
  std::string method;   // GET, PUT, POST or DELETE
  std::string pattern;  // a regular expression over the whole path; its captures land in
                        // `request.matches`
  Access access;
  CallerHandler handler;
};

// Most handlers are functions of the service, the caller, the request and the response.
using ServiceHandler = void (*)(alloc::Service&, const alloc::Caller&, const http::Request&,
                                http::Response&);
inline CallerHandler On(alloc::Service& service, ServiceHandler handler) {
  return [&service, handler](const alloc::Caller& caller, const http::Request& req,
                             http::Response& res) { handler(service, caller, req, res); };
}

// The path patterns' parts: a name of a class, tenant or machine, a user's name, an id.
inline constexpr char kNamePattern[] = "([A-Za-z0-9._-]+)";
inline constexpr char kUserPattern[] = "([A-Za-z0-9._-]{1,64})";
inline constexpr char kIdPattern[] = R"((\d+))";

// The groups, one file each:
// GET /v1/health, GET /v1/inventory, GET /metrics (with options.metrics) (routes_cluster.cc).
std::vector<Route> ClusterRoutes(alloc::Service& service, const ServerOptions& options);
// GET /v1/classes, PUT/DELETE /v1/classes/{name}, the same for tenants (routes_config.cc).
std::vector<Route> ConfigRoutes(alloc::Service& service);
// POST/GET /v1/users, DELETE /v1/users/{name}, POST /v1/users/{name}/rotate (routes_users.cc).
std::vector<Route> UserRoutes(alloc::Service& service);
// /v1/leases, /v1/leases/{id}, .../renew, /v1/queue, /v1/queue/{id} (routes_leases.cc).
std::vector<Route> LeaseRoutes(alloc::Service& service);
// PUT /v1/nodes/{host}, GET /v1/nodes, GET .../assignments, POST .../bound (routes_nodes.cc).
std::vector<Route> NodeRoutes(alloc::Service& service);
// PUT/GET/DELETE /v1/nodes/{host}/layout, POST .../layout/status (routes_layouts.cc).
std::vector<Route> LayoutRoutes(alloc::Service& service);
// POST /v1/nodes/{host}/usage, GET /v1/usage (routes_usage.cc).
std::vector<Route> UsageRoutes(alloc::Service& service);
// POST /v1/nodes/{host}/alerts, GET /v1/alerts (routes_alerts.cc).
std::vector<Route> AlertRoutes(alloc::Service& service);
// GET /v1/audit (routes_audit.cc).
std::vector<Route> AuditRoutes(alloc::Service& service);

// Every group's rows, in the order they are matched (src/api/server.cc). The tests read it.
std::vector<Route> RouteTable(alloc::Service& service, const ServerOptions& options);

// Shared by the groups: a lease's or an assignment's bound devices (routes_leases.cc).
nlohmann::json BoundJson(const std::vector<alloc::BoundDevice>& devices);

}  // namespace gpuslice::api
