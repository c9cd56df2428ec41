// Alerts: an agent reports those that fired and cleared on its machine; everyone reads those its
// role may see (gpuslice/api/server.h).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/replies.h"
#include "api/routes.h"
#include "gpuslice/metrics/alerts.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {
namespace {

using nlohmann::json;

absl::StatusOr<metrics::AlertChanges> ReadAlertChanges(const http::Request& req) {
  absl::StatusOr<json> body = Body(req, {"fired", "cleared"});
  if (!body.ok()) return body.status();
  metrics::AlertChanges changes;
  for (const char* list : {"fired", "cleared"}) {
    if (!body->contains(list)) continue;
    const json& items = (*body)[list];
    if (!items.is_array()) return absl::InvalidArgumentError(absl::StrCat(list, ": an array"));
    for (const json& item : items) {
      absl::StatusOr<metrics::Alert> alert = metrics::AlertFromJson(item);
      if (!alert.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(list, "[]: ", alert.status().message()));
      }
      (std::string(list) == "fired" ? changes.fired : changes.cleared).push_back(*std::move(alert));
    }
  }
  return changes;
}

void ReportAlerts(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                  http::Response& res) {
  absl::StatusOr<metrics::AlertChanges> changes = ReadAlertChanges(req);
  if (!changes.ok()) return Fail(res, changes.status());
  if (absl::Status st = service.ReportAlerts(caller, req.matches[1].str(), *changes); !st.ok()) {
    return Fail(res, st);
  }
  Reply(res, 200, {{"fired", changes->fired.size()}, {"cleared", changes->cleared.size()}});
}

void ListAlerts(alloc::Service& service, const alloc::Caller& caller, const http::Request&,
                http::Response& res) {
  absl::StatusOr<alloc::Service::AlertList> list = service.Alerts(caller);
  if (!list.ok()) return Fail(res, list.status());
  json active = json::array();
  json recent = json::array();
  for (const metrics::Alert& a : list->active) active.push_back(metrics::AlertToJson(a));
  for (const metrics::Alert& a : list->recent) recent.push_back(metrics::AlertToJson(a));
  Reply(res, 200, {{"active", active}, {"recent", recent}});
}

}  // namespace

std::vector<Route> AlertRoutes(alloc::Service& service) {
  return {
      // An agent only for its own machine.
      {"POST", absl::StrCat("/v1/nodes/", kNamePattern, "/alerts"), AdminOrAgent(),
       On(service, ReportAlerts)},
      // Admins see every alert, an agent its machine's, a tenant those of its leases' GPUs
      // (alloc::Service::Alerts).
      {"GET", "/v1/alerts", AnyRole(), On(service, ListAlerts)},
  };
}

}  // namespace gpuslice::api
