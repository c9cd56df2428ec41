// Alerts through the API: an agent reports its machine's alert changes
// (POST /v1/nodes/{host}/alerts), which become active, are audited as alert.fire / alert.clear,
// reach the service's alert listener (serve's webhook) once durable, and are listed by
// GET /v1/alerts (a tenant's user sees only its tenant's); bad bodies and roles are refused with
// nothing changed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
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

json Report() {
  return json{{"cpu_milli", 64000},
              {"memory_mib", 512000},
              {"gpus", json::array({json{{"index", 0},
                                         {"uuid", alloc::testing::GpuUuid("r1", 0)},
                                         {"model", "H100-80GB"},
                                         {"mig", true}}})}};
}

json AlertJson(const std::string& key, const std::string& kind, const std::string& tenant = "") {
  json a = {{"key", key},    {"kind", kind},    {"message", kind + " on GPU 0"},
            {"gpu", 0},      {"gi", 9},         {"device", "MIG-1"},
            {"since", 1000}, {"tenant", tenant}};
  if (!tenant.empty()) a["lease"] = 3;
  return a;
}

class AlertsApiTest : public ApiFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Start(place::testing::MakeCluster({SharedGpus("s1", 1)})));
    Reply put = Call("PUT", "/v1/nodes/r1", agent_, Report());
    ASSERT_EQ(put.status, 200) << put.text;
    service_->SetAlertListener([this](const metrics::Alert& alert, bool fired) {
      std::lock_guard<std::mutex> lock(told_mutex_);
      told_.emplace_back(alert.key, fired);
    });
  }
  void TearDown() override {
    if (service_ != nullptr) service_->SetAlertListener(nullptr);
    ApiFixture::TearDown();
  }

  Reply Post(const json& body, const std::string& token = "") {
    return Call("POST", "/v1/nodes/r1/alerts", token.empty() ? agent_ : token, body);
  }

  std::vector<std::pair<std::string, bool>> Told() {
    std::lock_guard<std::mutex> lock(told_mutex_);
    return told_;
  }

  std::mutex told_mutex_;
  std::vector<std::pair<std::string, bool>> told_;
};

TEST_F(AlertsApiTest, FiredAlertsAreActiveAuditedAndToldOnce) {
  Reply r = Post({{"fired", json::array({AlertJson("xid/MIG-1/48/1", "xid", "team-a"),
                                         AlertJson("throttled/GPU-r1-0", "throttled")})}});
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.body["fired"], 2);
  json active = Get("/v1/alerts", "active");
  ASSERT_EQ(active.size(), 2u);
  for (const json& a : active) {
    EXPECT_EQ(a["host"], "r1") << "the reporting machine, whatever the body says";
    EXPECT_EQ(a["cleared"], 0);
  }
  EXPECT_EQ(active[0]["severity"], "warning");  // throttled/... sorts before xid/...
  EXPECT_EQ(active[1]["severity"], "critical");
  EXPECT_EQ(Count(Audit(), "alert.fire"), 2);
  EXPECT_EQ(Told().size(), 2u);
  // Fired again while active: nothing changes.
  ASSERT_EQ(Post({{"fired", json::array({AlertJson("throttled/GPU-r1-0", "throttled")})}}).status,
            200);
  EXPECT_EQ(Count(Audit(), "alert.fire"), 2);
  EXPECT_EQ(Told().size(), 2u);
  EXPECT_EQ(Get("/v1/alerts", "active").size(), 2u);
}

TEST_F(AlertsApiTest, ClearedAlertsMoveToRecentOnce) {
  ASSERT_EQ(Post({{"fired", json::array({AlertJson("throttled/GPU-r1-0", "throttled")})}}).status,
            200);
  json cleared = AlertJson("throttled/GPU-r1-0", "throttled");
  cleared["cleared"] = 2000;
  Reply r = Post({{"cleared", json::array({cleared})}});
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_TRUE(Get("/v1/alerts", "active").empty());
  json recent = Get("/v1/alerts", "recent");
  ASSERT_EQ(recent.size(), 1u);
  EXPECT_EQ(recent[0]["cleared"], 2000);
  EXPECT_EQ(Count(Audit(), "alert.clear"), 1);
  // Cleared again, or an alert never fired: nothing.
  ASSERT_EQ(Post({{"cleared", json::array({cleared, AlertJson("gpu_lost/x", "gpu_lost")})}}).status,
            200);
  EXPECT_EQ(Count(Audit(), "alert.clear"), 1);
  EXPECT_EQ(Get("/v1/alerts", "recent").size(), 1u);
  const auto told = Told();
  ASSERT_EQ(told.size(), 2u);
  EXPECT_TRUE(told[0].second);
  EXPECT_FALSE(told[1].second);
}

