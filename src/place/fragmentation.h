// Internal: FGD's fragmentation measure of a node against a weighted set of typical requests,
// generalised to MIG GPUs, with a per-node cache and O(typical × changed GPUs) evaluation of a
// hypothetical placement.
//
// For a typical request t and node n (all amounts in milli-GPU; memory plays no role):
//   frag_t(n) = idle(n)                       if t is CPU-only, t may not use n's GPU model,
//                                             n lacks t's CPU, or fewer than t.num_gpu GPUs of n
//                                             can host t's per-GPU part;
//             = Σ idle(g) over GPUs g of n that cannot host t's per-GPU part   otherwise.
//   F(n) = Σ_t weight_t · frag_t(n).
// "Can host": a share fits the GPU's free milli (shared GPUs) or a free placement of its MIG
// profile exists (MIG GPUs); a whole GPU must be completely free. idle(g) = Cluster::FreeMilli.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "gpuslice/place/cluster.h"
#include "gpuslice/place/policy.h"

namespace gpuslice::place::internal {

// A GPU as it would be after a hypothetical claim.
struct GpuAfter {
  int gpu = 0;
  int free_milli = 0;
  bool fully_free = false;
  bool taken_whole = false;
  geometry::Occupancy occupancy{};  // MIG
};

class Fragmentation {
 public:
  struct NodeFrag {
    std::uint64_t version = ~0ULL;
    double total = 0;
    std::int64_t idle = 0;
    std::vector<int> fit_count;           // per typical: GPUs that can host its per-GPU part
    std::vector<std::int64_t> nofit_sum;  // per typical: idle milli of GPUs that cannot
  };

  void SetTypical(std::vector<TypicalRequest> typical);
  const std::vector<TypicalRequest>& typical() const { return typical_; }

  // F(n), cached until the node changes.
  const NodeFrag& Of(const Cluster& cluster, int node) const;
  // F(n) after taking `cpu` milli-cores and changing the listed GPUs.
  double After(const Cluster& cluster, int node, std::int64_t cpu,
               std::span<const GpuAfter> changes) const;
  // The GPU as it would be after `claim`.
  static GpuAfter Apply(const Cluster& cluster, int node, const GpuClaim& claim);

 private:
  bool Hosts(const Cluster& cluster, int node, size_t t, const GpuAfter& gpu) const;
  int MigProfile(const Cluster& cluster, int node, size_t t) const;

  std::vector<TypicalRequest> typical_;
  mutable std::vector<NodeFrag> cache_;
  mutable std::map<const geometry::Shape*, std::vector<int>> mig_profiles_;
};

}  // namespace gpuslice::place::internal
