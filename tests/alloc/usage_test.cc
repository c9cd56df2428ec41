// Tests of the usage history's pure core (gpuslice/alloc/usage.h): buckets and their roll-up
// (peaks, sums and counts survive exactly, at the exact boundaries), figures from the collector,
// the report's numbers and verdicts, and the planner input it writes, read back with the
// planner's own parser.
#include "gpuslice/alloc/usage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gpuslice/hw/catalog.h"
#include "gpuslice/plan/inputs.h"
#include "gpuslice/plan/model.h"

namespace gpuslice::alloc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::int64_t kT0 = 1'700'002'800;  // the start of an hour

UsageFigures Figures(std::int64_t used, std::int64_t total, std::optional<double> activity,
                     int processes) {
  UsageFigures f;
  f.memory_used_mib = used;
  f.memory_total_mib = total;
  f.sm_active_pct = activity;
  f.processes = processes;
  return f;
}

// Samples into minute buckets, as the store does it.
std::vector<UsageBucket> Minutes(const std::vector<std::pair<std::int64_t, UsageBucket>>& samples) {
  std::map<std::pair<std::int64_t, std::int64_t>, UsageBucket> buckets;
  for (const auto& [lease, sample] : samples) {
    auto [it, inserted] = buckets.try_emplace({lease, sample.start}, sample);
    if (!inserted) MergeBucket(it->second, sample);
  }
  std::vector<UsageBucket> out;
  for (const auto& [key, b] : buckets) out.push_back(b);
  return out;
}

TEST(UsageBucketTest, BucketStartIsTheFloorAlsoBefore1970) {
  EXPECT_EQ(BucketStart(0, 60), 0);
  EXPECT_EQ(BucketStart(59, 60), 0);
  EXPECT_EQ(BucketStart(60, 60), 60);
  EXPECT_EQ(BucketStart(-1, 60), -60);
  EXPECT_EQ(BucketStart(-60, 60), -60);
  EXPECT_EQ(kT0 % 3600, 0);
  EXPECT_EQ(BucketStart(kT0 + 59, 60), kT0);
  EXPECT_EQ(BucketStart(kT0 + 3599, 3600), kT0);
  EXPECT_EQ(BucketStart(kT0 + 3600, 3600), kT0 + 3600);
}

TEST(UsageBucketTest, OneSampleAndTheirMerge) {
  const UsageBucket a = BucketOf(7, kT0 + 59, Figures(1000, 9984, 33.333, 2));
  EXPECT_EQ(a.lease, 7);
  EXPECT_EQ(a.start, kT0);
  EXPECT_EQ(a.length, kMinuteBucketS);
  EXPECT_EQ(a.samples, 1);
  EXPECT_EQ(a.memory_peak_mib, 1000);
  EXPECT_EQ(a.memory_sum_mib, 1000);
  EXPECT_EQ(a.memory_total_mib, 9984);
  EXPECT_EQ(a.activity_samples, 1);
  EXPECT_EQ(a.activity_peak_cpct, 3333);  // hundredths of a percent
  EXPECT_EQ(a.activity_sum_cpct, 3333);
  EXPECT_EQ(a.processes_peak, 2);

  UsageBucket b = BucketOf(7, kT0 + 10, Figures(3000, 0, std::nullopt, 1));
  EXPECT_EQ(b.activity_samples, 0);
  MergeBucket(b, a);
  EXPECT_EQ(b.samples, 2);
  EXPECT_EQ(b.memory_peak_mib, 3000);
  EXPECT_EQ(b.memory_sum_mib, 4000);
  EXPECT_EQ(b.memory_total_mib, 9984);
  EXPECT_EQ(b.activity_samples, 1);
  EXPECT_EQ(b.activity_peak_cpct, 3333);
  EXPECT_EQ(b.activity_sum_cpct, 3333);
  EXPECT_EQ(b.processes_peak, 2);
  // Activity is clamped to 0..100 %.
  EXPECT_EQ(BucketOf(1, 0, Figures(0, 0, 100.004, 0)).activity_peak_cpct, 10000);
}

