// The simulator's health model below the Backend seam (SimMachine and its state file): how load
// becomes figures (MIG instances weighted by their compute slices, caps, overrides), Xid and
// lost-GPU controls, and state files written before these fields existed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/device/sim_machine.h"
#include "gpuslice/device/sim_store.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::device::sim {
namespace {

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

SimState Machine(const char* spec) {
  absl::StatusOr<SimState> state = NewMachine(Catalog(), spec);
  EXPECT_TRUE(state.ok()) << state.status();
  return state.ok() ? *state : SimState{};
}

SimProcess Process(std::uint32_t pid, int gi, int ci, double sm_activity_pct) {
  SimProcess process;
  process.pid = pid;
  process.name = "python";
  process.used_mib = 1024;
  process.gi = gi;
  process.ci = ci;
  process.sm_activity_pct = sm_activity_pct;
  return process;
}

// A GI of `profile_id` at `start` with one CI using all of it; returns the GI id.
int GiWithCi(SimMachine& machine, int gpu, int profile_id, int start, int ci_profile_id) {
  int gi = -1;
  EXPECT_EQ(machine.CreateGi(gpu, profile_id, start, &gi), kNvmlSuccess);
  int ci = -1;
  EXPECT_EQ(machine.CreateCi(gpu, gi, ci_profile_id, std::nullopt, &ci), kNvmlSuccess);
  return gi;
}

TEST(SimTelemetryTest, MigLoadIsWeightedByComputeSlices) {
  SimState state = Machine("H100-80GB");
  SimMachine machine(state, Catalog());
  MigModeChange change;
  ASSERT_EQ(machine.SetMigMode(0, MigMode::kEnabled, &change), kNvmlSuccess);
  ASSERT_TRUE(change.applied);
  const int three = GiWithCi(machine, 0, 9, 0, 2);  // 3g: 3 of 7 compute slices
  const int one = GiWithCi(machine, 0, 19, 4, 0);   // 1g: 1 of 7
  const int idle = GiWithCi(machine, 0, 19, 5, 0);  // 1g, nothing runs in it
  ASSERT_EQ(machine.AddProcess(0, Process(100, three, 0, 80)), kNvmlSuccess);
  // Two processes in the same instance add up, capped at 100%.
  ASSERT_EQ(machine.AddProcess(0, Process(101, one, 0, 70)), kNvmlSuccess);
  ASSERT_EQ(machine.AddProcess(0, Process(102, one, 0, 50)), kNvmlSuccess);

  Activity activity;
  ASSERT_EQ(machine.SampleActivity(0, three, &activity), kNvmlSuccess);
  EXPECT_DOUBLE_EQ(activity.sm_active_pct, 80);
  EXPECT_DOUBLE_EQ(activity.sm_occupancy_pct, 48);
  EXPECT_DOUBLE_EQ(activity.dram_bandwidth_pct, 32);
  EXPECT_EQ(activity.interval_s, 0);
  ASSERT_EQ(machine.SampleActivity(0, one, &activity), kNvmlSuccess);
  EXPECT_DOUBLE_EQ(activity.sm_active_pct, 100);
  ASSERT_EQ(machine.SampleActivity(0, idle, &activity), kNvmlSuccess);
  EXPECT_DOUBLE_EQ(activity.sm_active_pct, 0);
  // The whole GPU: (80 * 3 + 100 * 1 + 0 * 1) / 7 = 48.57 -> 48.6.
  ASSERT_EQ(machine.SampleActivity(0, std::nullopt, &activity), kNvmlSuccess);
  EXPECT_DOUBLE_EQ(activity.sm_active_pct, 48.6);

  // Power and temperature follow the same weighted load; utilisation rates are absent with MIG.
  GpuTelemetry telemetry;
  ASSERT_EQ(machine.Telemetry(0, &telemetry), kNvmlSuccess);
  EXPECT_FALSE(telemetry.utilization_pct);
  ASSERT_TRUE(telemetry.power_w && telemetry.power_limit_w && telemetry.temperature_c);
  const double load = (80.0 * 3 + 100) / 7;
  EXPECT_NEAR(*telemetry.power_w, 700 * (0.12 + 0.78 * load / 100), 0.05);
  EXPECT_EQ(*telemetry.temperature_c, 32 + 24);  // 32 + round(48.57 / 2)
  EXPECT_EQ(*telemetry.throttle_reasons & kThrottleGpuIdle, 0u);

  // Unknown instance.
  EXPECT_EQ(machine.SampleActivity(0, 13, &activity), kNvmlNotFound);
}

TEST(SimTelemetryTest, LoadWithoutMigIsCappedAndOverridesWin) {
  SimState state = Machine("H100-80GB,A100-40GB");
  SimMachine machine(state, Catalog());
  ASSERT_EQ(machine.AddProcess(0, Process(200, -1, -1, 70)), kNvmlSuccess);
  ASSERT_EQ(machine.AddProcess(0, Process(201, -1, -1, 70)), kNvmlSuccess);
  GpuTelemetry telemetry;
  ASSERT_EQ(machine.Telemetry(0, &telemetry), kNvmlSuccess);
  EXPECT_EQ(telemetry.utilization_pct, 100);
  EXPECT_EQ(telemetry.memory_utilization_pct, 60);
  ASSERT_TRUE(telemetry.power_w);
  EXPECT_DOUBLE_EQ(*telemetry.power_w, 630);  // 700 * 0.9
  Activity activity;
  ASSERT_EQ(machine.SampleActivity(0, std::nullopt, &activity), kNvmlSuccess);
  EXPECT_DOUBLE_EQ(activity.sm_active_pct, 100);

  // A utilisation override also sets the GPM figure of the whole GPU; power stays derived.
  state.gpus[0].telemetry.utilization_pct = 25;
  ASSERT_EQ(machine.Telemetry(0, &telemetry), kNvmlSuccess);
  EXPECT_EQ(telemetry.utilization_pct, 25);
  EXPECT_EQ(telemetry.memory_utilization_pct, 15);
  EXPECT_DOUBLE_EQ(*telemetry.power_w, 630);
  ASSERT_EQ(machine.SampleActivity(0, std::nullopt, &activity), kNvmlSuccess);
  EXPECT_DOUBLE_EQ(activity.sm_active_pct, 25);
  // Instances while MIG is off, and GPM before Hopper.
  EXPECT_EQ(machine.SampleActivity(0, 1, &activity), kNvmlNotSupported);
  EXPECT_EQ(machine.SampleActivity(1, std::nullopt, &activity), kNvmlNotSupported);
}

TEST(SimTelemetryTest, GeForceHasNoEccAndLostGpusAnswerLost) {
  SimState state = Machine("RTX-4090,H100-80GB");
  SimMachine machine(state, Catalog());
  GpuTelemetry telemetry;
  ASSERT_EQ(machine.Telemetry(0, &telemetry), kNvmlSuccess);
  EXPECT_FALSE(telemetry.ecc_corrected);
  EXPECT_FALSE(telemetry.remapped_rows_correctable);
  EXPECT_TRUE(telemetry.temperature_c);

  EXPECT_EQ(machine.CheckGpu(1), kNvmlSuccess);
  EXPECT_EQ(machine.CheckGpu(2), kNvmlInvalidArgument);
  ASSERT_EQ(machine.SetLost(1, true), kNvmlSuccess);
  EXPECT_EQ(machine.CheckGpu(1), kNvmlGpuIsLost);
  EXPECT_EQ(machine.Telemetry(1, &telemetry), kNvmlGpuIsLost);
  Activity activity;
  EXPECT_EQ(machine.SampleActivity(1, std::nullopt, &activity), kNvmlGpuIsLost);
  EXPECT_EQ(machine.Telemetry(5, &telemetry), kNvmlInvalidArgument);
  EXPECT_EQ(machine.SetLost(5, true), kNvmlInvalidArgument);
}

TEST(SimTelemetryTest, XidsAreCheckedQueuedAndTakenOnce) {
  SimState state = Machine("H100-80GB,L4");
  SimMachine machine(state, Catalog());
  EXPECT_EQ(machine.InjectXid(0, 0, -1, -1), kNvmlInvalidArgument);   // no Xid 0
  EXPECT_EQ(machine.InjectXid(7, 79, -1, -1), kNvmlInvalidArgument);  // no GPU 7
  EXPECT_EQ(machine.InjectXid(0, 43, 3, 0), kNvmlNotFound);           // no GI 3
  ASSERT_EQ(machine.InjectXid(1, 48, -1, 2), kNvmlSuccess);  // a CI without a GI is dropped
  ASSERT_EQ(machine.InjectXid(0, 79, -1, -1), kNvmlSuccess);
  std::vector<XidEvent> events;
  machine.TakeXids(&events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].gpu, 1);
  EXPECT_EQ(events[0].xid, 48u);
  EXPECT_FALSE(events[0].gi);
  EXPECT_FALSE(events[0].ci);
  EXPECT_EQ(events[1].xid, 79u);
  std::vector<XidEvent> again;
  machine.TakeXids(&again);
  EXPECT_TRUE(again.empty());
}

