// The cluster as a whole: health (no authentication), the inventory with what is allocated on
// it, and the Prometheus scrape (gpuslice/api/server.h).
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "api/replies.h"
#include "api/routes.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {
namespace {

using nlohmann::json;

void Health(alloc::Service& service, const alloc::Caller&, const http::Request&,
            http::Response& res) {
  int gpus = service.inventory().total_gpus();
  Reply(res, 200, {{"status", "ok"}, {"store", std::string(service.store_kind())}, {"gpus", gpus}});
}

void Inventory(alloc::Service& service, const alloc::Caller&, const http::Request&,
               http::Response& res) {
  const place::Cluster cluster = service.Occupancy();
  json nodes = json::array();
  for (int n = 0; n < cluster.node_count(); ++n) {
    const place::NodeSpec& spec = cluster.spec(n);
    json gpus = json::array();
    for (int g = 0; g < spec.gpus; ++g) {
      gpus.push_back({{"index", g},
                      {"free_milli", cluster.FreeMilli(n, g)},
                      {"fully_free", cluster.GpuFullyFree(n, g)}});
    }
    nodes.push_back({{"name", spec.name},
                     {"model", spec.model},
                     {"mode", std::string(place::ToString(spec.mode))},
                     {"cpu_milli", spec.cpu_milli},
                     {"memory_mib", spec.memory_mib},
                     {"gpus", gpus}});
  }
  Reply(res, 200, {{"nodes", nodes}});
}

// An admin reads every family; an agent only its own machine's samples.
void Metrics(const decltype(ServerOptions::metrics)& metrics, const alloc::Caller& caller,
             http::Response& res) {
  if (caller.role == alloc::Role::kAgent && caller.machine.empty()) {
    return Fail(
        res, absl::PermissionDeniedError("this agent token is bound to no machine; make a new one "
                                         "with `gpuslice admin user NAME --agent --machine HOST`"));
  }
  absl::StatusOr<std::vector<metrics::Family>> families = metrics();
  if (!families.ok()) return Fail(res, families.status());
  if (caller.role == alloc::Role::kAgent) {
    *families = metrics::OnlyLabelled(*std::move(families), "Hostname", caller.machine);
  }
  absl::StatusOr<std::string> text = metrics::Write(*families);
  if (!text.ok()) return Fail(res, text.status());
  res.status = 200;
  res.set_content(*text, "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace

std::vector<Route> ClusterRoutes(alloc::Service& service, const ServerOptions& options) {
  std::vector<Route> routes;
  if (options.metrics) {
    routes.push_back(
        {"GET", "/metrics", AdminOrAgent("/metrics needs an admin or agent token"),
         [metrics = options.metrics](const alloc::Caller& caller, const http::Request&,
                                     http::Response& res) { Metrics(metrics, caller, res); }});
  }
  routes.push_back({"GET", "/v1/health", NoAuthentication(), On(service, Health)});
  routes.push_back({"GET", "/v1/inventory", AnyRole(), On(service, Inventory)});
  return routes;
}

}  // namespace gpuslice::api
