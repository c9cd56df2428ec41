// gpuslice/alloc/usage.h
//
// Usage history of leases, kept compactly, and the right-sizing report built from it. Everything
// here is pure and deterministic (no I/O, no clock); the service stores the buckets
// (Service::RecordUsage, Service::UsageReport) and the agents collect the figures
// (UsageFromFigures).
//
// Samples and buckets:
//   * A sample is one lease's devices at one moment: memory used and the slice's total (MiB), SM
//     activity (percent) when the device gives it, and the number of processes.
//   * Samples go into the bucket of their lease that covers their time: 1-minute buckets, kept
//     for kMinuteKeepS (a day), then rolled up into 1-hour buckets, kept for kHourKeepS (90 days).
//   * A bucket keeps the sample count, the peak and the sum of memory, the count, peak and sum of
//     activity (in hundredths of a percent, as integers) and the peak of processes. MergeBucket
//     adds counts and sums and takes peaks, so it is associative and commutative: peaks, counts
//     and means survive any roll-up exactly.
//
// The report (BuildUsageReport), per workload (a tenant's leases with the same purpose), per
// tenant or per class, over the buckets that start within [since, until):
//   * peak: the highest memory (activity) of any sample;
//   * typical: the mean over all samples (sum / count), which the buckets keep exactly; it is
//     what the slice holds most of the time for steady workloads, and is below the median for
//     bursty ones. Percentiles are not kept;
//   * the slice: that of the group's lease with the most samples (ties: the newest lease); its
//     memory is the largest total the devices reported, else the slice as granted;
//   * verdicts, per workload (tenant and class rows count their workloads' verdicts):
//       - idle: no sample saw a process or memory in use, or every sample gave SM activity and
//         none reached UsagePolicy::idle_activity_pct (an idle workload is not also called
//         oversized);
//       - too small: the peak reached too_small_fraction (95%) of the slice's memory;
//       - oversized: the peak with the planner's memory headroom fits a profile of the same GPU
//         model with less memory than the slice (sized by plan::SizeWorkload, so exactly the
//         planner's rules); only for MIG slices and whole MIG-capable GPUs;
//     too small and oversized name the smallest profile that would hold the peak.
// PlanWorkloadsYaml writes the workloads as `gpuslice plan -w` input: one workload per non-idle
// workload row, its peak memory as measured, its replicas the most leases seen in one hour, its
// kind guessed from the purpose (or left to the planner's default), with one comment line each.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "gpuslice/alloc/binder.h"
#include "gpuslice/metrics/collector.h"
#include "gpuslice/store/database.h"