TEST(SimTelemetryTest, NewFieldsSurviveTheStateFile) {
  SimState state = Machine("A100-40GB");
  SimMachine machine(state, Catalog());
  ASSERT_EQ(machine.AddProcess(0, Process(300, -1, -1, 12.5)), kNvmlSuccess);
  SimTelemetry& t = state.gpus[0].telemetry;
  t.temperature_c = 88;
  t.power_w = 123.4;
  t.throttle_reasons = kThrottleHwSlowdown;
  t.ecc_uncorrected = 2;
  t.remap_failure = true;
  t.unsupported = {"gpm", "clocks"};
  state.gpus[0].lost = true;
  ASSERT_EQ(machine.InjectXid(0, 31, -1, -1), kNvmlSuccess);

  absl::StatusOr<SimState> back = FromJson(ToJson(state), "test");
  ASSERT_TRUE(back.ok()) << back.status();
  const SimGpu& gpu = back->gpus[0];
  EXPECT_EQ(gpu.telemetry.temperature_c, 88);
  EXPECT_EQ(gpu.telemetry.power_w, 123.4);
  EXPECT_FALSE(gpu.telemetry.utilization_pct);
  EXPECT_EQ(gpu.telemetry.throttle_reasons, kThrottleHwSlowdown);
  EXPECT_EQ(gpu.telemetry.ecc_uncorrected, 2u);
  EXPECT_TRUE(gpu.telemetry.remap_failure);
  EXPECT_EQ(gpu.telemetry.unsupported, (std::vector<std::string>{"gpm", "clocks"}));
  EXPECT_TRUE(gpu.lost);
  ASSERT_EQ(gpu.processes.size(), 1u);
  EXPECT_EQ(gpu.processes[0].sm_activity_pct, 12.5);
  ASSERT_EQ(back->xids.size(), 1u);
  EXPECT_EQ(back->xids[0].xid, 31u);
  EXPECT_EQ(back->xids[0].gi, -1);
}

