// The usage history over the HTTP/JSON API, end to end over a real Service on an SQLite file:
// an agent's usage reports carry each lease's figures (old bodies with idle seconds only still
// work), GET /v1/usage reports peaks, typical figures and verdicts with the planner's input,
// the history survives a restart, Tick rolls minute buckets up into hours exactly as the pure
// core does and drops them after 90 days, tenants see only their own usage, and bad bodies and
// parameters are refused with 400.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "alloc/alloc_test_util.h"
#include "api/api_fixture.h"
#include "gpuslice/alloc/usage.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/plan/inputs.h"
#include "gpuslice/store/database.h"
#include "nlohmann/json.hpp"
#include "place/place_test_util.h"

namespace gpuslice::api {
namespace {

using alloc::testing::MigA100;
using nlohmann::json;
using ::testing::HasSubstr;
using testing::Reply;

constexpr std::int64_t kOneDay = 86400;

json Report() {
  return json{{"cpu_milli", 64000},
              {"memory_mib", 512000},
              {"gpus", json::array({json{{"index", 0},
                                         {"uuid", alloc::testing::GpuUuid("r1", 0)},
                                         {"model", "H100-80GB"},
                                         {"mig", true}}})}};
}

class UsageApiTest : public testing::ApiFixture {
 protected:
  static place::Cluster Inventory() { return place::testing::MakeCluster({MigA100("n1", 1)}); }

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Start(Inventory()));
    ASSERT_EQ(Call("PUT", "/v1/nodes/r1", agent_, Report()).status, 200);
    for (const auto& [name, profile] : {std::pair{"nb", "1g.10gb"}, std::pair{"big", "3g.40gb"}}) {
      Reply klass = Call("PUT", absl::StrCat("/v1/classes/", name), admin_,
                         json{{"mig", {{"H100-80GB", profile}}}});
      ASSERT_EQ(klass.status, 200) << klass.text;
    }
  }

  std::int64_t Acquire(const std::string& token, const std::string& klass,
                       const std::string& purpose) {
    Reply r = Call("POST", "/v1/leases", token,
                   json{{"class", klass}, {"purpose", purpose}, {"wait", false}});
    EXPECT_EQ(r.status, 201) << r.text;
    EXPECT_EQ(r.body["lease"]["node"], "r1/H100-80GB-mig");
    return r.body["lease"].value("id", std::int64_t{0});
  }

  // Posts one round of figures (lease -> used MiB, total MiB, activity) and keeps the buckets
  // the pure core makes of them, at the service's clock.
  Reply Post(const std::map<std::int64_t, std::tuple<std::int64_t, std::int64_t, double>>& round) {
    json leases = json::object();
    for (const auto& [lease, f] : round) {
      const auto& [used, total, activity] = f;
      leases[std::to_string(lease)] = {{"memory_used_mib", used},
                                       {"memory_total_mib", total},
                                       {"sm_active_pct", activity},
                                       {"processes", used > 0 ? 1 : 0}};
      alloc::UsageFigures figures{used, total, activity, used > 0 ? 1 : 0};
      const alloc::UsageBucket b = alloc::BucketOf(lease, clock_.now(), figures);
      auto [it, inserted] = expected_.try_emplace({lease, b.start}, b);
      if (!inserted) alloc::MergeBucket(it->second, b);
    }
    return Call("POST", "/v1/nodes/r1/usage", agent_, json{{"leases", leases}});
  }

  // The stored buckets, read through a connection of the test's own.
  std::vector<alloc::UsageBucket> Stored() {
    absl::StatusOr<std::unique_ptr<store::Database>> db =
        store::OpenSqlite(dir_.path() + "/api.db");
    EXPECT_TRUE(db.ok()) << db.status();
    if (!db.ok()) return {};
    absl::StatusOr<store::Result> rows =
        (*db)->Query(absl::StrCat("SELECT ", alloc::kUsageBucketColumns,
                                  " FROM usage ORDER BY lease, bucket_s, bucket_start"));
    EXPECT_TRUE(rows.ok()) << rows.status();
    std::vector<alloc::UsageBucket> out;
    for (const store::Row& row : rows->rows) out.push_back(alloc::UsageBucketFromRow(row));
    return out;
  }

  std::vector<alloc::UsageBucket> Expected() const {
    std::vector<alloc::UsageBucket> out;
    for (const auto& [key, b] : expected_) out.push_back(b);
    return out;
  }

  json Usage(const std::string& query, const std::string& token = "") {
    Reply r = Call("GET", "/v1/usage" + query, token.empty() ? admin_ : token);
    EXPECT_EQ(r.status, 200) << r.text;
    return r.body;
  }

