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

namespace gpuslice::plan {
namespace {

constexpr double kEps = 1e-9;

// ---------------------------------------------------------------------------------------------
// Small helpers.

size_t Index(int i) { return static_cast<size_t>(i); }
int Int(size_t i) { return static_cast<int>(i); }

int CeilCount(double x) { return x <= kEps ? 0 : static_cast<int>(std::ceil(x - kEps)); }

std::string Fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  std::string text = buffer;
  if (text == "-0" || text == "-0.0" || text == "-0.00") text = text.substr(1);
  return text;
}

// A quantity without useless decimals: 3, 2.5, 829.4.
std::string Num(double value) {
  if (std::fabs(value - std::round(value)) < 1e-6) return Fixed(std::round(value), 0);
  if (std::fabs(value * 10 - std::round(value * 10)) < 1e-6) return Fixed(value, 1);
  return Fixed(value, 2);
}

std::string Percent(double fraction) { return Fixed(100.0 * fraction, 0) + "%"; }

double Round(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  const double rounded = std::round(value * scale) / scale;
  return rounded == 0 ? 0.0 : rounded;  // no -0
}

std::string Plural(int n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string JoinNames(const std::vector<std::string>& names, size_t limit = 6) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < limit; ++i) text += (i > 0 ? ", " : "") + names[i];
  if (names.size() > limit) text += ", ... (" + std::to_string(names.size() - limit) + " more)";
  return text;
}

bool IsWhole(int profile) { return profile == kWholeGpu; }

std::string ProfileName(const hw::GpuModel& model, int profile) {
  if (IsWhole(profile) || !model.mig || profile < 0 ||
      Index(profile) >= model.mig->profiles.size()) {
    return "whole GPU";
  }
  return model.mig->profiles[Index(profile)].name;
}

int GpuComputeSlices(const hw::GpuModel& model) {
  return model.mig ? model.mig->compute_slices : 1;
}

int InstanceSlices(const hw::GpuModel& model, int profile) {
  if (IsWhole(profile) || !model.mig) return GpuComputeSlices(model);
  return model.mig->profiles[Index(profile)].compute_slices;
}

double MibToGib(std::int64_t mib) { return static_cast<double>(mib) / 1024.0; }

double InstanceMemoryGib(const hw::GpuModel& model, int profile) {
  if (IsWhole(profile) || !model.mig) return MibToGib(model.memory_mib);
  return MibToGib(model.mig->profiles[Index(profile)].memory_mib);
}

// The memory a workload instance needs: the peak with its headroom, or (throughput workloads, or
// an unknown peak) the whole instance.
double MemoryNeededGib(const Workload& workload, const SizingPolicy& policy, bool by_throughput,
                       double instance_gib) {
  if (by_throughput || workload.peak_memory_gib <= 0) return instance_gib;
  const double headroom =
      workload.kind == WorkloadKind::kFineTune ? policy.fine_tune_headroom : policy.memory_headroom;
  return std::min(instance_gib, workload.peak_memory_gib * (1.0 + headroom));
}

std::string GpuLabel(const std::string& node, int index) {
  return node + " GPU " + std::to_string(index);
}

// The fleet per GPU model: how many GPUs, and the cheapest hourly cost (any group, and among the
// groups that allow MIG).
struct ModelFleet {
  int count = 0;
  int mig_count = 0;
  double cheapest = std::numeric_limits<double>::infinity();
  double cheapest_mig = std::numeric_limits<double>::infinity();
};

double UnitCost(const Fleet& fleet, double cost) { return fleet.costs_given ? cost : 1.0; }

std::map<std::string, ModelFleet> FleetByModel(const Fleet& fleet) {
  std::map<std::string, ModelFleet> by_model;
  for (const Node& node : fleet.nodes) {
    for (const GpuGroup& group : node.gpus) {
      ModelFleet& entry = by_model[group.model];
      const double cost = UnitCost(fleet, group.cost_per_hour);
      entry.count += group.count;
      entry.cheapest = std::min(entry.cheapest, cost);
      if (group.mig_allowed) {
        entry.mig_count += group.count;
        entry.cheapest_mig = std::min(entry.cheapest_mig, cost);
      }
    }
  }
  return by_model;
}

