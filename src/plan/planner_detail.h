// Internal to the planner: the configuration integer program of one planning run and the types
// its stages share. Planner's stages live in plan.cc (model building and the run in order),
// plan_rounding.cc (rounding, greedy packing, the restricted master and column generation),
// plan_branch.cc (the exact branch and price on GPU counts) and plan_placement.cc (the chosen
// configs on the fleet's GPUs, completed and consolidated).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/plan/plan.h"
#include "gpuslice/plan/sizing.h"
#include "solver.h"

namespace gpuslice::plan::internal {

constexpr double kEps = 1e-6;

// An instance kind on a model: (model, profile or kWholeGpu).
using Slot = std::pair<const hw::GpuModel*, int>;

// The program's integer choices, by what they count. Classes (DemandClass) and GPU types
// (GpuType) are indexed as in Planner::classes_ and Planner::types_.
//
// A pattern: one integer cover of a throughput class, the instances of each of its options
// (indexed as DemandClass::options). The restricted master picks one pattern per class.
using Pattern = std::vector<int>;

// Per class, the patterns at hand (empty for replica classes, which are not chosen by pattern).
using PatternsByClass = std::vector<std::vector<Pattern>>;

// Per class, per option: the instances of that option to create.
using InstanceCounts = std::vector<std::vector<int>>;

// Per GPU type, per config (indexed as GpuType::configs): the GPUs laid out in that config.
using ConfigCounts = std::vector<std::vector<int>>;

// Placement: the free instances of the laid-out GPUs, per (model, profile), each as (rank within
// its GPU, position of the GPU in its type, GPU, instance on it), in that order.
using FreeSlots = std::map<Slot, std::vector<std::tuple<int, int, int, int>>>;

// The instances a class took from them: ((GPU, instance on it), option).
using ClassInstances = std::vector<std::pair<std::pair<int, int>, size_t>>;

// A distinct multiset of instances one GPU can hold, with one layout that realises it.
struct Config {
  std::map<int, int> counts;             // profile (or kWholeGpu) -> instances
  std::vector<geometry::Placed> layout;  // empty for the whole GPU
  bool whole = false;
  int slices = 0;  // compute slices covered (for greedy scoring)
};

// GPUs of one model, MIG mode and cost: interchangeable for planning.
struct GpuType {
  const hw::GpuModel* model = nullptr;
  bool mig_allowed = true;
  double cost = 0;
  std::vector<int> gpus;        // indices into PlanResult::gpus, nodes interleaved
  std::vector<Config> configs;  // what can be added to these GPUs
  std::vector<int> x_columns;   // LP column per config
  // Re-planning: the instances these GPUs keep (the same placements on each of them; which
  // workload runs there is per GPU). Their configs' layouts include these placements.
  std::vector<geometry::Placed> pinned_layout;
  bool pinned = false;
};

// Workloads solved as one: a throughput workload alone, or replica workloads with identical
// options merged (their demands add up; exact for the integer program).
struct DemandClass {
  std::vector<int> workloads;
  std::vector<double> shares;  // per workload: its part of `demand`
  bool by_throughput = false;
  double demand = 0;
  int min_instances = 1;
  std::vector<SizedOption> options;
  std::vector<int> y_columns;  // one per option
  // Demand left out, penalised: slack_columns[i] (integer) leaves out slack_weights[i] of the
  // demand per unit. A throughput class has one binary slack (the workload); a replica class
  // either one slack per replica (while the fleet holds every workload) or, with per-workload
  // penalties, one binary slack per workload weighted by its share (see Planner).
  std::vector<int> slack_columns;
  std::vector<double> slack_weights;
};

struct ModelConfigs {
  std::vector<Config> configs;  // MIG configs first, then the whole-GPU config (if any)
  int whole_config = -1;
};

inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The fraction of a GPU an instance takes: its share of compute slices or of placement units
// (memory), whichever is larger. 3g.40gb on A100-80GB takes half the memory, so two fill it.
inline double ShareOf(const hw::GpuModel& model, int profile) {
  if (profile == kWholeGpu || !model.mig) return 1.0;
  const hw::GiProfile& gi = model.mig->profiles[static_cast<size_t>(profile)];
  return std::max(static_cast<double>(gi.compute_slices) / model.mig->compute_slices,
                  static_cast<double>(gi.placement_size) / model.mig->placement_units);
}

inline int SlicesOf(const hw::GpuModel& model, int profile) {
  if (profile == kWholeGpu) return model.mig ? model.mig->compute_slices : 1;
  return model.mig->profiles[static_cast<size_t>(profile)].compute_slices;
}

// Instance counts over `candidates` (option indices) that cover `demand` with the smallest share of
// GPUs (ShareOf): most instances of the option with the best capacity per share, the rest by one
// other option (up to a few instances of it). Empty when no candidate exists.
Pattern CheapestCover(const DemandClass& demand, const std::vector<size_t>& candidates);

// The integer cover of `demand` by `options` with the least total `price`, needing at least
// `min_instances` instances: depth-first search over options by price per capacity, pruned by
// the fractional bound. Exact. Returns the counts and the price (infinity when nothing covers).
struct CoverSearch {
  const std::vector<double>& price;
  const std::vector<double>& capacity;
  double demand;
  int min_instances;
  std::vector<size_t> order;  // options by price per capacity
  Pattern counts, best;
  double best_price = std::numeric_limits<double>::infinity();
  long nodes = 0;
  static constexpr long kNodeLimit = 200000;
  // When set, every cover cheaper than the limit is collected here (and best stays empty); the
  // search stops (nodes past the limit) once there are more than `collect_most`.
  std::vector<Pattern>* all = nullptr;
  size_t collect_most = 0;
  // When set, these covers are passed over (the search returns the best of the others).
  const std::set<Pattern>* excluded = nullptr;

