// The allocation service's store (gpuslice/store/database.h): the SQLite backend (file creation,
// WAL and synchronous=FULL, typed values, parameter checks, error codes, transactions, durability
// across reopening) and the schema migrations.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "gpuslice/store/database.h"

namespace gpuslice::store {
namespace {

using ::testing::HasSubstr;

// A fresh directory per test, removed afterwards.
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "gpuslice_store_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string Path(const std::string& name = "test.db") const { return dir_ + "/" + name; }

  static std::unique_ptr<Database> Open(const std::string& path) {
    absl::StatusOr<std::unique_ptr<Database>> db = OpenSqlite(path);
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? *std::move(db) : nullptr;
  }

  // The single value of a one-row, one-column query.
  static Value Scalar(Database& db, const std::string& sql, std::vector<Value> params = {}) {
    absl::StatusOr<Result> result = db.Query(sql, params);
    EXPECT_TRUE(result.ok()) << sql << ": " << result.status();
    if (!result.ok() || result->rows.size() != 1 || result->rows[0].size() != 1) {
      ADD_FAILURE() << sql << ": not one row of one column";
      return Value{};
    }
    return result->rows[0][0];
  }

  static std::vector<std::string> Tables(Database& db) {
    absl::StatusOr<Result> result =
        db.Query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
    EXPECT_TRUE(result.ok()) << result.status();
    std::vector<std::string> names;
    if (result.ok()) {
      for (const Row& row : result->rows) names.push_back(AsText(row[0]));
    }
    return names;
  }

  std::string dir_;
};

TEST_F(StoreTest, OpenCreatesTheFileWithWalAndFullSync) {
  const std::string path = Path();
  ASSERT_FALSE(std::filesystem::exists(path));
  std::unique_ptr<Database> db = Open(path);
  ASSERT_NE(db, nullptr);
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(db->kind(), "sqlite");
  EXPECT_EQ(db->where(), path);
  EXPECT_EQ(AsText(Scalar(*db, "PRAGMA journal_mode")), "wal");
  EXPECT_EQ(AsInt(Scalar(*db, "PRAGMA synchronous")), 2);  // FULL
  EXPECT_EQ(AsInt(Scalar(*db, "PRAGMA foreign_keys")), 1);
  EXPECT_GT(AsInt(Scalar(*db, "PRAGMA busy_timeout")), 0);
}

TEST_F(StoreTest, QueryReturnsTypedValuesAndColumnNames) {
  std::unique_ptr<Database> db = Open(Path());
  ASSERT_NE(db, nullptr);
  absl::StatusOr<Result> literal = db->Query("SELECT 42 AS i, 2.5 AS d, 'text' AS t, NULL AS n");
  ASSERT_TRUE(literal.ok()) << literal.status();
  EXPECT_EQ(literal->columns, (std::vector<std::string>{"i", "d", "t", "n"}));
  ASSERT_EQ(literal->rows.size(), 1u);
  const Row& row = literal->rows[0];
  ASSERT_EQ(row.size(), 4u);
  ASSERT_TRUE(std::holds_alternative<std::int64_t>(row[0]));
  EXPECT_EQ(std::get<std::int64_t>(row[0]), 42);
  ASSERT_TRUE(std::holds_alternative<double>(row[1]));
  EXPECT_DOUBLE_EQ(std::get<double>(row[1]), 2.5);
  ASSERT_TRUE(std::holds_alternative<std::string>(row[2]));
  EXPECT_EQ(std::get<std::string>(row[2]), "text");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(row[3]));

