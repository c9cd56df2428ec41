// gpuslice doctor's checks on simulated machines and a fake /proc.
#include "gpuslice/agent/doctor.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "gpuslice/device/sim_backend.h"

namespace gpuslice::agent {
namespace {

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

bool Has(const std::vector<Check>& checks, CheckLevel level, const std::string& subject,
         const std::string& text) {
  for (const Check& check : checks) {
    if (check.level == level && check.subject == subject &&
        check.what.find(text) != std::string::npos) {
      return true;
    }
  }
  return false;
}

device::SimBackend Machine(const std::string& spec, const std::string& driver) {
  absl::StatusOr<device::sim::SimState> state = device::sim::NewMachine(Catalog(), spec);
  EXPECT_TRUE(state.ok());
  state->driver_version = driver;
  return device::SimBackend(*state, Catalog());
}

TEST(CompareVersions, Numeric) {
  EXPECT_LT(CompareVersions("525.85.12", "580.65.06"), 0);
  EXPECT_GT(CompareVersions("550.90.7", "550.90.07"), -1);
  EXPECT_EQ(CompareVersions("550.90.07", "550.90.7"), 0);
  EXPECT_LT(CompareVersions("535.161.07", "535.161.8"), 0);
  EXPECT_GT(CompareVersions("1000.1", "999.99.99"), 0);
}

TEST(Doctor, DriverTooOldForTheModelFails) {
  device::SimBackend backend = Machine("H200-141GB,A100-40GB", "535.104.05");
  DoctorOptions options;
  options.simulated = true;
  const std::vector<Check> checks = RunDoctor(backend, Catalog(), options);
  EXPECT_TRUE(Has(checks, CheckLevel::kFail, "GPU 0", "older than MIG on H200-141GB needs"));
  EXPECT_TRUE(Has(checks, CheckLevel::kPass, "GPU 1", "supports MIG on A100-40GB"));
}

TEST(Doctor, HoldersPendingModesAndGpusWithoutMig) {
  device::SimBackend backend = Machine("A100-40GB,L4", "580.65.06");
  ASSERT_TRUE(backend
                  .Control("holder", true,
                           [](device::sim::SimMachine& machine) {
                             return machine.AddHolder(0, "nvidia-persistenced");
                           })
                  .ok());
  ASSERT_TRUE(backend.SetMigMode(0, device::MigMode::kEnabled).ok());  // stays pending
  DoctorOptions options;
  options.simulated = true;
  const std::vector<Check> checks = RunDoctor(backend, Catalog(), options);
  EXPECT_TRUE(Has(checks, CheckLevel::kWarn, "GPU 0", "nvidia-persistenced holds the GPU"));
  EXPECT_TRUE(Has(checks, CheckLevel::kWarn, "GPU 0", "pending"));
  EXPECT_TRUE(Has(checks, CheckLevel::kInfo, "GPU 1", "has no MIG"));
  for (const Check& check : checks) EXPECT_NE(check.level, CheckLevel::kFail) << check.what;
}

TEST(Doctor, DriverProfilesMatchTheCatalogOnTheSimulator) {
  device::SimBackend backend = Machine("A100-40GB,H100-80GB,A30", "580.65.06");
  ASSERT_TRUE(backend.SetMigMode(0, device::MigMode::kEnabled).ok());
  ASSERT_TRUE(backend.SetMigMode(1, device::MigMode::kEnabled).ok());
  DoctorOptions options;
  options.simulated = true;
  const std::vector<Check> checks = RunDoctor(backend, Catalog(), options);
  EXPECT_TRUE(Has(checks, CheckLevel::kPass, "GPU 0",
                  "the driver's 7 GPU instance profiles match the catalog"));
  EXPECT_TRUE(Has(checks, CheckLevel::kPass, "GPU 1", "GPU instance profiles match the catalog"));
  // MIG off: the driver lists no profiles, so nothing is compared.
  EXPECT_TRUE(Has(checks, CheckLevel::kInfo, "GPU 2", "profiles not compared"));
  for (const Check& check : checks) {
    EXPECT_EQ(check.what.find("does not know"), std::string::npos) << check.what;
    EXPECT_EQ(check.what.find("driver names"), std::string::npos) << check.what;
    EXPECT_EQ(check.what.find("driver gives"), std::string::npos) << check.what;
    EXPECT_NE(check.level, CheckLevel::kFail) << check.what;
  }
}

TEST(Doctor, FindsKubernetesAgentsAndAMissingCudaLibrary) {
  char pattern[] = "/tmp/gpuslice-doctor-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string proc = pattern;
  std::filesystem::create_directories(proc + "/4711");
  std::ofstream(proc + "/4711/comm") << "dcgm-exporter\n";
  std::filesystem::create_directories(proc + "/99");
  std::ofstream(proc + "/99/comm") << "bash\n";
  device::SimBackend backend = Machine("H100-80GB", "580.65.06");
  DoctorOptions options;
  options.proc_root = proc;
  options.cuda_library = "libgpuslice-no-such-cuda.so.1";
  const std::vector<Check> checks = RunDoctor(backend, Catalog(), options);
  EXPECT_TRUE(Has(checks, CheckLevel::kWarn, "node", "dcgm-exporter runs (pid 4711)"));
  EXPECT_TRUE(Has(checks, CheckLevel::kWarn, "node", "cannot be loaded"));
  std::filesystem::remove_all(proc);
}

}  // namespace
}  // namespace gpuslice::agent
