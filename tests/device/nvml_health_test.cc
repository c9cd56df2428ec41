// NvmlBackend's health figures over the test NVML library, where NVML differs from the simulator:
// failing queries (driver errors, older drivers without a function), GPM sample bookkeeping and
// Xid registration. The state's fault rules make a chosen NVML function fail.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "gpuslice/device/nvml_backend.h"
#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/device/sim_machine.h"
#include "gpuslice/device/sim_store.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::device {
namespace {

using sim::SimMachine;
using sim::SimState;

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

// "0: H100-80GB, 1: A100-40GB" in a state file, driven through NvmlBackend.
class NvmlHealthTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<SimState> state = sim::NewMachine(Catalog(), "H100-80GB,A100-40GB");
    ASSERT_TRUE(state.ok()) << state.status();
    char pattern[] = "/tmp/gpuslice-nvml-health-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/machine.json";
    ASSERT_TRUE(sim::SimStore::Create(path_, *state, false).ok());
    setenv("GPUSLICE_SIM", path_.c_str(), 1);
    absl::StatusOr<std::unique_ptr<NvmlBackend>> nvml =
        NvmlBackend::Load(Catalog(), GPUSLICE_FAKE_NVML);
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    backend_ = *std::move(nvml);
  }

  void TearDown() override {
    backend_.reset();
    std::filesystem::remove_all(dir_);
    unsetenv("GPUSLICE_SIM");
  }

  void Control(const std::function<int(SimState&, SimMachine&)>& fn) {
    absl::StatusOr<std::unique_ptr<sim::SimStore>> store = sim::SimStore::Open(path_);
    ASSERT_TRUE(store.ok());
    int code = 0;
    ASSERT_TRUE((*store)
                    ->Update([&](SimState& state, const std::function<void()>&) {
                      SimMachine machine(state, Catalog());
                      code = fn(state, machine);
                      return true;
                    })
                    .ok());
    ASSERT_EQ(code, 0);
  }

  // Makes every call whose NVML name contains `match` fail with `code` (`times` times; -1: always).
  void Fail(const std::string& match, int code, int times = -1) {
    Control([&](SimState& state, SimMachine&) {
      state.calls = 0;
      state.faults.push_back({0, match, code, false, times});
      return 0;
    });
  }

  std::unique_ptr<Backend> backend_;  // an NvmlBackend, used through the interface
  std::string dir_;
  std::string path_;
};

TEST_F(NvmlHealthTest, AFailingQueryLeavesItsFigureAbsent) {
  Fail("nvmlDeviceGetTemperature", kNvmlUnknown);
  Fail("nvmlDeviceGetTotalEccErrors", kNvmlNoPermission);
  absl::StatusOr<GpuTelemetry> telemetry = backend_->GetTelemetry(0);
  ASSERT_TRUE(telemetry.ok()) << telemetry.status();
  EXPECT_FALSE(telemetry->temperature_c);  // never a made-up zero
  EXPECT_FALSE(telemetry->ecc_corrected);
  EXPECT_FALSE(telemetry->ecc_uncorrected);
  EXPECT_TRUE(telemetry->power_w);
  EXPECT_TRUE(telemetry->throttle_reasons);
  EXPECT_TRUE(telemetry->remapped_rows_correctable);
}

TEST_F(NvmlHealthTest, ThrottleReasonsFromTheOlderFunction) {
  // A driver from before the rename: the new name is not there.
  Fail("nvmlDeviceGetCurrentClocksEventReasons", kNvmlFunctionNotFound);
  absl::StatusOr<GpuTelemetry> telemetry = backend_->GetTelemetry(0);
  ASSERT_TRUE(telemetry.ok()) << telemetry.status();
  EXPECT_EQ(telemetry->throttle_reasons, kThrottleGpuIdle);
  // Neither: absent.
  Fail("nvmlDeviceGetCurrentClocksThrottleReasons", kNvmlFunctionNotFound);
  telemetry = backend_->GetTelemetry(0);
  ASSERT_TRUE(telemetry.ok()) << telemetry.status();
  EXPECT_FALSE(telemetry->throttle_reasons);
  EXPECT_TRUE(telemetry->temperature_c);
}

TEST_F(NvmlHealthTest, GpuIsLostFromAnyQueryFailsTheCall) {
  Fail("nvmlDeviceGetRemappedRows", kNvmlGpuIsLost, 1);
  absl::StatusOr<GpuTelemetry> telemetry = backend_->GetTelemetry(0);
  EXPECT_TRUE(HasNvmlCode(telemetry.status(), kNvmlGpuIsLost)) << telemetry.status();
  EXPECT_NE(telemetry.status().message().find("nvmlDeviceGetRemappedRows"), std::string::npos)
      << telemetry.status();
  EXPECT_TRUE(backend_->GetTelemetry(0).ok());
}

