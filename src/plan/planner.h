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

// The least sum of costs[g] * n[g] over whole n[g] in [lower[g], upper[g]] that is at least
// `target` (costs in whole granules, > 0; lower <= upper), or `target` itself when the search
// passes `node_limit` nodes (never more than the true answer); when no sum reaches `target`, a
// value above every reachable sum. A plan's cost is set by whole GPU counts per price, so it can
// cost nothing in between: deep in a branching, with most counts fixed, the reachable sums are
// far apart, and a node's bound rises to the next one (exact mode).
long long LeastReachableSum(const std::vector<long long>& costs, const std::vector<int>& lower,
                            const std::vector<int>& upper, long long target, long node_limit);

}  // namespace gpuslice::plan::internal
