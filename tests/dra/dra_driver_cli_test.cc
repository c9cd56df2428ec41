// `gpuslice dra-driver` as a process: --once prints slices an API server accepts (the stand-in's
// own validation) and changes nothing; as a daemon against the kubelet and API-server stand-ins
// it registers, publishes, prepares a MIG claim on the simulated machine's state file, and stops
// on SIGTERM removing its registration socket; bad settings are refused with exit code 2.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "cli/run_gpuslice.h"
#include "cli/serve_process.h"
#include "dra/apiserver_standin.h"
#include "dra/kubelet_dra_standin.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra {
namespace {

using cli::testing::FreshDir;
using cli::testing::GpusliceProcess;
using cli::testing::ReadFile;
using cli::testing::RunGpuslice;
using nlohmann::json;

class DraDriverCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir("dra-cli");
    sim_ = dir_ + "/machine.json";
    ASSERT_EQ(RunGpuslice("sim create " + sim_ + " 2xH100-80GB,A100-40GB").exit_code, 0);
    std::ofstream(dir_ + "/mig-on.yaml") << "version: v1\nmig-configs:\n  mig-on:\n"
                                            "    - devices: [0, 1]\n      mig-enabled: true\n"
                                            "      mig-devices: {}\n";
    const auto applied =
        RunGpuslice("apply --sim " + sim_ + " -f " + dir_ + "/mig-on.yaml -c mig-on");
    ASSERT_EQ(applied.exit_code, 0) << applied.output;
    std::ofstream(dir_ + "/libgpuslice-cuda.so") << "stand-in";
  }
  std::string dir_;
  std::string sim_;
};

TEST_F(DraDriverCli, OncePrintsSlicesAnApiServerAcceptsAndChangesNothing) {
  const std::string before = ReadFile(sim_);
  const auto out = RunGpuslice("dra-driver --once --json --sim " + sim_ +
                                   " --node-name node-a --shared-gpus 2 --state-dir " + dir_ +
                                   "/state --interposer " + dir_ + "/libgpuslice-cuda.so",
                               /*with_stderr=*/false);
  ASSERT_EQ(out.exit_code, 0) << out.output;
  const json slices = json::parse(out.output);
  ASSERT_GE(slices.size(), 2u);
  testing_standin::ApiServerStandin api({"v1.35.0", "", {{"node-a", "u"}}, {}});
  httplib::Client client(api.url());
  for (const json& slice : slices) {
    auto reply =
        client.Post("/apis/resource.k8s.io/v1/resourceslices", slice.dump(), "application/json");
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 201) << reply->body;
  }
  EXPECT_EQ(ReadFile(sim_), before);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/state"));

  const auto text = RunGpuslice("dra-driver --once --sim " + sim_ + " --node-name node-a");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("pool node-a"), std::string::npos) << text.output;
}

TEST_F(DraDriverCli, ServesKubeletPublishesAndPrepares) {
  testing_standin::ApiServerStandin api({"v1.35.0", "", {{"node-a", "node-uid"}}, {}});
  std::filesystem::create_directories(dir_ + "/registry");
  kubelet_standin::StandInOptions options;
  options.registry_dir = dir_ + "/registry";
  kubelet_standin::KubeletDraStandIn kubelet(options);
  GpusliceProcess driver;
  driver.Start({"dra-driver", "--sim", sim_, "--node-name", "node-a", "--kube-api", api.url(),
                "--kube-token-file", "", "--registry-dir", dir_ + "/registry", "--plugin-dir",
                dir_ + "/plugin", "--cdi-dir", dir_ + "/cdi", "--state-dir", dir_ + "/state",
                "--interposer", dir_ + "/libgpuslice-cuda.so"},
               dir_ + "/driver.log");
  ASSERT_TRUE(kubelet_standin::WaitUntil([&] {
    return kubelet.registrations() >= 1 && !api.Slices().empty();
  })) << driver.Output();
  const std::string device = "gpu-1-mig-3g-40gb-4";
  const json claim = api.PutClaim({{"metadata", {{"namespace", "default"}, {"name", "c"}}},
                                   {"status",
                                    {{"allocation",
                                      {{"devices",
                                        {{"results", json::array({{{"request", "gpu"},
                                                                   {"driver", "gpu.gpuslice.io"},
                                                                   {"pool", "node-a"},
                                                                   {"device", device}}})}}}}}}}});
  const std::string uid = claim["metadata"]["uid"];
  auto prepared = kubelet.Prepare({{"default", uid, "c"}});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_EQ(prepared->at(uid).error, "") << driver.Output();
  const json state = json::parse(ReadFile(sim_));
  ASSERT_EQ(state["gpus"][1]["gpu_instances"].size(), 1u);
  EXPECT_EQ(state["gpus"][1]["gpu_instances"][0]["start"], 4);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/cdi/gpu.gpuslice.io-claim_" + uid + ".json"));
  EXPECT_EQ(driver.Terminate(), 0) << driver.Output();
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/registry/gpu.gpuslice.io-reg.sock"));
}

TEST_F(DraDriverCli, BadSettingsAreRefused) {
  auto bad_api = RunGpuslice("dra-driver --sim " + sim_ +
                             " --node-name n --kube-api ftp://x "
                             "--registry-dir " +
                             dir_ + " --state-dir " + dir_ + "/s");
  EXPECT_EQ(bad_api.exit_code, 2) << bad_api.output;
  std::ofstream(dir_ + "/layout.yaml") << "version: v1\nmig-configs:\n  a: []\n";
  auto bad_layout =
      RunGpuslice("dra-driver --sim " + sim_ + " --node-name n --kube-api " +
                  "http://127.0.0.1:1 --registry-dir " + dir_ + " --state-dir " + dir_ +
                  "/s --fixed-layout " + dir_ + "/layout.yaml " + "--fixed-layout-config b");
  EXPECT_EQ(bad_layout.exit_code, 2) << bad_layout.output;
  EXPECT_NE(bad_layout.output.find("--fixed-layout"), std::string::npos) << bad_layout.output;
  auto no_sim = RunGpuslice("dra-driver --once --sim " + dir_ + "/missing.json");
  EXPECT_EQ(no_sim.exit_code, 1) << no_sim.output;
  EXPECT_NE(no_sim.output.find("missing.json"), std::string::npos) << no_sim.output;
}

}  // namespace
}  // namespace gpuslice::dra
