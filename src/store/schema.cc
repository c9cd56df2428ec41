// Schema migrations of the allocation service's store, written once in the SQL both SQLite and
// PostgreSQL accept.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gpuslice/store/database.h"

namespace gpuslice::store {
namespace {

// Each step is applied once, in order, in its own transaction. Never edit a released step: add one.
const std::vector<std::vector<std::string>>& Steps() {
  static const std::vector<std::vector<std::string>> steps = {
      // 1: tenancy, classes, leases, the queue and the audit log.
      {
          "CREATE TABLE tenants (name TEXT PRIMARY KEY, may_take_full INTEGER NOT NULL, "
          "priority INTEGER NOT NULL, max_gib DOUBLE PRECISION NOT NULL, created_at BIGINT NOT "
          "NULL)",
          "CREATE TABLE quotas (tenant TEXT NOT NULL REFERENCES tenants(name) ON DELETE CASCADE, "
          "class TEXT NOT NULL, max_slices INTEGER NOT NULL, PRIMARY KEY (tenant, class))",
          "CREATE TABLE users (name TEXT PRIMARY KEY, tenant TEXT REFERENCES tenants(name) ON "
          "DELETE CASCADE, role TEXT NOT NULL, token_hash TEXT NOT NULL UNIQUE, created_at BIGINT "
          "NOT NULL)",
          "CREATE TABLE classes (name TEXT PRIMARY KEY, spec TEXT NOT NULL)",
          "CREATE TABLE leases (id BIGINT PRIMARY KEY, tenant TEXT NOT NULL, user_name TEXT NOT "
          "NULL, class TEXT NOT NULL, purpose TEXT NOT NULL, request TEXT NOT NULL, node TEXT NOT "
          "NULL, claims TEXT NOT NULL, memory_gib DOUBLE PRECISION NOT NULL, granted_at BIGINT "
          "NOT NULL, expires_at BIGINT NOT NULL, ended_at BIGINT, state TEXT NOT NULL)",
          "CREATE INDEX leases_by_state ON leases (state, tenant)",
          "CREATE TABLE queue (id BIGINT PRIMARY KEY, tenant TEXT NOT NULL, user_name TEXT NOT "
          "NULL, class TEXT NOT NULL, purpose TEXT NOT NULL, request TEXT NOT NULL, priority "
          "INTEGER NOT NULL, ttl_s BIGINT NOT NULL, enqueued_at BIGINT NOT NULL, state TEXT NOT "
          "NULL)",
          "CREATE INDEX queue_by_state ON queue (state, class)",
          "CREATE TABLE audit (id BIGINT PRIMARY KEY, at BIGINT NOT NULL, actor TEXT NOT NULL, "
          "tenant TEXT NOT NULL, action TEXT NOT NULL, subject TEXT NOT NULL, purpose TEXT NOT "
          "NULL, detail TEXT NOT NULL)",
          "CREATE INDEX audit_by_tenant ON audit (tenant, at)",
      },
      // 2: what each lease's devices are on the machine (MIG UUIDs, GPU UUIDs), as JSON, and
      // the queue entry a lease was granted from (0: granted at once).
      {
          "ALTER TABLE leases ADD COLUMN bound TEXT NOT NULL DEFAULT '[]'",
          "ALTER TABLE leases ADD COLUMN from_queue BIGINT NOT NULL DEFAULT 0",
      },
      // 3: machines reported by agents (gpuslice agent), with their GPUs as JSON.
      {
          "CREATE TABLE nodes (host TEXT PRIMARY KEY, report TEXT NOT NULL, seen_at BIGINT NOT "
          "NULL)",
      },
      // 4: the fixed MIG layout an admin set for a machine, as JSON ('' = none).
      {
          "ALTER TABLE nodes ADD COLUMN layout TEXT NOT NULL DEFAULT ''",
      },
      // 5: usage history (gpuslice/alloc/usage.h): per lease, 1-minute buckets (kept a day) and
      // 1-hour buckets (kept 90 days) of sample counts, peaks and sums.
      {
          "CREATE TABLE usage (lease BIGINT NOT NULL, bucket_start BIGINT NOT NULL, bucket_s "
          "BIGINT NOT NULL, samples BIGINT NOT NULL, memory_peak_mib BIGINT NOT NULL, "
          "memory_sum_mib BIGINT NOT NULL, memory_total_mib BIGINT NOT NULL, activity_samples "
          "BIGINT NOT NULL, activity_peak_cpct BIGINT NOT NULL, activity_sum_cpct BIGINT NOT "
          "NULL, processes_peak BIGINT NOT NULL, PRIMARY KEY (lease, bucket_start, bucket_s))",
          "CREATE INDEX usage_by_age ON usage (bucket_s, bucket_start)",
      },
      // 6: an agent's token is bound to one machine ('' for other roles, and for agent tokens
      // made before binding, which the service refuses where a machine is named).
      {
          "ALTER TABLE users ADD COLUMN machine TEXT NOT NULL DEFAULT ''",
      },
      // 7: token lifecycle: when a user's current token was made (0: with the user) and when it
      // expires (0: never).
      {
          "ALTER TABLE users ADD COLUMN token_issued_at BIGINT NOT NULL DEFAULT 0",
          "ALTER TABLE users ADD COLUMN expires_at BIGINT NOT NULL DEFAULT 0",
      },
  };
  return steps;
}

}  // namespace

int SchemaVersion() { return static_cast<int>(Steps().size()); }

namespace {

// A real as an integer: truncated, and past int64's range (or NaN) the nearest end (NaN: 0), where
// a plain cast would be undefined.
std::int64_t ClampedInt(double real) {
  if (std::isnan(real)) return 0;
  if (real >= 9.2233720368547758e18) return std::numeric_limits<std::int64_t>::max();
  if (real <= -9.2233720368547758e18) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(real);
}

}  // namespace

std::int64_t AsInt(const Value& value) {
  if (const auto* integer = std::get_if<std::int64_t>(&value)) return *integer;
  if (const auto* real = std::get_if<double>(&value)) return ClampedInt(*real);
  if (const auto* text = std::get_if<std::string>(&value)) {
    std::int64_t parsed = 0;
    if (absl::SimpleAtoi(*text, &parsed)) return parsed;
    double as_real = 0;
    return absl::SimpleAtod(*text, &as_real) ? ClampedInt(as_real) : 0;
  }
  return 0;
}

double AsDouble(const Value& value) {
  if (const auto* real = std::get_if<double>(&value)) return *real;
  if (const auto* integer = std::get_if<std::int64_t>(&value)) {
    return static_cast<double>(*integer);
  }
  if (const auto* text = std::get_if<std::string>(&value)) return std::atof(text->c_str());
  return 0;
}

std::string AsText(const Value& value) {
  if (const auto* text = std::get_if<std::string>(&value)) return *text;
  if (const auto* integer = std::get_if<std::int64_t>(&value)) return std::to_string(*integer);
  if (const auto* real = std::get_if<double>(&value)) return std::to_string(*real);
  return "";
}

absl::StatusOr<int> CurrentVersion(Database& db) {
  if (absl::Status status =
          db.Exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)");
      !status.ok()) {
    return status;
  }
  absl::StatusOr<Result> rows = db.Query("SELECT MAX(version) FROM schema_version");
  if (!rows.ok()) return rows.status();
  if (rows->rows.empty()) return 0;
  return static_cast<int>(AsInt(rows->rows[0][0]));
}

absl::Status Migrate(Database& db) {
  absl::StatusOr<int> current = CurrentVersion(db);
  if (!current.ok()) return current.status();
  if (*current > SchemaVersion()) {
    return absl::FailedPreconditionError(absl::StrCat(db.where(), " has schema version ", *current,
                                                      "; this gpuslice knows up to ",
                                                      SchemaVersion(), ". Use a newer gpuslice."));
  }
  for (int version = *current + 1; version <= SchemaVersion(); ++version) {
    Transaction transaction(db);
    if (!transaction.status().ok()) return transaction.status();
    for (const std::string& statement : Steps()[static_cast<size_t>(version - 1)]) {
      if (absl::Status status = db.Exec(statement); !status.ok()) {
        return absl::InternalError(
            absl::StrCat("migration to schema version ", version, " failed: ", status.message()));
      }
    }
    const Value params[] = {std::int64_t{version}};
    if (absl::Status status = db.Exec("INSERT INTO schema_version (version) VALUES (?)", params);
        !status.ok()) {
      return status;
    }
    if (absl::Status status = transaction.Commit(); !status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace gpuslice::store
