// The collector of per-GPU and per-MIG-instance figures, on the simulator: what it reads through
// the backend (memory, processes, instances with their MIG UUIDs), that a failed query leaves its
// figure absent rather than zero, and the families it turns into (dcgm-exporter's names and
// labels, leases tied to their devices), which the exposition writer accepts; software slices'
// accounting files (issue 8) and their families.
#include "gpuslice/metrics/collector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/device/sim_machine.h"
#include "gpuslice/hw/catalog.h"
#include "shim/slice_file.h"

namespace gpuslice::metrics {
namespace {

using device::sim::SimMachine;
using ::testing::HasSubstr;

// NVML compute-instance profile constants: the full CI of a 1-slice and of a 3-slice GI.
constexpr int kCi1Slice = 0;
constexpr int kCi3Slice = 2;
// nvidia-smi GI profile ids on H100-80GB.
constexpr int kGi1g10gb = 19;
constexpr int kGi3g40gb = 9;

class CollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<device::sim::SimState> state =
        device::sim::NewMachine(hw::Catalog::Builtin(), "2xH100-80GB", 3);
    ASSERT_TRUE(state.ok()) << state.status();
    state->gpus[0].mig_current = device::MigMode::kEnabled;
    state->gpus[0].mig_pending = device::MigMode::kEnabled;
    backend_ = std::make_unique<device::SimBackend>(*std::move(state), hw::Catalog::Builtin());
    // GPU 0: a 3g.40gb at 4 with a process, a 1g.10gb at 0 without one.
    absl::StatusOr<device::GpuInstanceInfo> big = backend_->CreateGpuInstance(0, kGi3g40gb, 4);
    ASSERT_TRUE(big.ok()) << big.status();
    absl::StatusOr<device::ComputeInstanceInfo> big_ci =
        backend_->CreateComputeInstance(0, big->id, kCi3Slice, 0);
    ASSERT_TRUE(big_ci.ok()) << big_ci.status();
    big_gi_ = big->id;
    big_uuid_ = big_ci->uuid;
    absl::StatusOr<device::GpuInstanceInfo> small = backend_->CreateGpuInstance(0, kGi1g10gb, 0);
    ASSERT_TRUE(small.ok()) << small.status();
    absl::StatusOr<device::ComputeInstanceInfo> small_ci =
        backend_->CreateComputeInstance(0, small->id, kCi1Slice, 0);
    ASSERT_TRUE(small_ci.ok()) << small_ci.status();
    small_gi_ = small->id;
    small_uuid_ = small_ci->uuid;
    absl::Status added = backend_->Control("add process", true, [&](SimMachine& machine) {
      return machine.AddProcess(0, {4242, "trainer", 6000, big_gi_, big_ci->id});
    });
    ASSERT_TRUE(added.ok()) << added;
    // GPU 1: MIG off, one process.
    added = backend_->Control("add process", true, [&](SimMachine& machine) {
      return machine.AddProcess(1, {4343, "server", 2048, -1, -1});
    });
    ASSERT_TRUE(added.ok()) << added;
  }

  // The value of the sample of `family` whose labels include all of `want`, or -1.
  static double ValueOf(const std::vector<Family>& families, const std::string& family,
                        const std::map<std::string, std::string>& want) {
    for (const Family& f : families) {
      if (f.name != family) continue;
      for (const Sample& s : f.samples) {
        int matched = 0;
        for (const auto& [name, value] : s.labels) {
          auto it = want.find(name);
          if (it != want.end() && it->second == value) ++matched;
        }
        if (matched == static_cast<int>(want.size())) return s.value;
      }
    }
    return -1;
  }

  std::unique_ptr<device::SimBackend> backend_;
  int big_gi_ = -1;
  int small_gi_ = -1;
  std::string big_uuid_;
  std::string small_uuid_;
};