  // Only covers cheaper than `limit` are sought (best stays empty when there is none).
  void Run(double limit = std::numeric_limits<double>::infinity()) {
    best_price = limit;
    // Quick test first: the whole demand at the best price per capacity.
    double best_ratio = std::numeric_limits<double>::infinity();
    for (size_t o = 0; o < price.size(); ++o) {
      best_ratio = std::min(best_ratio, price[o] / capacity[o]);
    }
    if (best_ratio * demand >= best_price - 1e-12) return;
    counts.assign(price.size(), 0);
    std::vector<std::pair<double, size_t>> by_ratio;
    for (size_t o = 0; o < price.size(); ++o) by_ratio.emplace_back(price[o] / capacity[o], o);
    std::sort(by_ratio.begin(), by_ratio.end());
    for (const auto& [ratio, o] : by_ratio) order.push_back(o);
    Visit(0, 0, 0, 0);
  }
  void Visit(size_t index, double covered, int instances, double spent) {
    // Pathological: keep the best found (still a valid cover, but not proven the cheapest).
    if (++nodes > kNodeLimit) return;
    if (covered + kEps >= demand && instances >= min_instances) {
      if (spent < best_price - 1e-12 && (excluded == nullptr || excluded->count(counts) == 0)) {
        if (all != nullptr) {
          all->push_back(counts);
          if (all->size() > collect_most) nodes = kNodeLimit + 1;
        } else {
          best_price = spent;
          best = counts;
        }
      }
      return;
    }
    if (index >= order.size()) return;
    const size_t o = order[index];
    // Fractional bound: the rest at this option's (the best remaining) price per capacity.
    const double rest = std::max(0.0, demand - covered);
    if (spent + rest * price[o] / capacity[o] >= best_price - 1e-12) return;
    const int most = static_cast<int>(std::ceil(rest / capacity[o] - kEps)) +
                     std::max(0, min_instances - instances);
    for (int n = most; n >= 0; --n) {
      counts[o] = n;
      Visit(index + 1, covered + n * capacity[o], instances + n, spent + n * price[o]);
    }
    counts[o] = 0;
  }
};

// The configuration integer program of one planning run (docs/PLANNING.md), built from the inputs
// and solved in stages by Run(): model building (plan.cc), rounding and column generation
// (plan_rounding.cc), the exact branch and price (plan_branch.cc), then placement on the fleet's
// GPUs (plan_placement.cc).
class Planner {
 public:
  Planner(const WorkloadSet& workloads, const Fleet& fleet, const hw::Catalog& catalog,
          const PlanOptions& options)
      : workloads_(workloads), fleet_(fleet), catalog_(catalog), options_(options) {}

