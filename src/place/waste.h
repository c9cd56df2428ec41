// Internal: the gpuslice policy's expected-waste model (docs/PLACEMENT.md).
//
// The waste of a GPU is the GPU capacity (milli) expected to stay unallocated for good, given
// what it has free, the CPU its node has free and the mix of requests that keep arriving:
//
//   waste(state, cpu) = (1 − f) · free(state)
//                     + f · Σ_{t fits} (w_t / r) · waste(state after t, cpu − cpu_t)
//   r = Σ_{t fits} w_t      (the share of the request stream that could still use this GPU)
//   f = min(1, κ · r)       (how likely such a request comes before the capacity runs out)
//
// where t ranges over the typical requests with weights w_t (CPU-only requests never fit a GPU),
// "fits" means t's per-GPU part fits the GPU's free capacity (shared GPUs), a free placement of
// t's MIG profile exists (MIG GPUs; the start chosen as the cluster would), or the GPU is
// completely free (whole-GPU requests), and t's CPU fits the CPU left. A hole that only rare
// requests fit is expected to stay mostly empty; one that common requests fit, mostly filled. So
// unlike FGD's measure, a 190-milli hole counts as nearly all waste, a 470-milli hole as little,
// and a MIG GPU's free units that no profile can start on as waste in full.
//
// Shared GPUs: a table over free milli (10-milli steps) × free CPU (1-core steps), built once per
// set of typical requests. MIG GPUs: memoised per (model, used placement units, instances of each
// profile, CPU).
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "gpuslice/place/cluster.h"
#include "gpuslice/place/policy.h"

namespace gpuslice::place::internal {

class WasteModel {
 public:
  // κ for shared GPUs (fine-grained holes, many of them) and for MIG GPUs (a few coarse slots);
  // calibrated on the Alibaba default trace, checked on the others (docs/PLACEMENT.md).
  static constexpr double kSharedKappa = 30;
  static constexpr double kMigKappa = 5;

  void Build(const std::vector<TypicalRequest>& typical, double shared_kappa = kSharedKappa,
             double mig_kappa = kMigKappa);

  // Waste of a shared-mode GPU with `free_milli` free on a node with `cpu_free` milli-CPU free.
  double Shared(int free_milli, std::int64_t cpu_free) const;
  // Waste of a whole-mode GPU (free or taken).
  double Whole(bool free, std::int64_t cpu_free) const;
  // Waste of a MIG GPU of `shape` with `occupancy`.
  double Mig(const geometry::Shape& shape, const geometry::Occupancy& occupancy,
             std::int64_t cpu_free) const;

 private:
  static constexpr int kMilliSteps = 101;  // 0..1000 in 10-milli steps
  static constexpr int kCpuSteps = 130;    // 0..129 cores
  static int CpuStep(std::int64_t cpu_milli);
  double SharedAt(int step, int cpu) const {
    return shared_[static_cast<size_t>(cpu * kMilliSteps + step)];
  }
  double MigAt(const geometry::Shape& shape, const geometry::Occupancy& occupancy, int cpu) const;

  struct Typical {
    int milli_steps = 0;  // per-GPU part, rounded up to 10-milli steps
    int cpu_steps = 0;    // CPU rounded up to cores
    bool whole = false;
    Request request;  // for resolving the MIG profile as the cluster does
    double weight = 0;
  };
  std::vector<Typical> typical_;
  double shared_kappa_ = kSharedKappa;
  double mig_kappa_ = kMigKappa;
  std::vector<double> shared_;
  // The placement units in use and the instances per profile identify the state.
  using MigKey = std::tuple<const geometry::Shape*, geometry::UnitMask, geometry::Counts, int>;
  mutable std::map<MigKey, double> mig_;
  mutable std::map<const geometry::Shape*, std::vector<int>> mig_profiles_;
};

}  // namespace gpuslice::place::internal
