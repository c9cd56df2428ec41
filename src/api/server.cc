#include "gpuslice/api/server.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/auth.h"
#include "api/http_message.h"
#include "api/http_server.h"
#include "api/replies.h"
#include "api/router.h"
#include "api/routes.h"
#include "gpuslice/alloc/usage.h"
#include "gpuslice/alloc/wire.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {
namespace {

using nlohmann::json;

json BoundJson(const std::vector<alloc::BoundDevice>& devices) {
  json bound = json::array();
  for (const alloc::BoundDevice& d : devices) {
    json device = {{"uuid", d.uuid}, {"gpu_uuid", d.gpu_uuid}, {"gpu_index", d.gpu_index}};
    if (d.gi >= 0) {
      device["gi"] = d.gi;
      device["ci"] = d.ci;
    }
    if (d.vram_mib > 0) device["vram_mib"] = d.vram_mib;
    if (d.share_milli > 0) device["share_milli"] = d.share_milli;
    bound.push_back(device);
  }
  return bound;
}

// A nested object: an object with only these fields.
absl::Status Only(const json& item, const std::set<std::string>& allowed, const char* where) {
  if (!item.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": an object"));
  for (const auto& [key, value] : item.items()) {
    if (!allowed.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown field '", key, "'"));
    }
  }
  return absl::OkStatus();
}

json LeaseJson(const alloc::Lease& lease) {
  const json bound = BoundJson(lease.bound);
  return {
      {"id", lease.id},
      {"tenant", lease.tenant},
      {"user", lease.user},
      {"class", lease.class_name},
      {"purpose", lease.purpose},
      {"node", lease.node},
      {"devices", lease.devices},
      {"memory_gib", lease.memory_gib},
      {"granted_at", lease.granted_at},
      {"expires_at", lease.expires_at},
      {"ended_at", lease.ended_at},
      {"state", lease.state},
      {"from_queue", lease.from_queue},
      {"bound", bound},
      // What a process needs, while the lease lasts.
      {"env", lease.state == "active" ? json(alloc::LeaseEnvironment(lease)) : json::object()},
      {"docker_args", lease.state == "active" ? json(alloc::DockerArgs(lease)) : json::array()}};
}

json UsageRowJson(const alloc::UsageRow& row) {
  json out = {{"key", row.key},
              {"tenant", row.tenant},
              {"class", row.class_name},
              {"purpose", row.purpose},
              {"leases", row.leases},
              {"samples", row.samples},
              {"first", row.first},
              {"last", row.last},
              {"memory_peak_mib", row.memory_peak_mib},
              {"memory_typical_mib", row.memory_typical_mib},
              {"processes_peak", row.processes_peak},
              {"concurrent_peak", row.concurrent_peak},
              {"gpu_model", row.gpu_model},
              {"profile", row.profile},
              {"share", row.share},
              {"slice_mib", row.slice_mib},
              {"peak_fraction", row.peak_fraction},
              {"workloads", row.workloads},
              {"oversized", row.oversized},
              {"too_small", row.too_small},
              {"idle", row.idle},
              {"suggested_profile", row.suggested_profile},
              {"kind", row.kind},
              {"explanation", row.explanation}};
  // Activity is absent when the devices never gave it (never a made-up zero).
  if (row.activity_peak_pct.has_value()) out["activity_peak_pct"] = *row.activity_peak_pct;
  if (row.activity_typical_pct.has_value()) {
    out["activity_typical_pct"] = *row.activity_typical_pct;
  }
  return out;
}

json QueueJson(const alloc::QueueEntry& q) {
  return {{"id", q.id},
          {"tenant", q.tenant},
          {"user", q.user},
          {"class", q.class_name},
          {"purpose", q.purpose},
          {"priority", q.priority},
          {"enqueued_at", q.enqueued_at},
          {"position", q.position},
          {"reason", q.reason}};
}

json ClassJson(const alloc::ClassSpec& c) {
  return {{"name", c.name},
          {"mig", c.mig},
          {"share_milli", c.share_milli},
          {"vram_mib", c.vram_mib},
          {"full", c.full},
          {"max_lease_s", c.max_lease_s},
          {"idle_timeout_s", c.idle_timeout_s}};
}

json TenantJson(const alloc::TenantSpec& t) {
  return {{"name", t.name},
          {"may_take_full", t.may_take_full},
          {"priority", t.priority},
          {"max_slices", t.max_slices},
          {"max_gib", t.max_gib}};
}