TEST_F(CollectorTest, ReadsGpusInstancesMemoryAndProcesses) {
  const MachineFigures machine = Collect(*backend_, "node-a");
  EXPECT_TRUE(machine.errors.empty()) << machine.errors.front();
  ASSERT_EQ(machine.gpus.size(), 2u);
  const GpuFigures& mig = machine.gpus[0];
  EXPECT_TRUE(mig.mig);
  EXPECT_EQ(mig.processes, 1);
  EXPECT_EQ(mig.process_memory_mib, 6000);
  ASSERT_EQ(mig.instances.size(), 2u);
  std::map<std::string, InstanceFigures> by_profile;
  for (const InstanceFigures& i : mig.instances) by_profile[i.profile] = i;
  ASSERT_TRUE(by_profile.contains("3g.40gb") && by_profile.contains("1g.10gb"));
  EXPECT_EQ(by_profile["3g.40gb"].gi, big_gi_);
  EXPECT_EQ(by_profile["3g.40gb"].uuid, big_uuid_);
  EXPECT_EQ(by_profile["3g.40gb"].processes, 1);
  EXPECT_EQ(by_profile["3g.40gb"].process_memory_mib, 6000);
  EXPECT_EQ(by_profile["1g.10gb"].processes, 0);
  ASSERT_TRUE(by_profile["3g.40gb"].memory_total_mib.has_value());
  ASSERT_TRUE(by_profile["1g.10gb"].memory_total_mib.has_value());
  EXPECT_GT(*by_profile["3g.40gb"].memory_total_mib, *by_profile["1g.10gb"].memory_total_mib);
  const GpuFigures& whole = machine.gpus[1];
  EXPECT_FALSE(whole.mig);
  EXPECT_TRUE(whole.instances.empty());
  EXPECT_EQ(whole.processes, 1);
  ASSERT_TRUE(whole.memory_total_mib.has_value());
  EXPECT_EQ(*whole.memory_total_mib, backend_->ListGpus()->at(1).memory_total_mib);
}

TEST_F(CollectorTest, AFailedQueryLeavesItsFigureAbsentNotZero) {
  absl::Status armed = backend_->Control("arm", true, [](SimMachine& machine) {
    machine.state().calls = 0;
    machine.state().faults.push_back(
        {0, "ListProcesses", device::kNvmlUnknown, /*abort_process=*/false, /*times=*/-1});
    return device::kNvmlSuccess;
  });
  ASSERT_TRUE(armed.ok()) << armed;
  const MachineFigures machine = Collect(*backend_, "node-a");
  ASSERT_EQ(machine.gpus.size(), 2u);
  EXPECT_EQ(machine.errors.size(), 2u);  // one per GPU
  EXPECT_THAT(machine.errors.front(), HasSubstr("processes"));
  EXPECT_FALSE(machine.gpus[0].processes.has_value());
  EXPECT_FALSE(machine.gpus[0].instances[0].processes.has_value());
  EXPECT_TRUE(machine.gpus[0].memory_used_mib.has_value());  // the rest is still read
  const std::vector<Family> families = Families(machine, {});
  for (const Family& f : families) {
    if (f.name == "gpuslice_processes") {
      EXPECT_TRUE(f.samples.empty()) << "no made-up zeros";
    }
  }
  EXPECT_EQ(ValueOf(families, "gpuslice_collect_errors", {{"Hostname", "node-a"}}), 2);
}

TEST_F(CollectorTest, FamiliesUseDcgmNamesAndTieLeasesToTheirDevices) {
  const MachineFigures machine = Collect(*backend_, "node-a");
  std::vector<Holder> holders = {
      {big_uuid_, 7, "team-a", "medium", 0, 0},
      {small_uuid_, 8, "team-b", "small", 95, 0},
      {machine.gpus[1].uuid, 9, "team-b", "share", std::nullopt, 8192},
  };
  const std::vector<Family> families = Families(machine, holders);
  const std::string big_gi = std::to_string(big_gi_);
  // Per instance, with GPU_I_ID and GPU_I_PROFILE as dcgm-exporter labels MIG devices.
  const double used = ValueOf(families, "DCGM_FI_DEV_FB_USED",
                              {{"gpu", "0"}, {"GPU_I_ID", big_gi}, {"GPU_I_PROFILE", "3g.40gb"}});
  const double total =
      ValueOf(families, "DCGM_FI_DEV_FB_TOTAL", {{"gpu", "0"}, {"GPU_I_ID", big_gi}});
  const double free =
      ValueOf(families, "DCGM_FI_DEV_FB_FREE", {{"gpu", "0"}, {"GPU_I_ID", big_gi}});
  EXPECT_GE(used, 0);
  EXPECT_GT(total, 0);
  EXPECT_EQ(free, total - used);
  EXPECT_EQ(ValueOf(families, "gpuslice_processes", {{"GPU_I_ID", big_gi}}), 1);
  EXPECT_EQ(ValueOf(families, "gpuslice_gpu_mig_mode", {{"gpu", "0"}}), 1);
  EXPECT_EQ(ValueOf(families, "gpuslice_gpu_mig_mode", {{"gpu", "1"}}), 0);
  EXPECT_EQ(ValueOf(families, "DCGM_FI_DEV_FB_USED",
                    {{"gpu", "1"}, {"Hostname", "node-a"}, {"device", "nvidia1"}}),
            *machine.gpus[1].memory_used_mib);
  // Leases: on the instance's series labels, with the MIG device's UUID.
  EXPECT_EQ(ValueOf(families, "gpuslice_lease_info",
                    {{"lease", "7"},
                     {"tenant", "team-a"},
                     {"UUID", big_uuid_},
                     {"GPU_I_PROFILE", "3g.40gb"},
                     {"Hostname", "node-a"}}),
            1);
  EXPECT_EQ(ValueOf(families, "gpuslice_lease_idle_seconds", {{"lease", "8"}}), 95);
  EXPECT_EQ(ValueOf(families, "gpuslice_lease_idle_seconds", {{"lease", "9"}}), -1)
      << "unknown idleness is absent";
  EXPECT_EQ(ValueOf(families, "gpuslice_lease_vram_limit_mib", {{"lease", "9"}, {"gpu", "1"}}),
            8192);
  // The whole exposition is valid.
  absl::StatusOr<std::string> text = Write(families);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("# TYPE DCGM_FI_DEV_FB_USED gauge\n"));
}

