// One conformance suite for every device::Backend: the in-memory simulator, the simulator in a
// state file, and the NVML backend running its real dlopen path over the test NVML library (built
// from the simulator). Every driver rule the reconciler relies on has a test here.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpuslice/device/fault_injecting_backend.h"
#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/device/sim_store.h"
#include "gpuslice/device/synchronized_backend.h"
#include "gpuslice/hw/catalog.h"
#ifdef GPUSLICE_FAKE_NVML
#include "gpuslice/device/nvml_backend.h"
#include "require.h"
#endif

namespace gpuslice::device {
namespace {

using sim::SimMachine;
using sim::SimState;

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

// kWrapped: the in-memory simulator through the forwarding wrappers (SynchronizedBackend over a
// FaultInjectingBackend without rules), which must change nothing.
enum class Kind { kMemory, kFile, kNvml, kWrapped };

std::string KindName(const testing::TestParamInfo<Kind>& info) {
  switch (info.param) {
    case Kind::kMemory:
      return "SimInMemory";
    case Kind::kFile:
      return "SimStateFile";
    case Kind::kNvml:
      return "NvmlOverTestLibrary";
    case Kind::kWrapped:
      return "SimThroughWrappers";
  }
  return "Unknown";
}

// A machine "0: A100-40GB, 1: H100-80GB, 2: L4, 3: A30-24GB" on the backend under test.
class ConformanceTest : public testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    absl::StatusOr<SimState> state = sim::NewMachine(Catalog(), "A100-40GB,H100-80GB,L4,A30");
    ASSERT_TRUE(state.ok()) << state.status();
    if (GetParam() == Kind::kMemory) {
      auto memory = std::make_unique<SimBackend>(*state, Catalog());
      memory_ = memory.get();
      backend_ = std::move(memory);
      return;
    }
    if (GetParam() == Kind::kWrapped) {
      auto memory = std::make_shared<SimBackend>(*state, Catalog());
      memory_ = memory.get();
      backend_ = std::make_unique<SynchronizedBackend>(
          std::make_shared<FaultInjectingBackend>(std::move(memory)));
      return;
    }
    char pattern[] = "/tmp/gpuslice-conformance-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/machine.json";
    ASSERT_TRUE(sim::SimStore::Create(path_, *state, false).ok());
    if (GetParam() == Kind::kFile) {
      absl::StatusOr<std::unique_ptr<SimBackend>> file = SimBackend::OpenFile(path_, Catalog());
      ASSERT_TRUE(file.ok()) << file.status();
      backend_ = *std::move(file);
      return;
    }
#ifdef GPUSLICE_FAKE_NVML
    setenv("GPUSLICE_SIM", path_.c_str(), 1);
    absl::StatusOr<std::unique_ptr<NvmlBackend>> nvml =
        NvmlBackend::Load(Catalog(), GPUSLICE_FAKE_NVML);
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    backend_ = *std::move(nvml);
#else
    GPUSLICE_SKIP_OR_FAIL_IN_CI("the test NVML library is not built");
#endif
  }

  void TearDown() override {
    backend_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
    unsetenv("GPUSLICE_SIM");
  }