  absl::StatusOr<PlanResult> Run();
  // The whole integer program solved by CBC alone, for cross-checking the planner (see
  // planner.h).
  absl::StatusOr<std::optional<double>> SolveWholeProgram(double time_limit_s);

  // How workloads left out are penalised. A workload is placed whole or not at all, so the
  // objective is the number of workloads left out (then the cost): with per-workload penalties
  // each replica class has a binary slack per workload. Its relaxation is much weaker than one
  // slack per replica (the 1,000-GPU benchmark went from proven in 1 s to unproven in 10 s), and
  // the two agree whenever nothing is left out, so a run starts with a slack per replica and
  // switches when its relaxation leaves something out; Plan() plans again with per-workload
  // penalties when the integer plan left a workload out for lack of room.
  void PenaliseEachWorkload() { per_workload_penalty_ = true; }
  bool penalises_each_workload() const { return per_workload_penalty_; }
  bool short_of_room() const { return short_of_room_; }
  // Re-planning: per fleet GPU, the running instances that stay (see internal::PlanKeeping).
  void SetPinned(const std::vector<std::vector<PlannedInstance>>* pinned) { pinned_ = pinned; }

 private:
  // Columns the search has fixed at zero (reduced-cost fixing), by what they stand for, so that
  // any master built over the same classes and types can leave them out.
  struct Fixings {
    std::vector<std::vector<char>> configs;   // per type, per config
    std::vector<std::vector<char>> options;   // per replica class, per option
    std::vector<std::set<Pattern>> patterns;  // per throughput class
  };
  // Limits on a restricted master: the GPUs of each price group (Master::price_groups) within
  // `group_lower`/`group_upper` (when not empty), fixed columns left out, CBC's preprocessing.
  struct MasterLimits {
    std::vector<int> group_lower, group_upper;
    const Fixings* fixed = nullptr;
    bool preprocess = true;
    bool feasibility_pump = true;
    double relative_gap = 0.001;         // CBC stops within this fraction of its bound
    Solution::Status* status = nullptr;  // when set: CBC's outcome (kInfeasible: none < cutoff)
  };
  // The restricted master program over `patterns`: GPUs per (type, config), replica instances
  // per option, and one pattern (integer cover) per throughput class.
  struct Master {
    LinearProgram program;
    std::vector<std::vector<int>> x_columns;  // per type, one per config
    // Per class: y (replica) or pattern columns (with those column generation adds).
    std::vector<std::vector<int>> columns;
    std::vector<std::vector<int>> slack;  // per class: as DemandClass::slack_columns
    std::vector<int> class_row;           // per class: its cover row (replica) or convexity row
    std::vector<int> availability_row;    // per type: sum of its x columns (-1 without configs)
    std::map<Slot, int> supply_row;
    std::vector<std::vector<int>> option_rows;  // per class and option: its supply row
    // GPUs of one price, whatever their model: the objective is a function of how many GPUs of
    // each price are used, so branching is on these sums.
    struct PriceGroup {
      double cost = 0;
      int gpus = 0;  // in the fleet
      int row = -1;  // sum of the x columns of its types
      std::vector<int> x_columns;
      std::vector<size_t> types;
    };
    std::vector<PriceGroup> price_groups;
  };
  // What BranchOnGpuCounts did.
  struct SearchStats {
    int nodes = 0;
    int leaves = 0;         // nodes whose GPU counts came out whole
    bool complete = false;  // every node closed: the best plan is optimal
    double seconds = 0;
  };

  // --- Run()'s stages.

