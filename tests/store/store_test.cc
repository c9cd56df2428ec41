// What only the SQLite backend of gpuslice/store/database.h has: the file it creates, WAL and
// synchronous=FULL, the types of literals, a path in a missing directory; and the typed access to
// values. The contract both backends share is tested on each in conformance_test.cc.
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
#include "scalar.h"

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

TEST_F(StoreTest, OpeningAPathInAMissingDirectoryFailsNamingThePath) {
  const std::string path = dir_ + "/no/such/dir/gpuslice.db";
  absl::StatusOr<std::unique_ptr<Database>> db = OpenSqlite(path);
  ASSERT_FALSE(db.ok());
  EXPECT_THAT(std::string(db.status().message()), HasSubstr(path));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/no"));
}

}  // namespace
}  // namespace gpuslice::store