  // Simulation controls (processes, holders, faults) on the machine under test.
  void Control(const std::function<int(SimState&, SimMachine&)>& fn) {
    if (memory_ != nullptr) {
      absl::Status status = memory_->Control(
          "control", true, [&](SimMachine& machine) { return fn(machine.state(), machine); });
      ASSERT_TRUE(status.ok()) << status;
      return;
    }
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

  void AddProcess(int gpu, std::uint32_t pid, int gi, int ci, std::int64_t mib = 1024,
                  double sm_activity_pct = 60) {
    Control([&](SimState&, SimMachine& machine) {
      return machine.AddProcess(gpu, {pid, "python", mib, gi, ci, sm_activity_pct});
    });
  }

  GpuTelemetry Telemetry(int gpu) {
    absl::StatusOr<GpuTelemetry> telemetry = backend_->GetTelemetry(gpu);
    EXPECT_TRUE(telemetry.ok()) << telemetry.status();
    return telemetry.ok() ? *telemetry : GpuTelemetry{};
  }

  // SM activity as each backend documents it: the simulator gives an instant figure
  // (interval_s 0) at once; NVML answers UNAVAILABLE to its first call for a device (one GPM
  // sample only) and the activity between two samples from the second call on.
  absl::StatusOr<Activity> FirstActivity(int gpu, std::optional<int> gi) {
    absl::StatusOr<Activity> first = backend_->SampleActivity(gpu, gi);
    if (GetParam() != Kind::kNvml) {
      if (first.ok()) {
        EXPECT_EQ(first->interval_s, 0);
      }
      return first;
    }
    if (!absl::IsUnavailable(first.status())) {
      ADD_FAILURE() << "NVML's first GPM sample should be UNAVAILABLE: " << first.status();
      return first;
    }
    absl::StatusOr<Activity> second = backend_->SampleActivity(gpu, gi);
    if (second.ok()) {
      EXPECT_GT(second->interval_s, 0);
    }
    return second;
  }

  void EnableMig(int gpu) {
    absl::StatusOr<MigModeChange> change = backend_->SetMigMode(gpu, MigMode::kEnabled);
    ASSERT_TRUE(change.ok()) << change.status();
    ASSERT_TRUE(change->applied);
  }

  int ProfileId(int gpu, const char* name) {
    return (*backend_->ListGpus())[static_cast<size_t>(gpu)].model->mig->FindProfile(name)->smi_id;
  }

  std::unique_ptr<Backend> backend_;
  SimBackend* memory_ = nullptr;
  std::string dir_;
  std::string path_;
};

TEST_P(ConformanceTest, ListsGpusWithIdentityAndMode) {
  absl::StatusOr<std::vector<GpuInfo>> gpus = backend_->ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 4u);
  EXPECT_EQ((*gpus)[0].pci_device_id, 0x20B0);
  EXPECT_EQ((*gpus)[1].pci_device_id, 0x2330);
  EXPECT_EQ((*gpus)[1].name, "NVIDIA H100 80GB HBM3");
  ASSERT_NE((*gpus)[1].model, nullptr);
  EXPECT_EQ((*gpus)[1].model->id, "H100-80GB");
  EXPECT_TRUE((*gpus)[0].mig_capable);
  EXPECT_FALSE((*gpus)[2].mig_capable);  // L4
  EXPECT_EQ((*gpus)[0].mig_current, MigMode::kDisabled);
  EXPECT_TRUE((*gpus)[0].uuid.starts_with("GPU-"));
  EXPECT_NE((*gpus)[0].uuid, (*gpus)[1].uuid);
  EXPECT_GT((*gpus)[1].memory_total_mib, 80000);
}

TEST_P(ConformanceTest, MigModeOnGpuWithoutMigIsNotSupported) {
  absl::StatusOr<MigModeChange> change = backend_->SetMigMode(2, MigMode::kEnabled);
  EXPECT_TRUE(HasNvmlCode(change.status(), kNvmlNotSupported)) << change.status();
}

TEST_P(ConformanceTest, EnablingAnIdleGpuAppliesAtOnce) {
  EnableMig(0);
  const GpuInfo gpu = (*backend_->ListGpus())[0];
  EXPECT_EQ(gpu.mig_current, MigMode::kEnabled);
  EXPECT_EQ(gpu.mig_pending, MigMode::kEnabled);
}

TEST_P(ConformanceTest, ModeStaysPendingWhileAHolderHoldsTheGpuAndResetIsRefused) {
  Control(
      [](SimState&, SimMachine& machine) { return machine.AddHolder(0, "nvidia-persistenced"); });
  absl::StatusOr<MigModeChange> change = backend_->SetMigMode(0, MigMode::kEnabled);
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_FALSE(change->applied);
  EXPECT_EQ(change->activation_code, kNvmlInUse);
  GpuInfo gpu = (*backend_->ListGpus())[0];
  EXPECT_EQ(gpu.mig_current, MigMode::kDisabled);
  EXPECT_EQ(gpu.mig_pending, MigMode::kEnabled);
  EXPECT_TRUE(HasNvmlCode(backend_->ResetGpu(0), kNvmlInUse));
  absl::StatusOr<std::vector<std::string>> holders = backend_->ListGpuHolders(0);
  if (GetParam() != Kind::kNvml) {  // NVML cannot see the simulator's holders
    ASSERT_TRUE(holders.ok());
    EXPECT_EQ(*holders, std::vector<std::string>{"nvidia-persistenced"});
  }
  Control([](SimState&, SimMachine& machine) {
    return machine.RemoveHolder(0, "nvidia-persistenced");
  });
  ASSERT_TRUE(backend_->ResetGpu(0).ok());
  gpu = (*backend_->ListGpus())[0];
  EXPECT_EQ(gpu.mig_current, MigMode::kEnabled);
}

TEST_P(ConformanceTest, PassthroughGpuCannotBeReset) {
  Control([](SimState& state, SimMachine&) {
    state.gpus[0].reset_supported = false;
    return 0;
  });
  absl::StatusOr<MigModeChange> change = backend_->SetMigMode(0, MigMode::kEnabled);
  ASSERT_TRUE(change.ok());
  EXPECT_FALSE(change->applied);
  EXPECT_EQ(change->activation_code, kNvmlResetRequired);
  EXPECT_TRUE(HasNvmlCode(backend_->ResetGpu(0), kNvmlNotSupported));
}

