// The audit: admins read all of it, a tenant's user its own tenant's (gpuslice/api/server.h).
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "api/replies.h"
#include "api/routes.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {
namespace {

using nlohmann::json;

void Audit(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
           http::Response& res) {
  alloc::AuditQuery query;
  query.tenant = req.get_param_value("tenant");
  if (req.has_param("since") && !absl::SimpleAtoi(req.get_param_value("since"), &query.since)) {
    return Fail(res, absl::InvalidArgumentError("since: epoch seconds"));
  }
  if (req.has_param("limit") && !absl::SimpleAtoi(req.get_param_value("limit"), &query.limit)) {
    return Fail(res, absl::InvalidArgumentError("limit: an integer"));
  }
  absl::StatusOr<std::vector<alloc::AuditEvent>> events = service.Audit(caller, query);
  if (!events.ok()) return Fail(res, events.status());
  json out = json::array();
  for (const alloc::AuditEvent& e : *events) {
    out.push_back({{"id", e.id},
                   {"at", e.at},
                   {"actor", e.actor},
                   {"tenant", e.tenant},
                   {"action", e.action},
                   {"subject", e.subject},
                   {"purpose", e.purpose},
                   {"detail", json::parse(e.detail, nullptr, false)}});
  }
  Reply(res, 200, {{"events", out}});
}

}  // namespace

std::vector<Route> AuditRoutes(alloc::Service& service) {
  // A tenant's user reads only its own tenant's (alloc::Service::Audit).
  return {{"GET", "/v1/audit", AdminOrTenant("agents do not read the audit"), On(service, Audit)}};
}

}  // namespace gpuslice::api
