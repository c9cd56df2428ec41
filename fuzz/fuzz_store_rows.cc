// The rows the allocation service reads back at startup (Service::Open, src/alloc/service.cc
// Load) on arbitrary values: a fresh in-memory SQLite store migrated to the current schema
// (gpuslice/store/database.h), rows inserted into the tables the service loads, then the service
// opened on it over a small inventory. The input is up to 32 rows split at NUL bytes; in each, the
// first byte chooses the table (tenants, quotas, users, classes, leases, queue, nodes, usage,
// audit) and the rest are its column values split at tabs, each replacing the value of a row the
// service itself writes where it is not empty: NULL, an integer, a real number (with '.' or an
// exponent) or else text. A row the schema refuses is left out.
// Beside the sanitizers: Open either succeeds or returns an error Status, and no exception
// escapes; an opened service answers its admin's reads of the state it loaded.
// Its runs found four defects, fixed in 14f8999 and 5a9c45a (a JSON column of another shape threw
// out of Load; the largest stored id + 1 overflowed; store::AsInt cast a real past int64's range;
// a JSON number too large for an integer field, such as a lease request's "vram_mib": 1e300, was
// cast past its range): the inputs that showed them are in the seed corpus
// (fuzz/corpus/fuzz_store_rows/known_*), and tests/alloc/stored_rows_test.cc has each.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "fuzz_util.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/store/database.h"

