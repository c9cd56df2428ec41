// The allocation service's usage history: samples into 1-minute buckets (RecordUsage), their
// roll-up into hour buckets (Tick), and the right-sizing report (UsageReport). The bucket
// arithmetic is gpuslice/alloc/usage.h's; the store does the same merge in SQL (counts and sums
// add, peaks take the larger), so a bucket can be merged into without being read first.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/alloc/usage.h"
#include "gpuslice/alloc/wire.h"
#include "gpuslice/hw/catalog.h"
#include "service_internal.h"

namespace gpuslice::alloc {

using namespace internal;  // NOLINT(google-build-using-namespace): this library's own helpers

namespace {

using store::Value;

// Merges one bucket into the stored one with the same key (or inserts it), exactly as
// MergeBucket does.
constexpr char kMergeBucket[] =
    "INSERT INTO usage (lease, bucket_start, bucket_s, samples, memory_peak_mib, memory_sum_mib, "
    "memory_total_mib, activity_samples, activity_peak_cpct, activity_sum_cpct, processes_peak) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (lease, bucket_start, bucket_s) DO "
    "UPDATE SET samples = usage.samples + excluded.samples, memory_peak_mib = CASE WHEN "
    "excluded.memory_peak_mib > usage.memory_peak_mib THEN excluded.memory_peak_mib ELSE "
    "usage.memory_peak_mib END, memory_sum_mib = usage.memory_sum_mib + excluded.memory_sum_mib, "
    "memory_total_mib = CASE WHEN excluded.memory_total_mib > usage.memory_total_mib THEN "
    "excluded.memory_total_mib ELSE usage.memory_total_mib END, activity_samples = "
    "usage.activity_samples + excluded.activity_samples, activity_peak_cpct = CASE WHEN "
    "excluded.activity_peak_cpct > usage.activity_peak_cpct THEN excluded.activity_peak_cpct "
    "ELSE usage.activity_peak_cpct END, activity_sum_cpct = usage.activity_sum_cpct + "
    "excluded.activity_sum_cpct, processes_peak = CASE WHEN excluded.processes_peak > "
    "usage.processes_peak THEN excluded.processes_peak ELSE usage.processes_peak END";

// The roll-up of the minute buckets that started before ?1 into their hour buckets, merged as
// above, in one statement; the DELETE that follows it in the same transaction removes them.
// (SQLite needs the WHERE clause before ON CONFLICT to parse the upsert of a SELECT.)
constexpr char kRollUpMinutes[] =
    "INSERT INTO usage (lease, bucket_start, bucket_s, samples, memory_peak_mib, memory_sum_mib, "
    "memory_total_mib, activity_samples, activity_peak_cpct, activity_sum_cpct, processes_peak) "
    "SELECT lease, (bucket_start / 3600) * 3600, 3600, SUM(samples), MAX(memory_peak_mib), "
    "SUM(memory_sum_mib), MAX(memory_total_mib), SUM(activity_samples), MAX(activity_peak_cpct), "
    "SUM(activity_sum_cpct), MAX(processes_peak) FROM usage WHERE bucket_s = 60 AND "
    "bucket_start < ? GROUP BY lease, (bucket_start / 3600) * 3600 ON CONFLICT (lease, "
    "bucket_start, bucket_s) DO UPDATE SET samples = usage.samples + excluded.samples, "
    "memory_peak_mib = CASE WHEN excluded.memory_peak_mib > usage.memory_peak_mib THEN "
    "excluded.memory_peak_mib ELSE usage.memory_peak_mib END, memory_sum_mib = "
    "usage.memory_sum_mib + excluded.memory_sum_mib, memory_total_mib = CASE WHEN "
    "excluded.memory_total_mib > usage.memory_total_mib THEN excluded.memory_total_mib ELSE "
    "usage.memory_total_mib END, activity_samples = usage.activity_samples + "
    "excluded.activity_samples, activity_peak_cpct = CASE WHEN excluded.activity_peak_cpct > "
    "usage.activity_peak_cpct THEN excluded.activity_peak_cpct ELSE usage.activity_peak_cpct END, "
    "activity_sum_cpct = usage.activity_sum_cpct + excluded.activity_sum_cpct, processes_peak = "
    "CASE WHEN excluded.processes_peak > usage.processes_peak THEN excluded.processes_peak ELSE "
    "usage.processes_peak END";

static_assert(kMinuteBucketS == 60 && kHourBucketS == 3600, "the SQL above spells the lengths");

std::vector<Value> BucketParams(const UsageBucket& b) {
  return {b.lease,
          b.start,
          b.length,
          b.samples,
          b.memory_peak_mib,
          b.memory_sum_mib,
          b.memory_total_mib,
          b.activity_samples,
          b.activity_peak_cpct,
          b.activity_sum_cpct,
          b.processes_peak};
}

// The catalog model of a placement node ("<host>/<model>[-mig]"), or null.
const hw::GpuModel* ModelOfNode(const std::string& node) {
  std::string model = node.substr(node.find('/') == std::string::npos ? 0 : node.find('/') + 1);
  if (model.size() > 4 && model.ends_with("-mig")) model.resize(model.size() - 4);
  return hw::Catalog::Builtin().Find(model);
}

// What the report needs of a stored lease: its model, its profile and the slice's memory.
UsageLease UsageLeaseOf(std::int64_t id, const std::string& tenant, const std::string& class_name,
                        const std::string& purpose, const std::string& node,
                        const std::vector<place::GpuClaim>& claims) {
  UsageLease lease;
  lease.id = id;
  lease.tenant = tenant;
  lease.class_name = class_name;
  lease.purpose = purpose;
  const hw::GpuModel* model = ModelOfNode(node);
  if (model == nullptr) return lease;
  lease.gpu_model = model->id;
  for (const place::GpuClaim& claim : claims) {
    if (claim.mig_profile >= 0 && model->mig.has_value() &&
        claim.mig_profile < static_cast<int>(model->mig->profiles.size())) {
      const hw::GiProfile& gi = model->mig->profiles[static_cast<size_t>(claim.mig_profile)];
      lease.profile = gi.name;
      lease.slice_mib += gi.memory_mib;
    } else if (!claim.whole && (claim.vram_mib > 0 || claim.milli < 1000)) {
      lease.share = true;
      lease.slice_mib += claim.vram_mib > 0 ? claim.vram_mib : model->memory_mib;
    } else {
      lease.slice_mib += model->memory_mib;
    }
  }
  return lease;
}

}  // namespace

absl::StatusOr<std::vector<std::int64_t>> Service::RecordUsage(
    const Caller& caller, const std::string& host,
    const std::map<std::int64_t, UsageFigures>& samples) {
  if (absl::Status s = CheckMachine(caller, host); !s.ok()) return s;
  for (const auto& [id, figures] : samples) {
    if (absl::Status s = ValidateUsageFigures(figures); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("leases.", id, ".", s.message()));
    }
  }
  return Changing(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::StatusOr<std::vector<std::int64_t>> {
        if (!remotes_.contains(host)) {
          return absl::NotFoundError(absl::StrCat("no machine '", host, "' has reported"));
        }
        std::vector<std::int64_t> ignored;
        const std::int64_t now = Now();
        for (const auto& [id, figures] : samples) {
          auto it = active_.find(id);
          if (it == active_.end() || HostOf(it->second.lease.node) != host) {
            ignored.push_back(id);
            continue;
          }
          Stage(kMergeBucket, BucketParams(BucketOf(id, now, figures, kMinuteBucketS)));
        }
        return ignored;
      });
}