TEST_F(NvmlHealthTest, AFailedSampleKeepsThePreviousOne) {
  Control([](SimState&, SimMachine& machine) {
    return machine.AddProcess(0, {8181, "python", 1024, -1, -1, 50});
  });
  EXPECT_TRUE(absl::IsUnavailable(backend_->SampleActivity(0).status()));
  Fail("nvmlGpmSampleGet", kNvmlUnknown, 1);
  EXPECT_TRUE(HasNvmlCode(backend_->SampleActivity(0).status(), kNvmlUnknown));
  // The first sample is still there: this call measures from it.
  absl::StatusOr<Activity> activity = backend_->SampleActivity(0);
  ASSERT_TRUE(activity.ok()) << activity.status();
  EXPECT_DOUBLE_EQ(activity->sm_active_pct, 50);
  // A failed metrics computation still moves the interval on (the new sample replaced the old).
  Fail("nvmlGpmMetricsGet", kNvmlUnknown, 1);
  EXPECT_TRUE(HasNvmlCode(backend_->SampleActivity(0).status(), kNvmlUnknown));
  EXPECT_TRUE(backend_->SampleActivity(0).ok());
  // Instances are sampled on their own (and there are none while MIG is off).
  EXPECT_TRUE(HasNvmlCode(backend_->SampleActivity(0, 1).status(), kNvmlNotSupported));
}

TEST_F(NvmlHealthTest, GpmSupportIsAskedOncePerGpu) {
  EXPECT_TRUE(HasNvmlCode(backend_->SampleActivity(1).status(), kNvmlNotSupported));  // A100
  // Were it asked again, this would fail the call with UNKNOWN.
  Fail("nvmlGpmQueryDeviceSupport", kNvmlUnknown);
  EXPECT_TRUE(HasNvmlCode(backend_->SampleActivity(1).status(), kNvmlNotSupported));
  // A GPU not asked yet does fail, and is asked again next time.
  Control([](SimState& state, SimMachine&) {
    state.faults.clear();
    state.faults.push_back({0, "nvmlGpmQueryDeviceSupport", kNvmlUnknown, false, 1});
    return 0;
  });
  EXPECT_TRUE(HasNvmlCode(backend_->SampleActivity(0).status(), kNvmlUnknown));
  EXPECT_TRUE(absl::IsUnavailable(backend_->SampleActivity(0).status()));
}

TEST_F(NvmlHealthTest, XidEventsOnlyFromRegistration) {
  // Before the first call nothing listens: this Xid is not seen.
  Control([](SimState&, SimMachine& machine) { return machine.InjectXid(0, 13, -1, -1); });
  absl::StatusOr<std::vector<XidEvent>> events = backend_->TakeXidEvents();
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_TRUE(events->empty());
  Control([](SimState&, SimMachine& machine) { return machine.InjectXid(1, 94, -1, -1); });
  events = backend_->TakeXidEvents();
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].gpu, 1);
  EXPECT_EQ((*events)[0].xid, 94u);
}

TEST_F(NvmlHealthTest, AGpuLostBeforeListeningIsLeftOutOfXidEvents) {
  Control([](SimState&, SimMachine& machine) { return machine.SetLost(0, true); });
  absl::StatusOr<std::vector<XidEvent>> events = backend_->TakeXidEvents();
  ASSERT_TRUE(events.ok()) << events.status();
  Control([](SimState&, SimMachine& machine) {
    const int code = machine.InjectXid(0, 79, -1, -1);
    return code != 0 ? code : machine.InjectXid(1, 48, -1, -1);
  });
  events = backend_->TakeXidEvents();
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].gpu, 1);
}

TEST_F(NvmlHealthTest, RegistrationFailureIsReportedAndRetried) {
  Fail("nvmlDeviceRegisterEvents", kNvmlUnknown, 1);
  EXPECT_TRUE(HasNvmlCode(backend_->TakeXidEvents().status(), kNvmlUnknown));
  absl::StatusOr<std::vector<XidEvent>> events = backend_->TakeXidEvents();
  ASSERT_TRUE(events.ok()) << events.status();
  Control([](SimState&, SimMachine& machine) { return machine.InjectXid(0, 31, -1, -1); });
  events = backend_->TakeXidEvents();
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 1u);
}

}  // namespace
}  // namespace gpuslice::device
