// Alerts from successive collections (gpuslice/metrics/alerts.h), on hand-made figures: each kind
// fires once when its condition starts, carries the lease that holds the device, and clears when
// the condition ends (state alerts) or after the hold time (event alerts).
#include "gpuslice/metrics/alerts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpuslice::metrics {
namespace {

using ::testing::HasSubstr;

constexpr char kGpu0[] = "GPU-0000";
constexpr char kGpu1[] = "GPU-1111";
constexpr char kMig[] = "MIG-aaaa";

// GPU 0: MIG, one 1g.10gb instance (GI 9) with `mig_used` MiB of 9984 and the given processes;
// GPU 1: whole, 81559 MiB, `whole_used` used.
MachineFigures Machine(std::int64_t mig_used, std::vector<device::ProcessInfo> mig_processes,
                       std::int64_t whole_used = 0) {
  MachineFigures m;
  m.host = "node-a";
  GpuFigures mig;
  mig.index = 0;
  mig.uuid = kGpu0;
  mig.name = "NVIDIA H100 80GB HBM3";
  mig.mig = true;
  mig.processes = static_cast<int>(mig_processes.size());
  mig.process_list = mig_processes;
  InstanceFigures instance;
  instance.gi = 9;
  instance.profile = "1g.10gb";
  instance.uuid = kMig;
  instance.memory_used_mib = mig_used;
  instance.memory_total_mib = 9984;
  instance.processes = static_cast<int>(mig_processes.size());
  instance.process_list = mig_processes;
  mig.instances.push_back(instance);
  GpuFigures whole;
  whole.index = 1;
  whole.uuid = kGpu1;
  whole.name = "NVIDIA H100 80GB HBM3";
  whole.memory_used_mib = whole_used;
  whole.memory_total_mib = 81559;
  whole.processes = 0;
  m.gpus = {mig, whole};
  return m;
}

std::vector<Holder> Leased() {
  Holder holder;
  holder.device_uuid = kMig;
  holder.lease = 12;
  holder.tenant = "team-a";
  holder.class_name = "small";
  return {holder};
}

std::vector<std::string> Kinds(const std::vector<Alert>& alerts) {
  std::vector<std::string> out;
  for (const Alert& a : alerts) out.push_back(a.kind);
  return out;
}

TEST(AlertTrackerTest, MemoryHighFiresOnceCarriesTheLeaseAndClears) {
  AlertTracker tracker;
  EXPECT_TRUE(tracker.Update(Machine(1000, {}), Leased(), 100).empty());
  AlertChanges changes = tracker.Update(Machine(9500, {}), Leased(), 101);
  ASSERT_EQ(Kinds(changes.fired), std::vector<std::string>{"memory_high"});
  const Alert& alert = changes.fired[0];
  EXPECT_EQ(alert.severity, "warning");
  EXPECT_EQ(alert.device_uuid, kMig);
  EXPECT_EQ(alert.gpu, 0);
  EXPECT_EQ(alert.gi, 9);
  EXPECT_EQ(alert.lease, 12);
  EXPECT_EQ(alert.tenant, "team-a");
  EXPECT_EQ(alert.since, 101);
  EXPECT_THAT(alert.message, HasSubstr("GPU 0 GI 9 memory at 95% (9500 of 9984 MiB)"));
  EXPECT_TRUE(tracker.Update(Machine(9600, {}), Leased(), 102).empty()) << "fires once";
  EXPECT_EQ(tracker.active().size(), 1u);
  changes = tracker.Update(Machine(2000, {}), Leased(), 103);
  EXPECT_TRUE(changes.fired.empty());
  ASSERT_EQ(changes.cleared.size(), 1u);
  EXPECT_EQ(changes.cleared[0].cleared, 103);
  EXPECT_TRUE(tracker.active().empty());
  // The whole GPU counts too, with no lease.
  changes = tracker.Update(Machine(0, {}, 80000), {}, 104);
  ASSERT_EQ(Kinds(changes.fired), std::vector<std::string>{"memory_high"});
  EXPECT_EQ(changes.fired[0].lease, 0);
  EXPECT_FALSE(changes.fired[0].gi.has_value());
}

TEST(AlertTrackerTest, AProcessEndingAtFullMemoryIsOutOfMemoryOtherwiseExited) {
  AlertPolicy policy;
  policy.event_hold_s = 60;
  AlertTracker tracker(policy);
  const device::ProcessInfo trainer{4242, "trainer", 9800, 9, 0};
  tracker.Update(Machine(9800, {trainer}), Leased(), 100);
  AlertChanges changes = tracker.Update(Machine(0, {}), Leased(), 110);
  ASSERT_EQ(Kinds(changes.fired), std::vector<std::string>{"out_of_memory"});
  EXPECT_EQ(changes.fired[0].severity, "critical");
  EXPECT_THAT(changes.fired[0].message,
              HasSubstr("process 4242 (trainer) on GPU 0 GI 9 ended with the device's memory at "
                        "98%: most likely out of memory"));
  EXPECT_EQ(changes.fired[0].lease, 12);
  // An event: it stays for the hold time, then clears by itself.
  EXPECT_TRUE(tracker.Update(Machine(0, {}), Leased(), 150).empty());
  changes = tracker.Update(Machine(0, {}), Leased(), 171);
  EXPECT_EQ(Kinds(changes.cleared), std::vector<std::string>{"out_of_memory"});

  // A process ending at low memory on a leased device: it exited.
  const device::ProcessInfo server{77, "server", 1000, 9, 0};
  tracker.Update(Machine(1000, {server}), Leased(), 200);
  changes = tracker.Update(Machine(0, {}), Leased(), 201);
  ASSERT_EQ(Kinds(changes.fired), std::vector<std::string>{"process_exited"});
  EXPECT_THAT(changes.fired[0].message, HasSubstr("process 77 (server) on GPU 0 GI 9 ended"));
  // Without a lease on the device, a process that exits is no alert.
  tracker.Update(Machine(1000, {server}), {}, 300);
  EXPECT_TRUE(tracker.Update(Machine(0, {}), {}, 301).fired.empty());
}

TEST(AlertTrackerTest, AProcessListThatCannotBeReadIsNotTakenForEndedProcesses) {
  AlertTracker tracker;
  const device::ProcessInfo trainer{4242, "trainer", 9800, 9, 0};
  EXPECT_EQ(Kinds(tracker.Update(Machine(9800, {trainer}), Leased(), 100).fired),
            std::vector<std::string>{"memory_high"});
  MachineFigures unknown = Machine(9800, {});
  unknown.gpus[0].processes.reset();
  unknown.gpus[0].instances[0].processes.reset();
  // The memory is still at 98% (memory_high stays); the process is not taken for ended.
  const AlertChanges changes = tracker.Update(unknown, Leased(), 101);
  EXPECT_TRUE(changes.fired.empty());
  EXPECT_TRUE(changes.cleared.empty());
  // Once the list is read again without it, it did end.
  EXPECT_EQ(Kinds(tracker.Update(Machine(0, {}), Leased(), 102).fired),
            std::vector<std::string>{"out_of_memory"});
}

TEST(AlertTrackerTest, XidIsChargedToTheInstanceAndCounted) {
  AlertTracker tracker;
  MachineFigures m = Machine(0, {});
  m.xids.push_back({0, 48, 9, 0});
  m.xids.push_back({1, 79, std::nullopt, std::nullopt});
  AlertChanges changes = tracker.Update(m, Leased(), 100);
  ASSERT_EQ(Kinds(changes.fired), (std::vector<std::string>{"xid", "xid"}));
  bool saw_instance = false;
  for (const Alert& a : changes.fired) {
    if (a.device_uuid == kMig) {
      saw_instance = true;
      EXPECT_EQ(a.lease, 12);
      EXPECT_THAT(a.message, HasSubstr("Xid 48 on GPU 0 GI 9"));
    } else {
      EXPECT_EQ(a.device_uuid, kGpu1);
      EXPECT_THAT(a.message, HasSubstr("Xid 79 on GPU 1"));
    }
  }
  EXPECT_TRUE(saw_instance);
  m.xids = {{0, 48, 9, 0}};
  changes = tracker.Update(m, Leased(), 101);
  EXPECT_EQ(changes.fired.size(), 1u) << "a new Xid is a new event";
  const std::vector<Family> families = tracker.Families("node-a");
  bool counted = false;
  bool last = false;
  for (const Family& f : families) {
    for (const Sample& s : f.samples) {
      const bool gpu0 =
          std::find(s.labels.begin(), s.labels.end(),
                    std::pair<std::string, std::string>{"UUID", kGpu0}) != s.labels.end();
      if (f.name == "gpuslice_xid_errors_total" && gpu0) {
        EXPECT_EQ(s.value, 2);
        counted = true;
      }
      if (f.name == "DCGM_FI_DEV_XID_ERRORS" && gpu0) {
        EXPECT_EQ(s.value, 48);
        last = true;
      }
    }
  }
  EXPECT_TRUE(counted && last);
  absl::StatusOr<std::string> text = Write(families);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("gpuslice_alerts{kind=\"xid\",severity=\"critical\","
                               "Hostname=\"node-a\"} 3\n"));
  EXPECT_THAT(*text, HasSubstr("gpuslice_alerts{kind=\"gpu_lost\",severity=\"critical\","
                               "Hostname=\"node-a\"} 0\n"));
  EXPECT_THAT(*text,
              HasSubstr("gpuslice_alerts_fired_total{kind=\"xid\",Hostname=\"node-a\"} 3\n"));
}