TEST_F(AlertsApiTest, ATenantSeesOnlyItsOwnAlerts) {
  Reply granted = Call("POST", "/v1/leases", tenant_,
                       json{{"profile", "1g.10gb"}, {"purpose", "alerts"}, {"wait", false}});
  ASSERT_EQ(granted.status, 201) << granted.text;
  ASSERT_EQ(granted.body["lease"]["node"].get<std::string>().substr(0, 3), "r1/");
  json on_lease = AlertJson("xid/MIG-1/48/1", "xid", "team-b");  // the report lies about whose
  on_lease["lease"] = granted.body["lease"]["id"];
  ASSERT_EQ(Post({{"fired", json::array({on_lease, AlertJson("xid/MIG-2/48/1", "xid", "team-a"),
                                         AlertJson("throttled/GPU-r1-0", "throttled")})}})
                .status,
            200);
  EXPECT_EQ(Get("/v1/alerts", "active").size(), 3u);
  json mine = Get("/v1/alerts", "active", tenant_);
  ASSERT_EQ(mine.size(), 1u) << mine;
  EXPECT_EQ(mine[0]["key"], "xid/MIG-1/48/1");
  EXPECT_EQ(mine[0]["tenant"], "team-a") << "the lease's tenant, not the report's";
  EXPECT_EQ(mine[0]["class"], "profile:1g.10gb");
}

TEST_F(AlertsApiTest, BadBodiesAndRolesChangeNothing) {
  const json good = {{"fired", json::array({AlertJson("xid/MIG-1/48/1", "xid")})}};
  EXPECT_EQ(Call("POST", "/v1/nodes/r1/alerts", "", good).status, 401);
  EXPECT_EQ(Post(good, tenant_).status, 403);
  // r1's agent may not report for another machine; for the admin, the machine is unknown.
  EXPECT_EQ(Call("POST", "/v1/nodes/nowhere/alerts", agent_, good).status, 403);
  EXPECT_EQ(Call("POST", "/v1/nodes/nowhere/alerts", admin_, good).status, 404);
  for (const json& bad :
       {json{{"fired", "xid"}}, json{{"fired", json::array({json{{"kind", "xid"}}})}},
        json{{"fired", json::array({json{{"key", "k"}, {"kind", "xid"}, {"message", 5}}})}},
        json{{"fired",
              json::array(
                  {json{{"key", "k"}, {"kind", "xid"}, {"message", "m"}, {"severity", "bad"}}})}},
        json{{"unknown", 1}}}) {
    Reply r = Post(bad);
    EXPECT_EQ(r.status, 400) << bad.dump() << ": " << r.text;
  }
  EXPECT_EQ(Call("GET", "/v1/alerts", "").status, 401);
  EXPECT_TRUE(Get("/v1/alerts", "active").empty());
  EXPECT_EQ(Count(Audit(), "alert.fire"), 0);
  EXPECT_TRUE(Told().empty());
}

TEST_F(AlertsApiTest, AnAlertWithoutATimeGetsTheServicesClock) {
  json alert = AlertJson("memory_high/MIG-1", "memory_high");
  alert.erase("since");
  ASSERT_EQ(Post({{"fired", json::array({alert})}}).status, 200);
  json active = Get("/v1/alerts", "active");
  ASSERT_EQ(active.size(), 1u);
  EXPECT_GT(active[0]["since"].get<std::int64_t>(), 0);
  EXPECT_THAT(active[0]["message"].get<std::string>(), HasSubstr("memory_high"));
}

}  // namespace
}  // namespace gpuslice::api
