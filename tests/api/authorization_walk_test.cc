// The authorization walk (issue 22): every operation of docs/api/openapi.yaml, called as five
// identities — no one, a user of another tenant, the agent of another machine, the agent of the
// machine named in the path, and an admin — with the status each must get. The table below is
// the test's own statement of who may do what (docs/SECURITY.md prints it); the test fails when
// an operation of the OpenAPI file has no row, or a row names an operation the file lacks.
// The API's route table (src/api/routes.h) is held to both: its routes are the OpenAPI file's
// operations, and every identity whose role a route does not allow is walked as refused (403).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "alloc/alloc_test_util.h"
#include "api/api_fixture.h"
#include "api/routes.h"
#include "nlohmann/json.hpp"
#include "place/place_test_util.h"

namespace gpuslice::api {
namespace {

using alloc::testing::GpuUuid;
using alloc::testing::MigA100;
using nlohmann::json;
using testing::Reply;

enum Who { kNoOne, kOtherTenant, kOtherAgent, kOwnAgent, kAdmin };
const char* const kWho[] = {"no one", "another tenant's user", "another machine's agent",
                            "this machine's agent", "admin"};

json Report() {
  return json{
      {"cpu_milli", 64000},
      {"memory_mib", 512000},
      {"gpus",
       json::array({json{
           {"index", 0}, {"uuid", GpuUuid("r1", 0)}, {"model", "H100-80GB"}, {"mig", true}}})}};
}

struct Row {
  std::string operation;              // "METHOD /path/{template}" as in the OpenAPI file
  std::function<std::string()> path;  // the concrete path (made fresh for each identity)
  json body;                          // null: none
  std::array<int, 5> expected;        // by Who
};

class AuthorizationWalk : public testing::ApiFixture {
 protected:
  void SetUp() override {
    metrics_ = []() -> absl::StatusOr<std::vector<metrics::Family>> {
      metrics::Family walk;
      walk.name = "walk";
      walk.help = "One sample.";
      walk.samples.push_back({{}, 1});
      return std::vector<metrics::Family>{walk};
    };
    ASSERT_NO_FATAL_FAILURE(Start(place::testing::MakeCluster({MigA100("vm", 1)})));
    ASSERT_EQ(Call("PUT", "/v1/tenants/team-b", admin_, json::object()).status, 200);
    other_tenant_ = User("bob", "team-b", "tenant");
    other_agent_ = User("agent-r2", "", "agent", "r2");
    ASSERT_EQ(Call("PUT", "/v1/nodes/r1", agent_, Report()).status, 200);
    for (const auto& [name, profile] : {std::pair{"nb", "1g.10gb"}, std::pair{"big", "7g.80gb"}}) {
      ASSERT_EQ(Call("PUT", absl::StrCat("/v1/classes/", name), admin_,
                     json{{"mig", {{"H100-80GB", profile}}}})
                    .status,
                200);
    }
  }

  // A lease of ann's (team-a) on r1, and a request of hers that waits in the queue (a whole
  // 7g.80gb, which her lease keeps from fitting); each made once, for every identity to try.
  std::string AnnsLease() {
    if (lease_.empty()) {
      Reply r = Call("POST", "/v1/leases", tenant_,
                     json{{"class", "nb"}, {"purpose", "walk"}, {"wait", false}});
      EXPECT_EQ(r.status, 201) << r.text;
      lease_ = std::to_string(r.body["lease"].value("id", 0));
    }
    return lease_;
  }
  std::string AnnsQueued() {
    if (queued_.empty()) {
      AnnsLease();
      Reply r = Call("POST", "/v1/leases", tenant_,
                     json{{"class", "big"}, {"purpose", "walk"}, {"wait", true}});
      EXPECT_EQ(r.status, 202) << r.text;
      queued_ = std::to_string(r.body["queued"].value("id", 0));
    }
    return queued_;
  }
  std::string lease_;
  std::string queued_;

  std::string Token(Who who) const {
    switch (who) {
      case kNoOne:
        return "";
      case kOtherTenant:
        return other_tenant_;
      case kOtherAgent:
        return other_agent_;
      case kOwnAgent:
        return agent_;
      case kAdmin:
        return admin_;
    }
    return "";
  }