TEST(UsageBucketTest, RollUpAndExpiryBoundariesAreExact) {
  const std::int64_t now = kT0 + 10 * kMinuteKeepS;
  UsageBucket minute;
  minute.length = kMinuteBucketS;
  minute.start = now - kMinuteKeepS;  // exactly a day old: kept as a minute
  EXPECT_FALSE(RollUpDue(minute, now));
  minute.start -= 1;  // older: rolled up
  EXPECT_TRUE(RollUpDue(minute, now));
  UsageBucket hour;
  hour.length = kHourBucketS;
  hour.start = now - kHourKeepS;
  EXPECT_FALSE(Expired(hour, now));
  EXPECT_FALSE(RollUpDue(hour, now));  // hours are never rolled up again
  hour.start -= 1;
  EXPECT_TRUE(Expired(hour, now));
  EXPECT_FALSE(Expired(minute, now));  // minutes never expire directly
}

TEST(UsageBucketTest, RollUpMergesPerLeaseAndHour) {
  const std::int64_t hour = kT0;
  std::vector<UsageBucket> minutes = {
      BucketOf(1, hour + 0, Figures(100, 1000, 10, 1)),
      BucketOf(1, hour + 60, Figures(300, 1000, 30, 2)),
      BucketOf(1, hour + 3599, Figures(200, 1000, std::nullopt, 0)),
      BucketOf(1, hour + 3600, Figures(50, 1000, 5, 0)),  // the next hour
      BucketOf(2, hour + 120, Figures(7, 20, 1, 1)),
  };
  const std::vector<UsageBucket> hours = RollUpMinutes(minutes);
  ASSERT_EQ(hours.size(), 3u);
  EXPECT_EQ(hours[0].lease, 1);
  EXPECT_EQ(hours[0].start, hour);
  EXPECT_EQ(hours[0].length, kHourBucketS);
  EXPECT_EQ(hours[0].samples, 3);
  EXPECT_EQ(hours[0].memory_peak_mib, 300);
  EXPECT_EQ(hours[0].memory_sum_mib, 600);
  EXPECT_EQ(hours[0].activity_samples, 2);
  EXPECT_EQ(hours[0].activity_peak_cpct, 3000);
  EXPECT_EQ(hours[0].activity_sum_cpct, 4000);
  EXPECT_EQ(hours[0].processes_peak, 2);
  EXPECT_EQ(hours[1].lease, 1);
  EXPECT_EQ(hours[1].start, hour + 3600);
  EXPECT_EQ(hours[1].samples, 1);
  EXPECT_EQ(hours[2].lease, 2);
  EXPECT_EQ(hours[2].start, hour);
  EXPECT_EQ(hours[2].memory_sum_mib, 7);
}