TEST(AlertTrackerTest, ThrottlingByHeatOrPowerAlertsIdlingDoesNot) {
  AlertTracker tracker;
  MachineFigures m = Machine(0, {});
  m.gpus[1].telemetry.throttle_reasons = device::kThrottleGpuIdle;
  EXPECT_TRUE(tracker.Update(m, {}, 100).empty());
  m.gpus[1].telemetry.throttle_reasons = device::kThrottleSwThermal | device::kThrottleSwPowerCap;
  m.gpus[1].telemetry.temperature_c = 88;
  AlertChanges changes = tracker.Update(m, {}, 101);
  ASSERT_EQ(Kinds(changes.fired), std::vector<std::string>{"throttled"});
  EXPECT_THAT(changes.fired[0].message,
              HasSubstr("GPU 1 clocks held back: sw_power_cap, sw_thermal, 88 C"));
  m.gpus[1].telemetry.throttle_reasons = 0;
  EXPECT_EQ(Kinds(tracker.Update(m, {}, 102).cleared), std::vector<std::string>{"throttled"});
}

TEST(AlertTrackerTest, AGpuLostOrGoneFromTheListAlertsUntilItIsBack) {
  AlertTracker tracker;
  tracker.Update(Machine(0, {}), {}, 100);
  MachineFigures lost = Machine(0, {});
  lost.gpus[0].lost = true;
  lost.gpus[0].instances.clear();
  AlertChanges changes = tracker.Update(lost, {}, 101);
  ASSERT_EQ(Kinds(changes.fired), std::vector<std::string>{"gpu_lost"});
  EXPECT_THAT(changes.fired[0].message, HasSubstr("GPU_IS_LOST"));
  // Gone from the list altogether: still lost, not a second alert.
  MachineFigures gone = Machine(0, {});
  gone.gpus.erase(gone.gpus.begin());
  changes = tracker.Update(gone, {}, 102);
  EXPECT_TRUE(changes.fired.empty());
  EXPECT_TRUE(changes.cleared.empty());
  changes = tracker.Update(Machine(0, {}), {}, 103);
  EXPECT_EQ(Kinds(changes.cleared), std::vector<std::string>{"gpu_lost"});
  // A GPU that vanishes without a lost answer (a driver that no longer lists it).
  changes = tracker.Update(gone, {}, 104);
  ASSERT_EQ(Kinds(changes.fired), std::vector<std::string>{"gpu_lost"});
  EXPECT_THAT(changes.fired[0].message, HasSubstr("no longer listed"));
}

