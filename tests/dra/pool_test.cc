// The pool's slices: the API server's limits, the split by Kubernetes version, names and JSON.
#include "gpuslice/dra/pool.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "dra/standin_scheduler.h"
#include "gpuslice/hw/catalog.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra {
namespace {

std::vector<GpuInfo> Node(const std::string& model, int gpus) {
  std::vector<GpuInfo> out;
  for (int i = 0; i < gpus; ++i) {
    GpuInfo gpu;
    gpu.index = i;
    gpu.uuid = "GPU-" + std::to_string(1000 + i);
    gpu.model = hw::Catalog::Builtin().Find(model);
    gpu.driver_version = "535.104.05";
    out.push_back(gpu);
  }
  return out;
}

TEST(DraPool, EightH100sSplitIntoCounterAndDeviceSlices) {
  PoolOptions options{"node-a", 3, SliceLayout::kSplit};
  absl::StatusOr<std::vector<ResourceSlice>> pool = BuildPool(Node("H100-80GB", 8), options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  size_t counter_slices = 0;
  std::set<std::string> devices;
  std::set<std::string> sets;
  for (const ResourceSlice& slice : *pool) {
    EXPECT_TRUE(Validate(slice).ok());
    EXPECT_EQ(slice.slice_count, static_cast<std::int64_t>(pool->size()));
    EXPECT_EQ(slice.generation, 3);
    EXPECT_TRUE(slice.devices.empty() || slice.shared_counters.empty());
    EXPECT_LE(slice.devices.size(), 64u);
    EXPECT_LE(slice.shared_counters.size(), 8u);
    if (!slice.shared_counters.empty()) ++counter_slices;
    for (const Device& d : slice.devices) EXPECT_TRUE(devices.insert(d.name).second) << d.name;
    for (const CounterSet& s : slice.shared_counters) EXPECT_TRUE(sets.insert(s.name).second);
    const nlohmann::json json = ToJson(slice, "uid-1");
    EXPECT_EQ(json["apiVersion"], "resource.k8s.io/v1");
    EXPECT_EQ(json["spec"]["pool"]["name"], "node-a");
    EXPECT_EQ(json["spec"]["nodeName"], "node-a");
    EXPECT_EQ(json["spec"]["driver"], kDriverName);
    EXPECT_EQ(json["metadata"]["ownerReferences"][0]["kind"], "Node");
    EXPECT_NE(json["spec"].contains("devices"), json["spec"].contains("sharedCounters"));
  }
  EXPECT_EQ(counter_slices, 1u);  // 8 GPUs, one set each
  EXPECT_EQ(sets.size(), 8u);
  EXPECT_TRUE(devices.contains("gpu-7"));
  EXPECT_TRUE(devices.contains(MigDeviceName(7, "1g.10gb", 6)));
  EXPECT_TRUE(devices.contains(MigDeviceName(0, "7g.80gb", 0)));
}

TEST(DraPool, Kubernetes134KeepsEachGpusCountersWithItsDevices) {
  PoolOptions options{"node-a", 1, LayoutFor("v1.34.2")};
  ASSERT_EQ(options.layout, SliceLayout::kCombined);
  absl::StatusOr<std::vector<ResourceSlice>> pool = BuildPool(Node("A100-80GB", 2), options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_EQ(pool->size(), 2u);
  for (const ResourceSlice& slice : *pool) {
    EXPECT_FALSE(slice.shared_counters.empty());
    EXPECT_FALSE(slice.devices.empty());
    for (const Device& d : slice.devices) {
      for (const CounterConsumption& c : d.consumes_counters) {
        bool here = false;
        for (const CounterSet& s : slice.shared_counters) here = here || s.name == c.counter_set;
        EXPECT_TRUE(here) << d.name;
      }
    }
  }
}

TEST(DraPool, LayoutByVersion) {
  EXPECT_EQ(LayoutFor("v1.34.0"), SliceLayout::kCombined);
  EXPECT_EQ(LayoutFor("1.33.5+k3s1"), SliceLayout::kCombined);
  EXPECT_EQ(LayoutFor("v1.35.0"), SliceLayout::kSplit);
  EXPECT_EQ(LayoutFor("v1.36.1-gke.100"), SliceLayout::kSplit);
  EXPECT_EQ(LayoutFor("v2.0.0"), SliceLayout::kSplit);
  EXPECT_EQ(LayoutFor("garbage"), SliceLayout::kSplit);
}

TEST(DraPool, GpusWithoutMigOfferTheWholeGpuOnly) {
  std::vector<GpuInfo> gpus = Node("A100-80GB", 1);
  gpus[0].mig_on_demand = false;
  absl::StatusOr<std::vector<ResourceSlice>> pool = BuildPool(gpus, {"n", 1, SliceLayout::kSplit});
  ASSERT_TRUE(pool.ok());
  ASSERT_EQ(pool->size(), 1u);
  ASSERT_EQ((*pool)[0].devices.size(), 1u);
  const Device& gpu = (*pool)[0].devices[0];
  EXPECT_EQ(gpu.name, "gpu-0");
  EXPECT_TRUE(gpu.consumes_counters.empty());
  EXPECT_EQ(std::get<std::string>(gpu.attributes.at("type")), "gpu");
  EXPECT_EQ(std::get<Version>(gpu.attributes.at("driverVersion")).text, "535.104.5");
  EXPECT_EQ(std::get<Version>(gpu.attributes.at("cudaComputeCapability")).text, "8.0.0");
}

TEST(DraPool, BadInput) {
  EXPECT_FALSE(BuildPool(Node("A100-80GB", 1), {"", 1, SliceLayout::kSplit}).ok());
  std::vector<GpuInfo> unknown(1);
  EXPECT_FALSE(BuildPool(unknown, {"n", 1, SliceLayout::kSplit}).ok());
  // An empty node still publishes its (empty) pool.
  absl::StatusOr<std::vector<ResourceSlice>> empty = BuildPool({}, {"n", 1, SliceLayout::kSplit});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 1u);
}

TEST(DraNames, LabelsAndVersions) {
  EXPECT_EQ(DnsLabelOf("1g.10gb+me"), "1g-10gb-me");
  EXPECT_EQ(MigDeviceName(3, "1g.10gb+me", 6), "gpu-3-mig-1g-10gb-with-me-6");
  EXPECT_EQ(MigDeviceName(3, "1g.10gb-me", 6), "gpu-3-mig-1g-10gb-without-me-6");
  EXPECT_NE(MigDeviceName(0, "1g.24gb+me.all", 0), MigDeviceName(0, "1g.24gb+me", 0));
  EXPECT_TRUE(IsDnsLabel("gpu-0-mig-7g-80gb-0"));
  EXPECT_FALSE(IsDnsLabel("-a"));
  EXPECT_FALSE(IsDnsLabel(std::string(64, 'a')));
  EXPECT_EQ(SemverOf("8.0"), "8.0.0");
  EXPECT_EQ(SemverOf("550.54.15"), "550.54.15");
  EXPECT_EQ(SemverOf("535.104.05"), "535.104.5");
  EXPECT_EQ(SemverOf("abc"), "");
  EXPECT_EQ(SemverOf("1.2.3.4"), "");
  EXPECT_EQ(SemverOf(""), "");
}

TEST(DraSlice, ValidateRejectsWhatTheApiServerRejects) {
  ResourceSlice slice;
  slice.driver = kDriverName;
  slice.node_name = "n";
  slice.devices.push_back({"ok", {}, {}, {}, false, {}});
  EXPECT_TRUE(Validate(slice).ok());
  slice.shared_counters.push_back({"set", {{"c", Count(1)}}});
  EXPECT_FALSE(Validate(slice).ok());  // devices and counters together
  slice.shared_counters.clear();
  slice.devices.push_back({"ok", {}, {}, {}, false, {}});
  EXPECT_FALSE(Validate(slice).ok());  // repeated name
  slice.devices.back().name = "Bad_Name";
  EXPECT_FALSE(Validate(slice).ok());
  slice.devices.back().name = "long";
  slice.devices.back().attributes["productName"] = std::string(65, 'x');
  EXPECT_FALSE(Validate(slice).ok());
  slice.devices.back().attributes["productName"] = std::string("x");
  slice.devices.back().attributes["driverVersion"] = Version{"535.104.05"};
  EXPECT_FALSE(Validate(slice).ok());  // leading zero
  slice.devices.back().attributes["driverVersion"] = Version{"535.104.5"};
  EXPECT_TRUE(Validate(slice).ok());
  slice.devices.back().capacity["memory"] = {Mebibytes(100), RequestPolicy{}};
  EXPECT_FALSE(Validate(slice).ok());  // a request policy needs allowMultipleAllocations
  slice.devices.back().allow_multiple_allocations = true;
  slice.devices.back().capacity["memory"].request_policy =
      RequestPolicy{Mebibytes(10), Mebibytes(10), Mebibytes(100), Mebibytes(10)};
  EXPECT_TRUE(Validate(slice).ok());
  for (int i = 0; i < 64; ++i) {
    slice.devices.push_back(
        {"d" + std::to_string(i), {}, {}, {{"set", {{"c", Count(1)}}}}, false, {}});
  }
  EXPECT_FALSE(Validate(slice).ok());  // 66 devices with counters
  // Kubernetes 1.34: a device may only consume a set of its own slice.
  ResourceSlice old;
  old.driver = kDriverName;
  old.node_name = "n";
  old.devices.push_back({"d", {}, {}, {{"set", {{"c", Count(1)}}}}, false, {}});
  EXPECT_FALSE(Validate(old, /*kubernetes_134=*/true).ok());
  old.shared_counters.push_back({"set", {{"c", Count(1)}}});
  EXPECT_TRUE(Validate(old, /*kubernetes_134=*/true).ok());
  EXPECT_FALSE(Validate(old).ok());  // 1.35+: not in one slice
}

TEST(DraStandin, QuantitiesAreCompared) {
  using testing_standin::ParseQuantity;
  EXPECT_EQ(ParseQuantity("7"), 7);
  EXPECT_EQ(ParseQuantity("1Gi"), 1073741824);
  EXPECT_EQ(ParseQuantity("81920Mi"), 81920LL * 1048576);
  EXPECT_EQ(ParseQuantity("1500m"), 2);  // rounded up
}

}  // namespace
}  // namespace gpuslice::dra

