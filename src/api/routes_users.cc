// The API's users and tokens: create, list, revoke, rotate (gpuslice/api/server.h).
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/replies.h"
#include "api/routes.h"
#include "gpuslice/util/clock.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {
namespace {

using nlohmann::json;

json UserJson(const alloc::UserInfo& user, std::int64_t now) {
  json out = {{"name", user.name},
              {"role", alloc::RoleName(user.role)},
              {"created_at", user.created_at},
              {"token_issued_at", user.token_issued_at},
              {"expires_at", user.expires_at},
              {"expired", user.expires_at != 0 && user.expires_at <= now}};
  if (!user.tenant.empty()) out["tenant"] = user.tenant;
  if (!user.machine.empty()) out["machine"] = user.machine;
  return out;
}

void CreateUser(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                http::Response& res) {
  absl::StatusOr<json> body = Body(req, {"name", "tenant", "role", "machine", "expires_in_s"});
  if (!body.ok()) return Fail(res, body.status());
  std::string name;
  std::string tenant;
  std::string role = "tenant";
  std::string machine;
  std::int64_t expires_in_s = 0;
  for (absl::Status st :
       {Field(*body, "name", &name), Field(*body, "tenant", &tenant), Field(*body, "role", &role),
        Field(*body, "machine", &machine), Field(*body, "expires_in_s", &expires_in_s)}) {
    if (!st.ok()) return Fail(res, st);
  }
  if (role != "tenant" && role != "admin" && role != "agent") {
    return Fail(res, absl::InvalidArgumentError("role: 'tenant', 'admin' or 'agent'"));
  }
  absl::StatusOr<std::string> token =
      service.CreateUser(caller, name, tenant, alloc::RoleFromName(role), machine, expires_in_s);
  if (!token.ok()) return Fail(res, token.status());
  json out = {{"name", name}, {"tenant", tenant}, {"role", role}, {"token", *token}};
  if (!machine.empty()) out["machine"] = machine;
  Reply(res, 201, out);
}

void RotateToken(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                 http::Response& res) {
  absl::StatusOr<json> body = Body(req, {"expires_in_s"});
  if (!body.ok()) return Fail(res, body.status());
  std::optional<std::int64_t> expires_in_s;
  if (body->contains("expires_in_s") && !(*body)["expires_in_s"].is_null()) {
    std::int64_t value = 0;
    if (absl::Status st = Field(*body, "expires_in_s", &value); !st.ok()) return Fail(res, st);
    expires_in_s = value;
  }
  const std::string name = req.matches[1].str();
  absl::StatusOr<std::string> token = service.RotateToken(caller, name, expires_in_s);
  if (!token.ok()) return Fail(res, token.status());
  absl::StatusOr<std::vector<alloc::UserInfo>> users = service.Users(caller);
  json out = {{"name", name}, {"token", *token}};
  if (users.ok()) {
    for (const alloc::UserInfo& user : *users) {
      if (user.name == name) out["expires_at"] = user.expires_at;
    }
  }
  Reply(res, 200, out);
}

void ListUsers(alloc::Service& service, const alloc::Caller& caller, const http::Request&,
               http::Response& res) {
  absl::StatusOr<std::vector<alloc::UserInfo>> users = service.Users(caller);
  if (!users.ok()) return Fail(res, users.status());
  json out = json::array();
  const std::int64_t now = util::EpochNow();
  for (const alloc::UserInfo& user : *users) out.push_back(UserJson(user, now));
  Reply(res, 200, {{"users", out}});
}

void RevokeUser(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                http::Response& res) {
  if (absl::Status st = service.RevokeUser(caller, req.matches[1].str()); !st.ok()) {
    return Fail(res, st);
  }
  Reply(res, 200, {{"revoked", req.matches[1].str()}});
}

}  // namespace

std::vector<Route> UserRoutes(alloc::Service& service) {
  const std::string user = absl::StrCat("/v1/users/", kUserPattern);
  return {
      {"POST", "/v1/users", AdminOnly(), On(service, CreateUser)},
      {"GET", "/v1/users", AnyRole(), On(service, ListUsers)},
      {"DELETE", user, AdminOnly(), On(service, RevokeUser)},
      // Admins rotate anyone's token, others only their own (alloc::Service::RotateToken).
      {"POST", absl::StrCat(user, "/rotate"), AnyRole(), On(service, RotateToken)},
  };
}

}  // namespace gpuslice::api