TEST(SimTelemetryTest, StateFilesFromBeforeTheHealthFiguresStillLoad) {
  SimState state = Machine("H100-80GB,A100-40GB");
  SimMachine machine(state, Catalog());
  ASSERT_EQ(machine.AddProcess(0, Process(400, -1, -1, 90)), kNvmlSuccess);
  // The same machine as an older gpuslice wrote it: no "xids", no GPU "telemetry" or "lost", no
  // process "sm_activity_pct".
  nlohmann::json old = nlohmann::json::parse(ToJson(state));
  ASSERT_TRUE(old.contains("xids"));
  old.erase("xids");
  for (nlohmann::json& gpu : old["gpus"]) {
    ASSERT_TRUE(gpu.contains("telemetry") && gpu.contains("lost"));
    gpu.erase("telemetry");
    gpu.erase("lost");
    for (nlohmann::json& process : gpu["processes"]) process.erase("sm_activity_pct");
  }
  absl::StatusOr<SimState> loaded = FromJson(old.dump(), "old state");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->xids.empty());
  ASSERT_EQ(loaded->gpus.size(), 2u);
  const SimGpu& gpu = loaded->gpus[0];
  EXPECT_FALSE(gpu.lost);
  EXPECT_FALSE(gpu.telemetry.temperature_c);
  EXPECT_TRUE(gpu.telemetry.unsupported.empty());
  ASSERT_EQ(gpu.processes.size(), 1u);
  EXPECT_EQ(gpu.processes[0].pid, 400u);
  EXPECT_EQ(gpu.processes[0].sm_activity_pct, SimProcess{}.sm_activity_pct);  // the default
  // And it runs: the old process counts with the default activity.
  SimMachine reloaded(*loaded, Catalog());
  GpuTelemetry telemetry;
  ASSERT_EQ(reloaded.Telemetry(0, &telemetry), kNvmlSuccess);
  EXPECT_EQ(telemetry.utilization_pct, static_cast<int>(SimProcess{}.sm_activity_pct));
  // A telemetry section with an unknown key is refused, like the rest of the state.
  nlohmann::json bad = nlohmann::json::parse(ToJson(state));
  bad["gpus"][0]["telemetry"]["temperature"] = 50;
  EXPECT_FALSE(FromJson(bad.dump(), "bad state").ok());
}

}  // namespace
}  // namespace gpuslice::device::sim