TEST(AlertTrackerTest, IdleBeyondTheClassThresholdAlerts) {
  AlertTracker tracker;
  std::vector<Holder> holders = Leased();
  holders[0].idle_s = 100;
  holders[0].idle_threshold_s = 0;  // the class never reclaims: no idle alert
  EXPECT_TRUE(tracker.Update(Machine(0, {}), holders, 100).empty());
  holders[0].idle_threshold_s = 600;
  EXPECT_TRUE(tracker.Update(Machine(0, {}), holders, 101).empty());
  holders[0].idle_s = 600;
  AlertChanges changes = tracker.Update(Machine(0, {}), holders, 102);
  ASSERT_EQ(Kinds(changes.fired), std::vector<std::string>{"idle"});
  EXPECT_THAT(changes.fired[0].message,
              HasSubstr("GPU 0 GI 9 idle for 600 s, beyond its class's 600 s (lease 12"));
  holders[0].idle_s = 0;
  EXPECT_EQ(Kinds(tracker.Update(Machine(0, {}), holders, 103).cleared),
            std::vector<std::string>{"idle"});
}

TEST(AlertTrackerTest, GrowingUncorrectedEccErrorsAndRemapFailuresAlert) {
  AlertTracker tracker;
  MachineFigures m = Machine(0, {});
  m.gpus[1].telemetry.ecc_uncorrected = 3;
  EXPECT_TRUE(tracker.Update(m, {}, 100).empty()) << "a count seen first is no growth";
  m.gpus[1].telemetry.ecc_uncorrected = 5;
  AlertChanges changes = tracker.Update(m, {}, 101);
  ASSERT_EQ(Kinds(changes.fired), std::vector<std::string>{"memory_errors"});
  EXPECT_THAT(changes.fired[0].message, HasSubstr("grew from 3 to 5"));
  EXPECT_TRUE(tracker.Update(m, {}, 102).empty()) << "the same count is not a new event";
  m.gpus[1].telemetry.remap_failure = true;
  changes = tracker.Update(m, {}, 103);
  ASSERT_EQ(Kinds(changes.fired), std::vector<std::string>{"row_remap_failure"});
  EXPECT_EQ(changes.fired[0].severity, "critical");
}

