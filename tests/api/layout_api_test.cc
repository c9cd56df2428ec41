// Fixed MIG layouts through the HTTP/JSON API (/v1/nodes/{host}/layout...) end to end over a real
// Service on an SQLite file, on a free loopback port. The service's own inventory is one shared
// L40S (no MIG, so every MIG profile request lands on the reported machine r1: two H100-80GB).
// Covered: authentication and roles, unknown hosts, malformed bodies and bad configs (nothing
// changes), leases that stand in the way (409 naming them, nothing changes), what an accepted
// layout makes acquire hand out (exact starts), GET/DELETE round trips, the agent's status reports,
// the layout in assignments and node listings, the audit, and a restart on the same store.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "alloc/alloc_test_util.h"
#include "api/api_fixture.h"
#include "nlohmann/json.hpp"
#include "place/place_test_util.h"

namespace gpuslice::api {
namespace {

using alloc::testing::SharedGpus;
using nlohmann::json;
using testing::ApiFixture;
using testing::Count;
using ::testing::HasSubstr;
using testing::Reply;
using ::testing::UnorderedElementsAre;

json Gpu(int index, bool mig) {
  return json{{"index", index},
              {"uuid", alloc::testing::GpuUuid("r1", index)},
              {"model", "H100-80GB"},
              {"mig", mig}};
}

json Report(bool mig0, bool mig1) {
  return json{{"cpu_milli", 64000},
              {"memory_mib", 512000},
              {"gpus", json::array({Gpu(0, mig0), Gpu(1, mig1)})}};
}

// GPU 0: two 3g.40gb instances (unplaced: the service picks 0 and 4); GPU 1: MIG off.
const char* const kTwoThreeGOnGpu0 = R"(version: v1
mig-configs:
  r1:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
    - devices: [1]
      mig-enabled: false
)";

// Every GPU: two 3g.40gb instances.
const char* const kTwoThreeGEverywhere = R"(version: v1
mig-configs:
  all-3g:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
)";

json LayoutBody(const std::string& config, const std::string& name = "",
                const std::string& origin = "") {
  json body = {{"config", config}};
  if (!name.empty()) body["name"] = name;
  if (!origin.empty()) body["origin"] = origin;
  return body;
}

// "GPU 0 MIG 3g.40gb@4" -> 4 (or -1).
int StartOf(const json& lease) {
  if (!lease.is_object() || lease["devices"].size() != 1) return -1;
  const std::string line = lease["devices"][0].get<std::string>();
  const std::size_t at = line.rfind('@');
  return at == std::string::npos ? -1 : std::stoi(line.substr(at + 1));
}

// The instances of GPU `index` in a layout's JSON, as "profile@start".
std::vector<std::string> Instances(const json& layout, int index) {
  std::vector<std::string> out;
  for (const json& gpu : layout["gpus"]) {
    if (gpu["index"] != index) continue;
    for (const json& i : gpu["instances"]) {
      out.push_back(absl::StrCat(i["profile"].get<std::string>(), "@", i["start"].get<int>()));
    }
  }
  return out;
}

class LayoutApiTest : public ApiFixture {
 protected:
  static place::Cluster Inventory() { return place::testing::MakeCluster({SharedGpus("s1", 1)}); }

  // Starts the service, and the agent reports r1 (GPUs 0 and 1 with these MIG modes).
  void StartWithR1(bool mig0 = true, bool mig1 = true) {
    ASSERT_NO_FATAL_FAILURE(Start(Inventory()));
    Reply put = Call("PUT", "/v1/nodes/r1", agent_, Report(mig0, mig1));
    ASSERT_EQ(put.status, 200) << put.text;
  }

  Reply Acquire(const std::string& profile, const std::string& purpose, bool wait = false) {
    return Call("POST", "/v1/leases", tenant_,
                json{{"profile", profile}, {"purpose", purpose}, {"wait", wait}});
  }
  // A granted lease on r1 (a null json, and a failure, otherwise).
  json Granted(const std::string& profile, const std::string& purpose) {
    Reply r = Acquire(profile, purpose);
    EXPECT_EQ(r.status, 201) << profile << ": " << r.text;
    if (r.status != 201) return json();
    EXPECT_EQ(r.body["lease"]["node"].get<std::string>().rfind("r1/", 0), 0u) << r.text;
    return r.body["lease"];
  }
  json Lease(std::int64_t id) {
    Reply r = Call("GET", absl::StrCat("/v1/leases/", id), tenant_);
    EXPECT_EQ(r.status, 200) << r.text;
    return r.body;
  }
  // GET /v1/nodes/r1/layout's "layout" (as the admin unless `token`).
  json Layout(const std::string& token = "") {
    Reply r = Call("GET", "/v1/nodes/r1/layout", token.empty() ? admin_ : token);
    EXPECT_EQ(r.status, 200) << r.text;
    return r.body.is_object() && r.body.contains("layout") ? r.body["layout"] : json("missing");
  }
  std::set<std::string> InventoryNames() {
    std::set<std::string> names;
    for (const json& n : Get("/v1/inventory", "nodes")) names.insert(n["name"].get<std::string>());
    return names;
  }
  json Assignments() { return Get("/v1/nodes/r1/assignments", "assignments", agent_); }
  int LayoutEvents() {
    const json events = Audit();
    return Count(events, "layout.set") + Count(events, "layout.clear") +
           Count(events, "layout.refuse") + Count(events, "layout.applied") +
           Count(events, "layout.failed");
  }
  // The detail (parsed) of the last audit event with `action` (null when none).
  json LastDetail(const std::string& action) {
    json found;
    for (const json& e : Audit()) {
      if (e["action"] == action) {
        found = e["detail"].is_string()
                    ? json::parse(e["detail"].get<std::string>(), nullptr, false)
                    : e["detail"];
        EXPECT_EQ(e["subject"], "r1") << e.dump();
      }
    }
    return found;
  }
};

