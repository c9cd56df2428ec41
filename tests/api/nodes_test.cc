// The agent endpoints of the HTTP/JSON API (/v1/nodes...) end to end over a real Service on an
// SQLite file, on a free loopback port: machines reported by an agent join the inventory, leases
// land there, the agent fetches its assignments and reports their devices, roles are enforced,
// bad reports change nothing, re-reports are idempotent or lose the leases of removed GPUs, and
// the reported machine survives a restart on the same store.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "alloc/alloc_test_util.h"
#include "api/api_fixture.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/api/server.h"
#include "gpuslice/store/database.h"
#include "nlohmann/json.hpp"
#include "place/place_test_util.h"

namespace gpuslice::api {
namespace {

using alloc::testing::FakeClock;
using alloc::testing::MigA100;
using alloc::testing::ScratchDir;
using nlohmann::json;
using ::testing::HasSubstr;

using testing::CallRaw;
using testing::Count;
using testing::Reply;

json Gpu(int index, const std::string& model = "H100-80GB", bool mig = true) {
  return json{{"index", index},
              {"uuid", alloc::testing::GpuUuid("r1", index)},
              {"model", model},
              {"mig", mig}};
}

json Report(json gpus) {
  return json{{"cpu_milli", 64000}, {"memory_mib", 512000}, {"gpus", std::move(gpus)}};
}

class NodesApiTest : public ::testing::Test {
 protected:
  void TearDown() override { Stop(); }

  void Stop() {
    if (server_ != nullptr) server_->Stop();
    server_.reset();
    service_.reset();
  }

  // Opens the service on the store (new or not) and serves it on a free port.
  void Open() {
    absl::StatusOr<std::unique_ptr<store::Database>> db =
        store::OpenSqlite(dir_.path() + "/nodes.db");
    ASSERT_TRUE(db.ok()) << db.status();
    alloc::ServiceOptions options;
    options.clock = clock_.Function();
    absl::StatusOr<std::unique_ptr<alloc::Service>> service = alloc::Service::Open(
        *std::move(db), place::testing::MakeCluster({MigA100("n1", 1)}), std::move(options));
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    ServerOptions server_options;
    server_options.port = 0;
    server_ = std::make_unique<ApiServer>(*service_, server_options);
    absl::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }

  void Start() {
    ASSERT_NO_FATAL_FAILURE(Open());
    absl::StatusOr<std::optional<std::string>> token = service_->BootstrapAdmin("root");
    ASSERT_TRUE(token.ok()) << token.status();
    ASSERT_TRUE(token->has_value());
    admin_ = **token;
    Reply put = Call("PUT", "/v1/tenants/team-a", admin_, json::object());
    ASSERT_EQ(put.status, 200) << put.text;
    tenant_ = User("ann", "team-a", "tenant");
    agent_ = User("agent-r1", "", "agent", "r1");
    ASSERT_FALSE(tenant_.empty());
    ASSERT_FALSE(agent_.empty());
  }

  std::string User(const std::string& name, const std::string& tenant, const std::string& role,
                   const std::string& machine = "") {
    json body = {{"name", name}, {"role", role}};
    if (!tenant.empty()) body["tenant"] = tenant;
    if (!machine.empty()) body["machine"] = machine;
    Reply created = Call("POST", "/v1/users", admin_, body);
    EXPECT_EQ(created.status, 201) << created.text;
    if (created.status != 201) return "";
    return created.body["token"].get<std::string>();
  }

  Reply Call(const std::string& method, const std::string& path, const std::string& token,
             const std::optional<json>& body = std::nullopt) {
    return CallRaw(server_->port(), method, path, token,
                   body.has_value() ? std::optional<std::string>(body->dump()) : std::nullopt);
  }
  Reply CallText(const std::string& method, const std::string& path, const std::string& token,
                 const std::string& text) {
    return CallRaw(server_->port(), method, path, token, text);
  }