  // An error when two workloads share a name.
  absl::Status CheckWorkloadNames() const;
  // The LP relaxation of program_, with per-workload penalties (the program built again) when
  // even the relaxation leaves demand out; has_solution false when CLP failed.
  Solution SolveRelaxation();
  // The first plan: the relaxation rounded per workload (`counts`, shifted off models that run
  // out) and packed greedily, which it returns; and the rounding at the relaxation's prices
  // (`priced`) with its Lagrangian bound.
  ConfigCounts FirstPlan(const Solution& lp, InstanceCounts* counts, InstanceCounts* priced,
                         double* lagrangian) const;
  // The patterns the restricted master starts from: per throughput class, its two roundings and
  // its cheapest cover on each model.
  PatternsByClass StartingPatterns(const InstanceCounts& counts,
                                   const InstanceCounts& priced) const;
  // Whether the plan's objective meets `bound` (rounded up to the granularity): nothing is
  // cheaper.
  bool Proven(const InstanceCounts& counts, const ConfigCounts& gpus, double bound,
              double granularity) const;
  // A cheaper plan from the restricted master over `patterns` within `budget` seconds, else at
  // least `counts` packed as well as possible.
  void ImproveWithPatterns(const PatternsByClass& patterns, double budget, InstanceCounts& counts,
                           ConfigCounts& gpus) const;
  // The exact search (BranchOnGpuCounts) in what is left of the time limit, then, in exact mode
  // when it did not finish, ImproveWithPatterns with the rest; raises `bound`. Returns the
  // search's statistics when it closed every node.
  std::optional<SearchStats> SearchExactly(PatternsByClass& patterns, double granularity,
                                           std::chrono::steady_clock::time_point started,
                                           InstanceCounts& counts, ConfigCounts& gpus,
                                           double* bound);
  // The result's lower bound (cost, and GPU count when every GPU costs the same) from the
  // program's `bound`, and whether the placed plan is proven optimal.
  void SetLowerBound(const Solution& lp, double bound, double granularity);
  // The note of a search that closed every node.
  void NoteClosedSearch(const SearchStats& search);

  // --- Model building: the fleet's GPU types, the demand classes, the integer program.

  // The fleet's GPUs in result_.gpus and grouped into types_ (nodes interleaved); an error for a
  // node named twice, an unknown model or an empty fleet.
  absl::Status BuildFleet();
  // Sizes every workload (result_.sizing), leaves out those with no option (result_.unplaced)
  // and groups the rest into classes_.
  void BuildClasses();
  // Re-planning: the configs that add instances of `profiles` around a pinned type's kept
  // layout (none when the kept instance is the whole GPU).
  std::vector<Config> PinnedConfigs(const GpuType& type, const std::set<int>& profiles) const;
  // program_ from types_ and classes_ (again from scratch when the penalties change).
  void BuildProgram();
  // Its parts. x: the GPUs of each type in each of its configs, at most the type's GPUs.
  void AddConfigColumns(std::map<const hw::GpuModel*, std::set<int>>& used_profiles);
  // A throughput class's slack (the workload left out), cover row, instance count row and
  // rounding cuts, over its y columns' `cover` and `count` terms.
  void AddThroughputRows(DemandClass& demand, std::vector<std::pair<int, double>> cover,
                         std::vector<std::pair<int, double>> count);
  // Rounding cuts (Chvatal-Gomory): in units of any option's capacity u, each instance counts
  // ceil(capacity / u) and together they need ceil(demand / u). Valid for integer instance
  // counts, and they stop the relaxation from buying 1.07 instances.
  void AddRoundingCuts(const DemandClass& demand, int slack);
  // A replica class's slacks (see DemandClass) and cover row.
  void AddReplicaRows(DemandClass& demand, std::vector<std::pair<int, double>> cover);
  // Supply: instances of (model, profile) <= what the chosen configs hold.
  void AddSupplyRows(std::map<Slot, std::vector<std::pair<int, double>>>& supply);

  // --- Rounding the relaxation and packing greedily.