// Layout engines per model, built once.
class Shapes {
 public:
  const geometry::Shape* For(const hw::GpuModel* model) {
    if (model == nullptr || !model->mig_capable()) return nullptr;
    auto it = shapes_.find(model);
    if (it == shapes_.end()) {
      it = shapes_.emplace(model, std::make_unique<geometry::Shape>(*model)).first;
    }
    return it->second.get();
  }

 private:
  std::map<const hw::GpuModel*, std::unique_ptr<geometry::Shape>> shapes_;
};

int GiId(Shapes& shapes, const hw::GpuModel* model, const PlannedInstance& instance) {
  const geometry::Shape* shape = shapes.For(model);
  if (shape == nullptr || IsWhole(instance.profile)) return -1;
  return shape->GpuInstanceId(instance.profile, instance.start);
}

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

Report BuildReport(const PlanResult& plan, const WorkloadSet& workloads, const Fleet& fleet) {
  Report report;
  report.currency = fleet.currency;
  report.hours_per_month = fleet.hours_per_month;
  report.costs_given = fleet.costs_given;
  report.nodes = Int(fleet.nodes.size());
  const std::vector<Workload>& list = workloads.workloads;
  Shapes shapes;

  // Unplaced workloads.
  std::map<int, std::string> unplaced;
  for (const auto& [w, reason] : plan.unplaced) {
    if (w >= 0 && Index(w) < list.size()) unplaced[w] = reason;
  }

  // Capacity per workload per GPU and per node.
  const size_t n = list.size();
  std::vector<double> total(n, 0.0);
  std::vector<std::set<size_t>> gpus_of(n);
  std::vector<std::set<int>> nodes_of(n);
  std::vector<std::map<std::string, int>> kinds_of(n);  // "1g.10gb on H100-80GB" -> count
  std::vector<int> instances_of(n, 0);

  for (size_t g = 0; g < plan.gpus.size(); ++g) {
    const PlannedGpu& planned = plan.gpus[g];
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
    ++report.gpus_in_fleet;
    if (planned.model == nullptr) {
      report.gpus.push_back(std::move(gpu));
      continue;
    }
    const hw::GpuModel& model = *planned.model;
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
        gpus_of[w].insert(g);
        nodes_of[w].insert(planned.node);
        ++instances_of[w];
        ++kinds_of[w][out.profile + " on " + model.id];
      }
      gpu.layout +=
          (gpu.layout.empty() ? "" : ",") +
          (IsWhole(instance.profile) ? out.profile : out.profile + "@" + std::to_string(out.start));
      gpu.instances.push_back(std::move(out));
    }
    if (planned.used) {
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

  // Workloads.
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
    out.placed = reason == unplaced.end() && instances_of[w] > 0;
    if (!out.placed) {
      out.unplaced_reason = reason != unplaced.end() ? reason->second : "no instance assigned";
      report.unplaced.emplace_back(out.name, out.unplaced_reason);
    }
    placed[w] = out.placed;
    for (const auto& [kind, count] : kinds_of[w]) {
      out.placed_as.push_back(std::to_string(count) + " x " + kind);
    }
    out.instances = instances_of[w];
    out.capacity = total[w];
    out.gpus = Int(gpus_of[w].size());
    out.nodes = Int(nodes_of[w].size());
    out.single_point_of_failure = out.placed && out.gpus == 1;
    if (out.single_point_of_failure) report.single_points_of_failure.push_back(out.name);
    report.workloads.push_back(std::move(out));
  }

  // Baselines.
  BaselineInput in{&plan, &workloads, &fleet, &placed, FleetByModel(fleet)};
  report.baselines.push_back(OnePerGpuBaseline(in, report));
  report.baselines.push_back(BalancedBaseline(in, report));

  // Losses: one GPU, then one node.
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

  BuildChecklist(plan, workloads, fleet, &report);

  // How the plan was found.
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
  return report;
}

// -----------------------------------------------------------------------------------------------
// Text.