  json Get(const std::string& path, const std::string& key, const std::string& token = "") {
    Reply reply = Call("GET", path, token.empty() ? admin_ : token);
    EXPECT_EQ(reply.status, 200) << path << ": " << reply.text;
    if (reply.status != 200 || !reply.body.contains(key)) return json::array();
    return reply.body[key];
  }
  std::set<std::string> InventoryNames() {
    std::set<std::string> names;
    for (const json& n : Get("/v1/inventory", "nodes")) names.insert(n["name"].get<std::string>());
    return names;
  }
  json Audit() { return Get("/v1/audit?limit=100000", "events"); }
  json Assignments(const std::string& host = "r1") {
    return Get("/v1/nodes/" + host + "/assignments", "assignments", agent_);
  }

  // Acquires small slices until `n` landed on a node of host r1 (filling n1 first as needed);
  // returns those leases.
  std::vector<json> AcquireOnR1(int n) {
    std::vector<json> remote;
    for (int i = 0; i < 40 && static_cast<int>(remote.size()) < n; ++i) {
      Reply r = Call("POST", "/v1/leases", tenant_,
                     json{{"class", "small"}, {"purpose", absl::StrCat("p", i)}, {"wait", false}});
      EXPECT_EQ(r.status, 201) << r.text;
      if (r.status != 201) break;
      if (r.body["lease"]["node"].get<std::string>().rfind("r1/", 0) == 0) {
        remote.push_back(r.body["lease"]);
      }
    }
    EXPECT_EQ(static_cast<int>(remote.size()), n);
    return remote;
  }

