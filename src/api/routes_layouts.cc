// Layouts: an admin fixes a machine's MIG layout; its agent carries it out and reports back
// (gpuslice/api/server.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/replies.h"
#include "api/routes.h"
#include "gpuslice/alloc/wire.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {
namespace {

using nlohmann::json;

// 200 with the layout in force, or 409 naming the leases in the way.
void LayoutReply(http::Response& res, const alloc::LayoutOutcome& outcome,
                 const std::string& refusal) {
  if (!outcome.accepted) {
    json blocking = json::array();
    for (const alloc::BlockingLease& b : outcome.blocking) {
      blocking.push_back({{"lease", b.lease.id},
                          {"tenant", b.lease.tenant},
                          {"user", b.lease.user},
                          {"class", b.lease.class_name},
                          {"purpose", b.lease.purpose},
                          {"state", b.lease.state},
                          {"gpu", b.gpu_index},
                          {"why", b.why}});
    }
    Reply(res, 409, {{"error", refusal}, {"blocking", blocking}});
    return;
  }
  Reply(res, 200,
        {{"layout", outcome.layout.generation > 0 ? alloc::LayoutToJson(outcome.layout) : json()}});
}

void SetLayout(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
               http::Response& res) {
  absl::StatusOr<json> body = Body(req, {"config", "name", "origin"});
  if (!body.ok()) return Fail(res, body.status());
  alloc::LayoutRequest request;
  for (absl::Status st :
       {Field(*body, "config", &request.config_text), Field(*body, "name", &request.config_name),
        Field(*body, "origin", &request.origin)}) {
    if (!st.ok()) return Fail(res, st);
  }
  if (request.config_text.empty()) {
    return Fail(res, absl::InvalidArgumentError(
                         "config: the mig-parted config text (YAML or JSON) is required"));
  }
  absl::StatusOr<alloc::LayoutOutcome> outcome =
      service.SetLayout(caller, req.matches[1].str(), request);
  if (!outcome.ok()) return Fail(res, outcome.status());
  LayoutReply(res, *outcome, "leases stand in the way of the layout; nothing was changed");
}

void GetLayout(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
               http::Response& res) {
  absl::StatusOr<std::optional<alloc::NodeLayout>> layout =
      service.GetLayout(caller, req.matches[1].str());
  if (!layout.ok()) return Fail(res, layout.status());
  Reply(res, 200, {{"layout", layout->has_value() ? alloc::LayoutToJson(**layout) : json()}});
}

void ClearLayout(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                 http::Response& res) {
  absl::StatusOr<alloc::LayoutOutcome> outcome = service.ClearLayout(caller, req.matches[1].str());
  if (!outcome.ok()) return Fail(res, outcome.status());
  LayoutReply(res, *outcome, "leases stand in the way of clearing the layout; nothing was changed");
}

void ReportLayout(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                  http::Response& res) {
  absl::StatusOr<json> body = Body(req, {"generation", "message"});
  if (!body.ok()) return Fail(res, body.status());
  std::int64_t generation = 0;
  std::string message;
  for (absl::Status st :
       {Field(*body, "generation", &generation), Field(*body, "message", &message)}) {
    if (!st.ok()) return Fail(res, st);
  }
  if (absl::Status st = service.ReportLayout(caller, req.matches[1].str(), generation, message);
      !st.ok()) {
    return Fail(res, st);
  }
  Reply(res, 200, {{"generation", generation}});
}

}  // namespace

// An admin sets and clears; the machine's own agent (and an admin) reads and reports.
std::vector<Route> LayoutRoutes(alloc::Service& service) {
  const std::string layout = absl::StrCat("/v1/nodes/", kNamePattern, "/layout");
  return {
      {"PUT", layout, AdminOnly(), On(service, SetLayout)},
      {"GET", layout, AdminOrAgent(), On(service, GetLayout)},
      {"DELETE", layout, AdminOnly(), On(service, ClearLayout)},
      {"POST", absl::StrCat(layout, "/status"), AdminOrAgent(), On(service, ReportLayout)},
  };
}

}  // namespace gpuslice::api
