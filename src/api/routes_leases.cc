// Leases and the queue: a tenant's user acquires, renews and releases; everyone sees what its
// role may see, another tenant's lease or queue entry answering 404 (gpuslice/api/server.h).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/replies.h"
#include "api/routes.h"
#include "gpuslice/alloc/wire.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {

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

namespace {

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

absl::StatusOr<std::int64_t> PathId(const http::Request& req) {
  std::int64_t id = 0;
  if (!absl::SimpleAtoi(req.matches[1].str(), &id) || id <= 0) {
    return absl::InvalidArgumentError("id: must be a positive integer");
  }
  return id;
}

void Acquire(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
             http::Response& res) {
  absl::StatusOr<json> body =
      Body(req, {"class", "profile", "share_milli", "vram_mib", "purpose", "ttl_s", "wait"});
  if (!body.ok()) return Fail(res, body.status());
  alloc::AcquireRequest request;
  for (absl::Status st :
       {Field(*body, "class", &request.class_name), Field(*body, "profile", &request.profile),
        Field(*body, "share_milli", &request.share_milli),
        Field(*body, "vram_mib", &request.vram_mib), Field(*body, "purpose", &request.purpose),
        Field(*body, "ttl_s", &request.ttl_s), Field(*body, "wait", &request.wait)}) {
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
}

void ListLeases(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                http::Response& res) {
  const bool all = req.get_param_value("all") == "true";
  absl::StatusOr<std::vector<alloc::Lease>> leases = service.Leases(caller, !all);
  if (!leases.ok()) return Fail(res, leases.status());
  json out = json::array();
  for (const alloc::Lease& lease : *leases) out.push_back(LeaseJson(lease));
  Reply(res, 200, {{"leases", out}});
}

void GetLease(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
              http::Response& res) {
  absl::StatusOr<std::int64_t> id = PathId(req);
  if (!id.ok()) return Fail(res, id.status());
  absl::StatusOr<alloc::Lease> lease = service.GetLease(caller, *id);
  if (!lease.ok()) return Fail(res, lease.status());
  Reply(res, 200, LeaseJson(*lease));
}

void Renew(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
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
}

void Release(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
             http::Response& res) {
  absl::StatusOr<std::int64_t> id = PathId(req);
  if (!id.ok()) return Fail(res, id.status());
  if (absl::Status st = service.Release(caller, *id); !st.ok()) return Fail(res, st);
  Reply(res, 200, {{"released", *id}});
}

void ListQueue(alloc::Service& service, const alloc::Caller& caller, const http::Request&,
               http::Response& res) {
  absl::StatusOr<std::vector<alloc::QueueEntry>> queue = service.Queue(caller);
  if (!queue.ok()) return Fail(res, queue.status());
  json out = json::array();
  for (const alloc::QueueEntry& q : *queue) out.push_back(QueueJson(q));
  Reply(res, 200, {{"queue", out}});
}

void CancelQueued(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                  http::Response& res) {
  absl::StatusOr<std::int64_t> id = PathId(req);
  if (!id.ok()) return Fail(res, id.status());
  if (absl::Status st = service.CancelQueued(caller, *id); !st.ok()) return Fail(res, st);
  Reply(res, 200, {{"cancelled", *id}});
}

}  // namespace

// Tenants see and change only their own tenant's leases and queue entries, admins all of them
// (alloc::Service); agents see none.
std::vector<Route> LeaseRoutes(alloc::Service& service) {
  const std::string lease = absl::StrCat("/v1/leases/", kIdPattern);
  return {
      {"POST", "/v1/leases", TenantOnly("admins hold no leases; acquire as a tenant's user"),
       On(service, Acquire)},
      {"GET", "/v1/leases", AnyRole(), On(service, ListLeases)},
      {"GET", lease, AnyRole(), On(service, GetLease)},
      {"POST", absl::StrCat(lease, "/renew"), AnyRole(), On(service, Renew)},
      {"DELETE", lease, AnyRole(), On(service, Release)},
      {"GET", "/v1/queue", AnyRole(), On(service, ListQueue)},
      {"DELETE", absl::StrCat("/v1/queue/", kIdPattern), AnyRole(), On(service, CancelQueued)},
  };
}

}  // namespace gpuslice::api