TEST_P(ConformanceTest, ListsTheDriversGpuInstanceProfiles) {
  // The driver answers only with MIG enabled.
  EXPECT_TRUE(HasNvmlCode(backend_->ListGpuInstanceProfiles(0).status(), kNvmlNotSupported));
  EnableMig(0);
  absl::StatusOr<std::vector<GpuInstanceProfileInfo>> profiles =
      backend_->ListGpuInstanceProfiles(0);
  ASSERT_TRUE(profiles.ok()) << profiles.status();
  // nvidia-smi lists IDs 19, 20, 15, 14, 9, 5, 0; the backend orders them by NVML constant
  // (1_SLICE 0, 2_SLICE 1, 3_SLICE 2, 4_SLICE 3, 7_SLICE 4, 1_SLICE_REV1 7, 1_SLICE_REV2 9).
  const std::vector<int> ids = {19, 14, 9, 5, 0, 20, 15};
  const std::vector<std::string> names = {"1g.5gb",  "2g.10gb",   "3g.20gb", "4g.20gb",
                                          "7g.40gb", "1g.5gb+me", "1g.10gb"};
  ASSERT_EQ(profiles->size(), ids.size());
  const hw::MigSpec& mig = *Catalog().Find("A100-40GB")->mig;
  int last_const = -1;
  for (size_t i = 0; i < ids.size(); ++i) {
    const GpuInstanceProfileInfo& profile = (*profiles)[i];
    SCOPED_TRACE(names[i]);
    EXPECT_GT(profile.nvml_const, last_const);  // ordered by NVML constant
    last_const = profile.nvml_const;
    EXPECT_EQ(profile.id, ids[i]);
    EXPECT_EQ(profile.name, names[i]);
    EXPECT_FALSE(profile.name_derived);
    const hw::GiProfile* known = mig.FindProfileBySmiId(ids[i]);
    ASSERT_NE(known, nullptr);
    EXPECT_EQ(profile.nvml_const, known->nvml_const);
    EXPECT_EQ(profile.slices, known->compute_slices);
    EXPECT_EQ(profile.instance_count, known->max_instances);
    EXPECT_EQ(profile.sms, known->sms);
    EXPECT_EQ(profile.memory_mib, known->memory_mib);
    EXPECT_EQ(profile.copy_engines, known->engines.copy);
    EXPECT_EQ(profile.decoders, known->engines.decoder);
    EXPECT_EQ(profile.encoders, known->engines.encoder);
    EXPECT_EQ(profile.jpegs, known->engines.jpeg);
    EXPECT_EQ(profile.ofas, known->engines.ofa);
  }
  EXPECT_EQ((*profiles)[0].memory_mib, 4864);
  EXPECT_EQ((*profiles)[2].slices, 3);
  EXPECT_EQ((*profiles)[2].memory_mib, 19968);
  EXPECT_EQ((*profiles)[4].memory_mib, 40192);
  EXPECT_EQ((*profiles)[6].memory_mib, 9856);
  // L4 has no MIG.
  EXPECT_TRUE(HasNvmlCode(backend_->ListGpuInstanceProfiles(2).status(), kNvmlNotSupported));
}

TEST_P(ConformanceTest, CreatingWhileMigIsOffIsNotSupported) {
  absl::StatusOr<GpuInstanceInfo> gi =
      backend_->CreateGpuInstance(0, ProfileId(0, "1g.5gb"), std::nullopt);
  EXPECT_TRUE(HasNvmlCode(gi.status(), kNvmlNotSupported)) << gi.status();
}

TEST_P(ConformanceTest, DefaultPlacementFollowsTheDriverAndIdsFollowPlacement) {
  EnableMig(0);  // A100-40GB: 9,19,19 -> 3g@4 (GI 2), 1g@0 (GI 7), 1g@1 (GI 8)
  absl::StatusOr<GpuInstanceInfo> three = backend_->CreateGpuInstance(0, 9, std::nullopt);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->start, 4);
  EXPECT_EQ(three->size, 4);
  EXPECT_EQ(three->id, 2);
  absl::StatusOr<GpuInstanceInfo> one = backend_->CreateGpuInstance(0, 19, std::nullopt);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->start, 0);
  EXPECT_EQ(one->id, 7);
  absl::StatusOr<GpuInstanceInfo> two = backend_->CreateGpuInstance(0, 19, std::nullopt);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->start, 1);
  EXPECT_EQ(two->id, 8);
  absl::StatusOr<std::vector<GpuInstanceInfo>> gis = backend_->ListGpuInstances(0);
  ASSERT_TRUE(gis.ok());
  ASSERT_EQ(gis->size(), 3u);
  EXPECT_EQ((*gis)[0].id, 2);
  EXPECT_EQ((*gis)[0].profile_id, 9);
}

