// `gpuslice device-plugin` as a process, against the kubelet stand-in (real gRPC on Unix
// sockets), on a simulated machine that `gpuslice apply` re-lays while the plugin runs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <iostream>

#include "cli/run_gpuslice.h"
#include "cli/serve_process.h"
#include "kubelet_standin.h"
#include "mig_layouts.h"

namespace gpuslice::k8s {
namespace {

using cli::testing::FreeLoopbackPort;
using cli::testing::FreshDir;
using cli::testing::GpusliceProcess;
using cli::testing::HttpGet;
using cli::testing::ReadFile;
using cli::testing::RunGpuslice;
using cli::testing::WaitUntil;
using ::testing::HasSubstr;
using testing::KubeletStandIn;
using testing::SeenDevice;

class DevicePluginCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir("device-plugin-cli");
    plugins_ = dir_ + "/dp";
    mkdir(plugins_.c_str(), 0750);
    mkdir((dir_ + "/features.d").c_str(), 0755);
    sim_ = dir_ + "/machine.json";
    std::ofstream(dir_ + "/mig.yaml") << testing::kTwoMigLayouts;
    std::ofstream(dir_ + "/libgpuslice-cuda.so") << "stand-in";
    ASSERT_EQ(RunGpuslice("sim create " + sim_ + " 3xA100-80GB").exit_code, 0);
    Apply("first");
  }

  void Apply(const std::string& config) {
    const auto result =
        RunGpuslice("apply --sim " + sim_ + " -f " + dir_ + "/mig.yaml -c " + config);
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }

  std::vector<std::string> PluginArgs() {
    return {"device-plugin",
            "--sim",
            sim_,
            "--plugin-dir",
            plugins_,
            "--pod-resources-socket",
            dir_ + "/pod-resources.sock",
            "--shared-gpus",
            "1",
            "--share-units",
            "10",
            "--interposer",
            dir_ + "/libgpuslice-cuda.so",
            "--nfd-features-file",
            dir_ + "/features.d/gpuslice",
            "--poll-ms",
            "100"};
  }

  static auto Count(size_t n) {
    return [n](const std::vector<SeenDevice>& devices) { return devices.size() == n; };
  }

  std::string dir_, plugins_, sim_;
};