// Two days of random samples every 20 s for three leases, compacted at several moments: what is
// kept (minus expired hours, of which there are none here) adds up to exactly the raw samples'
// counts, sums and peaks; compacting in steps gives what compacting once gives.
TEST(UsageBucketTest, CompactionPreservesPeaksSumsAndCountsExactly) {
  std::mt19937 random(42);
  std::vector<std::pair<std::int64_t, UsageBucket>> samples;
  struct Raw {
    std::int64_t count = 0, sum = 0, peak = 0, activity_count = 0, activity_sum = 0,
                 activity_peak = 0;
  };
  std::map<std::int64_t, Raw> raw;
  for (std::int64_t t = kT0; t < kT0 + 2 * 86400; t += 20) {
    for (std::int64_t lease = 1; lease <= 3; ++lease) {
      const auto used = static_cast<std::int64_t>(random() % 40000);
      std::optional<double> activity;
      if (lease != 3) activity = static_cast<double>(random() % 10001) / 100.0;
      const UsageBucket b = BucketOf(lease, t, Figures(used, 40448, activity, 1));
      samples.push_back({lease, b});
      Raw& r = raw[lease];
      r.count += 1;
      r.sum += used;
      r.peak = std::max(r.peak, used);
      r.activity_count += b.activity_samples;
      r.activity_sum += b.activity_sum_cpct;
      r.activity_peak = std::max(r.activity_peak, b.activity_peak_cpct);
    }
  }
  const std::vector<UsageBucket> minutes = Minutes(samples);
  const std::int64_t end = kT0 + 2 * 86400;
  const std::vector<UsageBucket> once = Compact(minutes, end + 3 * 3600);
  std::vector<UsageBucket> stepwise = minutes;
  for (std::int64_t now = end - 86400; now <= end + 3 * 3600; now += 1800) {
    stepwise = Compact(stepwise, now);
  }
  EXPECT_EQ(stepwise, once);
  EXPECT_EQ(Compact(once, end + 3 * 3600), once);  // idempotent
  std::map<std::int64_t, Raw> kept;
  int minute_buckets = 0;
  for (const UsageBucket& b : once) {
    minute_buckets += b.length == kMinuteBucketS ? 1 : 0;
    EXPECT_FALSE(RollUpDue(b, end + 3 * 3600));
    Raw& r = kept[b.lease];
    r.count += b.samples;
    r.sum += b.memory_sum_mib;
    r.peak = std::max(r.peak, b.memory_peak_mib);
    r.activity_count += b.activity_samples;
    r.activity_sum += b.activity_sum_cpct;
    r.activity_peak = std::max(r.activity_peak, b.activity_peak_cpct);
  }
  EXPECT_GT(minute_buckets, 0);
  EXPECT_LT(once.size(), minutes.size());
  for (std::int64_t lease = 1; lease <= 3; ++lease) {
    SCOPED_TRACE(lease);
    EXPECT_EQ(kept[lease].count, raw[lease].count);
    EXPECT_EQ(kept[lease].sum, raw[lease].sum);
    EXPECT_EQ(kept[lease].peak, raw[lease].peak);
    EXPECT_EQ(kept[lease].activity_count, raw[lease].activity_count);
    EXPECT_EQ(kept[lease].activity_sum, raw[lease].activity_sum);
    EXPECT_EQ(kept[lease].activity_peak, raw[lease].activity_peak);
  }
  EXPECT_EQ(kept[3].activity_count, 0);
  // 90 days after the last two hours began, only they are left (3 leases each); then nothing.
  const std::vector<UsageBucket> last = Compact(once, end - 7200 + kHourKeepS);
  ASSERT_EQ(last.size(), 6u);
  for (const UsageBucket& b : last) EXPECT_GE(b.start, end - 7200);
  EXPECT_TRUE(Compact(once, end + kHourKeepS).empty());
}

TEST(UsageFiguresTest, ValidationNamesTheField) {
  EXPECT_TRUE(ValidateUsageFigures(Figures(0, 0, std::nullopt, 0)).ok());
  EXPECT_TRUE(ValidateUsageFigures(Figures(kMaxUsageMemoryMib, kMaxUsageMemoryMib, 100, 5)).ok());
  EXPECT_THAT(std::string(ValidateUsageFigures(Figures(-1, 0, std::nullopt, 0)).message()),
              HasSubstr("memory_used_mib"));
  EXPECT_THAT(
      std::string(
          ValidateUsageFigures(Figures(0, kMaxUsageMemoryMib + 1, std::nullopt, 0)).message()),
      HasSubstr("memory_total_mib"));
  EXPECT_THAT(std::string(ValidateUsageFigures(Figures(0, 0, 100.5, 0)).message()),
              HasSubstr("sm_active_pct"));
  EXPECT_THAT(std::string(ValidateUsageFigures(Figures(0, 0, -0.1, 0)).message()),
              HasSubstr("sm_active_pct"));
  EXPECT_THAT(std::string(ValidateUsageFigures(Figures(0, 0, std::nan(""), 0)).message()),
              HasSubstr("sm_active_pct"));
  EXPECT_THAT(std::string(ValidateUsageFigures(Figures(0, 0, std::nullopt, -1)).message()),
              HasSubstr("processes"));
}

