#include "gpuslice/alloc/usage.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/plan/model.h"
#include "gpuslice/plan/sizing.h"
#include "gpuslice/util/utf8.h"

namespace gpuslice::alloc {
namespace {

constexpr double kMibPerGib = 1024.0;

double Gib(std::int64_t mib) { return static_cast<double>(mib) / kMibPerGib; }
std::string GibText(std::int64_t mib) { return absl::StrFormat("%.1f GiB", Gib(mib)); }
std::string GibText(double mib) { return absl::StrFormat("%.1f GiB", mib / kMibPerGib); }

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// One line of free text for a YAML comment or a message.
std::string OneLine(std::string_view text) {
  std::string out;
  for (char c : text) out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  if (out.size() > 120) out = util::Utf8Prefix(out, 117) + "...";  // never inside a character
  return out;
}

// "2024-05-01 12:00 UTC".
std::string UtcText(std::int64_t epoch) {
  const auto t = static_cast<std::time_t>(epoch);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return absl::StrCat(epoch);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", &tm);
  return text;
}

std::string Quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The figures of one device, from the collector's view of the machine.
std::optional<UsageFigures> DeviceFigures(const metrics::MachineFigures& machine,
                                          const BoundDevice& device) {
  for (const metrics::GpuFigures& gpu : machine.gpus) {
    if (device.gi >= 0) {
      for (const metrics::InstanceFigures& instance : gpu.instances) {
        if (instance.uuid.empty() || instance.uuid != device.uuid) continue;
        if (!instance.memory_used_mib.has_value()) return std::nullopt;
        UsageFigures f;
        f.memory_used_mib = *instance.memory_used_mib;
        f.memory_total_mib = instance.memory_total_mib.value_or(0);
        f.processes = instance.processes.value_or(0);
        if (instance.activity.has_value()) f.sm_active_pct = instance.activity->sm_active_pct;
        return f;
      }
      continue;
    }
    if (gpu.uuid.empty() || gpu.uuid != device.uuid) continue;
    if (!gpu.memory_used_mib.has_value()) return std::nullopt;
    UsageFigures f;
    f.memory_used_mib = *gpu.memory_used_mib;
    f.memory_total_mib = device.vram_mib > 0 ? device.vram_mib : gpu.memory_total_mib.value_or(0);
    f.processes = gpu.processes.value_or(0);
    if (gpu.activity.has_value()) {
      f.sm_active_pct = gpu.activity->sm_active_pct;
    } else if (gpu.telemetry.utilization_pct.has_value()) {
      f.sm_active_pct = static_cast<double>(*gpu.telemetry.utilization_pct);
    }
    return f;
  }
  return std::nullopt;
}

// A lease's buckets added up, with the hours in which it was seen.
struct LeaseTotals {
  UsageBucket sum;
  std::int64_t first = 0;
  std::int64_t last = 0;
  std::set<std::int64_t> hours;
  bool any = false;
};

// What a group of leases adds up to.
struct GroupTotals {
  UsageBucket sum;
  std::int64_t first = 0;
  std::int64_t last = 0;
  std::map<std::int64_t, int> per_hour;  // hour -> leases seen in it
  std::vector<std::int64_t> leases;
  const UsageLease* reference = nullptr;
  std::int64_t reference_samples = -1;
  std::int64_t reference_total_mib = 0;
};

void AddLease(GroupTotals& group, const UsageLease& lease, const LeaseTotals& totals) {
  if (group.leases.empty()) {
    group.first = totals.first;
    group.last = totals.last;
  } else {
    group.first = std::min(group.first, totals.first);
    group.last = std::max(group.last, totals.last);
  }
  MergeBucket(group.sum, totals.sum);
  for (std::int64_t hour : totals.hours) group.per_hour[hour] += 1;
  group.leases.push_back(lease.id);
  // The reference slice: the lease with the most samples; ties go to the newest lease.
  if (totals.sum.samples > group.reference_samples ||
      (totals.sum.samples == group.reference_samples && lease.id > group.reference->id)) {
    group.reference = &lease;
    group.reference_samples = totals.sum.samples;
    group.reference_total_mib = totals.sum.memory_total_mib;
  }
}

UsageRow RowOf(const std::string& key, const GroupTotals& group) {
  UsageRow row;
  row.key = key;
  row.leases = group.leases;
  std::sort(row.leases.begin(), row.leases.end());
  row.samples = group.sum.samples;
  row.activity_samples = group.sum.activity_samples;
  row.first = group.first;
  row.last = group.last;
  row.memory_peak_mib = group.sum.memory_peak_mib;
  if (row.samples > 0) {
    row.memory_typical_mib =
        static_cast<double>(group.sum.memory_sum_mib) / static_cast<double>(row.samples);
  }
  if (group.sum.activity_samples > 0) {
    row.activity_peak_pct = static_cast<double>(group.sum.activity_peak_cpct) / 100.0;
    row.activity_typical_pct = static_cast<double>(group.sum.activity_sum_cpct) / 100.0 /
                               static_cast<double>(group.sum.activity_samples);
  }
  row.processes_peak = group.sum.processes_peak;
  for (const auto& [hour, count] : group.per_hour) {
    row.concurrent_peak = std::max(row.concurrent_peak, count);
  }
  if (group.reference != nullptr) {
    row.gpu_model = group.reference->gpu_model;
    row.profile = group.reference->profile;
    row.share = group.reference->share;
    row.slice_mib =
        group.reference_total_mib > 0 ? group.reference_total_mib : group.reference->slice_mib;
  }
  if (row.slice_mib > 0) {
    row.peak_fraction =
        static_cast<double>(row.memory_peak_mib) / static_cast<double>(row.slice_mib);
  }
  return row;
}

// The memory of the slice as the catalog has it: the profile's, or the whole GPU's.
std::int64_t CatalogSliceMib(const hw::GpuModel& model, const std::string& profile) {
  if (profile.empty()) return model.memory_mib;
  if (model.mig.has_value()) {
    if (const hw::GiProfile* gi = model.mig->FindProfile(profile); gi != nullptr) {
      return gi->memory_mib;
    }
  }
  return 0;
}

// The verdicts and the explanation of one workload row.
void Judge(UsageRow& row, const UsagePolicy& policy) {
  row.workloads = 1;
  const std::string slice = row.gpu_model.empty()
                                ? std::string("an unknown slice")
                                : absl::StrCat(row.gpu_model, " ",
                                               row.share             ? "share"
                                               : row.profile.empty() ? "whole GPU"
                                                                     : row.profile);
  std::string line = absl::StrCat("peak ", GibText(row.memory_peak_mib));
  if (row.slice_mib > 0) {
    absl::StrAppend(&line, " of ", GibText(row.slice_mib),
                    absl::StrFormat(" (%.0f%%)", row.peak_fraction * 100));
  }
  absl::StrAppend(&line, " on ", slice, ", typical ", GibText(row.memory_typical_mib));
  if (row.activity_peak_pct.has_value()) {
    absl::StrAppend(&line, absl::StrFormat("; SM activity peak %.0f%%, typical %.0f%%",
                                           *row.activity_peak_pct, *row.activity_typical_pct));
  }
  const bool nothing_ran = row.processes_peak == 0 && row.memory_peak_mib == 0;
  // Activity decides only when every sample gave it.
  const bool inactive = row.samples > 0 && row.activity_samples == row.samples &&
                        row.activity_peak_pct.has_value() &&
                        *row.activity_peak_pct < policy.idle_activity_pct;
  if (nothing_ran || inactive) {
    row.idle = 1;
    row.explanation = absl::StrCat(line, ": idle all along (",
                                   nothing_ran ? "no process, no memory in use" : "no SM activity",
                                   "); release it, or let its class's idle timeout reclaim it");
    return;
  }
  const hw::GpuModel* model =
      row.gpu_model.empty() ? nullptr : hw::Catalog::Builtin().Find(row.gpu_model);
  std::optional<plan::SizedOption> best;
  double needed_gib = 0;
  if (model != nullptr && !row.share) {
    plan::Workload workload;
    workload.name = row.key;
    if (std::optional<plan::WorkloadKind> kind = plan::ParseWorkloadKind(row.kind)) {
      workload.kind = *kind;
    }
    workload.replicas = 1;
    workload.peak_memory_gib = Gib(std::max<std::int64_t>(row.memory_peak_mib, 1));
    workload.measured = true;
    plan::SizingPolicy sizing_policy;
    sizing_policy.memory_headroom = policy.memory_headroom;
    const plan::WorkloadSizing sizing = plan::SizeWorkload(workload, {model}, sizing_policy);
    if (!sizing.options.empty()) best = sizing.options.front();
    needed_gib = workload.peak_memory_gib * (1 + (workload.kind == plan::WorkloadKind::kFineTune
                                                      ? sizing_policy.fine_tune_headroom
                                                      : sizing_policy.memory_headroom));
  }
  const std::string with_headroom =
      absl::StrFormat("%.1f GiB with the planner's headroom", needed_gib);
  if (row.slice_mib > 0 && static_cast<double>(row.memory_peak_mib) >=
                               policy.too_small_fraction * static_cast<double>(row.slice_mib)) {
    row.too_small = 1;
    std::string advice;
    if (best.has_value() && best->memory_gib * kMibPerGib > static_cast<double>(row.slice_mib)) {
      row.suggested_profile = plan::InstanceName(*best);
      advice = absl::StrCat("; ", row.suggested_profile, " holds ", with_headroom);
    } else if (model != nullptr && !row.share) {
      advice = absl::StrCat("; no larger slice of ", model->id, " holds ", with_headroom);
    }
    row.explanation =
        absl::StrCat(line, ": too small", advice,
                     " (the peak may be capped by the slice: measure again after re-sizing)");
    return;
  }
  if (best.has_value() && model != nullptr) {
    const std::int64_t current_mib = CatalogSliceMib(*model, row.profile);
    const bool smaller_profile = best->profile != plan::kWholeGpu &&
                                 (row.profile.empty() ? model->mig_capable()
                                                      : best->memory_gib * kMibPerGib + 0.5 <
                                                            static_cast<double>(current_mib));
    if (smaller_profile) {
      row.oversized = 1;
      row.suggested_profile = plan::InstanceName(*best);
      row.explanation =
          absl::StrCat(line, ": oversized; ", row.suggested_profile, " holds ", with_headroom);
      return;
    }
  }
  row.explanation = absl::StrCat(line, ": right-sized");
}

}  // namespace

absl::Status ValidateUsageFigures(const UsageFigures& f) {
  if (f.memory_used_mib < 0 || f.memory_used_mib > kMaxUsageMemoryMib) {
    return absl::InvalidArgumentError("memory_used_mib: must be within 0..16777216");
  }
  if (f.memory_total_mib < 0 || f.memory_total_mib > kMaxUsageMemoryMib) {
    return absl::InvalidArgumentError("memory_total_mib: must be within 0..16777216");
  }
  if (f.sm_active_pct.has_value() &&
      (!std::isfinite(*f.sm_active_pct) || *f.sm_active_pct < 0 || *f.sm_active_pct > 100)) {
    return absl::InvalidArgumentError("sm_active_pct: must be within 0..100");
  }
  if (f.processes < 0 || f.processes > kMaxUsageProcesses) {
    return absl::InvalidArgumentError("processes: must be within 0..100000");
  }
  return absl::OkStatus();
}

std::optional<UsageFigures> UsageFromFigures(const metrics::MachineFigures& machine,
                                             const std::vector<BoundDevice>& devices) {
  if (devices.empty()) return std::nullopt;
  UsageFigures total;
  double activity_sum = 0;
  int activity_count = 0;
  for (const BoundDevice& device : devices) {
    std::optional<UsageFigures> f = DeviceFigures(machine, device);
    if (!f.has_value()) return std::nullopt;
    total.memory_used_mib += f->memory_used_mib;
    total.memory_total_mib += f->memory_total_mib;
    total.processes += f->processes;
    if (f->sm_active_pct.has_value()) {
      activity_sum += *f->sm_active_pct;
      ++activity_count;
    }
  }
  // Activity of the lease only when every device gave it.
  if (activity_count == static_cast<int>(devices.size())) {
    total.sm_active_pct = activity_sum / activity_count;
  }
  return total;
}

std::int64_t BucketStart(std::int64_t at, std::int64_t length) {
  std::int64_t q = at / length;
  if (at % length != 0 && at < 0) --q;
  return q * length;
}

UsageBucket BucketOf(std::int64_t lease, std::int64_t at, const UsageFigures& figures,
                     std::int64_t length) {
  UsageBucket b;
  b.lease = lease;
  b.length = length;
  b.start = BucketStart(at, length);
  b.samples = 1;
  b.memory_peak_mib = figures.memory_used_mib;
  b.memory_sum_mib = figures.memory_used_mib;
  b.memory_total_mib = figures.memory_total_mib;
  if (figures.sm_active_pct.has_value()) {
    const std::int64_t cpct =
        std::clamp<std::int64_t>(std::llround(*figures.sm_active_pct * 100.0), 0, 10000);
    b.activity_samples = 1;
    b.activity_peak_cpct = cpct;
    b.activity_sum_cpct = cpct;
  }
  b.processes_peak = figures.processes;
  return b;
}

void MergeBucket(UsageBucket& into, const UsageBucket& from) {
  into.samples += from.samples;
  into.memory_peak_mib = std::max(into.memory_peak_mib, from.memory_peak_mib);
  into.memory_sum_mib += from.memory_sum_mib;
  into.memory_total_mib = std::max(into.memory_total_mib, from.memory_total_mib);
  into.activity_samples += from.activity_samples;
  into.activity_peak_cpct = std::max(into.activity_peak_cpct, from.activity_peak_cpct);
  into.activity_sum_cpct += from.activity_sum_cpct;
  into.processes_peak = std::max(into.processes_peak, from.processes_peak);
}

bool RollUpDue(const UsageBucket& bucket, std::int64_t now) {
  return bucket.length == kMinuteBucketS && bucket.start < now - kMinuteKeepS;
}

bool Expired(const UsageBucket& bucket, std::int64_t now) {
  return bucket.length == kHourBucketS && bucket.start < now - kHourKeepS;
}

std::vector<UsageBucket> RollUpMinutes(std::span<const UsageBucket> minutes) {
  std::map<std::pair<std::int64_t, std::int64_t>, UsageBucket> hours;
  for (const UsageBucket& minute : minutes) {
    const std::int64_t hour = BucketStart(minute.start, kHourBucketS);
    auto [it, inserted] = hours.try_emplace({minute.lease, hour});
    if (inserted) {
      it->second.lease = minute.lease;
      it->second.start = hour;
      it->second.length = kHourBucketS;
    }
    MergeBucket(it->second, minute);
  }
  std::vector<UsageBucket> out;
  out.reserve(hours.size());
  for (auto& [key, bucket] : hours) out.push_back(bucket);
  return out;
}

std::vector<UsageBucket> Compact(std::span<const UsageBucket> buckets, std::int64_t now) {
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, UsageBucket> kept;
  std::vector<UsageBucket> due;
  for (const UsageBucket& b : buckets) {
    if (RollUpDue(b, now)) {
      due.push_back(b);
      continue;
    }
    auto [it, inserted] = kept.try_emplace({b.lease, b.length, b.start}, b);
    if (!inserted) MergeBucket(it->second, b);
  }
  for (const UsageBucket& hour : RollUpMinutes(due)) {
    auto [it, inserted] = kept.try_emplace({hour.lease, hour.length, hour.start}, hour);
    if (!inserted) MergeBucket(it->second, hour);
  }
  std::vector<UsageBucket> out;
  for (auto& [key, bucket] : kept) {
    if (!Expired(bucket, now)) out.push_back(bucket);
  }
  return out;
}

std::string_view ToString(UsageGroupBy by) {
  switch (by) {
    case UsageGroupBy::kTenant:
      return "tenant";
    case UsageGroupBy::kClass:
      return "class";
    case UsageGroupBy::kWorkload:
      break;
  }
  return "workload";
}

std::optional<UsageGroupBy> ParseUsageGroupBy(std::string_view text) {
  if (text == "workload") return UsageGroupBy::kWorkload;
  if (text == "tenant") return UsageGroupBy::kTenant;
  if (text == "class") return UsageGroupBy::kClass;
  return std::nullopt;
}

std::string WorkloadName(std::string_view purpose) {
  std::string name;
  for (char c : Lower(purpose)) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_';
    if (keep) {
      name += c;
    } else if (!name.empty() && name.back() != '-') {
      name += '-';
    }
  }
  if (name.size() > 48) name.resize(48);
  while (!name.empty() && name.back() == '-') name.pop_back();
  return name.empty() ? "workload" : name;
}

