// The store contract (gpuslice/store/database.h) on both backends: every test here runs on SQLite
// and on a real PostgreSQL server (tests/store/pg_server.h), so the two cannot drift apart.
// Parameter checks, error codes and the statement and database named in messages, foreign keys,
// transactions (rollback, no nesting, a failed commit), the schema migrations, durability across
// connections, and the allocation service granting, queueing and reopening on each.
// What only one backend has (SQLite's file and pragmas; PostgreSQL's URL handling) is tested in
// store_test.cc and postgres_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gpuslice/alloc/service.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/store/database.h"
#include "pg_server.h"
#include "require.h"
#include "scalar.h"

namespace gpuslice::store {
namespace {

using ::testing::HasSubstr;

const auto* const kPostgres =
    ::testing::AddGlobalTestEnvironment(new test_server::PostgresEnvironment);  // owned by gtest

// GetParam() is the backend: "sqlite" (a file in a fresh directory) or "postgres" (the server's
// database with a fresh public schema). Open() makes a new connection each time.
class StoreConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      std::string pattern = ::testing::TempDir() + "gpuslice_store_XXXXXX";
      ASSERT_NE(mkdtemp(pattern.data()), nullptr);
      dir_ = pattern;
      target_ = dir_ + "/test.db";
      return;
    }
    target_ = test_server::PostgresEnvironment::url();
    if (target_.empty()) GPUSLICE_SKIP_OR_FAIL_IN_CI("no PostgreSQL server available");
    std::unique_ptr<Database> db = Open();
    ASSERT_NE(db, nullptr);
    ASSERT_TRUE(db->Exec("DROP SCHEMA public CASCADE").ok());
    ASSERT_TRUE(db->Exec("CREATE SCHEMA public").ok());
  }
  void TearDown() override {
    if (dir_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::unique_ptr<Database> Open() const {
    absl::StatusOr<std::unique_ptr<Database>> db = OpenDatabase(target_);
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? *std::move(db) : nullptr;
  }

  static std::vector<std::string> Tables(Database& db) {
    const char* sql = db.kind() == "sqlite"
                          ? "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
                          : "SELECT table_name FROM information_schema.tables "
                            "WHERE table_schema = 'public' ORDER BY table_name";
    absl::StatusOr<Result> result = db.Query(sql);
    EXPECT_TRUE(result.ok()) << result.status();
    std::vector<std::string> names;
    if (result.ok()) {
      for (const Row& row : result->rows) names.push_back(AsText(row[0]));
    }
    return names;
  }

  std::string dir_;
  std::string target_;
};

INSTANTIATE_TEST_SUITE_P(Backends, StoreConformanceTest, ::testing::Values("sqlite", "postgres"),
                         [](const ::testing::TestParamInfo<std::string>& backend) {
                           return backend.param;
                         });

TEST_P(StoreConformanceTest, RowsComeBackTypedInOrderWithTheirColumnNames) {
  std::unique_ptr<Database> db = Open();
  ASSERT_NE(db, nullptr);
  absl::StatusOr<Result> created =
      db->Query("CREATE TABLE t (k BIGINT PRIMARY KEY, v TEXT, d DOUBLE PRECISION)");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(created->rows.empty());
  for (std::int64_t k = 1; k <= 3; ++k) {
    const Value insert[] = {k, "v" + std::to_string(k), 0.5 * static_cast<double>(k)};
    ASSERT_TRUE(db->Exec("INSERT INTO t (k, v, d) VALUES (?, ?, ?)", insert).ok());
  }
  const Value edge[] = {std::int64_t{-9007199254740993LL}, std::string("it's ? here"), 0.1};
  ASSERT_TRUE(db->Exec("INSERT INTO t (k, v, d) VALUES (?, ?, ?)", edge).ok());
  const Value null_row[] = {std::int64_t{4}, Value{}, Value{}};
  ASSERT_TRUE(db->Exec("INSERT INTO t (k, v, d) VALUES (?, ?, ?)", null_row).ok());

  absl::StatusOr<Result> rows = db->Query("SELECT k, v, d FROM t ORDER BY k DESC");
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->columns, (std::vector<std::string>{"k", "v", "d"}));
  ASSERT_EQ(rows->rows.size(), 5u);
  EXPECT_EQ(rows->rows[0][0], Value{std::int64_t{4}});
  EXPECT_TRUE(std::holds_alternative<std::monostate>(rows->rows[0][1]));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(rows->rows[0][2]));
  EXPECT_EQ(rows->rows[1][0], Value{std::int64_t{3}});
  EXPECT_EQ(rows->rows[1][1], Value{std::string("v3")});
  EXPECT_EQ(rows->rows[1][2], Value{1.5});
  EXPECT_EQ(rows->rows[4][0], Value{std::int64_t{-9007199254740993LL}});
  EXPECT_EQ(rows->rows[4][1], Value{std::string("it's ? here")});
  EXPECT_EQ(rows->rows[4][2], Value{0.1});
  const Value key[] = {std::string("it's ? here")};
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM t WHERE v = ? OR v = '?'", {key[0]})), 1);
  absl::StatusOr<Result> none = db->Query("SELECT k FROM t WHERE k > 100");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->rows.empty());
  EXPECT_EQ(none->columns, (std::vector<std::string>{"k"}));
}

