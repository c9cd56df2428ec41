// A second, deliberately simple exact model of the planner's problem, for tests (issue 23,
// deliverable 2, "Planner"). It shares no code with src/plan/ or src/geometry/: it reads only the
// planner's input and output types (model.h, plan.h) and the catalog's raw facts (hw/gpu_model.h:
// each profile's starts, placement size, instance cap, engines, memory and compute slices), and
// re-derives everything else from the rules as docs/PLANNING.md and
// ../shared/reference/mig-facts.md §3.1 state them:
//
//  * Sizing (Size): which instances of which fleet model can serve each workload and how much of
//    its demand one instance covers (memory with headroom, fine-tune and notebook slice limits,
//    media engines and variants, throughput at the best operating point within the latency SLO,
//    whole GPUs credited with the full-size instance's row when they have none). Options that no
//    GPU of the fleet can host (a MIG profile where every GPU of the model must stay whole) are
//    not options.
//  * Placement (LayoutProblem, Enumerate): an instance occupies [start, start + size) of the
//    placement units at one of its profile's allowed starts; instances do not overlap; at most
//    max_instances of a profile; JPEG and OFA engines add up to no more than the full-GPU profile
//    has; a "+me.all" instance tolerates only "-me" instances beside it; compute slices add up to
//    no more than the GPU has. Feasible configurations are found by enumerating every valid set
//    of placements, not through the planner's layout engine.
//  * Optimum (SolveIlp): a compact assignment program solved by CBC directly (its C interface,
//    row by row):
//        x[t,c] integer >= 0   GPUs of type t (same model, MIG permission and price) holding
//                              configuration c: every feasible non-empty multiset of the profiles
//                              some workload may use on that model, or the whole GPU
//        y[w,o] integer >= 0   instances of option o serving workload w
//        min   sum cost[t] x[t,c]
//        s.t.  sum_c x[t,c] <= GPUs of type t                                   each type
//              sum_o capacity[o] y[w,o] >= demand[w] - kDemandTolerance         each workload
//              sum_o y[w,o] >= min_instances[w]                                 each workload
//              sum_{w,o of kind k} y[w,o] <= sum_{t,c} count[c,k] x[t,c]        each (model,
//              profile)
//    Every workload that sizing can serve must be placed (there is no slack): Infeasible means
//    the fleet cannot hold all of them at once. Spreading is not modelled (the planner's integer
//    program does not model it either; docs/PLANNING.md §5). The solution CBC returns is rounded
//    and checked row by row before it is believed.
//  * Brute force (BruteForce): for tiny fleets, every choice of unused / whole / maximal
//    configuration per physical GPU, and for each, every split of the instances among the
//    workloads: a check of SolveIlp that involves no solver at all.
//  * Plan check (CheckPlan): a plan's layouts valid by the rules above, MIG only where allowed,
//    every instance an option of its workload, every placed workload's demand and minimum met,
//    unplaced workloads without instances, and the cost and GPU count it claims.
//
// Demand is met when the instances' capacities add up to within kDemandTolerance of it (the
// planner's own tolerance, and CheckPlan's). Costs are compared within 1e-6.
#pragma once

#include <string>
#include <vector>

#include "gpuslice/hw/catalog.h"
#include "gpuslice/plan/model.h"
#include "gpuslice/plan/plan.h"

namespace gpuslice::plan::oracle {

inline constexpr int kWhole = -1;  // "profile" of a whole GPU with MIG disabled
inline constexpr double kDemandTolerance = 1e-6;

// One way to serve part of a workload: an instance of `profile` (an index into the model's
// MigSpec::profiles, or kWhole) on a GPU of `model`, covering `capacity` of its demand.
struct Option {
  const hw::GpuModel* model = nullptr;
  int profile = kWhole;
  double capacity = 1;
};

// What one workload needs: `demand` (replicas, or requests/s) from at least `min_instances`
// instances of its `options`.
struct Need {
  bool by_throughput = false;
  double demand = 0;
  int min_instances = 1;
  std::vector<Option> options;  // empty: nothing in the fleet can serve it (unsatisfiable)
};

// Sizes every workload on the fleet's models (in input order). Models the catalog does not know
// are ignored.
std::vector<Need> Size(const WorkloadSet& workloads, const Fleet& fleet,
                       const hw::Catalog& catalog);

// One GPU instance at a placement.
struct Instance {
  int profile = 0;  // index into the model's MigSpec::profiles
  int start = 0;
};

// Why `layout` cannot exist on one GPU of `model`, or "" when it can. REQUIRES: MIG-capable.
std::string LayoutProblem(const hw::GpuModel& model, const std::vector<Instance>& layout);

// Every valid layout of a GPU of `model` over `profiles` (profile indices), by brute force.
// Multisets are counts per profile index (size: the model's profile count).
struct Configurations {
  long layouts = 0;                        // valid non-empty layouts
  long maximal_layouts = 0;                // ... to which no instance of `profiles` can be added
  std::vector<std::vector<int>> feasible;  // distinct multisets of the valid non-empty layouts
  std::vector<std::vector<int>> maximal;   // feasible multisets not inside a larger feasible one
  std::vector<std::vector<int>> of_maximal_layouts;  // distinct multisets of the maximal layouts
};
Configurations Enumerate(const hw::GpuModel& model, const std::vector<int>& profiles);

struct Optimum {
  enum class Status {
    kOptimal,     // `cost` is the least cost of the GPUs of any plan that places every workload
                  // that sizing can serve
    kInfeasible,  // no plan places all of them
    kUnknown,     // the solver stopped (time limit), or the brute force passed its limit
  };
  Status status = Status::kUnknown;
  double cost = 0;
  std::string detail;  // the configurations chosen, or why the answer is unknown
};

// The optimum by the compact assignment program above, solved by CBC within `time_limit_s`.
Optimum SolveIlp(const WorkloadSet& workloads, const Fleet& fleet, const hw::Catalog& catalog,
                 double time_limit_s);

// The optimum by exhaustive search, for tiny fleets (a few GPUs and workloads): kUnknown when
// more than `max_fleet_choices` combinations of GPU configurations would have to be tried.
Optimum BruteForce(const WorkloadSet& workloads, const Fleet& fleet, const hw::Catalog& catalog,
                   long max_fleet_choices = 200000);

// Checks `plan` against the rules above and the oracle's own sizing. Returns the problems found
// (empty: feasible).
std::vector<std::string> CheckPlan(const PlanResult& plan, const WorkloadSet& workloads,
                                   const Fleet& fleet, const hw::Catalog& catalog);

}  // namespace gpuslice::plan::oracle