TEST_F(CollectorTest, PodsHoldingDevicesAndSlicesGetDcgmPodLabels) {
  MachineFigures machine = Collect(*backend_, "node-a");
  machine.pods_by_uuid[big_uuid_] = {"ml", "trainer-0", "main"};
  machine.pods_by_uuid[machine.gpus[1].uuid] = {"web", "api-7", "server"};
  shim::SliceSnapshot slice;
  slice.id = "k8s-GPU-x-3";
  slice.gpu_uuid = "GPU-x";
  machine.slices.push_back(slice);
  machine.pods_by_slice[slice.id] = {"lab", "notebook", "jupyter"};
  const std::vector<Family> families = Families(machine, {});
  const std::string big_gi = std::to_string(big_gi_);
  // The MIG instance's series carry its pod; the GPU's own series (MIG on) do not.
  EXPECT_GE(
      ValueOf(
          families, "DCGM_FI_DEV_FB_TOTAL",
          {{"GPU_I_ID", big_gi}, {"pod", "trainer-0"}, {"namespace", "ml"}, {"container", "main"}}),
      0);
  EXPECT_EQ(ValueOf(families, "gpuslice_gpu_mig_mode", {{"gpu", "0"}, {"pod", "trainer-0"}}), -1);
  // A whole GPU's series carry its pod.
  EXPECT_EQ(
      ValueOf(families, "gpuslice_gpu_mig_mode",
              {{"gpu", "1"}, {"pod", "api-7"}, {"namespace", "web"}, {"container", "server"}}),
      0);
  // A software slice's series carry the pod of the container that holds its units.
  bool slice_labelled = false;
  for (const Family& family : families) {
    for (const Sample& sample : family.samples) {
      bool has_slice = false, has_pod = false;
      for (const auto& [name, value] : sample.labels) {
        has_slice |= name == "slice" && value == "k8s-GPU-x-3";
        has_pod |= name == "pod" && value == "notebook";
      }
      if (has_slice) {
        EXPECT_TRUE(has_pod) << family.name;
        slice_labelled = true;
      }
    }
  }
  EXPECT_TRUE(slice_labelled);
  EXPECT_TRUE(Write(families).ok());
}

TEST(CollectorStandaloneTest, AnUnreadableGpuListGivesNoGpusAndAnError) {
  absl::StatusOr<device::sim::SimState> state =
      device::sim::NewMachine(hw::Catalog::Builtin(), "1xA30-24GB", 1);
  ASSERT_TRUE(state.ok());
  state->faults.push_back({0, "ListGpus", device::kNvmlUnknown, false, -1});
  device::SimBackend backend(*std::move(state), hw::Catalog::Builtin());
  const MachineFigures machine = Collect(backend, "h");
  EXPECT_TRUE(machine.gpus.empty());
  ASSERT_EQ(machine.errors.size(), 1u);
  EXPECT_THAT(machine.errors[0], HasSubstr("listing GPUs"));
  absl::StatusOr<std::string> text = Write(Families(machine, {}));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("gpuslice_collect_errors{Hostname=\"h\"} 1\n"));
}

