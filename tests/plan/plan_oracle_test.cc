// The planner against an independent model (tests/plan/oracle.h): random small fleets and
// workloads, where every plan must pass the oracle's own feasibility check, sizing must agree
// with the oracle's, and whenever the planner calls a plan optimal it must cost exactly the
// oracle's optimum (a compact assignment program solved by CBC, itself checked against brute
// force on tiny fleets), and when the fleet is too small, exact mode leaves out no workload that
// fits beside the ones it placed. Unlike tests/plan/plan_property_test.cc, nothing here builds the
// planner's model through the planner's functions, so a modelling error shows up as a
// disagreement instead of being repeated on both sides.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "gpuslice/hw/catalog.h"
#include "gpuslice/plan/plan.h"
#include "oracle.h"

namespace gpuslice::plan {
namespace {

using oracle::Optimum;

// 500 cases per property (issue 23: at least 500 planner cases per CI run); RC_PARAMS, when set,
// wins. Runs before main, hence before rapidcheck reads its configuration.
[[maybe_unused]] const bool kCases = [] {
  return setenv("RC_PARAMS", "max_success=500", 0) == 0;
}();

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

const hw::GpuModel& Model(const std::string& id) {
  const hw::GpuModel* model = Catalog().Find(id);
  if (model == nullptr) std::abort();  // every id below is a catalog id
  return *model;
}

int ProfileIndex(const hw::GpuModel& model, const std::string& name) {
  for (size_t p = 0; p < model.mig->profiles.size(); ++p) {
    if (model.mig->profiles[p].name == name) return static_cast<int>(p);
  }
  std::abort();
}

// MIG parts with 7 and 4 slices, 8-, 4- and 12-unit grids, and a GPU without MIG.
const std::vector<std::string>& Models() {
  static const std::vector<std::string> models = {
      "A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "A30-24GB", "RTX-PRO-6000-Blackwell",
      "L4"};
  return models;
}

template <typename T>
T Full(rc::Gen<T> gen) {
  return *rc::gen::resize(rc::kNominalSize, std::move(gen));
}
int Int(int low, int high) { return Full(rc::gen::inRange(low, high + 1)); }
template <typename T>
const T& Pick(const std::vector<T>& items) {
  return items[static_cast<size_t>(Int(0, static_cast<int>(items.size()) - 1))];
}

struct Case {
  WorkloadSet workloads;
  Fleet fleet;
};

struct CaseShape {
  int most_gpus = 12;      // in the whole fleet
  int most_per_group = 4;  // GPUs of one group
  int most_workloads = 6;
  int most_replicas = 3;
  int most_rps = 1000;
};

// Prices per GPU-hour: all the same, in half dollars, or a cloud's list (cents apart, where
// many plans cost nearly the same and exact mode's branching has work to do).
double Price(int scheme) {
  static const std::vector<double> list = {0.80, 0.89, 1.79, 2.99, 3.79, 5.99};
  if (scheme == 0) return 1.0;
  if (scheme == 1) return 0.5 * Int(1, 8);
  return Pick(list);
}

Fleet RandomFleet(const CaseShape& shape) {
  Fleet fleet;
  const int scheme = Int(0, 2);
  const int nodes = Int(1, 3);
  int gpus = 0;
  for (int n = 0; n < nodes && gpus < shape.most_gpus; ++n) {
    Node node;
    node.name = "node-" + std::to_string(n);
    const int groups = Int(1, 2);
    for (int g = 0; g < groups && gpus < shape.most_gpus; ++g) {
      GpuGroup group;
      group.model = Pick(Models());
      group.count = Int(1, std::min(shape.most_per_group, shape.most_gpus - gpus));
      group.cost_per_hour = Price(scheme);
      group.mig_allowed = Int(0, 4) != 0;
      group.origin = "fleet.yaml:1";
      gpus += group.count;
      node.gpus.push_back(group);
    }
    fleet.nodes.push_back(node);
  }
  return fleet;
}

std::vector<const hw::GpuModel*> ModelsOf(const Fleet& fleet) {
  std::vector<const hw::GpuModel*> models;
  for (const Node& node : fleet.nodes) {
    for (const GpuGroup& group : node.gpus) {
      const hw::GpuModel* model = &Model(group.model);
      if (std::find(models.begin(), models.end(), model) == models.end()) models.push_back(model);
    }
  }
  return models;
}

// A peak memory sized to one instance of a fleet model: just inside it (after headroom), well
// inside, or just too large for it.
double SizedPeak(const Fleet& fleet, double headroom) {
  const hw::GpuModel* model = Pick(ModelsOf(fleet));
  std::int64_t mib = model->memory_mib;
  if (model->mig_capable() && Int(0, 3) != 0) {
    std::vector<std::int64_t> sizes;
    for (const hw::GiProfile& gi : model->mig->profiles) {
      if (gi.variant == hw::MediaVariant::kStandard) sizes.push_back(gi.memory_mib);
    }
    mib = Pick(sizes);
  }
  const double exact = static_cast<double>(mib) / 1024.0 / (1 + headroom);
  switch (Int(0, 3)) {
    case 0:
      return std::floor(exact * 100) / 100;  // fits, by less than 0.01 GiB
    case 1:
      return std::ceil(exact * 100) / 100 + 0.01;  // just too large
    case 2:
      return std::floor(exact * 0.9 * 4) / 4;
    default:
      return std::max(0.25, std::floor(exact * 0.6 * 4) / 4);
  }
}

// A concave throughput curve over the model's instance sizes (and, sometimes, a row for a
// non-base profile, the whole GPU, several processes, or a failed run), latency growing with
// batch and shrinking with size.
PerfTable RandomTable(const hw::GpuModel& model) {
  PerfTable table;
  table.gpu_model = model.id;
  const double per_slice = 40.0 * Int(1, 10);
  const double base_latency = 2.0 * Int(1, 5);
  auto add_rows = [&](int slices, const std::string& profile, int row_slices, double bonus) {
    for (int batch : {1, 4, 16}) {
      PerfPoint point;
      point.compute_slices = row_slices;
      point.profile = profile;
      point.batch = batch;
      point.throughput_rps =
          bonus * per_slice * slices * (0.6 + 0.1 * batch / 4.0) / (1 + 0.03 * slices);
      point.latency_ms = base_latency * (1 + batch / 8.0) / (1 + 0.1 * slices);
      table.points.push_back(point);
    }
  };
  if (model.mig_capable()) {
    std::set<int> sizes;
    std::vector<std::string> others;
    for (const hw::GiProfile& gi : model.mig->profiles) {
      if (gi.variant != hw::MediaVariant::kStandard) continue;
      if (!sizes.insert(gi.compute_slices).second) others.push_back(gi.name);
    }
    for (int slices : sizes) {
      if (Int(0, 5) != 0) add_rows(slices, "", slices, 1.0);  // some sizes unmeasured
    }
    if (!others.empty() && Int(0, 2) == 0) {
      const std::string& name = Pick(others);
      add_rows(model.mig->profiles[static_cast<size_t>(ProfileIndex(model, name))].compute_slices,
               name, 0, 1.1);
    }
    if (Int(0, 2) == 0) add_rows(model.mig->compute_slices, "", 0, 1.05);
  } else {
    add_rows(4, "", 0, 1.0);
  }
  if (Int(0, 3) == 0 && !table.points.empty()) {
    PerfPoint point = Pick(table.points);
    point.processes = 2;
    point.throughput_rps *= 1.5;  // MPS: not used unless the policy allows it
    table.points.push_back(point);
  }
  if (Int(0, 5) == 0 && !table.points.empty()) {
    table.points[static_cast<size_t>(Int(0, static_cast<int>(table.points.size()) - 1))]
        .throughput_rps = 0;  // out of memory at that point
  }
  return table;
}

Workload RandomWorkload(int index, const Fleet& fleet, const SizingPolicy& policy,
                        const CaseShape& shape) {
  Workload workload;
  workload.name = "w" + std::to_string(index);
  workload.origin = "workloads.yaml:" + std::to_string(index + 1);
  workload.kind = static_cast<WorkloadKind>(Int(0, 3));
  workload.measured = Int(0, 2) == 0;
  workload.min_instances = Int(0, 3) == 0 ? 2 : 1;
  workload.spread = Int(0, 3) != 0;
  const double headroom =
      workload.kind == WorkloadKind::kFineTune ? policy.fine_tune_headroom : policy.memory_headroom;
  if (Int(0, 2) == 0) {
    if (Int(0, 2) != 0) workload.kind = WorkloadKind::kInference;
    workload.throughput_rps = 50.0 * Int(1, shape.most_rps / 50);
    workload.latency_p99_ms = Int(0, 5) == 0 ? 0 : 10.0 * Int(2, 20);
    const std::vector<const hw::GpuModel*> models = ModelsOf(fleet);
    const int tables = Int(1, 2);
    for (int t = 0; t < tables; ++t) {
      workload.perf.push_back(RandomTable(Int(0, 5) == 0 ? Model(Pick(Models())) : *Pick(models)));
    }
    if (Int(0, 3) == 0) workload.peak_memory_gib = SizedPeak(fleet, headroom);
  } else {
    // Sometimes many replicas, so that GPUs full of small instances matter.
    workload.replicas =
        Int(workload.min_instances, Int(0, 3) == 0 ? 3 * shape.most_replicas : shape.most_replicas);
    workload.peak_memory_gib = Int(0, 2) != 0 ? SizedPeak(fleet, headroom) : 0.5 * Int(1, 80);
  }
  switch (Int(0, 11)) {
    case 0:
      workload.media.decoders = 1;
      break;
    case 1:
      workload.media.jpeg = 1;
      break;
    case 2:
      workload.media.ofa = 1;
      break;
    default:
      break;
  }
  if (Int(0, 4) == 0) workload.gpu_models = {Pick(ModelsOf(fleet))->id};
  if (Int(0, 19) == 0) workload.gpu_models = {Pick(Models())};
  return workload;
}

Case RandomCase(const CaseShape& shape) {
  Case c;
  c.fleet = RandomFleet(shape);
  SizingPolicy& policy = c.workloads.policy;
  if (Int(0, 3) == 0) policy.memory_headroom = 0.05 * Int(0, 6);
  if (Int(0, 5) == 0) policy.allow_multi_process = true;
  if (Int(0, 5) == 0) policy.notebook_max_compute_slices = Int(1, 4);
  if (Int(0, 5) == 0) policy.fine_tune_min_compute_slices = Int(1, 4);
  if (Int(0, 5) == 0) policy.latency_margin = 0.05 * Int(0, 4);
  const int count = Int(1, shape.most_workloads);
  for (int w = 0; w < count; ++w) {
    c.workloads.workloads.push_back(RandomWorkload(w, c.fleet, c.workloads.policy, shape));
  }
  return c;
}

// The case, for a failure's log: what a regression test needs to rebuild it.
std::string Describe(const Case& c) {
  std::ostringstream out;
  out << "fleet:\n";
  for (const Node& node : c.fleet.nodes) {
    for (const GpuGroup& group : node.gpus) {
      out << "  " << node.name << ": " << group.count << "x " << group.model << " at "
          << group.cost_per_hour << (group.mig_allowed ? "" : " (MIG not allowed)") << "\n";
    }
  }
  const SizingPolicy& policy = c.workloads.policy;
  out << "policy: memory_headroom " << policy.memory_headroom << " fine_tune_headroom "
      << policy.fine_tune_headroom << " fine_tune_min " << policy.fine_tune_min_compute_slices
      << " notebook_max " << policy.notebook_max_compute_slices << " wait "
      << policy.latency_wait_factor << " margin " << policy.latency_margin << " mps "
      << policy.allow_multi_process << "\n";
  for (const Workload& w : c.workloads.workloads) {
    out << w.name << ": " << ToString(w.kind) << (w.measured ? " measured" : "") << " replicas "
        << w.replicas << " rps " << w.throughput_rps << " p99 " << w.latency_p99_ms << " peak "
        << w.peak_memory_gib << " min " << w.min_instances << (w.spread ? " spread" : "")
        << " media " << w.media.decoders << "/" << w.media.jpeg << "/" << w.media.ofa;
    for (const std::string& model : w.gpu_models) out << " only " << model;
    out << "\n";
    for (const PerfTable& table : w.perf) {
      out << "  table " << table.gpu_model << ":";
      for (const PerfPoint& p : table.points) {
        out << " [" << p.compute_slices << (p.profile.empty() ? "" : " " + p.profile) << " b"
            << p.batch << " x" << p.processes << " " << p.throughput_rps << "/s " << p.latency_ms
            << "ms]";
      }
      out << "\n";
    }
  }
  return out.str();
}

std::string Describe(const PlanResult& plan) {
  std::ostringstream out;
  out << "plan: " << plan.cost_per_hour << "/h on " << plan.gpus_used << " GPUs, bound "
      << plan.lower_bound_cost << (plan.proven_optimal ? " (proven optimal)" : "") << ", "
      << plan.solver << "\n";
  for (const PlannedGpu& gpu : plan.gpus) {
    if (gpu.instances.empty()) continue;
    out << "  node " << gpu.node << " gpu " << gpu.index << " " << gpu.model->id << ":";
    for (const PlannedInstance& i : gpu.instances) {
      out << " "
          << (i.profile == kWholeGpu
                  ? std::string("whole")
                  : gpu.model->mig->profiles[static_cast<size_t>(i.profile)].name)
          << "@" << i.start << "=w" << i.workload;
    }
    out << "\n";
  }
  for (const auto& [w, reason] : plan.unplaced)
    out << "  unplaced w" << w << ": " << reason << "\n";
  for (const std::string& note : plan.notes) out << "  note: " << note << "\n";
  return out.str();
}

std::string StatusName(Optimum::Status status) {
  switch (status) {
    case Optimum::Status::kOptimal:
      return "optimal";
    case Optimum::Status::kInfeasible:
      return "infeasible";
    default:
      return "unknown";
  }
}

// The planner's sizing (after it drops options no GPU of the fleet can host) against the
// oracle's: the same instances with the same capacities, and the same unsatisfiable workloads.
// Returns the unsatisfiable workloads.
std::set<int> CheckSizing(const PlanResult& plan, const std::vector<oracle::Need>& needs) {
  RC_ASSERT(plan.sizing.size() == needs.size());
  std::set<int> unsatisfiable;
  for (size_t w = 0; w < needs.size(); ++w) {
    std::set<std::tuple<std::string, int, double>> planner, independent;
    for (const SizedOption& o : plan.sizing[w].options) {
      planner.insert({o.model->id, o.profile, o.capacity});
    }
    for (const oracle::Option& o : needs[w].options) {
      independent.insert({o.model->id, o.profile, o.capacity});
    }
    if (planner != independent) {
      std::ostringstream out;
      out << "w" << w << " sized differently; planner:";
      for (const auto& [model, profile, capacity] : planner) {
        out << " " << model << "/" << profile << "=" << capacity;
      }
      out << "; oracle:";
      for (const auto& [model, profile, capacity] : independent) {
        out << " " << model << "/" << profile << "=" << capacity;
      }
      RC_FAIL(out.str());
    }
    RC_ASSERT(plan.sizing[w].unsatisfiable.empty() == !needs[w].options.empty());
    if (needs[w].options.empty()) unsatisfiable.insert(static_cast<int>(w));
  }
  return unsatisfiable;
}

// What the plan claims against the optimum of the independent model.
void Compare(const PlanResult& plan, const Optimum& optimum, const std::set<int>& unsatisfiable,
             bool exact_mode) {
  std::set<int> unplaced;
  for (const auto& [w, reason] : plan.unplaced) unplaced.insert(w);
  RC_ASSERT(
      std::includes(unplaced.begin(), unplaced.end(), unsatisfiable.begin(), unsatisfiable.end()));
  const bool all_placed = unplaced.size() == unsatisfiable.size();
  bool timed_out = false;
  for (const std::string& note : plan.notes) {
    timed_out |= note.find("time limit") != std::string::npos;
  }
  switch (optimum.status) {
    case Optimum::Status::kOptimal:
      if (all_placed) {
        RC_ASSERT(plan.cost_per_hour + 1e-6 >= optimum.cost);     // no plan beats the optimum
        RC_ASSERT(plan.lower_bound_cost <= optimum.cost + 1e-6);  // the bound is a bound
      }
      if (plan.proven_optimal) {
        RC_ASSERT(all_placed);
        RC_ASSERT(std::abs(plan.cost_per_hour - optimum.cost) < 1e-6);
      }
      // A finished exact search leaves nothing out that the fleet can hold (leaving a workload
      // out costs more than the whole fleet).
      if (exact_mode && !timed_out) RC_ASSERT(all_placed);
      break;
    case Optimum::Status::kInfeasible:
      // A plan that placed everything would contradict the oracle (it passed CheckPlan).
      RC_ASSERT(!all_placed);
      RC_ASSERT(!plan.proven_optimal);
      break;
    case Optimum::Status::kUnknown:
      break;
  }
}

// When the fleet cannot hold every workload, a finished exact search leaves out as few workloads
// as the fleet allows (docs/PLANNING.md, "Integer program"): none of those it left out fits
// beside the ones it placed.
void CheckLeftOut(const Case& c, const PlanResult& plan, const std::set<int>& unsatisfiable) {
  for (const std::string& note : plan.notes) {
    if (note.find("time limit") != std::string::npos) return;
  }
  std::set<int> left_out;
  for (const auto& [w, reason] : plan.unplaced) {
    if (unsatisfiable.count(w) == 0) left_out.insert(w);
  }
  for (int w : left_out) {
    WorkloadSet more = c.workloads;
    more.workloads.clear();
    for (size_t v = 0; v < c.workloads.workloads.size(); ++v) {
      if (left_out.count(static_cast<int>(v)) == 0 || static_cast<int>(v) == w) {
        more.workloads.push_back(c.workloads.workloads[v]);
      }
    }
    const Optimum optimum = oracle::SolveIlp(more, c.fleet, Catalog(), 30);
    RC_LOG() << "w" << w << " beside the placed workloads: " << StatusName(optimum.status) << " "
             << optimum.detail << "\n";
    RC_ASSERT(optimum.status != Optimum::Status::kOptimal);
  }
}

PlanResult PlanAndCheck(const Case& c, SolveMode mode, double time_limit_s) {
  PlanOptions options;
  options.mode = mode;
  options.time_limit_s = time_limit_s;
  const absl::StatusOr<PlanResult> plan = Plan(c.workloads, c.fleet, Catalog(), options);
  RC_ASSERT(plan.ok());
  RC_LOG() << Describe(*plan);
  const std::vector<std::string> problems =
      oracle::CheckPlan(*plan, c.workloads, c.fleet, Catalog());
  for (const std::string& problem : problems) RC_LOG() << "check: " << problem << "\n";
  RC_ASSERT(problems.empty());
  return *plan;
}

// The main property: exact mode (and, on the same case, fast or auto mode) against the compact
// program, on fleets of up to 12 GPUs and up to 6 workloads.
RC_GTEST_PROP(PlanOracle, ProvenPlansCostTheIndependentOptimum, ()) {
  const Case c = RandomCase(CaseShape{});
  RC_LOG() << Describe(c);
  const std::vector<oracle::Need> needs = oracle::Size(c.workloads, c.fleet, Catalog());
  const Optimum optimum = oracle::SolveIlp(c.workloads, c.fleet, Catalog(), 30);
  RC_LOG() << "oracle: " << StatusName(optimum.status) << " " << optimum.cost << " "
           << optimum.detail << "\n";
  RC_CLASSIFY(optimum.status == Optimum::Status::kOptimal, "oracle: every workload placed");
  RC_CLASSIFY(optimum.status == Optimum::Status::kInfeasible, "oracle: the fleet is too small");

  const PlanResult exact = PlanAndCheck(c, SolveMode::kExact, 10);
  const std::set<int> unsatisfiable = CheckSizing(exact, needs);
  RC_CLASSIFY(exact.proven_optimal, "exact mode proved its plan optimal");
  Compare(exact, optimum, unsatisfiable, /*exact_mode=*/true);
  if (optimum.status == Optimum::Status::kInfeasible) CheckLeftOut(c, exact, unsatisfiable);

  const SolveMode other = Int(0, 1) == 0 ? SolveMode::kFast : SolveMode::kAuto;
  const PlanResult quick = PlanAndCheck(c, other, 1);
  RC_CLASSIFY(quick.proven_optimal, "fast or auto mode proved its plan optimal");
  Compare(quick, optimum, unsatisfiable, /*exact_mode=*/false);
}

// The oracle itself: on tiny fleets (at most 3 GPUs, 3 workloads) its program and brute force
// give the same answer, and so does the planner.
RC_GTEST_PROP(PlanOracle, TheProgramAgreesWithBruteForceOnTinyFleets, ()) {
  const Case c = RandomCase(CaseShape{3, 2, 3, 3, 400});
  RC_LOG() << Describe(c);
  const Optimum brute = oracle::BruteForce(c.workloads, c.fleet, Catalog());
  const Optimum ilp = oracle::SolveIlp(c.workloads, c.fleet, Catalog(), 30);
  RC_LOG() << "brute force: " << StatusName(brute.status) << " " << brute.cost << " "
           << brute.detail << "\nprogram: " << StatusName(ilp.status) << " " << ilp.cost << " "
           << ilp.detail << "\n";
  RC_CLASSIFY(brute.status == Optimum::Status::kOptimal, "every workload placed");
  RC_CLASSIFY(brute.status == Optimum::Status::kInfeasible, "the fleet is too small");
  RC_ASSERT(brute.status != Optimum::Status::kUnknown);
  RC_ASSERT(ilp.status == brute.status);
  if (brute.status == Optimum::Status::kOptimal) RC_ASSERT(std::abs(ilp.cost - brute.cost) < 1e-6);

  const PlanResult exact = PlanAndCheck(c, SolveMode::kExact, 10);
  const std::set<int> unsatisfiable =
      CheckSizing(exact, oracle::Size(c.workloads, c.fleet, Catalog()));
  Compare(exact, brute, unsatisfiable, /*exact_mode=*/true);
  if (brute.status == Optimum::Status::kInfeasible) CheckLeftOut(c, exact, unsatisfiable);
}

// ------------------------------------------------------------------- shrunk disagreements

Case TwoWholeA100s() {
  Case c;
  Node node;
  node.name = "node-0";
  node.gpus.push_back(GpuGroup{"A100-40GB", 2, 1.0, /*mig_allowed=*/false, "fleet.yaml:1"});
  c.fleet.nodes.push_back(node);
  return c;
}

Workload WholeCardReplicas(const std::string& name, int replicas) {
  Workload w;
  w.name = name;
  w.origin = "workloads.yaml:1";
  w.replicas = replicas;
  w.min_instances = 2;
  w.peak_memory_gib = 34.78;  // 40.00 GiB with headroom: a whole A100-40GB each
  return w;
}

// Found by ProvenPlansCostTheIndependentOptimum's left-out check (shrunk): two whole A100s, a
// workload of three whole-card replicas (cannot fit) and a throughput workload that needs two
// cards (fits alone). The program used to charge the penalty per replica left out, so placing
// two of the three replicas (one penalty) beat placing the throughput workload (a penalty for
// the three replicas); the replica workload, short, was then dropped whole and both ended
// unplaced on an empty fleet. The program now charges per workload left out, as the report does.
TEST(PlanOracleRegression, AWorkloadThatFitsIsNotLeftOutForOneThatDoesNot) {
  Case c = TwoWholeA100s();
  c.workloads.workloads.push_back(WholeCardReplicas("replicas", 3));
  Workload served;
  served.name = "served";
  served.origin = "workloads.yaml:2";
  served.throughput_rps = 50;
  served.min_instances = 2;
  PerfTable table;
  table.gpu_model = "A100-40GB";
  table.points.push_back(PerfPoint{0, "", 4, 1, 170.0, 1.75});  // the whole GPU
  served.perf.push_back(table);
  c.workloads.workloads.push_back(served);

  WorkloadSet alone = c.workloads;
  alone.workloads.erase(alone.workloads.begin());
  const Optimum fits = oracle::SolveIlp(alone, c.fleet, Catalog(), 30);
  ASSERT_EQ(fits.status, Optimum::Status::kOptimal) << fits.detail;
  EXPECT_EQ(oracle::SolveIlp(c.workloads, c.fleet, Catalog(), 30).status,
            Optimum::Status::kInfeasible);
  for (SolveMode mode : {SolveMode::kExact, SolveMode::kAuto, SolveMode::kFast}) {
    PlanOptions options;
    options.mode = mode;
    const absl::StatusOr<PlanResult> plan = Plan(c.workloads, c.fleet, Catalog(), options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(oracle::CheckPlan(*plan, c.workloads, c.fleet, Catalog()).empty());
    ASSERT_EQ(plan->unplaced.size(), 1u) << Describe(*plan);
    EXPECT_EQ(plan->unplaced[0].first, 0) << Describe(*plan);
    EXPECT_DOUBLE_EQ(plan->cost_per_hour, fits.cost) << Describe(*plan);
  }
}

// The same within one class: replica workloads with the same options are solved as one demand
// (five replicas on two cards). The two-replica workload fits and is placed; the three-replica
// one is left out, whichever comes first.
TEST(PlanOracleRegression, AMergedReplicaClassLeavesOutTheFewestWorkloads) {
  for (bool small_first : {false, true}) {
    Case c = TwoWholeA100s();
    c.workloads.workloads.push_back(WholeCardReplicas("three", 3));
    c.workloads.workloads.push_back(WholeCardReplicas("two", 2));
    if (small_first) std::swap(c.workloads.workloads[0], c.workloads.workloads[1]);
    for (SolveMode mode : {SolveMode::kExact, SolveMode::kAuto, SolveMode::kFast}) {
      PlanOptions options;
      options.mode = mode;
      const absl::StatusOr<PlanResult> plan = Plan(c.workloads, c.fleet, Catalog(), options);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_TRUE(oracle::CheckPlan(*plan, c.workloads, c.fleet, Catalog()).empty());
      ASSERT_EQ(plan->unplaced.size(), 1u) << Describe(*plan);
      EXPECT_EQ(c.workloads.workloads[static_cast<size_t>(plan->unplaced[0].first)].name, "three")
          << Describe(*plan);
      EXPECT_DOUBLE_EQ(plan->cost_per_hour, 2.0) << Describe(*plan);
    }
  }
}

// ----------------------------------------------------------------- the oracle's own facts

std::vector<int> Profiles(const hw::GpuModel& model, const std::vector<std::string>& names) {
  std::vector<int> profiles;
  for (const std::string& name : names) profiles.push_back(ProfileIndex(model, name));
  return profiles;
}

// The enumeration reproduces the counts of ../shared/reference/mig-facts.md §3.2 and §3.3.
TEST(PlanOracleFacts, EnumerationMatchesTheReferenceCounts) {
  const hw::GpuModel& a100 = Model("A100-40GB");
  const std::vector<std::string> base = {"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"};
  oracle::Configurations all = oracle::Enumerate(a100, Profiles(a100, base));
  EXPECT_EQ(all.maximal_layouts, 19);
  EXPECT_EQ(all.of_maximal_layouts.size(), 14u);
  std::vector<std::string> more = base;
  more.push_back("1g.10gb");  // the double-memory 1g (ID 15)
  all = oracle::Enumerate(a100, Profiles(a100, more));
  EXPECT_EQ(all.maximal_layouts, 78);
  EXPECT_EQ(all.of_maximal_layouts.size(), 38u);
  more.push_back("1g.5gb+me");
  all = oracle::Enumerate(a100, Profiles(a100, more));
  EXPECT_EQ(all.maximal_layouts, 239);
  EXPECT_EQ(all.of_maximal_layouts.size(), 64u);

  const hw::GpuModel& a30 = Model("A30-24GB");
  all = oracle::Enumerate(a30, Profiles(a30, {"1g.6gb", "2g.12gb", "4g.24gb"}));
  EXPECT_EQ(all.maximal_layouts, 5);
  EXPECT_EQ(all.of_maximal_layouts.size(), 4u);
  const hw::GpuModel& rtx = Model("RTX-PRO-6000-Blackwell");
  all = oracle::Enumerate(rtx, Profiles(rtx, {"1g.24gb", "2g.48gb", "4g.96gb"}));
  EXPECT_EQ(all.maximal_layouts, 5);
  EXPECT_EQ(all.of_maximal_layouts.size(), 4u);
}

TEST(PlanOracleFacts, LayoutRules) {
  const hw::GpuModel& a100 = Model("A100-80GB");
  const int g1 = ProfileIndex(a100, "1g.10gb"), me = ProfileIndex(a100, "1g.10gb+me");
  const int g3 = ProfileIndex(a100, "3g.40gb"), g4 = ProfileIndex(a100, "4g.40gb");
  const int g7 = ProfileIndex(a100, "7g.80gb");
  EXPECT_EQ(oracle::LayoutProblem(a100, {{g3, 0}, {g3, 4}}), "");
  EXPECT_EQ(oracle::LayoutProblem(a100, {{g4, 0}, {g3, 4}}), "");  // newest driver
  EXPECT_NE(oracle::LayoutProblem(a100, {{g1, 7}}), "");           // slot 7 is no 1g start
  EXPECT_NE(oracle::LayoutProblem(a100, {{g3, 0}, {g4, 0}}), "");  // overlap
  EXPECT_NE(oracle::LayoutProblem(a100, {{me, 0}, {me, 1}}), "");  // one +me
  EXPECT_NE(oracle::LayoutProblem(a100, {{g7, 0}, {g1, 0}}), "");
  const hw::GpuModel& rtx = Model("RTX-PRO-6000-Blackwell");
  const int all_me = ProfileIndex(rtx, "1g.24gb+me.all");
  EXPECT_NE(oracle::LayoutProblem(rtx, {{all_me, 0}, {ProfileIndex(rtx, "1g.24gb"), 3}}), "");
  EXPECT_EQ(oracle::LayoutProblem(rtx, {{all_me, 0}, {ProfileIndex(rtx, "1g.24gb-me"), 3}}), "");
}

// Known answers: 1g.10gb holds 8.5 GiB with 15% headroom; seven fit one A100-80GB, the eighth
// takes a second GPU.
TEST(PlanOracleFacts, KnownOptimum) {
  Case c;
  Node node;
  node.name = "node-0";
  node.gpus.push_back(GpuGroup{"A100-80GB", 3, 2.0, true, "fleet.yaml:1"});
  c.fleet.nodes.push_back(node);
  Workload w;
  w.name = "small";
  w.replicas = 7;
  w.peak_memory_gib = 8.0;
  c.workloads.workloads.push_back(w);
  const std::vector<oracle::Need> needs = oracle::Size(c.workloads, c.fleet, Catalog());
  ASSERT_EQ(needs.size(), 1u);
  // Every standard A100-80GB profile holds 9.2 GiB, and so does the whole GPU.
  EXPECT_EQ(needs[0].options.size(), 7u);
  for (const auto& solve :
       {+[](const Case& k) { return oracle::SolveIlp(k.workloads, k.fleet, Catalog(), 30); },
        +[](const Case& k) { return oracle::BruteForce(k.workloads, k.fleet, Catalog()); }}) {
    Optimum optimum = solve(c);
    ASSERT_EQ(optimum.status, Optimum::Status::kOptimal) << optimum.detail;
    EXPECT_DOUBLE_EQ(optimum.cost, 2.0) << optimum.detail;
    c.workloads.workloads[0].replicas = 8;
    optimum = solve(c);
    ASSERT_EQ(optimum.status, Optimum::Status::kOptimal) << optimum.detail;
    EXPECT_DOUBLE_EQ(optimum.cost, 4.0) << optimum.detail;
    c.workloads.workloads[0].replicas = 22;  // 3 x 7 instances at most
    EXPECT_EQ(solve(c).status, Optimum::Status::kInfeasible);
    c.workloads.workloads[0].replicas = 7;
  }
}

}  // namespace
}  // namespace gpuslice::plan
