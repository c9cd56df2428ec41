#include "gpuslice/plan/sizing.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gpuslice/geometry/enumerate.h"

namespace gpuslice::plan {
namespace {

constexpr double kMibPerGib = 1024.0;

double Gib(std::int64_t mib) { return static_cast<double>(mib) / kMibPerGib; }

std::string Num(double value) {
  if (std::abs(value - std::round(value)) < 1e-9) return absl::StrFormat("%.0f", value);
  return absl::StrFormat("%.1f", value);
}

bool HasEngines(const hw::GiProfile& profile, const MediaNeed& need) {
  return profile.engines.decoder >= need.decoders && profile.engines.jpeg >= need.jpeg &&
         profile.engines.ofa >= need.ofa && profile.engines.encoder >= need.encoders;
}

// The variants the planner proposes: standard profiles, and "+me" ones when media is needed.
bool ProposedVariant(const hw::GiProfile& profile, const MediaNeed& need) {
  switch (profile.variant) {
    case hw::MediaVariant::kStandard:
      return true;
    case hw::MediaVariant::kMe:
      return need.Any();
    default:
      return false;
  }
}

struct Requirement {
  double memory_gib = 0;  // with headroom; 0 = unknown
  double headroom = 0;
  int min_slices = 0;
  int max_slices = 1 << 20;
};

Requirement RequirementOf(const Workload& workload, const SizingPolicy& policy) {
  Requirement req;
  req.headroom =
      workload.kind == WorkloadKind::kFineTune ? policy.fine_tune_headroom : policy.memory_headroom;
  if (workload.peak_memory_gib > 0) req.memory_gib = workload.peak_memory_gib * (1 + req.headroom);
  if (workload.kind == WorkloadKind::kFineTune && !workload.measured) {
    req.min_slices = policy.fine_tune_min_compute_slices;
  }
  if (workload.kind == WorkloadKind::kNotebook) req.max_slices = policy.notebook_max_compute_slices;
  return req;
}

// Whether a perf point was measured on an instance of `profile` (or on the whole GPU).
bool PointMatches(const PerfPoint& point, const hw::GpuModel& model, int profile) {
  if (profile == kWholeGpu) return point.compute_slices == 0 && point.profile.empty();
  const hw::GiProfile& gi = model.mig->profiles[static_cast<size_t>(profile)];
  if (!point.profile.empty()) {
    const hw::GiProfile* named = model.mig->FindProfile(point.profile);
    return named == &gi;
  }
  return point.compute_slices == gi.compute_slices && geometry::IsBaseProfile(gi);
}

// The best operating point of `workload` on `profile` of `model` that meets its latency SLO.
std::optional<PerfPoint> BestPoint(const Workload& workload, const hw::GpuModel& model, int profile,
                                   const SizingPolicy& policy) {
  std::optional<PerfPoint> best;
  const double latency_budget = workload.latency_p99_ms * (1 - policy.latency_margin);
  for (const PerfTable& table : workload.perf) {
    if (table.gpu_model != model.id) continue;
    for (const PerfPoint& point : table.points) {
      if (point.throughput_rps <= 0) continue;
      if (point.processes > 1 && !policy.allow_multi_process) continue;
      if (!PointMatches(point, model, profile)) continue;
      if (workload.latency_p99_ms > 0 &&
          point.latency_ms * policy.latency_wait_factor > latency_budget) {
        continue;
      }
      if (!best || point.throughput_rps > best->throughput_rps) best = point;
    }
  }
  return best;
}

// The full-size MIG profile (the largest base profile), whose measurement stands in for the
// whole GPU when the table has no whole-GPU row.
int FullSizeProfile(const hw::GpuModel& model) {
  int best = -1;
  for (size_t p = 0; p < model.mig->profiles.size(); ++p) {
    const hw::GiProfile& gi = model.mig->profiles[p];
    if (!geometry::IsBaseProfile(gi)) continue;
    if (best < 0 ||
        gi.compute_slices > model.mig->profiles[static_cast<size_t>(best)].compute_slices) {
      best = static_cast<int>(p);
    }
  }
  return best;
}

std::string MemoryText(const Workload& workload, const Requirement& req) {
  return absl::StrCat(Num(workload.peak_memory_gib), " GiB peak + ", Num(req.headroom * 100),
                      "% = ", absl::StrFormat("%.2f", req.memory_gib), " GiB");
}

}  // namespace

std::string InstanceName(const SizedOption& option) {
  if (option.profile == kWholeGpu) return "whole GPU";
  return option.model->mig->profiles[static_cast<size_t>(option.profile)].name;
}

WorkloadSizing SizeWorkload(const Workload& workload,
                            const std::vector<const hw::GpuModel*>& models,
                            const SizingPolicy& policy) {
  WorkloadSizing sizing;
  sizing.by_throughput = workload.throughput_rps > 0;
  sizing.demand = sizing.by_throughput ? workload.throughput_rps
                                       : static_cast<double>(std::max(workload.replicas, 1));
  sizing.min_instances = std::max(workload.min_instances, 1);
  if (!sizing.by_throughput) {
    sizing.demand = std::max(sizing.demand, static_cast<double>(sizing.min_instances));
  }
  const Requirement req = RequirementOf(workload, policy);
  std::vector<std::string> reasons;

  for (const hw::GpuModel* model : models) {
    if (!workload.gpu_models.empty() &&
        std::find(workload.gpu_models.begin(), workload.gpu_models.end(), model->id) ==
            workload.gpu_models.end()) {
      continue;
    }
    const double gpu_gib = Gib(model->memory_mib);
    std::vector<SizedOption> found;
    std::vector<std::string> rejected;  // why the smallest profiles were not taken
    bool any_table = false;
    for (const PerfTable& table : workload.perf) any_table |= table.gpu_model == model->id;

    auto consider = [&](int profile) {
      SizedOption option;
      option.model = model;
      option.profile = profile;
      if (profile == kWholeGpu) {
        option.memory_gib = gpu_gib;
        option.compute_slices = model->mig ? model->mig->compute_slices : 1;
        if (workload.kind == WorkloadKind::kNotebook && model->mig_capable()) {
          return;  // notebooks take small classes, never a whole MIG-capable card
        }
      } else {
        const hw::GiProfile& gi = model->mig->profiles[static_cast<size_t>(profile)];
        if (!ProposedVariant(gi, workload.media)) return;
        option.memory_gib = Gib(gi.memory_mib);
        option.compute_slices = gi.compute_slices;
        if (!HasEngines(gi, workload.media)) return;
        if (gi.compute_slices < req.min_slices) {
          rejected.push_back(absl::StrCat(gi.name, " is below the fine-tune minimum of ",
                                          req.min_slices, " compute slices"));
          return;
        }
        if (gi.compute_slices > req.max_slices) return;
      }
      if (req.memory_gib > 0 && option.memory_gib + 1e-9 < req.memory_gib) return;
      if (sizing.by_throughput) {
        std::optional<PerfPoint> point = BestPoint(workload, *model, profile, policy);
        if (!point && profile == kWholeGpu && model->mig_capable()) {
          const int full = FullSizeProfile(*model);
          if (full >= 0) point = BestPoint(workload, *model, full, policy);
        }
        if (!point) return;
        option.capacity = point->throughput_rps;
        option.batch = point->batch;
        option.processes = point->processes;
        option.latency_ms = point->latency_ms;
      }
      found.push_back(option);
    };
    if (model->mig_capable()) {
      for (size_t p = 0; p < model->mig->profiles.size(); ++p) consider(static_cast<int>(p));
    }
    consider(kWholeGpu);

    std::sort(found.begin(), found.end(), [](const SizedOption& a, const SizedOption& b) {
      if (a.profile == kWholeGpu) return false;
      if (b.profile == kWholeGpu) return true;
      if (a.compute_slices != b.compute_slices) return a.compute_slices < b.compute_slices;
      if (a.memory_gib != b.memory_gib) return a.memory_gib < b.memory_gib;
      return a.capacity > b.capacity;
    });

    if (found.empty()) {
      std::string why;
      if (sizing.by_throughput && !any_table) {
        why = "no measurements on this model";
      } else if (req.memory_gib > gpu_gib) {
        why = absl::StrCat(MemoryText(workload, req), " is more than the whole GPU (",
                           absl::StrFormat("%.1f", gpu_gib), " GiB)");
      } else if (sizing.by_throughput) {
        why =
            workload.latency_p99_ms > 0
                ? absl::StrCat("no measured point meets p99 <= ", Num(workload.latency_p99_ms),
                               " ms (worst case = ", Num(policy.latency_wait_factor),
                               " x batch latency, ", Num(policy.latency_margin * 100), "% margin)")
                : "no feasible measured point";
      } else if (workload.kind == WorkloadKind::kNotebook) {
        why = absl::StrCat("no profile with at most ", req.max_slices, " compute slices holds ",
                           MemoryText(workload, req), " (notebooks go to small classes)");
      } else if (workload.media.Any()) {
        why = "no profile has the media engines it needs";
      } else {
        why = rejected.empty() ? "no profile fits" : absl::StrJoin(rejected, "; ");
      }
      reasons.push_back(absl::StrCat(model->id, ": ", why));
      sizing.explanation.push_back(absl::StrCat(model->id, ": not possible (", why, ")"));
      continue;
    }

    const SizedOption& cheapest = found.front();
    std::string line;
    if (sizing.by_throughput) {
      // The option with the most throughput per compute slice is the one packing favours.
      const SizedOption* best = &found.front();
      for (const SizedOption& option : found) {
        if (option.capacity / option.compute_slices > best->capacity / best->compute_slices) {
          best = &option;
        }
      }
      std::vector<std::string> names;
      for (const SizedOption& option : found) {
        names.push_back(absl::StrCat(InstanceName(option), " ", Num(option.capacity), "/s"));
      }
      line =
          absl::StrCat(Num(workload.throughput_rps), " req/s",
                       workload.latency_p99_ms > 0
                           ? absl::StrCat(", p99 <= ", Num(workload.latency_p99_ms), " ms")
                           : "",
                       " -> best per slice ", InstanceName(*best), " at batch ", best->batch, " (",
                       Num(best->capacity), " req/s, ", Num(best->latency_ms), " ms per batch) on ",
                       model->id, "; options: ", absl::StrJoin(names, ", "));
    } else if (req.memory_gib > 0) {
      line = absl::StrCat(MemoryText(workload, req), " -> ", InstanceName(cheapest), " on ",
                          model->id);
      if (req.min_slices > 1) {
        absl::StrAppend(&line, " (fine-tune: at least ", req.min_slices, " compute slices)");
      }
    } else {
      line = absl::StrCat(InstanceName(cheapest), " on ", model->id);
    }
    sizing.explanation.push_back(line);
    sizing.options.insert(sizing.options.end(), found.begin(), found.end());
  }

  if (sizing.options.empty()) {
    sizing.unsatisfiable = reasons.empty() ? "none of its allowed GPU models is in the fleet"
                                           : absl::StrJoin(reasons, "; ");
  }
  return sizing;
}

}  // namespace gpuslice::plan
