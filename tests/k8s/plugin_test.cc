// The device plugin against the kubelet stand-in (tests/k8s/kubelet_standin.h) over real gRPC on
// Unix sockets, on a simulated machine changed by the agent's apply (gpuslice/agent/apply.h).
#include "gpuslice/k8s/plugin.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gpuslice/agent/apply.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/device/synchronized_backend.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/k8s/node_reader.h"
#include "gpuslice/k8s/pod_resources.h"
#include "gpuslice/spec/mig_parted.h"
#include "kubelet_standin.h"
#include "mig_layouts.h"

namespace gpuslice::k8s {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::KubeletStandIn;
using testing::SeenDevice;
using ::testing::UnorderedElementsAre;

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpuslice-dp-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    plugin_dir_ = root_ + "/device-plugins";
    mkdir(plugin_dir_.c_str(), 0750);
    mkdir((root_ + "/pod-resources").c_str(), 0750);
    pod_resources_socket_ = root_ + "/pod-resources/kubelet.sock";

    absl::StatusOr<device::sim::SimState> state =
        device::sim::NewMachine(hw::Catalog::Builtin(), "3xA100-80GB");
    ASSERT_TRUE(state.ok()) << state.status();
    sim_ = std::make_shared<device::SimBackend>(*state, hw::Catalog::Builtin());
    backend_ = std::make_shared<device::SynchronizedBackend>(sim_);
    absl::StatusOr<spec::MigConfigFile> file =
        spec::ParseMigPartedConfig(testing::kTwoMigLayouts, "config.yaml");
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = *file;
    Apply("first");

    kubelet_ = std::make_unique<KubeletStandIn>(plugin_dir_, pod_resources_socket_);
    reader_ = std::make_unique<NodeReader>(*backend_);
    PluginOptions options;
    options.plugin_dir = plugin_dir_;
    options.poll = std::chrono::milliseconds(50);
    options.retry = std::chrono::milliseconds(50);
    options.allocate.sharing = {{"1"}, 10};
    options.allocate.interposer_host_path = "/opt/gpuslice/libgpuslice-cuda.so";
    options.log = [this](const std::string& line) {
      std::lock_guard lock(log_mu_);
      log_.push_back(line);
    };
    plugin_ = std::make_unique<DevicePlugin>([this] { return reader_->Read(); }, options);
  }

  void TearDown() override {
    StopRunning();
    plugin_.reset();
    kubelet_.reset();
    std::filesystem::remove_all(root_);
  }

  void Apply(const std::string& name) {
    agent::ApplyRequest request;
    request.file = &file_;
    request.file_path = "config.yaml";
    request.config_name = name;
    absl::StatusOr<agent::ApplyResult> applied =
        agent::ApplyConfig(*backend_, hw::Catalog::Builtin(), request, [](const std::string&) {});
    ASSERT_TRUE(applied.ok()) << applied.status();
  }

  void StartRunning() {
    ASSERT_TRUE(plugin_->Start().ok());
    runner_ = std::thread([this] { plugin_->Run(stop_); });
  }
  void StopRunning() {
    stop_ = true;
    if (runner_.joinable()) runner_.join();
  }

  static auto Count(size_t n) {
    return [n](const std::vector<SeenDevice>& devices) { return devices.size() == n; };
  }

  std::string root_, plugin_dir_, pod_resources_socket_;
  std::shared_ptr<device::SimBackend> sim_;
  std::shared_ptr<device::Backend> backend_;
  spec::MigConfigFile file_;
  std::unique_ptr<KubeletStandIn> kubelet_;
  std::unique_ptr<NodeReader> reader_;
  std::unique_ptr<DevicePlugin> plugin_;
  std::atomic<bool> stop_{false};
  std::thread runner_;
  std::mutex log_mu_;
  std::vector<std::string> log_;
};

TEST_F(PluginTest, RegistersEveryResourceAndListsItsDevices) {
  StartRunning();
  ASSERT_TRUE(kubelet_->WaitFor("nvidia.com/gpu", Count(1)).ok());
  ASSERT_TRUE(kubelet_->WaitFor("gpuslice.io/gpu-share", Count(10)).ok());
  ASSERT_TRUE(kubelet_->WaitFor("nvidia.com/mig-3g.40gb", Count(1)).ok());
  ASSERT_TRUE(kubelet_->WaitFor("nvidia.com/mig-1g.10gb", Count(2)).ok());
  EXPECT_TRUE(kubelet_->RejectedRegistrations().empty());
  for (const char* resource : {"nvidia.com/gpu", "gpuslice.io/gpu-share", "nvidia.com/mig-3g.40gb",
                               "nvidia.com/mig-1g.10gb"}) {
    EXPECT_EQ(kubelet_->Registrations(resource), 1) << resource;
    EXPECT_TRUE(kubelet_->Options(resource).get_preferred_allocation_available()) << resource;
    EXPECT_FALSE(kubelet_->Options(resource).pre_start_required()) << resource;
    for (const SeenDevice& device : kubelet_->Latest(resource)) {
      EXPECT_EQ(device.health, "Healthy");
      EXPECT_LE(device.id.size(), 63u);
    }
    // One socket per resource, named as the header says.
    struct stat st {};
    EXPECT_EQ(
        stat(absl::StrCat(plugin_dir_, "/", PluginSocketName("gpuslice-", resource)).c_str(), &st),
        0)
        << resource;
  }
  const std::vector<SeenDevice> whole = kubelet_->Latest("nvidia.com/gpu");
  EXPECT_TRUE(whole[0].id.starts_with("GPU-"));
  EXPECT_TRUE(kubelet_->Latest("nvidia.com/mig-3g.40gb")[0].id.starts_with("MIG-"));
}