namespace {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : right_(header.size(), false) {
    rows_.push_back(std::move(header));
  }
  void Add(std::vector<std::string> row) {
    row.resize(rows_.front().size());
    rows_.push_back(std::move(row));
  }
  void RightAlign(size_t column) { right_.at(column) = true; }
  std::string Render(const std::string& indent) const {
    std::vector<size_t> widths(rows_.front().size(), 0);
    for (const auto& row : rows_) {
      for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], Width(row[c]));
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line = indent;
      for (size_t c = 0; c < row.size(); ++c) {
        const std::string pad(widths[c] - Width(row[c]), ' ');
        line += right_[c] ? pad + row[c] : row[c] + pad;
        if (c + 1 < row.size()) line += "  ";
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }

 private:
  // Display width of UTF-8 text: code points.
  static size_t Width(const std::string& text) {
    size_t width = 0;
    for (char c : text) {
      if ((static_cast<unsigned char>(c) & 0xC0U) != 0x80U) ++width;
    }
    return width;
  }
  std::vector<std::vector<std::string>> rows_;
  std::vector<bool> right_;
};

std::string Money(const Report& report, double value) {
  if (!report.costs_given) return Num(Round(value, 2));
  return Fixed(value, 2) + " " + report.currency;
}

std::string Demand(const ReportWorkload& workload) {
  if (workload.by_throughput) return Num(workload.demand) + " req/s";
  return Plural(static_cast<int>(std::lround(workload.demand)), "replica", "replicas");
}

std::string Capacity(bool by_throughput, double value) {
  return by_throughput ? Num(value) + " req/s" : Num(value);
}

// "unit 7", "units 1-3,6".
std::string UnitsText(const std::vector<int>& units) {
  std::string text;
  for (size_t i = 0; i < units.size();) {
    size_t j = i;
    while (j + 1 < units.size() && units[j + 1] == units[j] + 1) ++j;
    text += (text.empty() ? "" : ",") + std::to_string(units[i]);
    if (j > i) text += "-" + std::to_string(units[j]);
    i = j + 1;
  }
  return (units.size() == 1 ? "unit " : "units ") + text;
}

std::string LossText(const Report& report, const Loss& loss) {
  std::map<std::string, bool> by_throughput;
  for (const ReportWorkload& workload : report.workloads)
    by_throughput[workload.name] = workload.by_throughput;
  std::string text;
  for (const LossImpact& impact : loss.impacts) {
    const bool rps = by_throughput[impact.workload];
    text += "\n      " + impact.workload + ": loses " + Capacity(rps, impact.capacity_lost) + ", " +
            Capacity(rps, impact.capacity_left) + " left of " + Capacity(rps, impact.demand) +
            (impact.below_demand ? "  BELOW DEMAND" : "");
  }
  if (loss.impacts.empty()) text += " nothing";
  return text;
}

}  // namespace