void Service::StageUsageRollUp(std::int64_t now) {
  if (last_usage_rollup_ != 0 && now - last_usage_rollup_ < kMinuteBucketS) return;
  last_usage_rollup_ = now;
  // Minute buckets that started before the cutoff are due (RollUpDue), hour buckets that started
  // before the other one have expired (Expired). Statements run in order in one transaction.
  const std::int64_t minutes_before = now - kMinuteKeepS;
  Stage(kRollUpMinutes, {minutes_before});
  Stage("DELETE FROM usage WHERE bucket_s = 60 AND bucket_start < ?", {minutes_before});
  Stage("DELETE FROM usage WHERE bucket_s = 3600 AND bucket_start < ?", {now - kHourKeepS});
}

absl::StatusOr<alloc::UsageReport> Service::UsageReport(const Caller& caller, std::int64_t since_s,
                                                        UsageGroupBy by) {
  if (caller.role == Role::kAgent) {
    return absl::PermissionDeniedError("agents do not read usage reports");
  }
  if (since_s < 1 || since_s > kHourKeepS) {
    return absl::InvalidArgumentError("since: between 1 second and 90 days (7776000 seconds)");
  }
  if (absl::Status s = Sync(); !s.ok()) return s;
  const std::int64_t until = Now() + 1;
  const std::int64_t since = until - since_s;
  std::vector<UsageLease> leases;
  std::vector<UsageBucket> buckets;
  {
    util::MutexLock connection(db_mutex_);
    const bool all = caller.role == Role::kAdmin;
    const std::string of_tenant =
        all ? "" : " AND lease IN (SELECT id FROM leases WHERE tenant = ?)";
    std::vector<Value> params = {since, until};
    if (!all) params.push_back(caller.tenant);
    absl::StatusOr<store::Result> rows = db_->Query(
        absl::StrCat("SELECT ", kUsageBucketColumns,
                     " FROM usage WHERE bucket_start + bucket_s > ? AND bucket_start < ?",
                     of_tenant, " ORDER BY lease, bucket_s, bucket_start"),
        params);
    if (!rows.ok()) return rows.status();
    for (const store::Row& row : rows->rows) buckets.push_back(UsageBucketFromRow(row));
    std::vector<Value> lease_params = {since, until};
    if (!all) lease_params.push_back(caller.tenant);
    absl::StatusOr<store::Result> stored = db_->Query(
        absl::StrCat("SELECT id, tenant, class, purpose, node, claims FROM leases WHERE id IN "
                     "(SELECT lease FROM usage WHERE bucket_start + bucket_s > ? AND "
                     "bucket_start < ?)",
                     all ? "" : " AND tenant = ?", " ORDER BY id"),
        lease_params);
    if (!stored.ok()) return stored.status();
    for (const store::Row& row : stored->rows) {
      leases.push_back(UsageLeaseOf(
          store::AsInt(row[0]), store::AsText(row[1]), store::AsText(row[2]), store::AsText(row[3]),
          store::AsText(row[4]),
          ClaimsFromJson(nlohmann::json::parse(store::AsText(row[5]), nullptr, false))));
    }
  }
  return BuildUsageReport(leases, buckets, by, since, until);
}

}  // namespace gpuslice::alloc