TEST_F(LayoutApiTest, RolesAreEnforced) {
  StartWithR1();
  const json body = LayoutBody(kTwoThreeGOnGpu0);
  const json status = {{"generation", 1}, {"message", ""}};
  // No token, or a wrong one: 401 everywhere.
  for (const std::string& token : {std::string(), std::string("gs_not-a-token")}) {
    EXPECT_EQ(Call("PUT", "/v1/nodes/r1/layout", token, body).status, 401);
    EXPECT_EQ(Call("GET", "/v1/nodes/r1/layout", token).status, 401);
    EXPECT_EQ(Call("DELETE", "/v1/nodes/r1/layout", token).status, 401);
    EXPECT_EQ(Call("POST", "/v1/nodes/r1/layout/status", token, status).status, 401);
  }
  // Tenants: 403 everywhere.
  EXPECT_EQ(Call("PUT", "/v1/nodes/r1/layout", tenant_, body).status, 403);
  EXPECT_EQ(Call("GET", "/v1/nodes/r1/layout", tenant_).status, 403);
  EXPECT_EQ(Call("DELETE", "/v1/nodes/r1/layout", tenant_).status, 403);
  EXPECT_EQ(Call("POST", "/v1/nodes/r1/layout/status", tenant_, status).status, 403);
  // Agents may not set or clear a layout.
  Reply agent_put = Call("PUT", "/v1/nodes/r1/layout", agent_, body);
  EXPECT_EQ(agent_put.status, 403) << agent_put.text;
  EXPECT_TRUE(Layout().is_null());
  EXPECT_EQ(LayoutEvents(), 0);

  Reply set = Call("PUT", "/v1/nodes/r1/layout", admin_, body);
  ASSERT_EQ(set.status, 200) << set.text;
  EXPECT_EQ(Call("PUT", "/v1/nodes/r1/layout", tenant_, body).status, 403);
  EXPECT_EQ(Call("PUT", "/v1/nodes/r1/layout", agent_, body).status, 403);
  EXPECT_EQ(Call("DELETE", "/v1/nodes/r1/layout", agent_).status, 403);
  EXPECT_EQ(Call("DELETE", "/v1/nodes/r1/layout", tenant_).status, 403);
  EXPECT_EQ(Call("POST", "/v1/nodes/r1/layout/status", tenant_, status).status, 403);
  // Agents read it and report on it.
  const json as_agent = Layout(agent_);
  EXPECT_EQ(as_agent, set.body["layout"]);
  Reply reported = Call("POST", "/v1/nodes/r1/layout/status", agent_, status);
  EXPECT_EQ(reported.status, 200) << reported.text;
  EXPECT_EQ(reported.body["generation"], 1);
  // Only the admin's set and the agent's report happened.
  EXPECT_EQ(Count(Audit(), "layout.set"), 1);
  EXPECT_EQ(Count(Audit(), "layout.applied"), 1);
  EXPECT_EQ(LayoutEvents(), 2);
  const json now = Layout();
  EXPECT_EQ(now["generation"], 1);
  EXPECT_EQ(now["applied"], true);
}

TEST_F(LayoutApiTest, UnknownHostsAndMissingLayoutsAre404) {
  StartWithR1();
  const json body = LayoutBody(kTwoThreeGOnGpu0);
  const json status = {{"generation", 1}};
  for (const std::string host : {"nowhere", "r2"}) {
    const std::string path = "/v1/nodes/" + host + "/layout";
    Reply put = Call("PUT", path, admin_, body);
    EXPECT_EQ(put.status, 404) << put.text;
    EXPECT_THAT(put.body.value("error", ""), HasSubstr(host)) << put.text;
    EXPECT_EQ(Call("GET", path, admin_).status, 404);
    // r1's agent may not even ask about another machine.
    EXPECT_EQ(Call("GET", path, agent_).status, 403);
    EXPECT_EQ(Call("DELETE", path, admin_).status, 404);
    EXPECT_EQ(Call("POST", path + "/status", agent_, status).status, 403);
  }
  // r1 has reported but has no layout: nothing to clear or report on.
  Reply clear = Call("DELETE", "/v1/nodes/r1/layout", admin_);
  EXPECT_EQ(clear.status, 404) << clear.text;
  EXPECT_THAT(clear.body.value("error", ""), HasSubstr("no layout")) << clear.text;
  EXPECT_EQ(Call("POST", "/v1/nodes/r1/layout/status", agent_, status).status, 404);
  // A config name the file does not have.
  Reply missing = Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGOnGpu0, "big"));
  EXPECT_EQ(missing.status, 404) << missing.text;
  EXPECT_THAT(missing.body.value("error", ""), HasSubstr("big")) << missing.text;
  EXPECT_TRUE(Layout().is_null());
  EXPECT_EQ(LayoutEvents(), 0);
}