absl::StatusOr<std::int64_t> PathId(const http::Request& req) {
  std::int64_t id = 0;
  if (!absl::SimpleAtoi(req.matches[1].str(), &id) || id <= 0) {
    return absl::InvalidArgumentError("id: must be a positive integer");
  }
  return id;
}

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

}  // namespace

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
  Router& s = *router_;
  alloc::Service& service = service_;

  // Authenticates, then runs `handler(caller)`; any Status error becomes its HTTP code.
  RequestAuthenticator* authenticator = authenticator_.get();
  auto authed = [authenticator](auto handler) {
    return [authenticator, handler](const http::Request& req, http::Response& res) {
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
      handler(*caller, req, res);
    };
  };
  AddUserRoutes(s, service, authed);

  if (options_.metrics) {
    auto metrics = options_.metrics;
    s.Get("/metrics",
          authed([metrics](const alloc::Caller& caller, const http::Request&, http::Response& res) {
            if (caller.role != alloc::Role::kAdmin && caller.role != alloc::Role::kAgent) {
              return Fail(res,
                          absl::PermissionDeniedError("/metrics needs an admin or agent token"));
            }
            if (caller.role == alloc::Role::kAgent && caller.machine.empty()) {
              return Fail(res, absl::PermissionDeniedError(
                                   "this agent token is bound to no machine; make a new one "
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
          }));
  }

  s.Get("/v1/health", [&service](const http::Request&, http::Response& res) {
    int gpus = service.inventory().total_gpus();
    Reply(res, 200,
          {{"status", "ok"}, {"store", std::string(service.store_kind())}, {"gpus", gpus}});
  });

  s.Get("/v1/inventory",
        authed([&service](const alloc::Caller&, const http::Request&, http::Response& res) {
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
        }));

  s.Get("/v1/classes",
        authed([&service](const alloc::Caller&, const http::Request&, http::Response& res) {
          json out = json::array();
          for (const alloc::ClassSpec& c : service.Classes()) out.push_back(ClassJson(c));
          Reply(res, 200, {{"classes", out}});
        }));
  s.Put(R"(/v1/classes/([A-Za-z0-9._-]+))",
        authed(
            [&service](const alloc::Caller& caller, const http::Request& req, http::Response& res) {
              absl::StatusOr<json> body = Body(
                  req, {"mig", "share_milli", "vram_mib", "full", "max_lease_s", "idle_timeout_s"});
              if (!body.ok()) return Fail(res, body.status());
              alloc::ClassSpec spec;
              spec.name = req.matches[1].str();
              for (absl::Status st :
                   {Field(*body, "mig", &spec.mig), Field(*body, "share_milli", &spec.share_milli),
                    Field(*body, "vram_mib", &spec.vram_mib), Field(*body, "full", &spec.full),
                    Field(*body, "max_lease_s", &spec.max_lease_s),
                    Field(*body, "idle_timeout_s", &spec.idle_timeout_s)}) {
                if (!st.ok()) return Fail(res, st);
              }
              if (absl::Status st = service.PutClass(caller, spec); !st.ok()) return Fail(res, st);
              Reply(res, 200, ClassJson(spec));
            }));
  s.Delete(R"(/v1/classes/([A-Za-z0-9._-]+))",
           authed([&service](const alloc::Caller& caller, const http::Request& req,
                             http::Response& res) {
             if (absl::Status st = service.DeleteClass(caller, req.matches[1].str()); !st.ok()) {
               return Fail(res, st);
             }
             Reply(res, 200, {{"deleted", req.matches[1].str()}});
           }));

  s.Get("/v1/tenants",
        authed([&service](const alloc::Caller& caller, const http::Request&, http::Response& res) {
          absl::StatusOr<std::vector<alloc::TenantSpec>> tenants = service.Tenants(caller);
          if (!tenants.ok()) return Fail(res, tenants.status());
          json out = json::array();
          for (const alloc::TenantSpec& t : *tenants) out.push_back(TenantJson(t));
          Reply(res, 200, {{"tenants", out}});
        }));
  s.Put(R"(/v1/tenants/([A-Za-z0-9._-]+))",
        authed(
            [&service](const alloc::Caller& caller, const http::Request& req, http::Response& res) {
              absl::StatusOr<json> body =
                  Body(req, {"may_take_full", "priority", "max_slices", "max_gib"});
              if (!body.ok()) return Fail(res, body.status());
              alloc::TenantSpec tenant;
              tenant.name = req.matches[1].str();
              std::map<std::string, int> max_slices;
              for (absl::Status st : {Field(*body, "may_take_full", &tenant.may_take_full),
                                      Field(*body, "priority", &tenant.priority),
                                      Field(*body, "max_gib", &tenant.max_gib)}) {
                if (!st.ok()) return Fail(res, st);
              }
              if (auto it = body->find("max_slices"); it != body->end() && !it->is_null()) {
                if (!it->is_object()) {
                  return Fail(res, absl::InvalidArgumentError("max_slices: must be an object"));
                }
                for (const auto& [class_name, value] : it->items()) {
                  if (!value.is_number_integer()) {
                    return Fail(res, absl::InvalidArgumentError(absl::StrCat(
                                         "max_slices.", class_name, ": must be an integer")));
                  }
                  const auto max = value.get<std::int64_t>();
                  if (max < 0 || max > 100000) {
                    return Fail(res,
                                absl::InvalidArgumentError("max_slices: must be within 0..100000"));
                  }
                  tenant.max_slices[class_name] = static_cast<int>(max);
                }
              }
              if (absl::Status st = service.PutTenant(caller, tenant); !st.ok())
                return Fail(res, st);
              Reply(res, 200, TenantJson(tenant));
            }));
  s.Delete(R"(/v1/tenants/([A-Za-z0-9._-]+))",
           authed([&service](const alloc::Caller& caller, const http::Request& req,
                             http::Response& res) {
             if (absl::Status st = service.DeleteTenant(caller, req.matches[1].str()); !st.ok()) {
               return Fail(res, st);
             }
             Reply(res, 200, {{"deleted", req.matches[1].str()}});
           }));

  s.Post(
      "/v1/leases", authed([&service](const alloc::Caller& caller, const http::Request& req,
                                      http::Response& res) {
        absl::StatusOr<json> body =
            Body(req, {"class", "profile", "share_milli", "vram_mib", "purpose", "ttl_s", "wait"});
        if (!body.ok()) return Fail(res, body.status());
        alloc::AcquireRequest request;
        for (absl::Status st :
             {Field(*body, "class", &request.class_name), Field(*body, "profile", &request.profile),
              Field(*body, "share_milli", &request.share_milli),
              Field(*body, "vram_mib", &request.vram_mib),
              Field(*body, "purpose", &request.purpose), Field(*body, "ttl_s", &request.ttl_s),
              Field(*body, "wait", &request.wait)}) {
          if (!st.ok()) return Fail(res, st);
        }
        absl::StatusOr<alloc::AcquireResult> result = service.Acquire(caller, request);
        if (!result.ok()) return Fail(res, result.status());
        switch (result->outcome) {
          case alloc::AcquireResult::Outcome::kGranted:
            return Reply(res, 201, {{"outcome", "granted"}, {"lease", LeaseJson(result->lease)}});
          case alloc::AcquireResult::Outcome::kQueued:
            return Reply(res, 202,
                         {{"outcome", "queued"},
                          {"queued", QueueJson(result->queued)},
                          {"reason", result->reason}});
          case alloc::AcquireResult::Outcome::kRefused:
            return Reply(res, 409, {{"outcome", "refused"}, {"error", result->reason}});
        }
      }));
  s.Get("/v1/leases", authed([&service](const alloc::Caller& caller, const http::Request& req,
                                        http::Response& res) {
          const bool all = req.get_param_value("all") == "true";
          absl::StatusOr<std::vector<alloc::Lease>> leases = service.Leases(caller, !all);
          if (!leases.ok()) return Fail(res, leases.status());
          json out = json::array();
          for (const alloc::Lease& lease : *leases) out.push_back(LeaseJson(lease));
          Reply(res, 200, {{"leases", out}});
        }));
  s.Get(R"(/v1/leases/(\d+))", authed([&service](const alloc::Caller& caller,
                                                 const http::Request& req, http::Response& res) {
          absl::StatusOr<std::int64_t> id = PathId(req);
          if (!id.ok()) return Fail(res, id.status());
          absl::StatusOr<alloc::Lease> lease = service.GetLease(caller, *id);
          if (!lease.ok()) return Fail(res, lease.status());
          Reply(res, 200, LeaseJson(*lease));
        }));
  s.Post(R"(/v1/leases/(\d+)/renew)",
         authed([&service](const alloc::Caller& caller, const http::Request& req,
                           http::Response& res) {
           absl::StatusOr<std::int64_t> id = PathId(req);
           if (!id.ok()) return Fail(res, id.status());
           absl::StatusOr<json> body = Body(req, {"ttl_s"});
           if (!body.ok()) return Fail(res, body.status());
           std::int64_t ttl = 0;
           if (absl::Status st = Field(*body, "ttl_s", &ttl); !st.ok()) return Fail(res, st);
           absl::StatusOr<alloc::Lease> lease = service.Renew(caller, *id, ttl);
           if (!lease.ok()) return Fail(res, lease.status());
           Reply(res, 200, LeaseJson(*lease));
         }));
  s.Delete(R"(/v1/leases/(\d+))", authed([&service](const alloc::Caller& caller,
                                                    const http::Request& req, http::Response& res) {
             absl::StatusOr<std::int64_t> id = PathId(req);
             if (!id.ok()) return Fail(res, id.status());
             if (absl::Status st = service.Release(caller, *id); !st.ok()) return Fail(res, st);
             Reply(res, 200, {{"released", *id}});
           }));

  s.Get("/v1/queue",
        authed([&service](const alloc::Caller& caller, const http::Request&, http::Response& res) {
          absl::StatusOr<std::vector<alloc::QueueEntry>> queue = service.Queue(caller);
          if (!queue.ok()) return Fail(res, queue.status());
          json out = json::array();
          for (const alloc::QueueEntry& q : *queue) out.push_back(QueueJson(q));
          Reply(res, 200, {{"queue", out}});
        }));
  s.Delete(R"(/v1/queue/(\d+))", authed([&service](const alloc::Caller& caller,
                                                   const http::Request& req, http::Response& res) {
             absl::StatusOr<std::int64_t> id = PathId(req);
             if (!id.ok()) return Fail(res, id.status());
             if (absl::Status st = service.CancelQueued(caller, *id); !st.ok()) {
               return Fail(res, st);
             }
             Reply(res, 200, {{"cancelled", *id}});
           }));

  // ---- agents: machines report their GPUs, fetch the leases to set up, report their devices
  s.Put(
      R"(/v1/nodes/([A-Za-z0-9._-]+))",
      authed([&service](const alloc::Caller& caller, const http::Request& req,
                        http::Response& res) {
        absl::StatusOr<json> body = Body(req, {"cpu_milli", "memory_mib", "gpus"});
        if (!body.ok()) return Fail(res, body.status());
        alloc::NodeReport report;
        report.host = req.matches[1].str();
        for (absl::Status st : {Field(*body, "cpu_milli", &report.cpu_milli),
                                Field(*body, "memory_mib", &report.memory_mib)}) {
          if (!st.ok()) return Fail(res, st);
        }
        auto gpus = body->find("gpus");
        if (gpus == body->end() || !gpus->is_array()) {
          return Fail(res, absl::InvalidArgumentError("gpus: must be an array"));
        }
        for (const json& item : *gpus) {
          if (absl::Status st = Only(item, {"index", "uuid", "model", "mig"}, "gpus[]"); !st.ok()) {
            return Fail(res, st);
          }
          alloc::NodeReport::Gpu gpu;
          for (absl::Status st : {Field(item, "index", &gpu.index), Field(item, "uuid", &gpu.uuid),
                                  Field(item, "model", &gpu.model), Field(item, "mig", &gpu.mig)}) {
            if (!st.ok()) return Fail(res, st);
          }
          report.gpus.push_back(gpu);
        }
        if (absl::Status st = service.ReportNode(caller, report); !st.ok()) return Fail(res, st);
        const place::Cluster cluster = service.Occupancy();
        json nodes = json::array();
        for (int n = 0; n < cluster.node_count(); ++n) {
          const std::string& name = cluster.spec(n).name;
          if (name.rfind(report.host + "/", 0) == 0) nodes.push_back(name);
        }
        Reply(res, 200, {{"host", report.host}, {"nodes", nodes}});
      }));
  s.Get("/v1/nodes",
        authed([&service](const alloc::Caller& caller, const http::Request&, http::Response& res) {
          absl::StatusOr<std::vector<alloc::NodeReport>> nodes = service.Nodes(caller);
          if (!nodes.ok()) return Fail(res, nodes.status());
          json out = json::array();
          for (const alloc::NodeReport& n : *nodes) {
            json gpus = json::array();
            for (const alloc::NodeReport::Gpu& g : n.gpus) {
              gpus.push_back(
                  {{"index", g.index}, {"uuid", g.uuid}, {"model", g.model}, {"mig", g.mig}});
            }
            absl::StatusOr<std::optional<alloc::NodeLayout>> layout =
                service.GetLayout(caller, n.host);
            out.push_back(
                {{"host", n.host},
                 {"cpu_milli", n.cpu_milli},
                 {"memory_mib", n.memory_mib},
                 {"gpus", gpus},
                 {"seen_at", n.seen_at},
                 {"layout",
                  layout.ok() && layout->has_value() ? alloc::LayoutToJson(**layout) : json()}});
          }
          Reply(res, 200, {{"nodes", out}});
        }));
  s.Get(R"(/v1/nodes/([A-Za-z0-9._-]+)/assignments)",
        authed(
            [&service](const alloc::Caller& caller, const http::Request& req, http::Response& res) {
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
            }));
  s.Post(
      R"(/v1/nodes/([A-Za-z0-9._-]+)/bound)",
      authed([&service](const alloc::Caller& caller, const http::Request& req,
                        http::Response& res) {
        absl::StatusOr<json> body = Body(req, {"leases"});
        if (!body.ok()) return Fail(res, body.status());
        auto leases = body->find("leases");
        if (leases == body->end() || !leases->is_object()) {
          return Fail(res, absl::InvalidArgumentError(
                               "leases: an object of lease id to a list of devices"));
        }
        std::map<std::int64_t, std::vector<alloc::BoundDevice>> bound;
        for (const auto& [key, devices] : leases->items()) {
          std::int64_t id = 0;
          if (!absl::SimpleAtoi(key, &id) || id <= 0 || !devices.is_array()) {
            return Fail(res, absl::InvalidArgumentError(absl::StrCat(
                                 "leases.", key, ": a lease id mapping to a list of devices")));
          }
          for (const json& item : devices) {
            if (absl::Status st = Only(
                    item, {"uuid", "gpu_uuid", "gpu_index", "gi", "ci", "vram_mib", "share_milli"},
                    "leases[]");
                !st.ok()) {
              return Fail(res, st);
            }
            alloc::BoundDevice d;
            for (absl::Status st :
                 {Field(item, "uuid", &d.uuid), Field(item, "gpu_uuid", &d.gpu_uuid),
                  Field(item, "gpu_index", &d.gpu_index), Field(item, "gi", &d.gi),
                  Field(item, "ci", &d.ci), Field(item, "vram_mib", &d.vram_mib),
                  Field(item, "share_milli", &d.share_milli)}) {
              if (!st.ok()) return Fail(res, st);
            }
            bound[id].push_back(d);
          }
        }
        absl::StatusOr<std::vector<std::int64_t>> ignored =
            service.ReportBound(caller, req.matches[1].str(), bound);
        if (!ignored.ok()) return Fail(res, ignored.status());
        Reply(res, 200, {{"ignored", *ignored}});
      }));

  // Each lease: idle_s (the idle reclaim's figure, valid for valid_s) and/or its usage figures
  // (memory_used_mib with optional memory_total_mib, sm_active_pct, processes) for the history.
  s.Post(
      R"(/v1/nodes/([A-Za-z0-9._-]+)/usage)",
      authed([&service](const alloc::Caller& caller, const http::Request& req,
                        http::Response& res) {
        absl::StatusOr<json> body = Body(req, {"leases", "valid_s"});
        if (!body.ok()) return Fail(res, body.status());
        std::int64_t valid_s = 0;
        if (absl::Status st = Field(*body, "valid_s", &valid_s); !st.ok()) return Fail(res, st);
        auto leases = body->find("leases");
        if (leases == body->end() || !leases->is_object()) {
          return Fail(res, absl::InvalidArgumentError(
                               "leases: an object of lease id to {\"idle_s\": seconds, "
                               "\"memory_used_mib\": MiB, ...}"));
        }
        std::map<std::int64_t, std::int64_t> idle;
        std::map<std::int64_t, alloc::UsageFigures> figures;
        for (const auto& [key, usage] : leases->items()) {
          std::int64_t id = 0;
          if (!absl::SimpleAtoi(key, &id) || id <= 0 || !usage.is_object()) {
            return Fail(res, absl::InvalidArgumentError(absl::StrCat(
                                 "leases.", key, ": a lease id mapping to {\"idle_s\": n}")));
          }
          if (absl::Status st = Only(
                  usage,
                  {"idle_s", "memory_used_mib", "memory_total_mib", "sm_active_pct", "processes"},
                  "leases[]");
              !st.ok()) {
            return Fail(res, st);
          }
          const bool has_figures = usage.contains("memory_used_mib");
          if (!has_figures && (usage.contains("memory_total_mib") ||
                               usage.contains("sm_active_pct") || usage.contains("processes"))) {
            return Fail(res, absl::InvalidArgumentError(
                                 absl::StrCat("leases.", key,
                                              ": memory_used_mib is required with the other "
                                              "usage figures")));
          }
          if (usage.contains("idle_s") || !has_figures) {
            std::int64_t seconds = -1;
            if (absl::Status st = Field(usage, "idle_s", &seconds); !st.ok()) {
              return Fail(res, st);
            }
            idle[id] = seconds;
          }
          if (!has_figures) continue;
          alloc::UsageFigures f;
          double activity = 0;
          for (absl::Status st : {Field(usage, "memory_used_mib", &f.memory_used_mib),
                                  Field(usage, "memory_total_mib", &f.memory_total_mib),
                                  Field(usage, "sm_active_pct", &activity),
                                  Field(usage, "processes", &f.processes)}) {
            if (!st.ok()) return Fail(res, st);
          }
          if (usage.contains("sm_active_pct") && !usage["sm_active_pct"].is_null()) {
            f.sm_active_pct = activity;
          }
          if (absl::Status st = alloc::ValidateUsageFigures(f); !st.ok()) {
            return Fail(
                res, absl::InvalidArgumentError(absl::StrCat("leases.", key, ".", st.message())));
          }
          figures[id] = f;
        }
        std::set<std::int64_t> ignored;
        if (!idle.empty() || figures.empty()) {
          absl::StatusOr<std::vector<std::int64_t>> not_here =
              service.ReportUsage(caller, req.matches[1].str(), idle, valid_s);
          if (!not_here.ok()) return Fail(res, not_here.status());
          ignored.insert(not_here->begin(), not_here->end());
        }
        if (!figures.empty()) {
          absl::StatusOr<std::vector<std::int64_t>> not_here =
              service.RecordUsage(caller, req.matches[1].str(), figures);
          if (!not_here.ok()) return Fail(res, not_here.status());
          ignored.insert(not_here->begin(), not_here->end());
        }
        Reply(res, 200, {{"ignored", ignored}});
      }));
  // The usage history's report (admin: every tenant; a tenant's user: its own).
  s.Get("/v1/usage", authed([&service](const alloc::Caller& caller, const http::Request& req,
                                       http::Response& res) {
          std::int64_t since_s = 7 * 86400;
          if (req.has_param("since") && !absl::SimpleAtoi(req.get_param_value("since"), &since_s)) {
            return Fail(res, absl::InvalidArgumentError("since: seconds (e.g. 604800 for 7 days)"));
          }
          alloc::UsageGroupBy by = alloc::UsageGroupBy::kWorkload;
          if (req.has_param("by")) {
            std::optional<alloc::UsageGroupBy> parsed =
                alloc::ParseUsageGroupBy(req.get_param_value("by"));
            if (!parsed.has_value()) {
              return Fail(res, absl::InvalidArgumentError("by: workload, tenant or class"));
            }
            by = *parsed;
          }
          absl::StatusOr<alloc::UsageReport> report = service.UsageReport(caller, since_s, by);
          if (!report.ok()) return Fail(res, report.status());
          json rows = json::array();
          for (const alloc::UsageRow& row : report->rows) rows.push_back(UsageRowJson(row));
          Reply(res, 200,
                {{"since", report->since},
                 {"until", report->until},
                 {"by", std::string(alloc::ToString(report->by))},
                 {"rows", rows},
                 {"plan_yaml", alloc::PlanWorkloadsYaml(*report)}});
        }));

  // ---- layouts: an admin fixes a machine's MIG layout; its agent carries it out
  s.Put(R"(/v1/nodes/([A-Za-z0-9._-]+)/layout)",
        authed([&service](const alloc::Caller& caller, const http::Request& req,
                          http::Response& res) {
          absl::StatusOr<json> body = Body(req, {"config", "name", "origin"});
          if (!body.ok()) return Fail(res, body.status());
          alloc::LayoutRequest request;
          for (absl::Status st : {Field(*body, "config", &request.config_text),
                                  Field(*body, "name", &request.config_name),
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
        }));
  s.Get(
      R"(/v1/nodes/([A-Za-z0-9._-]+)/layout)",
      authed([&service](const alloc::Caller& caller, const http::Request& req,
                        http::Response& res) {
        absl::StatusOr<std::optional<alloc::NodeLayout>> layout =
            service.GetLayout(caller, req.matches[1].str());
        if (!layout.ok()) return Fail(res, layout.status());
        Reply(res, 200, {{"layout", layout->has_value() ? alloc::LayoutToJson(**layout) : json()}});
      }));
  s.Delete(R"(/v1/nodes/([A-Za-z0-9._-]+)/layout)",
           authed([&service](const alloc::Caller& caller, const http::Request& req,
                             http::Response& res) {
             absl::StatusOr<alloc::LayoutOutcome> outcome =
                 service.ClearLayout(caller, req.matches[1].str());
             if (!outcome.ok()) return Fail(res, outcome.status());
             LayoutReply(res, *outcome,
                         "leases stand in the way of clearing the layout; nothing was changed");
           }));
  s.Post(R"(/v1/nodes/([A-Za-z0-9._-]+)/layout/status)",
         authed([&service](const alloc::Caller& caller, const http::Request& req,
                           http::Response& res) {
           absl::StatusOr<json> body = Body(req, {"generation", "message"});
           if (!body.ok()) return Fail(res, body.status());
           std::int64_t generation = 0;
           std::string message;
           for (absl::Status st :
                {Field(*body, "generation", &generation), Field(*body, "message", &message)}) {
             if (!st.ok()) return Fail(res, st);
           }
           if (absl::Status st =
                   service.ReportLayout(caller, req.matches[1].str(), generation, message);
               !st.ok()) {
             return Fail(res, st);
           }
           Reply(res, 200, {{"generation", generation}});
         }));
  s.Get("/v1/audit", authed([&service](const alloc::Caller& caller, const http::Request& req,
                                       http::Response& res) {
          alloc::AuditQuery query;
          query.tenant = req.get_param_value("tenant");
          if (req.has_param("since") &&
              !absl::SimpleAtoi(req.get_param_value("since"), &query.since)) {
            return Fail(res, absl::InvalidArgumentError("since: epoch seconds"));
          }
          if (req.has_param("limit") &&
              !absl::SimpleAtoi(req.get_param_value("limit"), &query.limit)) {
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
        }));
  s.Post(R"(/v1/nodes/([A-Za-z0-9._-]+)/alerts)",
         authed([&service](const alloc::Caller& caller, const http::Request& req,
                           http::Response& res) {
           absl::StatusOr<json> body = Body(req, {"fired", "cleared"});
           if (!body.ok()) return Fail(res, body.status());
           metrics::AlertChanges changes;
           for (const char* list : {"fired", "cleared"}) {
             if (!body->contains(list)) continue;
             const json& items = (*body)[list];
             if (!items.is_array()) {
               return Fail(res, absl::InvalidArgumentError(absl::StrCat(list, ": an array")));
             }
             for (const json& item : items) {
               absl::StatusOr<metrics::Alert> alert = metrics::AlertFromJson(item);
               if (!alert.ok()) {
                 return Fail(res, absl::InvalidArgumentError(
                                      absl::StrCat(list, "[]: ", alert.status().message())));
               }
               (std::string(list) == "fired" ? changes.fired : changes.cleared)
                   .push_back(*std::move(alert));
             }
           }
           if (absl::Status st = service.ReportAlerts(caller, req.matches[1].str(), changes);
               !st.ok()) {
             return Fail(res, st);
           }
           Reply(res, 200, {{"fired", changes.fired.size()}, {"cleared", changes.cleared.size()}});
         }));
  s.Get("/v1/alerts",
        authed([&service](const alloc::Caller& caller, const http::Request&, http::Response& res) {
          absl::StatusOr<alloc::Service::AlertList> list = service.Alerts(caller);
          if (!list.ok()) return Fail(res, list.status());
          json active = json::array();
          json recent = json::array();
          for (const metrics::Alert& a : list->active) active.push_back(metrics::AlertToJson(a));
          for (const metrics::Alert& a : list->recent) recent.push_back(metrics::AlertToJson(a));
          Reply(res, 200, {{"active", active}, {"recent", recent}});
        }));
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