TEST(UsageFiguresTest, FromTheCollectorsFiguresByDeviceUuid) {
  metrics::MachineFigures machine;
  metrics::GpuFigures mig;
  mig.index = 0;
  mig.uuid = "GPU-a";
  mig.mig = true;
  mig.memory_used_mib = 5000;
  mig.memory_total_mib = 81559;
  metrics::InstanceFigures instance;
  instance.gi = 3;
  instance.uuid = "MIG-a3";
  instance.memory_used_mib = 1200;
  instance.memory_total_mib = 9984;
  instance.processes = 2;
  instance.activity = device::Activity{40, 20, 10, 1};
  mig.instances.push_back(instance);
  metrics::InstanceFigures unknown;
  unknown.gi = 5;
  unknown.uuid = "MIG-a5";  // memory not known
  mig.instances.push_back(unknown);
  metrics::GpuFigures whole;
  whole.index = 1;
  whole.uuid = "GPU-b";
  whole.memory_used_mib = 30000;
  whole.memory_total_mib = 81559;
  whole.processes = 1;
  whole.telemetry.utilization_pct = 70;
  machine.gpus = {mig, whole};

  BoundDevice a3{"MIG-a3", "GPU-a", 0, 3, 0, 0, 0};
  BoundDevice b{"GPU-b", "GPU-b", 1, -1, -1, 0, 0};
  BoundDevice share{"GPU-b", "GPU-b", 1, -1, -1, 8192, 250};
  EXPECT_EQ(UsageFromFigures(machine, {a3}), Figures(1200, 9984, 40.0, 2));
  EXPECT_EQ(UsageFromFigures(machine, {b}), Figures(30000, 81559, 70.0, 1));
  // A share: its VRAM cap is its total; the GPU's memory in use is all holders'.
  EXPECT_EQ(UsageFromFigures(machine, {share}), Figures(30000, 8192, 70.0, 1));
  // Two devices: memory and processes add up, activity is their mean.
  EXPECT_EQ(UsageFromFigures(machine, {a3, b}), Figures(31200, 91543, 55.0, 3));
  // GPM activity wins over NVML's utilisation on a whole GPU.
  machine.gpus[1].activity = device::Activity{12.5, 0, 0, 1};
  EXPECT_EQ(UsageFromFigures(machine, {b})->sm_active_pct, 12.5);
  // Without activity on one device, the lease has none.
  machine.gpus[0].instances[0].activity.reset();
  EXPECT_EQ(UsageFromFigures(machine, {a3, b})->sm_active_pct, std::nullopt);
  // Unknown devices or memory: no figures at all.
  EXPECT_EQ(UsageFromFigures(machine, {BoundDevice{"MIG-zz", "GPU-a", 0, 9, 0, 0, 0}}),
            std::nullopt);
  EXPECT_EQ(UsageFromFigures(machine, {BoundDevice{"MIG-a5", "GPU-a", 0, 5, 0, 0, 0}}),
            std::nullopt);
  EXPECT_EQ(UsageFromFigures(machine, {}), std::nullopt);
}

TEST(UsageNamesTest, WorkloadNamesAndKinds) {
  EXPECT_EQ(WorkloadName("notebook: embeddings"), "notebook-embeddings");
  EXPECT_EQ(WorkloadName("  Eval run #12 (v2.1) "), "eval-run-12-v2.1");
  EXPECT_EQ(WorkloadName("!!!"), "workload");
  EXPECT_EQ(WorkloadName(std::string(100, 'a')), std::string(48, 'a'));
  EXPECT_EQ(GuessKind("Jupyter for ann"), "notebook");
  EXPECT_EQ(GuessKind("fine-tune llama"), "fine-tune");
  EXPECT_EQ(GuessKind("nightly training"), "batch");
  EXPECT_EQ(GuessKind("serving the ranker"), "inference");
  EXPECT_EQ(GuessKind("eval run 12"), "");
  EXPECT_EQ(ParseUsageGroupBy("tenant"), UsageGroupBy::kTenant);
  EXPECT_EQ(ParseUsageGroupBy("class"), UsageGroupBy::kClass);
  EXPECT_EQ(ParseUsageGroupBy("workload"), UsageGroupBy::kWorkload);
  EXPECT_EQ(ParseUsageGroupBy("user"), std::nullopt);
  EXPECT_EQ(ToString(UsageGroupBy::kClass), "class");
}

// H100-80GB slices: 1g.10gb holds 9984 MiB, 1g.20gb 20096, 3g.40gb 40448.
UsageLease Lease(std::int64_t id, const std::string& tenant, const std::string& klass,
                 const std::string& purpose, const std::string& profile, std::int64_t mib) {
  UsageLease lease;
  lease.id = id;
  lease.tenant = tenant;
  lease.class_name = klass;
  lease.purpose = purpose;
  lease.gpu_model = "H100-80GB";
  lease.profile = profile;
  lease.slice_mib = mib;
  return lease;
}

// Minute samples for `lease` at kT0 + offsets.
void Add(std::vector<UsageBucket>& buckets, std::int64_t lease, std::int64_t offset,
         const UsageFigures& f) {
  buckets.push_back(BucketOf(lease, kT0 + offset, f));
}

class UsageReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    leases_ = {
        Lease(1, "team-a", "large", "serving ranker", "3g.40gb", 40448),
        Lease(2, "team-a", "small", "notebook: ann", "1g.10gb", 9984),
        Lease(3, "team-b", "small", "eval run 12", "1g.10gb", 9984),
        Lease(4, "team-b", "small", "forgotten", "1g.10gb", 9984),
        Lease(5, "team-a", "small", "notebook: ann", "1g.10gb", 9984),
    };
    // 1: 3g.40gb peaking at 6000 MiB (typical 4000): oversized, 1g.10gb holds it.
    Add(buckets_, 1, 0, Figures(2000, 40448, 50, 1));
    Add(buckets_, 1, 60, Figures(6000, 40448, 90, 1));
    Add(buckets_, 1, 120, Figures(4000, 40448, 10, 1));
    // 2 and 5 (one workload, at the same time): 1g.10gb reaching 96%: too small.
    Add(buckets_, 2, 0, Figures(9600, 9984, 80, 1));
    Add(buckets_, 5, 60, Figures(1000, 9984, 20, 1));
    // 3: half full: right-sized.
    Add(buckets_, 3, 0, Figures(5000, 9984, std::nullopt, 1));
    Add(buckets_, 3, 3600, Figures(3000, 9984, std::nullopt, 1));
    // 4: nothing ever ran: idle.
    Add(buckets_, 4, 0, Figures(0, 9984, std::nullopt, 0));
    Add(buckets_, 4, 60, Figures(0, 9984, std::nullopt, 0));
  }

  UsageReport Report(UsageGroupBy by) {
    return BuildUsageReport(leases_, buckets_, by, kT0 - 86400, kT0 + 86400);
  }

  const UsageRow& Row(const UsageReport& report, const std::string& key) {
    for (const UsageRow& row : report.rows) {
      if (row.key == key) return row;
    }
    ADD_FAILURE() << "no row " << key;
    static const UsageRow none;
    return none;
  }

  std::vector<UsageLease> leases_;
  std::vector<UsageBucket> buckets_;
};

TEST_F(UsageReportTest, WorkloadsPeaksTypicalsAndVerdicts) {
  const UsageReport report = Report(UsageGroupBy::kWorkload);
  ASSERT_EQ(report.rows.size(), 4u);
  EXPECT_EQ(report.rows[0].key, "eval-run-12");  // by name
  EXPECT_EQ(report.rows[1].key, "forgotten");
  EXPECT_EQ(report.rows[2].key, "notebook-ann");
  EXPECT_EQ(report.rows[3].key, "serving-ranker");

  const UsageRow& ranker = Row(report, "serving-ranker");
  EXPECT_EQ(ranker.tenant, "team-a");
  EXPECT_EQ(ranker.class_name, "large");
  EXPECT_EQ(ranker.purpose, "serving ranker");
  EXPECT_EQ(ranker.kind, "inference");
  EXPECT_THAT(ranker.leases, ElementsAre(1));
  EXPECT_EQ(ranker.samples, 3);
  EXPECT_EQ(ranker.memory_peak_mib, 6000);
  EXPECT_DOUBLE_EQ(ranker.memory_typical_mib, 4000);
  EXPECT_DOUBLE_EQ(*ranker.activity_peak_pct, 90);
  EXPECT_DOUBLE_EQ(*ranker.activity_typical_pct, 50);
  EXPECT_EQ(ranker.gpu_model, "H100-80GB");
  EXPECT_EQ(ranker.profile, "3g.40gb");
  EXPECT_EQ(ranker.slice_mib, 40448);
  EXPECT_DOUBLE_EQ(ranker.peak_fraction, 6000.0 / 40448);
  EXPECT_EQ(ranker.first, kT0);
  EXPECT_EQ(ranker.last, kT0 + 180);
  EXPECT_EQ(ranker.oversized, 1);
  EXPECT_EQ(ranker.too_small, 0);
  EXPECT_EQ(ranker.idle, 0);
  EXPECT_EQ(ranker.suggested_profile, "1g.10gb");
  EXPECT_THAT(ranker.explanation, HasSubstr("peak 5.9 GiB of 39.5 GiB (15%) on H100-80GB 3g.40gb"));
  EXPECT_THAT(ranker.explanation, HasSubstr("oversized; 1g.10gb holds 6.7 GiB"));

  const UsageRow& notebook = Row(report, "notebook-ann");
  EXPECT_THAT(notebook.leases, ElementsAre(2, 5));
  EXPECT_EQ(notebook.kind, "notebook");
  EXPECT_EQ(notebook.memory_peak_mib, 9600);
  EXPECT_DOUBLE_EQ(notebook.memory_typical_mib, 5300);
  EXPECT_EQ(notebook.concurrent_peak, 2);
  EXPECT_EQ(notebook.too_small, 1);
  EXPECT_EQ(notebook.oversized, 0);
  EXPECT_EQ(notebook.suggested_profile, "1g.20gb");
  EXPECT_DOUBLE_EQ(notebook.peak_fraction, 9600.0 / 9984);
  EXPECT_THAT(notebook.explanation, HasSubstr("too small; 1g.20gb holds 10.8 GiB"));

  const UsageRow& eval = Row(report, "eval-run-12");
  EXPECT_EQ(eval.oversized + eval.too_small + eval.idle, 0);
  EXPECT_EQ(eval.kind, "");
  EXPECT_FALSE(eval.activity_peak_pct.has_value());
  EXPECT_EQ(eval.concurrent_peak, 1);
  EXPECT_EQ(eval.last, kT0 + 3660);
  EXPECT_THAT(eval.explanation, HasSubstr("right-sized"));

  const UsageRow& forgotten = Row(report, "forgotten");
  EXPECT_EQ(forgotten.idle, 1);
  EXPECT_EQ(forgotten.oversized, 0);  // idle is said instead
  EXPECT_THAT(forgotten.explanation, HasSubstr("idle all along"));
  EXPECT_EQ(report.workloads.size(), report.rows.size());
}