TEST_P(StoreConformanceTest, ParameterCountMismatchIsInvalidArgument) {
  std::unique_ptr<Database> db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE t (a INTEGER, b INTEGER)").ok());
  const Value one[] = {std::int64_t{1}};
  absl::Status too_few = db->Exec("INSERT INTO t (a, b) VALUES (?, ?)", one);
  EXPECT_EQ(too_few.code(), absl::StatusCode::kInvalidArgument) << too_few;
  EXPECT_THAT(std::string(too_few.message()), HasSubstr("INSERT INTO t"));
  EXPECT_THAT(std::string(too_few.message()), HasSubstr("takes 2 parameters, 1 given"));
  const Value three[] = {std::int64_t{1}, std::int64_t{2}, std::int64_t{3}};
  EXPECT_EQ(db->Exec("INSERT INTO t (a, b) VALUES (?, ?)", three).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(db->Exec("SELECT 1", one).code(), absl::StatusCode::kInvalidArgument);
  // Nothing was inserted, and the connection still works.
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM t")), 0);
}

TEST_P(StoreConformanceTest, ConstraintViolationIsAlreadyExists) {
  std::unique_ptr<Database> db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(
      db->Exec("CREATE TABLE t (k TEXT PRIMARY KEY, u TEXT UNIQUE, n INTEGER NOT NULL)").ok());
  const Value first[] = {std::string("a"), std::string("u1"), std::int64_t{1}};
  ASSERT_TRUE(db->Exec("INSERT INTO t (k, u, n) VALUES (?, ?, ?)", first).ok());
  absl::Status duplicate = db->Exec("INSERT INTO t (k, u, n) VALUES (?, ?, ?)", first);
  EXPECT_EQ(duplicate.code(), absl::StatusCode::kAlreadyExists) << duplicate;
  EXPECT_THAT(std::string(duplicate.message()), HasSubstr("INSERT INTO t"));
  EXPECT_THAT(std::string(duplicate.message()), HasSubstr(db->where()));
  const Value same_unique[] = {std::string("b"), std::string("u1"), std::int64_t{1}};
  EXPECT_EQ(db->Exec("INSERT INTO t (k, u, n) VALUES (?, ?, ?)", same_unique).code(),
            absl::StatusCode::kAlreadyExists);
  const Value null_n[] = {std::string("c"), std::string("u3"), Value{}};
  EXPECT_EQ(db->Exec("INSERT INTO t (k, u, n) VALUES (?, ?, ?)", null_n).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM t")), 1);
}

TEST_P(StoreConformanceTest, ForeignKeysAreEnforced) {
  std::unique_ptr<Database> db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE p (k TEXT PRIMARY KEY)").ok());
  ASSERT_TRUE(db->Exec("CREATE TABLE c (p TEXT REFERENCES p(k) ON DELETE CASCADE)").ok());
  const Value missing[] = {std::string("nope")};
  EXPECT_EQ(db->Exec("INSERT INTO c (p) VALUES (?)", missing).code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(db->Exec("INSERT INTO p (k) VALUES ('x')").ok());
  ASSERT_TRUE(db->Exec("INSERT INTO c (p) VALUES ('x')").ok());
  ASSERT_TRUE(db->Exec("DELETE FROM p WHERE k = 'x'").ok());
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM c")), 0);
}

TEST_P(StoreConformanceTest, BadStatementNamesTheStatementAndTheDatabase) {
  std::unique_ptr<Database> db = Open();
  ASSERT_NE(db, nullptr);
  absl::Status bad = db->Exec("SELEKT everything FROM nowhere");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), absl::StatusCode::kInternal) << bad;
  EXPECT_THAT(std::string(bad.message()), HasSubstr("SELEKT everything"));
  EXPECT_THAT(std::string(bad.message()), HasSubstr(db->where()));
  absl::Status no_table = db->Exec("SELECT * FROM missing_table");
  EXPECT_FALSE(no_table.ok());
  EXPECT_THAT(std::string(no_table.message()), HasSubstr("missing_table"));
}

TEST_P(StoreConformanceTest, TransactionRollsBackUnlessCommitted) {
  std::unique_ptr<Database> db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE t (v INTEGER)").ok());
  {
    Transaction txn(*db);
    ASSERT_TRUE(txn.status().ok()) << txn.status();
    ASSERT_TRUE(db->Exec("INSERT INTO t (v) VALUES (1)").ok());
    EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM t")), 1);  // visible inside
  }
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM t")), 0);
  {
    Transaction txn(*db);
    ASSERT_TRUE(txn.status().ok()) << txn.status();
    ASSERT_TRUE(db->Exec("INSERT INTO t (v) VALUES (2)").ok());
    ASSERT_TRUE(txn.Commit().ok());
  }
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM t")), 1);
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT v FROM t")), 2);
  // After a commit or rollback the connection takes a new transaction.
  ASSERT_TRUE(db->Begin().ok());
  ASSERT_TRUE(db->Exec("INSERT INTO t (v) VALUES (3)").ok());
  ASSERT_TRUE(db->Rollback().ok());
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM t")), 1);
}

TEST_P(StoreConformanceTest, TransactionsDoNotNestAndAFailedBeginLeavesTheOuterOneAlone) {
  std::unique_ptr<Database> db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE t (v INTEGER)").ok());
  Transaction outer(*db);
  ASSERT_TRUE(outer.status().ok());
  ASSERT_TRUE(db->Exec("INSERT INTO t (v) VALUES (1)").ok());
  {
    Transaction inner(*db);
    EXPECT_FALSE(inner.status().ok());
    EXPECT_FALSE(inner.Commit().ok());  // Commit reports the failed Begin
  }                                     // must not roll back the outer transaction
  ASSERT_TRUE(db->Exec("INSERT INTO t (v) VALUES (2)").ok());
  // Nothing is committed yet: another connection sees no row.
  std::unique_ptr<Database> other = Open();
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(AsInt(Scalar(*other, "SELECT COUNT(*) FROM t")), 0);
  ASSERT_TRUE(outer.Commit().ok());
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM t")), 2);
}

// Regression (Transaction, failed Commit; fixed): input: a Transaction whose COMMIT fails and
// leaves SQLite's transaction open (here a deferred foreign key violation; SQLITE_BUSY on COMMIT
// does the same); expected: the Transaction is not committed, so its destructor rolls back ("rolls
// back on destruction unless committed"), the row is gone and the next Transaction begins; before
// the fix: Transaction::Commit sets done_ before calling Database::Commit, so the destructor skips
// the rollback, the connection stays inside the failed transaction (the row is still visible) and
// every later Begin fails with "cannot start a transaction within a transaction", which would
// make every later write of the allocation service fail.
TEST_P(StoreConformanceTest, FailedCommitIsRolledBackOnDestruction) {
  std::unique_ptr<Database> db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE p (k TEXT PRIMARY KEY)").ok());
  ASSERT_TRUE(
      db->Exec("CREATE TABLE c (p TEXT REFERENCES p(k) DEFERRABLE INITIALLY DEFERRED)").ok());
  {
    Transaction txn(*db);
    ASSERT_TRUE(txn.status().ok());
    ASSERT_TRUE(db->Exec("INSERT INTO c (p) VALUES ('missing')").ok());  // checked at COMMIT
    absl::Status commit = txn.Commit();
    EXPECT_EQ(commit.code(), absl::StatusCode::kAlreadyExists) << commit;
  }
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM c")), 0);
  Transaction next(*db);
  EXPECT_TRUE(next.status().ok()) << next.status();
}

TEST_P(StoreConformanceTest, MigrateCreatesTheSchemaAndRecordsItsVersion) {
  std::unique_ptr<Database> db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_GE(SchemaVersion(), 1);
  absl::StatusOr<int> before = CurrentVersion(*db);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(*before, 0);
  ASSERT_TRUE(Migrate(*db).ok());
  const std::vector<std::string> tables = Tables(*db);
  for (const char* table :
       {"tenants", "quotas", "users", "classes", "leases", "queue", "audit", "schema_version"}) {
    EXPECT_NE(std::find(tables.begin(), tables.end(), table), tables.end()) << table;
  }
  absl::StatusOr<int> after = CurrentVersion(*db);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*after, SchemaVersion());
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT MAX(version) FROM schema_version")), SchemaVersion());
  // The tables take rows with the columns the service uses.
  EXPECT_TRUE(db->Exec("INSERT INTO tenants (name, may_take_full, priority, max_gib, created_at) "
                       "VALUES ('a', 0, 0, 1.5, 1)")
                  .ok());
  EXPECT_DOUBLE_EQ(AsDouble(Scalar(*db, "SELECT max_gib FROM tenants WHERE name = 'a'")), 1.5);
}

