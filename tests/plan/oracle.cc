// The planner's independent oracle (oracle.h). Nothing here calls into src/plan/ or
// src/geometry/: sizing, placement rules, configuration enumeration and the integer program are
// written out again from docs/PLANNING.md and ../shared/reference/mig-facts.md.
#include "oracle.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "coin/Cbc_C_Interface.h"

namespace gpuslice::plan::oracle {
namespace {

constexpr double kCostTolerance = 1e-6;

double Gib(std::int64_t mib) { return static_cast<double>(mib) / 1024.0; }

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Whether a perf row's profile name ("1g.20gb", optionally "MIG 1g.20gb", any case) names `gi`.
bool NameMatches(const hw::GiProfile& gi, std::string_view name) {
  std::string wanted = Lower(name);
  if (wanted.rfind("mig ", 0) == 0) wanted = wanted.substr(4);
  if (Lower(gi.name) == wanted) return true;
  for (const std::string& alias : gi.aliases) {
    if (Lower(alias) == wanted) return true;
  }
  return false;
}

// The profile a row measured on "g compute slices" stands for: the standard (no media suffix)
// profile with g compute slices and the least memory (1g.10gb, not 1g.20gb), or -1.
int BaseProfileWithSlices(const hw::MigSpec& mig, int slices) {
  int best = -1;
  for (size_t p = 0; p < mig.profiles.size(); ++p) {
    const hw::GiProfile& gi = mig.profiles[p];
    if (gi.variant != hw::MediaVariant::kStandard || gi.compute_slices != slices) continue;
    if (best < 0 || gi.memory_mib < mig.profiles[static_cast<size_t>(best)].memory_mib) {
      best = static_cast<int>(p);
    }
  }
  return best;
}

// The full-size instance: the standard profile with the most compute slices (least memory
// among those), whose row stands in for the whole GPU when the table has none.
int FullSizeProfile(const hw::MigSpec& mig) {
  int most = 0;
  for (const hw::GiProfile& gi : mig.profiles) {
    if (gi.variant == hw::MediaVariant::kStandard) most = std::max(most, gi.compute_slices);
  }
  return most > 0 ? BaseProfileWithSlices(mig, most) : -1;
}

bool RowIsFor(const PerfPoint& point, const hw::GpuModel& model, int profile) {
  if (profile == kWhole) return point.compute_slices == 0 && point.profile.empty();
  const hw::GiProfile& gi = model.mig->profiles[static_cast<size_t>(profile)];
  if (!point.profile.empty()) return NameMatches(gi, point.profile);
  return point.compute_slices == gi.compute_slices &&
         BaseProfileWithSlices(*model.mig, gi.compute_slices) == profile;
}

// The most throughput of a measured operating point on this instance that meets the latency SLO
// (wait factor x batch latency within (1 - margin) x p99), if any.
std::optional<double> BestThroughput(const Workload& workload, const hw::GpuModel& model,
                                     int profile, const SizingPolicy& policy) {
  std::optional<double> best;
  for (const PerfTable& table : workload.perf) {
    if (table.gpu_model != model.id) continue;
    for (const PerfPoint& point : table.points) {
      if (point.throughput_rps <= 0) continue;
      if (point.processes > 1 && !policy.allow_multi_process) continue;
      if (!RowIsFor(point, model, profile)) continue;
      if (workload.latency_p99_ms > 0 && !(point.latency_ms * policy.latency_wait_factor <=
                                           workload.latency_p99_ms * (1 - policy.latency_margin))) {
        continue;
      }
      if (!best || point.throughput_rps > *best) best = point.throughput_rps;
    }
  }
  return best;
}

bool HasEngines(const hw::GiProfile& gi, const MediaNeed& need) {
  return gi.engines.decoder >= need.decoders && gi.engines.jpeg >= need.jpeg &&
         gi.engines.ofa >= need.ofa && gi.engines.encoder >= need.encoders;
}

// The fleet's distinct known models, in fleet order.
std::vector<const hw::GpuModel*> FleetModels(const Fleet& fleet, const hw::Catalog& catalog) {
  std::vector<const hw::GpuModel*> models;
  for (const Node& node : fleet.nodes) {
    for (const GpuGroup& group : node.gpus) {
      const hw::GpuModel* model = catalog.Find(group.model);
      if (model != nullptr && group.count > 0 &&
          std::find(models.begin(), models.end(), model) == models.end()) {
        models.push_back(model);
      }
    }
  }
  return models;
}

bool AnyMigGpu(const Fleet& fleet, const hw::Catalog& catalog, const hw::GpuModel* model) {
  if (!model->mig_capable()) return false;
  for (const Node& node : fleet.nodes) {
    for (const GpuGroup& group : node.gpus) {
      if (group.count > 0 && group.mig_allowed && catalog.Find(group.model) == model) return true;
    }
  }
  return false;
}

Need SizeOne(const Workload& workload, const std::vector<const hw::GpuModel*>& models,
             const Fleet& fleet, const hw::Catalog& catalog, const SizingPolicy& policy) {
  Need need;
  need.by_throughput = workload.throughput_rps > 0;
  need.min_instances = std::max(workload.min_instances, 1);
  need.demand = need.by_throughput
                    ? workload.throughput_rps
                    : static_cast<double>(std::max({workload.replicas, 1, need.min_instances}));
  const double headroom =
      workload.kind == WorkloadKind::kFineTune ? policy.fine_tune_headroom : policy.memory_headroom;
  const double memory_needed =
      workload.peak_memory_gib > 0 ? workload.peak_memory_gib * (1 + headroom) : 0;
  const int min_slices = workload.kind == WorkloadKind::kFineTune && !workload.measured
                             ? policy.fine_tune_min_compute_slices
                             : 0;
  const int max_slices =
      workload.kind == WorkloadKind::kNotebook ? policy.notebook_max_compute_slices : INT_MAX;
  auto holds = [&](double gib) { return memory_needed <= 0 || gib + 1e-9 >= memory_needed; };

  for (const hw::GpuModel* model : models) {
    if (!workload.gpu_models.empty() &&
        std::find(workload.gpu_models.begin(), workload.gpu_models.end(), model->id) ==
            workload.gpu_models.end()) {
      continue;
    }
    if (AnyMigGpu(fleet, catalog, model)) {
      for (size_t p = 0; p < model->mig->profiles.size(); ++p) {
        const hw::GiProfile& gi = model->mig->profiles[p];
        const bool proposed = gi.variant == hw::MediaVariant::kStandard ||
                              (gi.variant == hw::MediaVariant::kMe && workload.media.Any());
        if (!proposed || !HasEngines(gi, workload.media)) continue;
        if (gi.compute_slices < min_slices || gi.compute_slices > max_slices) continue;
        if (!holds(Gib(gi.memory_mib))) continue;
        Option option{model, static_cast<int>(p), 1};
        if (need.by_throughput) {
          const std::optional<double> rate =
              BestThroughput(workload, *model, static_cast<int>(p), policy);
          if (!rate) continue;
          option.capacity = *rate;
        }
        need.options.push_back(option);
      }
    }
    // The whole GPU: never a MIG-capable card for a notebook.
    if (workload.kind == WorkloadKind::kNotebook && model->mig_capable()) continue;
    if (!holds(Gib(model->memory_mib))) continue;
    Option option{model, kWhole, 1};
    if (need.by_throughput) {
      std::optional<double> rate = BestThroughput(workload, *model, kWhole, policy);
      if (!rate && model->mig_capable()) {
        const int full = FullSizeProfile(*model->mig);
        if (full >= 0) rate = BestThroughput(workload, *model, full, policy);
      }
      if (!rate) continue;
      option.capacity = *rate;
    }
    need.options.push_back(option);
  }
  return need;
}

// ---------------------------------------------------------------------------- placement rules

// The JPEG and OFA engines of the GPU: what its full-GPU profile (a standard profile covering
// every placement unit) has.
std::pair<int, int> EngineTotals(const hw::MigSpec& mig) {
  int jpeg = -1, ofa = -1;
  for (const hw::GiProfile& gi : mig.profiles) {
    if (gi.variant == hw::MediaVariant::kStandard && gi.placement_size == mig.placement_units) {
      jpeg = std::max(jpeg, gi.engines.jpeg);
      ofa = std::max(ofa, gi.engines.ofa);
    }
  }
  if (jpeg < 0) {  // no full-GPU profile: the most any profile has
    for (const hw::GiProfile& gi : mig.profiles) {
      jpeg = std::max(jpeg, gi.engines.jpeg);
      ofa = std::max(ofa, gi.engines.ofa);
    }
  }
  return {jpeg, ofa};
}

// What is on one GPU so far, and the rules for adding one more instance.
class Gpu {
 public:
  explicit Gpu(const hw::GpuModel& model)
      : mig_(*model.mig), counts_(model.mig->profiles.size(), 0) {
    std::tie(jpeg_total_, ofa_total_) = EngineTotals(mig_);
    units_.assign(static_cast<size_t>(mig_.placement_units), false);
  }