TEST_P(ConformanceTest, CreationOrderMattersWithoutPlacements) {
  EnableMig(0);  // 19,19,14,9 fails at the 3g: the 1g's took 6 and 4 (mig-facts §0.8)
  ASSERT_TRUE(backend_->CreateGpuInstance(0, 19, std::nullopt).ok());
  ASSERT_TRUE(backend_->CreateGpuInstance(0, 19, std::nullopt).ok());
  ASSERT_TRUE(backend_->CreateGpuInstance(0, 14, std::nullopt).ok());
  EXPECT_TRUE(HasNvmlCode(backend_->CreateGpuInstance(0, 9, std::nullopt).status(),
                          kNvmlInsufficientResources));
}

TEST_P(ConformanceTest, ExplicitPlacementsAndTheirErrors) {
  EnableMig(1);  // H100-80GB
  absl::StatusOr<GpuInstanceInfo> gi = backend_->CreateGpuInstance(1, 9, 0);
  ASSERT_TRUE(gi.ok()) << gi.status();
  EXPECT_EQ(gi->id, 1);
  EXPECT_EQ(gi->start, 0);
  // Overlap.
  EXPECT_TRUE(
      HasNvmlCode(backend_->CreateGpuInstance(1, 19, 2).status(), kNvmlInsufficientResources));
  // A start the profile does not allow (1g never starts at 7; 3g not at 2).
  EXPECT_TRUE(HasNvmlCode(backend_->CreateGpuInstance(1, 19, 7).status(), kNvmlInvalidArgument));
  EXPECT_TRUE(HasNvmlCode(backend_->CreateGpuInstance(1, 9, 2).status(), kNvmlInvalidArgument));
  // Instance cap: one 4g at most, and it would overlap anyway; +me at most once.
  ASSERT_TRUE(backend_->CreateGpuInstance(1, 20, 4).ok());
  EXPECT_TRUE(
      HasNvmlCode(backend_->CreateGpuInstance(1, 20, 5).status(), kNvmlInsufficientResources));
  // The profile ID is not the NVML constant: 2 is NVML_GPU_INSTANCE_PROFILE_3_SLICE, not a profile
  // ID.
  EXPECT_TRUE(
      HasNvmlCode(backend_->CreateGpuInstance(1, 2, std::nullopt).status(), kNvmlInvalidArgument));
}

TEST_P(ConformanceTest, ComputeInstancesHaveStableMigUuids) {
  EnableMig(1);
  absl::StatusOr<GpuInstanceInfo> gi = backend_->CreateGpuInstance(1, 9, 4);
  ASSERT_TRUE(gi.ok());
  // In a 3g GI a 2c can only start at slice 0 (mig-facts §2.11), a 1c anywhere.
  EXPECT_TRUE(
      HasNvmlCode(backend_->CreateComputeInstance(1, gi->id, 1, 1).status(), kNvmlInvalidArgument));
  absl::StatusOr<ComputeInstanceInfo> a = backend_->CreateComputeInstance(1, gi->id, 1, 0);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<ComputeInstanceInfo> b =
      backend_->CreateComputeInstance(1, gi->id, 0, std::nullopt);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->start, 0);
  EXPECT_EQ(a->size, 2);
  EXPECT_EQ(b->start, 2);  // the lowest free slice
  EXPECT_EQ(b->size, 1);
  EXPECT_TRUE(a->uuid.starts_with("MIG-"));
  EXPECT_NE(a->uuid, b->uuid);
  // The GI is full now: neither another 1c nor a 3c fits.
  EXPECT_TRUE(HasNvmlCode(backend_->CreateComputeInstance(1, gi->id, 0, std::nullopt).status(),
                          kNvmlInsufficientResources));
  EXPECT_TRUE(HasNvmlCode(backend_->CreateComputeInstance(1, gi->id, 2, std::nullopt).status(),
                          kNvmlInsufficientResources));
  absl::StatusOr<std::vector<ComputeInstanceInfo>> first =
      backend_->ListComputeInstances(1, gi->id);
  absl::StatusOr<std::vector<ComputeInstanceInfo>> second =
      backend_->ListComputeInstances(1, gi->id);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[0].uuid, (*second)[0].uuid);
  EXPECT_EQ((*first)[1].uuid, (*second)[1].uuid);
  // A destroyed and re-created CI is a new MIG device with a new UUID.
  ASSERT_TRUE(backend_->DestroyComputeInstance(1, gi->id, b->id).ok());
  absl::StatusOr<ComputeInstanceInfo> c =
      backend_->CreateComputeInstance(1, gi->id, 0, std::nullopt);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->uuid, b->uuid);
}