TEST_P(StoreConformanceTest, MigrateIsIdempotent) {
  std::unique_ptr<Database> db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(Migrate(*db).ok());
  ASSERT_TRUE(db->Exec("INSERT INTO classes (name, spec) VALUES ('c', '{}')").ok());
  const std::int64_t rows = AsInt(Scalar(*db, "SELECT COUNT(*) FROM schema_version"));
  absl::Status again = Migrate(*db);
  EXPECT_TRUE(again.ok()) << again;
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM schema_version")), rows);
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM classes")), 1);  // data untouched
  absl::StatusOr<int> version = CurrentVersion(*db);
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, SchemaVersion());
}

TEST_P(StoreConformanceTest, MigrateRefusesANewerDatabase) {
  std::unique_ptr<Database> db = Open();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(Migrate(*db).ok());
  const Value newer[] = {std::int64_t{SchemaVersion() + 1}};
  ASSERT_TRUE(db->Exec("INSERT INTO schema_version (version) VALUES (?)", newer).ok());
  absl::Status status = Migrate(*db);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("schema version " + std::to_string(SchemaVersion() + 1)));
  EXPECT_THAT(std::string(status.message()), HasSubstr(db->where()));
  absl::StatusOr<int> version = CurrentVersion(*db);
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, SchemaVersion() + 1);  // nothing was rewritten
}