  // The walk's rows; their paths are made when called (a victim user for each identity).
  std::vector<Row> Rows() {
    const auto fixed = [](std::string p) { return [p] { return p; }; };
    const auto victim = [this](std::string suffix) {
      return [this, suffix] {
        const std::string name = absl::StrCat("victim-", ++victims_);
        EXPECT_FALSE(User(name, "team-a", "tenant").empty());
        return absl::StrCat("/v1/users/", name, suffix);
      };
    };
    // Statuses: 200/201/202 done; 401 no token; 403 role or machine refused; 404 another tenant's
    // lease or queue entry (not even its existence is shown), or nothing there to report on.
    return {
        {"GET /v1/health", fixed("/v1/health"), json(), {200, 200, 200, 200, 200}},
        {"GET /v1/inventory", fixed("/v1/inventory"), json(), {401, 200, 200, 200, 200}},
        {"GET /v1/classes", fixed("/v1/classes"), json(), {401, 200, 200, 200, 200}},
        {"PUT /v1/classes/{name}",
         fixed("/v1/classes/walk"),
         json{{"mig", {{"H100-80GB", "1g.10gb"}}}},
         {401, 403, 403, 403, 200}},
        {"DELETE /v1/classes/{name}", fixed("/v1/classes/walk"), json(), {401, 403, 403, 403, 200}},
        {"GET /v1/tenants", fixed("/v1/tenants"), json(), {401, 200, 200, 200, 200}},
        {"PUT /v1/tenants/{name}",
         fixed("/v1/tenants/walk"),
         json::object(),
         {401, 403, 403, 403, 200}},
        {"DELETE /v1/tenants/{name}", fixed("/v1/tenants/walk"), json(), {401, 403, 403, 403, 200}},
        {"POST /v1/users", fixed("/v1/users"), json(), {401, 403, 403, 403, 201}},
        {"GET /v1/users", fixed("/v1/users"), json(), {401, 200, 200, 200, 200}},
        // Revoked and rotated: a user of team-a made for each identity, so no identity's own
        // token changes.
        {"DELETE /v1/users/{name}", victim(""), json(), {401, 403, 403, 403, 200}},
        {"POST /v1/users/{name}/rotate",
         victim("/rotate"),
         json::object(),
         {401, 403, 403, 403, 200}},
        {"GET /v1/leases", fixed("/v1/leases"), json(), {401, 200, 200, 200, 200}},
        {"POST /v1/leases",
         fixed("/v1/leases"),
         json{{"class", "nb"}, {"purpose", "walk"}, {"wait", false}},
         {401, 201, 403, 403, 403}},
        {"GET /v1/leases/{id}",
         [&] { return "/v1/leases/" + AnnsLease(); },
         json(),
         {401, 404, 404, 404, 200}},
        {"POST /v1/leases/{id}/renew",
         [&] { return "/v1/leases/" + AnnsLease() + "/renew"; },
         json{{"ttl_s", 600}},
         {401, 404, 404, 404, 200}},
        {"GET /v1/queue", fixed("/v1/queue"), json(), {401, 200, 200, 200, 200}},
        {"DELETE /v1/queue/{id}",
         [&] { return "/v1/queue/" + AnnsQueued(); },
         json(),
         {401, 404, 404, 404, 200}},
        // Last of ann's: the admin's release ends her lease.
        {"DELETE /v1/leases/{id}",
         [&] { return "/v1/leases/" + AnnsLease(); },
         json(),
         {401, 404, 404, 404, 200}},
        {"GET /v1/audit", fixed("/v1/audit"), json(), {401, 200, 403, 403, 200}},
        {"GET /v1/nodes", fixed("/v1/nodes"), json(), {401, 403, 200, 200, 200}},
        {"PUT /v1/nodes/{host}", fixed("/v1/nodes/r1"), Report(), {401, 403, 403, 200, 200}},
        {"GET /v1/nodes/{host}/assignments",
         fixed("/v1/nodes/r1/assignments"),
         json(),
         {401, 403, 403, 200, 200}},
        {"POST /v1/nodes/{host}/bound",
         fixed("/v1/nodes/r1/bound"),
         json{{"leases", json::object()}},
         {401, 403, 403, 200, 200}},
        {"POST /v1/nodes/{host}/usage",
         fixed("/v1/nodes/r1/usage"),
         json{{"leases", json::object()}, {"valid_s", 60}},
         {401, 403, 403, 200, 200}},
        {"GET /v1/usage", fixed("/v1/usage"), json(), {401, 200, 403, 403, 200}},
        {"GET /v1/nodes/{host}/layout",
         fixed("/v1/nodes/r1/layout"),
         json(),
         {401, 403, 403, 200, 200}},
        // The admin's layout is refused (409) for ann's leases on GPU 0: allowed, and answered.
        {"PUT /v1/nodes/{host}/layout",
         fixed("/v1/nodes/r1/layout"),
         json{{"config",
               "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n"
               "      mig-devices: {\"7g.80gb\": 1}\n"},
              {"name", "c"}},
         {401, 403, 403, 403, 409}},
        // No layout is set, so there is none to clear or report on (404) for those allowed to.
        {"DELETE /v1/nodes/{host}/layout",
         fixed("/v1/nodes/r1/layout"),
         json(),
         {401, 403, 403, 403, 404}},
        {"POST /v1/nodes/{host}/layout/status",
         fixed("/v1/nodes/r1/layout/status"),
         json{{"generation", 1}, {"message", ""}},
         {401, 403, 403, 404, 404}},
        {"POST /v1/nodes/{host}/alerts",
         fixed("/v1/nodes/r1/alerts"),
         json{{"fired", json::array()}},
         {401, 403, 403, 200, 200}},
        {"GET /v1/alerts", fixed("/v1/alerts"), json(), {401, 200, 200, 200, 200}},
        {"GET /metrics", fixed("/metrics"), json(), {401, 403, 200, 200, 200}},
    };
  }
  int victims_ = 0;