TEST(AlertJsonTest, RoundTripsAndRefusesMalformedAlerts) {
  AlertTracker tracker;
  tracker.Update(Machine(1000, {}), Leased(), 100);
  AlertChanges changes = tracker.Update(Machine(9900, {}), Leased(), 101);
  ASSERT_EQ(changes.fired.size(), 1u);
  absl::StatusOr<Alert> back = AlertFromJson(AlertToJson(changes.fired[0]));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, changes.fired[0]);
  EXPECT_FALSE(AlertFromJson(nlohmann::json::array()).ok());
  EXPECT_FALSE(AlertFromJson({{"kind", "xid"}, {"message", "m"}}).ok()) << "no key";
  EXPECT_FALSE(AlertFromJson({{"key", "k"}, {"kind", "xid"}, {"message", 5}}).ok());
  EXPECT_FALSE(
      AlertFromJson({{"key", "k"}, {"kind", "xid"}, {"message", "m"}, {"severity", "meh"}}).ok());
  absl::StatusOr<Alert> defaulted =
      AlertFromJson({{"key", "k"}, {"kind", "xid"}, {"message", "m"}});
  ASSERT_TRUE(defaulted.ok());
  EXPECT_EQ(defaulted->severity, "critical");
}

}  // namespace
}  // namespace gpuslice::metrics