TEST_P(StoreConformanceTest, FailedMigrationStepLeavesNothingBehind) {
  std::unique_ptr<Database> db = Open();
  ASSERT_NE(db, nullptr);
  // A table of the last statement's name makes step 1 fail after its first statements ran.
  ASSERT_TRUE(db->Exec("CREATE TABLE audit (x INTEGER)").ok());
  absl::Status status = Migrate(*db);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("schema version 1"));
  const std::vector<std::string> tables = Tables(*db);
  EXPECT_EQ(std::find(tables.begin(), tables.end(), "tenants"), tables.end());
  EXPECT_EQ(std::find(tables.begin(), tables.end(), "leases"), tables.end());
  absl::StatusOr<int> version = CurrentVersion(*db);
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, 0);
  // With the obstacle gone the migration goes through.
  ASSERT_TRUE(db->Exec("DROP TABLE audit").ok());
  EXPECT_TRUE(Migrate(*db).ok());
}

TEST_P(StoreConformanceTest, CommittedDataSurvivesClosingAndReopeningUncommittedDoesNot) {
  {
    std::unique_ptr<Database> db = Open();
    ASSERT_NE(db, nullptr);
    ASSERT_TRUE(Migrate(*db).ok());
    Transaction txn(*db);
    ASSERT_TRUE(txn.status().ok());
    const Value params[] = {std::string("team-a"), std::int64_t{1}, std::int64_t{5}, 40.5,
                            std::int64_t{1700000000}};
    ASSERT_TRUE(db->Exec("INSERT INTO tenants (name, may_take_full, priority, max_gib, created_at) "
                         "VALUES (?, ?, ?, ?, ?)",
                         params)
                    .ok());
    ASSERT_TRUE(txn.Commit().ok());
    // Left uncommitted when the connection closes: must not survive.
    ASSERT_TRUE(db->Begin().ok());
    ASSERT_TRUE(db->Exec("INSERT INTO tenants (name, may_take_full, priority, max_gib, "
                         "created_at) VALUES ('ghost', 0, 0, 0, 0)")
                    .ok());
  }
  std::unique_ptr<Database> db = Open();
  ASSERT_NE(db, nullptr);
  EXPECT_TRUE(Migrate(*db).ok());
  absl::StatusOr<Result> rows =
      db->Query("SELECT name, may_take_full, priority, max_gib, created_at FROM tenants");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->rows.size(), 1u);
  EXPECT_EQ(AsText(rows->rows[0][0]), "team-a");
  EXPECT_EQ(AsInt(rows->rows[0][1]), 1);
  EXPECT_EQ(AsInt(rows->rows[0][2]), 5);
  EXPECT_DOUBLE_EQ(AsDouble(rows->rows[0][3]), 40.5);
  EXPECT_EQ(AsInt(rows->rows[0][4]), 1700000000);
  absl::StatusOr<int> version = CurrentVersion(*db);
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, SchemaVersion());
}

