#include "gpuslice/plan/report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpuslice/geometry/shape.h"
#include "report_detail.h"

namespace gpuslice::plan {
using namespace detail;
namespace {

// ---------------------------------------------------------------------------------------------
// Stranded capacity of one MIG GPU.

void FillStranded(const geometry::Shape& shape, const PlannedGpu& gpu, ReportGpu* out) {
  std::vector<geometry::Placed> layout;
  for (const PlannedInstance& instance : gpu.instances) {
    if (IsWhole(instance.profile)) continue;
    layout.push_back(
        {static_cast<std::uint8_t>(instance.profile), static_cast<std::uint8_t>(instance.start)});
  }
  const geometry::Occupancy occupancy = shape.OccupancyOf(layout);
  const geometry::Rules rules;
  geometry::UnitMask coverable = 0;  // free units some profile could still occupy
  for (int p = 0; p < shape.profile_count(); ++p) {
    if (shape.profile(p).variant != hw::MediaVariant::kStandard) continue;
    const int free = shape.FreeCount(occupancy, p, rules);
    if (free > 0) out->free_profiles.emplace_back(shape.profile(p).name, free);
    for (int start : shape.profile(p).starts) {
      if (shape.CanAdd(occupancy, p, start, rules).ok()) coverable |= shape.MaskOf(p, start);
    }
  }
  for (int unit = 0; unit < shape.units(); ++unit) {
    const geometry::UnitMask bit = geometry::UnitMask{1} << unit;
    if ((occupancy.used & bit) != 0) continue;
    out->free_units.push_back(unit);
    if ((coverable & bit) == 0) out->unusable_units.push_back(unit);
  }
}

// ---------------------------------------------------------------------------------------------
// Baselines. Both are counted workload by workload (in input order): each workload takes its
// cheapest way to run under the baseline's rule on a model that still has enough GPUs in the
// fleet; when no model has, the cheapest way anyway, and the baseline is flagged as exceeding the
// fleet.

// One way to run a workload under a baseline: instances of profiles on one model, and the share
// of that model's GPUs they take (GPU-hours per hour).
struct Choice {
  const hw::GpuModel* model = nullptr;
  std::vector<std::pair<int, int>> instances;  // (profile or kWholeGpu, count)
  double cost = std::numeric_limits<double>::infinity();
};

// Instances of each profile per GPU in the model's all-balanced layout.
std::map<int, int> BalancedCounts(const hw::GpuModel& model) {
  std::map<int, int> counts;
  if (!model.mig) return counts;
  for (const std::string& name : model.mig->balanced) {
    const hw::GiProfile* profile = model.mig->FindProfile(name);
    if (profile != nullptr) ++counts[model.mig->IndexOf(*profile)];
  }
  return counts;
}

// A baseline's fleet as it fills up: instances per model and profile.
class Usage {
 public:
  Usage(const std::map<std::string, ModelFleet>* fleet, bool balanced)
      : fleet_(fleet), balanced_(balanced) {}

  // Whether `model` runs all-balanced in this baseline (else its GPUs stay whole).
  bool Balanced(const hw::GpuModel& model) {
    if (!balanced_ || !model.mig_capable()) return false;
    auto it = fleet_->find(model.id);
    return it != fleet_->end() && it->second.mig_count > 0 && !PerGpu(model).empty();
  }
  const std::map<int, int>& PerGpu(const hw::GpuModel& model) {
    auto it = per_gpu_.find(&model);
    if (it == per_gpu_.end()) it = per_gpu_.emplace(&model, BalancedCounts(model)).first;
    return it->second;
  }
  // GPUs of `model` the instances take: whole ones, plus the balanced GPUs needed for the most
  // constraining profile.
  int Gpus(const hw::GpuModel& model, const std::map<int, int>& counts) {
    int whole = 0;
    int balanced = 0;
    for (const auto& [profile, n] : counts) {
      if (IsWhole(profile)) {
        whole += n;
      } else {
        balanced =
            std::max(balanced, CeilCount(static_cast<double>(n) / PerGpu(model).at(profile)));
      }
    }
    return whole + balanced;
  }
  bool Fits(const Choice& choice) {
    std::map<int, int> counts = used_[choice.model];
    for (const auto& [profile, n] : choice.instances) counts[profile] += n;
    auto it = fleet_->find(choice.model->id);
    return it != fleet_->end() && Gpus(*choice.model, counts) <= it->second.count;
  }
  void Take(const Choice& choice) {
    for (const auto& [profile, n] : choice.instances) used_[choice.model][profile] += n;
  }
  // Picks the cheapest choice that fits the fleet, else the cheapest; nullptr when none.
  const Choice* Pick(std::vector<Choice>& choices) {
    std::stable_sort(choices.begin(), choices.end(),
                     [](const Choice& a, const Choice& b) { return a.cost < b.cost - kEps; });
    for (const Choice& choice : choices) {
      if (Fits(choice)) return &choice;
    }
    return choices.empty() ? nullptr : &choices.front();
  }
  // GPUs and cost per hour per model.
  void Totals(std::map<std::string, int>* gpus, double* cost_per_hour) {
    for (const auto& [model, counts] : used_) {
      const ModelFleet& fleet = fleet_->at(model->id);
      int whole = 0;
      for (const auto& [profile, n] : counts) whole += IsWhole(profile) ? n : 0;
      const int all = Gpus(*model, counts);
      (*gpus)[model->id] += all;
      *cost_per_hour += whole * fleet.cheapest + (all - whole) * fleet.cheapest_mig;
    }
  }