  // Why `profile` at `start` cannot be added, or "".
  std::string WhyNot(int profile, int start) const {
    if (profile < 0 || static_cast<size_t>(profile) >= mig_.profiles.size()) {
      return "profile index " + std::to_string(profile) + " is not a profile of this GPU";
    }
    const hw::GiProfile& gi = mig_.profiles[static_cast<size_t>(profile)];
    if (std::find(gi.starts.begin(), gi.starts.end(), start) == gi.starts.end() ||
        start + gi.placement_size > mig_.placement_units) {
      return gi.name + " cannot start at " + std::to_string(start);
    }
    for (int u = start; u < start + gi.placement_size; ++u) {
      if (units_[static_cast<size_t>(u)]) {
        return gi.name + "@" + std::to_string(start) + " overlaps unit " + std::to_string(u);
      }
    }
    if (counts_[static_cast<size_t>(profile)] + 1 > gi.max_instances) {
      return "more than " + std::to_string(gi.max_instances) + " " + gi.name;
    }
    if (jpeg_ + gi.engines.jpeg > jpeg_total_) return "JPEG engines over-committed";
    if (ofa_ + gi.engines.ofa > ofa_total_) return "OFA engines over-committed";
    if (slices_ + gi.compute_slices > mig_.compute_slices) return "compute slices over-committed";
    const bool all_me = gi.variant == hw::MediaVariant::kMeAll;
    if ((all_me && instances_ > no_me_) || (all_me_ > 0 && gi.variant != hw::MediaVariant::kNoMe)) {
      return "a +me.all instance beside one that is not -me";
    }
    return "";
  }