TEST_F(LayoutApiTest, MalformedBodiesAndBadConfigsAreRefusedAndChangeNothing) {
  StartWithR1();
  const json lease = Granted("1g.10gb", "keep");  // present through every refusal below
  ASSERT_TRUE(lease.is_object());
  const json nodes_before = Get("/v1/nodes", "nodes");
  const json assignments_before = Assignments();
  const std::set<std::string> inventory_before = InventoryNames();
  const json audit_before = Audit();

  // Bodies that are not what PUT takes.
  struct Raw {
    std::string text;
    std::string message;
  };
  const std::vector<Raw> raw = {
      {"{not json", "not valid JSON"},
      {"[]", "JSON object"},
      {R"({"config": "version: v1", "colour": "red"})", "unknown field 'colour'"},
      {R"({"config": 3})", "config: must be a string"},
      {R"({"config": "x", "name": 5})", "name: must be a string"},
      {R"({"config": "x", "origin": ["a"]})", "origin: must be a string"},
      {R"({"config": ""})", "config"},
      {"{}", "config"},
  };
  for (const Raw& r : raw) {
    Reply reply = CallText("PUT", "/v1/nodes/r1/layout", admin_, r.text);
    EXPECT_EQ(reply.status, 400) << r.text << ": " << reply.text;
    EXPECT_THAT(reply.body.value("error", ""), HasSubstr(r.message)) << r.text;
  }
  Reply huge = Call("PUT", "/v1/nodes/r1/layout", admin_,
                    LayoutBody(std::string(kTwoThreeGOnGpu0) + "#" + std::string(70000, 'x')));
  EXPECT_EQ(huge.status, 413) << huge.text;

  // Configs that are wrong in themselves: the status names the fault, the message names the line
  // where the file gives one.
  struct Bad {
    std::string config;
    std::string name;
    int status;
    std::vector<std::string> message;
  };
  const std::vector<Bad> bad = {
      // Line 5: not a boolean.
      {"version: v1\nmig-configs:\n  r1:\n    - devices: [0]\n      mig-enabled: maybe\n"
       "      mig-devices: {}\n",
       "",
       400,
       {"bad.yaml:5", "mig-enabled", "maybe"}},
      // Line 6: an unknown key.
      {"version: v1\nmig-configs:\n  r1:\n    - devices: [0]\n      mig-enabled: true\n"
       "      mig-device: {}\n",
       "",
       400,
       {"bad.yaml:6", "mig-device"}},
      // Not YAML at all (an unclosed flow sequence).
      {"version: v1\nmig-configs:\n  r1: [\n    {devices: [0]\n", "", 400, {"bad.yaml:"}},
      {"version: v2\nmig-configs: {}\n", "", 400, {"bad.yaml:1", "version"}},
      // Split compute instances are not handed out.
      {"version: v1\nmig-configs:\n  r1:\n    - devices: [0]\n      mig-enabled: true\n"
       "      mig-devices: {\"1c.3g.40gb\": 3}\n",
       "",
       400,
       {"split compute instances", "line 4"}},
      // Selects none of r1's GPUs.
      {"version: v1\nmig-configs:\n  r1:\n    - devices: [6]\n      mig-enabled: true\n"
       "      mig-devices: {\"1g.10gb\": 1}\n",
       "",
       400,
       {"selects none"}},
      // Two configs, none named r1 and none chosen.
      {"version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n"
       "  b:\n    - devices: all\n      mig-enabled: false\n",
       "",
       400,
       {"select one of", "a, b"}},
      // Does not fit on an H100 whatever the leases (the request's fault, not the state's).
      {"version: v1\nmig-configs:\n  r1:\n    - devices: [1]\n      mig-enabled: true\n"
       "      mig-devices: {\"3g.40gb\": 3}\n",
       "",
       400,
       {"does not fit", "GPU 1"}},
  };
  for (const Bad& b : bad) {
    Reply reply =
        Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(b.config, b.name, "bad.yaml"));
    EXPECT_EQ(reply.status, b.status) << b.config << ": " << reply.text;
    ASSERT_TRUE(reply.body.is_object()) << reply.text;
    // A config error is an error, not a list of blocking leases.
    EXPECT_FALSE(reply.body.contains("blocking")) << reply.text;
    for (const std::string& part : b.message) {
      EXPECT_THAT(reply.body.value("error", ""), HasSubstr(part)) << b.config;
    }
  }

  EXPECT_TRUE(Layout().is_null());
  EXPECT_EQ(Get("/v1/nodes", "nodes"), nodes_before);
  EXPECT_EQ(Assignments(), assignments_before);
  EXPECT_EQ(InventoryNames(), inventory_before);
  EXPECT_EQ(Audit(), audit_before);
  EXPECT_EQ(Lease(lease["id"].get<std::int64_t>())["state"], "active");
}

