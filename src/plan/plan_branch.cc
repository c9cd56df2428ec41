// The exact search: branch and price on the number of GPUs of each price, with its leaves closed
// by the restricted master over the covers that reduced costs allow, or by the whole program.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <queue>
#include <vector>

#include "planner.h"
#include "planner_detail.h"
#include "solver.h"

namespace gpuslice::plan::internal {

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

}  // namespace gpuslice::plan::internal
