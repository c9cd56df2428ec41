#include "gpuslice/k8s/allocate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpuslice::k8s {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

NodeGpu Gpu(int index, bool mig, std::string model = "A100-80GB") {
  NodeGpu gpu;
  gpu.index = index;
  gpu.uuid = "GPU-" + std::to_string(index);
  gpu.model = std::move(model);
  gpu.memory_mib = 81920;
  gpu.mig_enabled = mig;
  gpu.device_minor = index + 10;
  return gpu;
}

MigDevice Mig(int gi, std::string profile, int slices, int start, std::string uuid) {
  MigDevice mig;
  mig.gi = gi;
  mig.profile = std::move(profile);
  mig.gi_slices = mig.ci_slices = slices;
  mig.start = start;
  mig.uuid = std::move(uuid);
  mig.gi_cap_minor = 100 + gi;
  mig.ci_cap_minor = 200 + gi;
  return mig;
}

// GPU 0 whole, GPU 1 shared (10 units), GPU 2 MIG (A100-80GB: 3g.40gb at 4, 1g.10gb at 0 and 1).
NodeSnapshot Node() {
  NodeSnapshot node;
  node.gpus.push_back(Gpu(0, false));
  node.gpus.push_back(Gpu(1, false));
  NodeGpu mig = Gpu(2, true);
  mig.mig_devices.push_back(Mig(2, "3g.40gb", 3, 4, "MIG-3g"));
  mig.mig_devices.push_back(Mig(9, "1g.10gb", 1, 0, "MIG-1g-a"));
  mig.mig_devices.push_back(Mig(10, "1g.10gb", 1, 1, "MIG-1g-b"));
  node.gpus.push_back(mig);
  return node;
}

AllocateOptions Options() {
  AllocateOptions options;
  options.sharing = {{"1"}, 10};
  options.interposer_host_path = "/opt/gpuslice/lib/libgpuslice-cuda.so";
  return options;
}

TEST(K8sAllocate, WholeGpuGetsItsUuidAndDeviceNodes) {
  absl::StatusOr<ContainerAllocation> out =
      AllocateContainer(Node(), "nvidia.com/gpu", {"GPU-0"}, Options());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->envs.at("NVIDIA_VISIBLE_DEVICES"), "GPU-0");
  EXPECT_EQ(out->envs.at("CUDA_VISIBLE_DEVICES"), "GPU-0");
  EXPECT_FALSE(out->envs.contains("LD_PRELOAD"));
  EXPECT_TRUE(out->mounts.empty());
  std::vector<std::string> paths;
  for (const DeviceNode& node : out->devices) {
    paths.push_back(node.host_path);
    EXPECT_EQ(node.container_path, node.host_path);
    EXPECT_EQ(node.permissions, "rw");
  }
  EXPECT_THAT(paths, ElementsAre("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                 "/dev/nvidia10"));
}

TEST(K8sAllocate, MigDeviceGetsMigUuidAndCapabilityNodes) {
  absl::StatusOr<ContainerAllocation> out =
      AllocateContainer(Node(), "nvidia.com/mig-1g.10gb", {"MIG-1g-b", "MIG-1g-a"}, Options());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->envs.at("NVIDIA_VISIBLE_DEVICES"), "MIG-1g-b,MIG-1g-a");
  std::vector<std::string> paths;
  for (const DeviceNode& node : out->devices) paths.push_back(node.host_path);
  EXPECT_THAT(paths, ElementsAre("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                 "/dev/nvidia12", "/dev/nvidia-caps/nvidia-cap110",
                                 "/dev/nvidia-caps/nvidia-cap210", "/dev/nvidia-caps/nvidia-cap109",
                                 "/dev/nvidia-caps/nvidia-cap209"));
}

TEST(K8sAllocate, ShareGetsInterposerLimitsAndMounts) {
  absl::StatusOr<ContainerAllocation> out = AllocateContainer(
      Node(), "gpuslice.io/gpu-share", {"GPU-1::3", "GPU-1::4", "GPU-1::5"}, Options());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->envs.at("NVIDIA_VISIBLE_DEVICES"), "GPU-1");
  EXPECT_EQ(out->envs.at("GPUSLICE_COMPUTE_SHARE_MILLI"), "300");
  EXPECT_EQ(out->envs.at("GPUSLICE_VRAM_LIMIT_MIB"), "24576");
  EXPECT_EQ(out->envs.at("GPUSLICE_SLICE"), "k8s-GPU-1-3");
  EXPECT_EQ(out->envs.at("LD_PRELOAD"), "/usr/lib/gpuslice/libgpuslice-cuda.so");
  EXPECT_EQ(out->envs.at("GPUSLICE_SHM_DIR"), "/dev/shm/gpuslice");
  EXPECT_THAT(out->mounts, ElementsAre(MountSpec{"/usr/lib/gpuslice/libgpuslice-cuda.so",
                                                 "/opt/gpuslice/lib/libgpuslice-cuda.so", true},
                                       MountSpec{"/dev/shm/gpuslice", "/dev/shm/gpuslice", false}));
}

