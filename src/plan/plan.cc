#include "gpuslice/plan/plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpuslice/geometry/enumerate.h"
#include "gpuslice/geometry/shape.h"
#include "planner.h"
#include "solver.h"

namespace gpuslice::plan {
namespace {

using internal::LinearProgram;
using internal::Solution;

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

// The demand `values` leave out of class `demand` (whole units of its slacks).
double LeftOut(const DemandClass& demand, const std::vector<double>& values) {
  double left = 0;
  for (size_t i = 0; i < demand.slack_columns.size(); ++i) {
    left += demand.slack_weights[i] *
            std::floor(values[static_cast<size_t>(demand.slack_columns[i])] + 1e-6);
  }
  return left;
}

struct ModelConfigs {
  std::vector<Config> configs;  // MIG configs first, then the whole-GPU config (if any)
  int whole_config = -1;
};

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

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The fraction of a GPU an instance takes: its share of compute slices or of placement units
// (memory), whichever is larger. 3g.40gb on A100-80GB takes half the memory, so two fill it.
double ShareOf(const hw::GpuModel& model, int profile) {
  if (profile == kWholeGpu || !model.mig) return 1.0;
  const hw::GiProfile& gi = model.mig->profiles[static_cast<size_t>(profile)];
  return std::max(static_cast<double>(gi.compute_slices) / model.mig->compute_slices,
                  static_cast<double>(gi.placement_size) / model.mig->placement_units);
}

int SlicesOf(const hw::GpuModel& model, int profile) {
  if (profile == kWholeGpu) return model.mig ? model.mig->compute_slices : 1;
  return model.mig->profiles[static_cast<size_t>(profile)].compute_slices;
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

// The configuration integer program of one planning run (docs/PLANNING.md), built from the inputs
// and solved in stages by Run(): model building, rounding and column generation, the exact
// branch and price, then placement on the fleet's GPUs.
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

// Instance counts over `candidates` (option indices) that cover `demand` with the smallest share of
// GPUs (ShareOf): most instances of the option with the best capacity per share, the rest by one
// other option (up to a few instances of it). Empty when no candidate exists.
Pattern CheapestCover(const DemandClass& demand, const std::vector<size_t>& candidates) {
  Pattern best_counts;
  if (candidates.empty()) return best_counts;
  auto share = [&](size_t o) {
    return ShareOf(*demand.options[o].model, demand.options[o].profile);
  };
  size_t bulk = candidates.front();
  for (size_t o : candidates) {
    if (demand.options[o].capacity / share(o) > demand.options[bulk].capacity / share(bulk)) {
      bulk = o;
    }
  }
  const SizedOption& main = demand.options[bulk];
  double best_share = 1e300;
  constexpr int kMaxRest = 4;
  for (size_t rest : candidates) {
    for (int n_rest = 0; n_rest <= kMaxRest; ++n_rest) {
      const double left = demand.demand - n_rest * demand.options[rest].capacity;
      int n_main = left > 0 ? static_cast<int>(std::ceil(left / main.capacity - kEps)) : 0;
      const int instances = n_main + n_rest;
      n_main += std::max(0, demand.min_instances - instances);
      const double total = n_main * share(bulk) + n_rest * share(rest);
      if (total < best_share - kEps) {
        best_share = total;
        best_counts.assign(demand.options.size(), 0);
        best_counts[bulk] += n_main;
        best_counts[rest] += n_rest;
      }
    }
  }
  return best_counts;
}

InstanceCounts Planner::RoundInstances(const std::vector<double>& values) const {
  InstanceCounts counts(classes_.size());
  for (size_t k = 0; k < classes_.size(); ++k) {
    const DemandClass& demand = classes_[k];
    const size_t n = demand.options.size();
    counts[k].assign(n, 0);
    // Throughput workloads: the cheapest cover on the model the LP leaned towards.
    if (demand.by_throughput && values[static_cast<size_t>(demand.slack_columns[0])] < 0.5) {
      std::map<const hw::GpuModel*, double> capacity_on;
      for (size_t o = 0; o < n; ++o) {
        capacity_on[demand.options[o].model] +=
            values[static_cast<size_t>(demand.y_columns[o])] * demand.options[o].capacity;
      }
      const hw::GpuModel* model = nullptr;
      double most = -1;
      for (size_t o = 0; o < n; ++o) {  // option order keeps the choice deterministic
        if (capacity_on[demand.options[o].model] > most) {
          most = capacity_on[demand.options[o].model];
          model = demand.options[o].model;
        }
      }
      std::vector<size_t> candidates;
      for (size_t o = 0; o < n; ++o) {
        if (demand.options[o].model == model) candidates.push_back(o);
      }
      Pattern cover = CheapestCover(demand, candidates);
      if (!cover.empty()) {
        counts[k] = std::move(cover);
        continue;
      }
    }
    double covered = 0;
    int instances = 0;
    std::vector<std::pair<double, size_t>> fractions;
    for (size_t o = 0; o < n; ++o) {
      const double value = values[static_cast<size_t>(demand.y_columns[o])];
      const int whole = static_cast<int>(std::floor(value + kEps));
      counts[k][o] = whole;
      covered += whole * demand.options[o].capacity;
      instances += whole;
      fractions.emplace_back(value - whole, o);
    }
    // Workloads the LP left out stay out.
    if (demand.by_throughput && values[static_cast<size_t>(demand.slack_columns[0])] > 0.5) {
      continue;
    }
    const double target = demand.demand - (demand.by_throughput ? 0 : LeftOut(demand, values));
    // Cover the rest with the options the LP leaned towards, largest fraction first.
    std::stable_sort(fractions.begin(), fractions.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [fraction, o] : fractions) {
      if (covered + kEps >= target) break;
      if (fraction <= kEps) break;
      ++counts[k][o];
      covered += demand.options[o].capacity;
      ++instances;
    }
    // Still short: the option that covers the rest with the fewest compute slices.
    if (covered + kEps < target) {
      size_t best = 0;
      double best_slices = 1e300;
      for (size_t o = 0; o < n; ++o) {
        const double needed = std::ceil((target - covered) / demand.options[o].capacity - kEps);
        const double slices = needed * demand.options[o].compute_slices;
        if (slices < best_slices) {
          best_slices = slices;
          best = o;
        }
      }
      const int needed =
          static_cast<int>(std::ceil((target - covered) / demand.options[best].capacity - kEps));
      counts[k][best] += needed;
      instances += needed;
    }
    while (demand.by_throughput && instances < demand.min_instances) {
      ++counts[k][0];  // the cheapest option
      ++instances;
    }
  }
  return counts;
}

void Planner::ReduceSurplus(InstanceCounts& counts) const {
  for (size_t k = 0; k < classes_.size(); ++k) {
    const DemandClass& demand = classes_[k];
    if (!demand.by_throughput) continue;  // replica counts are exact already
    double covered = 0;
    int instances = 0;
    for (size_t o = 0; o < demand.options.size(); ++o) {
      covered += counts[k][o] * demand.options[o].capacity;
      instances += counts[k][o];
    }
    if (instances == 0) continue;
    // Drop the biggest instance that is not needed, repeatedly.
    for (bool dropped = true; dropped;) {
      dropped = false;
      int best = -1;
      for (size_t o = 0; o < demand.options.size(); ++o) {
        if (counts[k][o] == 0) continue;
        if (covered - demand.options[o].capacity + kEps < demand.demand) continue;
        if (instances - 1 < demand.min_instances) continue;
        if (best < 0 || demand.options[o].compute_slices >
                            demand.options[static_cast<size_t>(best)].compute_slices) {
          best = static_cast<int>(o);
        }
      }
      if (best >= 0) {
        --counts[k][static_cast<size_t>(best)];
        covered -= demand.options[static_cast<size_t>(best)].capacity;
        --instances;
        dropped = true;
      }
    }
  }
  // Replica classes: exactly the demand (minus what the solver left unplaced).
  for (size_t k = 0; k < classes_.size(); ++k) {
    const DemandClass& demand = classes_[k];
    if (demand.by_throughput) continue;
    int total = std::accumulate(counts[k].begin(), counts[k].end(), 0);
    const int wanted = static_cast<int>(std::llround(demand.demand));
    for (size_t o = demand.options.size(); o-- > 0 && total > wanted;) {
      const int drop = std::min(counts[k][o], total - wanted);
      counts[k][o] -= drop;
      total -= drop;
    }
  }
}

ConfigCounts Planner::PackGpus(const InstanceCounts& counts, const std::vector<double>* values,
                               std::map<Slot, int>* shortfall) const {
  ConfigCounts gpus(types_.size());
  std::map<Slot, int> need;
  for (size_t k = 0; k < classes_.size(); ++k) {
    for (size_t o = 0; o < classes_[k].options.size(); ++o) {
      const SizedOption& option = classes_[k].options[o];
      need[{option.model, option.profile}] += counts[k][o];
    }
  }
  std::vector<int> left(types_.size());
  for (size_t t = 0; t < types_.size(); ++t) {
    gpus[t].assign(types_[t].configs.size(), 0);
    left[t] = static_cast<int>(types_[t].gpus.size());
  }
  auto take = [&](size_t t, size_t i, int copies) {
    const Config& config = types_[t].configs[i];
    gpus[t][i] += copies;
    left[t] -= copies;
    for (const auto& [profile, count] : config.counts) {
      need[{types_[t].model, profile}] -= count * copies;
    }
  };
  // What the LP chose, rounded down, as long as it is still needed.
  if (values != nullptr) {
    for (size_t t = 0; t < types_.size(); ++t) {
      for (size_t i = 0; i < types_[t].configs.size(); ++i) {
        const int copies = static_cast<int>(
            std::floor((*values)[static_cast<size_t>(types_[t].x_columns[i])] + kEps));
        if (copies > 0) take(t, i, std::min(copies, left[t]));
      }
    }
  }
  // The rest greedily: the config that covers the most outstanding compute slices per cost.
  for (;;) {
    double best_score = 0;
    int best_t = -1;
    int best_i = -1;
    double best_waste = 0;
    for (size_t t = 0; t < types_.size(); ++t) {
      if (left[t] <= 0) continue;
      for (size_t i = 0; i < types_[t].configs.size(); ++i) {
        const Config& config = types_[t].configs[i];
        double covered = 0;
        double waste = 0;
        for (const auto& [profile, count] : config.counts) {
          const int outstanding = std::max(0, need[{types_[t].model, profile}]);
          const int used = std::min(count, outstanding);
          covered += used * ShareOf(*types_[t].model, profile);
          waste += (count - used) * ShareOf(*types_[t].model, profile);
        }
        if (covered <= 0) continue;
        const double score = covered / std::max(types_[t].cost, 1e-9);
        if (score > best_score + kEps ||
            (std::abs(score - best_score) <= kEps && waste < best_waste)) {
          best_score = score;
          best_t = static_cast<int>(t);
          best_i = static_cast<int>(i);
          best_waste = waste;
        }
      }
    }
    if (best_t < 0) break;
    take(static_cast<size_t>(best_t), static_cast<size_t>(best_i), 1);
  }
  if (shortfall != nullptr) {
    shortfall->clear();
    for (const auto& [slot, missing] : need) {
      if (missing > 0) (*shortfall)[slot] = missing;
    }
  }
  return gpus;
}

namespace {

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

}  // namespace

InstanceCounts Planner::PriceCovers(const Solution& lp, double* bound) const {
  // Prices of instance kinds: the supply rows' duals (<= rows of a minimisation: dual <= 0).
  std::map<Slot, double> price;
  for (const auto& [slot, row] : supply_rows_) {
    price[slot] = std::max(0.0, -lp.duals[static_cast<size_t>(row)]);
  }
  std::map<const hw::GpuModel*, double> cheapest;  // per model, for tie-breaking
  for (const GpuType& type : types_) {
    auto [it, inserted] = cheapest.emplace(type.model, type.cost);
    if (!inserted) it->second = std::min(it->second, type.cost);
  }
  double lagrangian = 0;
  InstanceCounts counts(classes_.size());
  for (size_t k = 0; k < classes_.size(); ++k) {
    const DemandClass& demand = classes_[k];
    std::vector<double> exact_price, tie_price, capacity;
    for (const SizedOption& option : demand.options) {
      const double p = price[{option.model, option.profile}];
      exact_price.push_back(p);
      // A hair of the instance's nominal cost keeps covers lean where a kind costs nothing.
      tie_price.push_back(p + 1e-4 * ShareOf(*option.model, option.profile) *
                                  std::max(cheapest[option.model], 1e-3));
      capacity.push_back(option.capacity);
    }
    const int min_instances = demand.by_throughput ? demand.min_instances : 0;
    CoverSearch search{tie_price, capacity, demand.demand, min_instances, {}, {}, {}};
    search.Run();
    // The bound needs the exact minimum at the exact prices; tie prices are >= exact prices, so
    // the exact price of the tie-optimal cover may exceed it: search again only for the bound.
    CoverSearch exact{exact_price, capacity, demand.demand, min_instances, {}, {}, {}};
    exact.Run();
    if (demand.by_throughput) {
      lagrangian += std::min(exact.best_price, penalty_);
    } else if (!per_workload_penalty_) {
      lagrangian += std::min(exact.best_price, penalty_ * demand.demand);
    } else {
      // Each instance covers one replica at no less than the cheapest price, so leaving out the
      // workloads S costs at least |S| penalties + that price x the other workloads' shares.
      const double cheapest_price = *std::min_element(exact_price.begin(), exact_price.end());
      for (double share : demand.shares) lagrangian += std::min(penalty_, cheapest_price * share);
    }
    counts[k] = search.best.empty() ? Pattern(demand.options.size(), 0) : search.best;
  }
  // GPUs: any config whose instances are worth more than the GPU is bought as often as allowed.
  for (const GpuType& type : types_) {
    double most_negative = 0;
    for (const Config& config : type.configs) {
      double value = 0;
      for (const auto& [profile, count] : config.counts) {
        auto it = price.find({type.model, profile});
        if (it != price.end()) value += count * it->second;
      }
      most_negative = std::min(most_negative, type.cost - value);
    }
    lagrangian += most_negative * static_cast<double>(type.gpus.size());
  }
  *bound = lagrangian;
  return counts;
}

Planner::Master Planner::BuildMaster(const PatternsByClass& patterns) const {
  Master master;
  LinearProgram& program = master.program;
  master.x_columns.resize(types_.size());
  master.availability_row.assign(types_.size(), -1);
  std::map<Slot, std::vector<std::pair<int, double>>> supply;
  for (size_t t = 0; t < types_.size(); ++t) {
    const GpuType& type = types_[t];
    std::vector<std::pair<int, double>> availability;
    for (const Config& config : type.configs) {
      const int column =
          program.AddColumn(type.cost, 0, static_cast<double>(type.gpus.size()), true);
      master.x_columns[t].push_back(column);
      availability.emplace_back(column, 1.0);
      for (const auto& [profile, count] : config.counts) {
        supply[{type.model, profile}].emplace_back(column, -count);
      }
    }
    if (!availability.empty()) {
      master.availability_row[t] = program.rows();
      program.AddRow(std::move(availability), 0, static_cast<double>(type.gpus.size()));
    }
  }
  std::map<long long, size_t> group_of_cost;
  for (size_t t = 0; t < types_.size(); ++t) {
    if (master.x_columns[t].empty()) continue;
    const long long key = std::llround(types_[t].cost * 1e4);
    auto [it, inserted] = group_of_cost.emplace(key, master.price_groups.size());
    if (inserted) master.price_groups.push_back({types_[t].cost, 0, -1, {}, {}});
    Master::PriceGroup& group = master.price_groups[it->second];
    group.types.push_back(t);
    group.gpus += static_cast<int>(types_[t].gpus.size());
    group.x_columns.insert(group.x_columns.end(), master.x_columns[t].begin(),
                           master.x_columns[t].end());
  }
  for (Master::PriceGroup& group : master.price_groups) {
    std::vector<std::pair<int, double>> terms;
    for (int column : group.x_columns) terms.emplace_back(column, 1.0);
    group.row = program.rows();
    program.AddRow(std::move(terms), 0, group.gpus);
  }
  master.columns.resize(classes_.size());
  master.slack.resize(classes_.size());
  master.class_row.resize(classes_.size());
  for (size_t k = 0; k < classes_.size(); ++k) {
    const DemandClass& demand = classes_[k];
    for (const SizedOption& option : demand.options) supply[{option.model, option.profile}];
    if (!demand.by_throughput) {
      std::vector<std::pair<int, double>> cover;
      for (const SizedOption& option : demand.options) {
        const int column = program.AddColumn(0, 0, demand.demand, true);
        master.columns[k].push_back(column);
        cover.emplace_back(column, 1.0);
        supply[{option.model, option.profile}].emplace_back(column, 1.0);
      }
      for (size_t i = 0; i < demand.slack_columns.size(); ++i) {
        const double weight = demand.slack_weights[i];
        master.slack[k].push_back(
            program.AddColumn(penalty_, 0, per_workload_penalty_ ? 1.0 : demand.demand, true));
        cover.emplace_back(master.slack[k].back(), weight);
      }
      master.class_row[k] = program.rows();
      program.AddRow(std::move(cover), demand.demand, internal::kInfinity);
      continue;
    }
    // Pattern columns have no upper bound of their own (the convexity row keeps them <= 1): a
    // column at an upper bound could have a negative reduced cost, which would break the
    // Lagrangian bound of column generation.
    std::vector<std::pair<int, double>> choose;
    for (const Pattern& pattern : patterns[k]) {
      const int column = program.AddColumn(0, 0, internal::kInfinity, true);
      master.columns[k].push_back(column);
      choose.emplace_back(column, 1.0);
      for (size_t o = 0; o < pattern.size(); ++o) {
        if (pattern[o] > 0) {
          const SizedOption& option = demand.options[o];
          supply[{option.model, option.profile}].emplace_back(column, pattern[o]);
        }
      }
    }
    master.slack[k] = {program.AddColumn(penalty_, 0, 1, true)};
    choose.emplace_back(master.slack[k][0], 1.0);
    master.class_row[k] = program.rows();
    program.AddRow(std::move(choose), 1, 1);
  }
  for (auto& [slot, terms] : supply) {
    master.supply_row[slot] = program.rows();
    program.AddRow(std::move(terms), -internal::kInfinity, 0);
  }
  master.option_rows.resize(classes_.size());
  for (size_t k = 0; k < classes_.size(); ++k) {
    for (const SizedOption& option : classes_[k].options) {
      master.option_rows[k].push_back(master.supply_row.at({option.model, option.profile}));
    }
  }
  return master;
}

void Planner::OptionPrices(const Master& master, const std::vector<double>& duals, size_t k,
                           std::vector<double>* price, std::vector<double>* capacity) const {
  const DemandClass& demand = classes_[k];
  price->clear();
  capacity->clear();
  for (size_t o = 0; o < demand.options.size(); ++o) {
    price->push_back(std::max(0.0, -duals[static_cast<size_t>(master.option_rows[k][o])]));
    capacity->push_back(demand.options[o].capacity);
  }
}

bool Planner::CoversBelow(const Master& master, const std::vector<double>& duals, double value,
                          double cutoff, size_t most, const Fixings& fixed,
                          PatternsByClass* covers) const {
  covers->assign(classes_.size(), {});
  // A plan of the region costs at least value + the sum over classes of its covers' reduced
  // costs (the other columns' terms are >= 0 at an optimal basis). Covers missing from the
  // master may price below zero: each class's most negative reduced cost widens the others'
  // room.
  const double tolerance = 1e-7 * std::max(1.0, std::abs(value));
  std::vector<std::vector<double>> prices(classes_.size()), capacities(classes_.size());
  std::vector<double> lowest(classes_.size(), 0);
  double below = 0;  // sum of the classes' most negative reduced costs
  for (size_t k = 0; k < classes_.size(); ++k) {
    const DemandClass& demand = classes_[k];
    if (!demand.by_throughput) continue;
    OptionPrices(master, duals, k, &prices[k], &capacities[k]);
    const double convexity = duals[static_cast<size_t>(master.class_row[k])];
    CoverSearch search{prices[k], capacities[k], demand.demand, demand.min_instances, {}, {}, {}};
    search.excluded = &fixed.patterns[k];
    search.Run(convexity);
    if (search.nodes > CoverSearch::kNodeLimit) return false;
    if (!search.best.empty()) lowest[k] = search.best_price - convexity;
    below += lowest[k];
  }
  const double room = cutoff - value + tolerance;
  if (room < below) return true;  // no plan of the region is cheaper than the cutoff
  size_t total = 0;
  for (size_t k = 0; k < classes_.size(); ++k) {
    const DemandClass& demand = classes_[k];
    if (!demand.by_throughput) continue;
    const double convexity = duals[static_cast<size_t>(master.class_row[k])];
    CoverSearch search{prices[k], capacities[k], demand.demand, demand.min_instances, {}, {}, {}};
    search.all = &(*covers)[k];
    search.excluded = &fixed.patterns[k];
    search.collect_most = most - total;
    search.Run(convexity + room - (below - lowest[k]) + tolerance);
    if (search.nodes > CoverSearch::kNodeLimit) return false;
    total += (*covers)[k].size();
  }
  return true;
}

double Planner::PriceOut(Master& master, internal::IncrementalLp& lp, PatternsByClass& patterns,
                         double time_limit_s, Solution* last, const Fixings* fixed) const {
  const auto started = std::chrono::steady_clock::now();
  double bound = -internal::kInfinity;
  *last = Solution{};
  for (;;) {
    const double left = time_limit_s - SecondsSince(started);
    if (left <= 0) break;
    Solution solution = lp.Solve(left);
    if (!solution.has_solution) {
      // An infeasible node: nothing below it (slacks keep the root feasible).
      if (solution.status == Solution::Status::kInfeasible) bound = internal::kInfinity;
      break;
    }
    double reduced_total = 0;
    int added = 0;
    bool complete = true;
    for (size_t k = 0; k < classes_.size(); ++k) {
      const DemandClass& demand = classes_[k];
      if (!demand.by_throughput) continue;
      // A cover prices out when it costs less than the class's convexity dual; the search
      // looks for nothing else (prices are >= 0, so there is none when that dual is <= 0).
      const double convexity = solution.duals[static_cast<size_t>(master.class_row[k])];
      if (convexity <= 0) continue;
      std::vector<double> price, capacity;
      OptionPrices(master, solution.duals, k, &price, &capacity);
      CoverSearch search{price, capacity, demand.demand, demand.min_instances, {}, {}, {}};
      if (fixed != nullptr) search.excluded = &fixed->patterns[k];
      search.Run(convexity);
      complete &= search.nodes <= CoverSearch::kNodeLimit;
      if (search.best.empty()) {
        reduced_total -= 1e-12;  // nothing cheaper than the dual, to the search's tolerance
        continue;
      }
      const double reduced = search.best_price - convexity;
      reduced_total += reduced;
      // (A cover already in the master only looks negative through the LP's tolerances.)
      if (reduced < -1e-7 * std::max(1.0, std::abs(convexity)) &&
          std::find(patterns[k].begin(), patterns[k].end(), search.best) == patterns[k].end()) {
        std::vector<std::pair<int, double>> terms{{master.class_row[k], 1.0}};
        for (size_t o = 0; o < search.best.size(); ++o) {
          if (search.best[o] > 0) terms.emplace_back(master.option_rows[k][o], search.best[o]);
        }
        master.columns[k].push_back(lp.AddColumn(0, 0, internal::kInfinity, terms));
        patterns[k].push_back(search.best);
        ++added;
      }
    }
    // Lagrangian bound: the master's value plus each class's most negative reduced cost (each
    // class takes exactly one pattern). Valid at every round, whatever the columns so far.
    if (complete) bound = std::max(bound, solution.objective + reduced_total);
    *last = std::move(solution);
    if (added == 0) break;
    last->has_solution = false;  // its columns are out of date
  }
  return bound;
}

double Planner::GeneratePatterns(PatternsByClass& patterns, double time_limit_s) const {
  Master master = BuildMaster(patterns);
  internal::IncrementalLp lp(master.program);
  Solution last;
  return PriceOut(master, lp, patterns, time_limit_s, &last);
}

// The branch and price of Planner::BranchOnGpuCounts: the open nodes, the best plan so far and
// the columns fixed at zero, with the steps of the search.
class Planner::GpuCountSearch {
 public:
  GpuCountSearch(const Planner& planner, PatternsByClass& patterns, double incumbent,
                 double granularity, double time_limit_s, InstanceCounts* counts,
                 ConfigCounts* gpus, SearchStats* stats);
  // Searches until no open node can hold a cheaper plan or time runs out; returns the proven
  // lower bound.
  double Run();

 private:
  // A box of GPU counts per price group to search, or a leaf: GPU counts that came out whole.
  struct Node {
    double bound;
    std::vector<int> lower, upper;  // GPUs of each price group
    bool leaf = false;              // whole GPU counts: solve for an integer plan
    // Leaves: per throughput class, the patterns its relaxation used, and the box of GPU counts
    // of the node whose relaxation gave these counts.
    PatternsByClass used_patterns = {};
    std::vector<int> region_lower = {}, region_upper = {};
    std::vector<double> duals = {};  // of that relaxation, and its value
    double value = 0;
    // Nodes that wait in the queue: their parent's basis, restored when they are solved (the
    // basis at hand is then from elsewhere in the tree, many dual iterations away).
    std::vector<unsigned char> basis = {};
  };
  // Best first: the open node with the lowest bound on top.
  struct Later {
    bool operator()(const Node& a, const Node& b) const { return a.bound > b.bound; }
  };

  const std::vector<Master::PriceGroup>& groups() const { return master_.price_groups; }
  double SecondsLeft() const { return time_limit_s_ - SecondsSince(started_); }
  // The cheapest plan cost a relaxation value allows: plan costs are multiples of the
  // granularity. A hair is taken off first, for the LP's tolerances.
  double PlanFloor(double value) const;
  // Half a granule: plans closer than that cost the same. (The incumbent is infinite when the
  // plan it starts from does not fit its GPUs.)
  double Step() const;
  // The least cost that whole GPU counts within a node's box can add up to, at or above `bound`
  // (plans that leave a workload out cost more than any that does not: this holds while the
  // best plan leaves none out).
  double Reachable(double bound, const std::vector<int>& lower,
                   const std::vector<int>& upper) const;
  // Whether a node of this bound may hold a cheaper plan than the best one. (An infeasible
  // node's bound is kInfinity, finite: it never improves, even on no plan.)
  bool Improves(double bound) const;
  // Reduced-cost fixing: with the root's prices, a plan that uses a column costs at least the
  // root's bound plus the column's reduced cost; columns for which that is no cheaper than the
  // best plan are fixed at zero for the rest of the search (fewer columns, faster relaxations).
  void FixColumns();
  // Fixes `column` at zero when it may (see FixColumns); whether it did.
  bool FixIfWorse(int column, double margin);
  // The node to solve next: the plunge when there is one, else the best open node (its
  // parent's basis restored).
  Node Next();
  // Takes the plan `c`/`g` when it is cheaper than the best one; returns its objective.
  double Take(InstanceCounts& c, ConfigCounts& g);

  // Leaves: whole GPU counts per price fix the cost; an integer plan with these counts closes
  // the leaf, else no plan at these counts is cheaper and the rest of its box is searched.
  void CloseLeaf(Node& node, double left);
  // The exact restricted master at a leaf (CoversBelow). True when it closed the leaf; sets
  // `settled` when CBC settled the leaf's point either way.
  bool ClosedByCovers(const Node& node, const MasterLimits& limits, InstanceCounts& node_counts,
                      ConfigCounts& node_gpus, bool* settled);
  // The whole program at the leaf's counts; true when that closed the leaf (a plan, or CBC could
  // not settle it: the leaf's bound then stays as unresolved).
  bool ClosedByWholeProgram(const Node& node, InstanceCounts& node_counts, ConfigCounts& node_gpus);
  // No plan at the leaf's counts costs its bound: the rest of its box, as open nodes.
  void SplitAroundPoint(const Node& node);

  // Other nodes: the relaxation priced out, then a leaf or a branching. False when time ran
  // out (the node is open again).
  bool Expand(Node& node, double left);
  // The price group whose GPU count is the most fractional, weighted by its price (-1 when every
  // count is whole), with the GPUs of each group the relaxation uses.
  int BranchGroup(const Solution& relaxed, std::vector<double>* used) const;
  // The leaf of a node whose relaxation uses whole GPU counts.
  void QueueLeaf(const Node& node, double bound, const Solution& relaxed,
                 const std::vector<double>& used);
  // The two children of a branching on group `b`: one is solved next (the plunge).
  void Branch(Node& node, double bound, size_t b, const std::vector<double>& used);

  const Planner& planner_;
  PatternsByClass& patterns_;
  double incumbent_;  // the best plan's objective
  const double granularity_;
  const double time_limit_s_;
  InstanceCounts* counts_;  // the best plan
  ConfigCounts* gpus_;
  SearchStats* stats_;
  const std::chrono::steady_clock::time_point started_;
  Master master_;
  internal::IncrementalLp lp_;
  std::vector<size_t> priced_groups_;  // the price groups that cost something
  std::vector<long long> granules_;    // their costs, in granules
  double root_bound_ = -internal::kInfinity;
  std::vector<double> root_reduced_;
  Fixings fixed_;
  std::priority_queue<Node, std::vector<Node>, Later> open_;
  double unresolved_ = internal::kInfinity;  // lowest bound of nodes no integer plan closed
  // Best first, except that one child of each branching is solved right away (a plunge: its
  // relaxation starts from its parent's basis, a bound change away).
  std::optional<Node> plunge_;
  double near_root_ = -internal::kInfinity;
};

Planner::GpuCountSearch::GpuCountSearch(const Planner& planner, PatternsByClass& patterns,
                                        double incumbent, double granularity, double time_limit_s,
                                        InstanceCounts* counts, ConfigCounts* gpus,
                                        SearchStats* stats)
    : planner_(planner),
      patterns_(patterns),
      incumbent_(incumbent),
      granularity_(granularity),
      time_limit_s_(time_limit_s),
      counts_(counts),
      gpus_(gpus),
      stats_(stats),
      started_(std::chrono::steady_clock::now()),
      master_(planner.BuildMaster(patterns)),
      lp_(master_.program) {
  for (size_t g = 0; g < master_.price_groups.size(); ++g) {
    if (master_.price_groups[g].cost <= 0) continue;
    priced_groups_.push_back(g);
    granules_.push_back(granularity_ > 0 ? std::llround(master_.price_groups[g].cost / granularity_)
                                         : 0);
  }
  fixed_.patterns.resize(planner_.classes_.size());
  for (size_t t = 0; t < planner_.types_.size(); ++t) {
    fixed_.configs.emplace_back(master_.x_columns[t].size(), 0);
  }
  for (size_t k = 0; k < planner_.classes_.size(); ++k) {
    fixed_.options.emplace_back(planner_.classes_[k].by_throughput ? 0 : master_.columns[k].size(),
                                0);
  }
}

double Planner::GpuCountSearch::PlanFloor(double value) const {
  if (std::abs(value) >= internal::kInfinity / 2) return value;
  const double safe = value - 1e-7 * std::max(1.0, std::abs(value));
  return granularity_ > 0 ? std::ceil(safe / granularity_) * granularity_ : safe;
}

double Planner::GpuCountSearch::Step() const {
  return granularity_ > 0 ? 0.5 * granularity_
                          : 1e-7 * std::max(1.0, std::isfinite(incumbent_) ? incumbent_ : 1.0);
}

double Planner::GpuCountSearch::Reachable(double bound, const std::vector<int>& lower,
                                          const std::vector<int>& upper) const {
  if (granularity_ <= 0 || !(incumbent_ < planner_.penalty_) ||
      std::abs(bound) >= internal::kInfinity / 2) {
    return bound;
  }
  std::vector<int> low, high;
  for (size_t g : priced_groups_) {
    low.push_back(lower[g]);
    high.push_back(upper[g]);
  }
  constexpr long kReachNodes = 20000;
  const long long target = std::llround(bound / granularity_);
  return static_cast<double>(
             internal::LeastReachableSum(granules_, low, high, target, kReachNodes)) *
         granularity_;
}

bool Planner::GpuCountSearch::Improves(double bound) const {
  return bound < internal::kInfinity / 2 && bound < incumbent_ - Step();
}

bool Planner::GpuCountSearch::FixIfWorse(int column, double margin) {
  const size_t j = static_cast<size_t>(column);
  if (j >= root_reduced_.size() || root_bound_ + root_reduced_[j] - margin < incumbent_ - Step()) {
    return false;
  }
  lp_.FixAtZero(column);
  return true;
}

void Planner::GpuCountSearch::FixColumns() {
  if (!std::isfinite(incumbent_) || !(root_bound_ > -internal::kInfinity / 2)) return;
  const double margin = 1e-7 * std::max(1.0, std::abs(root_bound_));
  for (size_t t = 0; t < planner_.types_.size(); ++t) {
    for (size_t c = 0; c < master_.x_columns[t].size(); ++c) {
      if (FixIfWorse(master_.x_columns[t][c], margin)) fixed_.configs[t][c] = 1;
    }
  }
  for (size_t k = 0; k < planner_.classes_.size(); ++k) {
    for (size_t j = 0; j < master_.columns[k].size(); ++j) {
      if (!FixIfWorse(master_.columns[k][j], margin)) continue;
      if (planner_.classes_[k].by_throughput) {
        fixed_.patterns[k].insert(patterns_[k][j]);
      } else {
        fixed_.options[k][j] = 1;
      }
    }
    // The slacks stay: they keep every node's restricted master feasible, so that column
    // generation can price out the covers a node needs. (Fixed at zero, a node whose covers
    // were not generated yet looked infeasible and was pruned, with a plan below the bound.)
  }
}

Planner::GpuCountSearch::Node Planner::GpuCountSearch::Next() {
  Node node;
  if (plunge_) {
    node = *std::move(plunge_);
    plunge_.reset();
  } else {
    node = open_.top();
    open_.pop();
    if (!node.leaf && !node.basis.empty()) lp_.RestoreBasis(node.basis);
  }
  return node;
}

double Planner::GpuCountSearch::Take(InstanceCounts& c, ConfigCounts& g) {
  const double objective = planner_.Objective(c, g);
  if (objective < incumbent_ - Step()) {
    incumbent_ = objective;
    *counts_ = std::move(c);
    *gpus_ = std::move(g);
    FixColumns();
  }
  return objective;
}

double Planner::GpuCountSearch::Run() {
  Node root{-internal::kInfinity, std::vector<int>(groups().size(), 0), {}};
  for (const Master::PriceGroup& group : groups()) root.upper.push_back(group.gpus);
  open_.push(std::move(root));
  for (;;) {
    if (plunge_ && !Improves(plunge_->bound)) plunge_.reset();
    if (!plunge_ && (open_.empty() || !Improves(open_.top().bound))) break;
    const double left = SecondsLeft();
    if (left <= 0) {
      if (plunge_) open_.push(*std::move(plunge_));
      break;
    }
    Node node = Next();
    if (node.leaf) {
      CloseLeaf(node, left);
    } else if (!Expand(node, left)) {
      break;  // out of time
    }
  }
  double bound = std::min(incumbent_, unresolved_);
  if (!open_.empty()) bound = std::min(bound, open_.top().bound);
  if (!std::isfinite(bound)) bound = -internal::kInfinity;  // no plan found: no claim
  stats_->complete = bound >= incumbent_ - Step();
  stats_->seconds = SecondsSince(started_);
  return bound;
}

void Planner::GpuCountSearch::CloseLeaf(Node& node, double left) {
  InstanceCounts node_counts;
  ConfigCounts node_gpus;
  ++stats_->leaves;
  // First the patterns the relaxation used, then all at hand (quick, and usually enough).
  // (Without the feasibility pump: measured slower than it helps on these nearly integral
  // masters.) The first try is a heuristic and gets a short time: without preprocessing, CBC
  // can spend seconds failing to show that the used patterns hold no plan (a leaf of seed 1
  // of plan_scaling_bench took 9 s there; the second try closed it in 0.05 s). The second
  // gets half of what is left, so that the third, which decides the leaf, always runs.
  MasterLimits limits{node.lower, node.upper, &fixed_, /*preprocess=*/false,
                      /*feasibility_pump=*/false};
  constexpr double kFirstTrySeconds = 0.25;
  if (planner_.SolvePatterns(node.used_patterns, std::max(0.05, std::min(left, kFirstTrySeconds)),
                             incumbent_ - Step(), &node_counts, &node_gpus, limits) &&
      Take(node_counts, node_gpus) <= node.bound + Step()) {
    return;
  }
  limits.preprocess = true;
  if (planner_.SolvePatterns(patterns_, std::max(0.05, 0.5 * SecondsLeft()), incumbent_ - Step(),
                             &node_counts, &node_gpus, limits) &&
      Take(node_counts, node_gpus) <= node.bound + Step()) {
    return;
  }
  bool settled = false;
  if (ClosedByCovers(node, limits, node_counts, node_gpus, &settled)) return;
  // Else the whole program with these GPU counts: every cover, not only the patterns. Its
  // answer closes the node either way (a plan, or none cheaper than the incumbent).
  if (!settled && ClosedByWholeProgram(node, node_counts, node_gpus)) return;
  SplitAroundPoint(node);
}

bool Planner::GpuCountSearch::ClosedByCovers(const Node& node, const MasterLimits& limits,
                                             InstanceCounts& node_counts, ConfigCounts& node_gpus,
                                             bool* settled) {
  // Exactly: the restricted master over every cover that a plan at these counts could use and
  // still beat the best plan (by reduced costs at the leaf's relaxation), solved to
  // optimality. Either answer settles this point. (CBC on the whole program at these counts,
  // below, could neither find a plan nor prove there was none on some leaves of fleets with
  // much spare room: 500 or 800 workloads on 1,000 GPUs of plan_scaling_bench.)
  // A plan at these counts costs exactly what they cost, unless it leaves a workload out (at
  // a penalty above the whole fleet's cost, so never below a best plan that leaves none
  // out): so only covers that fit a plan of exactly that cost are needed.
  double point_cost = 0;
  for (size_t g = 0; g < groups().size(); ++g) {
    if (groups()[g].cost > 0) point_cost += groups()[g].cost * node.lower[g];
  }
  const double exact_cutoff = incumbent_ < planner_.penalty_
                                  ? std::min(incumbent_ - Step(), point_cost + Step())
                                  : incumbent_ - Step();
  PatternsByClass covers;
  constexpr size_t kMostCovers = 20000;
  if (!std::isfinite(incumbent_) || node.duals.empty() ||
      !planner_.CoversBelow(master_, node.duals, node.value, exact_cutoff, kMostCovers, fixed_,
                            &covers)) {
    return false;
  }
  Solution::Status status = Solution::Status::kFailed;
  MasterLimits exact = limits;
  exact.relative_gap = 0;
  exact.status = &status;
  if (planner_.SolvePatterns(covers, std::max(0.05, 0.5 * SecondsLeft()), exact_cutoff,
                             &node_counts, &node_gpus, exact) &&
      Take(node_counts, node_gpus) <= node.bound + Step()) {
    return true;
  }
  *settled = status == Solution::Status::kOptimal || status == Solution::Status::kInfeasible;
  return false;
}

bool Planner::GpuCountSearch::ClosedByWholeProgram(const Node& node, InstanceCounts& node_counts,
                                                   ConfigCounts& node_gpus) {
  const Solution whole =
      planner_.SolveWholeAtCounts(groups(), node.lower, node.upper, incumbent_ - Step(),
                                  std::max(0.05, SecondsLeft()), &node_counts, &node_gpus);
  if (whole.has_solution && Take(node_counts, node_gpus) <= node.bound + Step()) return true;
  if (whole.status != Solution::Status::kOptimal && whole.status != Solution::Status::kInfeasible) {
    unresolved_ = std::min(unresolved_, node.bound);
    return true;
  }
  return false;
}

void Planner::GpuCountSearch::SplitAroundPoint(const Node& node) {
  // A leaf that no plan closed rules out its point of the node's box, not the rest of it. The
  // rest is split into boxes, one side of the point in one group at a time (the groups before it
  // at the point's counts), searched as nodes.
  std::vector<int> lower = node.region_lower, upper = node.region_upper;
  for (size_t g = 0; g < groups().size(); ++g) {
    if (groups()[g].cost <= 0) continue;
    const int at = node.lower[g];
    if (lower[g] < at) {
      Node below{node.bound, lower, upper};
      below.upper[g] = at - 1;
      open_.push(std::move(below));
    }
    if (at < upper[g]) {
      Node above{node.bound, lower, upper};
      above.lower[g] = at + 1;
      open_.push(std::move(above));
    }
    lower[g] = upper[g] = at;
  }
}

bool Planner::GpuCountSearch::Expand(Node& node, double left) {
  ++stats_->nodes;
  for (size_t g = 0; g < groups().size(); ++g) {
    lp_.SetRowBounds(groups()[g].row, node.lower[g], node.upper[g]);
  }
  Solution relaxed;
  const double priced = planner_.PriceOut(master_, lp_, patterns_, left, &relaxed, &fixed_);
  double bound = std::max(node.bound, PlanFloor(priced));
  bound = std::max(bound, Reachable(bound, node.lower, node.upper));
  if (!relaxed.has_solution && bound < internal::kInfinity / 2) {
    open_.push(Node{bound, std::move(node.lower), std::move(node.upper)});
    return false;
  }
  if (stats_->nodes == 1) {
    near_root_ = bound + 0.005 * std::abs(bound);
    root_bound_ = priced;
    root_reduced_ = lp_.ReducedCosts();
    FixColumns();
  }
  if (!Improves(bound)) return true;
  std::vector<double> used;
  const int branch = BranchGroup(relaxed, &used);
  if (branch < 0) {
    QueueLeaf(node, bound, relaxed, used);
  } else {
    Branch(node, bound, static_cast<size_t>(branch), used);
  }
  return true;
}

int Planner::GpuCountSearch::BranchGroup(const Solution& relaxed, std::vector<double>* used) const {
  int branch = -1;
  double branch_score = 0;
  used->assign(groups().size(), 0);
  for (size_t g = 0; g < groups().size(); ++g) {
    for (int column : groups()[g].x_columns) {
      (*used)[g] += relaxed.values[static_cast<size_t>(column)];
    }
    const double fraction = (*used)[g] - std::floor((*used)[g]);
    const double score = groups()[g].cost * std::min(fraction, 1 - fraction);
    if (std::min(fraction, 1 - fraction) > 1e-6 && score > branch_score) {
      branch = static_cast<int>(g);
      branch_score = score;
    }
  }
  return branch;
}

void Planner::GpuCountSearch::QueueLeaf(const Node& node, double bound, const Solution& relaxed,
                                        const std::vector<double>& used) {
  const std::vector<DemandClass>& classes = planner_.classes_;
  // (GPUs that cost nothing, kept ones when re-planning, stay free within the node.)
  Node leaf{bound,      node.lower, node.upper, true, PatternsByClass(classes.size()),
            node.lower, node.upper};
  for (size_t g = 0; g < groups().size(); ++g) {
    if (groups()[g].cost > 0) {
      leaf.lower[g] = leaf.upper[g] = static_cast<int>(std::llround(used[g]));
    }
  }
  for (size_t k = 0; k < classes.size(); ++k) {
    if (!classes[k].by_throughput) continue;
    for (size_t j = 0; j < master_.columns[k].size(); ++j) {
      if (relaxed.values[static_cast<size_t>(master_.columns[k][j])] > 1e-9) {
        leaf.used_patterns[k].push_back(patterns_[k][j]);
      }
    }
  }
  leaf.duals = relaxed.duals;
  leaf.value = relaxed.objective;
  // A leaf close to the root's bound is solved at once (a good plan early prunes the most);
  // the others wait in the queue until they are the best node.
  if (bound <= near_root_) {
    plunge_ = std::move(leaf);
  } else {
    open_.push(std::move(leaf));
  }
}

void Planner::GpuCountSearch::Branch(Node& node, double bound, size_t b,
                                     const std::vector<double>& used) {
  Node down{bound, node.lower, node.upper};
  down.upper[b] = static_cast<int>(std::floor(used[b]));
  Node up{bound, std::move(node.lower), std::move(node.upper)};
  up.lower[b] = static_cast<int>(std::floor(used[b])) + 1;
  // (A child whose box reaches no cost below the best plan is pruned without its relaxation.)
  down.bound = Reachable(down.bound, down.lower, down.upper);
  up.bound = Reachable(up.bound, up.lower, up.upper);
  const bool down_first = used[b] - std::floor(used[b]) < 0.5;
  (down_first ? up : down).basis = lp_.Basis();
  open_.push(down_first ? std::move(up) : std::move(down));
  plunge_ = down_first ? std::move(down) : std::move(up);
}

double Planner::BranchOnGpuCounts(PatternsByClass& patterns, double incumbent, double granularity,
                                  double time_limit_s, InstanceCounts* counts, ConfigCounts* gpus,
                                  SearchStats* stats) const {
  GpuCountSearch search(*this, patterns, incumbent, granularity, time_limit_s, counts, gpus, stats);
  return search.Run();
}

Solution Planner::SolveWholeAtCounts(const std::vector<Master::PriceGroup>& groups,
                                     const std::vector<int>& lower, const std::vector<int>& upper,
                                     double cutoff, double time_limit_s, InstanceCounts* counts,
                                     ConfigCounts* gpus) const {
  LinearProgram program = program_;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<std::pair<int, double>> terms;
    for (size_t t : groups[g].types) {
      for (int column : types_[t].x_columns) terms.emplace_back(column, 1.0);
    }
    program.AddRow(std::move(terms), lower[g], upper[g]);
  }
  Solution solution = internal::SolveMip(program, time_limit_s, {.cutoff = cutoff});
  if (!solution.has_solution) return solution;
  auto value = [&](int column) {
    return static_cast<int>(std::llround(solution.values[static_cast<size_t>(column)]));
  };
  gpus->assign(types_.size(), {});
  for (size_t t = 0; t < types_.size(); ++t) {
    for (int column : types_[t].x_columns) (*gpus)[t].push_back(value(column));
  }
  counts->assign(classes_.size(), {});
  for (size_t k = 0; k < classes_.size(); ++k) {
    for (int column : classes_[k].y_columns) (*counts)[k].push_back(value(column));
  }
  return solution;
}

bool Planner::SolvePatterns(const PatternsByClass& patterns, double time_limit_s, double cutoff,
                            InstanceCounts* counts, ConfigCounts* gpus,
                            const MasterLimits& limits) const {
  Master master = BuildMaster(patterns);
  for (size_t g = 0; g < master.price_groups.size(); ++g) {
    const size_t row = static_cast<size_t>(master.price_groups[g].row);
    if (!limits.group_lower.empty()) master.program.row_lower_[row] = limits.group_lower[g];
    if (!limits.group_upper.empty()) master.program.row_upper_[row] = limits.group_upper[g];
  }
  if (limits.fixed != nullptr) {
    auto fix = [&](int column) { master.program.col_upper_[static_cast<size_t>(column)] = 0; };
    for (size_t t = 0; t < types_.size(); ++t) {
      for (size_t c = 0; c < master.x_columns[t].size(); ++c) {
        if (limits.fixed->configs[t][c]) fix(master.x_columns[t][c]);
      }
    }
    for (size_t k = 0; k < classes_.size(); ++k) {
      for (size_t j = 0; j < master.columns[k].size(); ++j) {
        const bool fixed = classes_[k].by_throughput
                               ? limits.fixed->patterns[k].count(patterns[k][j]) > 0
                               : limits.fixed->options[k][j] != 0;
        if (fixed) fix(master.columns[k][j]);
      }
    }
  }
  const Solution solution = internal::SolveMip(master.program, time_limit_s,
                                               {.cutoff = cutoff,
                                                .relative_gap = limits.relative_gap,
                                                .preprocess = limits.preprocess,
                                                .feasibility_pump = limits.feasibility_pump});
  if (limits.status != nullptr) *limits.status = solution.status;
  if (!solution.has_solution) return false;
  auto value = [&](int column) {
    return static_cast<int>(std::llround(solution.values[static_cast<size_t>(column)]));
  };
  gpus->assign(types_.size(), {});
  for (size_t t = 0; t < types_.size(); ++t) {
    for (int column : master.x_columns[t]) (*gpus)[t].push_back(value(column));
  }
  counts->assign(classes_.size(), {});
  for (size_t k = 0; k < classes_.size(); ++k) {
    (*counts)[k].assign(classes_[k].options.size(), 0);
    for (size_t i = 0; i < master.columns[k].size(); ++i) {
      const int v = value(master.columns[k][i]);
      if (!classes_[k].by_throughput) {
        (*counts)[k][i] = v;
      } else if (v == 1) {
        (*counts)[k] = patterns[k][i];
      }
    }
  }
  return true;
}

std::optional<ConfigCounts> Planner::PackOptimal(const InstanceCounts& counts,
                                                 double time_limit_s) const {
  LinearProgram fixed = program_;
  ConfigCounts none(types_.size());
  for (size_t t = 0; t < types_.size(); ++t) none[t].assign(types_[t].configs.size(), 0);
  const std::vector<double> values = StartVector(counts, none);
  for (const DemandClass& demand : classes_) {
    for (int column : demand.y_columns) {
      fixed.col_lower_[static_cast<size_t>(column)] = values[static_cast<size_t>(column)];
      fixed.col_upper_[static_cast<size_t>(column)] = values[static_cast<size_t>(column)];
    }
    for (int column : demand.slack_columns) {
      const size_t slack = static_cast<size_t>(column);
      fixed.col_lower_[slack] = fixed.col_upper_[slack] = values[slack];
    }
  }
  const Solution solution = internal::SolveMip(fixed, time_limit_s);
  if (!solution.has_solution) return std::nullopt;
  ConfigCounts gpus(types_.size());
  for (size_t t = 0; t < types_.size(); ++t) {
    for (int column : types_[t].x_columns) {
      gpus[t].push_back(
          static_cast<int>(std::llround(solution.values[static_cast<size_t>(column)])));
    }
  }
  return gpus;
}

bool Planner::ShiftShortfall(InstanceCounts& counts, const std::map<Slot, int>& shortfall) const {
  // GPU share missing per model. Work that can run elsewhere moves off that model, whatever its
  // profile, so that the work that can only run there gets the room; the moves that cost least
  // per share freed go first.
  std::map<const hw::GpuModel*, double> missing;
  for (const auto& [slot, count] : shortfall) {
    missing[slot.first] += count * ShareOf(*slot.first, slot.second);
  }
  std::map<const hw::GpuModel*, double> price;  // cheapest GPU of each model
  for (const GpuType& type : types_) {
    auto [it, inserted] = price.emplace(type.model, type.cost);
    if (!inserted) it->second = std::min(it->second, type.cost);
  }
  auto cost_per_capacity = [&](const SizedOption& option) {
    return ShareOf(*option.model, option.profile) * price[option.model] / option.capacity;
  };
  struct Move {
    double extra_cost_per_share;
    size_t k, from, to;
  };
  std::vector<Move> moves;
  for (size_t k = 0; k < classes_.size(); ++k) {
    const DemandClass& demand = classes_[k];
    for (size_t o = 0; o < demand.options.size(); ++o) {
      const SizedOption& option = demand.options[o];
      if (!missing.count(option.model) || counts[k][o] == 0) continue;
      int best = -1;
      for (size_t a = 0; a < demand.options.size(); ++a) {
        if (missing.count(demand.options[a].model)) continue;
        if (best < 0 || cost_per_capacity(demand.options[a]) <
                            cost_per_capacity(demand.options[static_cast<size_t>(best)])) {
          best = static_cast<int>(a);
        }
      }
      if (best < 0) continue;
      const double extra = (cost_per_capacity(demand.options[static_cast<size_t>(best)]) -
                            cost_per_capacity(option)) *
                           option.capacity / ShareOf(*option.model, option.profile);
      moves.push_back({extra, k, o, static_cast<size_t>(best)});
    }
  }
  std::stable_sort(moves.begin(), moves.end(), [](const Move& a, const Move& b) {
    return a.extra_cost_per_share < b.extra_cost_per_share;
  });
  bool moved = false;
  for (const Move& move : moves) {
    const SizedOption& option = classes_[move.k].options[move.from];
    double& share_left = missing[option.model];
    if (share_left <= kEps) continue;
    const SizedOption& alt = classes_[move.k].options[move.to];
    const double share = ShareOf(*option.model, option.profile);
    const int n =
        std::min(counts[move.k][move.from], static_cast<int>(std::ceil(share_left / share - kEps)));
    // As many instances as the capacity needs, and never fewer than the class's minimum.
    const DemandClass& demand = classes_[move.k];
    const int before = std::accumulate(counts[move.k].begin(), counts[move.k].end(), 0);
    const int added =
        std::max(static_cast<int>(std::ceil(n * option.capacity / alt.capacity - kEps)),
                 demand.by_throughput ? demand.min_instances - (before - n) : 0);
    counts[move.k][move.from] -= n;
    counts[move.k][move.to] += added;
    share_left -= n * share;
    moved = true;
  }
  return moved;
}

double Planner::CostOf(const ConfigCounts& gpus) const {
  double cost = 0;
  for (size_t t = 0; t < types_.size(); ++t) {
    for (int copies : gpus[t]) cost += copies * types_[t].cost;
  }
  return cost;
}

double Planner::Objective(const InstanceCounts& counts, const ConfigCounts& gpus) const {
  // Instances the GPUs cannot hold make it no plan at all.
  std::map<Slot, int> room;
  for (size_t t = 0; t < types_.size(); ++t) {
    for (size_t i = 0; i < types_[t].configs.size(); ++i) {
      for (const auto& [profile, count] : types_[t].configs[i].counts) {
        room[{types_[t].model, profile}] += count * gpus[t][i];
      }
    }
  }
  for (size_t k = 0; k < classes_.size(); ++k) {
    for (size_t o = 0; o < classes_[k].options.size(); ++o) {
      const SizedOption& option = classes_[k].options[o];
      if ((room[{option.model, option.profile}] -= counts[k][o]) < 0) {
        return std::numeric_limits<double>::infinity();
      }
    }
  }
  const std::vector<double> values = StartVector(counts, gpus);
  double objective = 0;
  for (size_t c = 0; c < values.size(); ++c) objective += values[c] * program_.cost_[c];
  return objective;
}

std::vector<double> Planner::StartVector(const InstanceCounts& counts,
                                         const ConfigCounts& gpus) const {
  std::vector<double> start(static_cast<size_t>(program_.columns()), 0.0);
  for (size_t t = 0; t < types_.size(); ++t) {
    for (size_t i = 0; i < types_[t].configs.size(); ++i) {
      start[static_cast<size_t>(types_[t].x_columns[i])] = gpus[t][i];
    }
  }
  for (size_t k = 0; k < classes_.size(); ++k) {
    const DemandClass& demand = classes_[k];
    double covered = 0;
    for (size_t o = 0; o < demand.options.size(); ++o) {
      start[static_cast<size_t>(demand.y_columns[o])] = counts[k][o];
      covered += counts[k][o] * demand.options[o].capacity;
    }
    const int instances = std::accumulate(counts[k].begin(), counts[k].end(), 0);
    if (demand.by_throughput) {
      // Short, or too few instances: the workload is left out as surely either way.
      if (covered + kEps < demand.demand || instances < demand.min_instances) {
        start[static_cast<size_t>(demand.slack_columns[0])] = 1;
      }
      continue;
    }
    if (!per_workload_penalty_) {
      if (covered + kEps < demand.demand) {
        start[static_cast<size_t>(demand.slack_columns[0])] =
            std::ceil(demand.demand - covered - kEps);
      }
      continue;
    }
    // A replica class short of instances leaves out its fewest workloads: the largest first.
    std::vector<size_t> largest(demand.shares.size());
    std::iota(largest.begin(), largest.end(), 0);
    std::stable_sort(largest.begin(), largest.end(),
                     [&](size_t a, size_t b) { return demand.shares[a] > demand.shares[b]; });
    double short_by = demand.demand - covered;
    for (size_t i : largest) {
      if (short_by <= kEps) break;
      start[static_cast<size_t>(demand.slack_columns[i])] = 1;
      short_by -= demand.shares[i];
    }
  }
  return start;
}

void Planner::PlaceKept(std::vector<double>& covered, std::vector<int>& instances) {
  if (pinned_ == nullptr) return;
  for (size_t g = 0; g < pinned_->size() && g < result_.gpus.size(); ++g) {
    for (PlannedInstance instance : (*pinned_)[g]) {
      instance.kept = true;
      result_.gpus[g].instances.push_back(instance);
      result_.gpus[g].mig_enabled |= instance.profile != kWholeGpu;
      covered[static_cast<size_t>(instance.workload)] += instance.capacity;
      ++instances[static_cast<size_t>(instance.workload)];
    }
  }
}

FreeSlots Planner::LayOutGpus(const ConfigCounts& gpus) {
  FreeSlots slots;
  for (size_t t = 0; t < types_.size(); ++t) {
    const GpuType& type = types_[t];
    size_t next = 0;
    for (size_t i = 0; i < type.configs.size(); ++i) {
      const Config& config = type.configs[i];
      for (int copy = 0; copy < gpus[t][i] && next < type.gpus.size(); ++copy) {
        const int g = type.gpus[next];
        PlannedGpu& gpu = result_.gpus[static_cast<size_t>(g)];
        std::map<int, int> rank;
        const size_t first_new = gpu.instances.size();
        if (config.whole) {
          gpu.instances.push_back(PlannedInstance{kWholeGpu, 0, -1, 0, 0});
        } else {
          gpu.mig_enabled = true;
          for (const geometry::Placed& placed : config.layout) {
            if (std::binary_search(type.pinned_layout.begin(), type.pinned_layout.end(), placed)) {
              continue;  // kept already
            }
            gpu.instances.push_back(PlannedInstance{placed.profile, placed.start, -1, 0, 0});
          }
        }
        for (size_t s = first_new; s < gpu.instances.size(); ++s) {
          const int profile = gpu.instances[s].profile;
          slots[{type.model, profile}].emplace_back(rank[profile]++, static_cast<int>(next), g,
                                                    static_cast<int>(s));
        }
        ++next;
      }
    }
  }
  for (auto& [slot, list] : slots) std::sort(list.begin(), list.end());
  return slots;
}

void Planner::AssignInstances(const InstanceCounts& counts, FreeSlots& slots,
                              std::vector<double>& covered, std::vector<int>& instances) {
  std::map<Slot, size_t> taken;
  for (size_t k = 0; k < classes_.size(); ++k) {
    const DemandClass& demand = classes_[k];
    // The class's instances in slot order, then handed to its workloads in turn.
    ClassInstances got;
    for (size_t o = 0; o < demand.options.size(); ++o) {
      const SizedOption& option = demand.options[o];
      const Slot slot{option.model, option.profile};
      auto& list = slots[slot];
      size_t& cursor = taken[slot];
      for (int i = 0; i < counts[k][o] && cursor < list.size(); ++i, ++cursor) {
        got.push_back({{std::get<2>(list[cursor]), std::get<3>(list[cursor])}, o});
      }
    }
    if (demand.by_throughput) {
      AssignThroughput(demand, got, covered, instances);
    } else {
      AssignReplicas(demand, got, covered, instances);
    }
  }
}

void Planner::AssignThroughput(const DemandClass& demand, const ClassInstances& got,
                               std::vector<double>& covered, std::vector<int>& instances) {
  const int w = demand.workloads.front();
  for (const auto& [where, o] : got) {
    PlannedInstance& instance =
        result_.gpus[static_cast<size_t>(where.first)].instances[static_cast<size_t>(where.second)];
    instance.workload = w;
    instance.capacity = demand.options[o].capacity;
    instance.batch = demand.options[o].batch;
    covered[static_cast<size_t>(w)] += instance.capacity;
    ++instances[static_cast<size_t>(w)];
  }
}

void Planner::AssignReplicas(const DemandClass& demand, const ClassInstances& got,
                             std::vector<double>& covered, std::vector<int>& instances) {
  // As many workloads as the instances hold (the smallest first, as the program leaves out the
  // fewest; the rest are left unplaced later), each taking its replicas in turn so that they
  // stay spread.
  auto wanted_by = [&](int w) {
    return static_cast<size_t>(std::llround(remaining_[static_cast<size_t>(w)]));
  };
  std::vector<int> smallest = demand.workloads;
  std::stable_sort(smallest.begin(), smallest.end(),
                   [&](int a, int b) { return wanted_by(a) < wanted_by(b); });
  std::set<int> placed;
  size_t room = got.size();
  for (int w : smallest) {
    if (wanted_by(w) > room) break;
    room -= wanted_by(w);
    placed.insert(w);
  }
  size_t cursor = 0;
  for (int w : demand.workloads) {
    if (placed.count(w) == 0) continue;
    const int wanted = static_cast<int>(wanted_by(w));
    for (int i = 0; i < wanted; ++i, ++cursor) {
      const auto& [where, o] = got[cursor];
      PlannedInstance& instance = result_.gpus[static_cast<size_t>(where.first)]
                                      .instances[static_cast<size_t>(where.second)];
      instance.workload = w;
      instance.capacity = 1;
      covered[static_cast<size_t>(w)] += 1;
      ++instances[static_cast<size_t>(w)];
    }
  }
}

void Planner::DropShortWorkloads(const std::vector<double>& covered,
                                 const std::vector<int>& instances) {
  std::set<int> short_workloads;
  for (const DemandClass& demand : classes_) {
    for (int w : demand.workloads) {
      const WorkloadSizing& sizing = result_.sizing[static_cast<size_t>(w)];
      if (covered[static_cast<size_t>(w)] + kEps < sizing.demand ||
          instances[static_cast<size_t>(w)] < sizing.min_instances) {
        short_workloads.insert(w);
        short_of_room_ = true;
        result_.unplaced.emplace_back(
            w, "the fleet has too little room for it (every GPU it can use is taken)");
      }
    }
  }
  // Drop spares and short workloads' instances.
  for (PlannedGpu& gpu : result_.gpus) {
    std::erase_if(gpu.instances, [&](const PlannedInstance& instance) {
      return instance.workload < 0 || short_workloads.count(instance.workload) > 0;
    });
  }
}

void Planner::FinishGpus() {
  for (PlannedGpu& gpu : result_.gpus) {
    std::sort(gpu.instances.begin(), gpu.instances.end(),
              [](const PlannedInstance& a, const PlannedInstance& b) { return a.start < b.start; });
    gpu.used = !gpu.instances.empty();
    if (!gpu.used) gpu.mig_enabled = false;
    if (gpu.used) {
      ++result_.gpus_used;
      result_.cost_per_hour += gpu.cost_per_hour;
    }
  }
  std::sort(result_.unplaced.begin(), result_.unplaced.end());
}

void Planner::Materialise(const InstanceCounts& counts, const ConfigCounts& gpus) {
  std::vector<double> covered(workloads_.workloads.size(), 0);
  std::vector<int> instances(workloads_.workloads.size(), 0);
  PlaceKept(covered, instances);
  FreeSlots slots = LayOutGpus(gpus);
  AssignInstances(counts, slots, covered, instances);
  CompleteShort(covered, instances);
  TrimSurplus(covered, instances);
  DropShortWorkloads(covered, instances);
  Consolidate();
  FinishGpus();
}

void Planner::CompleteShort(std::vector<double>& covered, std::vector<int>& instances) {
  std::map<const hw::GpuModel*, geometry::Shape> shapes;
  auto shape_of = [&](const hw::GpuModel* model) -> const geometry::Shape& {
    return shapes.try_emplace(model, *model).first->second;
  };
  auto occupancy_of = [&](const PlannedGpu& gpu) {
    geometry::Occupancy occupancy;
    for (const PlannedInstance& instance : gpu.instances) {
      shape_of(gpu.model).Add(occupancy, instance.profile, instance.start);
    }
    return occupancy;
  };
  for (const DemandClass& demand : classes_) {
    for (int w : demand.workloads) {
      const WorkloadSizing& sizing = result_.sizing[static_cast<size_t>(w)];
      auto is_short = [&] {
        return covered[static_cast<size_t>(w)] + kEps < sizing.demand ||
               instances[static_cast<size_t>(w)] < sizing.min_instances;
      };
      while (is_short()) {
        bool placed = false;
        for (const SizedOption& option : sizing.options) {
          const bool whole = option.profile == kWholeGpu;
          PlannedGpu* target = nullptr;
          int slot = -1;
          int start = 0;
          // A spare slot, then room on a used MIG GPU, then the cheapest unused GPU.
          for (PlannedGpu& gpu : result_.gpus) {
            if (gpu.model != option.model) continue;
            for (size_t i = 0; i < gpu.instances.size() && target == nullptr; ++i) {
              if (gpu.instances[i].workload < 0 && gpu.instances[i].profile == option.profile) {
                target = &gpu;
                slot = static_cast<int>(i);
              }
            }
            if (target != nullptr) break;
          }
          if (target == nullptr && !whole) {
            for (PlannedGpu& gpu : result_.gpus) {
              if (gpu.model != option.model || !gpu.mig_enabled || gpu.instances.empty()) continue;
              const int at = shape_of(gpu.model).DefaultStart(occupancy_of(gpu), option.profile);
              if (at >= 0) {
                target = &gpu;
                start = at;
                break;
              }
            }
          }
          if (target == nullptr) {
            for (PlannedGpu& gpu : result_.gpus) {
              if (gpu.model != option.model || !gpu.instances.empty()) continue;
              if (!whole && !gpu.mig_allowed) continue;
              if (target == nullptr || gpu.cost_per_hour < target->cost_per_hour) target = &gpu;
            }
            if (target != nullptr && !whole) {
              start = shape_of(target->model).DefaultStart(geometry::Occupancy{}, option.profile);
              if (start < 0) target = nullptr;
            }
          }
          if (target == nullptr) continue;
          if (slot < 0) {
            target->instances.push_back(
                PlannedInstance{option.profile, whole ? 0 : start, -1, 0, 0});
            target->mig_enabled = !whole;
            slot = static_cast<int>(target->instances.size()) - 1;
          }
          PlannedInstance& instance = target->instances[static_cast<size_t>(slot)];
          instance.workload = w;
          instance.capacity = option.capacity;
          instance.batch = option.batch;
          covered[static_cast<size_t>(w)] += option.capacity;
          ++instances[static_cast<size_t>(w)];
          placed = true;
          break;
        }
        if (!placed) break;
      }
    }
  }
}

void Planner::TrimSurplus(std::vector<double>& covered, std::vector<int>& instances) {
  for (size_t w = 0; w < workloads_.workloads.size(); ++w) {
    const WorkloadSizing& sizing = result_.sizing[w];
    if (!sizing.by_throughput || instances[w] == 0) continue;
    for (bool dropped = true; dropped;) {
      dropped = false;
      PlannedInstance* drop = nullptr;
      const hw::GpuModel* model = nullptr;
      for (PlannedGpu& gpu : result_.gpus) {
        for (PlannedInstance& instance : gpu.instances) {
          if (instance.workload != static_cast<int>(w) || instance.kept) continue;
          if (covered[w] - instance.capacity + kEps < sizing.demand) continue;
          if (instances[w] - 1 < sizing.min_instances) continue;
          if (drop == nullptr ||
              ShareOf(*gpu.model, instance.profile) > ShareOf(*model, drop->profile)) {
            drop = &instance;
            model = gpu.model;
          }
        }
      }
      if (drop != nullptr) {
        covered[w] -= drop->capacity;
        --instances[w];
        drop->workload = -1;  // a spare: dropped with the others
        dropped = true;
      }
    }
  }
}

void Planner::Consolidate() {
  // Used MIG GPUs by model, each with its occupancy.
  std::map<const hw::GpuModel*, std::vector<int>> by_model;
  std::vector<geometry::Occupancy> occupancy(result_.gpus.size());
  std::map<const hw::GpuModel*, geometry::Shape> shapes;
  for (size_t g = 0; g < result_.gpus.size(); ++g) {
    const PlannedGpu& gpu = result_.gpus[g];
    if (!gpu.mig_enabled || gpu.instances.empty()) continue;
    auto it = shapes.try_emplace(gpu.model, *gpu.model).first;
    for (const PlannedInstance& instance : gpu.instances) {
      it->second.Add(occupancy[g], instance.profile, instance.start);
    }
    by_model[gpu.model].push_back(static_cast<int>(g));
  }
  auto used_slices = [&](int g) {
    int slices = 0;
    for (const PlannedInstance& instance : result_.gpus[static_cast<size_t>(g)].instances) {
      slices += SlicesOf(*result_.gpus[static_cast<size_t>(g)].model, instance.profile);
    }
    return slices;
  };
  constexpr size_t kMaxSources = 256;
  for (auto& [model, gpus] : by_model) {
    const geometry::Shape& shape = shapes.at(model);
    std::vector<int> sources = gpus;
    std::stable_sort(sources.begin(), sources.end(),
                     [&](int a, int b) { return used_slices(a) < used_slices(b); });
    if (sources.size() > kMaxSources) sources.resize(kMaxSources);
    for (int source : sources) {
      PlannedGpu& from = result_.gpus[static_cast<size_t>(source)];
      if (from.instances.empty()) continue;
      if (std::any_of(from.instances.begin(), from.instances.end(),
                      [](const PlannedInstance& instance) { return instance.kept; })) {
        continue;  // moving a running instance would stop it
      }
      // Tentatively move every instance to another GPU with room, keeping replicas apart.
      std::vector<std::pair<int, PlannedInstance>> moves;
      std::map<int, geometry::Occupancy> trial;
      bool all_moved = true;
      for (const PlannedInstance& instance : from.instances) {
        bool moved = false;
        for (int target : gpus) {
          if (target == source || result_.gpus[static_cast<size_t>(target)].instances.empty()) {
            continue;
          }
          auto [slot, inserted] = trial.try_emplace(target, occupancy[static_cast<size_t>(target)]);
          if (occupancy[static_cast<size_t>(target)].used == shape.all_units()) continue;
          const int start = shape.DefaultStart(slot->second, instance.profile);
          if (start < 0) continue;
          bool same_workload = false;
          for (const PlannedInstance& there : result_.gpus[static_cast<size_t>(target)].instances) {
            same_workload |= there.workload == instance.workload;
          }
          for (const auto& [where, planned] : moves) {
            same_workload |= where == target && planned.workload == instance.workload;
          }
          if (same_workload &&
              workloads_.workloads[static_cast<size_t>(instance.workload)].spread) {
            continue;
          }
          shape.Add(slot->second, instance.profile, start);
          PlannedInstance placed = instance;
          placed.start = start;
          moves.emplace_back(target, placed);
          moved = true;
          break;
        }
        if (!moved) {
          all_moved = false;
          break;
        }
      }
      if (!all_moved) continue;
      for (auto& [target, placed] : moves) {
        result_.gpus[static_cast<size_t>(target)].instances.push_back(placed);
      }
      for (auto& [target, occ] : trial) occupancy[static_cast<size_t>(target)] = occ;
      from.instances.clear();
      occupancy[static_cast<size_t>(source)] = geometry::Occupancy{};
    }
  }
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

absl::StatusOr<PlanResult> Plan(const WorkloadSet& workloads, const Fleet& fleet,
                                const hw::Catalog& catalog, const PlanOptions& options) {
  return PlanLeavingOutFewest(workloads, fleet, catalog, options, nullptr);
}

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

namespace internal {

long long LeastReachableSum(const std::vector<long long>& costs, const std::vector<int>& lower,
                            const std::vector<int>& upper, long long target, long node_limit) {
  const size_t n = costs.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<long long> least_rest(n + 1, 0), most_rest(n + 1, 0);
  for (size_t i = n; i-- > 0;) {
    const size_t g = order[i];
    least_rest[i] = least_rest[i + 1] + costs[g] * lower[g];
    most_rest[i] = most_rest[i + 1] + costs[g] * upper[g];
  }
  if (most_rest[0] < target) return most_rest[0] + 1;  // nothing reaches it
  long long best = std::numeric_limits<long long>::max();
  long nodes = 0;
  auto visit = [&](auto&& self, size_t i, long long partial) -> void {
    if (best == target || ++nodes > node_limit) return;
    if (partial + least_rest[i] >= target) {
      best = std::min(best, partial + least_rest[i]);
      return;
    }
    if (partial + most_rest[i] < target || partial + least_rest[i] >= best) return;
    const size_t g = order[i];
    // The fewest of this group with which the rest can still reach the target, upwards.
    const long long short_by = target - partial - most_rest[i + 1];
    long long from = lower[g];
    if (short_by > 0) from = std::max(from, (short_by + costs[g] - 1) / costs[g]);
    for (long long k = from; k <= upper[g]; ++k) {
      if (partial + costs[g] * k + least_rest[i + 1] >= best) break;
      self(self, i + 1, partial + costs[g] * k);
      if (best == target || nodes > node_limit) return;
    }
  };
  visit(visit, 0, 0);
  return nodes > node_limit ? target : best;
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

}  // namespace gpuslice::plan
