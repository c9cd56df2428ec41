// The DRA counters against the geometry's own validator, for every MIG model of the catalog:
//   * completeness: every valid layout can be allocated through the published counters;
//   * soundness (property): every set of devices the stand-in scheduler allocates is a layout the
//     validator accepts, and the whole GPU excludes every MIG device.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

#include "dra/standin_scheduler.h"
#include "gpuslice/dra/gpu_devices.h"
#include "gpuslice/dra/pool.h"
#include "gpuslice/geometry/enumerate.h"
#include "gpuslice/geometry/layout_text.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::dra {
namespace {

using testing_standin::StandinScheduler;

std::vector<const hw::GpuModel*> MigModels() {
  std::vector<const hw::GpuModel*> out;
  for (const hw::GpuModel& model : hw::Catalog::Builtin().models()) {
    if (model.mig_capable()) out.push_back(&model);
  }
  return out;
}

GpuInfo Gpu(const hw::GpuModel* model, int driver_branch) {
  GpuInfo gpu;
  gpu.index = 0;
  gpu.uuid = "GPU-00000000-0000-0000-0000-000000000000";
  gpu.model = model;
  gpu.driver_version = "550.54.15";
  gpu.driver_branch = driver_branch;
  return gpu;
}

StandinScheduler Load(const GpuInfo& gpu, SliceLayout layout) {
  PoolOptions options;
  options.node_name = "node-a";
  options.layout = layout;
  absl::StatusOr<std::vector<ResourceSlice>> pool = BuildPool({gpu}, options);
  EXPECT_TRUE(pool.ok()) << pool.status();
  std::vector<nlohmann::json> slices;
  if (pool.ok()) {
    for (const ResourceSlice& slice : *pool) slices.push_back(ToJson(slice, "uid-1"));
  }
  StandinScheduler scheduler;
  absl::Status loaded = scheduler.Load(slices);
  EXPECT_TRUE(loaded.ok()) << loaded;
  return scheduler;
}

// The layout of the allocated MIG devices, read back from their attributes.
std::vector<geometry::Placed> LayoutOf(const StandinScheduler& s, const hw::MigSpec& mig) {
  std::vector<geometry::Placed> layout;
  for (const std::string& name : s.allocated()) {
    const nlohmann::json& attributes = s.device(name)["attributes"];
    if (attributes["type"]["string"] != "mig") continue;
    const hw::GiProfile* profile =
        mig.FindProfile(attributes["profile"]["string"].get<std::string>());
    layout.push_back({static_cast<std::uint8_t>(mig.IndexOf(*profile)),
                      static_cast<std::uint8_t>(attributes["placementStart"]["int"].get<int>())});
  }
  return layout;
}

geometry::ProfileSet AvailableProfiles(const geometry::Shape& shape, int branch) {
  geometry::ProfileSet set;
  for (int p = 0; p < shape.profile_count(); ++p) {
    const hw::GiProfile& profile = shape.profile(p);
    set[static_cast<size_t>(p)] = branch == 0 || (profile.min_driver_branch <= branch &&
                                                  shape.mig().min_driver_branch <= branch);
  }
  return set;
}

TEST(DraCounters, EveryValidLayoutCanBeAllocated) {
  for (const hw::GpuModel* model : MigModels()) {
    const geometry::Shape shape(*model);
    for (int branch : {0, 470, 525}) {
      if (branch != 0 && model->mig->min_driver_branch > branch) continue;
      geometry::EnumerateOptions options;
      options.profiles = AvailableProfiles(shape, branch);
      options.rules.driver_branch = branch;
      const auto layouts = geometry::EnumerateLayouts(shape, options);
      ASSERT_FALSE(layouts.empty()) << model->id;
      for (SliceLayout slices : {SliceLayout::kSplit, SliceLayout::kCombined}) {
        StandinScheduler scheduler = Load(Gpu(model, branch), slices);
        for (const auto& layout : layouts) {
          std::vector<std::string> names;
          bool all = true;
          for (const geometry::Placed& placed : layout) {
            const std::string name =
                MigDeviceName(0, shape.profile(placed.profile).name, placed.start);
            all = all && scheduler.CanAllocate(name);
            if (!all) {
              ADD_FAILURE() << model->id << " R" << branch << ": " << name << " refused in "
                            << geometry::FormatLayout(shape, layout);
              break;
            }
            scheduler.Allocate(name);
            names.push_back(name);
          }
          EXPECT_FALSE(scheduler.CanAllocate(WholeDeviceName(0))) << model->id;
          for (const std::string& name : names) scheduler.Release(name);
          if (!all) break;
        }
        EXPECT_TRUE(scheduler.CanAllocate(WholeDeviceName(0)));
      }
    }
  }
}

RC_GTEST_PROP(DraCounters, WhatTheSchedulerAllocatesIsAValidLayout, ()) {
  static const std::vector<const hw::GpuModel*> models = MigModels();
  const hw::GpuModel* model = *rc::gen::elementOf(models);
  const int branch = *rc::gen::element(0, 470, 525);
  RC_PRE(branch == 0 || model->mig->min_driver_branch <= branch);
  const geometry::Shape shape(*model);
  StandinScheduler scheduler = Load(Gpu(model, branch), SliceLayout::kSplit);
  const std::vector<std::string>& devices = scheduler.devices();
  RC_ASSERT(!devices.empty());
  geometry::Rules rules;
  rules.driver_branch = branch;
  const int steps = *rc::gen::inRange(1, 40);
  for (int step = 0; step < steps; ++step) {
    const std::string name = *rc::gen::elementOf(devices);
    if (scheduler.allocated().contains(name)) {
      scheduler.Release(name);
      continue;
    }
    if (!scheduler.CanAllocate(name)) continue;
    scheduler.Allocate(name);
    const std::vector<geometry::Placed> layout = LayoutOf(scheduler, *model->mig);
    const geometry::Violation violation = shape.Validate(layout, rules);
    RC_ASSERT(violation.ok());
    if (scheduler.allocated().contains(WholeDeviceName(0)))
      RC_ASSERT(scheduler.allocated().size() == 1u);
  }
}

TEST(DraCounters, OlderDriversHideNewerProfilesAndKeepThreeAndFourApart) {
  const hw::GpuModel* a100 = hw::Catalog::Builtin().Find("A100-80GB");
  ASSERT_NE(a100, nullptr);
  StandinScheduler old_driver = Load(Gpu(a100, 470), SliceLayout::kSplit);
  const std::string four = MigDeviceName(0, "4g.40gb", 0);
  const std::string three = MigDeviceName(0, "3g.40gb", 4);
  ASSERT_TRUE(old_driver.CanAllocate(four));
  old_driver.Allocate(four);
  EXPECT_FALSE(old_driver.CanAllocate(three));
  StandinScheduler new_driver = Load(Gpu(a100, 0), SliceLayout::kSplit);
  new_driver.Allocate(four);
  EXPECT_TRUE(new_driver.CanAllocate(three));
}

}  // namespace
}  // namespace gpuslice::dra