namespace gpuslice::dra {
namespace {

// The preference order (preference.h) on two H100s.
TEST(DraPreference, FirstFitTakesThePreferredPlacement) {
  std::vector<GpuInfo> gpus = Node("H100-80GB", 2);
  std::vector<GpuUse> use(2);
  PoolOptions options{"node-a", 1, SliceLayout::kSplit, &use};
  auto first_of = [&](const std::string& profile) -> std::string {
    absl::StatusOr<std::vector<ResourceSlice>> pool = BuildPool(gpus, options);
    EXPECT_TRUE(pool.ok());
    std::vector<nlohmann::json> slices;
    for (const ResourceSlice& slice : *pool) slices.push_back(ToJson(slice));
    testing_standin::StandinScheduler scheduler;
    EXPECT_TRUE(scheduler.Load(slices).ok());
    for (size_t g = 0; g < use.size(); ++g) {
      for (const geometry::Placed& p : use[g].instances) {
        scheduler.Allocate(MigDeviceName(static_cast<int>(g),
                                         gpus[g].model->mig->profiles[p.profile].name, p.start));
      }
    }
    return scheduler.FirstFit([&](const nlohmann::json& d) {
      return d["attributes"].contains("profile") && d["attributes"]["profile"]["string"] == profile;
    });
  };
  const hw::MigSpec& mig = *gpus[0].model->mig;
  const auto index = [&](const char* name) {
    return static_cast<std::uint8_t>(mig.IndexOf(*mig.FindProfile(name)));
  };
  // Empty node: GPU 0, at a start that keeps a 4g and a 3g possible beside it.
  const std::string first = first_of("1g.10gb");
  EXPECT_EQ(first.rfind("gpu-0-mig-1g-10gb-", 0), 0u) << first;
  EXPECT_NE(first, MigDeviceName(0, "1g.10gb", 0));
  // GPU 0 taken whole by a 7g: the next 1g goes to GPU 1.
  use[0].instances.push_back({index("7g.80gb"), 0});
  EXPECT_EQ(first_of("1g.10gb").rfind("gpu-1-", 0), 0u);
  EXPECT_EQ(first_of("7g.80gb"), MigDeviceName(1, "7g.80gb", 0));
  // Both GPUs full: nothing fits, whatever the order.
  use[1].instances.push_back({index("7g.80gb"), 0});
  EXPECT_EQ(first_of("1g.10gb"), "");
}

TEST(DraPreference, TheOrderIsAPermutationOfThePool) {
  std::vector<GpuInfo> gpus = Node("A100-80GB", 3);
  std::vector<GpuUse> use(3);
  use[1].instances.push_back({0, 0});
  absl::StatusOr<std::vector<ResourceSlice>> by_name =
      BuildPool(gpus, {"n", 1, SliceLayout::kSplit, nullptr});
  absl::StatusOr<std::vector<ResourceSlice>> preferred =
      BuildPool(gpus, {"n", 1, SliceLayout::kSplit, &use});
  ASSERT_TRUE(by_name.ok() && preferred.ok());
  std::multiset<std::string> a;
  std::multiset<std::string> b;
  for (const ResourceSlice& s : *by_name) {
    for (const Device& d : s.devices) a.insert(d.name);
  }
  for (const ResourceSlice& s : *preferred) {
    for (const Device& d : s.devices) b.insert(d.name);
    EXPECT_TRUE(Validate(s).ok());
  }
  EXPECT_EQ(a, b);
  const std::vector<GpuUse> too_few(1);
  EXPECT_FALSE(BuildPool(gpus, {"n", 1, SliceLayout::kSplit, &too_few}).ok());
}

}  // namespace
}  // namespace gpuslice::dra