  // Integer instance counts per class option from (possibly fractional) LP values.
  InstanceCounts RoundInstances(const std::vector<double>& values) const;
  // Drops instances a class does not need: a throughput class's biggest ones while its demand
  // and min_instances stay covered, a replica class's beyond its demand.
  void ReduceSurplus(InstanceCounts& counts) const;
  // GPUs per (type, config) that hold `counts`, starting from floor(x) of `values`; what they
  // cannot hold, per instance kind, goes to `shortfall`.
  ConfigCounts PackGpus(const InstanceCounts& counts, const std::vector<double>* values,
                        std::map<Slot, int>* shortfall = nullptr) const;
  // Lagrangian pricing with the LP's prices of instance kinds: every throughput class takes its
  // cheapest integer cover at those prices (an exact small search), replica classes their
  // cheapest option. Returns the counts, and sets `bound` to the Lagrangian lower bound, valid
  // for any prices >= 0.
  InstanceCounts PriceCovers(const Solution& lp, double* bound) const;
  // Moves instances off (model, profile) kinds the fleet has no room left for, to options on
  // other models; false when nothing could be moved.
  bool ShiftShortfall(InstanceCounts& counts, const std::map<Slot, int>& shortfall) const;
  // The cheapest GPUs (configs per type) that hold exactly `counts`, solved as an integer program
  // with the instance counts fixed; nullopt when they do not fit or the solver runs out of time.
  std::optional<ConfigCounts> PackOptimal(const InstanceCounts& counts, double time_limit_s) const;

  // --- A plan's value in the program.

  // What the GPUs of `gpus` cost.
  double CostOf(const ConfigCounts& gpus) const;
  // The program's objective (GPU cost plus penalties for what is left unplaced); infinity when
  // the GPUs' configs do not hold the instances.
  double Objective(const InstanceCounts& counts, const ConfigCounts& gpus) const;
  // The program's columns for `counts` and `gpus`, with the slacks of what they leave out.
  std::vector<double> StartVector(const InstanceCounts& counts, const ConfigCounts& gpus) const;

  // --- The restricted master and column generation.

  Master BuildMaster(const PatternsByClass& patterns) const;
  // Restricted master: each throughput class picks one of a few integer covers (its patterns),
  // replica classes and GPUs stay as in the full program; solved by CBC within the time limit,
  // looking only for plans cheaper than `cutoff`. False when it found none.
  bool SolvePatterns(const PatternsByClass& patterns, double time_limit_s, double cutoff,
                     InstanceCounts* counts, ConfigCounts* gpus, const MasterLimits& limits) const;
  bool SolvePatterns(const PatternsByClass& patterns, double time_limit_s, double cutoff,
                     InstanceCounts* counts, ConfigCounts* gpus) const {
    return SolvePatterns(patterns, time_limit_s, cutoff, counts, gpus, MasterLimits{});
  }
  // Class k's options at a relaxation's duals: the price of an instance of each (its supply
  // row's dual, negated; >= 0) and its capacity, as the cover searches take them.
  void OptionPrices(const Master& master, const std::vector<double>& duals, size_t k,
                    std::vector<double>* price, std::vector<double>* capacity) const;
  // The column-generation loop on a loaded master: re-solves and adds covers that price out
  // until none does. Returns the node's Lagrangian bound (+infinity when the node is infeasible,
  // -infinity when none was proven) and leaves the last relaxation in `last` (has_solution
  // false when time ran out with columns pending).
  // Covers in `fixed` (fixed at zero: no plan cheaper than the best one uses them) are not
  // priced: the bound returned is then one on the plans without them, which is what pruning
  // against the best plan needs.
  double PriceOut(Master& master, internal::IncrementalLp& lp, PatternsByClass& patterns,
                  double time_limit_s, Solution* last, const Fixings* fixed = nullptr) const;
  // Column generation on the master's relaxation (Dantzig-Wolfe): adds to `patterns` every
  // integer cover with a negative reduced cost until none is left or time runs out. Returns the
  // best Lagrangian lower bound seen (the relaxation's value once no cover prices out), or
  // -infinity when none could be proven.
  double GeneratePatterns(PatternsByClass& patterns, double time_limit_s) const;

  // --- The exact search: branch and price on GPU counts.