TEST_P(StoreConformanceTest, ASecondConnectionSeesCommittedData) {
  std::unique_ptr<Database> writer = Open();
  std::unique_ptr<Database> reader = Open();
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(writer->Exec("CREATE TABLE t (v INTEGER)").ok());
  ASSERT_TRUE(writer->Begin().ok());
  ASSERT_TRUE(writer->Exec("INSERT INTO t (v) VALUES (7)").ok());
  EXPECT_EQ(AsInt(Scalar(*reader, "SELECT COUNT(*) FROM t")), 0);  // not yet committed
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_EQ(AsInt(Scalar(*reader, "SELECT v FROM t")), 7);
}

// The allocation service behaves the same on each: grant, queue, release, reopen, audit.
TEST_P(StoreConformanceTest, TheServiceGrantsQueuesAndSurvivesAReopen) {
  const hw::GpuModel* a100 = hw::Catalog::Builtin().Find("A100-80GB");
  ASSERT_NE(a100, nullptr);
  auto inventory = [&] {
    place::NodeSpec node;
    node.name = "gpu-1";
    node.model = "A100-80GB";
    node.cpu_milli = 64000;
    node.memory_mib = 262144;
    node.gpus = 1;
    node.mode = place::GpuMode::kMig;
    node.hardware = a100;
    return *place::Cluster::Create({node});
  };
  std::int64_t now = 1000;
  alloc::ServiceOptions options;
  options.clock = [&] { return now; };
  absl::StatusOr<std::unique_ptr<alloc::Service>> service =
      alloc::Service::Open(Open(), inventory(), options);
  ASSERT_TRUE(service.ok()) << service.status();
  const alloc::Caller admin{"root", "", alloc::Role::kAdmin, ""};
  alloc::TenantSpec team;
  team.name = "team-a";
  ASSERT_TRUE((*service)->PutTenant(admin, team).ok());
  const alloc::Caller user{"ann", "team-a", alloc::Role::kTenant, ""};
  alloc::AcquireRequest large;
  large.class_name = "large";
  large.purpose = "training run";
  absl::StatusOr<alloc::AcquireResult> first = (*service)->Acquire(user, large);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->outcome, alloc::AcquireResult::Outcome::kGranted);
  absl::StatusOr<alloc::AcquireResult> second = (*service)->Acquire(user, large);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->outcome, alloc::AcquireResult::Outcome::kQueued) << second->reason;
  EXPECT_EQ(second->queued.position, 1);
  service->reset();

  absl::StatusOr<std::unique_ptr<alloc::Service>> reopened =
      alloc::Service::Open(Open(), inventory(), options);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<std::vector<alloc::Lease>> leases = (*reopened)->Leases(user);
  ASSERT_TRUE(leases.ok());
  ASSERT_EQ(leases->size(), 1u);
  EXPECT_EQ(leases->front().id, first->lease.id);
  absl::StatusOr<std::vector<alloc::QueueEntry>> queue = (*reopened)->Queue(user);
  ASSERT_TRUE(queue.ok());
  ASSERT_EQ(queue->size(), 1u);
  ASSERT_TRUE((*reopened)->Release(user, first->lease.id).ok());
  leases = (*reopened)->Leases(user);
  ASSERT_TRUE(leases.ok());
  ASSERT_EQ(leases->size(), 1u);  // the queued request got the freed slice
  EXPECT_NE(leases->front().id, first->lease.id);
  absl::StatusOr<std::vector<alloc::AuditEvent>> audit = (*reopened)->Audit(admin, {});
  ASSERT_TRUE(audit.ok());
  std::vector<std::string> actions;
  for (const alloc::AuditEvent& event : *audit) actions.push_back(event.action);
  EXPECT_THAT(actions, ::testing::IsSupersetOf({"tenant.put", "grant", "queue", "release"}));
}

}  // namespace
}  // namespace gpuslice::store
