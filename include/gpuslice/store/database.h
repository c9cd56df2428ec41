// gpuslice/store/database.h
//
// The allocation service's durable store: a small SQL interface that the SQLite backend (the
// default: one file, WAL, every commit fsync'd before it returns) and the PostgreSQL backend
// implement with the same behaviour. SQL is written once, in the subset both dialects share, with
// `?` placeholders (a backend translates them to its own); integers are 64-bit.
//
// A Database is one connection and is not thread-safe: the service serialises its use.
// Statements fail with a Status naming the statement's first words and the database's message;
// nothing here aborts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpuslice::store {

// A SQL value: NULL, a 64-bit integer, a double or text.
using Value = std::variant<std::monostate, std::int64_t, double, std::string>;
using Row = std::vector<Value>;

struct Result {
  std::vector<std::string> columns;
  std::vector<Row> rows;
};

// Typed access to a cell; NULL reads as 0 / "". AsInt truncates a real, and reads one past the
// 64-bit range (or a text that is no number) as the nearest end (0), never undefined.
std::int64_t AsInt(const Value& value);
double AsDouble(const Value& value);
std::string AsText(const Value& value);

class Database {
 public:
  virtual ~Database() = default;
  // "sqlite" or "postgres".
  virtual std::string_view kind() const = 0;
  // Where the data lives, for messages ("gpuslice.db", "postgres://host/db" without password).
  virtual std::string where() const = 0;
  // Runs one statement with `?` parameters and returns its rows (none for DML/DDL).
  virtual absl::StatusOr<Result> Query(std::string_view sql,
                                       std::span<const Value> params = {}) = 0;
  absl::Status Exec(std::string_view sql, std::span<const Value> params = {}) {
    return Query(sql, params).status();
  }
  // Transactions do not nest. Commit returns only once the data is durable.
  virtual absl::Status Begin() = 0;
  virtual absl::Status Commit() = 0;
  virtual absl::Status Rollback() = 0;
};

// Begins on construction; rolls back on destruction unless committed.
class Transaction {
 public:
  explicit Transaction(Database& db) : db_(db) { status_ = db_.Begin(); }
  ~Transaction() {
    if (status_.ok() && !done_) (void)db_.Rollback();
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  const absl::Status& status() const { return status_; }
  // On failure the transaction is rolled back, so the connection is usable again.
  absl::Status Commit() {
    if (!status_.ok()) return status_;
    if (done_) return absl::FailedPreconditionError("transaction already finished");
    done_ = true;
    absl::Status status = db_.Commit();
    if (!status.ok()) (void)db_.Rollback();
    return status;
  }

 private:
  Database& db_;
  absl::Status status_;
  bool done_ = false;
};

// Opens (creating if needed) an SQLite database file: WAL journal, synchronous=FULL (a commit is
// on disk when it returns), foreign keys on, a busy timeout for other processes.
absl::StatusOr<std::unique_ptr<Database>> OpenSqlite(const std::string& path);

// Connects to PostgreSQL with a libpq URL ("postgres://user@127.0.0.1:5432/gpuslice"); commits
// are durable (synchronous_commit = on). The password never appears in where() or messages.
absl::StatusOr<std::unique_ptr<Database>> OpenPostgres(const std::string& url);

// "postgres://..." or "postgresql://..." opens PostgreSQL; anything else is an SQLite file path.
absl::StatusOr<std::unique_ptr<Database>> OpenDatabase(const std::string& target);

// The schema's current version, and the migrations that bring a database to it. Migrate runs
// every missing step in one transaction each and records the version; a database newer than this
// binary is refused (FailedPrecondition), so an old binary never writes a newer schema.
int SchemaVersion();
absl::Status Migrate(Database& db);
// The version recorded in the database (0 for an empty one).
absl::StatusOr<int> CurrentVersion(Database& db);

}  // namespace gpuslice::store
