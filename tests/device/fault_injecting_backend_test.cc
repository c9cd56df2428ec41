// FaultInjectingBackend over the in-memory simulator and over NVML (the test NVML library on a
// simulated machine): a matching call fails with the injected NVML code and changes nothing, the
// rules' call numbers and counts hold, and every other call reaches the inner backend.
#include "gpuslice/device/fault_injecting_backend.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>

#include "gpuslice/device/nvml_backend.h"
#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/device/sim_store.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::device {
namespace {

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

// GPU 0 is an H100-80GB with MIG on.
class FaultInjectingBackendTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    absl::StatusOr<sim::SimState> state = sim::NewMachine(Catalog(), "H100-80GB");
    ASSERT_TRUE(state.ok());
    state->gpus[0].mig_current = state->gpus[0].mig_pending = MigMode::kEnabled;
    std::shared_ptr<Backend> inner;
    if (!GetParam()) {
      inner = std::make_shared<SimBackend>(*state, Catalog());
    } else {
      char pattern[] = "/tmp/gpuslice-faults-XXXXXX";
      ASSERT_NE(mkdtemp(pattern), nullptr);
      dir_ = pattern;
      ASSERT_TRUE(sim::SimStore::Create(dir_ + "/machine.json", *state, false).ok());
      setenv("GPUSLICE_SIM", (dir_ + "/machine.json").c_str(), 1);
      absl::StatusOr<std::unique_ptr<NvmlBackend>> nvml =
          NvmlBackend::Load(Catalog(), GPUSLICE_FAKE_NVML);
      ASSERT_TRUE(nvml.ok()) << nvml.status();
      inner = std::shared_ptr<Backend>(std::move(*nvml));
    }
    inner_ = inner;
    faults_ = std::make_unique<FaultInjectingBackend>(inner);
  }
  void TearDown() override {
    faults_.reset();
    inner_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
    unsetenv("GPUSLICE_SIM");
  }

  int OneG() const { return Catalog().Find("H100-80GB")->mig->FindProfile("1g.10gb")->smi_id; }
  size_t Instances() {
    absl::StatusOr<std::vector<GpuInstanceInfo>> gis = inner_->ListGpuInstances(0);
    EXPECT_TRUE(gis.ok());
    return gis.ok() ? gis->size() : 0;
  }

  std::string dir_;
  std::shared_ptr<Backend> inner_;
  std::unique_ptr<FaultInjectingBackend> faults_;
};

TEST_P(FaultInjectingBackendTest, AMatchingCallFailsWithTheCodeAndChangesNothing) {
  ASSERT_TRUE(faults_->Inject({"CreateGpuInstance", kNvmlInsufficientResources, 0, 1}).ok());
  absl::StatusOr<GpuInstanceInfo> failed = faults_->CreateGpuInstance(0, OneG(), 0);
  EXPECT_TRUE(HasNvmlCode(failed.status(), kNvmlInsufficientResources)) << failed.status();
  EXPECT_NE(failed.status().message().find("injected"), std::string::npos);
  EXPECT_EQ(Instances(), 0u);
  // Spent: the next call reaches the inner backend.
  ASSERT_TRUE(faults_->CreateGpuInstance(0, OneG(), 0).ok());
  EXPECT_EQ(Instances(), 1u);
  EXPECT_EQ(faults_->injected(), 1);
}

TEST_P(FaultInjectingBackendTest, CallNumbersAndRepeatsAreKept) {
  ASSERT_TRUE(faults_->Inject({"", kNvmlGpuIsLost, 3, 1}).ok());  // only the third call
  EXPECT_TRUE(faults_->ListGpus().ok());
  EXPECT_TRUE(faults_->ListGpuInstances(0).ok());
  EXPECT_TRUE(
      HasNvmlCode(faults_->GetMemory(0, std::nullopt, std::nullopt).status(), kNvmlGpuIsLost));
  EXPECT_TRUE(faults_->GetMemory(0, std::nullopt, std::nullopt).ok());
  faults_->Clear();
  ASSERT_TRUE(faults_->Inject({"Destroy", kNvmlInUse, 0, -1}).ok());  // always
  ASSERT_TRUE(faults_->CreateGpuInstance(0, OneG(), 2).ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(HasNvmlCode(faults_->DestroyGpuInstance(0, 0), kNvmlInUse));
  }
  EXPECT_EQ(Instances(), 1u);
  EXPECT_EQ(faults_->calls(), 4);
  EXPECT_EQ(faults_->injected(), 3);
}

TEST_P(FaultInjectingBackendTest, BadRulesAreRefused) {
  EXPECT_EQ(faults_->Inject({"x", kNvmlSuccess, 0, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(faults_->Inject({"x", kNvmlInUse, 0, 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(faults_->Inject({"x", kNvmlInUse, 0, -2}).code(), absl::StatusCode::kInvalidArgument);
}

std::string InnerName(const ::testing::TestParamInfo<bool>& param) {
  return param.param ? "NvmlOverTestLibrary" : "SimInMemory";
}

INSTANTIATE_TEST_SUITE_P(Inner, FaultInjectingBackendTest, ::testing::Bool(), InnerName);

}  // namespace
}  // namespace gpuslice::device
