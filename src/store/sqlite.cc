// The SQLite backend of store::Database.
#include <sqlite3.h>

#include <functional>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gpuslice/store/database.h"

namespace gpuslice::store {
namespace {

std::string FirstWords(std::string_view sql) {
  std::string_view head = sql.substr(0, 48);
  while (!head.empty() && (head.front() == ' ' || head.front() == '\n')) head.remove_prefix(1);
  std::string text(head);
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  return sql.size() > 48 ? text + "..." : text;
}

class SqliteDatabase final : public Database {
 public:
  SqliteDatabase(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  ~SqliteDatabase() override {
    for (auto& [sql, statement] : prepared_) sqlite3_finalize(statement);
    sqlite3_close_v2(db_);
  }

  std::string_view kind() const override { return "sqlite"; }
  std::string where() const override { return path_; }

  absl::StatusOr<Result> Query(std::string_view sql, std::span<const Value> params) override {
    sqlite3_stmt* statement = Prepared(sql);
    if (statement == nullptr) return Error(sql);
    // Ready for the next use, and holding no lock, whatever happens below.
    struct Resetter {
      sqlite3_stmt* s;
      ~Resetter() {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
      }
    } resetter{statement};
    if (static_cast<size_t>(sqlite3_bind_parameter_count(statement)) != params.size()) {
      return absl::InvalidArgumentError(absl::StrCat("sqlite: '", FirstWords(sql), "' takes ",
                                                     sqlite3_bind_parameter_count(statement),
                                                     " parameters, ", params.size(), " given"));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const int index = static_cast<int>(i) + 1;
      int rc = SQLITE_OK;
      if (const auto* integer = std::get_if<std::int64_t>(&params[i])) {
        rc = sqlite3_bind_int64(statement, index, *integer);
      } else if (const auto* real = std::get_if<double>(&params[i])) {
        rc = sqlite3_bind_double(statement, index, *real);
      } else if (const auto* text = std::get_if<std::string>(&params[i])) {
        rc = sqlite3_bind_text(statement, index, text->data(), static_cast<int>(text->size()),
                               SQLITE_TRANSIENT);
      } else {
        rc = sqlite3_bind_null(statement, index);
      }
      if (rc != SQLITE_OK) return Error(sql);
    }
    Result result;
    const int columns = sqlite3_column_count(statement);
    for (int c = 0; c < columns; ++c)
      result.columns.emplace_back(sqlite3_column_name(statement, c));
    for (;;) {
      const int rc = sqlite3_step(statement);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return Error(sql);
      Row row;
      row.reserve(static_cast<size_t>(columns));
      for (int c = 0; c < columns; ++c) {
        switch (sqlite3_column_type(statement, c)) {
          case SQLITE_INTEGER:
            row.emplace_back(static_cast<std::int64_t>(sqlite3_column_int64(statement, c)));
            break;
          case SQLITE_FLOAT:
            row.emplace_back(sqlite3_column_double(statement, c));
            break;
          case SQLITE_NULL:
            row.emplace_back(std::monostate{});
            break;
          default: {
            const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(statement, c));
            row.emplace_back(std::string(text == nullptr ? "" : text,
                                         static_cast<size_t>(sqlite3_column_bytes(statement, c))));
          }
        }
      }
      result.rows.push_back(std::move(row));
    }
    return result;
  }

  absl::Status Begin() override { return Exec("BEGIN IMMEDIATE"); }
  absl::Status Commit() override { return Exec("COMMIT"); }
  absl::Status Rollback() override { return Exec("ROLLBACK"); }

 private:
  // The statement compiled once per SQL text and kept (the service runs a few dozen distinct
  // statements over and over); null when it does not compile.
  sqlite3_stmt* Prepared(std::string_view sql) {
    auto it = prepared_.find(sql);
    if (it != prepared_.end()) return it->second;
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &statement, nullptr) !=
        SQLITE_OK) {
      sqlite3_finalize(statement);
      return nullptr;
    }
    if (prepared_.size() >= kMaxPrepared) {  // ad-hoc SQL: start over rather than grow
      for (auto& [text, kept] : prepared_) sqlite3_finalize(kept);
      prepared_.clear();
    }
    prepared_.emplace(std::string(sql), statement);
    return statement;
  }

  absl::Status Error(std::string_view sql) const {
    const int code = sqlite3_errcode(db_);
    const std::string message =
        absl::StrCat("sqlite (", path_, "): '", FirstWords(sql), "': ", sqlite3_errmsg(db_));
    if (code == SQLITE_CONSTRAINT) return absl::AlreadyExistsError(message);
    if (code == SQLITE_BUSY || code == SQLITE_LOCKED) return absl::UnavailableError(message);
    if (code == SQLITE_FULL || code == SQLITE_IOERR) return absl::DataLossError(message);
    return absl::InternalError(message);
  }

  static constexpr size_t kMaxPrepared = 256;
  sqlite3* db_;
  std::string path_;
  std::map<std::string, sqlite3_stmt*, std::less<>> prepared_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Database>> OpenSqlite(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = db == nullptr ? "out of memory" : sqlite3_errmsg(db);
    sqlite3_close_v2(db);
    return absl::UnavailableError(absl::StrCat("sqlite: cannot open ", path, ": ", message));
  }
  auto database = std::make_unique<SqliteDatabase>(db, path);
  sqlite3_busy_timeout(db, 5000);
  for (const char* pragma :
       {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON"}) {
    if (absl::Status status = database->Exec(pragma); !status.ok()) return status;
  }
  return database;
}

}  // namespace gpuslice::store
