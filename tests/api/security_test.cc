// What a hostile agent or tenant tried on wave 1, over the API (issue 22): an agent token is bound
// to its machine (every agent endpoint refuses another machine, and the refusal is audited);
// values from agents must be what NVML produces; text is cut between characters, so a long
// purpose or alert kind never breaks a later answer; slice quotas cannot be escaped by naming the
// slice another way; control characters never enter a purpose.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "alloc/alloc_test_util.h"
#include "api/api_fixture.h"
#include "nlohmann/json.hpp"
#include "place/place_test_util.h"

namespace gpuslice::api {
namespace {

using alloc::testing::GpuUuid;
using alloc::testing::MigA100;
using alloc::testing::MigUuid;
using nlohmann::json;
using testing::Count;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Reply;

json Report(const std::string& uuid) {
  return json{
      {"cpu_milli", 64000},
      {"memory_mib", 512000},
      {"gpus",
       json::array({json{{"index", 0}, {"uuid", uuid}, {"model", "H100-80GB"}, {"mig", true}}})}};
}

// What serve's /metrics gives: serve's own machine (vm), the fleet's alerts by machine, and the
// leases by tenant, which name no machine.
std::vector<metrics::Family> FleetFamilies() {
  metrics::Family fb;
  fb.name = "DCGM_FI_DEV_FB_USED";
  fb.help = "Framebuffer memory used (in MiB).";
  fb.samples.push_back({{{"gpu", "0"}, {"Hostname", "vm"}}, 4096});
  metrics::Family alerts;
  alerts.name = "gpuslice_alerts";
  alerts.help = "Active alerts.";
  alerts.samples.push_back({{{"kind", "xid"}, {"Hostname", "r1"}}, 1});
  alerts.samples.push_back({{{"kind", "xid"}, {"Hostname", "r2"}}, 2});
  metrics::Family leases;
  leases.name = "gpuslice_leases";
  leases.help = "Active leases by class and tenant.";
  leases.samples.push_back({{{"class", "nb"}, {"tenant", "team-a"}}, 3});
  return {fb, alerts, leases};
}

class SecurityApiTest : public testing::ApiFixture {
 protected:
  void SetUp() override {
    metrics_ = [] { return FleetFamilies(); };
    ASSERT_NO_FATAL_FAILURE(Start(place::testing::MakeCluster({MigA100("vm", 1)})));
    ASSERT_EQ(Call("PUT", "/v1/nodes/r1", agent_, Report(GpuUuid("r1", 0))).status, 200);
    other_agent_ = User("agent-r2", "", "agent", "r2");
    ASSERT_EQ(Call("PUT", "/v1/nodes/r2", other_agent_, Report(GpuUuid("r2", 0))).status, 200);
    ASSERT_EQ(
        Call("PUT", "/v1/classes/nb", admin_, json{{"mig", {{"H100-80GB", "1g.10gb"}}}}).status,
        200);
  }

  std::int64_t Lease(const std::string& purpose = "notebook") {
    Reply r = Call("POST", "/v1/leases", tenant_,
                   json{{"class", "nb"}, {"purpose", purpose}, {"wait", false}});
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body["lease"].value("id", std::int64_t{0});
  }