TEST_F(DevicePluginCli, ServesFollowsLayoutsAndKubeletRestarts) {
  KubeletStandIn kubelet(plugins_, dir_ + "/pod-resources.sock");
  const int port = FreeLoopbackPort();
  std::vector<std::string> args = PluginArgs();
  args.insert(args.end(), {"--metrics-listen", "127.0.0.1:" + std::to_string(port)});
  GpusliceProcess plugin;
  plugin.Start(args, dir_ + "/plugin.log");

  ASSERT_TRUE(kubelet.WaitFor("nvidia.com/mig-1g.10gb", Count(2)).ok()) << plugin.Output();
  ASSERT_TRUE(kubelet.WaitFor("gpuslice.io/gpu-share", Count(10)).ok()) << plugin.Output();
  ASSERT_TRUE(kubelet.WaitFor("nvidia.com/gpu", Count(1)).ok()) << plugin.Output();
  EXPECT_THAT(ReadFile(dir_ + "/features.d/gpuslice"), HasSubstr("nvidia.com/mig-1g.10gb.count=2"));

  // The agent's apply re-lays GPU 2; kubelet sees it within a second, with no restart.
  Apply("second");
  const auto applied = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      kubelet.WaitFor("nvidia.com/mig-1g.10gb", Count(3), std::chrono::milliseconds(1000)).ok())
      << plugin.Output();
  ASSERT_TRUE(
      kubelet.WaitFor("nvidia.com/mig-2g.20gb", Count(2), std::chrono::milliseconds(1000)).ok())
      << plugin.Output();
  const auto seen = std::chrono::steady_clock::now() - applied;
  EXPECT_LT(seen, std::chrono::seconds(1));
  std::cout << "the new layout reached ListAndWatch "
            << std::chrono::duration_cast<std::chrono::milliseconds>(seen).count()
            << " ms after `gpuslice apply` returned (poll 100 ms)\n";
  EXPECT_EQ(kubelet.Registrations("nvidia.com/mig-1g.10gb"), 1);
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ReadFile(dir_ + "/features.d/gpuslice").find("nvidia.com/mig-1g.10gb.count=3") !=
               std::string::npos;
      },
      std::chrono::milliseconds(2000)));

  // An allocation through the process, then its pod in the metrics (from pod-resources).
  const std::string mig = kubelet.Latest("nvidia.com/mig-2g.20gb")[0].id;
  auto allocated = kubelet.Allocate("nvidia.com/mig-2g.20gb", {mig}, "ml", "trainer-0", "main");
  ASSERT_TRUE(allocated.ok()) << allocated.status();
  EXPECT_EQ(allocated->envs().at("NVIDIA_VISIBLE_DEVICES"), mig);
  const std::string metrics = HttpGet(port, "/metrics");
  EXPECT_THAT(metrics, HasSubstr("gpuslice_k8s_device_info{resource=\"nvidia.com/mig-2g.20gb\","
                                 "device=\"" +
                                 mig +
                                 "\",health=\"Healthy\",namespace=\"ml\",pod=\"trainer-0\","
                                 "container=\"main\""));
  EXPECT_THAT(metrics, HasSubstr("gpuslice_k8s_pod_resources_up{"));

  // kubelet restarts: the plugin registers again by itself.
  kubelet.Restart();
  ASSERT_TRUE(kubelet.WaitFor("nvidia.com/mig-1g.10gb", Count(3)).ok()) << plugin.Output();
  EXPECT_EQ(kubelet.Registrations("nvidia.com/mig-1g.10gb"), 2);

  EXPECT_EQ(plugin.Terminate(), 0) << plugin.Output();
  struct stat st {};
  EXPECT_NE(stat((plugins_ + "/gpuslice-gpu.sock").c_str(), &st), 0);  // its sockets are gone
  EXPECT_NE(stat((dir_ + "/features.d/gpuslice").c_str(), &st), 0);    // and its labels
  EXPECT_THAT(plugin.Output(), HasSubstr("registered with kubelet"));
}

TEST_F(DevicePluginCli, OnceShowsWhatWouldBeOffered) {
  std::string args =
      "device-plugin --once --json --sim " + sim_ + " --shared-gpus 1 --share-units 10";
  const auto result = RunGpuslice(args, /*with_stderr=*/false);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json out = nlohmann::json::parse(result.output);
  EXPECT_EQ(out["resources"]["nvidia.com/gpu"].size(), 1u);
  EXPECT_EQ(out["resources"]["gpuslice.io/gpu-share"].size(), 10u);
  EXPECT_EQ(out["resources"]["nvidia.com/mig-3g.40gb"].size(), 1u);
  EXPECT_EQ(out["labels"]["nvidia.com/mig-1g.10gb.count"], "2");
  const auto text = RunGpuslice("device-plugin --once --sim " + sim_);
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_THAT(text.output, HasSubstr("nvidia.com/gpu: 2 devices"));
}

TEST_F(DevicePluginCli, BadInputIsRefusedClearly) {
  auto units =
      RunGpuslice("device-plugin --once --sim " + sim_ + " --shared-gpus 1 --share-units 7");
  EXPECT_EQ(units.exit_code, 2);
  EXPECT_THAT(units.output, HasSubstr("divisor of 1000"));
  auto missing = RunGpuslice("device-plugin --sim " + sim_ + " --plugin-dir " + dir_ + "/none");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.output, HasSubstr(dir_ + "/none"));
  auto listen = RunGpuslice("device-plugin --sim " + sim_ + " --plugin-dir " + plugins_ +
                            " --metrics-listen nonsense");
  EXPECT_EQ(listen.exit_code, 2);
}

}  // namespace
}  // namespace gpuslice::k8s
