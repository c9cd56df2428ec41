#include "gpuslice/k8s/devices.h"

#include <gtest/gtest.h>

namespace gpuslice::k8s {
namespace {

NodeGpu Gpu(int index, bool mig) {
  NodeGpu gpu;
  gpu.index = index;
  gpu.uuid = "GPU-0000000" + std::to_string(index);
  gpu.product = "NVIDIA A100-SXM4-80GB";
  gpu.model = "A100-80GB";
  gpu.memory_mib = 81920;
  gpu.mig_enabled = mig;
  return gpu;
}

MigDevice Mig(int gi, std::string profile, int slices, int start, std::string uuid,
              int ci_slices = -1) {
  MigDevice mig;
  mig.gi = gi;
  mig.profile = std::move(profile);
  mig.gi_slices = slices;
  mig.ci_slices = ci_slices < 0 ? slices : ci_slices;
  mig.start = start;
  mig.uuid = std::move(uuid);
  return mig;
}

TEST(K8sDevices, MixedNodeOffersEachKindUnderItsName) {
  NodeSnapshot node;
  node.gpus.push_back(Gpu(0, false));
  node.gpus.push_back(Gpu(1, false));
  NodeGpu mig = Gpu(2, true);
  mig.mig_devices.push_back(Mig(3, "3g.40gb", 3, 4, "MIG-b"));
  mig.mig_devices.push_back(Mig(9, "1g.10gb+me", 1, 0, "MIG-a"));
  mig.mig_devices.push_back(Mig(10, "1g.10gb", 1, 1, "MIG-c"));
  node.gpus.push_back(mig);
  SharingConfig sharing;
  sharing.shared_gpus = {"1"};
  sharing.units = 4;

  const NodeResources out = ResourcesOf(node, sharing);
  ASSERT_EQ(out.resources.size(), 5u);
  EXPECT_EQ(out.resources.at("nvidia.com/gpu"),
            (std::vector<PluginDevice>{{"GPU-00000000", true, -1}}));
  const auto& shares = out.resources.at("gpuslice.io/gpu-share");
  ASSERT_EQ(shares.size(), 4u);
  EXPECT_EQ(shares[0].id, "GPU-00000001::0");
  EXPECT_EQ(shares[3].id, "GPU-00000001::3");
  EXPECT_EQ(out.resources.at("nvidia.com/mig-1g.10gb.me")[0].id, "MIG-a");
  EXPECT_EQ(out.resources.at("nvidia.com/mig-1g.10gb")[0].id, "MIG-c");
  EXPECT_EQ(out.resources.at("nvidia.com/mig-3g.40gb")[0].id, "MIG-b");
  EXPECT_TRUE(out.skipped.empty());
}

TEST(K8sDevices, SplitGpuInstanceIsSkippedWithReason) {
  NodeSnapshot node;
  NodeGpu gpu = Gpu(0, true);
  gpu.mig_devices.push_back(Mig(1, "4g.40gb", 4, 0, "MIG-x", 2));
  node.gpus.push_back(gpu);
  const NodeResources out = ResourcesOf(node, {});
  EXPECT_TRUE(out.resources.empty());
  ASSERT_EQ(out.skipped.size(), 1u);
  EXPECT_NE(out.skipped[0].find("smaller than its GPU instance"), std::string::npos);
}

TEST(K8sDevices, UnhealthyGpuMarksAllItsDevices) {
  NodeSnapshot node;
  NodeGpu gpu = Gpu(0, false);
  gpu.healthy = false;
  gpu.numa_node = 1;
  node.gpus.push_back(gpu);
  SharingConfig sharing{{"all"}, 2};
  const NodeResources out = ResourcesOf(node, sharing);
  for (const PluginDevice& device : out.resources.at("gpuslice.io/gpu-share")) {
    EXPECT_FALSE(device.healthy);
    EXPECT_EQ(device.numa_node, 1);
  }
}

TEST(K8sDevices, ShareIdsRoundTripAndBadOnesFail) {
  absl::StatusOr<ShareUnit> unit = ParseShareId(ShareDeviceId("GPU-abc", 17));
  ASSERT_TRUE(unit.ok());
  EXPECT_EQ(unit->gpu_uuid, "GPU-abc");
  EXPECT_EQ(unit->unit, 17);
  for (const char* bad : {"GPU-abc", "GPU-abc::", "::3", "GPU-abc::x", "GPU-abc::-1", "GPU::3z"}) {
    EXPECT_FALSE(ParseShareId(bad).ok()) << bad;
  }
}

TEST(K8sDevices, LocateFindsEveryKind) {
  NodeSnapshot node;
  node.gpus.push_back(Gpu(0, false));
  NodeGpu mig = Gpu(1, true);
  mig.mig_devices.push_back(Mig(1, "7g.80gb", 7, 0, "MIG-full"));
  node.gpus.push_back(mig);
  EXPECT_EQ(Locate(node, "GPU-00000000")->gpu->index, 0);
  EXPECT_EQ(Locate(node, "MIG-full")->mig->gi, 1);
  EXPECT_EQ(Locate(node, "GPU-00000000::5")->unit, 5);
  EXPECT_EQ(Locate(node, "MIG-none").status().code(), absl::StatusCode::kNotFound);
}

TEST(K8sDevices, SharingSettingsAreChecked) {
  EXPECT_TRUE(ValidateSharing({{"0"}, 100}).ok());
  EXPECT_FALSE(ValidateSharing({{"0"}, 1}).ok());
  EXPECT_FALSE(ValidateSharing({{"0"}, 3}).ok());
  EXPECT_FALSE(ValidateSharing({{"0"}, 1001}).ok());
  EXPECT_FALSE(ValidateSharing({{""}, 10}).ok());
}

}  // namespace
}  // namespace gpuslice::k8s