  void Add(int profile, int start, int sign = 1) {
    const hw::GiProfile& gi = mig_.profiles[static_cast<size_t>(profile)];
    for (int u = start; u < start + gi.placement_size; ++u)
      units_[static_cast<size_t>(u)] = sign > 0;
    counts_[static_cast<size_t>(profile)] += sign;
    jpeg_ += sign * gi.engines.jpeg;
    ofa_ += sign * gi.engines.ofa;
    slices_ += sign * gi.compute_slices;
    instances_ += sign;
    if (gi.variant == hw::MediaVariant::kMeAll) all_me_ += sign;
    if (gi.variant == hw::MediaVariant::kNoMe) no_me_ += sign;
  }
  void Remove(int profile, int start) { Add(profile, start, -1); }

  const std::vector<int>& counts() const { return counts_; }
  int instances() const { return instances_; }

 private:
  const hw::MigSpec& mig_;
  std::vector<int> counts_;
  std::vector<bool> units_;
  int jpeg_total_ = 0, ofa_total_ = 0;
  int jpeg_ = 0, ofa_ = 0, slices_ = 0, instances_ = 0, all_me_ = 0, no_me_ = 0;
};

// Enumerate() is called with the same arguments many times by the tests; its answers are kept.
const Configurations& CachedEnumerate(const hw::GpuModel& model, const std::vector<int>& profiles) {
  static std::map<std::pair<const hw::GpuModel*, std::vector<int>>, Configurations> cache;
  auto it = cache.find({&model, profiles});
  if (it == cache.end())
    it = cache.emplace(std::make_pair(&model, profiles), Enumerate(model, profiles)).first;
  return it->second;
}

// ------------------------------------------------------------------------------ the fleet

// GPUs of one model, MIG permission and price (interchangeable), with what they may hold.
struct Type {
  const hw::GpuModel* model = nullptr;
  bool mig = false;  // MIG may be enabled (allowed, and the model has MIG)
  double cost = 0;
  int count = 0;
  // Configurations: counts per profile index, and whether it is the whole GPU.
  std::vector<std::vector<int>> configs;
  std::vector<bool> whole;
};

// A kind of instance: (model, profile or kWhole).
using Kind = std::pair<const hw::GpuModel*, int>;

struct Problem {
  std::vector<Need> needs;  // the satisfiable ones only
  std::vector<Type> types;
};

// The fleet's types, each with the configurations the needs can use: every feasible multiset
// (`maximal_only`: those not inside a larger one) of the profiles some need may use on its
// model, and the whole GPU when some need may use that.
Problem BuildProblem(const WorkloadSet& workloads, const Fleet& fleet, const hw::Catalog& catalog,
                     bool maximal_only) {
  Problem problem;
  for (Need& need : Size(workloads, fleet, catalog)) {
    if (!need.options.empty()) problem.needs.push_back(std::move(need));
  }
  std::map<const hw::GpuModel*, std::set<int>> used;
  for (const Need& need : problem.needs) {
    for (const Option& option : need.options) used[option.model].insert(option.profile);
  }
  for (const Node& node : fleet.nodes) {
    for (const GpuGroup& group : node.gpus) {
      const hw::GpuModel* model = catalog.Find(group.model);
      if (model == nullptr || group.count <= 0) continue;
      const bool mig = group.mig_allowed && model->mig_capable();
      auto same = [&](const Type& type) {
        return type.model == model && type.mig == mig && type.cost == group.cost_per_hour;
      };
      auto it = std::find_if(problem.types.begin(), problem.types.end(), same);
      if (it != problem.types.end()) {
        it->count += group.count;
        continue;
      }
      Type type;
      type.model = model;
      type.mig = mig;
      type.cost = group.cost_per_hour;
      type.count = group.count;
      const std::set<int>& profiles = used[model];
      if (profiles.count(kWhole) > 0) {
        type.configs.emplace_back();
        type.whole.push_back(true);
      }
      std::vector<int> mig_profiles;
      for (int p : profiles) {
        if (p != kWhole) mig_profiles.push_back(p);
      }
      if (mig && !mig_profiles.empty()) {
        const Configurations& all = CachedEnumerate(*model, mig_profiles);
        for (const std::vector<int>& counts : maximal_only ? all.maximal : all.feasible) {
          type.configs.push_back(counts);
          type.whole.push_back(false);
        }
      }
      problem.types.push_back(std::move(type));
    }
  }
  return problem;
}

// How many instances of `kind` configuration c of `type` holds.
int Holds(const Type& type, size_t c, const Kind& kind) {
  if (kind.first != type.model) return 0;
  if (type.whole[c]) return kind.second == kWhole ? 1 : 0;
  return kind.second == kWhole ? 0 : type.configs[c][static_cast<size_t>(kind.second)];
}

std::string ConfigText(const Type& type, size_t c) {
  if (type.whole[c]) return "whole";
  std::string text;
  for (size_t p = 0; p < type.configs[c].size(); ++p) {
    if (type.configs[c][p] == 0) continue;
    if (!text.empty()) text += "+";
    if (type.configs[c][p] > 1) text += std::to_string(type.configs[c][p]) + "x";
    text += type.model->mig->profiles[p].name;
  }
  return text;
}

std::string TypeText(const Type& type) {
  std::ostringstream out;
  out << type.model->id << (type.mig ? "" : " (whole only)") << " at " << type.cost;
  return out.str();
}

}  // namespace

// --------------------------------------------------------------------------------- sizing

std::vector<Need> Size(const WorkloadSet& workloads, const Fleet& fleet,
                       const hw::Catalog& catalog) {
  const std::vector<const hw::GpuModel*> models = FleetModels(fleet, catalog);
  std::vector<Need> needs;
  for (const Workload& workload : workloads.workloads) {
    needs.push_back(SizeOne(workload, models, fleet, catalog, workloads.policy));
  }
  return needs;
}

// ------------------------------------------------------------------------------ placement

std::string LayoutProblem(const hw::GpuModel& model, const std::vector<Instance>& layout) {
  Gpu gpu(model);
  for (const Instance& instance : layout) {
    const std::string why = gpu.WhyNot(instance.profile, instance.start);
    if (!why.empty()) return why;
    gpu.Add(instance.profile, instance.start);
  }
  return "";
}

Configurations Enumerate(const hw::GpuModel& model, const std::vector<int>& profiles) {
  Configurations result;
  std::vector<Instance> candidates;
  for (int p : profiles) {
    for (int start : model.mig->profiles[static_cast<size_t>(p)].starts) {
      candidates.push_back({p, start});
    }
  }
  std::set<std::vector<int>> feasible, of_maximal;
  Gpu gpu(model);
  // Every set of candidates (in candidate order, so each set once) that the rules allow.
  auto visit = [&](auto&& self, size_t from) -> void {
    if (gpu.instances() > 0) {
      ++result.layouts;
      feasible.insert(gpu.counts());
      bool maximal = true;
      for (const Instance& c : candidates) maximal &= !gpu.WhyNot(c.profile, c.start).empty();
      if (maximal) {
        ++result.maximal_layouts;
        of_maximal.insert(gpu.counts());
      }
    }
    for (size_t j = from; j < candidates.size(); ++j) {
      if (!gpu.WhyNot(candidates[j].profile, candidates[j].start).empty()) continue;
      gpu.Add(candidates[j].profile, candidates[j].start);
      self(self, j + 1);
      gpu.Remove(candidates[j].profile, candidates[j].start);
    }
  };
  visit(visit, 0);
  result.feasible.assign(feasible.begin(), feasible.end());
  result.of_maximal_layouts.assign(of_maximal.begin(), of_maximal.end());
  for (const std::vector<int>& counts : result.feasible) {
    bool maximal = true;
    for (int p : profiles) {
      std::vector<int> more = counts;
      ++more[static_cast<size_t>(p)];
      maximal &= feasible.count(more) == 0;
    }
    if (maximal) result.maximal.push_back(counts);
  }
  return result;
}

// ------------------------------------------------------------------- the integer program

Optimum SolveIlp(const WorkloadSet& workloads, const Fleet& fleet, const hw::Catalog& catalog,
                 double time_limit_s) {
  const Problem problem = BuildProblem(workloads, fleet, catalog, /*maximal_only=*/false);
  Optimum optimum;
  if (problem.needs.empty()) {
    optimum.status = Optimum::Status::kOptimal;
    return optimum;
  }
  std::unique_ptr<Cbc_Model, void (*)(Cbc_Model*)> model(Cbc_newModel(), Cbc_deleteModel);
  Cbc_Model* cbc = model.get();
  int columns = 0;
  auto add_column = [&](double upper, double cost) {
    Cbc_addCol(cbc, "", 0, upper, cost, 1, 0, nullptr, nullptr);
    return columns++;
  };
  auto add_row = [&](const std::vector<std::pair<int, double>>& terms, char sense, double rhs) {
    std::vector<int> cols;
    std::vector<double> coefs;
    for (const auto& [column, coef] : terms) {
      cols.push_back(column);
      coefs.push_back(coef);
    }
    Cbc_addRow(cbc, "", static_cast<int>(cols.size()), cols.data(), coefs.data(), sense, rhs);
  };
  // x[t][c]: GPUs of type t in configuration c.
  std::vector<std::vector<int>> x(problem.types.size());
  for (size_t t = 0; t < problem.types.size(); ++t) {
    const Type& type = problem.types[t];
    std::vector<std::pair<int, double>> available;
    for (size_t c = 0; c < type.configs.size(); ++c) {
      x[t].push_back(add_column(type.count, type.cost));
      available.emplace_back(x[t].back(), 1.0);
    }
    if (!available.empty()) add_row(available, 'L', type.count);
  }
  // y[w][o]: instances of option o for need w (no upper bound: the supply rows bound them).
  const double unbounded = std::numeric_limits<double>::max();
  std::vector<std::vector<int>> y(problem.needs.size());
  std::map<Kind, std::vector<std::pair<int, double>>> supply;
  for (size_t w = 0; w < problem.needs.size(); ++w) {
    const Need& need = problem.needs[w];
    std::vector<std::pair<int, double>> cover, count;
    for (const Option& option : need.options) {
      y[w].push_back(add_column(unbounded, 0));
      cover.emplace_back(y[w].back(), option.capacity);
      count.emplace_back(y[w].back(), 1.0);
      supply[{option.model, option.profile}].emplace_back(y[w].back(), 1.0);
    }
    add_row(cover, 'G', need.demand - kDemandTolerance);
    add_row(count, 'G', need.min_instances);
  }
  for (auto& [kind, terms] : supply) {
    for (size_t t = 0; t < problem.types.size(); ++t) {
      for (size_t c = 0; c < problem.types[t].configs.size(); ++c) {
        const int holds = Holds(problem.types[t], c, kind);
        if (holds > 0) terms.emplace_back(x[t][c], -holds);
      }
    }
    add_row(terms, 'L', 0);
  }
  Cbc_setLogLevel(cbc, 0);
  Cbc_setMaximumSeconds(cbc, time_limit_s);
  Cbc_setAllowableGap(cbc, 1e-9);
  Cbc_setAllowableFractionGap(cbc, 0);
  Cbc_setParameter(cbc, "integerTolerance", "1e-9");
  Cbc_solve(cbc);
  if (Cbc_isProvenInfeasible(cbc) != 0 || Cbc_isInitialSolveProvenPrimalInfeasible(cbc) != 0) {
    optimum.status = Optimum::Status::kInfeasible;
    optimum.detail = "CBC proved the program infeasible";
    return optimum;
  }
  if (Cbc_isProvenOptimal(cbc) == 0 || Cbc_bestSolution(cbc) == nullptr) {
    optimum.detail = "CBC stopped before proving optimality";
    return optimum;
  }
  // Round CBC's answer and check every row of it again, exactly.
  const double* values = Cbc_bestSolution(cbc);
  auto value = [&](int column) {
    return static_cast<long>(std::llround(values[static_cast<size_t>(column)]));
  };
  std::map<Kind, long> held, taken;
  double cost = 0;
  std::ostringstream detail;
  for (size_t t = 0; t < problem.types.size(); ++t) {
    const Type& type = problem.types[t];
    long gpus = 0;
    for (size_t c = 0; c < type.configs.size(); ++c) {
      const long n = value(x[t][c]);
      if (n < 0) return Optimum{Optimum::Status::kUnknown, 0, "negative GPU count"};
      gpus += n;
      cost += type.cost * static_cast<double>(n);
      if (n > 0) detail << n << "x " << TypeText(type) << " [" << ConfigText(type, c) << "]; ";
      for (const auto& [kind, terms] : supply) held[kind] += n * Holds(type, c, kind);
    }
    if (gpus > type.count) return Optimum{Optimum::Status::kUnknown, 0, "more GPUs than exist"};
  }
  for (size_t w = 0; w < problem.needs.size(); ++w) {
    const Need& need = problem.needs[w];
    double covered = 0;
    long instances = 0;
    for (size_t o = 0; o < need.options.size(); ++o) {
      const long n = value(y[w][o]);
      covered += need.options[o].capacity * static_cast<double>(n);
      instances += n;
      taken[{need.options[o].model, need.options[o].profile}] += n;
    }
    if (covered + kDemandTolerance < need.demand || instances < need.min_instances) {
      return Optimum{Optimum::Status::kUnknown, 0, "CBC's rounded solution leaves a need short"};
    }
  }
  for (const auto& [kind, n] : taken) {
    if (n > held[kind]) {
      return Optimum{Optimum::Status::kUnknown, 0, "CBC's rounded solution over-uses a kind"};
    }
  }
  if (std::abs(cost - Cbc_getObjValue(cbc)) > kCostTolerance * (1 + cost)) {
    return Optimum{Optimum::Status::kUnknown, 0, "CBC's objective differs from its solution's"};
  }
  optimum.status = Optimum::Status::kOptimal;
  optimum.cost = cost;
  optimum.detail = detail.str();
  return optimum;
}

// -------------------------------------------------------------------------- brute force

namespace {

// Whether the instances `available` (per kind) can be split among `needs` so that each gets its
// demand and minimum count: every split is tried.
class Splitter {
 public:
  Splitter(const std::vector<Need>& needs, std::map<Kind, int>& available)
      : needs_(needs), available_(available) {}
  bool Fits() { return Fill(0); }

