// The PostgreSQL backend of store::Database, over libpq. `?` placeholders become $1, $2, ...;
// values travel as text; result columns are typed by their OIDs (integers, floating point, text).
#include <libpq-fe.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gpuslice/store/database.h"

namespace gpuslice::store {
namespace {

// OIDs of the built-in types (pg_type.h).
constexpr Oid kInt8 = 20;
constexpr Oid kInt2 = 21;
constexpr Oid kInt4 = 23;
constexpr Oid kFloat4 = 700;
constexpr Oid kFloat8 = 701;
constexpr Oid kNumeric = 1700;
constexpr Oid kBool = 16;

// "?" -> "$n", outside quoted strings; `*placeholders` is n.
std::string Translate(std::string_view sql, size_t* placeholders) {
  std::string out;
  out.reserve(sql.size() + 8);
  int n = 0;
  bool quoted = false;
  for (char c : sql) {
    if (c == '\'') quoted = !quoted;
    if (c == '?' && !quoted) {
      absl::StrAppend(&out, "$", ++n);
    } else {
      out.push_back(c);
    }
  }
  *placeholders = static_cast<size_t>(n);
  return out;
}

std::string FirstWords(std::string_view sql) {
  std::string text(sql.substr(0, 48));
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  return sql.size() > 48 ? text + "..." : text;
}

class PostgresDatabase final : public Database {
 public:
  PostgresDatabase(PGconn* conn, std::string where) : conn_(conn), where_(std::move(where)) {}
  ~PostgresDatabase() override { PQfinish(conn_); }

  std::string_view kind() const override { return "postgres"; }
  std::string where() const override { return where_; }

  absl::StatusOr<Result> Query(std::string_view sql, std::span<const Value> params) override {
    size_t placeholders = 0;
    const std::string translated = Translate(sql, &placeholders);
    // Checked here, as SQLite does: the server would answer a protocol violation (08P01), which
    // reads as a lost connection.
    if (placeholders != params.size()) {
      return absl::InvalidArgumentError(absl::StrCat("postgres (", where_, "): '", FirstWords(sql),
                                                     "' takes ", placeholders, " parameters, ",
                                                     params.size(), " given"));
    }
    std::vector<std::string> texts(params.size());
    std::vector<const char*> values(params.size(), nullptr);
    for (size_t i = 0; i < params.size(); ++i) {
      if (const auto* integer = std::get_if<std::int64_t>(&params[i])) {
        texts[i] = std::to_string(*integer);
      } else if (const auto* real = std::get_if<double>(&params[i])) {
        char buffer[40];
        std::snprintf(buffer, sizeof buffer, "%.17g", *real);
        texts[i] = buffer;
      } else if (const auto* text = std::get_if<std::string>(&params[i])) {
        texts[i] = *text;
      } else {
        continue;  // NULL
      }
      values[i] = texts[i].c_str();
    }
    PGresult* result = PQexecParams(conn_, translated.c_str(), static_cast<int>(params.size()),
                                    nullptr, values.data(), nullptr, nullptr, 0);
    struct Clear {
      PGresult* r;
      ~Clear() { PQclear(r); }
    } clear{result};
    const ExecStatusType status = PQresultStatus(result);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) return Error(sql, result);
    Result out;
    const int columns = PQnfields(result);
    for (int c = 0; c < columns; ++c) out.columns.emplace_back(PQfname(result, c));
    const int rows = PQntuples(result);
    for (int r = 0; r < rows; ++r) {
      Row row;
      row.reserve(static_cast<size_t>(columns));
      for (int c = 0; c < columns; ++c) {
        if (PQgetisnull(result, r, c)) {
          row.emplace_back(std::monostate{});
          continue;
        }
        const char* text = PQgetvalue(result, r, c);
        switch (PQftype(result, c)) {
          case kInt8:
          case kInt4:
          case kInt2:
            row.emplace_back(static_cast<std::int64_t>(std::strtoll(text, nullptr, 10)));
            break;
          case kBool:
            row.emplace_back(static_cast<std::int64_t>(text[0] == 't' ? 1 : 0));
            break;
          case kFloat4:
          case kFloat8:
          case kNumeric:
            row.emplace_back(std::strtod(text, nullptr));
            break;
          default:
            row.emplace_back(std::string(text, static_cast<size_t>(PQgetlength(result, r, c))));
        }
      }
      out.rows.push_back(std::move(row));
    }
    return out;
  }

  // The server only warns about a BEGIN inside a transaction (and the inner COMMIT would then
  // commit the outer one): refused here, as SQLite refuses it.
  absl::Status Begin() override {
    if (PQtransactionStatus(conn_) != PQTRANS_IDLE) {
      return absl::FailedPreconditionError(absl::StrCat(
          "postgres (", where_, "): cannot begin a transaction: one is open (they do not nest)"));
    }
    return Exec("BEGIN");
  }
  absl::Status Commit() override { return Exec("COMMIT"); }
  // Nothing to undo after a COMMIT the server refused (it ended the transaction): no ROLLBACK,
  // which would only draw a warning on stderr.
  absl::Status Rollback() override {
    if (PQtransactionStatus(conn_) == PQTRANS_IDLE) return absl::OkStatus();
    return Exec("ROLLBACK");
  }

 private:
  absl::Status Error(std::string_view sql, PGresult* result) const {
    const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
    const std::string sqlstate = state == nullptr ? "" : state;
    std::string message = PQresultErrorMessage(result);
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
      message.pop_back();
    }
    const std::string text =
        absl::StrCat("postgres (", where_, "): '", FirstWords(sql), "': ", message);
    if (sqlstate.rfind("23", 0) == 0) return absl::AlreadyExistsError(text);
    if (sqlstate == "40001" || sqlstate == "40P01" || sqlstate.rfind("08", 0) == 0 ||
        PQstatus(conn_) != CONNECTION_OK) {
      return absl::UnavailableError(text);
    }
    if (sqlstate.rfind("53", 0) == 0) return absl::DataLossError(text);
    return absl::InternalError(text);
  }

  PGconn* conn_;
  std::string where_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Database>> OpenPostgres(const std::string& url) {
  PGconn* conn = PQconnectdb(url.c_str());
  if (conn == nullptr) return absl::UnavailableError("postgres: out of memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = PQerrorMessage(conn);
    while (!message.empty() && message.back() == '\n') message.pop_back();
    PQfinish(conn);
    return absl::UnavailableError(absl::StrCat("postgres: cannot connect: ", message));
  }
  // Where, without the password.
  const std::string where = absl::StrCat("postgres://", PQuser(conn), "@", PQhost(conn), ":",
                                         PQport(conn), "/", PQdb(conn));
  auto database = std::make_unique<PostgresDatabase>(conn, where);
  // Durable on commit (the server default; made explicit), quiet notices.
  for (const char* setting : {"SET synchronous_commit = on", "SET client_min_messages = warning"}) {
    if (absl::Status status = database->Exec(setting); !status.ok()) return status;
  }
  return database;
}

absl::StatusOr<std::unique_ptr<Database>> OpenDatabase(const std::string& target) {
  if (target.rfind("postgres://", 0) == 0 || target.rfind("postgresql://", 0) == 0) {
    return OpenPostgres(target);
  }
  return OpenSqlite(target);
}

}  // namespace gpuslice::store
