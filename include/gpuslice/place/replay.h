// gpuslice/place/replay.h
//
// Trace replay under the FGD artefact's protocol (../shared/reference/fgd-protocol.md), so that an
// operator can compare placement policies on a cluster's own request trace:
//   * nodes: a CSV `sn,cpu_milli,memory_mib,gpu,model` (Alibaba cluster-trace-gpu-v2023's
//     openb_node_list_gpu_node.csv); every GPU has 1000 milli;
//   * pods: a CSV with at least `name,cpu_milli,memory_mib,num_gpu,gpu_milli` and optionally
//     `gpu_spec` (allowed models, '|'-separated); every row is a request, none departs;
//   * arrival: the pods sorted by name, shuffled with the seed, then tuned to `target_ratio` of
//     the cluster's GPU capacity: random clones of the original pods appended at the end until
//     the next one would pass the target (its per-GPU milli), or random pods removed while the
//     demand is above it;
//   * each pod is placed by the engine or fails (never retried); after every pod the allocated
//     and arrived GPU milli are recorded; the curve is the mean allocation (% of GPUs) per
//     arrived-demand percentage 0..130, with the artefact's rounding.
// Every draw comes from Go's math/rand (gpuslice/place/go_rand.h) in the artefact's order, so a
// seed's arrival sequence (shuffle, clones, removals) is the artefact's bit for bit and results
// compare with its figures seed by seed. The node tie-break ranks are Go's Perm after the tuning
// and kInformerDraws Float64 draws: the Kubernetes informers the simulator starts draw their watch
// time-outs from the same source first (fgd-protocol.md §2.5 leaves their number open; with 10,
// FGD's and BestFit's results match the artefact's seed by seed, see docs/BENCHMARKS.md).
//
// MIG variant (ReplayOptions::mig): every GPU becomes MIG-capable (nodes with 8 GPUs H100-80GB,
// others A100-80GB; the node's model label stays, so gpu_spec constraints keep their meaning) and
// every share is rounded up to the smallest MIG profile holding it (1g, 2g, 3g, 4g or 7g of 7).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/place/policy.h"

namespace gpuslice::place {

struct TracePod {
  std::string name;
  Request request;
};

// Strict CSV readers: errors name the file, line and column.
absl::StatusOr<std::vector<NodeSpec>> ReadNodesCsv(const std::string& path);
absl::StatusOr<std::vector<TracePod>> ReadPodsCsv(const std::string& path);

struct ReplayOptions {
  double target_ratio = 1.3;
  bool mig = false;
  // The gpuslice policy gets no typical requests and learns the mix from the stream as it
  // arrives (what a live scheduler must do); other policies are unaffected.
  bool learn = false;
};

// Converts a trace to the MIG variant (see above). Fails if a catalog model is missing.
absl::Status ConvertToMig(std::vector<NodeSpec>& nodes, std::vector<TracePod>& pods);

inline constexpr int kInformerDraws = 10;

// The arrival sequence of one seed (shuffle + tuning), and the node tie-break ranks.
struct Arrivals {
  std::vector<const TracePod*> pods;  // points into the trace; clones repeat pointers
  std::vector<int> node_rank;
  std::int64_t demand_milli = 0;  // Σ num_gpu · milli over the sequence
};
Arrivals MakeArrivals(const std::vector<TracePod>& trace, int node_count, int total_gpus,
                      std::uint64_t seed, double target_ratio);

inline constexpr int kCurvePoints = 131;  // arrived demand 0..130 % of capacity

struct ReplayResult {
  std::string policy;
  std::uint64_t seed = 0;
  // Mean GPU allocation (%) at each arrived-demand percentage; NaN where no event fell near it.
  std::array<double, kCurvePoints> curve{};
  double alloc_ratio = 0;        // curve at the last point (130 by default), %
  double unallocated_gpus = 0;   // total GPUs × (1 − alloc_ratio / 100)
  double final_alloc_ratio = 0;  // allocation after the last pod, %
  int pods = 0;
  int placed = 0;
  int failed = 0;
  double seconds = 0;  // wall time of the scheduling loop
};

// Replays one seed with one policy. `typical` are the trace's typical requests (TypicalRequests of
// the original pods). Fails on an invalid cluster or an internal placement error.
absl::StatusOr<ReplayResult> Replay(const std::vector<NodeSpec>& nodes,
                                    const std::vector<TracePod>& trace,
                                    const std::vector<TypicalRequest>& typical,
                                    const std::string& policy, std::uint64_t seed,
                                    const ReplayOptions& options = {});

}  // namespace gpuslice::place
