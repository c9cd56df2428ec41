#include "gpuslice/dra/pool.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gpuslice::dra {
namespace {

ResourceSlice EmptySlice(const PoolOptions& options) {
  ResourceSlice slice;
  slice.driver = kDriverName;
  slice.node_name = options.node_name;
  slice.generation = options.generation;
  return slice;
}

std::vector<ResourceSlice> Split(const std::vector<GpuDevices>& per_gpu,
                                 const PoolOptions& options) {
  std::vector<ResourceSlice> slices;
  for (const GpuDevices& gpu : per_gpu) {
    for (const CounterSet& set : gpu.counter_sets) {
      if (slices.empty() ||
          slices.back().shared_counters.size() >= static_cast<size_t>(kMaxCounterSetsPerSlice)) {
        slices.push_back(EmptySlice(options));
      }
      slices.back().shared_counters.push_back(set);
    }
  }
  for (const GpuDevices& gpu : per_gpu) {
    for (size_t i = 0; i < gpu.devices.size(); ++i) {
      if (i % static_cast<size_t>(kMaxDevicesPerSliceWithCounters) == 0) {
        slices.push_back(EmptySlice(options));
      }
      slices.back().devices.push_back(gpu.devices[i]);
    }
  }
  return slices;
}

absl::StatusOr<std::vector<ResourceSlice>> Combined(const std::vector<GpuDevices>& per_gpu,
                                                    const PoolOptions& options) {
  std::vector<ResourceSlice> slices;
  for (const GpuDevices& gpu : per_gpu) {
    if (gpu.devices.size() > static_cast<size_t>(kMaxDevicesPerSliceWithCounters)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "a GPU offers ", gpu.devices.size(),
          " devices, more than one Kubernetes 1.34 slice holds (64); use Kubernetes 1.35+"));
    }
    ResourceSlice slice = EmptySlice(options);
    slice.shared_counters = gpu.counter_sets;
    slice.devices = gpu.devices;
    slices.push_back(std::move(slice));
  }
  return slices;
}

}  // namespace

SliceLayout LayoutFor(const std::string& git_version) {
  std::string v = git_version;
  if (!v.empty() && v[0] == 'v') v.erase(0, 1);
  std::vector<std::string> parts = absl::StrSplit(v, absl::ByAnyChar(".-+"));
  int major = 0;
  int minor = 0;
  if (parts.size() >= 2 && absl::SimpleAtoi(parts[0], &major) &&
      absl::SimpleAtoi(parts[1], &minor) && (major < 1 || (major == 1 && minor < 35))) {
    return SliceLayout::kCombined;
  }
  return SliceLayout::kSplit;
}

absl::StatusOr<std::vector<ResourceSlice>> BuildPool(const std::vector<GpuInfo>& gpus,
                                                     const PoolOptions& options) {
  if (!IsDnsLabel(DnsLabelOf(options.node_name)) || options.node_name.empty()) {
    return absl::InvalidArgumentError("the node name is empty or not a valid name");
  }
  std::vector<GpuDevices> per_gpu;
  for (const GpuInfo& gpu : gpus) {
    if (gpu.model == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("GPU ", gpu.index, " has no catalog model"));
    }
    per_gpu.push_back(DevicesOf(gpu));
  }
  absl::StatusOr<std::vector<ResourceSlice>> slices =
      options.layout == SliceLayout::kSplit ? Split(per_gpu, options) : Combined(per_gpu, options);
  if (!slices.ok()) return slices.status();
  if (slices->empty()) slices->push_back(EmptySlice(options));  // an empty pool still says so
  for (ResourceSlice& slice : *slices) {
    slice.slice_count = static_cast<std::int64_t>(slices->size());
    if (absl::Status s = Validate(slice, options.layout == SliceLayout::kCombined); !s.ok()) {
      return absl::InternalError(absl::StrCat("built an invalid slice: ", s.message()));
    }
  }
  return slices;
}

}  // namespace gpuslice::dra