TEST_P(ConformanceTest, DestroyingBusyInstancesIsInUse) {
  EnableMig(1);
  absl::StatusOr<GpuInstanceInfo> gi = backend_->CreateGpuInstance(1, 14, 0);
  ASSERT_TRUE(gi.ok());
  absl::StatusOr<ComputeInstanceInfo> ci =
      backend_->CreateComputeInstance(1, gi->id, 1, std::nullopt);
  ASSERT_TRUE(ci.ok());
  // A GI with a compute instance cannot go.
  EXPECT_TRUE(HasNvmlCode(backend_->DestroyGpuInstance(1, gi->id), kNvmlInUse));
  AddProcess(1, 4242, gi->id, ci->id, 2048);
  EXPECT_TRUE(HasNvmlCode(backend_->DestroyComputeInstance(1, gi->id, ci->id), kNvmlInUse));
  absl::StatusOr<std::vector<ProcessInfo>> processes = backend_->ListProcesses(1);
  ASSERT_TRUE(processes.ok());
  ASSERT_EQ(processes->size(), 1u);
  EXPECT_EQ((*processes)[0].pid, 4242u);
  EXPECT_EQ((*processes)[0].gi, gi->id);
  EXPECT_EQ((*processes)[0].ci, ci->id);
  EXPECT_EQ((*processes)[0].used_memory_mib, 2048);
  absl::StatusOr<MemoryInfo> memory = backend_->GetMemory(1, gi->id, ci->id);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->used_mib, 2048);
  EXPECT_EQ(memory->total_mib, 20096);  // H100 2g.20gb
  // The process exits: now CI, then GI, can go.
  Control([](SimState&, SimMachine& machine) { return machine.RemoveProcess(4242); });
  EXPECT_TRUE(backend_->DestroyComputeInstance(1, gi->id, ci->id).ok());
  EXPECT_TRUE(backend_->DestroyGpuInstance(1, gi->id).ok());
  EXPECT_TRUE(backend_->ListGpuInstances(1)->empty());
}

TEST_P(ConformanceTest, DisablingMigWithInstancesIsInUseAndResetClearsInstances) {
  EnableMig(3);  // A30
  ASSERT_TRUE(backend_->CreateGpuInstance(3, 5, std::nullopt).ok());
  EXPECT_TRUE(HasNvmlCode(backend_->SetMigMode(3, MigMode::kDisabled).status(), kNvmlInUse));
  ASSERT_TRUE(backend_->ResetGpu(3).ok());
  EXPECT_TRUE(backend_->ListGpuInstances(3)->empty());
  absl::StatusOr<MigModeChange> change = backend_->SetMigMode(3, MigMode::kDisabled);
  ASSERT_TRUE(change.ok());
  EXPECT_TRUE(change->applied);
}

TEST_P(ConformanceTest, InjectedFaultsSurfaceAsTheirNvmlCode) {
  EnableMig(0);
  Control([](SimState& state, SimMachine&) {
    state.calls = 0;
    state.faults.push_back({0, "CreateGpuInstance", kNvmlUnknown, false, 1});
    return 0;
  });
  EXPECT_TRUE(HasNvmlCode(backend_->CreateGpuInstance(0, 19, std::nullopt).status(), kNvmlUnknown));
  // Fired once: the next call works, and the failed one changed nothing.
  absl::StatusOr<GpuInstanceInfo> gi = backend_->CreateGpuInstance(0, 19, std::nullopt);
  ASSERT_TRUE(gi.ok()) << gi.status();
  EXPECT_EQ(backend_->ListGpuInstances(0)->size(), 1u);
}

// Only the backends over a state file persist (an in-memory machine has nothing to reopen): its
// own instantiation below, so no run skips it.
class PersistentConformanceTest : public ConformanceTest {};

TEST_P(PersistentConformanceTest, StatePersistsAcrossBackends) {
  EnableMig(1);
  ASSERT_TRUE(backend_->CreateGpuInstance(1, 15, 6).ok());
  absl::StatusOr<std::unique_ptr<SimBackend>> reopened = SimBackend::OpenFile(path_, Catalog());
  ASSERT_TRUE(reopened.ok());
  absl::StatusOr<std::vector<GpuInstanceInfo>> gis = (*reopened)->ListGpuInstances(1);
  ASSERT_TRUE(gis.ok());
  ASSERT_EQ(gis->size(), 1u);
  EXPECT_EQ((*gis)[0].profile_id, 15);
  EXPECT_EQ((*gis)[0].start, 6);
  EXPECT_EQ((*gis)[0].id, 6);
}