std::string RenderText(const Report& report, const TextOptions& options) {
  std::string out;
  const std::string cost_unit =
      report.costs_given ? report.currency
                         : "no costs given: every GPU counts 1 per hour, so costs are GPU-hours";
  out += "gpuslice plan: " + Plural(Int(report.workloads.size()), "workload", "workloads") +
         " on " + Plural(report.gpus_in_fleet, "GPU", "GPUs") + " in " +
         Plural(report.nodes, "node", "nodes") + ".\n";
  out += "Uses " + Plural(report.gpus_used, "GPU", "GPUs") + " (" +
         std::to_string(report.mig_gpus) + " with MIG, " + std::to_string(report.whole_gpus) +
         " whole)";
  if (report.costs_given) {
    out += ": " + Money(report, report.cost_per_hour) + " per hour, " +
           Money(report, report.cost_per_month) + " per month";
  } else {
    out += ": " + Num(Round(report.cost_per_month, 2)) + " GPU-hours per month";
  }
  out += ".\n";
  if (!report.unplaced.empty()) {
    out += "NOT PLACED: " + Plural(Int(report.unplaced.size()), "workload", "workloads") +
           " (see Unplaced).\n";
  }

  // Sizing.
  out += "\nSizing\n";
  {
    TextTable table({"WORKLOAD", "TENANT", "KIND", "DEMAND", "MIN", "PLACED AS"});
    for (const ReportWorkload& workload : report.workloads) {
      std::string placed_as = workload.placed ? "" : "NOT PLACED";
      for (const std::string& kind : workload.placed_as)
        placed_as += (placed_as.empty() ? "" : ", ") + kind;
      table.Add({workload.name, workload.tenant, workload.kind, Demand(workload),
                 std::to_string(workload.min_instances), placed_as});
    }
    out += table.Render("  ");
    if (options.explanations) {
      for (const ReportWorkload& workload : report.workloads) {
        if (workload.explanation.empty()) continue;
        out += "  " + workload.name + ":\n";
        for (const std::string& line : workload.explanation) out += "    " + line + "\n";
      }
    }
  }

  // Plan.
  out += "\nPlan\n";
  {
    bool any_kept = false;
    for (const ReportGpu& gpu : report.gpus) {
      for (const ReportInstance& instance : gpu.instances) any_kept = any_kept || instance.kept;
    }
    std::vector<std::string> header = {"NODE",  "GPU", "MODEL",    "MODE",   "INSTANCE",
                                       "START", "GI",  "WORKLOAD", "TENANT", "CAPACITY"};
    if (any_kept) header.push_back("RE-PLAN");
    TextTable table(header);
    table.RightAlign(1);
    table.RightAlign(5);
    table.RightAlign(6);
    table.RightAlign(9);
    int unused = 0;
    std::map<std::string, bool> by_throughput;
    for (const ReportWorkload& workload : report.workloads)
      by_throughput[workload.name] = workload.by_throughput;
    for (const ReportGpu& gpu : report.gpus) {
      if (!gpu.used) {
        ++unused;
        if (options.unused_gpus) {
          table.Add(
              {gpu.node, std::to_string(gpu.index), gpu.model, "unused", "", "", "", "", "", ""});
        }
        continue;
      }
      bool first = true;
      for (const ReportInstance& instance : gpu.instances) {
        std::string capacity = Capacity(by_throughput[instance.workload], instance.capacity);
        if (instance.batch > 0) capacity += " (batch " + std::to_string(instance.batch) + ")";
        table.Add({first ? gpu.node : "", first ? std::to_string(gpu.index) : "",
                   first ? gpu.model : "", first ? (gpu.mig_enabled ? "MIG" : "whole") : "",
                   instance.profile, instance.gi_id >= 0 ? std::to_string(instance.start) : "",
                   instance.gi_id >= 0 ? std::to_string(instance.gi_id) : "", instance.workload,
                   instance.tenant, capacity, instance.kept ? "kept" : "new"});
        first = false;
      }
    }
    out += table.Render("  ");
    if (unused > 0 && !options.unused_gpus) {
      out += "  " + Plural(unused, "GPU is", "GPUs are") + " not used (MIG disabled, free).\n";
    }
  }

  // Cost.
  out += "\nCost (" + cost_unit + ")\n";
  {
    const std::string per_month = report.costs_given ? "PER MONTH" : "GPU-HOURS/MONTH";
    TextTable table({"", "GPUS", report.costs_given ? "PER HOUR" : "GPUS/HOUR", per_month,
                     report.costs_given ? "PLAN SAVES/MONTH" : "GPU-HOURS SAVED/MONTH",
                     "GPUS SAVED"});
    for (size_t c = 1; c < 6; ++c) table.RightAlign(c);
    table.Add({"this plan", std::to_string(report.gpus_used), Money(report, report.cost_per_hour),
               Money(report, report.cost_per_month), "", ""});
    for (const Baseline& baseline : report.baselines) {
      table.Add({baseline.name, std::to_string(baseline.gpus),
                 Money(report, baseline.cost_per_hour), Money(report, baseline.cost_per_month),
                 Money(report, baseline.saved_per_month), std::to_string(baseline.gpus_saved)});
    }
    out += table.Render("  ");
    for (const Baseline& baseline : report.baselines) {
      std::string by_model;
      for (const auto& [model, count] : baseline.gpus_by_model)
        by_model += (by_model.empty() ? "" : ", ") + std::to_string(count) + " x " + model;
      out += "  " + baseline.name + ": " + baseline.description + (by_model.empty() ? "" : ": ") +
             by_model + ".\n";
      for (const std::string& note : baseline.notes) out += "    note: " + note + "\n";
    }
  }

  // Utilisation.
  out += "\nUtilisation (of the used GPUs)\n";
  out += "  Compute: " + std::to_string(report.compute_slices_used) + " of " +
         std::to_string(report.compute_slices_total) + " compute slices (" +
         Percent(report.compute_utilisation) + ")\n";
  out += "  Memory:  " + Fixed(report.memory_needed_gib, 1) + " of " +
         Fixed(report.memory_total_gib, 1) + " GiB (" + Percent(report.memory_utilisation) +
         "): workload peaks with headroom, whole instances for throughput workloads\n";

  // Stranded capacity.
  out += "\nStranded capacity\n";
  {
    bool any = false;
    for (const ReportGpu& gpu : report.gpus) {
      if (!gpu.used || !gpu.mig_enabled || gpu.free_units.empty()) continue;
      any = true;
      std::string line = "  " + GpuLabel(gpu.node, gpu.index) + " (" + gpu.model +
                         "): " + UnitsText(gpu.free_units) + " free";
      if (!gpu.free_profiles.empty()) {
        std::string profiles;
        for (const auto& [name, count] : gpu.free_profiles)
          profiles += (profiles.empty() ? "" : ", ") + std::to_string(count) + " x " + name;
        line += "; still fits (each alone) " + profiles;
      }
      if (!gpu.unusable_units.empty()) {
        line += "; " + UnitsText(gpu.unusable_units) + " unusable by any profile";
      }
      out += line + "\n";
    }
    if (!any) out += "  none: every used MIG GPU is full\n";
  }

  // Redundancy.
  out += "\nRedundancy\n";
  {
    TextTable table({"WORKLOAD", "INSTANCES", "GPUS", "NODES", "CAPACITY", "DEMAND", ""});
    for (size_t c = 1; c < 6; ++c) table.RightAlign(c);
    for (const ReportWorkload& workload : report.workloads) {
      if (!workload.placed) continue;
      std::string flag;
      if (workload.single_point_of_failure)
        flag = "single point of failure (one GPU)";
      else if (workload.nodes == 1 && report.nodes > 1)
        flag = "one node";
      table.Add({workload.name, std::to_string(workload.instances), std::to_string(workload.gpus),
                 std::to_string(workload.nodes),
                 Capacity(workload.by_throughput, workload.capacity),
                 Capacity(workload.by_throughput, workload.demand), flag});
    }
    out += table.Render("  ");
    if (report.single_points_of_failure.empty()) {
      out += "  No workload has all its instances on one GPU.\n";
    } else {
      out += "  Single points of failure: " + JoinNames(report.single_points_of_failure, 20) + "\n";
    }
    if (report.worst_gpu_loss) {
      const Loss& loss = *report.worst_gpu_loss;
      out += "  Worst single GPU loss: " + GpuLabel(loss.node, loss.gpu) + " (" +
             Plural(loss.workloads_below_demand, "workload", "workloads") + " below demand)" +
             LossText(report, loss) + "\n";
    }
    if (report.worst_node_loss && report.nodes > 1) {
      const Loss& loss = *report.worst_node_loss;
      out += "  Worst node loss: " + loss.node + " (" +
             Plural(loss.workloads_below_demand, "workload", "workloads") + " below demand)" +
             LossText(report, loss) + "\n";
    }
  }

  // Does MIG pay off.
  out += "\nDoes MIG pay off here?\n";
  for (const ChecklistItem& item : report.checklist) {
    const std::string mark = !item.favours_mig ? "[ ]" : (*item.favours_mig ? "[+]" : "[-]");
    out += "  " + mark + " " + item.question + ": " + item.answer + "\n";
  }
  out += "  ([+] argues for MIG, [-] against, [ ] for information)\n";
  out += "  Verdict: " + report.verdict + "\n";

  // Unplaced.
  if (!report.unplaced.empty()) {
    out += "\nUnplaced\n";
    for (const auto& [name, reason] : report.unplaced) out += "  " + name + ": " + reason + "\n";
  }

  // Notes.
  out += "\nNotes\n";
  out += "  Solver: " + (report.solver.empty() ? std::string("?") : report.solver) + " in " +
         Fixed(report.solve_seconds, 2) + " s; ";
  if (report.proven_optimal) {
    out += "proven optimal.\n";
  } else {
    out += "lower bound " + Money(report, report.lower_bound_cost) + " per hour";
    if (report.lower_bound_gpus > 0)
      out += " (" + Plural(report.lower_bound_gpus, "GPU", "GPUs") + ")";
    out += ", gap " + Fixed(100.0 * report.gap, 1) + "%; not proven optimal.\n";
  }
  for (const std::string& note : report.notes) out += "  " + note + "\n";
  return out;
}