TEST_F(LayoutApiTest, LeasesInTheWayAre409AndNothingChanges) {
  StartWithR1();
  const json first = Granted("1g.10gb", "train-first");
  const json second = Granted("1g.10gb", "train-second");
  ASSERT_TRUE(first.is_object());
  ASSERT_TRUE(second.is_object());
  const json leases_before = Get("/v1/leases", "leases", tenant_);
  const json assignments_before = Assignments();
  const json nodes_before = Get("/v1/nodes", "nodes");
  const std::set<std::string> inventory_before = InventoryNames();
  // GPU index of each lease (both GPUs are MIG: a claim's position is its index).
  std::map<std::int64_t, int> gpu_of;
  for (const json& a : assignments_before) {
    gpu_of[a["lease"].get<std::int64_t>()] = a["claims"][0]["gpu"].get<int>();
  }
  ASSERT_EQ(gpu_of.size(), 2u) << assignments_before.dump();

  Reply refused =
      Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGEverywhere, "all-3g"));
  ASSERT_EQ(refused.status, 409) << refused.text;
  EXPECT_THAT(refused.body.value("error", ""), HasSubstr("nothing was changed"));
  ASSERT_EQ(refused.body["blocking"].size(), 2u) << refused.text;
  std::set<std::int64_t> blocking_ids;
  for (const json& b : refused.body["blocking"]) {
    const std::int64_t id = b["lease"].get<std::int64_t>();
    blocking_ids.insert(id);
    EXPECT_EQ(b["tenant"], "team-a") << b.dump();
    EXPECT_EQ(b["user"], "ann") << b.dump();
    EXPECT_EQ(b["class"], "profile:1g.10gb") << b.dump();
    EXPECT_EQ(b["state"], "active") << b.dump();
    EXPECT_EQ(b["purpose"], id == first["id"] ? "train-first" : "train-second") << b.dump();
    EXPECT_EQ(b["gpu"], gpu_of[id]) << b.dump();
    EXPECT_THAT(b["why"].get<std::string>(), HasSubstr("1g.10gb@")) << b.dump();
    EXPECT_THAT(b["why"].get<std::string>(), HasSubstr("not in the layout")) << b.dump();
  }
  EXPECT_EQ(blocking_ids, (std::set<std::int64_t>{first["id"].get<std::int64_t>(),
                                                  second["id"].get<std::int64_t>()}));

  // Nothing changed: no layout, the same leases (still active), assignments and inventory.
  EXPECT_TRUE(Layout().is_null());
  EXPECT_EQ(Get("/v1/leases", "leases", tenant_), leases_before);
  EXPECT_EQ(Lease(first["id"].get<std::int64_t>())["state"], "active");
  EXPECT_EQ(Lease(second["id"].get<std::int64_t>())["state"], "active");
  EXPECT_EQ(Assignments(), assignments_before);
  EXPECT_EQ(Get("/v1/nodes", "nodes"), nodes_before);
  EXPECT_EQ(InventoryNames(), inventory_before);
  // The refusal is audited with the leases in the way.
  EXPECT_EQ(Count(Audit(), "layout.refuse"), 1);
  EXPECT_EQ(Count(Audit(), "layout.set"), 0);
  const json detail = LastDetail("layout.refuse");
  ASSERT_TRUE(detail.is_object()) << Audit().dump();
  EXPECT_THAT(detail.value("source", ""), HasSubstr("all-3g"));
  std::set<std::int64_t> audited;
  for (const json& b : detail["blocking"]) audited.insert(b["lease"].get<std::int64_t>());
  EXPECT_EQ(audited, blocking_ids);

  // A MIG instance on a GPU the layout turns MIG off stands in the way too.
  const int gpu = gpu_of[first["id"].get<std::int64_t>()];
  const std::string off = absl::StrCat("version: v1\nmig-configs:\n  r1:\n    - devices: [", gpu,
                                       "]\n      mig-enabled: false\n");
  Reply mig_off = Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(off));
  ASSERT_EQ(mig_off.status, 409) << mig_off.text;
  bool named_first = false;
  for (const json& b : mig_off.body["blocking"]) {
    EXPECT_EQ(b["gpu"], gpu) << b.dump();
    EXPECT_THAT(b["why"].get<std::string>(), HasSubstr("turns MIG off")) << b.dump();
    if (b["lease"] == first["id"]) named_first = true;
  }
  EXPECT_TRUE(named_first) << mig_off.text;
  EXPECT_EQ(Count(Audit(), "layout.refuse"), 2);

  // Once one lease is released, only the other stands in the way; with both gone, it is taken.
  ASSERT_EQ(
      Call("DELETE", absl::StrCat("/v1/leases/", first["id"].get<std::int64_t>()), tenant_).status,
      200);
  Reply still = Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGEverywhere));
  ASSERT_EQ(still.status, 409) << still.text;
  ASSERT_EQ(still.body["blocking"].size(), 1u) << still.text;
  EXPECT_EQ(still.body["blocking"][0]["lease"], second["id"]);
  EXPECT_TRUE(Layout().is_null());
  ASSERT_EQ(
      Call("DELETE", absl::StrCat("/v1/leases/", second["id"].get<std::int64_t>()), tenant_).status,
      200);
  Reply taken = Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGEverywhere));
  ASSERT_EQ(taken.status, 200) << taken.text;
  EXPECT_EQ(taken.body["layout"]["generation"], 1);
  EXPECT_THAT(Instances(taken.body["layout"], 0), UnorderedElementsAre("3g.40gb@0", "3g.40gb@4"));
  EXPECT_THAT(Instances(taken.body["layout"], 1), UnorderedElementsAre("3g.40gb@0", "3g.40gb@4"));
}