TEST_F(UsageReportTest, ActivityDecidesIdleOnlyWhenEverySampleGaveIt) {
  leases_ = {Lease(1, "t", "small", "warm notebook", "1g.10gb", 9984)};
  buckets_.clear();
  Add(buckets_, 1, 0, Figures(4000, 9984, 0.5, 1));
  Add(buckets_, 1, 60, Figures(4000, 9984, 0.9, 1));
  EXPECT_EQ(Report(UsageGroupBy::kWorkload).rows.at(0).idle, 1);  // memory held, nothing computed
  Add(buckets_, 1, 120, Figures(4000, 9984, std::nullopt, 1));
  EXPECT_EQ(Report(UsageGroupBy::kWorkload).rows.at(0).idle, 0);  // one sample without activity
}

TEST_F(UsageReportTest, TenantAndClassRowsCountTheirWorkloadsVerdicts) {
  const UsageReport by_tenant = Report(UsageGroupBy::kTenant);
  ASSERT_EQ(by_tenant.rows.size(), 2u);
  const UsageRow& a = Row(by_tenant, "team-a");
  EXPECT_THAT(a.leases, ElementsAre(1, 2, 5));
  EXPECT_EQ(a.workloads, 2);
  EXPECT_EQ(a.oversized, 1);
  EXPECT_EQ(a.too_small, 1);
  EXPECT_EQ(a.idle, 0);
  EXPECT_EQ(a.memory_peak_mib, 9600);
  EXPECT_EQ(a.samples, 5);
  EXPECT_DOUBLE_EQ(a.memory_typical_mib, (2000 + 6000 + 4000 + 9600 + 1000) / 5.0);
  const UsageRow& b = Row(by_tenant, "team-b");
  EXPECT_EQ(b.workloads, 2);
  EXPECT_EQ(b.idle, 1);
  EXPECT_EQ(by_tenant.workloads.size(), 4u);  // the plan's input is always per workload

  const UsageReport by_class = Report(UsageGroupBy::kClass);
  ASSERT_EQ(by_class.rows.size(), 2u);
  const UsageRow& small = Row(by_class, "small");
  EXPECT_THAT(small.leases, ElementsAre(2, 3, 4, 5));
  EXPECT_EQ(small.workloads, 3);
  EXPECT_EQ(small.too_small, 1);
  EXPECT_EQ(small.idle, 1);
  EXPECT_EQ(Row(by_class, "large").oversized, 1);
}

