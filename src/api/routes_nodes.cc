// Machines and their agents: a machine reports its GPUs, fetches the leases to set up and
// reports the devices it made for them; an agent only for its own machine, which alloc::Service
// checks and audits (gpuslice/api/server.h).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/replies.h"
#include "api/routes.h"
#include "gpuslice/alloc/wire.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {
namespace {

using nlohmann::json;

// The body of PUT /v1/nodes/{host}: the machine's CPU, memory and GPUs.
absl::StatusOr<alloc::NodeReport> ReadNodeReport(const http::Request& req) {
  absl::StatusOr<json> body = Body(req, {"cpu_milli", "memory_mib", "gpus"});
  if (!body.ok()) return body.status();
  alloc::NodeReport report;
  report.host = req.matches[1].str();
  for (absl::Status st : {Field(*body, "cpu_milli", &report.cpu_milli),
                          Field(*body, "memory_mib", &report.memory_mib)}) {
    if (!st.ok()) return st;
  }
  auto gpus = body->find("gpus");
  if (gpus == body->end() || !gpus->is_array()) {
    return absl::InvalidArgumentError("gpus: must be an array");
  }
  for (const json& item : *gpus) {
    if (absl::Status st = Only(item, {"index", "uuid", "model", "mig"}, "gpus[]"); !st.ok()) {
      return st;
    }
    alloc::NodeReport::Gpu gpu;
    for (absl::Status st : {Field(item, "index", &gpu.index), Field(item, "uuid", &gpu.uuid),
                            Field(item, "model", &gpu.model), Field(item, "mig", &gpu.mig)}) {
      if (!st.ok()) return st;
    }
    report.gpus.push_back(gpu);
  }
  return report;
}

void ReportNode(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                http::Response& res) {
  absl::StatusOr<alloc::NodeReport> report = ReadNodeReport(req);
  if (!report.ok()) return Fail(res, report.status());
  if (absl::Status st = service.ReportNode(caller, *report); !st.ok()) return Fail(res, st);
  const place::Cluster cluster = service.Occupancy();
  json nodes = json::array();
  for (int n = 0; n < cluster.node_count(); ++n) {
    const std::string& name = cluster.spec(n).name;
    if (name.rfind(report->host + "/", 0) == 0) nodes.push_back(name);
  }
  Reply(res, 200, {{"host", report->host}, {"nodes", nodes}});
}

void ListNodes(alloc::Service& service, const alloc::Caller& caller, const http::Request&,
               http::Response& res) {
  absl::StatusOr<std::vector<alloc::NodeReport>> nodes = service.Nodes(caller);
  if (!nodes.ok()) return Fail(res, nodes.status());
  json out = json::array();
  for (const alloc::NodeReport& n : *nodes) {
    json gpus = json::array();
    for (const alloc::NodeReport::Gpu& g : n.gpus) {
      gpus.push_back({{"index", g.index}, {"uuid", g.uuid}, {"model", g.model}, {"mig", g.mig}});
    }
    absl::StatusOr<std::optional<alloc::NodeLayout>> layout = service.GetLayout(caller, n.host);
    out.push_back(
        {{"host", n.host},
         {"cpu_milli", n.cpu_milli},
         {"memory_mib", n.memory_mib},
         {"gpus", gpus},
         {"seen_at", n.seen_at},
         {"layout", layout.ok() && layout->has_value() ? alloc::LayoutToJson(**layout) : json()}});
  }
  Reply(res, 200, {{"nodes", out}});
}

void Assignments(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                 http::Response& res) {
  absl::StatusOr<std::vector<alloc::Assignment>> assignments =
      service.Assignments(caller, req.matches[1].str());
  if (!assignments.ok()) return Fail(res, assignments.status());
  json out = json::array();
  for (const alloc::Assignment& a : *assignments) {
    const json claims = alloc::ClaimsToJson(a.claims);
    out.push_back({{"lease", a.lease},
                   {"node", a.node},
                   {"claims", claims},
                   {"bound", BoundJson(a.bound)},
                   {"tenant", a.tenant},
                   {"class", a.class_name},
                   {"idle_timeout_s", a.idle_timeout_s}});
  }
  absl::StatusOr<std::optional<alloc::NodeLayout>> layout =
      service.GetLayout(caller, req.matches[1].str());
  if (!layout.ok()) return Fail(res, layout.status());
  Reply(res, 200,
        {{"assignments", out},
         {"layout", layout->has_value() ? alloc::LayoutToJson(**layout) : json()}});
}

// The body of POST /v1/nodes/{host}/bound: lease id to the devices made for it.
absl::StatusOr<std::map<std::int64_t, std::vector<alloc::BoundDevice>>> ReadBound(
    const http::Request& req) {
  absl::StatusOr<json> body = Body(req, {"leases"});
  if (!body.ok()) return body.status();
  auto leases = body->find("leases");
  if (leases == body->end() || !leases->is_object()) {
    return absl::InvalidArgumentError("leases: an object of lease id to a list of devices");
  }
  std::map<std::int64_t, std::vector<alloc::BoundDevice>> bound;
  for (const auto& [key, devices] : leases->items()) {
    std::int64_t id = 0;
    if (!absl::SimpleAtoi(key, &id) || id <= 0 || !devices.is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("leases.", key, ": a lease id mapping to a list of devices"));
    }
    for (const json& item : devices) {
      if (absl::Status st =
              Only(item, {"uuid", "gpu_uuid", "gpu_index", "gi", "ci", "vram_mib", "share_milli"},
                   "leases[]");
          !st.ok()) {
        return st;
      }
      alloc::BoundDevice d;
      for (absl::Status st : {Field(item, "uuid", &d.uuid), Field(item, "gpu_uuid", &d.gpu_uuid),
                              Field(item, "gpu_index", &d.gpu_index), Field(item, "gi", &d.gi),
                              Field(item, "ci", &d.ci), Field(item, "vram_mib", &d.vram_mib),
                              Field(item, "share_milli", &d.share_milli)}) {
        if (!st.ok()) return st;
      }
      bound[id].push_back(d);
    }
  }
  return bound;
}

void ReportBound(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                 http::Response& res) {
  absl::StatusOr<std::map<std::int64_t, std::vector<alloc::BoundDevice>>> bound = ReadBound(req);
  if (!bound.ok()) return Fail(res, bound.status());
  absl::StatusOr<std::vector<std::int64_t>> ignored =
      service.ReportBound(caller, req.matches[1].str(), *bound);
  if (!ignored.ok()) return Fail(res, ignored.status());
  Reply(res, 200, {{"ignored", *ignored}});
}

}  // namespace

// Admins and agents; an agent only for its own machine (GET /v1/nodes: it sees only its own).
std::vector<Route> NodeRoutes(alloc::Service& service) {
  const std::string node = absl::StrCat("/v1/nodes/", kNamePattern);
  return {
      {"PUT", node, AdminOrAgent(), On(service, ReportNode)},
      {"GET", "/v1/nodes", AdminOrAgent(), On(service, ListNodes)},
      {"GET", absl::StrCat(node, "/assignments"), AdminOrAgent(), On(service, Assignments)},
      {"POST", absl::StrCat(node, "/bound"), AdminOrAgent(), On(service, ReportBound)},
  };
}

}  // namespace gpuslice::api