  std::string other_tenant_;
  std::string other_agent_;
};

// Every "METHOD /path" of the OpenAPI file.
std::set<std::string> OpenApiOperations() {
  const YAML::Node doc =
      YAML::LoadFile(std::string(GPUSLICE_SOURCE_DIR) + "/docs/api/openapi.yaml");
  std::set<std::string> out;
  for (const auto& path : doc["paths"]) {
    for (const auto& op : path.second) {
      std::string method = op.first.as<std::string>();
      if (method == "parameters") continue;
      for (char& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      out.insert(method + " " + path.first.as<std::string>());
    }
  }
  return out;
}

TEST_F(AuthorizationWalk, EveryOperationAsEveryIdentity) {
  int users = 0;
  const std::vector<Row> rows = Rows();
  std::set<std::string> covered;
  for (const Row& row : rows) {
    EXPECT_TRUE(covered.insert(row.operation).second) << "two rows for " << row.operation;
    const std::string method = row.operation.substr(0, row.operation.find(' '));
    for (Who who : {kNoOne, kOtherTenant, kOtherAgent, kOwnAgent, kAdmin}) {
      json body = row.body;
      if (row.operation == "POST /v1/users") {
        body = json{{"name", absl::StrCat("walk-", ++users)}, {"tenant", "team-a"}};
      }
      const std::string path = row.path();
      Reply r =
          body.is_null() ? Call(method, path, Token(who)) : Call(method, path, Token(who), body);
      EXPECT_EQ(r.status, row.expected[who])
          << row.operation << " as " << kWho[who] << " (" << path << "): " << r.text;
    }
  }
  const std::set<std::string> documented = OpenApiOperations();
  for (const std::string& op : documented) {
    EXPECT_TRUE(covered.contains(op)) << op << " is in docs/api/openapi.yaml but not walked";
  }
  for (const std::string& op : covered) {
    EXPECT_TRUE(documented.contains(op)) << op << " is walked but not in docs/api/openapi.yaml";
  }
  EXPECT_EQ(covered.size() * 5, 165u) << "operations x identities";
}

// "METHOD /a/{}/b": an operation with its path parameters unnamed; from the OpenAPI file's
// "/a/{name}/b" or a route's pattern "/a/([a-z]+)/b" (each capture group a parameter).
std::string Unnamed(const std::string& operation, char open, char close) {
  std::string out;
  int depth = 0;
  for (char c : operation) {
    if (c == open && depth++ == 0) out += "{}";
    if (depth == 0) out += c;
    if (c == close && depth > 0) --depth;
  }
  return out;
}

TEST_F(AuthorizationWalk, TheRouteTableIsTheOpenApiFileAndRefusesWhatTheWalkRefuses) {
  ServerOptions options;
  options.metrics = metrics_;
  std::map<std::string, Access> table;  // by unnamed operation
  for (const Route& route : RouteTable(*service_, options)) {
    const std::string op = Unnamed(route.method + " " + route.pattern, '(', ')');
    EXPECT_TRUE(table.emplace(op, route.access).second) << "two routes for " << op;
  }
  std::set<std::string> documented;
  for (const std::string& op : OpenApiOperations()) documented.insert(Unnamed(op, '{', '}'));
  for (const std::string& op : documented) {
    EXPECT_TRUE(table.contains(op)) << op << " is in docs/api/openapi.yaml but has no route";
  }
  for (const auto& [op, access] : table) {
    EXPECT_TRUE(documented.contains(op)) << op << " is routed but not in docs/api/openapi.yaml";
  }
  const std::map<Who, alloc::Role> role_of = {{kOtherTenant, alloc::Role::kTenant},
                                              {kOtherAgent, alloc::Role::kAgent},
                                              {kOwnAgent, alloc::Role::kAgent},
                                              {kAdmin, alloc::Role::kAdmin}};
  for (const Row& row : Rows()) {
    auto it = table.find(Unnamed(row.operation, '{', '}'));
    if (it == table.end()) continue;  // reported above
    const Access& access = it->second;
    EXPECT_EQ(row.expected[kNoOne] == 401, access.authenticate) << row.operation;
    if (!access.authenticate) continue;
    EXPECT_FALSE(access.refusal.empty() && access.roles.size() < 3) << row.operation;
    for (const auto& [who, role] : role_of) {
      if (!access.Allows(role)) {
        EXPECT_EQ(row.expected[who], 403) << row.operation << " as " << kWho[who];
      }
    }
  }
}

}  // namespace
}  // namespace gpuslice::api