  // The same through parameters, with values at the edges of their types.
  const std::string with_nul("a\0b\xc3\xa9", 5);
  const Value params[] = {std::int64_t{-9007199254740993LL}, 0.1, with_nul, Value{}};
  absl::StatusOr<Result> bound = db->Query("SELECT ? AS i, ? AS d, ? AS t, ? AS n", params);
  ASSERT_TRUE(bound.ok()) << bound.status();
  ASSERT_EQ(bound->rows.size(), 1u);
  EXPECT_EQ(bound->columns, (std::vector<std::string>{"i", "d", "t", "n"}));
  EXPECT_EQ(bound->rows[0][0], Value{std::int64_t{-9007199254740993LL}});
  EXPECT_EQ(bound->rows[0][1], Value{0.1});
  EXPECT_EQ(bound->rows[0][2], Value{with_nul});
  EXPECT_TRUE(std::holds_alternative<std::monostate>(bound->rows[0][3]));

  // DDL and DML return no rows; a SELECT returns every row in order.
  absl::StatusOr<Result> created = db->Query("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(created->rows.empty());
  for (std::int64_t k = 1; k <= 3; ++k) {
    const Value insert[] = {k, "v" + std::to_string(k)};
    ASSERT_TRUE(db->Exec("INSERT INTO t (k, v) VALUES (?, ?)", insert).ok());
  }
  absl::StatusOr<Result> rows = db->Query("SELECT k, v FROM t ORDER BY k DESC");
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->columns, (std::vector<std::string>{"k", "v"}));
  ASSERT_EQ(rows->rows.size(), 3u);
  EXPECT_EQ(AsInt(rows->rows[0][0]), 3);
  EXPECT_EQ(AsText(rows->rows[2][1]), "v1");
  absl::StatusOr<Result> none = db->Query("SELECT k FROM t WHERE k > 100");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->rows.empty());
  EXPECT_EQ(none->columns, (std::vector<std::string>{"k"}));
}

TEST(StoreValues, TypedAccessConvertsAndReadsNullAsZero) {
  EXPECT_EQ(AsInt(Value{}), 0);
  EXPECT_EQ(AsDouble(Value{}), 0.0);
  EXPECT_EQ(AsText(Value{}), "");
  EXPECT_EQ(AsInt(Value{std::int64_t{7}}), 7);
  EXPECT_EQ(AsInt(Value{std::string("42")}), 42);
  EXPECT_EQ(AsInt(Value{3.0}), 3);
  EXPECT_DOUBLE_EQ(AsDouble(Value{std::int64_t{5}}), 5.0);
  EXPECT_DOUBLE_EQ(AsDouble(Value{std::string("1.5")}), 1.5);
  EXPECT_EQ(AsText(Value{std::int64_t{-12}}), "-12");
  EXPECT_EQ(AsText(Value{std::string("x")}), "x");
}

TEST_F(StoreTest, ParameterCountMismatchIsInvalidArgument) {
  std::unique_ptr<Database> db = Open(Path());
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
  // Nothing was inserted.
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM t")), 0);
}

TEST_F(StoreTest, ConstraintViolationIsAlreadyExists) {
  std::unique_ptr<Database> db = Open(Path());
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(
      db->Exec("CREATE TABLE t (k TEXT PRIMARY KEY, u TEXT UNIQUE, n INTEGER NOT NULL)").ok());
  const Value first[] = {std::string("a"), std::string("u1"), std::int64_t{1}};
  ASSERT_TRUE(db->Exec("INSERT INTO t (k, u, n) VALUES (?, ?, ?)", first).ok());
  absl::Status duplicate = db->Exec("INSERT INTO t (k, u, n) VALUES (?, ?, ?)", first);
  EXPECT_EQ(duplicate.code(), absl::StatusCode::kAlreadyExists) << duplicate;
  EXPECT_THAT(std::string(duplicate.message()), HasSubstr("INSERT INTO t"));
  EXPECT_THAT(std::string(duplicate.message()), HasSubstr(Path()));
  const Value same_unique[] = {std::string("b"), std::string("u1"), std::int64_t{1}};
  EXPECT_EQ(db->Exec("INSERT INTO t (k, u, n) VALUES (?, ?, ?)", same_unique).code(),
            absl::StatusCode::kAlreadyExists);
  const Value null_n[] = {std::string("c"), std::string("u3"), Value{}};
  EXPECT_EQ(db->Exec("INSERT INTO t (k, u, n) VALUES (?, ?, ?)", null_n).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(AsInt(Scalar(*db, "SELECT COUNT(*) FROM t")), 1);
}

TEST_F(StoreTest, ForeignKeysAreEnforced) {
  std::unique_ptr<Database> db = Open(Path());
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

TEST_F(StoreTest, BadStatementNamesTheStatementAndTheDatabase) {
  std::unique_ptr<Database> db = Open(Path());
  ASSERT_NE(db, nullptr);
  absl::Status bad = db->Exec("SELEKT everything FROM nowhere");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), absl::StatusCode::kInternal) << bad;
  EXPECT_THAT(std::string(bad.message()), HasSubstr("SELEKT everything"));
  EXPECT_THAT(std::string(bad.message()), HasSubstr(Path()));
  absl::Status no_table = db->Exec("SELECT * FROM missing_table");
  EXPECT_FALSE(no_table.ok());
  EXPECT_THAT(std::string(no_table.message()), HasSubstr("missing_table"));
}