TEST_F(PluginTest, NewMigLayoutReachesListAndWatchWithinASecond) {
  StartRunning();
  ASSERT_TRUE(kubelet_->WaitFor("nvidia.com/mig-1g.10gb", Count(2)).ok());
  Apply("second");
  const auto applied = std::chrono::steady_clock::now();
  // The existing resource changes in place, the new profile appears (a new registration) and the
  // profile that went away is listed empty.
  absl::StatusOr<std::chrono::milliseconds> seen =
      kubelet_->WaitFor("nvidia.com/mig-1g.10gb", Count(3), std::chrono::milliseconds(1000));
  ASSERT_TRUE(seen.ok()) << seen.status();
  ASSERT_TRUE(
      kubelet_->WaitFor("nvidia.com/mig-2g.20gb", Count(2), std::chrono::milliseconds(1000)).ok());
  ASSERT_TRUE(
      kubelet_->WaitFor("nvidia.com/mig-3g.40gb", Count(0), std::chrono::milliseconds(1000)).ok());
  const auto elapsed = std::chrono::steady_clock::now() - applied;
  EXPECT_LT(elapsed, std::chrono::seconds(1));
  EXPECT_EQ(kubelet_->Registrations("nvidia.com/mig-1g.10gb"), 1);  // no restart
  EXPECT_EQ(kubelet_->Registrations("nvidia.com/mig-2g.20gb"), 1);
}

TEST_F(PluginTest, ReRegistersAfterKubeletRestartWithoutRestarting) {
  StartRunning();
  ASSERT_TRUE(kubelet_->WaitFor("nvidia.com/gpu", Count(1)).ok());
  ASSERT_EQ(kubelet_->Registrations("nvidia.com/gpu"), 1);
  kubelet_->Restart();  // sockets removed, kubelet.sock created again
  for (const char* resource : {"nvidia.com/gpu", "gpuslice.io/gpu-share", "nvidia.com/mig-3g.40gb",
                               "nvidia.com/mig-1g.10gb"}) {
    ASSERT_TRUE(kubelet_->WaitFor(resource, [](const auto& d) { return !d.empty(); }).ok())
        << resource;
    EXPECT_EQ(kubelet_->Registrations(resource), 2) << resource;
  }
  // And it still allocates.
  const std::string gpu = kubelet_->Latest("nvidia.com/gpu")[0].id;
  EXPECT_TRUE(kubelet_->Allocate("nvidia.com/gpu", {gpu}).ok());
}

TEST_F(PluginTest, RegistersOnceKubeletComesUp) {
  kubelet_.reset();  // no kubelet yet
  ASSERT_TRUE(plugin_->Start().ok());
  EXPECT_TRUE(plugin_->registered().empty());
  kubelet_ = std::make_unique<KubeletStandIn>(plugin_dir_, pod_resources_socket_);
  runner_ = std::thread([this] { plugin_->Run(stop_); });
  ASSERT_TRUE(kubelet_->WaitFor("nvidia.com/gpu", Count(1)).ok());
}

