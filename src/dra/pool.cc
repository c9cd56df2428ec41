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

std::vector<ResourceSlice> Split(const std::vector<GpuInfo>& gpus,
                                 const std::vector<GpuDevices>& per_gpu,
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
  auto add_devices = [&](const std::vector<Device>& devices) {
    for (size_t i = 0; i < devices.size(); ++i) {
      if (i % static_cast<size_t>(kMaxDevicesPerSliceWithCounters) == 0) {
        slices.push_back(EmptySlice(options));
      }
      slices.back().devices.push_back(devices[i]);
    }
  };
  if (options.use != nullptr) {
    add_devices(PreferenceOrder(gpus, per_gpu, *options.use));
  } else {
    for (const GpuDevices& gpu : per_gpu) add_devices(gpu.devices);
  }
  return slices;
}

absl::StatusOr<std::vector<ResourceSlice>> Combined(const std::vector<GpuInfo>& gpus,
                                                    const std::vector<GpuDevices>& per_gpu,
                                                    const PoolOptions& options) {
  std::vector<ResourceSlice> slices;
  for (size_t g = 0; g < per_gpu.size(); ++g) {
    const GpuDevices& gpu = per_gpu[g];
    if (gpu.devices.size() > static_cast<size_t>(kMaxDevicesPerSliceWithCounters)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "a GPU offers ", gpu.devices.size(),
          " devices, more than one Kubernetes 1.34 slice holds (64); use Kubernetes 1.35+"));
    }
    ResourceSlice slice = EmptySlice(options);
    slice.shared_counters = gpu.counter_sets;
    slice.devices = options.use == nullptr ? gpu.devices
                                           : PreferenceOrder({gpus[g]}, {gpu}, {(*options.use)[g]});
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
  if (options.use != nullptr && options.use->size() != gpus.size()) {
    return absl::InvalidArgumentError("one GpuUse per GPU is needed");
  }
  absl::StatusOr<std::vector<ResourceSlice>> slices = options.layout == SliceLayout::kSplit
                                                          ? Split(gpus, per_gpu, options)
                                                          : Combined(gpus, per_gpu, options);
  if (!slices.ok()) return slices.status();
  if (slices->empty()) slices->push_back(EmptySlice(options));  // an empty pool still says so
  for (size_t i = 0; i < slices->size(); ++i) {
    ResourceSlice& slice = (*slices)[i];
    slice.index = static_cast<int>(i);
    slice.slice_count = static_cast<std::int64_t>(slices->size());
    if (absl::Status s = Validate(slice, options.layout == SliceLayout::kCombined); !s.ok()) {
      return absl::InternalError(absl::StrCat("built an invalid slice: ", s.message()));
    }
  }
  return slices;
}

}  // namespace gpuslice::dra