TEST_F(LayoutApiTest, AnAcceptedLayoutIsWhatAcquireHandsOut) {
  StartWithR1();
  EXPECT_EQ(InventoryNames(), (std::set<std::string>{"s1", "r1/H100-80GB-mig"}));
  Reply set =
      Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGOnGpu0, "", "fleet/r1.yaml"));
  ASSERT_EQ(set.status, 200) << set.text;
  const json layout = set.body["layout"];
  EXPECT_EQ(layout["host"], "r1");
  EXPECT_EQ(layout["generation"], 1);
  EXPECT_EQ(layout["set_by"], "root");
  EXPECT_THAT(layout["source"].get<std::string>(), HasSubstr("fleet/r1.yaml"));
  EXPECT_THAT(layout["source"].get<std::string>(), HasSubstr("r1"));
  EXPECT_EQ(layout["applied_generation"], 0);
  EXPECT_EQ(layout["agent_message"], "");
  EXPECT_EQ(layout["applied"], false);
  ASSERT_EQ(layout["gpus"].size(), 2u) << layout.dump();
  EXPECT_EQ(layout["gpus"][0]["index"], 0);
  EXPECT_EQ(layout["gpus"][0]["model"], "H100-80GB");
  EXPECT_EQ(layout["gpus"][0]["mig"], true);
  EXPECT_EQ(Instances(layout, 0), (std::vector<std::string>{"3g.40gb@0", "3g.40gb@4"}));
  EXPECT_EQ(layout["gpus"][1]["index"], 1);
  EXPECT_EQ(layout["gpus"][1]["mig"], false);
  EXPECT_TRUE(layout["gpus"][1]["instances"].empty());
  // GPU 1 is now handed out whole, GPU 0 as the layout's instances.
  EXPECT_EQ(InventoryNames(), (std::set<std::string>{"s1", "r1/H100-80GB-mig", "r1/H100-80GB"}));
  const json detail = LastDetail("layout.set");
  ASSERT_TRUE(detail.is_object());
  EXPECT_EQ(detail["generation"], 1);
  EXPECT_EQ(detail["gpus"]["0"], "3g.40gb@0 3g.40gb@4");
  EXPECT_EQ(detail["gpus"]["1"], "MIG off");

  // No 1g instance exists in the layout: refused although GPU 0 has room for seven.
  Reply small = Acquire("1g.10gb", "small");
  EXPECT_EQ(small.status, 409) << small.text;
  EXPECT_EQ(small.body["outcome"], "refused") << small.text;
  // The 3g.40gb requests land exactly on the layout's instances, then there is no more room.
  std::set<int> starts;
  for (int i = 0; i < 2; ++i) {
    const json lease = Granted("3g.40gb", absl::StrCat("big", i));
    ASSERT_TRUE(lease.is_object());
    EXPECT_EQ(lease["node"], "r1/H100-80GB-mig") << lease.dump();
    ASSERT_EQ(lease["devices"].size(), 1u) << lease.dump();
    EXPECT_THAT(lease["devices"][0].get<std::string>(), HasSubstr("GPU 0 MIG 3g.40gb@"));
    starts.insert(StartOf(lease));
  }
  EXPECT_EQ(starts, (std::set<int>{0, 4}));
  for (const json& a : Assignments()) {
    ASSERT_EQ(a["claims"].size(), 1u);
    EXPECT_EQ(a["claims"][0]["gpu"], 0) << a.dump();
    EXPECT_TRUE(starts.contains(a["claims"][0]["mig_start"].get<int>())) << a.dump();
  }
  Reply third = Acquire("3g.40gb", "third");
  EXPECT_EQ(third.status, 409) << third.text;
  EXPECT_EQ(Count(Audit(), "grant"), 2);
  // Setting it again with the leases on its instances is accepted (they are in the layout),
  // pinned by placements too; a placement that moves one of them is refused.
  Reply again = Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGOnGpu0));
  ASSERT_EQ(again.status, 200) << again.text;
  EXPECT_EQ(again.body["layout"]["generation"], 2);
  EXPECT_EQ(Instances(again.body["layout"], 0),
            (std::vector<std::string>{"3g.40gb@0", "3g.40gb@4"}));
  const std::string moved =
      "version: v1\nmig-configs:\n  r1:\n    - devices: [0]\n      mig-enabled: true\n"
      "      mig-devices: {\"3g.40gb\": 1, \"1g.10gb\": 4}\n"
      "      gpuslice-placements: [\"3g.40gb@4\", \"1g.10gb@0\", \"1g.10gb@1\", \"1g.10gb@2\","
      " \"1g.10gb@3\"]\n";
  Reply blocked = Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(moved));
  ASSERT_EQ(blocked.status, 409) << blocked.text;
  ASSERT_EQ(blocked.body["blocking"].size(), 1u) << blocked.text;
  EXPECT_THAT(blocked.body["blocking"][0]["why"].get<std::string>(), HasSubstr("3g.40gb@0"));
  EXPECT_EQ(Layout()["generation"], 2);
  for (const json& lease : Get("/v1/leases", "leases", tenant_)) {
    EXPECT_EQ(lease["state"], "active");
  }

  // Back to slices made on demand: 1g.10gb is handed out again (GPU 1, reported in MIG mode, is
  // a MIG GPU again).
  Reply clear = Call("DELETE", "/v1/nodes/r1/layout", admin_);
  ASSERT_EQ(clear.status, 200) << clear.text;
  EXPECT_TRUE(clear.body.contains("layout"));
  EXPECT_TRUE(clear.body["layout"].is_null()) << clear.text;
  const json small_again = Granted("1g.10gb", "small-again");
  EXPECT_TRUE(small_again.is_object());
  EXPECT_EQ(InventoryNames(), (std::set<std::string>{"s1", "r1/H100-80GB-mig"}));
}