  static json Row(const json& report, const std::string& key) {
    for (const json& row : report["rows"]) {
      if (row["key"] == key) return row;
    }
    ADD_FAILURE() << "no row " << key << " in " << report.dump();
    return json::object();
  }

  std::map<std::pair<std::int64_t, std::int64_t>, alloc::UsageBucket> expected_;
};

TEST_F(UsageApiTest, AgentsFiguresBecomePeaksTypicalsAndVerdicts) {
  const std::int64_t big = Acquire(tenant_, "big", "serving ranker");
  const std::int64_t nb = Acquire(tenant_, "nb", "notebook: ann");
  // Three rounds 20 s apart: the 3g.40gb peaks at 6000 MiB, the 1g.10gb at 9700 of 9984 MiB.
  const std::int64_t used_big[] = {2000, 6000, 4000};
  const std::int64_t used_nb[] = {9000, 9700, 9500};
  for (int i = 0; i < 3; ++i) {
    Reply r = Post({{big, {used_big[i], 40448, 50.0}}, {nb, {used_nb[i], 9984, 80.0}}});
    ASSERT_EQ(r.status, 200) << r.text;
    EXPECT_EQ(r.body["ignored"], json::array());
    clock_.Advance(20);
  }
  const json report = Usage("?since=3600");
  EXPECT_EQ(report["by"], "workload");
  ASSERT_EQ(report["rows"].size(), 2u) << report.dump();
  const json ranker = Row(report, "serving-ranker");
  EXPECT_EQ(ranker["tenant"], "team-a");
  EXPECT_EQ(ranker["class"], "big");
  EXPECT_EQ(ranker["leases"], json::array({big}));
  EXPECT_EQ(ranker["samples"], 3);
  EXPECT_EQ(ranker["memory_peak_mib"], 6000);
  EXPECT_DOUBLE_EQ(ranker["memory_typical_mib"].get<double>(), 4000);
  EXPECT_DOUBLE_EQ(ranker["activity_peak_pct"].get<double>(), 50);
  EXPECT_EQ(ranker["gpu_model"], "H100-80GB");
  EXPECT_EQ(ranker["profile"], "3g.40gb");
  EXPECT_EQ(ranker["slice_mib"], 40448);
  EXPECT_EQ(ranker["oversized"], 1);
  EXPECT_EQ(ranker["suggested_profile"], "1g.10gb");
  const json notebook = Row(report, "notebook-ann");
  EXPECT_EQ(notebook["memory_peak_mib"], 9700);
  EXPECT_EQ(notebook["too_small"], 1);
  EXPECT_EQ(notebook["suggested_profile"], "1g.20gb");
  EXPECT_THAT(notebook["explanation"].get<std::string>(), HasSubstr("too small"));
  // The planner's input parses with the planner's parser.
  absl::StatusOr<plan::WorkloadSet> set = plan::ParseWorkloads(
      report["plan_yaml"].get<std::string>(), "usage.yaml", "", hw::Catalog::Builtin());
  ASSERT_TRUE(set.ok()) << set.status() << "\n" << report["plan_yaml"].get<std::string>();
  ASSERT_EQ(set->workloads.size(), 2u);
  EXPECT_EQ(set->workloads[0].name, "notebook-ann");
  EXPECT_DOUBLE_EQ(set->workloads[0].peak_memory_gib, 9.48);  // 9700 MiB, rounded up
  // By tenant and class.
  const json by_tenant = Usage("?since=3600&by=tenant");
  ASSERT_EQ(by_tenant["rows"].size(), 1u);
  EXPECT_EQ(by_tenant["rows"][0]["key"], "team-a");
  EXPECT_EQ(by_tenant["rows"][0]["workloads"], 2);
  EXPECT_EQ(by_tenant["rows"][0]["oversized"], 1);
  EXPECT_EQ(by_tenant["rows"][0]["too_small"], 1);
  const json by_class = Usage("?by=class");
  ASSERT_EQ(by_class["rows"].size(), 2u);
  EXPECT_EQ(Row(by_class, "nb")["memory_peak_mib"], 9700);
  // The buckets are exactly the pure core's.
  EXPECT_EQ(Stored(), Expected());
}

TEST_F(UsageApiTest, OldBodiesStillWorkAndRecordNoHistory) {
  const std::int64_t lease = Acquire(tenant_, "nb", "notebook");
  Reply old = Call("POST", "/v1/nodes/r1/usage", agent_,
                   json{{"leases", {{std::to_string(lease), {{"idle_s", 5}}}}}, {"valid_s", 30}});
  ASSERT_EQ(old.status, 200) << old.text;
  EXPECT_TRUE(Stored().empty());
  // Both at once: the idle figure and a sample.
  Reply both =
      Call("POST", "/v1/nodes/r1/usage", agent_,
           json{{"leases", {{std::to_string(lease), {{"idle_s", 0}, {"memory_used_mib", 10}}}}},
                {"valid_s", 30}});
  ASSERT_EQ(both.status, 200) << both.text;
  ASSERT_EQ(Stored().size(), 1u);
  EXPECT_EQ(Stored()[0].memory_peak_mib, 10);
  EXPECT_EQ(Stored()[0].activity_samples, 0);  // no activity given: none recorded
}

