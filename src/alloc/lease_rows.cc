#include "lease_rows.h"

#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "gpuslice/alloc/wire.h"
#include "service_internal.h"

namespace gpuslice::alloc::internal {
namespace {

// The index of each column of `result` by name.
class Columns {
 public:
  explicit Columns(const store::Result& result) {
    for (size_t i = 0; i < result.columns.size(); ++i) index_[result.columns[i]] = i;
  }
  // The cell of `name` in `row`; nullopt when the result has no such column.
  const store::Value* Cell(const store::Row& row, const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() || it->second >= row.size() ? nullptr : &row[it->second];
  }

 private:
  std::map<std::string, size_t> index_;
};

absl::Status Damaged(std::int64_t id, const std::string& column, const std::string& why) {
  return absl::DataLossError(
      absl::StrCat("lease ", id, " in the store: column ", column, " ", why,
                   "; the store is damaged (restore it from a backup, or fix the row)"));
}

}  // namespace

json RequestJson(const AcquireRequest& r) {
  return {{"class", r.class_name},  {"profile", r.profile}, {"share_milli", r.share_milli},
          {"vram_mib", r.vram_mib}, {"purpose", r.purpose}, {"ttl_s", r.ttl_s}};
}

AcquireRequest RequestFromJson(const json& j) {
  AcquireRequest r;
  r.class_name = j.value("class", "");
  r.profile = j.value("profile", "");
  r.share_milli = StoredInt(j, "share_milli", 0);
  r.vram_mib = StoredInt(j, "vram_mib", std::int64_t{0});
  r.purpose = j.value("purpose", "");
  r.ttl_s = StoredInt(j, "ttl_s", std::int64_t{0});
  return r;
}

absl::StatusOr<std::vector<StoredLease>> ReadLeases(const store::Result& result) {
  const Columns columns(result);
  std::vector<StoredLease> out;
  for (const store::Row& row : result.rows) {
    const store::Value* id_cell = columns.Cell(row, "id");
    if (id_cell == nullptr) return absl::InternalError("a leases query without the id column");
    StoredLease stored;
    Lease& lease = stored.lease;
    lease.id = store::AsInt(*id_cell);
    std::optional<absl::Status> problem;
    auto cell = [&](const char* name) -> const store::Value& {
      static const store::Value kNull;
      const store::Value* v = columns.Cell(row, name);
      if (v == nullptr && !problem) problem = Damaged(lease.id, name, "is not in the query");
      return v != nullptr ? *v : kNull;
    };
    auto parsed = [&](const char* name, bool object) {
      json j = json::parse(store::AsText(cell(name)), nullptr, false);
      if (j.is_discarded() || (object ? !j.is_object() : !j.is_array())) {
        if (!problem) {
          problem =
              Damaged(lease.id, name, object ? "is not a JSON object" : "is not a JSON array");
        }
        return object ? json::object() : json::array();  // not read: the row is refused
      }
      return j;
    };
    lease.tenant = store::AsText(cell("tenant"));
    lease.user = store::AsText(cell("user_name"));
    lease.class_name = store::AsText(cell("class"));
    lease.purpose = store::AsText(cell("purpose"));
    stored.request = RequestFromJson(parsed("request", true));
    lease.node = store::AsText(cell("node"));
    lease.claims = ClaimsFromJson(parsed("claims", false));
    lease.memory_gib = store::AsDouble(cell("memory_gib"));
    lease.granted_at = store::AsInt(cell("granted_at"));
    lease.expires_at = store::AsInt(cell("expires_at"));
    lease.ended_at = store::AsInt(cell("ended_at"));
    lease.state = store::AsText(cell("state"));
    lease.bound = BoundFromJson(parsed("bound", false));
    lease.from_queue = store::AsInt(cell("from_queue"));
    if (problem) return *problem;
    out.push_back(std::move(stored));
  }
  return out;
}

}  // namespace gpuslice::alloc::internal