namespace gpuslice::alloc {

inline constexpr std::int64_t kMinuteBucketS = 60;
inline constexpr std::int64_t kHourBucketS = 3600;
inline constexpr std::int64_t kMinuteKeepS = 24 * 3600;        // then rolled up into hours
inline constexpr std::int64_t kHourKeepS = 90 * 24 * 3600;     // then deleted
inline constexpr std::int64_t kMaxUsageMemoryMib = 1LL << 24;  // 16 TiB: larger is a bad figure
inline constexpr int kMaxUsageProcesses = 100000;

// One lease's devices at one moment.
struct UsageFigures {
  std::int64_t memory_used_mib = 0;
  std::int64_t memory_total_mib = 0;    // the slice's memory; 0 = unknown
  std::optional<double> sm_active_pct;  // 0-100; absent when the device does not give it
  int processes = 0;
  friend bool operator==(const UsageFigures&, const UsageFigures&) = default;
};

// InvalidArgument (naming the field) for negative or absurd figures.
absl::Status ValidateUsageFigures(const UsageFigures& figures);

// A lease's devices as the collector saw them: memory used and total summed over the devices,
// SM activity their mean (MIG: the instance's GPM activity; a whole GPU: its GPM activity, else
// NVML's utilisation), processes summed. A share counts its VRAM cap as its total and the GPU's
// memory in use (all holders'). Nullopt when none of the devices is in `machine` or a device's
// memory is unknown.
std::optional<UsageFigures> UsageFromFigures(const metrics::MachineFigures& machine,
                                             const std::vector<BoundDevice>& devices);

struct UsageBucket {
  std::int64_t lease = 0;
  std::int64_t start = 0;                // epoch seconds, a multiple of length
  std::int64_t length = kMinuteBucketS;  // kMinuteBucketS or kHourBucketS
  std::int64_t samples = 0;
  std::int64_t memory_peak_mib = 0;
  std::int64_t memory_sum_mib = 0;
  std::int64_t memory_total_mib = 0;    // the largest total reported (0: never known)
  std::int64_t activity_samples = 0;    // samples that gave activity
  std::int64_t activity_peak_cpct = 0;  // hundredths of a percent
  std::int64_t activity_sum_cpct = 0;
  std::int64_t processes_peak = 0;
  friend bool operator==(const UsageBucket&, const UsageBucket&) = default;
};

// The start of the bucket of `length` seconds that holds `at` (floor, also before 1970).
std::int64_t BucketStart(std::int64_t at, std::int64_t length);
// The bucket of one sample taken at `at`. Activity is rounded to hundredths of a percent.
UsageBucket BucketOf(std::int64_t lease, std::int64_t at, const UsageFigures& figures,
                     std::int64_t length = kMinuteBucketS);
// Adds `from` into `into` (counts and sums add, peaks and totals take the larger); `into` keeps
// its lease, start and length.
void MergeBucket(UsageBucket& into, const UsageBucket& from);

// Whether a minute bucket is due for the roll-up at `now` (it started more than kMinuteKeepS
// ago), and whether an hour bucket has expired (started more than kHourKeepS ago).
bool RollUpDue(const UsageBucket& bucket, std::int64_t now);
bool Expired(const UsageBucket& bucket, std::int64_t now);
// The hour buckets the given minute buckets make, merged per (lease, hour), ordered by lease
// then start. Merging them into the stored hour buckets and deleting the minutes is the roll-up.
std::vector<UsageBucket> RollUpMinutes(std::span<const UsageBucket> minutes);
// The whole compaction in memory: minute buckets due are rolled up into (and merged with) the
// hour buckets, expired hour buckets dropped. Ordered by lease, length, start.
std::vector<UsageBucket> Compact(std::span<const UsageBucket> buckets, std::int64_t now);

// What the report needs of a lease.
struct UsageLease {
  std::int64_t id = 0;
  std::string tenant;
  std::string class_name;
  std::string purpose;
  std::string gpu_model;  // catalog id; "" when not known
  std::string profile;    // the MIG GPU-instance profile; "" for a whole GPU or a share
  bool share = false;
  std::int64_t slice_mib = 0;  // the slice's memory as granted (profile, GPU or VRAM cap)
};

enum class UsageGroupBy { kWorkload, kTenant, kClass };
std::string_view ToString(UsageGroupBy by);  // "workload", "tenant", "class"
std::optional<UsageGroupBy> ParseUsageGroupBy(std::string_view text);

struct UsagePolicy {
  double memory_headroom = 0.15;     // the planner's default (plan::SizingPolicy)
  double too_small_fraction = 0.95;  // of the slice's memory
  double idle_activity_pct = 1.0;    // below this all along (and no process, no memory): idle
};

struct UsageRow {
  std::string key;         // the workload's name, the tenant or the class
  std::string tenant;      // workload and tenant rows
  std::string class_name;  // workload rows: the class of the reference lease; class rows
  std::string purpose;     // workload rows
  std::vector<std::int64_t> leases;
  std::int64_t samples = 0;
  std::int64_t activity_samples = 0;  // samples that gave SM activity
  std::int64_t first = 0;             // start of the first bucket
  std::int64_t last = 0;              // end of the last bucket
  std::int64_t memory_peak_mib = 0;
  double memory_typical_mib = 0;  // mean over the samples
  std::optional<double> activity_peak_pct;
  std::optional<double> activity_typical_pct;
  std::int64_t processes_peak = 0;
  int concurrent_peak = 0;  // the most of its leases seen in one hour
  // The reference slice.
  std::string gpu_model;
  std::string profile;  // "" whole GPU or share
  bool share = false;
  std::int64_t slice_mib = 0;
  double peak_fraction = 0;  // memory_peak / slice_mib; 0 when the slice is unknown
  // Verdicts: for a workload row 0 or 1; for tenant and class rows, how many of their workloads.
  int workloads = 0;
  int oversized = 0;
  int too_small = 0;
  int idle = 0;
  std::string suggested_profile;  // workload rows that are oversized or too small; "whole GPU"
  std::string kind;               // workload rows: the planner kind guessed; "" = its default
  std::string explanation;        // workload rows: one line
};

struct UsageReport {
  std::int64_t since = 0;
  std::int64_t until = 0;
  UsageGroupBy by = UsageGroupBy::kWorkload;
  std::vector<UsageRow> rows;       // grouped as asked, by key
  std::vector<UsageRow> workloads;  // always per workload (the plan's input), by key
};

// Builds the report from the leases and their buckets (buckets of unknown leases, and buckets
// outside [since, until), are left out; leases without buckets do not appear).
UsageReport BuildUsageReport(std::span<const UsageLease> leases,
                             std::span<const UsageBucket> buckets, UsageGroupBy by,
                             std::int64_t since, std::int64_t until,
                             const UsagePolicy& policy = {});

// The report's workloads as a `gpuslice plan -w` file (see the header comment). A report whose
// workloads are all idle gives a file with no workloads, which the planner refuses.
std::string PlanWorkloadsYaml(const UsageReport& report, const UsagePolicy& policy = {});

// A workload name the planner accepts from a purpose: lower case, runs of other characters as
// one '-', at most 48 characters; "workload" when nothing is left.
std::string WorkloadName(std::string_view purpose);
// The planner kind a purpose suggests ("notebook", "fine-tune", "batch", "inference"), or "".
std::string GuessKind(std::string_view purpose);

// The store's `usage` table: the columns a bucket is read from, in this order, and one row of
// them made a bucket.
inline constexpr const char* kUsageBucketColumns =
    "lease, bucket_start, bucket_s, samples, memory_peak_mib, memory_sum_mib, memory_total_mib, "
    "activity_samples, activity_peak_cpct, activity_sum_cpct, processes_peak";
UsageBucket UsageBucketFromRow(const store::Row& row);

}  // namespace gpuslice::alloc