TEST_F(UsageApiTest, HistorySurvivesARestartAndEndedLeasesStayInIt) {
  const std::int64_t lease = Acquire(tenant_, "nb", "eval run 12");
  ASSERT_EQ(Post({{lease, {3000, 9984, 10.0}}}).status, 200);
  clock_.Advance(60);
  ASSERT_EQ(Post({{lease, {5000, 9984, 30.0}}}).status, 200);
  ASSERT_EQ(Call("DELETE", absl::StrCat("/v1/leases/", lease), tenant_).status, 200);
  // An ended lease takes no more samples (ignored and named).
  Reply ignored = Post({{lease, {9000, 9984, 99.0}}});
  ASSERT_EQ(ignored.status, 200) << ignored.text;
  EXPECT_EQ(ignored.body["ignored"], json::array({lease}));
  expected_.clear();  // (Post kept it; the service did not)
  Stop();
  ASSERT_NO_FATAL_FAILURE(Open(Inventory()));
  const json report = Usage("?since=86400");
  ASSERT_EQ(report["rows"].size(), 1u);
  EXPECT_EQ(report["rows"][0]["samples"], 2);
  EXPECT_EQ(report["rows"][0]["memory_peak_mib"], 5000);
  EXPECT_DOUBLE_EQ(report["rows"][0]["activity_typical_pct"].get<double>(), 20);
}

TEST_F(UsageApiTest, TickRollsMinutesUpIntoHoursExactlyAndDropsThemAfter90Days) {
  const std::int64_t a = Acquire(tenant_, "nb", "notebook a");
  const std::int64_t b = Acquire(tenant_, "big", "batch b");
  // Every 30 s for two and a half hours.
  std::int64_t i = 0;
  for (std::int64_t t = 0; t < 9000; t += 30, ++i) {
    ASSERT_EQ(Post({{a, {(i * 37) % 9000, 9984, static_cast<double>(i % 100)}},
                    {b, {(i * 101) % 40000, 40448, 12.5}}})
                  .status,
              200);
    clock_.Advance(30);
  }
  const json before = Usage("?since=86400");
  EXPECT_EQ(Stored(), Expected());
  // Nearly a day later, the minutes of the first hour and a half are due, the others not yet.
  clock_.Advance(kOneDay - 3600);
  ASSERT_TRUE(service_->Tick([](const alloc::Lease&) { return -1; }).ok());
  const std::vector<alloc::UsageBucket> rolled = Stored();
  EXPECT_EQ(rolled, alloc::Compact(Expected(), clock_.now()));
  int hours = 0;
  int minutes = 0;
  for (const alloc::UsageBucket& bucket : rolled) {
    hours += bucket.length == 3600 ? 1 : 0;
    minutes += bucket.length == 60 ? 1 : 0;
  }
  EXPECT_GT(hours, 0);
  EXPECT_GT(minutes, 0);
  EXPECT_LT(rolled.size(), Expected().size());
  // The report over the same samples says the same.
  const json after = Usage("?since=172800");
  ASSERT_EQ(after["rows"].size(), before["rows"].size());
  for (size_t r = 0; r < before["rows"].size(); ++r) {
    for (const char* field : {"samples", "memory_peak_mib", "memory_typical_mib",
                              "activity_peak_pct", "activity_typical_pct", "processes_peak"}) {
      EXPECT_EQ(after["rows"][r][field], before["rows"][r][field]) << field;
    }
  }
  // A second Tick right away changes nothing (and would not double anything anyway).
  ASSERT_TRUE(service_->Tick([](const alloc::Lease&) { return -1; }).ok());
  EXPECT_EQ(Stored(), rolled);
  // 90 days on, everything is gone.
  clock_.Advance(90 * kOneDay);
  ASSERT_TRUE(service_->Tick([](const alloc::Lease&) { return -1; }).ok());
  EXPECT_TRUE(Stored().empty());
  EXPECT_EQ(Usage("?since=7776000")["rows"], json::array());
}