std::string GuessKind(std::string_view purpose) {
  const std::string text = Lower(purpose);
  auto has = [&](std::string_view word) { return text.find(word) != std::string::npos; };
  if (has("notebook") || has("jupyter")) return "notebook";
  if (has("fine-tun") || has("finetun") || has("fine tun") || has("fine_tun")) return "fine-tune";
  if (has("train") || has("batch")) return "batch";
  if (has("infer") || has("serv")) return "inference";
  return "";
}

UsageReport BuildUsageReport(std::span<const UsageLease> leases,
                             std::span<const UsageBucket> buckets, UsageGroupBy by,
                             std::int64_t since, std::int64_t until, const UsagePolicy& policy) {
  UsageReport report;
  report.since = since;
  report.until = until;
  report.by = by;
  std::map<std::int64_t, const UsageLease*> by_id;
  for (const UsageLease& lease : leases) by_id[lease.id] = &lease;
  std::map<std::int64_t, LeaseTotals> totals;
  for (const UsageBucket& b : buckets) {
    if (!by_id.contains(b.lease) || b.start + b.length <= since || b.start >= until) continue;
    LeaseTotals& t = totals[b.lease];
    if (!t.any) {
      t.first = b.start;
      t.last = b.start + b.length;
      t.any = true;
    }
    t.first = std::min(t.first, b.start);
    t.last = std::max(t.last, b.start + b.length);
    MergeBucket(t.sum, b);
    t.hours.insert(BucketStart(b.start, kHourBucketS));
  }

  // Workloads: a tenant's leases with the same purpose, named after the purpose.
  std::map<std::pair<std::string, std::string>, GroupTotals> workloads;
  std::map<std::string, GroupTotals> tenants;
  std::map<std::string, GroupTotals> classes;
  for (const auto& [id, t] : totals) {
    const UsageLease& lease = *by_id.at(id);
    const std::string purpose = lease.purpose.empty() ? lease.class_name : lease.purpose;
    AddLease(workloads[{lease.tenant, purpose}], lease, t);
    AddLease(tenants[lease.tenant], lease, t);
    AddLease(classes[lease.class_name], lease, t);
  }
  std::set<std::string> names;
  std::map<std::string, std::string> class_of_workload;  // name -> class of its reference lease
  for (const auto& [key, group] : workloads) {
    const auto& [tenant, purpose] = key;
    std::string name = WorkloadName(purpose);
    if (names.contains(name) && !tenant.empty())
      name = absl::StrCat(name, "-", WorkloadName(tenant));
    for (int n = 2; names.contains(name); ++n) name = absl::StrCat(WorkloadName(purpose), "-", n);
    names.insert(name);
    UsageRow row = RowOf(name, group);
    row.tenant = tenant;
    row.purpose = purpose;
    row.class_name = group.reference->class_name;
    row.kind = GuessKind(purpose);
    Judge(row, policy);
    report.workloads.push_back(std::move(row));
  }
  std::sort(report.workloads.begin(), report.workloads.end(),
            [](const UsageRow& a, const UsageRow& b) { return a.key < b.key; });
  if (by == UsageGroupBy::kWorkload) {
    report.rows = report.workloads;
    return report;
  }
  const auto& groups = by == UsageGroupBy::kTenant ? tenants : classes;
  for (const auto& [key, group] : groups) {
    UsageRow row = RowOf(key, group);
    if (by == UsageGroupBy::kTenant) {
      row.tenant = key;
    } else {
      row.class_name = key;
    }
    for (const UsageRow& w : report.workloads) {
      if ((by == UsageGroupBy::kTenant ? w.tenant : w.class_name) != key) continue;
      row.workloads += 1;
      row.oversized += w.oversized;
      row.too_small += w.too_small;
      row.idle += w.idle;
    }
    report.rows.push_back(std::move(row));
  }
  return report;
}