TEST_F(LayoutApiTest, GetAndDeleteRoundTripAndNodesAndAssignmentsCarryTheLayout) {
  StartWithR1();
  EXPECT_TRUE(Layout().is_null());
  Reply before = Call("GET", "/v1/nodes/r1/assignments", agent_);
  ASSERT_EQ(before.status, 200) << before.text;
  ASSERT_TRUE(before.body.contains("layout")) << before.text;
  EXPECT_TRUE(before.body["layout"].is_null());
  json nodes = Get("/v1/nodes", "nodes", agent_);
  ASSERT_EQ(nodes.size(), 1u);
  ASSERT_TRUE(nodes[0].contains("layout")) << nodes.dump();
  EXPECT_TRUE(nodes[0]["layout"].is_null());

  Reply set = Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGOnGpu0));
  ASSERT_EQ(set.status, 200) << set.text;
  const json layout = set.body["layout"];
  EXPECT_EQ(Layout(), layout);
  EXPECT_EQ(Layout(agent_), layout);
  Reply assignments = Call("GET", "/v1/nodes/r1/assignments", agent_);
  ASSERT_EQ(assignments.status, 200);
  EXPECT_EQ(assignments.body["layout"], layout);
  EXPECT_TRUE(assignments.body["assignments"].empty());
  nodes = Get("/v1/nodes", "nodes", agent_);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0]["layout"], layout);
  // The leases granted since are in the assignments, on the layout's instances.
  const json lease = Granted("3g.40gb", "on-layout");
  ASSERT_TRUE(lease.is_object());
  assignments = Call("GET", "/v1/nodes/r1/assignments", agent_);
  ASSERT_EQ(assignments.body["assignments"].size(), 1u) << assignments.text;
  const json claim = assignments.body["assignments"][0]["claims"][0];
  EXPECT_THAT(Instances(assignments.body["layout"], 0),
              ::testing::Contains(absl::StrCat("3g.40gb@", claim["mig_start"].get<int>())));

  Reply cleared = Call("DELETE", "/v1/nodes/r1/layout", admin_);
  ASSERT_EQ(cleared.status, 200) << cleared.text;
  EXPECT_EQ(cleared.body, json({{"layout", nullptr}}));
  EXPECT_TRUE(Layout().is_null());
  EXPECT_TRUE(Call("GET", "/v1/nodes/r1/assignments", agent_).body["layout"].is_null());
  EXPECT_TRUE(Get("/v1/nodes", "nodes")[0]["layout"].is_null());
  EXPECT_EQ(Lease(lease["id"].get<std::int64_t>())["state"], "active");
  // Clearing again: there is nothing to clear.
  EXPECT_EQ(Call("DELETE", "/v1/nodes/r1/layout", admin_).status, 404);
  EXPECT_EQ(Count(Audit(), "layout.set"), 1);
  EXPECT_EQ(Count(Audit(), "layout.clear"), 1);
  const json detail = LastDetail("layout.clear");
  ASSERT_TRUE(detail.is_object());
  EXPECT_EQ(detail["generation"], 1);
}

// A layout set after a clear gets a new generation: the agent tells layouts apart by generation
// (it reports on a layout only when its generation or outcome changed).
TEST_F(LayoutApiTest, GenerationsContinueAfterAClear) {
  StartWithR1();
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGOnGpu0)).status, 200);
  ASSERT_EQ(Call("DELETE", "/v1/nodes/r1/layout", admin_).status, 200);
  Reply next = Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGOnGpu0));
  ASSERT_EQ(next.status, 200) << next.text;
  EXPECT_EQ(next.body["layout"]["generation"], 2) << next.text;
}

