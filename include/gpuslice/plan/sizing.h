// gpuslice/plan/sizing.h
//
// Sizing: which instances (GI profile, or the whole GPU) of each GPU model can serve a workload,
// and how much of its demand one instance covers. Pure and deterministic.
//
// Rules (docs/PLANNING.md):
//   * memory: an instance must hold peak x (1 + headroom); fine-tune uses its own headroom and at
//     least fine_tune_min_compute_slices unless the peak was measured; notebooks only get profiles
//     with at most notebook_max_compute_slices;
//   * media: the profile must have the engines the workload needs ("+me" variants are considered
//     only then); "-me", "+me.all" and "+gfx" variants are never proposed;
//   * throughput workloads: for each profile, the measured operating point (batch, processes) with
//     the highest throughput whose worst-case latency (wait factor x batch latency) stays within
//     (1 - margin) x SLO; a profile without a measurement on that GPU model is not an option;
//   * the whole GPU (MIG disabled) is always an option when it holds the workload (for throughput
//     workloads it is credited with the full-size instance's measurement unless the table has a
//     whole-GPU row); the packer decides whether it is worth a card.
// Workloads with no option on any allowed model are reported with the reason, never dropped.
#pragma once

#include <string>
#include <vector>

#include "gpuslice/hw/gpu_model.h"
#include "gpuslice/plan/model.h"

namespace gpuslice::plan {

inline constexpr int kWholeGpu = -1;  // "profile" index of a whole GPU with MIG disabled

// One way to serve part of a workload: an instance of `profile` on a GPU of `model`.
struct SizedOption {
  const hw::GpuModel* model = nullptr;
  int profile = kWholeGpu;  // index into model->mig->profiles, or kWholeGpu
  double capacity = 1;      // demand one instance covers (req/s, or 1 replica)
  // The operating point, for throughput workloads.
  int batch = 0;
  int processes = 1;
  double latency_ms = 0;
  double memory_gib = 0;   // memory of the instance
  int compute_slices = 0;  // of the profile (the model's MIG compute slices for a whole GPU)
};

struct WorkloadSizing {
  bool by_throughput = false;
  double demand = 0;  // replicas, or req/s
  int min_instances = 1;
  // Every admissible option; per model, cheapest first (fewest compute slices, then least memory,
  // then most capacity).
  std::vector<SizedOption> options;
  // One line per candidate GPU model, e.g. "14.2 GiB peak + 15% = 16.3 GiB -> 1g.18gb on H200".
  std::vector<std::string> explanation;
  std::string unsatisfiable;  // non-empty: why there is no option at all
};

// Sizes `workload` on each of `models` (the distinct models of the fleet that it may use; those
// not in workload.gpu_models are skipped with an explanation when gpu_models is set).
WorkloadSizing SizeWorkload(const Workload& workload,
                            const std::vector<const hw::GpuModel*>& models,
                            const SizingPolicy& policy);

// Display name of an option's instance: "3g.40gb" or "whole GPU".
std::string InstanceName(const SizedOption& option);

}  // namespace gpuslice::plan