TEST_F(StoreTest, TransactionRollsBackUnlessCommitted) {
  std::unique_ptr<Database> db = Open(Path());
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

TEST_F(StoreTest, TransactionsDoNotNestAndAFailedBeginLeavesTheOuterOneAlone) {
  std::unique_ptr<Database> db = Open(Path());
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
TEST_F(StoreTest, FailedCommitIsRolledBackOnDestruction) {
  std::unique_ptr<Database> db = Open(Path());
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

TEST_F(StoreTest, MigrateCreatesTheSchemaAndRecordsItsVersion) {
  std::unique_ptr<Database> db = Open(Path());
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

TEST_F(StoreTest, MigrateIsIdempotent) {
  std::unique_ptr<Database> db = Open(Path());
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

TEST_F(StoreTest, MigrateRefusesANewerDatabase) {
  std::unique_ptr<Database> db = Open(Path());
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(Migrate(*db).ok());
  const Value newer[] = {std::int64_t{SchemaVersion() + 1}};
  ASSERT_TRUE(db->Exec("INSERT INTO schema_version (version) VALUES (?)", newer).ok());
  absl::Status status = Migrate(*db);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("schema version " + std::to_string(SchemaVersion() + 1)));
  EXPECT_THAT(std::string(status.message()), HasSubstr(Path()));
  absl::StatusOr<int> version = CurrentVersion(*db);
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, SchemaVersion() + 1);  // nothing was rewritten
}

TEST_F(StoreTest, FailedMigrationStepLeavesNothingBehind) {
  std::unique_ptr<Database> db = Open(Path());
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

TEST_F(StoreTest, DataSurvivesClosingAndReopening) {
  const std::string path = Path();
  {
    std::unique_ptr<Database> db = Open(path);
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
  std::unique_ptr<Database> db = Open(path);
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

TEST_F(StoreTest, ASecondConnectionSeesCommittedData) {
  std::unique_ptr<Database> writer = Open(Path());
  std::unique_ptr<Database> reader = Open(Path());
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(writer->Exec("CREATE TABLE t (v INTEGER)").ok());
  ASSERT_TRUE(writer->Begin().ok());
  ASSERT_TRUE(writer->Exec("INSERT INTO t (v) VALUES (7)").ok());
  EXPECT_EQ(AsInt(Scalar(*reader, "SELECT COUNT(*) FROM t")), 0);  // not yet committed
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_EQ(AsInt(Scalar(*reader, "SELECT v FROM t")), 7);
}

TEST_F(StoreTest, OpeningAPathInAMissingDirectoryFailsNamingThePath) {
  const std::string path = dir_ + "/no/such/dir/gpuslice.db";
  absl::StatusOr<std::unique_ptr<Database>> db = OpenSqlite(path);
  ASSERT_FALSE(db.ok());
  EXPECT_THAT(std::string(db.status().message()), HasSubstr(path));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/no"));
}

}  // namespace
}  // namespace gpuslice::store