std::string PlanWorkloadsYaml(const UsageReport& report, const UsagePolicy& policy) {
  std::string out = absl::StrCat(
      "# Workloads as `gpuslice report usage` measured them from ", UtcText(report.since), " to ",
      UtcText(report.until),
      ",\n# for `gpuslice plan -w FILE -f fleet.yaml`. peak_memory_gib is the highest memory in "
      "use\n# on the workload's slices (measured: true); replicas is the most of its leases seen "
      "in one\n# hour. Review before planning.\n",
      "policy:\n  memory_headroom: ", absl::StrFormat("%g", policy.memory_headroom), "\n");
  std::string items;
  for (const UsageRow& row : report.workloads) {
    const std::string who = absl::StrCat(
        row.key, " (", row.tenant.empty() ? "" : absl::StrCat("tenant ", row.tenant, ", "),
        "class ", row.class_name, ", purpose \"", OneLine(row.purpose), "\")");
    if (row.idle > 0) {
      absl::StrAppend(&items, "  # left out: ", who, ": ", OneLine(row.explanation), "\n");
      continue;
    }
    const double peak_gib =
        std::max(0.01, std::ceil(Gib(row.memory_peak_mib) * 100.0 - 1e-9) / 100.0);
    absl::StrAppend(&items, "  # ", who, ": ", OneLine(row.explanation), "\n");
    absl::StrAppend(&items, "  - name: ", Quoted(row.key), "\n");
    if (!row.kind.empty()) absl::StrAppend(&items, "    kind: ", row.kind, "\n");
    if (!row.tenant.empty()) absl::StrAppend(&items, "    tenant: ", Quoted(row.tenant), "\n");
    absl::StrAppend(&items, "    replicas: ", std::max(row.concurrent_peak, 1), "\n");
    absl::StrAppend(&items, "    peak_memory_gib: ", absl::StrFormat("%.2f", peak_gib), "\n");
    absl::StrAppend(&items, "    measured: true\n");
  }
  if (items.find("  - name:") == std::string::npos) {
    absl::StrAppend(&out, "workloads: []  # every workload was idle\n", items);
  } else {
    absl::StrAppend(&out, "workloads:\n", items);
  }
  return out;
}

UsageBucket UsageBucketFromRow(const store::Row& row) {
  UsageBucket b;
  b.lease = store::AsInt(row[0]);
  b.start = store::AsInt(row[1]);
  b.length = store::AsInt(row[2]);
  b.samples = store::AsInt(row[3]);
  b.memory_peak_mib = store::AsInt(row[4]);
  b.memory_sum_mib = store::AsInt(row[5]);
  b.memory_total_mib = store::AsInt(row[6]);
  b.activity_samples = store::AsInt(row[7]);
  b.activity_peak_cpct = store::AsInt(row[8]);
  b.activity_sum_cpct = store::AsInt(row[9]);
  b.processes_peak = store::AsInt(row[10]);
  return b;
}

}  // namespace gpuslice::alloc