// -----------------------------------------------------------------------------------------------
// JSON and YAML.

namespace {

nlohmann::json LossJson(const Loss& loss) {
  nlohmann::json impacts = nlohmann::json::array();
  for (const LossImpact& impact : loss.impacts) {
    impacts.push_back({{"workload", impact.workload},
                       {"capacity_lost", Round(impact.capacity_lost, 4)},
                       {"capacity_left", Round(impact.capacity_left, 4)},
                       {"demand", Round(impact.demand, 4)},
                       {"below_demand", impact.below_demand}});
  }
  return {{"node", loss.node},
          {"gpu", loss.gpu >= 0 ? nlohmann::json(loss.gpu) : nlohmann::json(nullptr)},
          {"workloads_below_demand", loss.workloads_below_demand},
          {"impacts", impacts}};
}

nlohmann::json PairsJson(const std::vector<std::pair<std::string, int>>& pairs) {
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [name, count] : pairs) json[name] = count;
  return json;
}

}  // namespace

nlohmann::json ToJson(const Report& report) {
  nlohmann::json workloads = nlohmann::json::array();
  for (const ReportWorkload& w : report.workloads) {
    workloads.push_back({{"name", w.name},
                         {"tenant", w.tenant},
                         {"kind", w.kind},
                         {"by_throughput", w.by_throughput},
                         {"demand", Round(w.demand, 4)},
                         {"min_instances", w.min_instances},
                         {"explanation", w.explanation},
                         {"placed", w.placed},
                         {"unplaced_reason", w.unplaced_reason},
                         {"placed_as", w.placed_as},
                         {"instances", w.instances},
                         {"capacity", Round(w.capacity, 4)},
                         {"gpus", w.gpus},
                         {"nodes", w.nodes},
                         {"single_point_of_failure", w.single_point_of_failure}});
  }
  nlohmann::json gpus = nlohmann::json::array();
  for (const ReportGpu& gpu : report.gpus) {
    nlohmann::json instances = nlohmann::json::array();
    for (const ReportInstance& i : gpu.instances) {
      instances.push_back({{"profile", i.profile},
                           {"start", i.start},
                           {"gi_id", i.gi_id >= 0 ? nlohmann::json(i.gi_id) : nullptr},
                           {"compute_slices", i.compute_slices},
                           {"memory_gib", Round(i.memory_gib, 2)},
                           {"workload", i.workload},
                           {"tenant", i.tenant},
                           {"capacity", Round(i.capacity, 4)},
                           {"batch", i.batch},
                           {"kept", i.kept}});
    }
    gpus.push_back({{"node", gpu.node},
                    {"gpu", gpu.index},
                    {"model", gpu.model},
                    {"cost_per_hour", Round(gpu.cost_per_hour, 2)},
                    {"mig_allowed", gpu.mig_allowed},
                    {"used", gpu.used},
                    {"mig_enabled", gpu.mig_enabled},
                    {"layout", gpu.layout},
                    {"instances", instances},
                    {"compute_slices_used", gpu.compute_slices_used},
                    {"compute_slices_total", gpu.compute_slices_total},
                    {"memory_needed_gib", Round(gpu.memory_needed_gib, 2)},
                    {"memory_total_gib", Round(gpu.memory_total_gib, 2)},
                    {"free_units", gpu.free_units},
                    {"free_profiles", PairsJson(gpu.free_profiles)},
                    {"unusable_units", gpu.unusable_units}});
  }
  nlohmann::json baselines = nlohmann::json::array();
  for (const Baseline& b : report.baselines) {
    baselines.push_back({{"name", b.name},
                         {"description", b.description},
                         {"gpus", b.gpus},
                         {"gpus_by_model", PairsJson(b.gpus_by_model)},
                         {"cost_per_hour", Round(b.cost_per_hour, 2)},
                         {"cost_per_month", Round(b.cost_per_month, 2)},
                         {"gpus_saved", b.gpus_saved},
                         {"saved_per_hour", Round(b.saved_per_hour, 2)},
                         {"saved_per_month", Round(b.saved_per_month, 2)},
                         {"exceeds_fleet", b.exceeds_fleet},
                         {"notes", b.notes}});
  }
  nlohmann::json gpu_losses = nlohmann::json::array();
  for (const Loss& loss : report.gpu_losses) gpu_losses.push_back(LossJson(loss));
  nlohmann::json node_losses = nlohmann::json::array();
  for (const Loss& loss : report.node_losses) node_losses.push_back(LossJson(loss));
  nlohmann::json checklist = nlohmann::json::array();
  for (const ChecklistItem& item : report.checklist) {
    checklist.push_back(
        {{"key", item.key},
         {"question", item.question},
         {"answer", item.answer},
         {"favours_mig", item.favours_mig ? nlohmann::json(*item.favours_mig) : nullptr}});
  }
  nlohmann::json unplaced = nlohmann::json::array();
  for (const auto& [name, reason] : report.unplaced)
    unplaced.push_back({{"workload", name}, {"reason", reason}});

  return {
      {"summary",
       {{"currency", report.currency},
        {"costs_given", report.costs_given},
        {"hours_per_month", report.hours_per_month},
        {"nodes", report.nodes},
        {"gpus_in_fleet", report.gpus_in_fleet},
        {"gpus_used", report.gpus_used},
        {"mig_gpus", report.mig_gpus},
        {"whole_gpus", report.whole_gpus},
        {"cost_per_hour", Round(report.cost_per_hour, 2)},
        {"cost_per_month", Round(report.cost_per_month, 2)}}},
      {"workloads", workloads},
      {"gpus", gpus},
      {"baselines", baselines},
      {"utilisation",
       {{"compute_slices_used", report.compute_slices_used},
        {"compute_slices_total", report.compute_slices_total},
        {"compute", Round(report.compute_utilisation, 4)},
        {"memory_needed_gib", Round(report.memory_needed_gib, 2)},
        {"memory_total_gib", Round(report.memory_total_gib, 2)},
        {"memory", Round(report.memory_utilisation, 4)}}},
      {"stranded",
       {{"gpus_with_free_capacity", report.gpus_with_free_capacity},
        {"gpus_with_unusable_units", report.gpus_with_unusable_units}}},
      {"redundancy",
       {{"single_points_of_failure", report.single_points_of_failure},
        {"gpu_losses", gpu_losses},
        {"node_losses", node_losses},
        {"worst_gpu_loss",
         report.worst_gpu_loss ? LossJson(*report.worst_gpu_loss) : nlohmann::json(nullptr)},
        {"worst_node_loss",
         report.worst_node_loss ? LossJson(*report.worst_node_loss) : nlohmann::json(nullptr)}}},
      {"mig_pays_off", {{"checklist", checklist}, {"verdict", report.verdict}}},
      {"unplaced", unplaced},
      {"solver",
       {{"name", report.solver},
        {"solve_seconds", Round(report.solve_seconds, 3)},
        {"proven_optimal", report.proven_optimal},
        {"lower_bound_cost_per_hour", Round(report.lower_bound_cost, 2)},
        {"lower_bound_gpus", report.lower_bound_gpus},
        {"gap", Round(report.gap, 4)}}},
      {"notes", report.notes},
  };
}

