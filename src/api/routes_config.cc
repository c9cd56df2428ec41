// The admin's configuration: slice classes and tenants, read by anyone, changed by an admin
// (gpuslice/api/server.h).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/replies.h"
#include "api/routes.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {
namespace {

using nlohmann::json;

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

void ListClasses(alloc::Service& service, const alloc::Caller&, const http::Request&,
                 http::Response& res) {
  json out = json::array();
  for (const alloc::ClassSpec& c : service.Classes()) out.push_back(ClassJson(c));
  Reply(res, 200, {{"classes", out}});
}

void PutClass(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
              http::Response& res) {
  absl::StatusOr<json> body =
      Body(req, {"mig", "share_milli", "vram_mib", "full", "max_lease_s", "idle_timeout_s"});
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
}

void DeleteClass(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                 http::Response& res) {
  if (absl::Status st = service.DeleteClass(caller, req.matches[1].str()); !st.ok()) {
    return Fail(res, st);
  }
  Reply(res, 200, {{"deleted", req.matches[1].str()}});
}

void ListTenants(alloc::Service& service, const alloc::Caller& caller, const http::Request&,
                 http::Response& res) {
  absl::StatusOr<std::vector<alloc::TenantSpec>> tenants = service.Tenants(caller);
  if (!tenants.ok()) return Fail(res, tenants.status());
  json out = json::array();
  for (const alloc::TenantSpec& t : *tenants) out.push_back(TenantJson(t));
  Reply(res, 200, {{"tenants", out}});
}

// A tenant's `max_slices`: class name to a count within 0..100000.
absl::Status ReadMaxSlices(const json& body, alloc::TenantSpec* tenant) {
  auto it = body.find("max_slices");
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) return absl::InvalidArgumentError("max_slices: must be an object");
  for (const auto& [class_name, value] : it->items()) {
    if (!value.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_slices.", class_name, ": must be an integer"));
    }
    const auto max = value.get<std::int64_t>();
    if (max < 0 || max > 100000) {
      return absl::InvalidArgumentError("max_slices: must be within 0..100000");
    }
    tenant->max_slices[class_name] = static_cast<int>(max);
  }
  return absl::OkStatus();
}

void PutTenant(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
               http::Response& res) {
  absl::StatusOr<json> body = Body(req, {"may_take_full", "priority", "max_slices", "max_gib"});
  if (!body.ok()) return Fail(res, body.status());
  alloc::TenantSpec tenant;
  tenant.name = req.matches[1].str();
  for (absl::Status st :
       {Field(*body, "may_take_full", &tenant.may_take_full),
        Field(*body, "priority", &tenant.priority), Field(*body, "max_gib", &tenant.max_gib),
        ReadMaxSlices(*body, &tenant)}) {
    if (!st.ok()) return Fail(res, st);
  }
  if (absl::Status st = service.PutTenant(caller, tenant); !st.ok()) return Fail(res, st);
  Reply(res, 200, TenantJson(tenant));
}

void DeleteTenant(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                  http::Response& res) {
  if (absl::Status st = service.DeleteTenant(caller, req.matches[1].str()); !st.ok()) {
    return Fail(res, st);
  }
  Reply(res, 200, {{"deleted", req.matches[1].str()}});
}

}  // namespace

std::vector<Route> ConfigRoutes(alloc::Service& service) {
  const std::string one_class = absl::StrCat("/v1/classes/", kNamePattern);
  const std::string tenant = absl::StrCat("/v1/tenants/", kNamePattern);
  return {
      {"GET", "/v1/classes", AnyRole(), On(service, ListClasses)},
      {"PUT", one_class, AdminOnly(), On(service, PutClass)},
      {"DELETE", one_class, AdminOnly(), On(service, DeleteClass)},
      // Admins see every tenant, a tenant's user its own (alloc::Service::Tenants).
      {"GET", "/v1/tenants", AnyRole(), On(service, ListTenants)},
      {"PUT", tenant, AdminOnly(), On(service, PutTenant)},
      {"DELETE", tenant, AdminOnly(), On(service, DeleteTenant)},
  };
}

}  // namespace gpuslice::api