namespace {

using gpuslice::fuzz::Node;

using gpuslice::store::Value;

struct Table {
  const char* name;
  std::vector<const char*> columns;
  std::vector<Value> row;  // as the service writes one
};

const std::vector<Table>& Tables() {
  static const std::vector<Table>* tables = new std::vector<Table>{
      {"tenants",
       {"name", "may_take_full", "priority", "max_gib", "created_at"},
       {std::string("team-a"), std::int64_t{0}, std::int64_t{0}, 0.0, std::int64_t{1700000000}}},
      {"quotas",
       {"tenant", "class", "max_slices"},
       {std::string("team-a"), std::string("small"), std::int64_t{2}}},
      {"users",
       {"name", "tenant", "role", "token_hash", "created_at", "machine", "token_issued_at",
        "expires_at"},
       {std::string("ann"), std::string("team-a"), std::string("tenant"),
        std::string("0b52e8a7a2a5d6b3b3a1c8b55e8f8c1f0a7f7e7d2c6f0e5b9a8d7c6b5a4f3e2d"),
        std::int64_t{1700000000}, std::string(""), std::int64_t{0}, std::int64_t{0}}},
      {"classes",
       {"name", "spec"},
       {std::string("small"),
        std::string(R"({"full":false,"idle_timeout_s":0,"max_lease_s":28800,)"
                    R"("mig":{"A100-80GB":"1g.10gb","H100-80GB":"1g.10gb"},"share_milli":0,)"
                    R"("vram_mib":0})")}},
      {"leases",
       {"id", "tenant", "user_name", "class", "purpose", "request", "node", "claims", "memory_gib",
        "granted_at", "expires_at", "ended_at", "state", "bound", "from_queue"},
       {std::int64_t{1}, std::string("team-a"), std::string("ann"), std::string("small"),
        std::string("p"),
        std::string(R"({"class":"small","profile":"","purpose":"p","share_milli":0,)"
                    R"("ttl_s":3600,"vram_mib":0})"),
        std::string("n1"),
        std::string(R"([{"gpu":0,"mig_profile":0,"mig_start":0,"milli":142,"vram_mib":0,)"
                    R"("whole":false}])"),
        9.75, std::int64_t{1700000000}, std::int64_t{1700003600}, std::monostate{},
        std::string("active"), std::string("[]"), std::int64_t{0}}},
      {"queue",
       {"id", "tenant", "user_name", "class", "purpose", "request", "priority", "ttl_s",
        "enqueued_at", "state"},
       {std::int64_t{1}, std::string("team-a"), std::string("ann"), std::string("small"),
        std::string("q"),
        std::string(R"({"class":"small","profile":"","purpose":"q","share_milli":0,)"
                    R"("ttl_s":3600,"vram_mib":0})"),
        std::int64_t{0}, std::int64_t{3600}, std::int64_t{1700000000}, std::string("queued")}},
      {"nodes",
       {"host", "report", "seen_at", "layout"},
       {std::string("r1"),
        std::string(R"({"cpu_milli":64000,"gpus":[{"index":0,"mig":true,"model":"H100-80GB",)"
                    R"("uuid":"GPU-7d9b1c2e-0000-4000-8000-000000000000"}],"memory_mib":512000})"),
        std::int64_t{1700000000}, std::string("")}},
      {"usage",
       {"lease", "bucket_start", "bucket_s", "samples", "memory_peak_mib", "memory_sum_mib",
        "memory_total_mib", "activity_samples", "activity_peak_cpct", "activity_sum_cpct",
        "processes_peak"},
       {std::int64_t{1}, std::int64_t{1699999980}, std::int64_t{60}, std::int64_t{1},
        std::int64_t{100}, std::int64_t{100}, std::int64_t{1000}, std::int64_t{1}, std::int64_t{50},
        std::int64_t{50}, std::int64_t{1}}},
      {"audit",
       {"id", "at", "actor", "tenant", "action", "subject", "purpose", "detail"},
       {std::int64_t{1}, std::int64_t{1700000000}, std::string("root"), std::string("team-a"),
        std::string("grant"), std::string("lease 1"), std::string("p"), std::string("{}")}},
  };
  return *tables;
}

Value Parse(std::string_view text) {
  const absl::string_view view(text.data(), text.size());
  if (text == "NULL") return std::monostate{};
  std::int64_t integer = 0;
  if (absl::SimpleAtoi(view, &integer)) return integer;
  double real = 0;
  if (text.find_first_of(".eE") != std::string_view::npos && absl::SimpleAtod(view, &real)) {
    return real;
  }
  return std::string(text);
}

void Insert(gpuslice::store::Database& db, std::string_view record) {
  const Table& table = Tables()[static_cast<std::uint8_t>(record[0]) % Tables().size()];
  record.remove_prefix(1);
  std::vector<Value> row = table.row;
  for (std::size_t column = 0; column < row.size() && !record.empty(); ++column) {
    const std::size_t tab = record.find('\t');
    const std::string_view field = record.substr(0, tab);
    if (!field.empty()) row[column] = Parse(field);
    record = tab == std::string_view::npos ? std::string_view() : record.substr(tab + 1);
  }
  std::string sql = std::string("INSERT INTO ") + table.name + " (";
  std::string marks;
  for (std::size_t i = 0; i < table.columns.size(); ++i) {
    sql += (i > 0 ? ", " : "") + std::string(table.columns[i]);
    marks += i > 0 ? ", ?" : "?";
  }
  sql += ") VALUES (" + marks + ")";
  (void)db.Exec(sql, row);  // a row the schema refuses is left out
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return 0;
  absl::StatusOr<std::unique_ptr<gpuslice::store::Database>> db =
      gpuslice::store::OpenSqlite(":memory:");
  if (!db.ok() || !gpuslice::store::Migrate(**db).ok()) std::abort();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  int rows = 0;
  for (std::size_t at = 0; at < input.size() && rows < 32; ++rows) {
    std::size_t end = input.find('\0', at);
    if (end == std::string_view::npos) end = input.size();
    if (end > at) Insert(**db, input.substr(at, end - at));
    at = end + 1;
  }
  using gpuslice::place::GpuMode;
  absl::StatusOr<gpuslice::place::Cluster> inventory =
      gpuslice::place::Cluster::Create({Node("n1", GpuMode::kMig, 2, "A100-80GB", 24576),
                                        Node("s1", GpuMode::kShared, 2, "L40S", 24576)});
  if (!inventory.ok()) std::abort();
  gpuslice::alloc::ServiceOptions options;
  options.clock = [] { return std::int64_t{1700000100}; };
  absl::StatusOr<std::unique_ptr<gpuslice::alloc::Service>> service =
      gpuslice::alloc::Service::Open(*std::move(db), *std::move(inventory), std::move(options));
  if (!service.ok()) {
    if (service.status().message().empty()) std::abort();  // an error says what it is
    return 0;
  }
  const gpuslice::alloc::Caller admin{"root", "", gpuslice::alloc::Role::kAdmin, ""};
  (void)(*service)->Occupancy();
  if (!(*service)->Users(admin).ok() || !(*service)->Tenants(admin).ok() ||
      !(*service)->Queue(admin).ok() || !(*service)->Nodes(admin).ok() ||
      !(*service)->Alerts(admin).ok()) {
    std::abort();
  }
  return 0;
}