TEST_F(LayoutApiTest, ClearingIsRefusedWhileAModeChangeWouldMoveALease) {
  StartWithR1();
  ASSERT_EQ(Call("PUT", "/v1/tenants/team-a", admin_, json{{"may_take_full", true}}).status, 200);
  // GPU 1 (reported in MIG mode) is handed out whole while the layout turns MIG off.
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGOnGpu0)).status, 200);
  json whole;
  for (int i = 0; i < 3 && !whole.is_object(); ++i) {
    Reply r = Call("POST", "/v1/leases", tenant_,
                   json{{"class", "full"}, {"purpose", "whole-gpu"}, {"wait", false}});
    ASSERT_EQ(r.status, 201) << r.text;
    if (r.body["lease"]["node"] == "r1/H100-80GB") whole = r.body["lease"];
  }
  ASSERT_TRUE(whole.is_object()) << "no full lease landed on r1's GPU 1";
  const json layout = Layout();

  Reply refused = Call("DELETE", "/v1/nodes/r1/layout", admin_);
  ASSERT_EQ(refused.status, 409) << refused.text;
  ASSERT_EQ(refused.body["blocking"].size(), 1u) << refused.text;
  EXPECT_EQ(refused.body["blocking"][0]["lease"], whole["id"]);
  EXPECT_EQ(refused.body["blocking"][0]["gpu"], 1);
  EXPECT_EQ(refused.body["blocking"][0]["purpose"], "whole-gpu");
  EXPECT_THAT(refused.body["blocking"][0]["why"].get<std::string>(), HasSubstr("MIG mode"));
  EXPECT_EQ(Layout(), layout);
  EXPECT_EQ(Lease(whole["id"].get<std::int64_t>())["state"], "active");
  EXPECT_EQ(Count(Audit(), "layout.clear"), 0);

  // Once the agent has turned GPU 1's MIG mode off (and reported it so), clearing is fine and
  // the lease stays on its GPU.
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1", agent_, Report(true, false)).status, 200);
  Reply cleared = Call("DELETE", "/v1/nodes/r1/layout", admin_);
  ASSERT_EQ(cleared.status, 200) << cleared.text;
  const json after = Lease(whole["id"].get<std::int64_t>());
  EXPECT_EQ(after["state"], "active") << after.dump();
  EXPECT_EQ(after["node"], "r1/H100-80GB");
  EXPECT_EQ(Count(Audit(), "lose"), 0);
}

// Every refusal of a layout change is audited (layout.refuse), clearing included.
TEST_F(LayoutApiTest, ARefusedClearIsAudited) {
  StartWithR1();
  ASSERT_EQ(Call("PUT", "/v1/tenants/team-a", admin_, json{{"may_take_full", true}}).status, 200);
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGOnGpu0)).status, 200);
  json whole;
  for (int i = 0; i < 3 && !whole.is_object(); ++i) {
    Reply r = Call("POST", "/v1/leases", tenant_,
                   json{{"class", "full"}, {"purpose", "whole-gpu"}, {"wait", false}});
    ASSERT_EQ(r.status, 201) << r.text;
    if (r.body["lease"]["node"] == "r1/H100-80GB") whole = r.body["lease"];
  }
  ASSERT_TRUE(whole.is_object()) << "no full lease landed on r1's GPU 1";
  ASSERT_EQ(Call("DELETE", "/v1/nodes/r1/layout", admin_).status, 409);
  EXPECT_EQ(Count(Audit(), "layout.refuse"), 1) << Audit().dump();
  const json detail = LastDetail("layout.refuse");
  ASSERT_TRUE(detail.is_object()) << Audit().dump();
  ASSERT_EQ(detail["blocking"].size(), 1u) << detail.dump();
  EXPECT_EQ(detail["blocking"][0]["lease"], whole["id"]);
}