  std::string other_agent_;
};

// With node-x's token, wave 1 replaced another machine's GPUs, pointed a lease at another
// tenant's device and posted usage and alerts for it. Each is refused and audited now.
TEST_F(SecurityApiTest, AnAgentTokenServesOnlyItsOwnMachine) {
  const std::int64_t lease = Lease();
  ASSERT_GT(lease, 0);
  const std::string id = std::to_string(lease);
  const json bound = {{"leases",
                       {{id, json::array({json{{"uuid", MigUuid("x", 0)},
                                               {"gpu_uuid", GpuUuid("r2", 0)},
                                               {"gpu_index", 0},
                                               {"gi", 1},
                                               {"ci", 0}}})}}}};
  const struct {
    const char* method;
    std::string path;
    json body;
  } calls[] = {
      {"PUT", "/v1/nodes/r1", Report(GpuUuid("fake", 0))},
      {"GET", "/v1/nodes/r1/assignments", json()},
      {"POST", "/v1/nodes/r1/bound", bound},
      {"POST", "/v1/nodes/r1/usage", json{{"leases", {{id, {{"idle_s", 0}}}}}, {"valid_s", 60}}},
      {"POST", "/v1/nodes/r1/alerts", json{{"fired", json::array()}}},
      {"GET", "/v1/nodes/r1/layout", json()},
      {"POST", "/v1/nodes/r1/layout/status", json{{"generation", 1}, {"message", ""}}},
      {"PUT", "/v1/nodes/vm", Report(GpuUuid("fake", 1))},  // serve's own machine's name
  };
  for (const auto& c : calls) {
    Reply r = c.body.is_null() ? Call(c.method, c.path, other_agent_)
                               : Call(c.method, c.path, other_agent_, c.body);
    EXPECT_EQ(r.status, 403) << c.method << " " << c.path << ": " << r.text;
    EXPECT_THAT(r.text, HasSubstr("belongs to machine 'r2'")) << c.path;
  }
  const json audit = Audit();
  EXPECT_EQ(Count(audit, "agent.refuse"), 8) << audit.dump();
  // Nothing changed: r1 keeps its GPU, the lease has no devices, nothing was reported.
  json nodes = Get("/v1/nodes", "nodes");
  for (const json& node : nodes) {
    if (node["host"] == "r1") {
      EXPECT_EQ(node["gpus"][0]["uuid"], GpuUuid("r1", 0));
    }
  }
  EXPECT_EQ(nodes.size(), 2u);
  Reply got = Call("GET", "/v1/leases/" + id, tenant_);
  EXPECT_TRUE(got.body["bound"].empty()) << got.text;
  // The machine's own agent still can; an agent lists only its own machine and alerts.
  EXPECT_EQ(Call("GET", "/v1/nodes/r1/assignments", agent_).status, 200);
  EXPECT_EQ(Get("/v1/nodes", "nodes", other_agent_).size(), 1u);
}

TEST_F(SecurityApiTest, AgentTokensNeedAMachineAndOnlyAgentsHaveOne) {
  Reply unbound = Call("POST", "/v1/users", admin_, json{{"name", "a3"}, {"role", "agent"}});
  EXPECT_EQ(unbound.status, 400) << unbound.text;
  EXPECT_THAT(unbound.text, HasSubstr("machine"));
  Reply tenant = Call("POST", "/v1/users", admin_,
                      json{{"name", "t3"}, {"tenant", "team-a"}, {"machine", "r1"}});
  EXPECT_EQ(tenant.status, 400) << tenant.text;
  Reply bad = Call("POST", "/v1/users", admin_,
                   json{{"name", "a4"}, {"role", "agent"}, {"machine", "r1;reboot"}});
  EXPECT_EQ(bad.status, 400) << bad.text;
  Reply ok =
      Call("POST", "/v1/users", admin_, json{{"name", "a5"}, {"role", "agent"}, {"machine", "r5"}});
  ASSERT_EQ(ok.status, 201) << ok.text;
  EXPECT_EQ(ok.body["machine"], "r5");
}

// A UUID carrying shell syntax made `eval "$(gpuslice lease env N)"` run it.
TEST_F(SecurityApiTest, DeviceUuidsMustBeWhatNvmlProduces) {
  for (const std::string& uuid :
       {std::string("MIG-x'$(id)'"), std::string("GPU-r1-0"), std::string(""),
        GpuUuid("r1", 0) + " --privileged", std::string("GPU-") + std::string(36, 'g')}) {
    Reply r = Call("PUT", "/v1/nodes/r1", agent_, Report(uuid));
    EXPECT_EQ(r.status, 400) << uuid << ": " << r.text;
  }
  const std::int64_t lease = Lease();
  const std::string id = std::to_string(lease);
  for (const std::string& uuid :
       {std::string("MIG-x'$(id)'"), GpuUuid("r1", 0) + " -v /:/host", MigUuid("y", 1) + "\n"}) {
    Reply r = Call("POST", "/v1/nodes/r1/bound", agent_,
                   json{{"leases",
                         {{id, json::array({json{{"uuid", uuid},
                                                 {"gpu_uuid", GpuUuid("r1", 0)},
                                                 {"gpu_index", 0},
                                                 {"gi", 1},
                                                 {"ci", 0}}})}}}});
    EXPECT_EQ(r.status, 400) << uuid << ": " << r.text;
  }
  // The old-style MIG UUID is one NVML gives too.
  const std::string old_style = GpuUuid("r1", 0).replace(0, 0, "MIG-") + "/1/0";
  Reply ok = Call("POST", "/v1/nodes/r1/bound", agent_,
                  json{{"leases",
                        {{id, json::array({json{{"uuid", old_style},
                                                {"gpu_uuid", GpuUuid("r1", 0)},
                                                {"gpu_index", 0},
                                                {"gi", 1},
                                                {"ci", 0}}})}}}});
  EXPECT_EQ(ok.status, 200) << ok.text;
  Reply got = Call("GET", "/v1/leases/" + id, tenant_);
  EXPECT_EQ(got.body["env"]["CUDA_VISIBLE_DEVICES"], old_style) << got.text;
}

// 116 ASCII bytes and an 'é' were cut inside the 'é' at 117 bytes; every usage report then
// failed with 500, for good.
TEST_F(SecurityApiTest, LongTextIsCutBetweenCharacters) {
  const std::string purpose = std::string(116, 'a') + "\xc3\xa9" + "tail";
  const std::int64_t lease = Lease(purpose);
  ASSERT_GT(lease, 0);
  // The lease's machine and its agent.
  const std::string node = Call("GET", absl::StrCat("/v1/leases/", lease), tenant_).body["node"];
  const std::string host = node.substr(0, node.find('/'));
  const std::string& agent = host == "r1" ? agent_ : other_agent_;
  Reply usage = Call(
      "POST", "/v1/nodes/" + host + "/usage", agent,
      json{{"leases",
            {{std::to_string(lease), {{"memory_used_mib", 100}, {"memory_total_mib", 9984}}}}}});
  ASSERT_EQ(usage.status, 200) << usage.text;
  Reply report = Call("GET", "/v1/usage", admin_);
  EXPECT_EQ(report.status, 200) << report.text;
  EXPECT_EQ(Call("GET", "/v1/usage", tenant_).status, 200);
  // An alert kind cut at 64 bytes inside a character: stored, audited, and answered.
  json alert = {{"key", "k1"},
                {"kind", std::string(63, 'k') + "\xc3\xa9"},
                {"message", "m"},
                {"gpu", 0},
                {"since", 1000}};
  Reply fired = Call("POST", "/v1/nodes/r1/alerts", agent_, json{{"fired", json::array({alert})}});
  EXPECT_EQ(fired.status, 200) << fired.text;
  Reply alerts = Call("GET", "/v1/alerts", admin_);
  EXPECT_EQ(alerts.status, 200) << alerts.text;
  EXPECT_EQ(Call("GET", "/v1/audit", admin_).status, 200);
}

TEST_F(SecurityApiTest, APurposeHasNoControlCharacters) {
  for (const std::string& purpose :
       {std::string("a\0b", 3), std::string("line\nbreak"), std::string("esc\x1b[2J")}) {
    Reply r = Call("POST", "/v1/leases", tenant_,
                   json{{"class", "nb"}, {"purpose", purpose}, {"wait", false}});
    EXPECT_EQ(r.status, 400) << r.text;
  }
  EXPECT_GT(Lease("tabs\tare fine"), 0);
}

// An agent's token read all of serve's /metrics: every tenant's leases and every machine's series.
// Now an admin reads everything, an agent only its own machine's samples.
TEST_F(SecurityApiTest, AnAgentScrapesOnlyItsOwnMachinesSeries) {
  const Reply all = Call("GET", "/metrics", admin_);
  ASSERT_EQ(all.status, 200) << all.text;
  EXPECT_THAT(all.text, HasSubstr("Hostname=\"vm\""));
  EXPECT_THAT(all.text, HasSubstr("tenant=\"team-a\""));
  EXPECT_THAT(all.text, HasSubstr("Hostname=\"r2\""));
  const Reply r1 = Call("GET", "/metrics", agent_);
  ASSERT_EQ(r1.status, 200) << r1.text;
  EXPECT_THAT(r1.text, HasSubstr("gpuslice_alerts{kind=\"xid\",Hostname=\"r1\"} 1\n"));
  EXPECT_THAT(r1.text, Not(HasSubstr("Hostname=\"vm\"")));
  EXPECT_THAT(r1.text, Not(HasSubstr("Hostname=\"r2\"")));
  EXPECT_THAT(r1.text, Not(HasSubstr("team-a")));
  EXPECT_THAT(r1.text, HasSubstr("# TYPE gpuslice_leases gauge"));  // described, no samples
  const Reply r2 = Call("GET", "/metrics", other_agent_);
  ASSERT_EQ(r2.status, 200) << r2.text;
  EXPECT_THAT(r2.text, HasSubstr("Hostname=\"r2\"} 2\n"));
  EXPECT_THAT(r2.text, Not(HasSubstr("Hostname=\"r1\"")));
  EXPECT_EQ(Call("GET", "/metrics", tenant_).status, 403);
}

// With a quota for one class, wave 1 took the same profile twice more by naming the profile, and
// took any class without a quota entry at will.
TEST_F(SecurityApiTest, SliceQuotasCannotBeEscaped) {
  ASSERT_EQ(
      Call("PUT", "/v1/classes/med", admin_, json{{"mig", {{"H100-80GB", "2g.20gb"}}}}).status,
      200);
  ASSERT_EQ(Call("PUT", "/v1/tenants/team-a", admin_, json{{"max_slices", {{"med", 1}}}}).status,
            200);
  Reply first = Call("POST", "/v1/leases", tenant_,
                     json{{"class", "med"}, {"purpose", "p"}, {"wait", false}});
  ASSERT_EQ(first.status, 201) << first.text;
  const json asks[] = {
      json{{"class", "med"}, {"purpose", "p"}, {"wait", false}},
      json{{"profile", "2g.20gb"}, {"purpose", "p"}, {"wait", false}},
      json{{"class", "nb"}, {"purpose", "p"}, {"wait", false}},
      json{{"share_milli", 100}, {"purpose", "p"}, {"wait", false}},
  };
  for (const json& ask : asks) {
    Reply r = Call("POST", "/v1/leases", tenant_, ask);
    EXPECT_EQ(r.status, 409) << ask.dump() << ": " << r.text;
    EXPECT_THAT(r.text, HasSubstr("over quota")) << ask.dump();
  }
  EXPECT_EQ(Get("/v1/leases", "leases", tenant_).size(), 1u);
}

}  // namespace
}  // namespace gpuslice::api
