// What only the PostgreSQL backend has, on a real server (tests/store/pg_server.h): parameters
// sent as text with `?` inside quotes left alone, column types from their OIDs, where() naming the
// server, and a bad URL failing without its password. The contract both backends share, and the
// allocation service on each, are tested in conformance_test.cc.
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gpuslice/store/database.h"
#include "gtest/gtest.h"
#include "pg_server.h"
#include "require.h"

namespace gpuslice::store {
namespace {

using test_server::PostgresEnvironment;
using ::testing::HasSubstr;

const auto* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new PostgresEnvironment);  // NOLINT: owned by gtest

class PostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (PostgresEnvironment::url().empty()) {
      GPUSLICE_SKIP_OR_FAIL_IN_CI("no PostgreSQL server available");
    }
    absl::StatusOr<std::unique_ptr<Database>> db = OpenPostgres(PostgresEnvironment::url());
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = *std::move(db);
    // A clean schema per test.
    ASSERT_TRUE(db_->Exec("DROP SCHEMA public CASCADE").ok());
    ASSERT_TRUE(db_->Exec("CREATE SCHEMA public").ok());
  }
  std::unique_ptr<Database> db_;
};

TEST_F(PostgresTest, TypedValuesAndParameters) {
  ASSERT_TRUE(db_->Exec("CREATE TABLE t (i BIGINT, d DOUBLE PRECISION, s TEXT)").ok());
  const Value row[] = {std::int64_t{-42}, 2.5, std::string("it's ? here")};
  ASSERT_TRUE(db_->Exec("INSERT INTO t (i, d, s) VALUES (?, ?, ?)", row).ok());
  const Value null_row[] = {std::monostate{}, std::monostate{}, std::monostate{}};
  ASSERT_TRUE(db_->Exec("INSERT INTO t (i, d, s) VALUES (?, ?, ?)", null_row).ok());
  absl::StatusOr<Result> result =
      db_->Query("SELECT i, d, s FROM t WHERE s = '?' OR s IS NOT NULL");
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->rows.size(), 1u);
  EXPECT_EQ(std::get<std::int64_t>(result->rows[0][0]), -42);
  EXPECT_EQ(std::get<double>(result->rows[0][1]), 2.5);
  EXPECT_EQ(std::get<std::string>(result->rows[0][2]), "it's ? here");
  EXPECT_EQ(result->columns, (std::vector<std::string>{"i", "d", "s"}));
  absl::StatusOr<Result> nulls = db_->Query("SELECT i, s FROM t WHERE i IS NULL");
  ASSERT_TRUE(nulls.ok());
  ASSERT_EQ(nulls->rows.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(nulls->rows[0][0]));
  EXPECT_EQ(db_->kind(), "postgres");
  EXPECT_THAT(db_->where(), HasSubstr("127.0.0.1"));
}

TEST_F(PostgresTest, BadUrlFailsWithoutThePassword) {
  absl::StatusOr<std::unique_ptr<Database>> db =
      OpenPostgres("postgres://someone:secret-pw@127.0.0.1:1/none?connect_timeout=2");
  ASSERT_FALSE(db.ok());
  EXPECT_TRUE(absl::IsUnavailable(db.status()));
  EXPECT_THAT(std::string(db.status().message()), ::testing::Not(HasSubstr("secret-pw")));
}

}  // namespace
}  // namespace gpuslice::store