TEST_F(LayoutApiTest, TheAgentReportsOnTheCurrentGeneration) {
  StartWithR1();
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGOnGpu0)).status, 200);
  const std::string path = "/v1/nodes/r1/layout/status";
  // Wrong generations are refused and change nothing.
  for (const int generation : {0, 2, -1}) {
    Reply wrong = Call("POST", path, agent_, json{{"generation", generation}, {"message", ""}});
    EXPECT_EQ(wrong.status, 409) << generation << ": " << wrong.text;
    EXPECT_THAT(wrong.body.value("error", ""), HasSubstr(absl::StrCat("generation ", generation)));
    EXPECT_THAT(wrong.body.value("error", ""), HasSubstr("(1)"));
  }
  // Malformed bodies.
  EXPECT_EQ(Call("POST", path, agent_, json{{"generation", "1"}}).status, 400);
  EXPECT_EQ(Call("POST", path, agent_, json{{"generation", 1}, {"message", 7}}).status, 400);
  EXPECT_EQ(Call("POST", path, agent_, json{{"generation", 1}, {"gen", 1}}).status, 400);
  EXPECT_EQ(CallText("POST", path, agent_, "{oops").status, 400);
  json layout = Layout();
  EXPECT_EQ(layout["applied"], false);
  EXPECT_EQ(layout["applied_generation"], 0);
  EXPECT_EQ(LayoutEvents(), 1);  // the set

  // A failure: recorded and audited.
  const std::string busy = "GPU 0: instance 1g.10gb@0 is busy (1 process)";
  Reply failed = Call("POST", path, agent_, json{{"generation", 1}, {"message", busy}});
  ASSERT_EQ(failed.status, 200) << failed.text;
  layout = Layout();
  EXPECT_EQ(layout["applied"], false);
  EXPECT_EQ(layout["applied_generation"], 0);
  EXPECT_EQ(layout["agent_message"], busy);
  EXPECT_EQ(Count(Audit(), "layout.failed"), 1);
  EXPECT_EQ(LastDetail("layout.failed")["message"], busy);
  // Then success (the admin may report too); the same success again is not audited again.
  for (const std::string& token : {agent_, admin_, agent_}) {
    Reply done = Call("POST", path, token, json{{"generation", 1}});
    ASSERT_EQ(done.status, 200) << done.text;
  }
  layout = Layout();
  EXPECT_EQ(layout["applied"], true);
  EXPECT_EQ(layout["applied_generation"], 1);
  EXPECT_EQ(layout["agent_message"], "");
  EXPECT_EQ(Count(Audit(), "layout.applied"), 1);
  EXPECT_EQ(LastDetail("layout.applied")["generation"], 1);

  // A new layout: not applied until the agent reports on generation 2; reports on 1 are stale.
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGEverywhere)).status,
            200);
  layout = Layout();
  EXPECT_EQ(layout["generation"], 2);
  EXPECT_EQ(layout["applied"], false);
  EXPECT_EQ(Call("POST", path, agent_, json{{"generation", 1}}).status, 409);
  ASSERT_EQ(Call("POST", path, agent_, json{{"generation", 2}}).status, 200);
  EXPECT_EQ(Layout()["applied"], true);
  EXPECT_EQ(Count(Audit(), "layout.applied"), 2);
}

// The agent reports the same failure at every round where it has restarted (or several agents
// run): the layout's state does not change, so neither should the audit.
TEST_F(LayoutApiTest, ARepeatedFailureReportIsAuditedOnce) {
  StartWithR1();
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGOnGpu0)).status, 200);
  const std::string busy = "GPU 0: instance 1g.10gb@0 is busy (1 process)";
  for (int i = 0; i < 3; ++i) {
    Reply failed = Call("POST", "/v1/nodes/r1/layout/status", agent_,
                        json{{"generation", 1}, {"message", busy}});
    ASSERT_EQ(failed.status, 200) << failed.text;
  }
  EXPECT_EQ(Layout()["agent_message"], busy);
  EXPECT_EQ(Count(Audit(), "layout.failed"), 1);
}

TEST_F(LayoutApiTest, TheLayoutSurvivesARestart) {
  StartWithR1();
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGOnGpu0)).status, 200);
  ASSERT_EQ(Call("POST", "/v1/nodes/r1/layout/status", agent_, json{{"generation", 1}}).status,
            200);
  const json held = Granted("3g.40gb", "kept");
  ASSERT_TRUE(held.is_object());
  const json layout = Layout();
  EXPECT_EQ(layout["applied"], true);
  const std::set<std::string> inventory_before = InventoryNames();
  const json assignments_before = Assignments();

  Stop();
  ASSERT_NO_FATAL_FAILURE(Open(Inventory()));
  EXPECT_EQ(Layout(), layout);
  EXPECT_EQ(Get("/v1/nodes", "nodes")[0]["layout"], layout);
  EXPECT_EQ(InventoryNames(), inventory_before);
  EXPECT_EQ(Assignments(), assignments_before);
  EXPECT_EQ(Lease(held["id"].get<std::int64_t>())["state"], "active");
  EXPECT_EQ(Count(Audit(), "lose"), 0);
  // Still only the layout's instances are handed out: one 3g.40gb left, no 1g.
  EXPECT_EQ(Acquire("1g.10gb", "small").status, 409);
  const json other = Granted("3g.40gb", "other");
  ASSERT_TRUE(other.is_object());
  EXPECT_EQ(StartOf(other) + StartOf(held), 4) << other.dump() << held.dump();
  EXPECT_EQ(Acquire("3g.40gb", "none-left").status, 409);
  // The agent re-reporting the same GPUs after the restart keeps the layout; generations go on.
  ASSERT_EQ(Call("PUT", "/v1/nodes/r1", agent_, Report(true, true)).status, 200);
  EXPECT_EQ(Layout(), layout);
  Reply next = Call("PUT", "/v1/nodes/r1/layout", admin_, LayoutBody(kTwoThreeGOnGpu0));
  ASSERT_EQ(next.status, 200) << next.text;
  EXPECT_EQ(next.body["layout"]["generation"], 2);
}

}  // namespace
}  // namespace gpuslice::api
