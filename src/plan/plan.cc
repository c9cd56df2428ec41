// The planner's entry points, Planner::Run's stages in order, and building the model: the
// fleet's GPU types, the demand classes and the configuration integer program.
#include "gpuslice/plan/plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpuslice/geometry/enumerate.h"
#include "gpuslice/geometry/shape.h"
#include "planner.h"
#include "planner_detail.h"
#include "solver.h"

namespace gpuslice::plan {
namespace internal {
namespace {

// The largest g such that every cost is a whole multiple of g (costs read to 1/10000), or 0.
double CostGranularity(const std::vector<double>& costs) {
  constexpr double kScale = 10000;
  long long divisor = 0;
  for (double cost : costs) {
    const double scaled = cost * kScale;
    if (std::abs(scaled - std::round(scaled)) > 1e-6 || scaled > 1e15) return 0;
    divisor = std::gcd(divisor, std::llabs(std::llround(scaled)));
  }
  return divisor > 0 ? static_cast<double>(divisor) / kScale : 0;
}

// The configs of `model` over the profiles the options use.
ModelConfigs BuildConfigs(const hw::GpuModel& model, const std::set<int>& profiles) {
  ModelConfigs result;
  std::set<int> mig_profiles;
  bool whole = false;
  for (int profile : profiles) {
    if (profile == kWholeGpu) {
      whole = true;
    } else {
      mig_profiles.insert(profile);
    }
  }
  if (model.mig_capable() && !mig_profiles.empty()) {
    geometry::Shape shape(model);
    geometry::EnumerateOptions options;
    for (int profile : mig_profiles) options.profiles.set(static_cast<size_t>(profile));
    options.maximal_only = true;
    const auto layouts = geometry::EnumerateLayouts(shape, options);
    for (const geometry::Multiset& multiset : geometry::DistinctMultisets(shape, layouts)) {
      Config config;
      config.layout = layouts[multiset.first_layout];
      for (int p = 0; p < shape.profile_count(); ++p) {
        const int count = multiset.counts[static_cast<size_t>(p)];
        if (count > 0) {
          config.counts[p] = count;
          config.slices += count * shape.compute_slices(p);
        }
      }
      result.configs.push_back(std::move(config));
    }
  }
  if (whole) {
    Config config;
    config.whole = true;
    config.counts[kWholeGpu] = 1;
    config.slices = SlicesOf(model, kWholeGpu);
    result.whole_config = static_cast<int>(result.configs.size());
    result.configs.push_back(std::move(config));
  }
  return result;
}

std::string OptionKey(const std::vector<SizedOption>& options) {
  std::string key;
  for (const SizedOption& option : options) {
    absl::StrAppend(&key, option.model->id, "/", option.profile, ";");
  }
  return key;
}

}  // namespace

absl::Status Planner::BuildFleet() {
  std::map<std::tuple<std::string, bool, double, std::string>, int> type_of;
  using GpusByNode = std::vector<std::vector<int>>;  // per node: indices into result_.gpus
  std::vector<GpusByNode> per_type_node;             // per type
  std::set<std::string> node_names;
  for (size_t n = 0; n < fleet_.nodes.size(); ++n) {
    const Node& node = fleet_.nodes[n];
    if (!node_names.insert(node.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("node '", node.name, "' appears twice"));
    }
    int index = 0;
    for (const GpuGroup& group : node.gpus) {
      const hw::GpuModel* model = catalog_.Find(group.model);
      if (model == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(group.origin, ": unknown GPU model '", group.model, "'"));
      }
      const bool mig_allowed = group.mig_allowed && model->mig_capable();
      for (int i = 0; i < group.count; ++i) {
        // GPUs that keep running instances form their own types, by kept layout; they are
        // paid for already, so adding to them costs nothing.
        const size_t g = result_.gpus.size();
        std::vector<geometry::Placed> kept;
        std::string signature;
        if (pinned_ != nullptr && g < pinned_->size()) {
          for (const PlannedInstance& instance : (*pinned_)[g]) {
            absl::StrAppend(&signature, instance.profile, "@", instance.start, ",");
            if (instance.profile != kWholeGpu) {
              kept.push_back({static_cast<std::uint8_t>(instance.profile),
                              static_cast<std::uint8_t>(instance.start)});
            }
          }
        }
        const bool pinned = !signature.empty();
        const double cost = pinned ? 0.0 : group.cost_per_hour;
        auto key = std::make_tuple(model->id, mig_allowed, cost, signature);
        auto [it, inserted] = type_of.emplace(key, static_cast<int>(types_.size()));
        if (inserted) {
          GpuType type;
          type.model = model;
          type.mig_allowed = mig_allowed;
          type.cost = cost;
          type.pinned = pinned;
          std::sort(kept.begin(), kept.end());
          type.pinned_layout = kept;
          types_.push_back(type);
          per_type_node.emplace_back(fleet_.nodes.size());
        }
        PlannedGpu gpu;
        gpu.node = static_cast<int>(n);
        gpu.index = index++;
        gpu.model = model;
        gpu.cost_per_hour = group.cost_per_hour;
        gpu.mig_allowed = mig_allowed;
        per_type_node[static_cast<size_t>(it->second)][n].push_back(
            static_cast<int>(result_.gpus.size()));
        result_.gpus.push_back(gpu);
      }
    }
  }
  if (result_.gpus.empty()) return absl::InvalidArgumentError("the fleet has no GPUs");
  // Interleave nodes so that consecutive GPUs of a type sit on different nodes.
  for (size_t t = 0; t < types_.size(); ++t) {
    const auto& nodes = per_type_node[t];
    for (size_t round = 0;; ++round) {
      bool any = false;
      for (const auto& gpus : nodes) {
        if (round < gpus.size()) {
          types_[t].gpus.push_back(gpus[round]);
          any = true;
        }
      }
      if (!any) break;
    }
  }
  return absl::OkStatus();
}

void Planner::BuildClasses() {
  std::vector<const hw::GpuModel*> models;
  for (const GpuType& type : types_) {
    if (std::find(models.begin(), models.end(), type.model) == models.end()) {
      models.push_back(type.model);
    }
  }
  std::map<std::string, int> merged;
  remaining_.assign(workloads_.workloads.size(), 0);
  for (size_t w = 0; w < workloads_.workloads.size(); ++w) {
    WorkloadSizing sizing = SizeWorkload(workloads_.workloads[w], models, workloads_.policy);
    // Keep only options some GPU type can host.
    std::vector<SizedOption> usable;
    for (const SizedOption& option : sizing.options) {
      for (const GpuType& type : types_) {
        if (type.model == option.model && (option.profile == kWholeGpu || type.mig_allowed)) {
          usable.push_back(option);
          break;
        }
      }
    }
    if (usable.empty() && sizing.unsatisfiable.empty()) {
      sizing.unsatisfiable =
          "its options need MIG, but every GPU that could host it must stay whole";
    }
    sizing.options = usable;
    result_.sizing.push_back(sizing);
    if (!sizing.unsatisfiable.empty()) {
      result_.unplaced.emplace_back(static_cast<int>(w), sizing.unsatisfiable);
      continue;
    }
    // What kept instances already cover.
    double remaining = sizing.demand;
    int min_remaining = sizing.min_instances;
    if (pinned_ != nullptr) {
      for (const auto& kept : *pinned_) {
        for (const PlannedInstance& instance : kept) {
          if (instance.workload != static_cast<int>(w)) continue;
          remaining -= instance.capacity;
          --min_remaining;
        }
      }
    }
    remaining_[w] = std::max(0.0, remaining);
    min_remaining = std::max(0, min_remaining);
    if (remaining <= kEps && min_remaining == 0) continue;
    if (!sizing.by_throughput) {
      const std::string key = OptionKey(sizing.options);
      auto [it, inserted] = merged.emplace(key, static_cast<int>(classes_.size()));
      if (!inserted) {
        DemandClass& existing = classes_[static_cast<size_t>(it->second)];
        existing.workloads.push_back(static_cast<int>(w));
        existing.shares.push_back(remaining_[w]);
        existing.demand += remaining_[w];
        continue;
      }
    }
    DemandClass demand;
    demand.workloads.push_back(static_cast<int>(w));
    demand.by_throughput = sizing.by_throughput;
    demand.demand = std::max(remaining_[w], sizing.by_throughput ? 0.0 : 1.0);
    demand.shares.push_back(demand.demand);
    demand.min_instances = std::max(min_remaining, 1);
    demand.options = sizing.options;
    classes_.push_back(std::move(demand));
  }
}

std::vector<Config> Planner::PinnedConfigs(const GpuType& type,
                                           const std::set<int>& profiles) const {
  std::vector<Config> configs;
  if (!type.mig_allowed || type.pinned_layout.empty()) return configs;  // whole GPU kept: full
  geometry::Shape shape(*type.model);
  geometry::EnumerateOptions options;
  for (int profile : profiles) {
    if (profile != kWholeGpu) options.profiles.set(static_cast<size_t>(profile));
  }
  if (options.profiles.none()) return configs;
  for (const geometry::Placed& placed : type.pinned_layout) options.profiles.set(placed.profile);
  options.maximal_only = true;
  std::set<std::map<int, int>> seen;
  for (auto layout : geometry::EnumerateLayouts(shape, options)) {
    // Layouts that contain every kept placement; the rest of them is what can be added.
    std::sort(layout.begin(), layout.end());
    if (!std::includes(layout.begin(), layout.end(), type.pinned_layout.begin(),
                       type.pinned_layout.end())) {
      continue;
    }
    Config config;
    config.layout = layout;
    for (const geometry::Placed& placed : layout) {
      if (std::binary_search(type.pinned_layout.begin(), type.pinned_layout.end(), placed)) {
        continue;
      }
      if (!profiles.count(placed.profile)) continue;  // only room for kept profiles
      ++config.counts[placed.profile];
      config.slices += shape.compute_slices(placed.profile);
    }
    if (config.counts.empty() || !seen.insert(config.counts).second) continue;
    configs.push_back(std::move(config));
  }
  return configs;
}

void Planner::AddConfigColumns(std::map<const hw::GpuModel*, std::set<int>>& used_profiles) {
  for (GpuType& type : types_) {
    auto it = configs_.find(type.model);
    if (it == configs_.end()) continue;
    if (type.pinned) {
      type.configs = PinnedConfigs(type, used_profiles[type.model]);
    } else {
      for (const Config& config : it->second.configs) {
        if (config.whole || type.mig_allowed) type.configs.push_back(config);
      }
    }
    for (size_t c = 0; c < type.configs.size(); ++c) {
      type.x_columns.push_back(
          program_.AddColumn(type.cost, 0, static_cast<double>(type.gpus.size()), true));
    }
    std::vector<std::pair<int, double>> availability;
    for (int column : type.x_columns) availability.emplace_back(column, 1.0);
    if (!availability.empty()) {
      program_.AddRow(std::move(availability), 0, static_cast<double>(type.gpus.size()));
    }
  }
}

void Planner::AddThroughputRows(DemandClass& demand, std::vector<std::pair<int, double>> cover,
                                std::vector<std::pair<int, double>> count) {
  const int slack = program_.AddColumn(penalty_, 0, 1, true);
  demand.slack_columns = {slack};
  demand.slack_weights = {demand.demand};
  cover.emplace_back(slack, demand.demand);
  program_.AddRow(std::move(cover), demand.demand, internal::kInfinity);
  if (demand.min_instances > 1) {
    count.emplace_back(slack, demand.min_instances);
    program_.AddRow(std::move(count), demand.min_instances, internal::kInfinity);
  }
  AddRoundingCuts(demand, slack);
}

void Planner::AddRoundingCuts(const DemandClass& demand, int slack) {
  // Units: the capacities of the few most GPU-efficient options (the ones the relaxation
  // buys fractions of). More cuts barely move the bound and slow the LP down.
  std::vector<std::pair<double, double>> by_efficiency;
  for (const SizedOption& option : demand.options) {
    by_efficiency.emplace_back(option.capacity / ShareOf(*option.model, option.profile),
                               option.capacity);
  }
  std::sort(by_efficiency.rbegin(), by_efficiency.rend());
  std::set<double> units;
  constexpr size_t max_cuts = 3;
  for (const auto& [efficiency, capacity] : by_efficiency) {
    if (units.size() >= max_cuts) break;
    units.insert(capacity);
  }
  for (double unit : units) {
    const double needed = std::ceil(demand.demand / unit - kEps);
    if (needed <= 1) continue;  // implied by the cover row
    std::vector<std::pair<int, double>> cut;
    for (size_t o = 0; o < demand.options.size(); ++o) {
      cut.emplace_back(demand.y_columns[o], std::ceil(demand.options[o].capacity / unit - kEps));
    }
    cut.emplace_back(slack, needed);
    program_.AddRow(std::move(cut), needed, internal::kInfinity);
  }
}

void Planner::AddReplicaRows(DemandClass& demand, std::vector<std::pair<int, double>> cover) {
  if (per_workload_penalty_) {
    for (double share : demand.shares) {
      demand.slack_columns.push_back(program_.AddColumn(penalty_, 0, 1, true));
      demand.slack_weights.push_back(share);
    }
  } else {
    demand.slack_columns = {program_.AddColumn(penalty_, 0, demand.demand, true)};
    demand.slack_weights = {1.0};
  }
  for (size_t i = 0; i < demand.slack_columns.size(); ++i) {
    cover.emplace_back(demand.slack_columns[i], demand.slack_weights[i]);
  }
  program_.AddRow(std::move(cover), demand.demand, internal::kInfinity);
}

void Planner::AddSupplyRows(std::map<Slot, std::vector<std::pair<int, double>>>& supply) {
  for (auto& [slot, terms] : supply) {
    for (const GpuType& type : types_) {
      if (type.model != slot.first) continue;
      for (size_t i = 0; i < type.configs.size(); ++i) {
        const Config& config = type.configs[i];
        auto it = config.counts.find(slot.second);
        if (it != config.counts.end()) terms.emplace_back(type.x_columns[i], -it->second);
      }
    }
    supply_rows_[slot] = program_.rows();
    program_.AddRow(std::move(terms), -internal::kInfinity, 0);
  }
}

void Planner::BuildProgram() {
  // (Again from scratch when the penalties change.)
  program_ = LinearProgram();
  supply_rows_.clear();
  for (GpuType& type : types_) {
    type.configs.clear();
    type.x_columns.clear();
  }
  for (DemandClass& demand : classes_) {
    demand.y_columns.clear();
    demand.slack_columns.clear();
    demand.slack_weights.clear();
  }
  // Configs per model over the profiles any class may use there.
  std::map<const hw::GpuModel*, std::set<int>> used_profiles;
  for (const DemandClass& demand : classes_) {
    for (const SizedOption& option : demand.options) {
      used_profiles[option.model].insert(option.profile);
    }
  }
  for (const auto& [model, profiles] : used_profiles) {
    configs_[model] = BuildConfigs(*model, profiles);
  }
  penalty_ = 1;
  for (const PlannedGpu& gpu : result_.gpus) penalty_ += gpu.cost_per_hour;

  // x: GPUs of each type in each config.
  AddConfigColumns(used_profiles);
  // y: instances per class option; demand rows with a penalised slack.
  std::map<Slot, std::vector<std::pair<int, double>>> supply;
  for (DemandClass& demand : classes_) {
    std::vector<std::pair<int, double>> cover;
    std::vector<std::pair<int, double>> count;
    for (const SizedOption& option : demand.options) {
      const double upper =
          std::ceil(demand.demand / option.capacity) + static_cast<double>(demand.min_instances);
      const int column = program_.AddColumn(0, 0, upper, true);
      demand.y_columns.push_back(column);
      cover.emplace_back(column, option.capacity);
      count.emplace_back(column, 1.0);
      supply[{option.model, option.profile}].emplace_back(column, 1.0);
    }
    if (demand.by_throughput) {
      AddThroughputRows(demand, std::move(cover), std::move(count));
    } else {
      AddReplicaRows(demand, std::move(cover));
    }
  }
  // Supply: instances of (model, profile) <= what the chosen configs hold.
  AddSupplyRows(supply);
}

absl::Status Planner::CheckWorkloadNames() const {
  std::set<std::string> names;
  for (const Workload& workload : workloads_.workloads) {
    if (!names.insert(workload.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(workload.origin, ": workload '", workload.name, "' appears twice"));
    }
  }
  return absl::OkStatus();
}

Solution Planner::SolveRelaxation() {
  Solution lp = internal::SolveLp(program_, std::max(options_.time_limit_s, 1.0));
  if (lp.has_solution && lp.objective >= penalty_ - kEps && !per_workload_penalty_) {
    // Even the relaxation leaves demand out: count the workloads left out from here on.
    per_workload_penalty_ = true;
    BuildProgram();
    lp = internal::SolveLp(program_, std::max(options_.time_limit_s, 1.0));
  }
  return lp;
}

ConfigCounts Planner::FirstPlan(const Solution& lp, InstanceCounts* counts, InstanceCounts* priced,
                                double* lagrangian) const {
  *counts = RoundInstances(lp.values);
  ReduceSurplus(*counts);
  // Two roundings of the relaxation: per workload along the LP (counts), and at the LP's prices
  // of instance kinds (priced; replica classes stay as the LP split them). Each is packed, the
  // cheaper plan wins.
  *priced = PriceCovers(lp, lagrangian);
  for (size_t k = 0; k < classes_.size(); ++k) {
    if (!classes_[k].by_throughput ||
        lp.values[static_cast<size_t>(classes_[k].slack_columns[0])] > 0.5) {
      (*priced)[k] = (*counts)[k];
    }
  }
  ReduceSurplus(*priced);
  // A first plan: the LP's rounding, packed greedily (moving work off models that run out).
  std::map<Slot, int> shortfall;
  ConfigCounts gpus = PackGpus(*counts, &lp.values, &shortfall);
  for (int round = 0; round < 8 && !shortfall.empty(); ++round) {
    if (!ShiftShortfall(*counts, shortfall)) break;
    ReduceSurplus(*counts);
    gpus = PackGpus(*counts, &lp.values, &shortfall);
  }
  return gpus;
}

PatternsByClass Planner::StartingPatterns(const InstanceCounts& counts,
                                          const InstanceCounts& priced) const {
  PatternsByClass patterns(classes_.size());
  for (size_t k = 0; k < classes_.size(); ++k) {
    const DemandClass& demand = classes_[k];
    if (!demand.by_throughput) continue;
    auto add = [&](Pattern pattern) {
      if (pattern.empty() || std::accumulate(pattern.begin(), pattern.end(), 0) == 0) return;
      if (std::find(patterns[k].begin(), patterns[k].end(), pattern) == patterns[k].end()) {
        patterns[k].push_back(std::move(pattern));
      }
    };
    add(counts[k]);
    add(priced[k]);
    std::map<const hw::GpuModel*, std::vector<size_t>> by_model;
    for (size_t o = 0; o < demand.options.size(); ++o) {
      by_model[demand.options[o].model].push_back(o);
    }
    for (const auto& [model, candidates] : by_model) add(CheapestCover(demand, candidates));
  }
  return patterns;
}

bool Planner::Proven(const InstanceCounts& counts, const ConfigCounts& gpus, double bound,
                     double granularity) const {
  const double granular_bound =
      granularity > 0 ? std::ceil(bound / granularity - 1e-6) * granularity : bound;
  return Objective(counts, gpus) <= granular_bound + kEps;
}

void Planner::ImproveWithPatterns(const PatternsByClass& patterns, double budget,
                                  InstanceCounts& counts, ConfigCounts& gpus) const {
  InstanceCounts better_counts;
  ConfigCounts better_gpus;
  if (SolvePatterns(patterns, budget, Objective(counts, gpus) - kEps, &better_counts,
                    &better_gpus)) {
    ReduceSurplus(better_counts);
    if (Objective(better_counts, better_gpus) < Objective(counts, gpus) - kEps) {
      counts = std::move(better_counts);
      gpus = std::move(better_gpus);
    }
  } else if (auto packed = PackOptimal(counts, std::max(0.2, 0.25 * budget));
             packed && CostOf(*packed) < CostOf(gpus) - kEps) {
    gpus = *std::move(packed);  // at least pack the rounded counts as well as possible
  }
}

std::optional<Planner::SearchStats> Planner::SearchExactly(
    PatternsByClass& patterns, double granularity, std::chrono::steady_clock::time_point started,
    InstanceCounts& counts, ConfigCounts& gpus, double* bound) {
  // The solvers overrun their limits a little, so the search gets a margin; in exact mode it
  // leaves a tenth of the time for improving the plan if it cannot finish.
  double budget = 0.9 * (options_.time_limit_s - SecondsSince(started)) - 0.2;
  if (options_.mode == SolveMode::kAuto) budget = std::min(budget, 3.0);
  SearchStats stats;
  const double searched = BranchOnGpuCounts(patterns, Objective(counts, gpus), granularity,
                                            std::max(budget, 0.05), &counts, &gpus, &stats);
  ReduceSurplus(counts);
  *bound = std::max(*bound, searched);
  result_.solver = "branch-and-price";
  if (stats.complete) return stats;  // the note is written once the plan is placed
  result_.notes.push_back(absl::StrFormat(
      "branch and price stopped at the time limit (%.1f s) after %d nodes, before proving "
      "optimality",
      options_.time_limit_s, stats.nodes));
  const double remaining = options_.time_limit_s - SecondsSince(started) - 0.1;
  if (options_.mode == SolveMode::kExact && remaining > 0.1) {
    ImproveWithPatterns(patterns, remaining, counts, gpus);
  }
  return std::nullopt;
}

void Planner::SetLowerBound(const Solution& lp, double bound, double granularity) {
  // Every GPU of the fleet costs the same: bounds are GPU counts.
  const double unit_cost = result_.gpus.front().cost_per_hour;
  bool homogeneous_cost = unit_cost > 0;
  for (const PlannedGpu& gpu : result_.gpus) {
    homogeneous_cost &= std::abs(gpu.cost_per_hour - unit_cost) < kEps;
  }
  // Penalties (workloads the fleet cannot hold) are not GPU cost: the bound then covers the
  // LP's GPU cost only, which is not a proof.
  if (bound >= penalty_ - kEps) {
    double lp_cost = 0;
    for (const GpuType& type : types_) {
      for (int column : type.x_columns) {
        lp_cost += type.cost * lp.values[static_cast<size_t>(column)];
      }
    }
    result_.notes.push_back(
        "the fleet cannot hold every workload; the lower bound shown is the LP's GPU cost for "
        "the workloads it places, not a proof");
    bound = lp_cost;
  }
  // GPUs that keep running instances (re-planning) are paid for outside the program.
  double fixed_cost = 0;
  if (pinned_ != nullptr) {
    for (size_t g = 0; g < pinned_->size() && g < result_.gpus.size(); ++g) {
      if (!(*pinned_)[g].empty()) fixed_cost += result_.gpus[g].cost_per_hour;
    }
  }
  result_.lower_bound_cost = std::max(0.0, bound) + fixed_cost;
  if (granularity > 0) {
    result_.lower_bound_cost =
        std::ceil(result_.lower_bound_cost / granularity - 1e-6) * granularity;
  }
  if (homogeneous_cost) {
    result_.lower_bound_gpus =
        static_cast<int>(std::ceil(result_.lower_bound_cost / unit_cost - kEps));
    result_.lower_bound_cost = result_.lower_bound_gpus * unit_cost;
  }
  result_.proven_optimal =
      !short_of_room_ && result_.cost_per_hour <= result_.lower_bound_cost + kEps;
}

void Planner::NoteClosedSearch(const SearchStats& search) {
  if (result_.proven_optimal) {
    result_.notes.push_back(
        absl::StrFormat("branch and price closed %d nodes in %.2f s: no cheaper plan exists",
                        search.nodes, search.seconds));
    return;
  }
  // The integer program does not see spreading (replicas on different GPUs) nor what the
  // completion adds; its optimum is still the bound.
  result_.notes.push_back(absl::StrFormat(
      "branch and price closed %d nodes in %.2f s: no plan of the integer program costs less "
      "than %.2f/h; placing it on the GPUs (replicas spread over GPUs, instances completed) took "
      "%.2f/h more",
      search.nodes, search.seconds, result_.lower_bound_cost,
      result_.cost_per_hour - result_.lower_bound_cost));
}

absl::StatusOr<PlanResult> Planner::Run() {
  const auto started = std::chrono::steady_clock::now();
  if (absl::Status status = CheckWorkloadNames(); !status.ok()) return status;
  if (absl::Status status = BuildFleet(); !status.ok()) return status;
  BuildClasses();
  BuildProgram();

  // Fast: LP relaxation, rounding, greedy completion. Its value bounds every plan from below.
  const Solution lp = SolveRelaxation();
  if (!lp.has_solution) {
    return absl::InternalError("the LP relaxation could not be solved (CLP)");
  }
  InstanceCounts counts, priced;
  double lagrangian = 0;
  ConfigCounts gpus = FirstPlan(lp, &counts, &priced, &lagrangian);
  // Improve by choosing among a few integer covers per throughput workload at once.
  PatternsByClass patterns = StartingPatterns(counts, priced);
  // Column generation: the covers that the relaxation's prices favour join the patterns, and
  // the relaxation over all integer covers bounds every plan (Dantzig-Wolfe).
  const double generated = GeneratePatterns(
      patterns, std::max(0.1, 0.25 * (options_.time_limit_s - SecondsSince(started))));
  double bound = std::max({lp.objective, lagrangian, generated});
  result_.solver = "lp-rounding";

  // Objective values are multiples of this: bounds round up to it, and a better plan is at least
  // this much cheaper.
  std::vector<double> costs;
  for (const PlannedGpu& gpu : result_.gpus) costs.push_back(gpu.cost_per_hour);
  const double granularity = CostGranularity(costs);

  // Fast (and auto): the restricted master picks one pattern per throughput workload, for a
  // few seconds at most.
  if (options_.mode != SolveMode::kExact && !Proven(counts, gpus, bound, granularity)) {
    const double remaining = options_.time_limit_s - SecondsSince(started);
    ImproveWithPatterns(patterns, std::max(0.2, std::min(3.0, 0.5 * remaining)), counts, gpus);
  }

  // Exact (and auto on fleets up to 2,000 GPUs): branch and price on the number of GPUs of each
  // price, until every node is closed (the plan is optimal) or the time limit.
  const bool search = !Proven(counts, gpus, bound, granularity) && program_.columns() > 0 &&
                      (options_.mode == SolveMode::kExact ||
                       (options_.mode == SolveMode::kAuto && result_.gpus.size() <= 2000));
  std::optional<SearchStats> closed_search;
  if (search) closed_search = SearchExactly(patterns, granularity, started, counts, gpus, &bound);
  Materialise(counts, gpus);

  SetLowerBound(lp, bound, granularity);
  if (closed_search) NoteClosedSearch(*closed_search);
  result_.solve_seconds = SecondsSince(started);
  return std::move(result_);
}

namespace {

// Plans, and when that leaves a workload out for lack of room with a slack per replica (whose
// optimum may leave out part of several workloads, each then dropped whole), plans again with
// per-workload penalties and keeps the plan that leaves out fewer workloads (then the cheaper).
absl::StatusOr<PlanResult> PlanLeavingOutFewest(
    const WorkloadSet& workloads, const Fleet& fleet, const hw::Catalog& catalog,
    const PlanOptions& options, const std::vector<std::vector<PlannedInstance>>* kept) {
  const auto started = std::chrono::steady_clock::now();
  Planner planner(workloads, fleet, catalog, options);
  planner.SetPinned(kept);
  absl::StatusOr<PlanResult> first = planner.Run();
  if (!first.ok() || !planner.short_of_room() || planner.penalises_each_workload()) return first;
  PlanOptions again = options;
  again.time_limit_s =
      std::max(options.time_limit_s - SecondsSince(started), std::min(1.0, options.time_limit_s));
  Planner second(workloads, fleet, catalog, again);
  second.SetPinned(kept);
  second.PenaliseEachWorkload();
  absl::StatusOr<PlanResult> other = second.Run();
  PlanResult* best = &*first;
  if (other.ok() && (other->unplaced.size() < first->unplaced.size() ||
                     (other->unplaced.size() == first->unplaced.size() &&
                      other->cost_per_hour < first->cost_per_hour - kEps))) {
    best = &*other;
  }
  best->solve_seconds = SecondsSince(started);
  return std::move(*best);
}

}  // namespace

absl::StatusOr<std::optional<double>> Planner::SolveWholeProgram(double time_limit_s) {
  if (absl::Status status = BuildFleet(); !status.ok()) return status;
  BuildClasses();
  BuildProgram();
  if (program_.columns() == 0) return std::optional<double>(0.0);
  const Solution mip = internal::SolveMip(program_, time_limit_s);
  if (mip.status != Solution::Status::kOptimal || mip.objective >= penalty_ - kEps) {
    return std::optional<double>();
  }
  return std::optional<double>(mip.objective);
}

absl::StatusOr<std::optional<double>> WholeProgramOptimum(const WorkloadSet& workloads,
                                                          const Fleet& fleet,
                                                          const hw::Catalog& catalog,
                                                          double time_limit_s) {
  const PlanOptions options;
  Planner planner(workloads, fleet, catalog, options);
  return planner.SolveWholeProgram(time_limit_s);
}

absl::StatusOr<PlanResult> PlanKeeping(const WorkloadSet& workloads, const Fleet& fleet,
                                       const hw::Catalog& catalog, const PlanOptions& options,
                                       const std::vector<std::vector<PlannedInstance>>& kept) {
  return PlanLeavingOutFewest(workloads, fleet, catalog, options, &kept);
}

}  // namespace internal

absl::StatusOr<PlanResult> Plan(const WorkloadSet& workloads, const Fleet& fleet,
                                const hw::Catalog& catalog, const PlanOptions& options) {
  return internal::PlanLeavingOutFewest(workloads, fleet, catalog, options, nullptr);
}

}  // namespace gpuslice::plan