namespace {

absl::Status SetTelemetry(device::SimBackend& backend, int gpu,
                          const std::function<void(device::sim::SimTelemetry&)>& change) {
  return backend.Control("telemetry", true, [&](SimMachine& machine) {
    change(machine.state().gpus[static_cast<size_t>(gpu)].telemetry);
    return device::kNvmlSuccess;
  });
}

}  // namespace

TEST_F(CollectorTest, ReadsHealthAndActivityAndExposesThemUnderDcgmNames) {
  ASSERT_TRUE(SetTelemetry(*backend_, 1, [](device::sim::SimTelemetry& t) {
                t.temperature_c = 84;
                t.throttle_reasons = device::kThrottleSwThermal;
                t.ecc_uncorrected = 2;
              }).ok());
  const MachineFigures machine = Collect(*backend_, "node-a");
  EXPECT_TRUE(machine.errors.empty()) << machine.errors.front();
  const GpuFigures& mig = machine.gpus[0];
  const GpuFigures& whole = machine.gpus[1];
  // The busy MIG GPU: power and temperature follow the load; no utilisation rates with MIG on.
  ASSERT_TRUE(mig.telemetry.power_w && mig.telemetry.power_limit_w && mig.telemetry.temperature_c);
  EXPECT_EQ(*mig.telemetry.power_limit_w, 700);
  EXPECT_GT(*mig.telemetry.power_w, 700 * 0.12);
  EXPECT_FALSE(mig.telemetry.utilization_pct.has_value());
  EXPECT_EQ(whole.telemetry.temperature_c, 84);
  EXPECT_EQ(whole.telemetry.utilization_pct, 60);  // one process at the default 60%
  // GPM on Hopper: the busy instance is active, the idle one is not.
  std::map<int, InstanceFigures> by_gi;
  for (const InstanceFigures& i : mig.instances) by_gi[i.gi] = i;
  ASSERT_TRUE(by_gi[big_gi_].activity.has_value());
  EXPECT_DOUBLE_EQ(by_gi[big_gi_].activity->sm_active_pct, 60);
  ASSERT_TRUE(by_gi[small_gi_].activity.has_value());
  EXPECT_DOUBLE_EQ(by_gi[small_gi_].activity->sm_active_pct, 0);
  ASSERT_EQ(by_gi[big_gi_].process_list.size(), 1u);
  EXPECT_EQ(by_gi[big_gi_].process_list[0].pid, 4242u);
  // The GPU's activity weighs the instances by compute slices: 60% of 3 of 7 slices.
  ASSERT_TRUE(mig.activity.has_value());
  EXPECT_NEAR(mig.activity->sm_active_pct, 60.0 * 3 / 7, 0.05);

  const std::vector<Family> families = Families(machine, {});
  EXPECT_EQ(ValueOf(families, "DCGM_FI_DEV_GPU_TEMP", {{"gpu", "1"}}), 84);
  EXPECT_EQ(ValueOf(families, "DCGM_FI_DEV_GPU_UTIL", {{"gpu", "0"}}), -1) << "absent with MIG";
  EXPECT_EQ(ValueOf(families, "DCGM_FI_DEV_GPU_UTIL", {{"gpu", "1"}}), 60);
  EXPECT_EQ(ValueOf(families, "gpuslice_gpu_throttled", {{"gpu", "1"}, {"reason", "sw_thermal"}}),
            1);
  EXPECT_EQ(ValueOf(families, "gpuslice_gpu_throttled", {{"gpu", "1"}, {"reason", "hw_thermal"}}),
            0);
  EXPECT_EQ(ValueOf(families, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", {{"gpu", "1"}}), 2);
  EXPECT_DOUBLE_EQ(ValueOf(families, "DCGM_FI_PROF_SM_ACTIVE",
                           {{"gpu", "0"}, {"GPU_I_ID", std::to_string(big_gi_)}}),
                   0.6);
  EXPECT_EQ(ValueOf(families, "gpuslice_gpu_lost", {{"gpu", "0"}}), 0);
  ASSERT_TRUE(Write(families).ok());
}

TEST_F(CollectorTest, UnsupportedFiguresAreAbsentAndALostGpuIsMarked) {
  ASSERT_TRUE(SetTelemetry(*backend_, 1, [](device::sim::SimTelemetry& t) {
                t.unsupported = {"temperature", "power", "gpm"};
              }).ok());
  ASSERT_TRUE(
      backend_->Control("lose", true, [](SimMachine& machine) { return machine.SetLost(0, true); })
          .ok());
  const MachineFigures machine = Collect(*backend_, "node-a");
  const GpuFigures& lost = machine.gpus[0];
  EXPECT_TRUE(lost.lost);
  EXPECT_FALSE(lost.memory_used_mib.has_value());
  EXPECT_TRUE(lost.instances.empty());
  ASSERT_EQ(machine.errors.size(), 1u) << "one line for the lost GPU, none for unsupported figures";
  EXPECT_THAT(machine.errors[0], HasSubstr("GPU 0"));
  const GpuFigures& partial = machine.gpus[1];
  EXPECT_FALSE(partial.lost);
  EXPECT_FALSE(partial.telemetry.temperature_c.has_value());
  EXPECT_FALSE(partial.telemetry.power_w.has_value());
  EXPECT_FALSE(partial.activity.has_value());
  EXPECT_TRUE(partial.telemetry.sm_clock_mhz.has_value());
  const std::vector<Family> families = Families(machine, {});
  EXPECT_EQ(ValueOf(families, "gpuslice_gpu_lost", {{"gpu", "0"}}), 1);
  EXPECT_EQ(ValueOf(families, "DCGM_FI_DEV_GPU_TEMP", {{"gpu", "1"}}), -1);
  EXPECT_EQ(ValueOf(families, "DCGM_FI_DEV_POWER_USAGE", {{"gpu", "1"}}), -1);
}

TEST_F(CollectorTest, XidEventsAreTakenOnce) {
  ASSERT_TRUE(
      backend_
          ->Control("xid", true,
                    [&](SimMachine& machine) { return machine.InjectXid(0, 48, big_gi_, 0); })
          .ok());
  MachineFigures machine = Collect(*backend_, "node-a");
  EXPECT_TRUE(machine.xids.empty()) << "a scrape does not take them";
  CollectXids(*backend_, machine);
  ASSERT_EQ(machine.xids.size(), 1u);
  EXPECT_EQ(machine.xids[0].xid, 48u);
  EXPECT_EQ(machine.xids[0].gi, big_gi_);
  machine = Collect(*backend_, "node-a");
  CollectXids(*backend_, machine);
  EXPECT_TRUE(machine.xids.empty());
}

TEST_F(CollectorTest, SoftwareSlicesAreReadAndExposedPerSlice) {
  namespace fs = std::filesystem;
  const std::string dir =
      (fs::path(::testing::TempDir()) / ("gpuslice_collector_slices_" + std::to_string(getpid())))
          .string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  MachineFigures machine = Collect(*backend_, "node-a");
  const std::string gpu = machine.gpus[1].uuid;
  // The slice of lease 12 on GPU 1: a cap, a share, one live process and one dead.
  shim::testing::SliceFile lease(shim::SlicePath(dir, "lease-12"), "lease-12");
  ASSERT_TRUE(lease.ok());
  shim::SliceRegion& r = lease.region();
  std::snprintf(r.gpu_uuid, sizeof r.gpu_uuid, "%s", gpu.c_str());
  r.cap_bytes = 8ull << 30;
  r.share_milli = 250;
  r.kernel_ns = 1'500'000'000;
  r.throttled_ns = 250'000'000;
  r.launches = 300;
  r.refused = 2;
  r.reclaimed_processes = 1;
  shim::testing::SlotHolder live(lease.path(), 0);
  ASSERT_TRUE(live.held());
  lease.AddProcess(0, live.pid(), 3ull << 30);
  lease.AddProcess(1, 999'999, 1ull << 30);
  // A slice named by hand, measured only: neither cap nor share; no GPU yet.
  shim::testing::SliceFile notebook(shim::SlicePath(dir, "notebook"), "notebook");
  ASSERT_TRUE(notebook.ok());
  notebook.region().peak_bytes = 512;
  // And a file of another layout.
  std::ofstream(dir + "/slice-broken") << "not a region";

  CollectSlices(dir, machine);
  ASSERT_EQ(machine.slices.size(), 2u);
  EXPECT_EQ(machine.slices[0].id, "lease-12");
  EXPECT_EQ(machine.slices[1].id, "notebook");
  ASSERT_EQ(machine.errors.size(), 1u);
  EXPECT_THAT(machine.errors[0], HasSubstr("slice-broken"));

  const std::vector<Family> families = Families(machine, {});
  const std::map<std::string, std::string> of_lease = {
      {"slice", "lease-12"}, {"lease", "12"}, {"UUID", gpu}, {"Hostname", "node-a"}};
  EXPECT_EQ(ValueOf(families, "gpuslice_slice_vram_used_bytes", of_lease), 4.0 * (1 << 30));
  EXPECT_EQ(ValueOf(families, "gpuslice_slice_vram_cap_bytes", of_lease), 8.0 * (1 << 30));
  EXPECT_EQ(ValueOf(families, "gpuslice_slice_vram_peak_bytes", of_lease), 4.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(ValueOf(families, "gpuslice_slice_compute_share", of_lease), 0.25);
  EXPECT_EQ(ValueOf(families, "gpuslice_slice_processes", of_lease), 1) << "the live one";
  EXPECT_DOUBLE_EQ(ValueOf(families, "gpuslice_slice_kernel_seconds_total", of_lease), 1.5);
  EXPECT_DOUBLE_EQ(ValueOf(families, "gpuslice_slice_throttled_seconds_total", of_lease), 0.25);
  EXPECT_EQ(ValueOf(families, "gpuslice_slice_launches_total", of_lease), 300);
  EXPECT_EQ(ValueOf(families, "gpuslice_slice_refused_allocations_total", of_lease), 2);
  EXPECT_EQ(ValueOf(families, "gpuslice_slice_reclaimed_processes_total", of_lease), 1);
  const std::map<std::string, std::string> of_notebook = {{"slice", "notebook"}};
  EXPECT_EQ(ValueOf(families, "gpuslice_slice_vram_peak_bytes", of_notebook), 512);
  EXPECT_EQ(ValueOf(families, "gpuslice_slice_vram_cap_bytes", of_notebook), -1) << "no cap";
  EXPECT_EQ(ValueOf(families, "gpuslice_slice_compute_share", of_notebook), -1) << "no share";
  EXPECT_EQ(ValueOf(families, "gpuslice_slice_processes", of_notebook), 0);
  for (const Family& f : families) {
    if (f.name != "gpuslice_slice_launches_total") continue;
    EXPECT_EQ(f.type, MetricType::kCounter);
    ASSERT_EQ(f.samples.size(), 2u);
    EXPECT_EQ(f.samples[1].labels.size(), 3u) << "the notebook slice has no lease label";
  }
  EXPECT_EQ(ValueOf(families, "gpuslice_collect_errors", {{"Hostname", "node-a"}}), 1);
  absl::StatusOr<std::string> text = Write(families);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("# TYPE gpuslice_slice_launches_total counter\n"));
  EXPECT_THAT(*text, HasSubstr("gpuslice_slice_compute_share{slice=\"lease-12\",UUID=\"" + gpu +
                               "\",Hostname=\"node-a\",lease=\"12\"} 0.25\n"));

  // No directory: no slices, and no error.
  MachineFigures none = Collect(*backend_, "node-a");
  CollectSlices(dir + "/missing", none);
  EXPECT_TRUE(none.slices.empty());
  EXPECT_TRUE(none.errors.empty());
  live.Stop();
  fs::remove_all(dir);
}

TEST(CollectorStandaloneTest, AnAmpereGpuHasNoGpmActivity) {
  absl::StatusOr<device::sim::SimState> state =
      device::sim::NewMachine(hw::Catalog::Builtin(), "1xA100-80GB", 1);
  ASSERT_TRUE(state.ok());
  state->gpus[0].processes.push_back({7, "job", 100, -1, -1});
  device::SimBackend backend(*std::move(state), hw::Catalog::Builtin());
  const MachineFigures machine = Collect(backend, "h");
  ASSERT_EQ(machine.gpus.size(), 1u);
  EXPECT_TRUE(machine.errors.empty());
  EXPECT_FALSE(machine.gpus[0].activity.has_value());
  EXPECT_EQ(machine.gpus[0].telemetry.utilization_pct, 60);
  EXPECT_EQ(machine.gpus[0].telemetry.power_limit_w, 400);
}

}  // namespace
}  // namespace gpuslice::metrics
