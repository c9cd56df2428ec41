// gpuslice/plan/plan.h
//
// The planner: sizes every workload (sizing.h), chooses a MIG layout for each GPU of the fleet and
// an instance for each replica, minimising the cost of the GPUs used. Pure and deterministic for a
// given mode and time limit (CBC runs single-threaded).
//
// Formulation (docs/PLANNING.md): GPUs of one model and mode are interchangeable, so the program
// chooses how many GPUs of each type use each *configuration* (a distinct multiset of GI profiles
// that the layout engine can place, or the whole GPU) and how many instances of each sizing option
// each workload gets:
//   min  sum cost_t x_tc
//   s.t. sum_o capacity_o y_o >= demand_w,   sum_o y_o >= min_instances_w      (each workload w)
//        sum_{o of t,p} y_o <= sum_c count_c(p) x_tc                            (each type t,
//        profile p) sum_c x_tc <= available_t,  x, y integer >= 0
// Fast mode solves the LP relaxation (with rounding cuts), rounds it, adds integer covers by
// column generation and lets CBC choose one cover per throughput workload (a restricted master)
// for a few seconds; its lower bound is the Dantzig-Wolfe relaxation over all integer covers.
// Exact mode branches on the number of GPUs of each price (the objective depends on nothing
// else), prices out covers at every node, and closes a node whose counts come out whole with an
// integer plan (CBC on the restricted master, then on the whole program): when every node is
// closed the plan is proven optimal. Replica workloads with identical options are merged before
// solving (exact for the integer program). Instances are then placed at exact starts by the
// layout engine and assigned to workloads, spreading each workload's instances over GPUs and
// nodes.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/plan/model.h"
#include "gpuslice/plan/sizing.h"

namespace gpuslice::plan {

enum class SolveMode {
  kAuto,   // exact when the problem is small enough to prove quickly, else fast
  kExact,  // branch and price until the plan is proven optimal or the time limit
  kFast,   // LP relaxation + rounding
};

struct PlanOptions {
  SolveMode mode = SolveMode::kAuto;
  double time_limit_s = 10;  // exact mode: stop and report the gap after this long
};

// One GPU instance on a planned GPU.
struct PlannedInstance {
  int profile = kWholeGpu;  // index into the model's MigSpec::profiles, or kWholeGpu
  int start = 0;            // placement start (0 for a whole GPU)
  int workload = -1;        // index into the workload list; -1 = spare (not created)
  double capacity = 0;      // demand it covers for its workload
  int batch = 0;            // operating point (throughput workloads)
  bool kept = false;        // re-planning: a running instance that stays as it is
};

// One physical GPU of the fleet.
struct PlannedGpu {
  int node = 0;   // index into Fleet::nodes
  int index = 0;  // GPU index within the node
  const hw::GpuModel* model = nullptr;
  double cost_per_hour = 0;
  bool mig_allowed = true;
  bool used = false;         // hosts at least one workload instance
  bool mig_enabled = false;  // the plan enables MIG on it (false: whole GPU, or unused)
  std::vector<PlannedInstance> instances;  // sorted by start; spares are not listed
};

struct PlanResult {
  std::vector<WorkloadSizing> sizing;  // per workload, in input order
  std::vector<PlannedGpu> gpus;        // every GPU of the fleet, node by node
  // Workloads (indices) that could not be placed and why (unsatisfiable sizing, or the fleet is
  // too small); the rest of the plan is still valid.
  std::vector<std::pair<int, std::string>> unplaced;
  double cost_per_hour = 0;  // of the used GPUs
  int gpus_used = 0;
  // Proven lower bound on the cost per hour of any plan that places the same workloads (and, for
  // a fleet where every GPU costs the same, on the GPU count).
  double lower_bound_cost = 0;
  int lower_bound_gpus = 0;  // ceil(bound / cost) when all GPUs cost the same, else 0
  bool proven_optimal = false;
  std::string solver;  // "branch-and-price" (exact search ran) or "lp-rounding"
  double solve_seconds = 0;
  std::vector<std::string> notes;  // e.g. "time limit reached; gap 2.1%"
};

// Plans `workloads` on `fleet`. Errors (InvalidArgument) only for inconsistent input (a fleet
// without GPUs, duplicate names); capacity shortfalls are reported in PlanResult::unplaced.
absl::StatusOr<PlanResult> Plan(const WorkloadSet& workloads, const Fleet& fleet,
                                const hw::Catalog& catalog, const PlanOptions& options = {});

// Checks a plan independently of how it was made: every layout is valid for its model, every
// instance belongs to a workload it can serve, every placed workload's demand and min_instances
// are met, and no GPU is used beyond the fleet. Returns the problems found (empty = feasible).
std::vector<std::string> CheckPlan(const PlanResult& plan, const WorkloadSet& workloads,
                                   const Fleet& fleet);

}  // namespace gpuslice::plan