// -----------------------------------------------------------------------------------------------
// mig-parted config and assignment map.

spec::MigConfigFile ToMigPartedConfig(const PlanResult& plan, const Fleet& fleet,
                                      bool with_placements) {
  spec::MigConfigFile file;
  for (size_t node = 0; node < fleet.nodes.size(); ++node) {
    std::vector<spec::ConfigEntry> entries;
    for (const PlannedGpu& gpu : plan.gpus) {
      if (Index(gpu.node) != node) continue;
      spec::ConfigEntry entry;
      if (gpu.model != nullptr) {
        for (std::uint16_t id : gpu.model->pci_device_ids)
          entry.device_filter.push_back(spec::FullDeviceId(id));
      }
      entry.mig_enabled = gpu.mig_enabled && gpu.model != nullptr && gpu.model->mig_capable();
      if (entry.mig_enabled) {
        std::vector<spec::DesiredGi> gis;
        std::vector<PlannedInstance> instances = gpu.instances;
        std::sort(
            instances.begin(), instances.end(),
            [](const PlannedInstance& a, const PlannedInstance& b) { return a.start < b.start; });
        for (const PlannedInstance& instance : instances) {
          if (IsWhole(instance.profile)) continue;
          gis.push_back({instance.profile, {}, instance.start});
          if (with_placements) {
            entry.placements.push_back(ProfileName(*gpu.model, instance.profile) + "@" +
                                       std::to_string(instance.start));
          }
        }
        entry.mig_devices = spec::MigDevicesOf(*gpu.model, gis);
      }
      auto same = std::find_if(entries.begin(), entries.end(), [&](const spec::ConfigEntry& e) {
        return e.device_filter == entry.device_filter && e.mig_enabled == entry.mig_enabled &&
               e.mig_devices == entry.mig_devices && e.placements == entry.placements;
      });
      if (same != entries.end()) {
        same->devices.indices.push_back(gpu.index);
      } else {
        entry.devices.indices.push_back(gpu.index);
        entries.push_back(std::move(entry));
      }
    }
    file.configs.emplace_back(MigPartedConfigName(fleet.nodes[node]), std::move(entries));
  }
  return file;
}