TEST_F(PluginTest, AllocatesEachResourceKind) {
  StartRunning();
  ASSERT_TRUE(kubelet_->WaitFor("gpuslice.io/gpu-share", Count(10)).ok());
  ASSERT_TRUE(kubelet_->WaitFor("nvidia.com/mig-1g.10gb", Count(2)).ok());

  const std::string gpu = kubelet_->Latest("nvidia.com/gpu")[0].id;
  absl::StatusOr<v1beta1::ContainerAllocateResponse> whole =
      kubelet_->Allocate("nvidia.com/gpu", {gpu}, "team-a", "trainer", "main");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->envs().at("NVIDIA_VISIBLE_DEVICES"), gpu);
  EXPECT_EQ(whole->envs().at("CUDA_VISIBLE_DEVICES"), gpu);
  ASSERT_GE(whole->devices_size(), 4);
  EXPECT_EQ(whole->devices(0).host_path(), "/dev/nvidiactl");
  EXPECT_EQ(whole->devices(0).permissions(), "rw");

  const std::string mig = kubelet_->Latest("nvidia.com/mig-1g.10gb")[1].id;
  absl::StatusOr<v1beta1::ContainerAllocateResponse> slice =
      kubelet_->Allocate("nvidia.com/mig-1g.10gb", {mig}, "team-b", "embedder", "server");
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->envs().at("NVIDIA_VISIBLE_DEVICES"), mig);
  EXPECT_TRUE(mig.starts_with("MIG-"));
  EXPECT_FALSE(slice->envs().contains("LD_PRELOAD"));

  std::vector<std::string> units;
  for (const SeenDevice& device : kubelet_->Latest("gpuslice.io/gpu-share")) {
    units.push_back(device.id);
  }
  absl::StatusOr<std::vector<std::string>> preferred =
      kubelet_->Preferred("gpuslice.io/gpu-share", units, {}, 3);
  ASSERT_TRUE(preferred.ok()) << preferred.status();
  ASSERT_EQ(preferred->size(), 3u);
  absl::StatusOr<v1beta1::ContainerAllocateResponse> share =
      kubelet_->Allocate("gpuslice.io/gpu-share", *preferred, "team-c", "notebook", "lab");
  ASSERT_TRUE(share.ok()) << share.status();
  EXPECT_EQ(share->envs().at("GPUSLICE_COMPUTE_SHARE_MILLI"), "300");
  EXPECT_EQ(share->envs().at("GPUSLICE_VRAM_LIMIT_MIB"), absl::StrCat(3 * 81920 / 10));
  EXPECT_EQ(share->envs().at("LD_PRELOAD"), "/usr/lib/gpuslice/libgpuslice-cuda.so");
  ASSERT_EQ(share->mounts_size(), 2);
  EXPECT_EQ(share->mounts(0).host_path(), "/opt/gpuslice/libgpuslice-cuda.so");
  EXPECT_TRUE(share->mounts(0).read_only());

  // A share over two GPUs' units is not in the node; an unknown device is refused with its name.
  absl::StatusOr<v1beta1::ContainerAllocateResponse> bad =
      kubelet_->Allocate("nvidia.com/gpu", {"GPU-nope"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("GPU-nope"));

  // Pod identity, from the pod-resources API: no guessing.
  absl::StatusOr<std::vector<PodDevice>> pods = ListPodDevices(pod_resources_socket_);
  ASSERT_TRUE(pods.ok()) << pods.status();
  EXPECT_EQ(pods->size(), 5u);  // the other vendor's NIC is left out
  const Attribution attribution = Attribute(*pods);
  EXPECT_EQ(attribution.by_uuid.at(gpu), (PodOwner{"team-a", "trainer", "main"}));
  EXPECT_EQ(attribution.by_uuid.at(mig), (PodOwner{"team-b", "embedder", "server"}));
  ASSERT_EQ(attribution.by_slice.size(), 1u);
  EXPECT_EQ(attribution.by_slice.begin()->first, share->envs().at("GPUSLICE_SLICE"));
  EXPECT_EQ(attribution.by_slice.begin()->second, (PodOwner{"team-c", "notebook", "lab"}));
}

TEST_F(PluginTest, UnhealthyGpuIsListedUnhealthy) {
  StartRunning();
  ASSERT_TRUE(kubelet_->WaitFor("nvidia.com/gpu", Count(1)).ok());
  device::SimBackend* sim = sim_.get();
  // A critical Xid on GPU 0 (79: fallen off the bus).
  ASSERT_TRUE(sim->Control("xid", true,
                           [](device::sim::SimMachine& machine) {
                             return machine.InjectXid(0, 79, -1, -1);
                           })
                  .ok());
  ASSERT_TRUE(
      kubelet_
          ->WaitFor("nvidia.com/gpu",
                    [](const auto& d) { return d.size() == 1 && d[0].health == "Unhealthy"; })
          .ok());
  // An application's Xid (13) on the shared GPU changes nothing.
  ASSERT_TRUE(sim->Control("xid", true,
                           [](device::sim::SimMachine& machine) {
                             return machine.InjectXid(1, 13, -1, -1);
                           })
                  .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (const SeenDevice& device : kubelet_->Latest("gpuslice.io/gpu-share")) {
    EXPECT_EQ(device.health, "Healthy");
  }
}

TEST_F(PluginTest, BadSettingsAndMissingDirectoryFailClearly) {
  PluginOptions options;
  options.plugin_dir = root_ + "/nowhere";
  DevicePlugin missing([this] { return reader_->Read(); }, options);
  absl::Status started = missing.Start();
  EXPECT_EQ(started.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(started.message()), HasSubstr("nowhere"));
  options.plugin_dir = plugin_dir_;
  options.allocate.sharing.units = 7;
  DevicePlugin bad_units([this] { return reader_->Read(); }, options);
  EXPECT_EQ(bad_units.Start().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpuslice::k8s
