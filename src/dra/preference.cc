#include "gpuslice/dra/preference.h"

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>

#include "gpuslice/geometry/enumerate.h"

namespace gpuslice::dra {
namespace {

struct Keyed {
  // Smaller is preferred.
  std::tuple<int, int, std::int64_t, int, int> key;
  const Device* device;
};

struct GpuView {
  std::unique_ptr<geometry::Shape> shape;  // null for GPUs without MIG
  geometry::Occupancy occupancy;
  bool whole = false;
  bool empty = true;
};

std::int64_t FutureRoom(const geometry::Shape& shape, const geometry::Occupancy& occupancy) {
  const geometry::ProfileSet base = geometry::BaseProfiles(shape);
  std::int64_t room = 0;
  for (int p = 0; p < shape.profile_count(); ++p) {
    if (!base[static_cast<size_t>(p)]) continue;
    room += shape.FreeCount(occupancy, p);
  }
  return room;
}

Keyed KeyOf(const Device& device, int gpu_index, const GpuView& view) {
  const auto& type = std::get<std::string>(device.attributes.at("type"));
  if (type != "mig") {
    const bool feasible = view.empty && !view.whole;
    return {{feasible ? 0 : 1, 0, 0, gpu_index, 0}, &device};
  }
  const geometry::Shape& shape = *view.shape;
  const hw::GiProfile* profile =
      shape.mig().FindProfile(std::get<std::string>(device.attributes.at("profile")));
  const int p = shape.mig().IndexOf(*profile);
  const auto start =
      static_cast<int>(std::get<std::int64_t>(device.attributes.at("placementStart")));
  const bool feasible = !view.whole && shape.CanAdd(view.occupancy, p, start, {}).ok();
  if (!feasible) return {{1, 0, 0, gpu_index, start}, &device};
  geometry::Occupancy after = view.occupancy;
  shape.Add(after, p, start);
  return {{0, gpu_index, -FutureRoom(shape, after), 0, start}, &device};
}

}  // namespace

std::vector<Device> PreferenceOrder(const std::vector<GpuInfo>& gpus,
                                    const std::vector<GpuDevices>& per_gpu,
                                    const std::vector<GpuUse>& use) {
  std::vector<Keyed> keyed;
  for (size_t g = 0; g < gpus.size(); ++g) {
    GpuView view;
    view.whole = use[g].whole;
    view.empty = use[g].instances.empty() && !use[g].whole;
    if (gpus[g].model->mig_capable()) {
      view.shape = std::make_unique<geometry::Shape>(*gpus[g].model);
      view.occupancy = view.shape->OccupancyOf(use[g].instances);
    }
    for (const Device& device : per_gpu[g].devices)
      keyed.push_back(KeyOf(device, gpus[g].index, view));
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const Keyed& a, const Keyed& b) { return a.key < b.key; });
  std::vector<Device> out;
  out.reserve(keyed.size());
  for (const Keyed& k : keyed) out.push_back(*k.device);
  return out;
}

}  // namespace gpuslice::dra
