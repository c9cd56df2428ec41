// gpuslice/dra/preference.h
//
// Placements chosen against fragmentation. Kubernetes' scheduler sorts a pool's slices by name
// and takes the first device, in order, that matches a request and whose counters still fit
// (../shared/reference/kubernetes-dra.md §6.3). So the order in which the driver publishes its
// devices is its placement policy. Given what is allocated on each GPU now, PreferenceOrder puts
// first, among the devices of every kind:
//   1. devices that can be placed now before those that cannot (the counters keep a stale order
//      safe: an infeasible device is skipped, never wrongly granted);
//   2. the lowest-index GPU that holds it (first fit across GPUs: the high-index GPUs stay empty
//      for large requests; on the claim-trace benchmark this beat "the fullest GPU first");
//   3. on that GPU, the start that keeps the most future room: the largest sum over the base
//      profiles (1g, 2g, 3g, 4g, 7g) of how many more instances fit afterwards (FreeCount;
//      weighting them by placement size, its square or its cube changed nothing measurable);
//   4. then the lower start, so the order is deterministic.
// The driver republishes after every prepare and unprepare.
#pragma once

#include <vector>

#include "gpuslice/dra/gpu_devices.h"
#include "gpuslice/geometry/shape.h"

namespace gpuslice::dra {

// What is allocated on one GPU now.
struct GpuUse {
  std::vector<geometry::Placed> instances;  // profile indices of the GPU's model
  bool whole = false;                       // the whole-GPU device is allocated
};

// The devices of `per_gpu` (as DevicesOf made them for `gpus`) in preference order.
// REQUIRES: per_gpu.size() == gpus.size() == use.size().
std::vector<Device> PreferenceOrder(const std::vector<GpuInfo>& gpus,
                                    const std::vector<GpuDevices>& per_gpu,
                                    const std::vector<GpuUse>& use);

}  // namespace gpuslice::dra
