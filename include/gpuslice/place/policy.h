// gpuslice/place/policy.h
//
// Placement policies: how to rank the nodes a request fits on, and which GPUs (and MIG
// placements) to take on the chosen node. Policies are pluggable and run side by side in a trace
// replay (gpuslice/place/replay.h).
//
// The baselines and FGD follow the definitions of the FGD artefact (USENIX ATC'23,
// ../shared/reference/fgd-protocol.md §4), including their integer truncation:
//   random          one feasible node uniformly; a random fitting GPU for shares
//   dotprod         Tetris-like: smallest dot product of free (CPU, GPU) and the request
//   gpuclustering   nodes already running the same kind of GPU request
//   gpupacking      partly used GPUs first, then used nodes' free GPUs, then empty nodes
//   bestfit         the node left with the least free CPU and GPU
//   fgd             fragmentation gradient descent: the node and GPU that grow the expected
//                   fragmentation (against the typical requests) the least
//   gpuslice        ours (docs/PLACEMENT.md): FGD's fragmentation measured exactly (no truncation),
//                   weighted by what the request stream actually asks for as it evolves, aware of
//                   MIG placements, with ties broken towards fuller nodes and whole GPUs kept
//                   whole.
//
// Contract with the engine (gpuslice/place/engine.h): ScoreNode is called only for nodes the
// request Fits, and must depend only on that node's state, the request and the policy's own state,
// which may change only when epoch() changes; so the engine caches scores per node until the node
// or the epoch changes. Higher scores win; equal scores go to the node of lowest rank.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/place/cluster.h"

namespace gpuslice::place {

struct Score {
  std::int64_t primary = 0;
  std::int64_t secondary = 0;
  friend auto operator<=>(const Score&, const Score&) = default;
};

// A request class with its share of the request stream (FGD's "typical pods").
struct TypicalRequest {
  Request request;
  double weight = 0;
};

// FGD's typical requests of a trace: requests keyed by (cpu, milli per GPU, GPU count, model
// list), most frequent first (ties by the larger key), kept until they cover `coverage` of all
// requests, weights renormalised to sum 1.
std::vector<TypicalRequest> TypicalRequests(std::span<const Request> requests,
                                            double coverage = 0.95);

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;

  // REQUIRES: cluster.Fits(node, request).
  virtual Score ScoreNode(const Cluster& cluster, int node, const Request& request) const = 0;
  // The GPUs to take on the chosen node. REQUIRES: cluster.Fits(node, request). The default:
  // whole GPUs = the lowest-index completely free ones; a share = the fitting GPU with the least
  // free capacity (lowest index on ties).
  virtual std::vector<GpuClaim> ChooseGpus(const Cluster& cluster, int node,
                                           const Request& request);
  // True for the random policy: the engine picks a feasible node uniformly with Pick().
  virtual bool picks_uniformly() const { return false; }
  virtual int Pick(int feasible_nodes) {
    (void)feasible_nodes;
    return 0;
  }
  // Told every request once decided (placed or not). A policy that learns from the stream
  // changes epoch() when that invalidates its earlier scores.
  virtual void Observe(const Request& request, bool placed) {
    (void)request;
    (void)placed;
  }
  virtual std::uint64_t epoch() const { return 0; }
};

struct PolicyOptions {
  // FGD's typical requests (and the gpuslice policy's starting estimate of the stream).
  std::vector<TypicalRequest> typical;
  std::uint64_t seed = 42;  // random policy
};

// The policy names, in the order replays report them.
const std::vector<std::string>& PolicyNames();
// NotFound with the list of names for an unknown one.
absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name,
                                                   const PolicyOptions& options);

// Default GPU choice (see Policy::ChooseGpus), for policies to reuse.
std::vector<GpuClaim> BestFitGpus(const Cluster& cluster, int node, const Request& request);

}  // namespace gpuslice::place
