// gpuslice/dra/pool.h
//
// The ResourceSlices of one node's pool (pool name = node name), split as the API server's
// limits require (../shared/reference/kubernetes-dra.md §5.1, §8.7):
//   * kSplit (Kubernetes 1.35 and later): counter sets and devices may not share a slice. The
//     first slices hold the counter sets, at most 8 per slice; then each GPU's devices follow in
//     slices of at most 64.
//   * kCombined (1.34): each GPU's counter sets and devices in one slice (devices may only use
//     sets of their own slice); a GPU with more than 64 devices is an error.
// Every slice carries the pool's generation and the number of slices.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/dra/gpu_devices.h"
#include "gpuslice/dra/preference.h"
#include "gpuslice/dra/resource_model.h"

namespace gpuslice::dra {

enum class SliceLayout { kSplit, kCombined };

// The layout for an API server version "v1.34.2", "1.35.0", ...: kCombined before 1.35.
SliceLayout LayoutFor(const std::string& git_version);

struct PoolOptions {
  std::string node_name;
  std::int64_t generation = 1;
  SliceLayout layout = SliceLayout::kSplit;
  // What is allocated on each GPU now (one entry per GPU): the devices are then published in
  // preference order (gpuslice/dra/preference.h), across GPUs with kSplit and within each GPU
  // with kCombined. Null: each GPU's devices by name, GPU after GPU (NVIDIA's order).
  const std::vector<GpuUse>* use = nullptr;
};

// The pool's slices for these GPUs, each valid (Validate in resource_model.h).
absl::StatusOr<std::vector<ResourceSlice>> BuildPool(const std::vector<GpuInfo>& gpus,
                                                     const PoolOptions& options);

}  // namespace gpuslice::dra