TEST(K8sAllocate, RefusesWhatIsNotEnforceableOrNotThere) {
  const NodeSnapshot node = Node();
  AllocateOptions no_interposer = Options();
  no_interposer.interposer_host_path.clear();
  EXPECT_EQ(
      AllocateContainer(node, "gpuslice.io/gpu-share", {"GPU-1::0"}, no_interposer).status().code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(
          AllocateContainer(node, "nvidia.com/gpu", {"GPU-9"}, Options()).status().message()),
      HasSubstr("GPU-9"));
  // The shared GPU is not a whole GPU; a MIG device is not of another profile.
  EXPECT_FALSE(AllocateContainer(node, "nvidia.com/gpu", {"GPU-1"}, Options()).ok());
  EXPECT_FALSE(AllocateContainer(node, "nvidia.com/mig-3g.40gb", {"MIG-1g-a"}, Options()).ok());
  EXPECT_FALSE(AllocateContainer(node, "gpuslice.io/gpu-share", {"GPU-1::10"}, Options()).ok());
  EXPECT_FALSE(AllocateContainer(node, "gpuslice.io/gpu-share", {"GPU-0::1"}, Options()).ok());
  EXPECT_FALSE(
      AllocateContainer(node, "gpuslice.io/gpu-share", {"GPU-1::1", "GPU-1::1"}, Options()).ok());
  EXPECT_FALSE(AllocateContainer(node, "nvidia.com/gpu", {}, Options()).ok());
  EXPECT_FALSE(AllocateContainer(node, "example.com/gpu", {"GPU-0"}, Options()).ok());
}

TEST(K8sAllocate, ShareUnitsOfTwoGpusAreRefused) {
  NodeSnapshot node = Node();
  AllocateOptions options = Options();
  options.sharing.shared_gpus = {"0", "1"};
  absl::StatusOr<ContainerAllocation> out =
      AllocateContainer(node, "gpuslice.io/gpu-share", {"GPU-0::1", "GPU-1::1"}, options);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("two GPUs"));
}

TEST(K8sPreferred, SharesKeepEmptyGpusEmpty) {
  NodeSnapshot node;
  node.gpus.push_back(Gpu(0, false));
  node.gpus.push_back(Gpu(1, false));
  node.gpus.push_back(Gpu(2, false));
  const SharingConfig sharing{{"all"}, 10};
  // GPU 0: 8 units free; GPU 1: 3 free; GPU 2: all 10 free.
  std::vector<std::string> available;
  for (int unit = 2; unit < 10; ++unit) available.push_back(ShareDeviceId("GPU-0", unit));
  for (int unit = 7; unit < 10; ++unit) available.push_back(ShareDeviceId("GPU-1", unit));
  for (int unit = 0; unit < 10; ++unit) available.push_back(ShareDeviceId("GPU-2", unit));
  // Three units fit on GPU 0 and on GPU 1 with the same expected waste (none): the policy's tie
  // goes to the lower GPU, never to the empty one.
  EXPECT_THAT(PreferredDevices(node, sharing, "gpuslice.io/gpu-share", available, {}, 3),
              ElementsAre("GPU-0::2", "GPU-0::3", "GPU-0::4"));
  // Four units do not fit on GPU 1: GPU 0 (partly used) before the empty GPU 2.
  EXPECT_THAT(PreferredDevices(node, sharing, "gpuslice.io/gpu-share", available, {}, 4),
              ElementsAre("GPU-0::2", "GPU-0::3", "GPU-0::4", "GPU-0::5"));
  // Units already chosen keep the rest on their GPU.
  EXPECT_THAT(PreferredDevices(node, sharing, "gpuslice.io/gpu-share", available, {"GPU-2::5"}, 3),
              ElementsAre("GPU-2::5", "GPU-2::0", "GPU-2::1"));
}

TEST(K8sPreferred, MigInstanceOnTheGpuTheEngineChooses) {
  NodeSnapshot node;
  NodeGpu a = Gpu(0, true);
  a.mig_devices.push_back(Mig(9, "1g.10gb", 1, 0, "MIG-a0"));
  a.mig_devices.push_back(Mig(10, "1g.10gb", 1, 1, "MIG-a1"));
  NodeGpu b = Gpu(1, true);
  b.mig_devices.push_back(Mig(9, "1g.10gb", 1, 0, "MIG-b0"));
  b.mig_devices.push_back(Mig(10, "1g.10gb", 1, 1, "MIG-b1"));
  node.gpus = {a, b};
  // GPU 0's first instance is taken: its other one is preferred over an untouched GPU.
  const std::vector<std::string> got =
      PreferredDevices(node, {}, "nvidia.com/mig-1g.10gb", {"MIG-b0", "MIG-b1", "MIG-a1"}, {}, 1);
  EXPECT_THAT(got, ElementsAre("MIG-a1"));
  EXPECT_EQ(
      PreferredDevices(node, {}, "nvidia.com/mig-1g.10gb", {"MIG-b0", "MIG-b1", "MIG-a1"}, {}, 3)
          .size(),
      3u);
}

TEST(K8sPreferred, WholeGpusStayOnOneNumaNodeWhenTheyCan) {
  NodeSnapshot node;
  for (int i = 0; i < 4; ++i) {
    NodeGpu gpu = Gpu(i, false);
    gpu.numa_node = i < 2 ? 0 : 1;
    node.gpus.push_back(gpu);
  }
  const std::vector<std::string> got =
      PreferredDevices(node, {}, "nvidia.com/gpu", {"GPU-0", "GPU-2", "GPU-3"}, {}, 2);
  EXPECT_THAT(got, ElementsAre("GPU-2", "GPU-3"));
  // Always the must-include devices, and never more than asked.
  EXPECT_THAT(PreferredDevices(node, {}, "nvidia.com/gpu", {"GPU-0", "GPU-2"}, {"GPU-0"}, 1),
              ElementsAre("GPU-0"));
}

}  // namespace
}  // namespace gpuslice::k8s