TEST_F(UsageApiTest, TenantsSeeOnlyTheirOwnAndAgentsNone) {
  ASSERT_EQ(Call("PUT", "/v1/tenants/team-b", admin_, json::object()).status, 200);
  const std::string bob = User("bob", "team-b", "tenant");
  const std::int64_t mine = Acquire(tenant_, "nb", "ann's notebook");
  const std::int64_t theirs = Acquire(bob, "nb", "bob's notebook");
  ASSERT_EQ(Post({{mine, {100, 9984, 1.0}}, {theirs, {200, 9984, 2.0}}}).status, 200);
  EXPECT_EQ(Usage("")["rows"].size(), 2u);
  const json ann = Usage("?by=tenant", tenant_);
  ASSERT_EQ(ann["rows"].size(), 1u);
  EXPECT_EQ(ann["rows"][0]["key"], "team-a");
  EXPECT_EQ(ann["rows"][0]["leases"], json::array({mine}));
  const json b = Usage("", bob);
  ASSERT_EQ(b["rows"].size(), 1u);
  EXPECT_EQ(b["rows"][0]["leases"], json::array({theirs}));
  EXPECT_EQ(Call("GET", "/v1/usage", agent_).status, 403);
  EXPECT_EQ(Call("GET", "/v1/usage", "").status, 401);
  // Only agents and admins record.
  EXPECT_EQ(Call("POST", "/v1/nodes/r1/usage", tenant_,
                 json{{"leases", {{std::to_string(mine), {{"memory_used_mib", 1}}}}}})
                .status,
            403);
  EXPECT_EQ(Call("POST", "/v1/nodes/r1/usage", admin_,
                 json{{"leases", {{std::to_string(mine), {{"memory_used_mib", 1}}}}}})
                .status,
            200);
}

TEST_F(UsageApiTest, BadBodiesAndParametersAreRefused) {
  const std::int64_t lease = Acquire(tenant_, "nb", "notebook");
  const std::string id = std::to_string(lease);
  auto post = [&](const json& figures) {
    return Call("POST", "/v1/nodes/r1/usage", agent_, json{{"leases", {{id, figures}}}});
  };
  for (const json& bad : {json{{"memory_used_mib", -1}}, json{{"memory_used_mib", 1LL << 40}},
                          json{{"memory_used_mib", "lots"}}, json{{"memory_used_mib", 1.5}},
                          json{{"memory_used_mib", 1}, {"memory_total_mib", -5}},
                          json{{"memory_used_mib", 1}, {"sm_active_pct", 100.5}},
                          json{{"memory_used_mib", 1}, {"sm_active_pct", -1}},
                          json{{"memory_used_mib", 1}, {"sm_active_pct", "busy"}},
                          json{{"memory_used_mib", 1}, {"processes", -1}},
                          json{{"memory_used_mib", 1}, {"processes", 2.5}},
                          json{{"memory_total_mib", 9984}},  // without memory_used_mib
                          json{{"sm_active_pct", 5}},
                          json{{"memory_used_mib", 1}, {"temperature", 50}}, json::object()}) {
    Reply r = post(bad);
    EXPECT_EQ(r.status, 400) << bad.dump() << ": " << r.text;
  }
  EXPECT_THAT(post(json{{"memory_used_mib", 1}, {"sm_active_pct", 101}}).text,
              HasSubstr("sm_active_pct"));
  EXPECT_EQ(Call("POST", "/v1/nodes/r1/usage", agent_,
                 json{{"leases", {{"x", {{"memory_used_mib", 1}}}}}})
                .status,
            400);
  // r1's agent may not report for another machine; for the admin the machine is unknown.
  EXPECT_EQ(Call("POST", "/v1/nodes/nowhere/usage", agent_,
                 json{{"leases", {{id, {{"memory_used_mib", 1}}}}}})
                .status,
            403);
  EXPECT_EQ(Call("POST", "/v1/nodes/nowhere/usage", admin_,
                 json{{"leases", {{id, {{"memory_used_mib", 1}}}}}})
                .status,
            404);
  EXPECT_TRUE(Stored().empty());  // nothing of the above was recorded
  for (const char* query : {"?since=abc", "?since=0", "?since=-5", "?since=99999999", "?by=user"}) {
    EXPECT_EQ(Call("GET", std::string("/v1/usage") + query, admin_).status, 400) << query;
  }
  // The good ones.
  EXPECT_EQ(post(json{{"memory_used_mib", 0}, {"sm_active_pct", 0}, {"processes", 0}}).status, 200);
  EXPECT_EQ(post(json{{"memory_used_mib", 9984},
                      {"memory_total_mib", 9984},
                      {"sm_active_pct", 100},
                      {"processes", 3}})
                .status,
            200);
  EXPECT_EQ(Stored().size(), 1u);
  EXPECT_EQ(Stored()[0].samples, 2);
}

}  // namespace
}  // namespace gpuslice::api
