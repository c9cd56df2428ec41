// Internal to the planner: planning around instances that keep running (re-planning).
#pragma once

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/plan/plan.h"

namespace gpuslice::plan::internal {

// Like Plan(), but `kept[g]` (g in fleet order: node by node, GPUs in group order) lists running
// instances of GPU g that stay exactly where they are, with their workload and capacity. They
// count towards their workloads' demand, the GPUs holding them are paid for already, and new
// instances are only added around them. A kept whole-GPU instance leaves no room.
absl::StatusOr<PlanResult> PlanKeeping(const WorkloadSet& workloads, const Fleet& fleet,
                                       const hw::Catalog& catalog, const PlanOptions& options,
                                       const std::vector<std::vector<PlannedInstance>>& kept);

// The cheapest cost of the planner's integer program (docs/PLANNING.md) found by CBC alone on
// the whole program, without the planner's bounds, patterns or branching: an independent
// optimum for tests of small cases. Empty when CBC does not prove optimality within the time
// limit, or when some workload does not fit the fleet.
absl::StatusOr<std::optional<double>> WholeProgramOptimum(const WorkloadSet& workloads,
                                                          const Fleet& fleet,
                                                          const hw::Catalog& catalog,
                                                          double time_limit_s);

}  // namespace gpuslice::plan::internal