// ---------------------------------------------------------------------------- health figures

TEST_P(ConformanceTest, TelemetryFollowsTheLoad) {
  // H100 (GPU 1), MIG off, nothing running: every figure is there, and the GPU is idle.
  const GpuTelemetry idle = Telemetry(1);
  ASSERT_TRUE(idle.temperature_c && idle.power_w && idle.power_limit_w && idle.sm_clock_mhz &&
              idle.memory_clock_mhz && idle.utilization_pct && idle.memory_utilization_pct &&
              idle.throttle_reasons && idle.ecc_corrected && idle.ecc_uncorrected &&
              idle.remapped_rows_correctable && idle.remapped_rows_uncorrectable &&
              idle.remap_pending && idle.remap_failure);
  EXPECT_EQ(*idle.utilization_pct, 0);
  EXPECT_EQ(*idle.throttle_reasons & kThrottleGpuIdle, kThrottleGpuIdle);
  EXPECT_DOUBLE_EQ(*idle.power_limit_w, 700);
  EXPECT_GT(*idle.power_w, 0);
  EXPECT_LT(*idle.power_w, *idle.power_limit_w);
  EXPECT_EQ(*idle.ecc_corrected, 0u);
  EXPECT_EQ(*idle.remapped_rows_uncorrectable, 0);
  EXPECT_FALSE(*idle.remap_pending);

  AddProcess(1, 5151, -1, -1, 4096, 60);
  const GpuTelemetry busy = Telemetry(1);
  ASSERT_TRUE(busy.temperature_c && busy.power_w && busy.sm_clock_mhz && busy.utilization_pct &&
              busy.throttle_reasons);
  EXPECT_EQ(*busy.utilization_pct, 60);
  EXPECT_GT(*busy.power_w, *idle.power_w);
  EXPECT_LE(*busy.power_w, 700);
  EXPECT_GT(*busy.temperature_c, *idle.temperature_c);
  EXPECT_GT(*busy.sm_clock_mhz, *idle.sm_clock_mhz);
  EXPECT_EQ(*busy.memory_clock_mhz, *idle.memory_clock_mhz);
  EXPECT_GT(*busy.memory_utilization_pct, 0);
  EXPECT_EQ(*busy.throttle_reasons & kThrottleGpuIdle, 0u);
  // A second process adds to the load.
  AddProcess(1, 5152, -1, -1, 4096, 30);
  EXPECT_EQ(Telemetry(1).utilization_pct, 90);
}

TEST_P(ConformanceTest, TelemetryOverridesFromTheState) {
  Control([](SimState& state, SimMachine&) {
    sim::SimTelemetry& t = state.gpus[0].telemetry;  // A100-40GB
    t.temperature_c = 91;
    t.power_w = 350.5;
    t.utilization_pct = 97;
    t.throttle_reasons = kThrottleHwThermal | kThrottleSwPowerCap;
    t.ecc_corrected = 12;
    t.ecc_uncorrected = 1;
    t.remapped_rows_correctable = 3;
    t.remapped_rows_uncorrectable = 1;
    t.remap_pending = true;
    return 0;
  });
  const GpuTelemetry t = Telemetry(0);
  EXPECT_EQ(t.temperature_c, 91);
  ASSERT_TRUE(t.power_w && t.power_limit_w);
  EXPECT_DOUBLE_EQ(*t.power_w, 350.5);  // NVML: 350500 mW
  EXPECT_DOUBLE_EQ(*t.power_limit_w, 400);
  EXPECT_EQ(t.utilization_pct, 97);
  EXPECT_EQ(t.memory_utilization_pct, 58);
  // The set reasons, plus idle: nothing runs.
  EXPECT_EQ(t.throttle_reasons, kThrottleHwThermal | kThrottleSwPowerCap | kThrottleGpuIdle);
  EXPECT_EQ(t.ecc_corrected, 12u);
  EXPECT_EQ(t.ecc_uncorrected, 1u);
  EXPECT_EQ(t.remapped_rows_correctable, 3);
  EXPECT_EQ(t.remapped_rows_uncorrectable, 1);
  EXPECT_EQ(t.remap_pending, true);
  EXPECT_EQ(t.remap_failure, false);
}

