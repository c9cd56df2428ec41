// CheckPlan: an independent check of a plan against its inputs. It recomputes what sizing and
// packing claim from the raw inputs (perf tables, memory, layout rules) rather than trusting the
// planner's bookkeeping.
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpuslice/geometry/enumerate.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/plan/plan.h"

namespace gpuslice::plan {
namespace {

constexpr double kTolerance = 1e-6;

std::string GpuName(const Fleet& fleet, const PlannedGpu& gpu) {
  const std::string node = gpu.node >= 0 && static_cast<size_t>(gpu.node) < fleet.nodes.size()
                               ? fleet.nodes[static_cast<size_t>(gpu.node)].name
                               : absl::StrCat("node#", gpu.node);
  return absl::StrCat(node, "/gpu", gpu.index);
}

// The measured throughput of `workload` on this instance at `batch`, if a point meets the SLO.
double MeasuredThroughput(const Workload& workload, const hw::GpuModel& model, int profile,
                          int batch, const SizingPolicy& policy) {
  double best = 0;
  for (const PerfTable& table : workload.perf) {
    if (table.gpu_model != model.id) continue;
    for (const PerfPoint& point : table.points) {
      if (point.batch != batch || point.throughput_rps <= 0) continue;
      if (point.processes > 1 && !policy.allow_multi_process) continue;
      bool same_instance = false;
      if (profile == kWholeGpu) {
        // A whole GPU may be credited with its own row or the full-size instance's row.
        same_instance =
            point.compute_slices == 0 || (model.mig && point.profile.empty() &&
                                          point.compute_slices == model.mig->compute_slices);
      } else {
        const hw::GiProfile& gi = model.mig->profiles[static_cast<size_t>(profile)];
        same_instance = point.profile.empty() ? (point.compute_slices == gi.compute_slices &&
                                                 geometry::IsBaseProfile(gi))
                                              : model.mig->FindProfile(point.profile) == &gi;
      }
      if (!same_instance) continue;
      if (workload.latency_p99_ms > 0 &&
          point.latency_ms * policy.latency_wait_factor >
              workload.latency_p99_ms * (1 - policy.latency_margin) + kTolerance) {
        continue;
      }
      best = std::max(best, point.throughput_rps);
    }
  }
  return best;
}

}  // namespace

std::vector<std::string> CheckPlan(const PlanResult& plan, const WorkloadSet& workloads,
                                   const Fleet& fleet) {
  std::vector<std::string> problems;
  const SizingPolicy& policy = workloads.policy;
  const size_t workload_count = workloads.workloads.size();

  // The plan's GPUs are exactly the fleet's.
  std::map<std::pair<int, int>, const GpuGroup*> fleet_gpus;
  for (size_t n = 0; n < fleet.nodes.size(); ++n) {
    int index = 0;
    for (const GpuGroup& group : fleet.nodes[n].gpus) {
      for (int i = 0; i < group.count; ++i) fleet_gpus[{static_cast<int>(n), index++}] = &group;
    }
  }
  std::set<std::pair<int, int>> seen;
  std::vector<double> covered(workload_count, 0);
  std::vector<int> instances(workload_count, 0);
  double cost = 0;
  int used = 0;
  for (const PlannedGpu& gpu : plan.gpus) {
    const std::string name = GpuName(fleet, gpu);
    auto group = fleet_gpus.find({gpu.node, gpu.index});
    if (group == fleet_gpus.end() || !seen.insert({gpu.node, gpu.index}).second) {
      problems.push_back(absl::StrCat(name, ": not a GPU of the fleet, or listed twice"));
      continue;
    }
    if (gpu.model == nullptr || gpu.model->id != group->second->model) {
      problems.push_back(absl::StrCat(name, ": model differs from the fleet's"));
      continue;
    }
    const hw::GpuModel& model = *gpu.model;
    if (gpu.instances.empty()) continue;
    ++used;
    cost += group->second->cost_per_hour;
    const bool whole = gpu.instances.size() == 1 && gpu.instances[0].profile == kWholeGpu;
    if (whole) {
      if (gpu.mig_enabled) problems.push_back(absl::StrCat(name, ": whole GPU with MIG enabled"));
    } else {
      if (!model.mig_capable()) {
        problems.push_back(absl::StrCat(name, ": MIG instances on a GPU without MIG"));
        continue;
      }
      if (!group->second->mig_allowed) {
        problems.push_back(absl::StrCat(name, ": MIG instances on a GPU that must stay whole"));
      }
      std::vector<geometry::Placed> layout;
      bool indices_ok = true;
      for (const PlannedInstance& instance : gpu.instances) {
        if (instance.profile < 0 ||
            static_cast<size_t>(instance.profile) >= model.mig->profiles.size()) {
          indices_ok = false;
          break;
        }
        layout.push_back({static_cast<std::uint8_t>(instance.profile),
                          static_cast<std::uint8_t>(instance.start)});
      }
      if (!indices_ok) {
        problems.push_back(
            absl::StrCat(name, ": unknown profile, or a whole GPU beside MIG instances"));
        continue;
      }
      geometry::Shape shape(model);
      const geometry::Violation violation = shape.Validate(layout);
      if (!violation.ok()) {
        problems.push_back(
            absl::StrCat(name, ": invalid layout: ", geometry::Describe(shape, layout, violation)));
      }
    }
    for (const PlannedInstance& instance : gpu.instances) {
      if (instance.workload < 0 || static_cast<size_t>(instance.workload) >= workload_count) {
        problems.push_back(absl::StrCat(name, ": an instance without a workload"));
        continue;
      }
      const Workload& workload = workloads.workloads[static_cast<size_t>(instance.workload)];
      const std::string where = absl::StrCat(name, ": ", workload.name);
      if (!workload.gpu_models.empty() &&
          std::find(workload.gpu_models.begin(), workload.gpu_models.end(), model.id) ==
              workload.gpu_models.end()) {
        problems.push_back(absl::StrCat(where, " is not allowed on ", model.id));
      }
      const double memory_gib =
          static_cast<double>(
              instance.profile == kWholeGpu
                  ? model.memory_mib
                  : model.mig->profiles[static_cast<size_t>(instance.profile)].memory_mib) /
          1024.0;
      const double headroom = workload.kind == WorkloadKind::kFineTune ? policy.fine_tune_headroom
                                                                       : policy.memory_headroom;
      if (workload.peak_memory_gib * (1 + headroom) > memory_gib + kTolerance) {
        problems.push_back(absl::StrFormat("%s: needs %.2f GiB, the instance has %.2f GiB", where,
                                           workload.peak_memory_gib * (1 + headroom), memory_gib));
      }
      double credited = 1;
      if (workload.throughput_rps > 0) {
        const double measured =
            MeasuredThroughput(workload, model, instance.profile, instance.batch, policy);
        if (measured <= 0) {
          problems.push_back(absl::StrCat(where, ": no measurement at batch ", instance.batch,
                                          " meets the latency SLO on this instance"));
        }
        credited = std::min(measured, instance.capacity);
      }
      covered[static_cast<size_t>(instance.workload)] += credited;
      ++instances[static_cast<size_t>(instance.workload)];
    }
  }
  if (seen.size() != fleet_gpus.size()) {
    problems.push_back(absl::StrCat("the plan lists ", seen.size(), " of the fleet's ",
                                    fleet_gpus.size(), " GPUs"));
  }

  std::set<int> unplaced;
  for (const auto& [w, reason] : plan.unplaced) unplaced.insert(w);
  for (size_t w = 0; w < workload_count; ++w) {
    const Workload& workload = workloads.workloads[w];
    if (unplaced.count(static_cast<int>(w)) > 0) {
      if (instances[w] > 0) {
        problems.push_back(absl::StrCat(workload.name, ": reported unplaced but has instances"));
      }
      continue;
    }
    const double demand = workload.throughput_rps > 0
                              ? workload.throughput_rps
                              : std::max(workload.replicas, workload.min_instances);
    if (covered[w] + kTolerance < demand) {
      problems.push_back(absl::StrFormat("%s: %g of %g %s covered", workload.name, covered[w],
                                         demand,
                                         workload.throughput_rps > 0 ? "req/s" : "replicas"));
    }
    if (instances[w] < workload.min_instances) {
      problems.push_back(absl::StrCat(workload.name, ": ", instances[w], " instances, at least ",
                                      workload.min_instances, " wanted"));
    }
  }
  if (used != plan.gpus_used || std::abs(cost - plan.cost_per_hour) > 1e-6 * (1 + cost)) {
    problems.push_back(absl::StrFormat("the plan claims %d GPUs at %.4f/h; they are %d at %.4f/h",
                                       plan.gpus_used, plan.cost_per_hour, used, cost));
  }
  if (plan.lower_bound_cost > plan.cost_per_hour + 1e-6 * (1 + cost) && plan.unplaced.empty()) {
    problems.push_back("the lower bound is above the plan's cost");
  }
  return problems;
}

}  // namespace gpuslice::plan