TEST_F(UsageReportTest, OnlyBucketsInTheWindowAndOfKnownLeasesCount) {
  // Lease 3's second sample is an hour later; a window that ends before it leaves it out.
  const UsageReport early =
      BuildUsageReport(leases_, buckets_, UsageGroupBy::kWorkload, kT0, kT0 + 3600);
  EXPECT_EQ(Row(early, "eval-run-12").samples, 1);
  EXPECT_EQ(Row(early, "eval-run-12").memory_peak_mib, 5000);
  const UsageReport late =
      BuildUsageReport(leases_, buckets_, UsageGroupBy::kWorkload, kT0 + 3600, kT0 + 7200);
  ASSERT_EQ(late.rows.size(), 1u);
  EXPECT_EQ(late.rows[0].memory_peak_mib, 3000);
  // Buckets of leases the report was not given (another tenant's) are left out.
  leases_.erase(leases_.begin());
  EXPECT_EQ(Report(UsageGroupBy::kWorkload).rows.size(), 3u);
}

TEST_F(UsageReportTest, SamePurposeOfTwoTenantsGivesTwoWorkloads) {
  leases_.push_back(Lease(6, "team-b", "small", "notebook: ann", "1g.10gb", 9984));
  Add(buckets_, 6, 0, Figures(100, 9984, 5, 1));
  const UsageReport report = Report(UsageGroupBy::kWorkload);
  ASSERT_EQ(report.rows.size(), 5u);
  EXPECT_EQ(Row(report, "notebook-ann").tenant, "team-a");
  EXPECT_EQ(Row(report, "notebook-ann-team-b").tenant, "team-b");
}

TEST_F(UsageReportTest, ThePlanInputParsesBackWithThePlannersParser) {
  const UsageReport report = Report(UsageGroupBy::kTenant);
  const std::string yaml = PlanWorkloadsYaml(report);
  absl::StatusOr<plan::WorkloadSet> set =
      plan::ParseWorkloads(yaml, "usage.yaml", "", hw::Catalog::Builtin());
  ASSERT_TRUE(set.ok()) << set.status() << "\n" << yaml;
  EXPECT_DOUBLE_EQ(set->policy.memory_headroom, 0.15);
  ASSERT_EQ(set->workloads.size(), 3u) << yaml;  // the idle one is left out, with a comment
  EXPECT_THAT(yaml, HasSubstr("# left out: forgotten"));
  const plan::Workload& eval = set->workloads[0];
  EXPECT_EQ(eval.name, "eval-run-12");
  EXPECT_EQ(eval.kind, plan::WorkloadKind::kInference);  // the planner's default
  EXPECT_EQ(eval.tenant, "team-b");
  EXPECT_EQ(eval.replicas, 1);
  EXPECT_DOUBLE_EQ(eval.peak_memory_gib, 4.89);  // 5000 MiB, rounded up to 0.01 GiB
  EXPECT_TRUE(eval.measured);
  const plan::Workload& notebook = set->workloads[1];
  EXPECT_EQ(notebook.name, "notebook-ann");
  EXPECT_EQ(notebook.kind, plan::WorkloadKind::kNotebook);
  EXPECT_EQ(notebook.replicas, 2);
  EXPECT_DOUBLE_EQ(notebook.peak_memory_gib, 9.38);  // 9600 MiB
  const plan::Workload& ranker = set->workloads[2];
  EXPECT_EQ(ranker.name, "serving-ranker");
  EXPECT_EQ(ranker.kind, plan::WorkloadKind::kInference);
  EXPECT_DOUBLE_EQ(ranker.peak_memory_gib, 5.86);  // 6000 MiB
  // One comment line per workload says why.
  EXPECT_THAT(yaml, HasSubstr("# serving-ranker (tenant team-a, class large, purpose \"serving "
                              "ranker\"): peak 5.9 GiB"));

  // Only idle workloads: a file the planner refuses (nothing to plan).
  leases_ = {leases_[3]};
  const std::string idle = PlanWorkloadsYaml(Report(UsageGroupBy::kWorkload));
  EXPECT_THAT(idle, HasSubstr("workloads: []"));
  EXPECT_FALSE(plan::ParseWorkloads(idle, "idle.yaml", "", hw::Catalog::Builtin()).ok());
}

}  // namespace
}  // namespace gpuslice::alloc