 private:
  const std::map<std::string, ModelFleet>* fleet_;
  bool balanced_;
  std::map<const hw::GpuModel*, std::map<int, int>> per_gpu_;
  std::map<const hw::GpuModel*, std::map<int, int>> used_;
};

// One instance per whole GPU, on each model the workload has a whole-GPU option on.
std::vector<Choice> WholeGpuChoices(const WorkloadSizing& sizing,
                                    const std::map<std::string, ModelFleet>& fleet) {
  std::vector<Choice> choices;
  for (const SizedOption& option : sizing.options) {
    if (!IsWhole(option.profile) || option.model == nullptr || option.capacity <= 0) continue;
    auto it = fleet.find(option.model->id);
    if (it == fleet.end() || it->second.count == 0) continue;
    int n = sizing.by_throughput ? CeilCount(sizing.demand / option.capacity)
                                 : CeilCount(sizing.demand);
    n = std::max(n, sizing.min_instances);
    choices.push_back({option.model, {{kWholeGpu, n}}, n * it->second.cheapest});
  }
  return choices;
}

// Covers a workload greedily with the instances of `model`'s all-balanced layout: replicas on the
// smallest one; throughput on the one with the most throughput per GPU share, the remainder on the
// smallest share that covers it; then up to min_instances with the smallest.
Choice BalancedChoice(const WorkloadSizing& sizing, const hw::GpuModel& model,
                      const ModelFleet& fleet, const std::map<int, int>& per_gpu) {
  std::vector<std::pair<const SizedOption*, double>> candidates;  // option, GPU share
  for (const SizedOption& option : sizing.options) {
    if (option.model != &model || option.capacity <= 0 || IsWhole(option.profile)) continue;
    auto it = per_gpu.find(option.profile);
    if (it != per_gpu.end()) candidates.emplace_back(&option, 1.0 / it->second);
  }
  Choice choice;
  if (candidates.empty() || !std::isfinite(fleet.cheapest_mig)) return choice;
  std::map<int, int> counts;
  auto smallest =
      std::min_element(candidates.begin(), candidates.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  int total = 0;
  if (!sizing.by_throughput) {
    total = std::max(CeilCount(sizing.demand), sizing.min_instances);
    counts[smallest->first->profile] = total;
  } else {
    auto best =
        std::max_element(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
          return a.first->capacity / a.second < b.first->capacity / b.second - kEps;
        });
    double remaining = sizing.demand;
    const int k = static_cast<int>(std::floor(remaining / best->first->capacity + kEps));
    if (k > 0) counts[best->first->profile] += k;
    total += k;
    remaining -= k * best->first->capacity;
    if (remaining > kEps) {
      const std::pair<const SizedOption*, double>* last = nullptr;
      for (const auto& candidate : candidates) {
        if (candidate.first->capacity + kEps < remaining) continue;
        if (last == nullptr || candidate.second < last->second) last = &candidate;
      }
      if (last == nullptr) last = &*best;
      ++counts[last->first->profile];
      ++total;
    }
    if (total < sizing.min_instances) {
      counts[smallest->first->profile] += sizing.min_instances - total;
    }
  }
  choice.model = &model;
  choice.cost = 0;
  for (const auto& [profile, n] : counts) {
    choice.instances.emplace_back(profile, n);
    choice.cost += n * fleet.cheapest_mig / per_gpu.at(profile);
  }
  return choice;
}

// The plan's own instances of workload `w`, one whole GPU each, on the models it was planned on
// (for a workload the baseline's rule has no option for).
std::vector<Choice> PlannedAsWhole(const PlanResult& plan, int w,
                                   const std::map<std::string, ModelFleet>& fleet) {
  std::map<const hw::GpuModel*, int> per_model;
  for (const PlannedGpu& gpu : plan.gpus) {
    for (const PlannedInstance& instance : gpu.instances) {
      if (instance.workload == w && gpu.model != nullptr) ++per_model[gpu.model];
    }
  }
  std::vector<Choice> choices;
  for (const auto& [model, n] : per_model) {
    auto it = fleet.find(model->id);
    if (it == fleet.end()) continue;
    Choice choice{model, {{kWholeGpu, n}}, n * it->second.cheapest};
    choices.push_back(choice);
  }
  return choices;
}

struct BaselineInput {
  const PlanResult* plan;
  const WorkloadSet* workloads;
  const Fleet* fleet;
  const std::vector<bool>* placed;
  std::map<std::string, ModelFleet> by_model;
};

void FinishBaseline(const BaselineInput& in, Usage& usage, const Report& report,
                    Baseline* baseline) {
  std::map<std::string, int> gpus_by_model;
  usage.Totals(&gpus_by_model, &baseline->cost_per_hour);
  for (const auto& [model, n] : gpus_by_model) {
    if (n == 0) continue;
    baseline->gpus_by_model.emplace_back(model, n);
    baseline->gpus += n;
    auto it = in.by_model.find(model);
    if (it != in.by_model.end() && n > it->second.count) baseline->exceeds_fleet = true;
  }
  baseline->cost_per_month = baseline->cost_per_hour * in.fleet->hours_per_month;
  baseline->gpus_saved = baseline->gpus - report.gpus_used;
  baseline->saved_per_hour = baseline->cost_per_hour - report.cost_per_hour;
  baseline->saved_per_month = baseline->saved_per_hour * in.fleet->hours_per_month;
  if (baseline->exceeds_fleet) {
    baseline->notes.push_back("needs more GPUs of some model than the fleet has");
  }
}

Baseline OnePerGpuBaseline(const BaselineInput& in, const Report& report) {
  Baseline baseline;
  baseline.name = "one-workload-per-GPU";
  baseline.description =
      "every replica on its own whole GPU (throughput workloads: demand / whole-GPU throughput, "
      "rounded up), on the cheapest model the workload allows that the fleet still has";
  Usage usage(&in.by_model, /*balanced=*/false);
  const std::vector<Workload>& list = in.workloads->workloads;
  for (size_t w = 0; w < list.size() && w < in.plan->sizing.size(); ++w) {
    if (!(*in.placed)[w]) continue;
    std::vector<Choice> choices = WholeGpuChoices(in.plan->sizing[w], in.by_model);
    if (choices.empty()) {
      choices = PlannedAsWhole(*in.plan, Int(w), in.by_model);
      baseline.notes.push_back(list[w].name +
                               ": sized for slices only; counted as one whole GPU per planned "
                               "instance");
    }
    if (const Choice* choice = usage.Pick(choices)) usage.Take(*choice);
  }
  FinishBaseline(in, usage, report, &baseline);
  return baseline;
}

Baseline BalancedBaseline(const BaselineInput& in, const Report& report) {
  Baseline baseline;
  baseline.name = "all-balanced";
  baseline.description =
      "mig-parted's all-balanced layout on every MIG GPU; each workload uses the instances of that "
      "layout on its cheapest model that the fleet still has (models without MIG count whole "
      "GPUs)";
  Usage usage(&in.by_model, /*balanced=*/true);
  const std::vector<Workload>& list = in.workloads->workloads;
  for (size_t w = 0; w < list.size() && w < in.plan->sizing.size(); ++w) {
    if (!(*in.placed)[w]) continue;
    const WorkloadSizing& sizing = in.plan->sizing[w];
    std::vector<Choice> choices;
    std::set<const hw::GpuModel*> seen;
    for (const SizedOption& option : sizing.options) {
      if (option.model == nullptr || !seen.insert(option.model).second) continue;
      auto fleet = in.by_model.find(option.model->id);
      if (fleet == in.by_model.end() || fleet->second.count == 0) continue;
      if (usage.Balanced(*option.model)) {
        Choice choice =
            BalancedChoice(sizing, *option.model, fleet->second, usage.PerGpu(*option.model));
        if (choice.model != nullptr) choices.push_back(std::move(choice));
      } else {
        for (Choice& choice : WholeGpuChoices(sizing, in.by_model)) {
          if (choice.model == option.model) choices.push_back(std::move(choice));
        }
      }
    }
    if (choices.empty()) {
      // No instance of the layout holds it: those GPUs would be kept whole.
      choices = WholeGpuChoices(sizing, in.by_model);
      if (choices.empty()) {
        choices = PlannedAsWhole(*in.plan, Int(w), in.by_model);
        baseline.notes.push_back(list[w].name +
                                 ": fits no all-balanced instance and no whole GPU option; "
                                 "counted as one whole GPU per planned instance");
      } else {
        baseline.notes.push_back(list[w].name +
                                 ": fits no instance of the all-balanced layout; counted on "
                                 "whole GPUs (kept out of MIG)");
      }
    }
    if (const Choice* choice = usage.Pick(choices)) usage.Take(*choice);
  }
  FinishBaseline(in, usage, report, &baseline);
  return baseline;
}

// ---------------------------------------------------------------------------------------------
// Redundancy.

bool WorseLoss(const Loss& a, const Loss& b) {
  if (a.workloads_below_demand != b.workloads_below_demand)
    return a.workloads_below_demand > b.workloads_below_demand;
  double sa = 0;
  double sb = 0;
  for (const LossImpact& i : a.impacts) sa += i.demand > 0 ? i.capacity_lost / i.demand : 0;
  for (const LossImpact& i : b.impacts) sb += i.demand > 0 ? i.capacity_lost / i.demand : 0;
  return sa > sb + kEps;
}

Loss MakeLoss(const std::string& node, int gpu, const std::vector<double>& lost,
              const std::vector<double>& total, const std::vector<ReportWorkload>& workloads) {
  Loss loss;
  loss.node = node;
  loss.gpu = gpu;
  for (size_t w = 0; w < lost.size(); ++w) {
    if (lost[w] <= kEps) continue;
    LossImpact impact;
    impact.workload = workloads[w].name;
    impact.capacity_lost = lost[w];
    impact.capacity_left = std::max(0.0, total[w] - lost[w]);
    impact.demand = workloads[w].demand;
    impact.below_demand = impact.capacity_left + kEps < impact.demand;
    if (impact.below_demand) ++loss.workloads_below_demand;
    loss.impacts.push_back(std::move(impact));
  }
  return loss;
}

// ---------------------------------------------------------------------------------------------
// The checklist.

void BuildChecklist(const PlanResult& plan, const WorkloadSet& workloads, const Fleet& fleet,
                    Report* report) {
  const std::vector<Workload>& list = workloads.workloads;
  std::vector<std::string> small;
  std::vector<std::string> full;
  int placed = 0;
  int by_memory = 0;
  int by_throughput = 0;
  for (size_t w = 0; w < list.size() && w < plan.sizing.size(); ++w) {
    if (!report->workloads[w].placed) continue;
    ++placed;
    const WorkloadSizing& sizing = plan.sizing[w];
    (sizing.by_throughput ? by_throughput : by_memory) += 1;
    bool fits_half = false;
    bool has_partial = false;
    for (const SizedOption& option : sizing.options) {
      if (option.model == nullptr || IsWhole(option.profile) || !option.model->mig) continue;
      const int slices = InstanceSlices(*option.model, option.profile);
      if (slices < option.model->mig->compute_slices) has_partial = true;
      const bool covers = !sizing.by_throughput || option.capacity + kEps >= sizing.demand;
      if (covers && 2 * slices < option.model->mig->compute_slices) fits_half = true;
    }
    if (fits_half) small.push_back(list[w].name);
    if (!has_partial) full.push_back(list[w].name);
  }

  auto add = [report](std::string key, std::string question, std::string answer,
                      std::optional<bool> favours) {
    report->checklist.push_back({std::move(key), std::move(question), std::move(answer), favours});
  };

  add("small_workloads", "Workloads that need less than half a GPU",
      std::to_string(small.size()) + " of " + std::to_string(placed) +
          (small.empty() ? "" : " (" + JoinNames(small) + ")"),
      !small.empty());

  add("full_gpu_workloads", "Workloads that need a full GPU per instance",
      full.empty() ? "none"
                   : std::to_string(full.size()) + " of " + std::to_string(placed) + " (" +
                         JoinNames(full) + ")",
      full.empty() ? std::optional<bool>(true)
                   : (Int(full.size()) == placed ? std::optional<bool>(false) : std::nullopt));

  const Baseline* one = report->baselines.empty() ? nullptr : &report->baselines[0];
  if (one != nullptr) {
    std::string answer;
    const std::string unit = report->costs_given ? " " + report->currency : " GPU-hours";
    if (one->gpus_saved > 0 || one->saved_per_hour > kEps) {
      answer = Plural(one->gpus_saved, "GPU", "GPUs") + " fewer (" + std::to_string(one->gpus) +
               " -> " + std::to_string(report->gpus_used) + ")";
      if (report->costs_given)
        answer += ", " + Fixed(one->saved_per_month, 2) + unit + " per month";
    } else {
      answer = "none (" + std::to_string(one->gpus) + " GPUs either way)";
      if (one->gpus_saved < 0)
        answer = "none: the plan uses " + std::to_string(-one->gpus_saved) + " more GPUs";
    }
    add("gpus_saved", "GPUs saved against one workload per GPU", answer,
        one->gpus_saved > 0 || one->saved_per_hour > kEps);
  }
  if (report->baselines.size() > 1) {
    const Baseline& balanced = report->baselines[1];
    std::string answer =
        balanced.gpus_saved >= 0
            ? Plural(balanced.gpus_saved, "GPU", "GPUs") + " fewer than " +
                  "all-balanced everywhere (" + std::to_string(balanced.gpus) + " GPUs)"
            : std::to_string(-balanced.gpus_saved) + " more GPUs than all-balanced everywhere (" +
                  std::to_string(balanced.gpus) + " GPUs)";
    add("vs_all_balanced", "Tailored layouts against a uniform all-balanced layout", answer,
        std::nullopt);
  }

  {
    std::string answer = std::to_string(by_memory) + " workloads sized by memory, " +
                         std::to_string(by_throughput) + " by throughput";
    if (report->gpus_used > 0) {
      const bool memory_tighter = report->memory_utilisation > report->compute_utilisation;
      answer += "; the used GPUs hold " + Percent(report->memory_utilisation) +
                " of their memory and " + Percent(report->compute_utilisation) +
                " of their compute slices: " +
                (memory_tighter ? "memory-bound (memory decides the slice size)"
                                : "compute-bound (compute decides the slice size)");
    }
    add("memory_or_compute", "Memory-bound or compute-bound", answer, std::nullopt);
  }

  {
    int shared = 0;
    int shared_without_mig = 0;
    for (const ReportGpu& gpu : report->gpus) {
      std::set<std::string> tenants;
      for (const ReportInstance& instance : gpu.instances) tenants.insert(instance.tenant);
      if (tenants.size() > 1) {
        ++shared;
        if (!gpu.mig_enabled) ++shared_without_mig;
      }
    }
    std::string answer;
    std::optional<bool> favours;
    if (shared == 0) {
      answer = "no GPU is shared by tenants";
    } else if (shared_without_mig == 0) {
      answer = "yes: " + Plural(shared, "GPU hosts", "GPUs host") +
               " several tenants, each tenant on its own MIG instances (separate memory, cache "
               "and fault domains)";
      favours = true;
    } else {
      answer = "no: " + Plural(shared_without_mig, "GPU", "GPUs") +
               " would share a whole GPU between tenants";
      favours = false;
    }
    add("isolation", "Tenants sharing a GPU are isolated by MIG", answer, favours);
  }

  {
    int fixed_whole = 0;
    int no_mig = 0;
    for (const Node& node : fleet.nodes) {
      for (const GpuGroup& group : node.gpus) {
        if (!group.mig_allowed) fixed_whole += group.count;
      }
    }
    for (const PlannedGpu& gpu : plan.gpus) {
      if (gpu.model != nullptr && !gpu.model->mig_capable()) ++no_mig;
    }
    std::string answer = std::to_string(fixed_whole) + " of " +
                         std::to_string(report->gpus_in_fleet) +
                         " GPUs must stay whole (mig: disabled)";
    if (no_mig > 0) answer += "; " + std::to_string(no_mig) + " have no MIG";
    answer += "; the plan keeps " + Plural(report->whole_gpus, "used GPU", "used GPUs") + " whole";
    std::optional<bool> favours;
    if (fixed_whole + no_mig >= report->gpus_in_fleet && report->gpus_in_fleet > 0) favours = false;
    add("must_stay_whole", "GPUs that must stay whole", answer, favours);
  }

  {
    std::string answer;
    if (report->mig_gpus == 0) {
      answer = "no MIG GPU in the plan";
    } else {
      answer = std::to_string(report->gpus_with_free_capacity) + " of " +
               std::to_string(report->mig_gpus) + " MIG GPUs have room for more instances; " +
               Plural(report->gpus_with_unusable_units, "has", "have") +
               " free memory slices no profile can use";
    }
    add("stranded_capacity", "Capacity the layouts leave stranded", answer, std::nullopt);
  }

  // The verdict.
  if (report->gpus_used == 0) {
    report->verdict = "Nothing is placed, so there is nothing to decide.";
  } else if (report->mig_gpus == 0) {
    report->verdict =
        "MIG does not pay off here: the plan keeps every used GPU whole (MIG disabled).";
  } else if (one != nullptr && (one->gpus_saved > 0 || one->saved_per_hour > kEps)) {
    const double fraction = one->cost_per_hour > 0 ? one->saved_per_hour / one->cost_per_hour : 0;
    std::string saving =
        Plural(one->gpus_saved, "GPU", "GPUs") + " fewer than one workload per GPU";
    if (report->costs_given) {
      saving += ", " + Fixed(one->saved_per_month, 2) + " " + report->currency + " per month (" +
                Percent(fraction) + ")";
    } else {
      saving += " (" + Percent(fraction) + ")";
    }
    report->verdict =
        (fraction < 0.10 ? "MIG pays off only a little: " : "MIG pays off: ") + saving + ".";
  } else {
    report->verdict =
        "MIG does not pay off here: it saves nothing over one workload per whole GPU; keep the "
        "GPUs whole unless isolation between tenants matters.";
  }
}

}  // namespace

// -----------------------------------------------------------------------------------------------

std::string MigPartedConfigName(const Node& node) { return "gpuslice-" + node.name; }

namespace {

// What the plan gives each workload: capacity, GPUs, nodes and instance kinds.
struct WorkloadTally {
  explicit WorkloadTally(size_t n)
      : total(n, 0.0), gpus_of(n), nodes_of(n), kinds_of(n), instances_of(n, 0) {}
  std::vector<double> total;
  std::vector<std::set<size_t>> gpus_of;
  std::vector<std::set<int>> nodes_of;
  std::vector<std::map<std::string, int>> kinds_of;  // "1g.10gb on H100-80GB" -> count
  std::vector<int> instances_of;
};

ReportGpu GpuHeader(const PlannedGpu& planned, const Fleet& fleet) {
  ReportGpu gpu;
  gpu.node = planned.node >= 0 && Index(planned.node) < fleet.nodes.size()
                 ? fleet.nodes[Index(planned.node)].name
                 : "node " + std::to_string(planned.node);
  gpu.index = planned.index;
  gpu.model = planned.model != nullptr ? planned.model->id : "?";
  gpu.cost_per_hour = UnitCost(fleet, planned.cost_per_hour);
  gpu.mig_allowed = planned.mig_allowed;
  gpu.used = planned.used;
  gpu.mig_enabled = planned.mig_enabled;
  return gpu;
}

// The instances of GPU `g`, each counted to its workload.
void AddInstances(const PlanResult& plan, const WorkloadSet& workloads, size_t g, Shapes& shapes,
                  WorkloadTally& tally, ReportGpu& gpu) {
  const PlannedGpu& planned = plan.gpus[g];
  const hw::GpuModel& model = *planned.model;
  const std::vector<Workload>& list = workloads.workloads;
  const size_t n = list.size();
  std::vector<double>& total = tally.total;
  for (const PlannedInstance& instance : planned.instances) {
    ReportInstance out;
    out.profile = ProfileName(model, instance.profile);
    out.start = IsWhole(instance.profile) ? 0 : instance.start;
    out.gi_id = GiId(shapes, planned.model, instance);
    out.compute_slices = InstanceSlices(model, instance.profile);
    out.memory_gib = InstanceMemoryGib(model, instance.profile);
    out.capacity = instance.capacity;
    out.batch = instance.batch;
    out.kept = instance.kept;
    gpu.compute_slices_used += out.compute_slices;
    if (instance.workload >= 0 && Index(instance.workload) < n) {
      const size_t w = Index(instance.workload);
      const Workload& workload = list[w];
      const bool by_throughput =
          w < plan.sizing.size() ? plan.sizing[w].by_throughput : workload.throughput_rps > 0;
      out.workload = workload.name;
      out.tenant = workload.tenant;
      gpu.memory_needed_gib +=
          MemoryNeededGib(workload, workloads.policy, by_throughput, out.memory_gib);
      total[w] += instance.capacity;
      tally.gpus_of[w].insert(g);
      tally.nodes_of[w].insert(planned.node);
      ++tally.instances_of[w];
      ++tally.kinds_of[w][out.profile + " on " + model.id];
    }
    gpu.layout +=
        (gpu.layout.empty() ? "" : ",") +
        (IsWhole(instance.profile) ? out.profile : out.profile + "@" + std::to_string(out.start));
    gpu.instances.push_back(std::move(out));
  }
}

// A used GPU's share of the totals, and its stranded capacity.
void CountUsedGpu(const PlannedGpu& planned, Shapes& shapes, ReportGpu& gpu, Report& report) {
  const hw::GpuModel& model = *planned.model;
  gpu.compute_slices_total = GpuComputeSlices(model);
  gpu.compute_slices_used = std::min(gpu.compute_slices_used, gpu.compute_slices_total);
  gpu.memory_total_gib = MibToGib(model.memory_mib);
  ++report.gpus_used;
  report.cost_per_hour += gpu.cost_per_hour;
  (planned.mig_enabled ? report.mig_gpus : report.whole_gpus) += 1;
  report.compute_slices_used += gpu.compute_slices_used;
  report.compute_slices_total += gpu.compute_slices_total;
  report.memory_needed_gib += gpu.memory_needed_gib;
  report.memory_total_gib += gpu.memory_total_gib;
  if (planned.mig_enabled) {
    if (const geometry::Shape* shape = shapes.For(planned.model)) {
      FillStranded(*shape, planned, &gpu);
      if (!gpu.free_profiles.empty()) ++report.gpus_with_free_capacity;
      if (!gpu.unusable_units.empty()) ++report.gpus_with_unusable_units;
    }
  }
}

void AddGpus(const PlanResult& plan, const WorkloadSet& workloads, const Fleet& fleet,
             WorkloadTally& tally, Report& report) {
  Shapes shapes;
  for (size_t g = 0; g < plan.gpus.size(); ++g) {
    const PlannedGpu& planned = plan.gpus[g];
    ReportGpu gpu = GpuHeader(planned, fleet);
    ++report.gpus_in_fleet;
    if (planned.model == nullptr) {
      report.gpus.push_back(std::move(gpu));
      continue;
    }
    AddInstances(plan, workloads, g, shapes, tally, gpu);
    if (planned.used) CountUsedGpu(planned, shapes, gpu, report);
    report.gpus.push_back(std::move(gpu));
  }
  report.cost_per_month = report.cost_per_hour * fleet.hours_per_month;
  if (report.compute_slices_total > 0) {
    report.compute_utilisation =
        static_cast<double>(report.compute_slices_used) / report.compute_slices_total;
  }
  if (report.memory_total_gib > 0) {
    report.memory_utilisation = report.memory_needed_gib / report.memory_total_gib;
  }
}

// The workloads' rows; returns which were placed.
std::vector<bool> AddWorkloads(const PlanResult& plan, const WorkloadSet& workloads,
                               const WorkloadTally& tally, Report& report) {
  const std::vector<Workload>& list = workloads.workloads;
  const size_t n = list.size();
  std::map<int, std::string> unplaced;
  for (const auto& [w, reason] : plan.unplaced) {
    if (w >= 0 && Index(w) < list.size()) unplaced[w] = reason;
  }
  const std::vector<double>& total = tally.total;
  std::vector<bool> placed(n, false);
  for (size_t w = 0; w < n; ++w) {
    const Workload& workload = list[w];
    ReportWorkload out;
    out.name = workload.name;
    out.tenant = workload.tenant;
    out.kind = std::string(ToString(workload.kind));
    if (w < plan.sizing.size()) {
      const WorkloadSizing& sizing = plan.sizing[w];
      out.by_throughput = sizing.by_throughput;
      out.demand = sizing.demand;
      out.min_instances = sizing.min_instances;
      out.explanation = sizing.explanation;
    } else {
      out.by_throughput = workload.throughput_rps > 0;
      out.demand = out.by_throughput ? workload.throughput_rps : workload.replicas;
      out.min_instances = workload.min_instances;
    }
    auto reason = unplaced.find(Int(w));
    out.placed = reason == unplaced.end() && tally.instances_of[w] > 0;
    if (!out.placed) {
      out.unplaced_reason = reason != unplaced.end() ? reason->second : "no instance assigned";
      report.unplaced.emplace_back(out.name, out.unplaced_reason);
    }
    placed[w] = out.placed;
    for (const auto& [kind, count] : tally.kinds_of[w]) {
      out.placed_as.push_back(std::to_string(count) + " x " + kind);
    }
    out.instances = tally.instances_of[w];
    out.capacity = total[w];
    out.gpus = Int(tally.gpus_of[w].size());
    out.nodes = Int(tally.nodes_of[w].size());
    out.single_point_of_failure = out.placed && out.gpus == 1;
    if (out.single_point_of_failure) report.single_points_of_failure.push_back(out.name);
    report.workloads.push_back(std::move(out));
  }
  return placed;
}

// Losses: one GPU, then one node.
void AddLosses(const PlanResult& plan, const Fleet& fleet, const std::vector<double>& total,
               Report& report) {
  const size_t n = report.workloads.size();
  for (size_t g = 0; g < plan.gpus.size(); ++g) {
    const PlannedGpu& planned = plan.gpus[g];
    if (!planned.used) continue;
    std::vector<double> lost(n, 0.0);
    for (const PlannedInstance& instance : planned.instances) {
      if (instance.workload >= 0 && Index(instance.workload) < n)
        lost[Index(instance.workload)] += instance.capacity;
    }
    Loss loss = MakeLoss(report.gpus[g].node, planned.index, lost, total, report.workloads);
    if (!report.worst_gpu_loss || WorseLoss(loss, *report.worst_gpu_loss))
      report.worst_gpu_loss = loss;
    report.gpu_losses.push_back(std::move(loss));
  }
  for (size_t node = 0; node < fleet.nodes.size(); ++node) {
    std::vector<double> lost(n, 0.0);
    bool any = false;
    for (const PlannedGpu& planned : plan.gpus) {
      if (Index(planned.node) != node || !planned.used) continue;
      any = true;
      for (const PlannedInstance& instance : planned.instances) {
        if (instance.workload >= 0 && Index(instance.workload) < n)
          lost[Index(instance.workload)] += instance.capacity;
      }
    }
    if (!any) continue;
    Loss loss = MakeLoss(fleet.nodes[node].name, -1, lost, total, report.workloads);
    if (!report.worst_node_loss || WorseLoss(loss, *report.worst_node_loss))
      report.worst_node_loss = loss;
    report.node_losses.push_back(std::move(loss));
  }
}

// How the plan was found, and the notes.
void AddSolverAndNotes(const PlanResult& plan, size_t n, Report& report) {
  report.solver = plan.solver;
  report.solve_seconds = plan.solve_seconds;
  report.proven_optimal = plan.proven_optimal;
  report.lower_bound_cost = plan.lower_bound_cost;
  report.lower_bound_gpus = plan.lower_bound_gpus;
  if (!plan.proven_optimal && report.cost_per_hour > kEps) {
    report.gap =
        std::max(0.0, (report.cost_per_hour - plan.lower_bound_cost) / report.cost_per_hour);
  }
  report.notes = plan.notes;
  for (const Baseline& baseline : report.baselines) {
    if (baseline.exceeds_fleet) {
      report.notes.push_back("The " + baseline.name +
                             " baseline needs more GPUs than the fleet has; it is counted anyway "
                             "as the fleet it would take.");
    }
  }
  if (!report.unplaced.empty()) {
    report.notes.push_back("Baselines count only the " +
                           std::to_string(n - report.unplaced.size()) +
                           " placed workloads, like the plan.");
  }
}

}  // namespace

Report BuildReport(const PlanResult& plan, const WorkloadSet& workloads, const Fleet& fleet) {
  Report report;
  report.currency = fleet.currency;
  report.hours_per_month = fleet.hours_per_month;
  report.costs_given = fleet.costs_given;
  report.nodes = Int(fleet.nodes.size());
  const size_t n = workloads.workloads.size();
  WorkloadTally tally(n);
  AddGpus(plan, workloads, fleet, tally, report);
  const std::vector<bool> placed = AddWorkloads(plan, workloads, tally, report);

  // Baselines.
  BaselineInput in{&plan, &workloads, &fleet, &placed, FleetByModel(fleet)};
  report.baselines.push_back(OnePerGpuBaseline(in, report));
  report.baselines.push_back(BalancedBaseline(in, report));

  AddLosses(plan, fleet, tally.total, report);
  BuildChecklist(plan, workloads, fleet, &report);
  AddSolverAndNotes(plan, n, report);
  return report;
}

}  // namespace gpuslice::plan