 private:
  bool Fill(size_t w) { return w == needs_.size() || Choose(w, 0, 0.0, 0); }
  bool Choose(size_t w, size_t o, double covered, int instances) {
    const Need& need = needs_[w];
    // Met: more instances for this need could only leave less for the others.
    if (covered + kDemandTolerance >= need.demand && instances >= need.min_instances) {
      return Fill(w + 1);
    }
    if (o == need.options.size()) return false;
    // Short even with every instance left of its remaining options (each option is a kind of
    // its own): no split of these can meet it.
    double most_covered = covered;
    int most_instances = instances;
    for (size_t r = o; r < need.options.size(); ++r) {
      const int left = available_[{need.options[r].model, need.options[r].profile}];
      most_covered += left * need.options[r].capacity;
      most_instances += left;
    }
    if (most_covered + kDemandTolerance < need.demand || most_instances < need.min_instances) {
      return false;
    }
    const Option& option = need.options[o];
    int& left = available_[{option.model, option.profile}];
    const int most = left;
    for (int n = 0; n <= most; ++n) {
      left = most - n;
      const bool fits = Choose(w, o + 1, covered + n * option.capacity, instances + n);
      left = most;
      if (fits) return true;
    }
    return false;
  }

  const std::vector<Need>& needs_;
  std::map<Kind, int>& available_;
};

}  // namespace

Optimum BruteForce(const WorkloadSet& workloads, const Fleet& fleet, const hw::Catalog& catalog,
                   long max_fleet_choices) {
  const Problem problem = BuildProblem(workloads, fleet, catalog, /*maximal_only=*/true);
  Optimum optimum;
  // Per type, a choice per GPU: 0 = unused, c + 1 = configuration c. GPUs of a type are
  // interchangeable, so each type's choices are taken as a non-decreasing sequence.
  double combinations = 1;
  for (const Type& type : problem.types) {
    // Multisets of `count` choices among configs + 1: C(count + configs, count).
    double n = 1;
    for (int i = 1; i <= type.count; ++i) {
      n = n * static_cast<double>(static_cast<int>(type.configs.size()) + i) / i;
    }
    combinations *= n;
  }
  if (combinations > static_cast<double>(max_fleet_choices)) {
    optimum.detail = "too many combinations of GPU configurations";
    return optimum;
  }
  std::vector<std::vector<int>> choice(problem.types.size());
  for (size_t t = 0; t < problem.types.size(); ++t) {
    choice[t].assign(static_cast<size_t>(problem.types[t].count), 0);
  }
  double best = std::numeric_limits<double>::infinity();
  std::string best_detail;
  auto evaluate = [&]() {
    double cost = 0;
    std::map<Kind, int> available;
    std::ostringstream detail;
    for (size_t t = 0; t < problem.types.size(); ++t) {
      const Type& type = problem.types[t];
      for (int pick : choice[t]) {
        if (pick == 0) continue;
        const size_t c = static_cast<size_t>(pick - 1);
        cost += type.cost;
        detail << TypeText(type) << " [" << ConfigText(type, c) << "]; ";
        if (type.whole[c]) {
          ++available[{type.model, kWhole}];
        } else {
          for (size_t p = 0; p < type.configs[c].size(); ++p) {
            if (type.configs[c][p] > 0) {
              available[{type.model, static_cast<int>(p)}] += type.configs[c][p];
            }
          }
        }
      }
    }
    if (cost >= best - kCostTolerance) return;
    if (Splitter(problem.needs, available).Fits()) {
      best = cost;
      best_detail = detail.str();
    }
  };
  // Odometer over every type's non-decreasing choice sequence.
  auto visit = [&](auto&& self, size_t t, size_t i, int from) -> void {
    if (t == problem.types.size()) {
      evaluate();
      return;
    }
    if (i == choice[t].size()) {
      self(self, t + 1, 0, 0);
      return;
    }
    for (int pick = from; pick <= static_cast<int>(problem.types[t].configs.size()); ++pick) {
      choice[t][i] = pick;
      self(self, t, i + 1, pick);
    }
  };
  visit(visit, 0, 0, 0);
  if (best == std::numeric_limits<double>::infinity()) {
    optimum.status = Optimum::Status::kInfeasible;
    optimum.detail = "no combination of configurations holds every workload";
  } else {
    optimum.status = Optimum::Status::kOptimal;
    optimum.cost = problem.needs.empty() ? 0 : best;
    optimum.detail = best_detail;
  }
  return optimum;
}

// ----------------------------------------------------------------------------- plan check

std::vector<std::string> CheckPlan(const PlanResult& plan, const WorkloadSet& workloads,
                                   const Fleet& fleet, const hw::Catalog& catalog) {
  std::vector<std::string> problems;
  const std::vector<Need> needs = Size(workloads, fleet, catalog);
  // The fleet's GPUs by (node, index within the node).
  std::map<std::pair<int, int>, const GpuGroup*> groups;
  for (size_t n = 0; n < fleet.nodes.size(); ++n) {
    int index = 0;
    for (const GpuGroup& group : fleet.nodes[n].gpus) {
      for (int i = 0; i < group.count; ++i) groups[{static_cast<int>(n), index++}] = &group;
    }
  }
  std::set<int> unplaced;
  for (const auto& [w, reason] : plan.unplaced) unplaced.insert(w);
  std::vector<double> covered(needs.size(), 0);
  std::vector<int> instances(needs.size(), 0);
  std::set<std::pair<int, int>> seen;
  double cost = 0;
  int used = 0;
  for (const PlannedGpu& gpu : plan.gpus) {
    const std::string name =
        "node " + std::to_string(gpu.node) + " gpu " + std::to_string(gpu.index);
    auto group = groups.find({gpu.node, gpu.index});
    if (group == groups.end() || !seen.insert(group->first).second) {
      problems.push_back(name + ": not a GPU of the fleet, or listed twice");
      continue;
    }
    const hw::GpuModel* model = catalog.Find(group->second->model);
    if (model == nullptr || gpu.model != model) {
      problems.push_back(name + ": not the fleet's model");
      continue;
    }
    if (gpu.instances.empty()) continue;
    ++used;
    cost += group->second->cost_per_hour;
    bool whole = false;
    std::vector<Instance> layout;
    for (const PlannedInstance& instance : gpu.instances) {
      if (instance.profile == kWhole) {
        whole = true;
      } else {
        layout.push_back({instance.profile, instance.start});
      }
    }
    if (whole) {
      if (gpu.instances.size() != 1) problems.push_back(name + ": a whole GPU beside instances");
      if (gpu.mig_enabled) problems.push_back(name + ": a whole GPU with MIG enabled");
    } else if (!model->mig_capable() || !group->second->mig_allowed) {
      problems.push_back(name + ": MIG instances on a GPU that must stay whole");
      continue;
    } else if (const std::string why = LayoutProblem(*model, layout); !why.empty()) {
      problems.push_back(name + ": invalid layout: " + why);
    }
    for (const PlannedInstance& instance : gpu.instances) {
      if (instance.workload < 0 || static_cast<size_t>(instance.workload) >= needs.size()) {
        problems.push_back(name + ": an instance without a workload");
        continue;
      }
      const size_t w = static_cast<size_t>(instance.workload);
      const std::string& who = workloads.workloads[w].name;
      const Option* option = nullptr;
      for (const Option& candidate : needs[w].options) {
        if (candidate.model == model && candidate.profile == instance.profile) option = &candidate;
      }
      if (option == nullptr) {
        problems.push_back(name + ": " + who + " cannot use this instance (sizing)");
        continue;
      }
      covered[w] += std::min(option->capacity, instance.capacity);
      ++instances[w];
    }
  }
  if (seen.size() != groups.size()) problems.push_back("the plan does not list every GPU");
  for (size_t w = 0; w < needs.size(); ++w) {
    const std::string& who = workloads.workloads[w].name;
    if (unplaced.count(static_cast<int>(w)) > 0) {
      if (instances[w] > 0) problems.push_back(who + ": unplaced, but has instances");
      continue;
    }
    if (needs[w].options.empty()) {
      problems.push_back(who + ": nothing can serve it, yet it is not reported unplaced");
      continue;
    }
    if (covered[w] + kDemandTolerance < needs[w].demand) {
      problems.push_back(who + ": " + std::to_string(covered[w]) + " of " +
                         std::to_string(needs[w].demand) + " covered");
    }
    if (instances[w] < needs[w].min_instances) {
      problems.push_back(who + ": " + std::to_string(instances[w]) + " instances, fewer than " +
                         std::to_string(needs[w].min_instances));
    }
  }
  if (used != plan.gpus_used || std::abs(cost - plan.cost_per_hour) > kCostTolerance * (1 + cost)) {
    std::ostringstream out;
    out << "the plan claims " << plan.gpus_used << " GPUs at " << plan.cost_per_hour
        << "/h; they are " << used << " at " << cost << "/h";
    problems.push_back(out.str());
  }
  return problems;
}

}  // namespace gpuslice::plan::oracle