nlohmann::json AssignmentJson(const PlanResult& plan, const WorkloadSet& workloads,
                              const Fleet& fleet) {
  const std::vector<Workload>& list = workloads.workloads;
  Shapes shapes;
  std::vector<nlohmann::json> per_workload(list.size(), nlohmann::json::array());
  nlohmann::json gpus = nlohmann::json::array();
  for (const PlannedGpu& gpu : plan.gpus) {
    const std::string node = gpu.node >= 0 && Index(gpu.node) < fleet.nodes.size()
                                 ? fleet.nodes[Index(gpu.node)].name
                                 : std::to_string(gpu.node);
    const std::string model = gpu.model != nullptr ? gpu.model->id : "";
    nlohmann::json instances = nlohmann::json::array();
    for (const PlannedInstance& instance : gpu.instances) {
      const std::string profile =
          gpu.model != nullptr ? ProfileName(*gpu.model, instance.profile) : "whole GPU";
      const int gi = GiId(shapes, gpu.model, instance);
      const nlohmann::json gi_id = gi >= 0 ? nlohmann::json(gi) : nlohmann::json(nullptr);
      const bool known = instance.workload >= 0 && Index(instance.workload) < list.size();
      instances.push_back(
          {{"profile", profile},
           {"start", IsWhole(instance.profile) ? 0 : instance.start},
           {"gi_id", gi_id},
           {"workload", known ? nlohmann::json(list[Index(instance.workload)].name) : nullptr},
           {"capacity", Round(instance.capacity, 4)},
           {"batch", instance.batch}});
      if (known) {
        per_workload[Index(instance.workload)].push_back(
            {{"node", node},
             {"gpu", gpu.index},
             {"model", model},
             {"profile", profile},
             {"start", IsWhole(instance.profile) ? 0 : instance.start},
             {"gi_id", gi_id},
             {"capacity", Round(instance.capacity, 4)},
             {"batch", instance.batch}});
      }
    }
    gpus.push_back({{"node", node},
                    {"gpu", gpu.index},
                    {"model", model},
                    {"mig_enabled", gpu.mig_enabled},
                    {"used", gpu.used},
                    {"instances", instances}});
  }
  nlohmann::json out_workloads = nlohmann::json::array();
  for (size_t w = 0; w < list.size(); ++w) {
    const bool by_throughput =
        w < plan.sizing.size() ? plan.sizing[w].by_throughput : list[w].throughput_rps > 0;
    const double demand = w < plan.sizing.size() ? plan.sizing[w].demand
                          : by_throughput        ? list[w].throughput_rps
                                                 : list[w].replicas;
    out_workloads.push_back({{"name", list[w].name},
                             {"tenant", list[w].tenant},
                             {"by_throughput", by_throughput},
                             {"demand", Round(demand, 4)},
                             {"instances", per_workload[w]}});
  }
  return {{"workloads", out_workloads}, {"gpus", gpus}};
}

}  // namespace gpuslice::plan