  // Every cover of each throughput class that a plan of a region can use and still cost less
  // than `cutoff`, given a relaxation of that region (its duals and value; column generation
  // need not have finished): a plan costs at least the value plus the reduced costs of its
  // covers, so covers whose reduced cost exceeds the room are left out (covers no instance of
  // which can be dropped, as CoverSearch visits them). False when a search hit its node limit or
  // the covers exceed `most` in all.
  bool CoversBelow(const Master& master, const std::vector<double>& duals, double value,
                   double cutoff, size_t most, const Fixings& fixed, PatternsByClass* covers) const;
  // The whole program (every cover) with the GPUs of each price group within `lower`/`upper`,
  // solved by CBC looking only for plans cheaper than `cutoff`: kInfeasible proves there is
  // none. Fills `counts`/`gpus` when it finds a plan.
  Solution SolveWholeAtCounts(const std::vector<Master::PriceGroup>& groups,
                              const std::vector<int>& lower, const std::vector<int>& upper,
                              double cutoff, double time_limit_s, InstanceCounts* counts,
                              ConfigCounts* gpus) const;
  // Branch and price on the number of GPUs of each price (the objective depends on nothing
  // else): best first, each node's relaxation priced out; a node whose GPU counts come out whole
  // is closed by the restricted master with those counts fixed. Improves `counts`/`gpus` when
  // it finds a cheaper plan than `incumbent`; returns the proven lower bound.
  double BranchOnGpuCounts(PatternsByClass& patterns, double incumbent, double granularity,
                           double time_limit_s, InstanceCounts* counts, ConfigCounts* gpus,
                           SearchStats* stats) const;
  // Its state and steps (defined with it).
  class GpuCountSearch;

  // --- Placement: the chosen configs on the fleet's GPUs.

  // Places the configs on physical GPUs and assigns instances to workloads, then completes,
  // trims and consolidates them (result_.gpus, result_.unplaced, the cost).
  void Materialise(const InstanceCounts& counts, const ConfigCounts& gpus);
  // Its steps, in that order. `covered` and `instances` hold, per workload, the demand its
  // instances cover and how many it has.

  // The kept instances (re-planning) first: they stay where they are.
  void PlaceKept(std::vector<double>& covered, std::vector<int>& instances);
  // The configs of `gpus` laid out on the types' GPUs in turn, their instances not yet
  // assigned.
  FreeSlots LayOutGpus(const ConfigCounts& gpus);
  // Each class's instances of `counts` taken from `slots` in order and handed to its workloads.
  void AssignInstances(const InstanceCounts& counts, FreeSlots& slots, std::vector<double>& covered,
                       std::vector<int>& instances);
  void AssignThroughput(const DemandClass& demand, const ClassInstances& got,
                        std::vector<double>& covered, std::vector<int>& instances);
  void AssignReplicas(const DemandClass& demand, const ClassInstances& got,
                      std::vector<double>& covered, std::vector<int>& instances);
  // Workloads still short are unplaced, and their instances freed with the spares.
  void DropShortWorkloads(const std::vector<double>& covered, const std::vector<int>& instances);
  // Each GPU's instances by start, whether it is used, and the plan's cost.
  void FinishGpus();
  // Last resort for workloads the rounding left short: spare slots, free room on used GPUs,
  // then unused GPUs, cheapest first.
  void CompleteShort(std::vector<double>& covered, std::vector<int>& instances);
  // Frees instances a workload does not need (after completion added bigger ones): the biggest
  // first, keeping its demand and min_instances covered. Kept instances stay.
  void TrimSurplus(std::vector<double>& covered, std::vector<int>& instances);
  // Empties lightly used MIG GPUs by moving their instances into free room on others.
  void Consolidate();

  const WorkloadSet& workloads_;
  const Fleet& fleet_;
  const hw::Catalog& catalog_;
  const PlanOptions& options_;
  PlanResult result_;
  std::vector<GpuType> types_;
  std::map<const hw::GpuModel*, ModelConfigs> configs_;
  std::vector<DemandClass> classes_;
  LinearProgram program_;
  double penalty_ = 1;
  bool per_workload_penalty_ = false;  // see PenaliseEachWorkload()
  bool short_of_room_ = false;         // some workload did not fit the fleet
  // Re-planning: per fleet GPU, the running instances that stay (null for a fresh plan).
  const std::vector<std::vector<PlannedInstance>>* pinned_ = nullptr;
  std::vector<double> remaining_;    // per workload: demand not covered by kept instances
  std::map<Slot, int> supply_rows_;  // row of each (model, profile) supply constraint
};

}  // namespace gpuslice::plan::internal
