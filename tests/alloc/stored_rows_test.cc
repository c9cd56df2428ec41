// Rows the service could not have written (a damaged or hand-edited store) make Open fail with a
// message, never crash it: the defects fuzz/fuzz_store_rows found (its inputs are in
// fuzz/known/fuzz_store_rows/), each as a test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "alloc/alloc_test_util.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/store/database.h"

namespace gpuslice::alloc {
namespace {

using ::testing::HasSubstr;
using testing::MigA100;
using testing::ScratchDir;

class StoredRowsTest : public ::testing::Test {
 protected:
  // A migrated store with `sql` run on it, then opened by the service.
  absl::StatusOr<std::unique_ptr<Service>> OpenAfter(const std::vector<std::string>& sql) {
    absl::StatusOr<std::unique_ptr<store::Database>> db =
        store::OpenSqlite(dir_.path() + "/rows.db");
    if (!db.ok()) return db.status();
    if (absl::Status st = store::Migrate(**db); !st.ok()) return st;
    for (const std::string& statement : sql) {
      if (absl::Status st = (*db)->Exec(statement); !st.ok()) return st;
    }
    return Service::Open(*std::move(db), place::testing::MakeCluster({MigA100("n1", 1)}));
  }

  ScratchDir dir_;
};

TEST_F(StoredRowsTest, AJsonColumnOfAnotherShapeIsDataLossNotAnException) {
  for (const std::string& sql : {
           std::string("INSERT INTO classes (name, spec) VALUES ('x', '[1]')"),
           std::string("INSERT INTO nodes (host, report, seen_at) VALUES ('r1', "
                       "'{\"gpus\":[1]}', 0)"),
           std::string("INSERT INTO queue (id, tenant, user_name, class, purpose, request, "
                       "priority, ttl_s, enqueued_at, state) VALUES (1, 't', 'u', 'small', 'p', "
                       "'[1]', 0, 60, 0, 'queued')"),
           // A number no integer field can hold: nlohmann's value() would cast it (undefined).
           std::string("INSERT INTO queue (id, tenant, user_name, class, purpose, request, "
                       "priority, ttl_s, enqueued_at, state) VALUES (1, 't', 'u', 'small', 'p', "
                       "'{\"class\":\"small\",\"purpose\":\"p\",\"vram_mib\":1e300}', 0, 60, "
                       "0, 'queued')"),
           std::string("INSERT INTO classes (name, spec) VALUES ('x', '{\"share_milli\":1e300}')"),
           std::string("INSERT INTO nodes (host, report, seen_at) VALUES ('r1', "
                       "'{\"cpu_milli\":-1e300,\"gpus\":[]}', 0)"),
       }) {
    std::filesystem::remove(dir_.path() + "/rows.db");
    absl::StatusOr<std::unique_ptr<Service>> service = OpenAfter({sql});
    ASSERT_FALSE(service.ok()) << sql;
    EXPECT_EQ(service.status().code(), absl::StatusCode::kDataLoss) << service.status();
    EXPECT_THAT(service.status().message(), HasSubstr("not as gpuslice writes it"));
  }
}

// A lease row whose JSON columns do not parse (or hold the wrong shape) is DataLoss naming the
// lease and the column: it was read as "no claims" / "not bound" before, silently.
TEST_F(StoredRowsTest, ALeaseRowThatDoesNotParseIsDataLossNamingTheColumn) {
  const std::string good_request = R"('{"class":"small","purpose":"p","ttl_s":60}')";
  struct Case {
    std::string request, claims, bound, column;
  };
  for (const Case& c : std::vector<Case>{{good_request, "'not json'", "'[]'", "claims"},
                                         {good_request, "'[]'", "'{}'", "bound"},
                                         {"'[1]'", "'[]'", "'[]'", "request"}}) {
    std::filesystem::remove(dir_.path() + "/rows.db");
    absl::StatusOr<std::unique_ptr<Service>> service = OpenAfter(
        {"INSERT INTO leases (id, tenant, user_name, class, purpose, request, node, claims, "
         "memory_gib, granted_at, expires_at, ended_at, state, bound, from_queue) VALUES (7, 't', "
         "'u', 'small', 'p', " +
         c.request + ", 'n1', " + c.claims + ", 10, 0, 4000000000, 0, 'active', " + c.bound +
         ", 0)"});
    ASSERT_FALSE(service.ok()) << c.column;
    EXPECT_EQ(service.status().code(), absl::StatusCode::kDataLoss) << service.status();
    EXPECT_THAT(service.status().message(), HasSubstr("lease 7"));
    EXPECT_THAT(service.status().message(), HasSubstr("column " + c.column));
  }
}

TEST_F(StoredRowsTest, AnIdWithNoRoomAfterItIsRefused) {
  absl::StatusOr<std::unique_ptr<Service>> service =
      OpenAfter({"INSERT INTO audit (id, at, actor, tenant, action, subject, purpose, detail) "
                 "VALUES (9223372036854775807, 0, 'a', '', 'x', '', '', '{}')"});
  ASSERT_FALSE(service.ok());
  EXPECT_EQ(service.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(service.status().message(), HasSubstr("table audit holds id"));
}

TEST(StoreCellsTest, RealsAndTextsPastTheIntegerRangeReadAsItsEnds) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ(store::AsInt(store::Value{1e300}), kMax);
  EXPECT_EQ(store::AsInt(store::Value{-1e300}), kMin);
  EXPECT_EQ(store::AsInt(store::Value{std::nan("")}), 0);
  EXPECT_EQ(store::AsInt(store::Value{9.75}), 9);
  EXPECT_EQ(store::AsInt(store::Value{std::string("18000000005555555555555")}), kMax);
  EXPECT_EQ(store::AsInt(store::Value{std::string("42")}), 42);
  EXPECT_EQ(store::AsInt(store::Value{std::string("4.5")}), 4);
  EXPECT_EQ(store::AsInt(store::Value{std::string("abc")}), 0);
}

}  // namespace
}  // namespace gpuslice::alloc