  ScratchDir dir_;
  FakeClock clock_;
  std::unique_ptr<alloc::Service> service_;
  std::unique_ptr<ApiServer> server_;
  std::string admin_;
  std::string tenant_;
  std::string agent_;
};

TEST_F(NodesApiTest, AReportedMachineJoinsTheInventoryAndTakesLeases) {
  Start();
  Reply put = Call("PUT", "/v1/nodes/r1", agent_,
                   Report(json::array({Gpu(0), Gpu(1, "H100-80GB", false)})));
  ASSERT_EQ(put.status, 200) << put.text;
  EXPECT_EQ(put.body["host"], "r1");
  std::set<std::string> nodes;
  for (const json& n : put.body["nodes"]) nodes.insert(n.get<std::string>());
  EXPECT_EQ(nodes, (std::set<std::string>{"r1/H100-80GB-mig", "r1/H100-80GB"}));
  EXPECT_EQ(InventoryNames(), (std::set<std::string>{"n1", "r1/H100-80GB-mig", "r1/H100-80GB"}));

  json listed = Get("/v1/nodes", "nodes", agent_);
  ASSERT_EQ(listed.size(), 1u) << listed.dump();
  EXPECT_EQ(listed[0]["host"], "r1");
  EXPECT_EQ(listed[0]["gpus"].size(), 2u);
  EXPECT_EQ(listed[0]["cpu_milli"], 64000);
  EXPECT_EQ(Count(Audit(), "node.report"), 1);

  // No assignments before any lease lands.
  EXPECT_TRUE(Assignments().empty());

  const std::vector<json> remote = AcquireOnR1(2);
  ASSERT_EQ(remote.size(), 2u);
  for (const json& lease : remote) {
    EXPECT_EQ(lease["node"], "r1/H100-80GB-mig");
    EXPECT_TRUE(lease["bound"].empty()) << lease.dump();
  }
  // Exactly the active leases on r1, with their claims.
  json assignments = Assignments();
  ASSERT_EQ(assignments.size(), 2u) << assignments.dump();
  std::set<std::int64_t> ids;
  for (const json& a : assignments) {
    ids.insert(a["lease"].get<std::int64_t>());
    EXPECT_EQ(a["node"], "r1/H100-80GB-mig");
    ASSERT_EQ(a["claims"].size(), 1u) << a.dump();
    // A MIG claim: a profile (by its index in the GPU's shape) at a start slot.
    EXPECT_GE(a["claims"][0]["mig_profile"].get<int>(), 0) << a.dump();
    EXPECT_GE(a["claims"][0]["mig_start"].get<int>(), 0) << a.dump();
    EXPECT_EQ(a["claims"][0]["whole"], false) << a.dump();
    EXPECT_TRUE(a["bound"].empty());
  }
  EXPECT_EQ(ids, (std::set<std::int64_t>{remote[0]["id"].get<std::int64_t>(),
                                         remote[1]["id"].get<std::int64_t>()}));
  // An unknown host has no assignments.
  EXPECT_EQ(Call("GET", "/v1/nodes/nowhere/assignments", admin_).status, 404);
  EXPECT_EQ(Call("GET", "/v1/nodes/nowhere/assignments", agent_).status, 403);

  // The agent reports the first one's devices; the second (wrong device count), an unknown id
  // and a local lease are ignored.
  const std::int64_t first = remote[0]["id"].get<std::int64_t>();
  const std::int64_t second = remote[1]["id"].get<std::int64_t>();
  const json device = {{"uuid", alloc::testing::MigUuid("x", 0)},
                       {"gpu_uuid", alloc::testing::GpuUuid("r1", 0)},
                       {"gpu_index", 0},
                       {"gi", 1},
                       {"ci", 0}};
  Reply bound = Call("POST", "/v1/nodes/r1/bound", agent_,
                     json{{"leases",
                           {{std::to_string(first), json::array({device})},
                            {std::to_string(second), json::array({device, device})},
                            {"99999", json::array({device})},
                            {"1", json::array({device})}}}});  // lease 1: the first one, on n1
  ASSERT_EQ(bound.status, 200) << bound.text;
  std::set<std::int64_t> ignored;
  for (const json& id : bound.body["ignored"]) ignored.insert(id.get<std::int64_t>());
  EXPECT_EQ(ignored, (std::set<std::int64_t>{1, second, 99999}));

  Reply got = Call("GET", "/v1/leases/" + std::to_string(first), tenant_);
  ASSERT_EQ(got.status, 200) << got.text;
  ASSERT_EQ(got.body["bound"].size(), 1u) << got.text;
  EXPECT_EQ(got.body["bound"][0]["uuid"], alloc::testing::MigUuid("x", 0));
  EXPECT_EQ(got.body["bound"][0]["gi"], 1);
  EXPECT_EQ(got.body["env"]["CUDA_VISIBLE_DEVICES"], alloc::testing::MigUuid("x", 0)) << got.text;
  Reply other = Call("GET", "/v1/leases/" + std::to_string(second), tenant_);
  EXPECT_TRUE(other.body["bound"].empty()) << other.text;
  // Assignments now carry what was bound.
  for (const json& a : Assignments()) {
    if (a["lease"] == first) {
      EXPECT_EQ(a["bound"].size(), 1u);
    } else {
      EXPECT_TRUE(a["bound"].empty());
    }
  }

  // An ended lease is ignored and drops out of the assignments.
  ASSERT_EQ(Call("DELETE", "/v1/leases/" + std::to_string(second), tenant_).status, 200);
  Reply late = Call("POST", "/v1/nodes/r1/bound", agent_,
                    json{{"leases", {{std::to_string(second), json::array({device})}}}});
  ASSERT_EQ(late.status, 200) << late.text;
  EXPECT_EQ(late.body["ignored"], json::array({second}));
  ASSERT_EQ(Assignments().size(), 1u);
}

TEST_F(NodesApiTest, RolesAreEnforced) {
  Start();
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1", agent_, Report(json::array({Gpu(0)}))).status, 200);
  const json bound_body = {{"leases", json::object()}};
  // Tenants: 403 on every node endpoint.
  EXPECT_EQ(Call("PUT", "/v1/nodes/r1", tenant_, Report(json::array({Gpu(0)}))).status, 403);
  EXPECT_EQ(Call("PUT", "/v1/nodes/r2", tenant_, Report(json::array({Gpu(0)}))).status, 403);
  EXPECT_EQ(Call("GET", "/v1/nodes", tenant_).status, 403);
  EXPECT_EQ(Call("GET", "/v1/nodes/r1/assignments", tenant_).status, 403);
  EXPECT_EQ(Call("POST", "/v1/nodes/r1/bound", tenant_, bound_body).status, 403);
  // Agents: 403 on admin endpoints, acquire and the audit.
  EXPECT_EQ(Call("PUT", "/v1/tenants/x", agent_, json::object()).status, 403);
  EXPECT_EQ(Call("DELETE", "/v1/tenants/team-a", agent_).status, 403);
  EXPECT_EQ(Call("POST", "/v1/users", agent_, json{{"name", "eve"}, {"role", "admin"}}).status,
            403);
  Reply acquire =
      Call("POST", "/v1/leases", agent_, json{{"class", "small"}, {"purpose", "sneaky"}});
  EXPECT_EQ(acquire.status, 403) << acquire.text;
  EXPECT_EQ(Call("GET", "/v1/audit", agent_).status, 403);
  // Admins may use the node endpoints.
  EXPECT_EQ(Call("GET", "/v1/nodes", admin_).status, 200);
  EXPECT_EQ(Call("GET", "/v1/nodes/r1/assignments", admin_).status, 200);
  // Nothing was changed by the refused calls.
  EXPECT_EQ(Count(Audit(), "node.report"), 1);
  EXPECT_EQ(Get("/v1/nodes", "nodes").size(), 1u);
  EXPECT_TRUE(Get("/v1/leases?all=true", "leases").empty());
  for (const json& t : Get("/v1/tenants", "tenants")) EXPECT_EQ(t["name"], "team-a");
}

TEST_F(NodesApiTest, BadReportsAre400AndChangeNothing) {
  Start();
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1", agent_, Report(json::array({Gpu(0)}))).status, 200);
  const json nodes_before = Get("/v1/nodes", "nodes");
  const std::set<std::string> inventory_before = InventoryNames();
  const json audit_before = Audit();

  json many = json::array();
  for (int i = 0; i < 65; ++i) many.push_back(Gpu(i));
  json unknown_field = Report(json::array({Gpu(0)}));
  unknown_field["color"] = "red";
  json unknown_gpu_field = json::array({Gpu(0)});
  unknown_gpu_field[0]["speed"] = 3;
  json negative = Report(json::array({Gpu(0)}));
  negative["cpu_milli"] = -1;
  json negative_memory = Report(json::array({Gpu(0)}));
  negative_memory["memory_mib"] = -5;
  json no_gpus = Report(json::array());
  no_gpus.erase("gpus");
  const std::vector<std::pair<std::string, json>> cases = {
      {"unknown model", Report(json::array({Gpu(0, "H999-1GB")}))},
      {"index 0", Report(json::array({Gpu(0), Gpu(0)}))},
      {"unknown field", unknown_field},
      {"unknown field", Report(unknown_gpu_field)},
      {"gpus", Report(json::array())},
      {"gpus", no_gpus},
      {"cpu_milli", negative},
      {"memory_mib", negative_memory},
      {"gpus", Report(many)},
      {"index -1", Report(json::array({Gpu(-1)}))},
  };
  for (const auto& [message, body] : cases) {
    for (const std::string host : {"r1", "r2"}) {
      // r1's own agent; r2 (not reported) through the admin.
      Reply reply = Call("PUT", "/v1/nodes/" + host, host == "r1" ? agent_ : admin_, body);
      EXPECT_EQ(reply.status, 400) << message << " on " << host << ": " << reply.text;
      ASSERT_TRUE(reply.body.is_object()) << reply.text;
      EXPECT_THAT(reply.body.value("error", ""), HasSubstr(message)) << reply.text;
    }
  }
  Reply not_json = CallText("PUT", "/v1/nodes/r1", agent_, "{not json");
  EXPECT_EQ(not_json.status, 400) << not_json.text;
  Reply wrong_type = Call("PUT", "/v1/nodes/r1", agent_,
                          json{{"cpu_milli", "lots"}, {"gpus", json::array({Gpu(0)})}});
  EXPECT_EQ(wrong_type.status, 400) << wrong_type.text;
  // Bad /bound bodies.
  for (const json& body :
       {json{{"leases", json::array()}}, json{{"leases", {{"abc", json::array()}}}},
        json{{"leases", {{"1", json::array({json{{"gpu_index", 0}}})}}}},
        json{{"leases", {{"1", json::array({json{{"uuid", "MIG-x"}, {"extra", 1}}})}}}}}) {
    Reply reply = Call("POST", "/v1/nodes/r1/bound", agent_, body);
    EXPECT_EQ(reply.status, 400) << body.dump() << ": " << reply.text;
  }
  EXPECT_EQ(Call("POST", "/v1/nodes/r2/bound", agent_, json{{"leases", json::object()}}).status,
            403);  // r1's agent, another machine
  EXPECT_EQ(Call("POST", "/v1/nodes/r2/bound", admin_, json{{"leases", json::object()}}).status,
            404);

  EXPECT_EQ(Get("/v1/nodes", "nodes"), nodes_before);
  EXPECT_EQ(InventoryNames(), inventory_before);
  // Nothing audited but the one refusal of r1's agent reaching for r2.
  json audit = Audit();
  ASSERT_FALSE(audit.empty());
  EXPECT_EQ(audit.back()["action"], "agent.refuse");
  EXPECT_EQ(audit.back()["subject"], "r2");
  audit.erase(audit.size() - 1);
  EXPECT_EQ(audit, audit_before);
}

TEST_F(NodesApiTest, ReportingTheSameGpusAgainChangesNothing) {
  Start();
  const json report = Report(json::array({Gpu(0), Gpu(1)}));
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1", agent_, report).status, 200);
  const std::vector<json> remote = AcquireOnR1(2);
  ASSERT_EQ(remote.size(), 2u);
  const json leases_before = Get("/v1/leases", "leases");
  const json assignments_before = Assignments();
  clock_.Advance(30);
  for (int i = 0; i < 3; ++i) {
    Reply again = Call("PUT", "/v1/nodes/r1", agent_, report);
    ASSERT_EQ(again.status, 200) << again.text;
  }
  EXPECT_EQ(Count(Audit(), "node.report"), 1);
  EXPECT_EQ(Count(Audit(), "lose"), 0);
  EXPECT_EQ(Get("/v1/leases", "leases"), leases_before);
  EXPECT_EQ(Assignments(), assignments_before);
}

// Re-reports r1 with `kept` (of GPUs 0 and 1, each holding leases): the leases on the removed GPU
// are lost and audited; those on the kept GPU stay.
class NodesApiShrinkTest : public NodesApiTest, public ::testing::WithParamInterface<int> {};

TEST_P(NodesApiShrinkTest, RemovedGpusLoseTheirLeases) {
  const int kept = GetParam();
  Start();
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1", agent_, Report(json::array({Gpu(0), Gpu(1)}))).status, 200);
  // 7 1g slices per H100: 14 fill both GPUs.
  const std::vector<json> remote = AcquireOnR1(14);
  ASSERT_EQ(remote.size(), 14u);
  std::set<std::int64_t> on_kept;
  std::set<std::int64_t> on_removed;
  for (const json& a : Assignments()) {
    ASSERT_EQ(a["claims"].size(), 1u);
    (a["claims"][0]["gpu"] == kept ? on_kept : on_removed).insert(a["lease"].get<std::int64_t>());
  }
  ASSERT_EQ(on_kept.size(), 7u);
  ASSERT_EQ(on_removed.size(), 7u);

  Reply shrink = Call("PUT", "/v1/nodes/r1", agent_, Report(json::array({Gpu(kept)})));
  ASSERT_EQ(shrink.status, 200) << shrink.text;
  EXPECT_EQ(Count(Audit(), "node.report"), 2);
  EXPECT_EQ(Count(Audit(), "lose"), 7);
  std::set<std::int64_t> still;
  for (const json& a : Assignments()) still.insert(a["lease"].get<std::int64_t>());
  // Claims name a GPU by its position on the placement node; when GPU 0 goes and GPU 1 stays, GPU
  // 1 becomes position 0, and its leases must follow it (by UUID) rather than keep their position.
  EXPECT_EQ(still, on_kept) << "kept GPU " << kept;
  for (std::int64_t id : on_removed) {
    Reply got = Call("GET", "/v1/leases/" + std::to_string(id), tenant_);
    EXPECT_EQ(got.body["state"], "lost") << "kept GPU " << kept << ": " << got.text;
  }
  for (std::int64_t id : on_kept) {
    Reply got = Call("GET", "/v1/leases/" + std::to_string(id), tenant_);
    EXPECT_EQ(got.body["state"], "active") << "kept GPU " << kept << ": " << got.text;
  }
}

INSTANTIATE_TEST_SUITE_P(KeepGpu, NodesApiShrinkTest, ::testing::Values(0, 1));

TEST_F(NodesApiTest, AReportedMachineSurvivesARestart) {
  Start();
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1", agent_, Report(json::array({Gpu(0), Gpu(1)}))).status, 200);
  const std::vector<json> remote = AcquireOnR1(2);
  ASSERT_EQ(remote.size(), 2u);
  const std::int64_t first = remote[0]["id"].get<std::int64_t>();
  const json device = {{"uuid", alloc::testing::MigUuid("keep", 0)},
                       {"gpu_uuid", alloc::testing::GpuUuid("r1", 0)},
                       {"gpu_index", 0},
                       {"gi", 2},
                       {"ci", 0}};
  ASSERT_EQ(Call("POST", "/v1/nodes/r1/bound", agent_,
                 json{{"leases", {{std::to_string(first), json::array({device})}}}})
                .status,
            200);
  const std::set<std::string> inventory_before = InventoryNames();
  const json assignments_before = Assignments();
  const json nodes_before = Get("/v1/nodes", "nodes");

  Stop();
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(InventoryNames(), inventory_before);
  EXPECT_EQ(Assignments(), assignments_before);
  EXPECT_EQ(Get("/v1/nodes", "nodes"), nodes_before);
  EXPECT_EQ(Count(Audit(), "lose"), 0);
  Reply got = Call("GET", "/v1/leases/" + std::to_string(first), tenant_);
  EXPECT_EQ(got.body["state"], "active") << got.text;
  EXPECT_EQ(got.body["env"]["CUDA_VISIBLE_DEVICES"], alloc::testing::MigUuid("keep", 0))
      << got.text;
  // Reporting the same GPUs after the restart (as an agent does) still changes nothing.
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1", agent_, Report(json::array({Gpu(0), Gpu(1)}))).status, 200);
  EXPECT_EQ(Count(Audit(), "node.report"), 1);
  EXPECT_EQ(Assignments(), assignments_before);
}

// An agent's usage reports drive the idle reclaim of leases on its machine: a lease idle at
// least its class's idle timeout is reclaimed at the next tick, a busier one is not, and a figure
// older than its validity counts as unknown (never reclaimed for it).
TEST_F(NodesApiTest, AgentsUsageReportsDriveIdleReclaim) {
  Start();
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1", agent_, Report(json::array({Gpu(0)}))).status, 200);
  Reply klass = Call("PUT", "/v1/classes/nb", admin_,
                     json{{"mig", {{"H100-80GB", "1g.10gb"}}}, {"idle_timeout_s", 60}});
  ASSERT_EQ(klass.status, 200) << klass.text;
  auto acquire = [&](const std::string& purpose) {
    Reply r = Call("POST", "/v1/leases", tenant_,
                   json{{"class", "nb"}, {"purpose", purpose}, {"wait", false}});
    EXPECT_EQ(r.status, 201) << r.text;
    EXPECT_EQ(r.body["lease"]["node"], "r1/H100-80GB-mig");
    return r.body["lease"]["id"].get<std::int64_t>();
  };
  const std::int64_t idle = acquire("idle notebook");
  const std::int64_t busy = acquire("busy notebook");
  const std::int64_t stale = acquire("agent went quiet");
  auto usage = [&](std::int64_t lease, std::int64_t seconds, std::int64_t valid) {
    return Call(
        "POST", "/v1/nodes/r1/usage", agent_,
        json{{"leases", {{std::to_string(lease), {{"idle_s", seconds}}}}}, {"valid_s", valid}});
  };
  auto state = [&](std::int64_t lease) {
    return Get("/v1/leases/" + std::to_string(lease), "state").get<std::string>();
  };

  ASSERT_EQ(usage(idle, 30, 100).status, 200);
  ASSERT_EQ(usage(busy, 0, 100).status, 200);
  ASSERT_EQ(usage(stale, 500, 10).status, 200);
  clock_.Advance(11);  // the stale figure is no longer valid
  ASSERT_TRUE(service_->Tick([](const alloc::Lease&) { return -1; }).ok());
  EXPECT_EQ(state(idle), "active");  // 30 s < 60 s
  EXPECT_EQ(state(busy), "active");
  EXPECT_EQ(state(stale), "active");  // unknown, not reclaimed

  ASSERT_EQ(usage(idle, 61, 100).status, 200);
  ASSERT_TRUE(service_->Tick([](const alloc::Lease&) { return -1; }).ok());
  EXPECT_EQ(state(idle), "reclaimed");
  EXPECT_EQ(state(busy), "active");
  EXPECT_EQ(state(stale), "active");
  EXPECT_EQ(Count(Audit(), "reclaim"), 1);

  // An ended or unknown lease is ignored (and named); bad figures are refused.
  Reply ignored = usage(idle, 1000, 100);
  ASSERT_EQ(ignored.status, 200) << ignored.text;
  EXPECT_EQ(ignored.body["ignored"], json::array({idle}));
  EXPECT_EQ(usage(busy, -1, 100).status, 400);
  EXPECT_EQ(usage(busy, 10, 0).status, 400);
  EXPECT_EQ(Call("POST", "/v1/nodes/r1/usage", agent_,
                 json{{"leases", {{"x", {{"idle_s", 1}}}}}, {"valid_s", 10}})
                .status,
            400);
  EXPECT_EQ(Call("POST", "/v1/nodes/r1/usage", agent_,
                 json{{"leases", {{std::to_string(busy), {{"idle", 1}}}}}, {"valid_s", 10}})
                .status,
            400);
  EXPECT_EQ(
      Call("POST", "/v1/nodes/r1/usage", tenant_, json{{"leases", json::object()}, {"valid_s", 10}})
          .status,
      403);
  EXPECT_EQ(Call("POST", "/v1/nodes/nowhere/usage", agent_,
                 json{{"leases", json::object()}, {"valid_s", 10}})
                .status,
            403);  // r1's agent, another machine
  EXPECT_EQ(Call("POST", "/v1/nodes/nowhere/usage", admin_,
                 json{{"leases", json::object()}, {"valid_s", 10}})
                .status,
            404);
  ASSERT_TRUE(service_->Tick([](const alloc::Lease&) { return -1; }).ok());
  EXPECT_EQ(state(busy), "active");
}

// A layout that turns MIG off on one GPU moves the machine's other GPUs to new positions in their
// placement node; a lease on them follows its physical GPU (by UUID) and keeps its instance.
TEST_F(NodesApiTest, ALayoutThatChangesModesKeepsLeasesOnTheirPhysicalGpus) {
  Start();
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1", agent_, Report(json::array({Gpu(0), Gpu(1)}))).status, 200);
  Reply klass = Call("PUT", "/v1/classes/h", admin_, json{{"mig", {{"H100-80GB", "3g.40gb"}}}});
  ASSERT_EQ(klass.status, 200) << klass.text;
  // Two 3g.40gb instances per GPU: the third lands on the second GPU (index 1).
  std::vector<json> leases;
  for (int i = 0; i < 3; ++i) {
    Reply r = Call("POST", "/v1/leases", tenant_,
                   json{{"class", "h"}, {"purpose", absl::StrCat("svc ", i)}, {"wait", false}});
    ASSERT_EQ(r.status, 201) << r.text;
    leases.push_back(r.body["lease"]);
  }
  auto device = [](const json& lease) { return lease["devices"][0].get<std::string>(); };
  ASSERT_THAT(device(leases[2]), ::testing::StartsWith("GPU 1 MIG 3g.40gb@")) << leases[2].dump();
  const std::string start = device(leases[2]).substr(device(leases[2]).find('@'));
  // Release the two on GPU 0 (it must be free to turn MIG off), keep the one on GPU 1.
  for (int i = 0; i < 2; ++i) {
    ASSERT_THAT(device(leases[static_cast<size_t>(i)]), ::testing::StartsWith("GPU 0 "));
    ASSERT_EQ(
        Call("DELETE", "/v1/leases/" + leases[static_cast<size_t>(i)]["id"].dump(), tenant_).status,
        200);
  }
  const std::string config =
      "version: v1\nmig-configs:\n  r1:\n    - devices: [0]\n      mig-enabled: false\n"
      "    - devices: [1]\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 2}\n";
  Reply set = Call("PUT", "/v1/nodes/r1/layout", admin_, json{{"config", config}});
  ASSERT_EQ(set.status, 200) << set.text;
  EXPECT_EQ(InventoryNames(), (std::set<std::string>{"n1", "r1/H100-80GB-mig", "r1/H100-80GB"}));
  Reply kept = Call("GET", "/v1/leases/" + leases[2]["id"].dump(), tenant_);
  ASSERT_EQ(kept.status, 200) << kept.text;
  EXPECT_EQ(kept.body["state"], "active");
  // GPU 1 is now the only GPU of r1/H100-80GB-mig (position 0 there), same instance: the lease
  // names it by the index nvidia-smi -i takes, 1 (wave 1 printed its position, "GPU 0").
  EXPECT_EQ(device(kept.body), "GPU 1 MIG 3g.40gb" + start);
  EXPECT_EQ(kept.body["node"], "r1/H100-80GB-mig");
  // The layout's other 3g.40gb instance is the only one left on the machine; GPU 0 is whole.
  Reply another = Call("POST", "/v1/leases", tenant_,
                       json{{"class", "h"}, {"purpose", "one more"}, {"wait", false}});
  ASSERT_EQ(another.status, 201) << another.text;
  EXPECT_EQ(another.body["lease"]["node"], "r1/H100-80GB-mig");
  EXPECT_NE(device(another.body["lease"]), device(kept.body));
  Reply none = Call("POST", "/v1/leases", tenant_,
                    json{{"class", "h"}, {"purpose", "no room"}, {"wait", false}});
  EXPECT_EQ(none.status, 409) << none.text;
  EXPECT_EQ(Count(Audit(), "lose"), 0);
  // The assignments tell the agent the layout.
  Reply assignments = Call("GET", "/v1/nodes/r1/assignments", agent_);
  ASSERT_EQ(assignments.status, 200);
  EXPECT_EQ(assignments.body["layout"]["generation"], 1);
  EXPECT_EQ(assignments.body["assignments"].size(), 2u);
}

}  // namespace
}  // namespace gpuslice::api