TEST_P(ConformanceTest, UnsupportedFiguresAreAbsent) {
  Control([](SimState& state, SimMachine&) {
    state.gpus[1].telemetry.unsupported = {"temperature", "power",         "clocks", "utilization",
                                           "throttle",    "remapped_rows", "ecc"};
    state.gpus[1].telemetry.ecc_corrected = 5;  // not given even when set
    return 0;
  });
  const GpuTelemetry none = Telemetry(1);
  EXPECT_FALSE(none.temperature_c);
  EXPECT_FALSE(none.power_w);
  EXPECT_FALSE(none.power_limit_w);
  EXPECT_FALSE(none.sm_clock_mhz);
  EXPECT_FALSE(none.memory_clock_mhz);
  EXPECT_FALSE(none.utilization_pct);
  EXPECT_FALSE(none.memory_utilization_pct);
  EXPECT_FALSE(none.throttle_reasons);
  EXPECT_FALSE(none.ecc_corrected);
  EXPECT_FALSE(none.ecc_uncorrected);
  EXPECT_FALSE(none.remapped_rows_correctable);
  EXPECT_FALSE(none.remap_pending);
  // L4 (GPU 2): ECC memory, but no row remapping (before the MIG-capable boards).
  const GpuTelemetry l4 = Telemetry(2);
  EXPECT_TRUE(l4.ecc_corrected);
  EXPECT_TRUE(l4.temperature_c);
  EXPECT_FALSE(l4.remapped_rows_correctable);
  EXPECT_FALSE(l4.remapped_rows_uncorrectable);
  EXPECT_FALSE(l4.remap_pending);
  EXPECT_FALSE(l4.remap_failure);
  ASSERT_TRUE(l4.power_limit_w);
  EXPECT_DOUBLE_EQ(*l4.power_limit_w, 72);
}

TEST_P(ConformanceTest, NoUtilizationRatesWithMigOn) {
  EnableMig(0);
  const GpuTelemetry t = Telemetry(0);
  EXPECT_FALSE(t.utilization_pct);
  EXPECT_FALSE(t.memory_utilization_pct);
  EXPECT_TRUE(t.temperature_c);
  EXPECT_TRUE(t.power_w);
  EXPECT_TRUE(t.throttle_reasons);
}

TEST_P(ConformanceTest, LostGpuAnswersGpuIsLost) {
  Control([](SimState&, SimMachine& machine) { return machine.SetLost(1, true); });
  EXPECT_TRUE(HasNvmlCode(backend_->GetTelemetry(1).status(), kNvmlGpuIsLost));
  EXPECT_TRUE(HasNvmlCode(backend_->GetMemory(1).status(), kNvmlGpuIsLost));
  EXPECT_TRUE(HasNvmlCode(backend_->SampleActivity(1).status(), kNvmlGpuIsLost));
  EXPECT_TRUE(HasNvmlCode(backend_->ListProcesses(1).status(), kNvmlGpuIsLost));
  // The machine's other GPUs stay visible and answer.
  absl::StatusOr<std::vector<GpuInfo>> gpus = backend_->ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 4u);
  EXPECT_EQ((*gpus)[1].index, 1);
  EXPECT_EQ((*gpus)[2].name, "NVIDIA L4");
  EXPECT_TRUE(backend_->GetTelemetry(0).ok());
  EXPECT_TRUE(backend_->GetMemory(2).ok());
  // Back on the bus.
  Control([](SimState&, SimMachine& machine) { return machine.SetLost(1, false); });
  EXPECT_TRUE(backend_->GetTelemetry(1).ok());
  EXPECT_TRUE(backend_->GetMemory(1).ok());
}

TEST_P(ConformanceTest, XidEventsAreTakenOnceWithTheirInstance) {
  // The first call starts listening (NVML registers the GPUs); nothing has happened yet.
  absl::StatusOr<std::vector<XidEvent>> none = backend_->TakeXidEvents();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  EnableMig(1);
  absl::StatusOr<GpuInstanceInfo> gi = backend_->CreateGpuInstance(1, 9, 4);
  ASSERT_TRUE(gi.ok()) << gi.status();
  absl::StatusOr<ComputeInstanceInfo> ci =
      backend_->CreateComputeInstance(1, gi->id, 2, std::nullopt);
  ASSERT_TRUE(ci.ok()) << ci.status();
  Control([&](SimState&, SimMachine& machine) {
    const int code = machine.InjectXid(1, 43, gi->id, ci->id);
    return code != 0 ? code : machine.InjectXid(2, 79, -1, -1);
  });
  absl::StatusOr<std::vector<XidEvent>> events = backend_->TakeXidEvents();
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 2u);
  std::vector<XidEvent> sorted = *events;
  std::sort(sorted.begin(), sorted.end(),
            [](const XidEvent& a, const XidEvent& b) { return a.gpu < b.gpu; });
  EXPECT_EQ(sorted[0].gpu, 1);
  EXPECT_EQ(sorted[0].xid, 43u);
  EXPECT_EQ(sorted[0].gi, gi->id);
  EXPECT_EQ(sorted[0].ci, ci->id);
  EXPECT_EQ(sorted[1].gpu, 2);
  EXPECT_EQ(sorted[1].xid, 79u);
  EXPECT_FALSE(sorted[1].gi);
  EXPECT_FALSE(sorted[1].ci);
  // Taken once.
  absl::StatusOr<std::vector<XidEvent>> again = backend_->TakeXidEvents();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->empty());
}

