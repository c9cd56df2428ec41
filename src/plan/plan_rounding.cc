// Rounding the relaxation and packing greedily (the first plan), a plan's value in the program,
// and the restricted master over a few integer covers per throughput class with its column
// generation (Dantzig-Wolfe).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <vector>

#include "planner_detail.h"
#include "solver.h"

namespace gpuslice::plan::internal {
namespace {

// The demand `values` leave out of class `demand` (whole units of its slacks).
double LeftOut(const DemandClass& demand, const std::vector<double>& values) {
  double left = 0;
  for (size_t i = 0; i < demand.slack_columns.size(); ++i) {
    left += demand.slack_weights[i] *
            std::floor(values[static_cast<size_t>(demand.slack_columns[i])] + 1e-6);
  }
  return left;
}

}  // namespace

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

}  // namespace gpuslice::plan::internal