TEST_P(ConformanceTest, GpmActivityOfAHopperGpuAndOfAMigInstance) {
  // H100 (GPU 1): a 3g instance (3 of 7 compute slices) whose process keeps 80% of its SMs busy.
  EnableMig(1);
  absl::StatusOr<GpuInstanceInfo> gi = backend_->CreateGpuInstance(1, 9, 0);
  ASSERT_TRUE(gi.ok()) << gi.status();
  absl::StatusOr<ComputeInstanceInfo> ci =
      backend_->CreateComputeInstance(1, gi->id, 2, std::nullopt);
  ASSERT_TRUE(ci.ok()) << ci.status();
  AddProcess(1, 6161, gi->id, ci->id, 1024, 80);

  absl::StatusOr<Activity> instance = FirstActivity(1, gi->id);
  ASSERT_TRUE(instance.ok()) << instance.status();
  EXPECT_NEAR(instance->sm_active_pct, 80, 0.05);
  EXPECT_NEAR(instance->sm_occupancy_pct, 48, 0.05);
  EXPECT_NEAR(instance->dram_bandwidth_pct, 32, 0.05);
  // The whole GPU: the instance's load weighted by its share of the compute slices.
  absl::StatusOr<Activity> whole = FirstActivity(1, std::nullopt);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_NEAR(whole->sm_active_pct, 80.0 * 3 / 7, 0.05);
  EXPECT_NEAR(whole->sm_occupancy_pct, 80.0 * 3 / 7 * 0.6, 0.1);

  // The process ends: the next sample (for NVML, the interval since the previous one) is idle.
  Control([](SimState&, SimMachine& machine) { return machine.RemoveProcess(6161); });
  absl::StatusOr<Activity> idle = backend_->SampleActivity(1, gi->id);
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_EQ(idle->sm_active_pct, 0);
  if (GetParam() == Kind::kNvml) {
    EXPECT_GT(idle->interval_s, 0);
  }
  // An instance that does not exist.
  EXPECT_TRUE(HasNvmlCode(backend_->SampleActivity(1, 13).status(), kNvmlNotFound));
}

TEST_P(ConformanceTest, GpmActivityOfAWholeHopperGpuWithoutMig) {
  AddProcess(1, 7171, -1, -1, 1024, 45);
  absl::StatusOr<Activity> activity = FirstActivity(1, std::nullopt);
  ASSERT_TRUE(activity.ok()) << activity.status();
  EXPECT_NEAR(activity->sm_active_pct, 45, 0.05);
  // No instances while MIG is off.
  EXPECT_TRUE(HasNvmlCode(backend_->SampleActivity(1, 1).status(), kNvmlNotSupported));
}

TEST_P(ConformanceTest, NoGpmBeforeHopper) {
  // A100 (Ampere), asked twice: never UNAVAILABLE, always NOT_SUPPORTED.
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<Activity> activity = backend_->SampleActivity(0);
    EXPECT_TRUE(HasNvmlCode(activity.status(), kNvmlNotSupported)) << activity.status();
  }
  EnableMig(0);
  absl::StatusOr<GpuInstanceInfo> gi = backend_->CreateGpuInstance(0, 9, std::nullopt);
  ASSERT_TRUE(gi.ok());
  EXPECT_TRUE(HasNvmlCode(backend_->SampleActivity(0, gi->id).status(), kNvmlNotSupported));
  // A Hopper GPU whose driver gives no GPM.
  Control([](SimState& state, SimMachine&) {
    state.gpus[1].telemetry.unsupported = {"gpm"};
    return 0;
  });
  EXPECT_TRUE(HasNvmlCode(backend_->SampleActivity(1).status(), kNvmlNotSupported));
}

INSTANTIATE_TEST_SUITE_P(Backends, ConformanceTest,
                         testing::Values(Kind::kMemory, Kind::kFile, Kind::kNvml, Kind::kWrapped),
                         KindName);
INSTANTIATE_TEST_SUITE_P(Backends, PersistentConformanceTest,
                         testing::Values(Kind::kFile, Kind::kNvml), KindName);

}  // namespace
}  // namespace gpuslice::device
