// NvmlBackend loaded on the test NVML library (src/device/fake_nvml), which drives a simulator
// state file. Mutating sequences run on two identical machines, one through NVML and one through
// SimBackend, and must give the same results; read-only queries compare both on the same file.
#include "gpuslice/device/nvml_backend.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpuslice/device/host_actions.h"
#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/device/sim_machine.h"
#include "gpuslice/device/sim_store.h"
#include "gpuslice/hw/catalog.h"
#include "nvml_api.h"

#ifndef GPUSLICE_FAKE_NVML
#error "GPUSLICE_FAKE_NVML must name the test NVML library (libnvidia-ml.so.1)"
#endif

namespace gpuslice::device {
namespace {

using sim::SimMachine;
using sim::SimState;

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

// Read by the test library at nvmlInit_v2: the newest GI profile info struct version it takes.
constexpr char kMaxProfileInfoVersionEnv[] = "GPUSLICE_FAKE_NVML_MAX_PROFILE_INFO_VERSION";

template <typename T>
std::optional<int> CodeOf(const absl::StatusOr<T>& result) {
  return NvmlCodeOf(result.status());
}

class NvmlBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpuslice_nvml_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/machine.json";
  }
  void TearDown() override {
    nvml_.reset();
    ::unsetenv("GPUSLICE_SIM");
    ::unsetenv(kMaxProfileInfoVersionEnv);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // Makes the machine `spec` in the state file and a copy of it in an in-memory SimBackend, and
  // loads NvmlBackend on the file.
  void Start(const std::string& spec) {
    absl::StatusOr<SimState> state = sim::NewMachine(Catalog(), spec, 7);
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE(sim::SimStore::Create(path_, *state, true).ok());
    sim_ = std::make_unique<SimBackend>(*state, Catalog());
    ASSERT_EQ(::setenv("GPUSLICE_SIM", path_.c_str(), 1), 0);
    absl::StatusOr<std::unique_ptr<NvmlBackend>> nvml =
        NvmlBackend::Load(Catalog(), GPUSLICE_FAKE_NVML);
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    nvml_ = *std::move(nvml);
  }

  // A SimBackend on the same state file as NvmlBackend.
  std::unique_ptr<SimBackend> SameFile() {
    absl::StatusOr<std::unique_ptr<SimBackend>> backend = SimBackend::OpenFile(path_, Catalog());
    EXPECT_TRUE(backend.ok()) << backend.status();
    return backend.ok() ? *std::move(backend) : nullptr;
  }

  // Changes the state file directly (simulation controls, fault rules).
  void Edit(const std::function<void(SimState&)>& fn) {
    absl::StatusOr<std::unique_ptr<sim::SimStore>> store = sim::SimStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)
                    ->Update([&](SimState& state, const std::function<void()>&) {
                      fn(state);
                      return true;
                    })
                    .ok());
  }

  // Applies the same simulation control to both machines.
  void ControlBoth(const std::function<int(SimMachine&)>& fn) {
    ASSERT_TRUE(sim_->Control("control", true, fn).ok());
    Edit([&](SimState& state) {
      SimMachine machine(state, Catalog());
      ASSERT_EQ(fn(machine), kNvmlSuccess);
    });
  }

  void EnableMigBoth(int gpu) {
    absl::StatusOr<MigModeChange> a = nvml_->SetMigMode(gpu, MigMode::kEnabled);
    absl::StatusOr<MigModeChange> b = sim_->SetMigMode(gpu, MigMode::kEnabled);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(a->applied);
    EXPECT_EQ(a->applied, b->applied);
    EXPECT_EQ(a->activation_code, b->activation_code);
  }

  // Creates the same GI on both machines; expects the same result (or the same NVML error).
  std::optional<GpuInstanceInfo> CreateGiBoth(int gpu, int profile, std::optional<int> start) {
    absl::StatusOr<GpuInstanceInfo> a = nvml_->CreateGpuInstance(gpu, profile, start);
    absl::StatusOr<GpuInstanceInfo> b = sim_->CreateGpuInstance(gpu, profile, start);
    EXPECT_EQ(a.ok(), b.ok()) << "nvml: " << a.status() << "\nsim: " << b.status();
    EXPECT_EQ(CodeOf(a), CodeOf(b)) << "nvml: " << a.status() << "\nsim: " << b.status();
    if (!a.ok() || !b.ok()) return std::nullopt;
    EXPECT_EQ(a->gpu, b->gpu);
    EXPECT_EQ(a->id, b->id);
    EXPECT_EQ(a->profile_id, b->profile_id);
    EXPECT_EQ(a->start, b->start);
    EXPECT_EQ(a->size, b->size);
    return *a;
  }

  std::optional<ComputeInstanceInfo> CreateCiBoth(int gpu, int gi, int profile,
                                                  std::optional<int> start) {
    absl::StatusOr<ComputeInstanceInfo> a = nvml_->CreateComputeInstance(gpu, gi, profile, start);
    absl::StatusOr<ComputeInstanceInfo> b = sim_->CreateComputeInstance(gpu, gi, profile, start);
    EXPECT_EQ(a.ok(), b.ok()) << "nvml: " << a.status() << "\nsim: " << b.status();
    EXPECT_EQ(CodeOf(a), CodeOf(b)) << "nvml: " << a.status() << "\nsim: " << b.status();
    if (!a.ok() || !b.ok()) return std::nullopt;
    EXPECT_EQ(a->gpu, b->gpu);
    EXPECT_EQ(a->gi, b->gi);
    EXPECT_EQ(a->id, b->id);
    EXPECT_EQ(a->profile_id, b->profile_id);
    EXPECT_EQ(a->start, b->start);
    EXPECT_EQ(a->size, b->size);
    EXPECT_EQ(a->uuid, b->uuid);  // same seed, same creation order
    return *a;
  }

  void ExpectSameGis(int gpu) {
    absl::StatusOr<std::vector<GpuInstanceInfo>> a = nvml_->ListGpuInstances(gpu);
    absl::StatusOr<std::vector<GpuInstanceInfo>> b = sim_->ListGpuInstances(gpu);
    ASSERT_EQ(a.ok(), b.ok()) << "nvml: " << a.status() << "\nsim: " << b.status();
    EXPECT_EQ(CodeOf(a), CodeOf(b));
    if (!a.ok()) return;
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      EXPECT_EQ((*a)[i].id, (*b)[i].id) << i;
      EXPECT_EQ((*a)[i].profile_id, (*b)[i].profile_id) << i;
      EXPECT_EQ((*a)[i].start, (*b)[i].start) << i;
      EXPECT_EQ((*a)[i].size, (*b)[i].size) << i;
    }
  }

  void ExpectSameCis(int gpu, int gi) {
    absl::StatusOr<std::vector<ComputeInstanceInfo>> a = nvml_->ListComputeInstances(gpu, gi);
    absl::StatusOr<std::vector<ComputeInstanceInfo>> b = sim_->ListComputeInstances(gpu, gi);
    ASSERT_EQ(a.ok(), b.ok()) << "nvml: " << a.status() << "\nsim: " << b.status();
    EXPECT_EQ(CodeOf(a), CodeOf(b));
    if (!a.ok()) return;
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      EXPECT_EQ((*a)[i].id, (*b)[i].id) << i;
      EXPECT_EQ((*a)[i].profile_id, (*b)[i].profile_id) << i;
      EXPECT_EQ((*a)[i].start, (*b)[i].start) << i;
      EXPECT_EQ((*a)[i].size, (*b)[i].size) << i;
      EXPECT_EQ((*a)[i].uuid, (*b)[i].uuid) << i;
    }
  }

  std::string dir_;
  std::string path_;
  std::unique_ptr<SimBackend> sim_;
  std::unique_ptr<NvmlBackend> nvml_;
};

// ----------------------------------------------------------------------------------- loading

TEST_F(NvmlBackendTest, LoadFailsCleanlyWithoutTheLibrary) {
  absl::StatusOr<std::unique_ptr<NvmlBackend>> backend =
      NvmlBackend::Load(Catalog(), dir_ + "/no/such/libnvidia-ml.so.1");
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(backend.status().message().find("not found: no NVIDIA driver on this machine?"),
            std::string::npos)
      << backend.status();
  EXPECT_NE(backend.status().message().find("--sim STATE_FILE"), std::string::npos);
}

TEST_F(NvmlBackendTest, LoadNamesAMissingFunction) {
  // libc has none of the NVML functions.
  absl::StatusOr<std::unique_ptr<NvmlBackend>> backend = NvmlBackend::Load(Catalog(), "libc.so.6");
  ASSERT_FALSE(backend.ok());
  EXPECT_TRUE(HasNvmlCode(backend.status(), kNvmlFunctionNotFound)) << backend.status();
  EXPECT_NE(backend.status().message().find("nvmlInit_v2"), std::string::npos) << backend.status();
}

TEST_F(NvmlBackendTest, InitFailsWithoutAStateFile) {
  ::unsetenv("GPUSLICE_SIM");
  absl::StatusOr<std::unique_ptr<NvmlBackend>> backend =
      NvmlBackend::Load(Catalog(), GPUSLICE_FAKE_NVML);
  ASSERT_FALSE(backend.ok());
  EXPECT_TRUE(HasNvmlCode(backend.status(), kNvmlDriverNotLoaded)) << backend.status();
  EXPECT_NE(backend.status().message().find("nvmlInit_v2"), std::string::npos);

  ASSERT_EQ(::setenv("GPUSLICE_SIM", (dir_ + "/missing.json").c_str(), 1), 0);
  backend = NvmlBackend::Load(Catalog(), GPUSLICE_FAKE_NVML);
  ASSERT_FALSE(backend.ok());
  EXPECT_TRUE(HasNvmlCode(backend.status(), kNvmlDriverNotLoaded)) << backend.status();
}

TEST_F(NvmlBackendTest, LibraryFromTheEnvironment) {
  Start("1xH100-80GB");
  ASSERT_EQ(::setenv(NvmlBackend::kLibraryEnv, GPUSLICE_FAKE_NVML, 1), 0);
  absl::StatusOr<std::unique_ptr<NvmlBackend>> backend = NvmlBackend::Load(Catalog());
  ::unsetenv(NvmlBackend::kLibraryEnv);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->library(), GPUSLICE_FAKE_NVML);
}

TEST_F(NvmlBackendTest, DescribeAndDriverVersion) {
  Start("1xA30");
  EXPECT_EQ(nvml_->Describe(), "NVML (driver 580.65.06)");
  absl::StatusOr<std::string> version = nvml_->DriverVersion();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, "580.65.06");
}

// The library exports only NVML functions, not the simulator it is built on.
TEST_F(NvmlBackendTest, TestLibraryExportsOnlyNvml) {
  void* handle = ::dlopen(GPUSLICE_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << ::dlerror();
  EXPECT_NE(::dlsym(handle, "nvmlInit_v2"), nullptr);
  EXPECT_NE(::dlsym(handle, "nvmlErrorString"), nullptr);
  EXPECT_NE(::dlsym(handle, "gpusliceTestResetGpu"), nullptr);
  EXPECT_NE(::dlsym(handle, "gpusliceTestTerminateProcess"), nullptr);
  EXPECT_EQ(::dlsym(handle, "_ZN8gpuslice2hw7Catalog7BuiltinEv"), nullptr);  // hw::Catalog::Builtin
  ::dlclose(handle);
}

// ------------------------------------------------------------------------------------ GPUs

TEST_F(NvmlBackendTest, ListGpusGivesNamesPciIdsMemoryAndModels) {
  Start("2xH100-80GB,1xA30");
  absl::StatusOr<std::vector<GpuInfo>> gpus = nvml_->ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 3U);
  const GpuInfo& h100 = (*gpus)[0];
  EXPECT_EQ(h100.index, 0);
  EXPECT_EQ(h100.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100.pci_device_id, 0x2330);
  ASSERT_NE(h100.model, nullptr);
  EXPECT_EQ(h100.model->id, "H100-80GB");
  EXPECT_EQ(h100.memory_total_mib, h100.model->memory_mib);
  EXPECT_TRUE(h100.mig_capable);
  EXPECT_EQ(h100.mig_current, MigMode::kDisabled);
  EXPECT_EQ(h100.uuid.rfind("GPU-", 0), 0U) << h100.uuid;
  const GpuInfo& a30 = (*gpus)[2];
  EXPECT_EQ(a30.pci_device_id, 0x20B7);
  ASSERT_NE(a30.model, nullptr);
  EXPECT_EQ(a30.model->id, "A30-24GB");

  std::unique_ptr<SimBackend> same = SameFile();
  absl::StatusOr<std::vector<GpuInfo>> expected = same->ListGpus();
  ASSERT_TRUE(expected.ok());
  ASSERT_EQ(expected->size(), gpus->size());
  for (size_t i = 0; i < gpus->size(); ++i) {
    const GpuInfo& a = (*gpus)[i];
    const GpuInfo& b = (*expected)[i];
    EXPECT_EQ(a.index, b.index);
    EXPECT_EQ(a.uuid, b.uuid);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.pci_device_id, b.pci_device_id);
    EXPECT_EQ(a.pci_bus_id, b.pci_bus_id);
    EXPECT_EQ(a.memory_total_mib, b.memory_total_mib);
    EXPECT_EQ(a.mig_capable, b.mig_capable);
    EXPECT_EQ(a.mig_current, b.mig_current);
    EXPECT_EQ(a.mig_pending, b.mig_pending);
    EXPECT_EQ(a.model, b.model);
  }
}

TEST_F(NvmlBackendTest, GpuWithoutMig) {
  Start("1xL4");
  absl::StatusOr<std::vector<GpuInfo>> gpus = nvml_->ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 1U);
  EXPECT_FALSE((*gpus)[0].mig_capable);
  ASSERT_NE((*gpus)[0].model, nullptr);
  EXPECT_EQ((*gpus)[0].model->id, "L4");
  EXPECT_TRUE(HasNvmlCode(nvml_->SetMigMode(0, MigMode::kEnabled).status(), kNvmlNotSupported));
  EXPECT_TRUE(HasNvmlCode(nvml_->ListGpuInstances(0).status(), kNvmlNotSupported));
  ExpectSameGis(0);
  CreateGiBoth(0, 19, std::nullopt);
}

TEST_F(NvmlBackendTest, BadGpuIndex) {
  Start("1xA30");
  EXPECT_TRUE(HasNvmlCode(nvml_->ListGpuInstances(3).status(), kNvmlInvalidArgument));
  EXPECT_TRUE(HasNvmlCode(nvml_->ListGpuHolders(-1).status(), kNvmlInvalidArgument));
  CreateGiBoth(5, 14, std::nullopt);
  ExpectSameGis(3);
}

// ---------------------------------------------------------------------------- MIG and GIs

TEST_F(NvmlBackendTest, EnableMigThenListEmpty) {
  Start("2xH100-80GB,1xA30");
  // MIG off: listing and creating are NOT_SUPPORTED on both backends.
  ExpectSameGis(0);
  CreateGiBoth(0, 9, std::nullopt);
  EnableMigBoth(0);
  absl::StatusOr<std::vector<GpuInfo>> gpus = nvml_->ListGpus();
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ((*gpus)[0].mig_current, MigMode::kEnabled);
  EXPECT_EQ((*gpus)[0].mig_pending, MigMode::kEnabled);
  EXPECT_EQ((*gpus)[1].mig_current, MigMode::kDisabled);
  absl::StatusOr<std::vector<GpuInstanceInfo>> gis = nvml_->ListGpuInstances(0);
  ASSERT_TRUE(gis.ok()) << gis.status();
  EXPECT_TRUE(gis->empty());
}

// ------------------------------------------------------------------------- GI profiles

// The driver's profiles of GPU `gpu` on NvmlBackend, with the library acting like a driver whose
// newest GI profile info struct is `max_version` (3: v3; 2: v2 only; 1: no V function).
class ProfileVersionsTest : public NvmlBackendTest {
 protected:
  std::vector<GpuInstanceProfileInfo> Profiles(const std::string& spec, int gpu,
                                               const char* max_version) {
    EXPECT_EQ(::setenv(kMaxProfileInfoVersionEnv, max_version, 1), 0);
    Start(spec);
    if (nvml_ == nullptr) return {};
    EnableMigBoth(gpu);
    absl::StatusOr<std::vector<GpuInstanceProfileInfo>> profiles =
        nvml_->ListGpuInstanceProfiles(gpu);
    EXPECT_TRUE(profiles.ok()) << profiles.status();
    return profiles.ok() ? *profiles : std::vector<GpuInstanceProfileInfo>{};
  }

  // Everything but the name matches the simulator's (catalog) answer.
  void ExpectSameAsSimulator(const std::vector<GpuInstanceProfileInfo>& got, int gpu) {
    absl::StatusOr<std::vector<GpuInstanceProfileInfo>> want = sim_->ListGpuInstanceProfiles(gpu);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(got.size(), want->size());
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE((*want)[i].name);
      EXPECT_EQ(got[i].nvml_const, (*want)[i].nvml_const);
      EXPECT_EQ(got[i].id, (*want)[i].id);
      EXPECT_EQ(got[i].slices, (*want)[i].slices);
      EXPECT_EQ(got[i].instance_count, (*want)[i].instance_count);
      EXPECT_EQ(got[i].sms, (*want)[i].sms);
      EXPECT_EQ(got[i].memory_mib, (*want)[i].memory_mib);
      EXPECT_EQ(got[i].copy_engines, (*want)[i].copy_engines);
      EXPECT_EQ(got[i].decoders, (*want)[i].decoders);
      EXPECT_EQ(got[i].encoders, (*want)[i].encoders);
      EXPECT_EQ(got[i].jpegs, (*want)[i].jpegs);
      EXPECT_EQ(got[i].ofas, (*want)[i].ofas);
    }
  }

  static std::vector<std::string> Names(const std::vector<GpuInstanceProfileInfo>& profiles) {
    std::vector<std::string> out;
    for (const GpuInstanceProfileInfo& profile : profiles) out.push_back(profile.name);
    return out;
  }
};

// By NVML constant.
const std::vector<std::string> kA100Names = {"1g.5gb",  "2g.10gb",   "3g.20gb", "4g.20gb",
                                             "7g.40gb", "1g.5gb+me", "1g.10gb"};

TEST_F(ProfileVersionsTest, V3GivesTheDriversNames) {
  const std::vector<GpuInstanceProfileInfo> profiles = Profiles("1xA100-40GB", 0, "3");
  EXPECT_EQ(Names(profiles), kA100Names);
  for (const GpuInstanceProfileInfo& profile : profiles) EXPECT_FALSE(profile.name_derived);
  ExpectSameAsSimulator(profiles, 0);
}

TEST_F(ProfileVersionsTest, V2OnlyDriverAnswersTheV2Struct) {
  const std::vector<GpuInstanceProfileInfo> profiles = Profiles("1xA100-40GB", 0, "2");
  EXPECT_EQ(Names(profiles), kA100Names);
  for (const GpuInstanceProfileInfo& profile : profiles) EXPECT_FALSE(profile.name_derived);
  ExpectSameAsSimulator(profiles, 0);
}

TEST_F(ProfileVersionsTest, V1OnlyDriverGetsDerivedNames) {
  const std::vector<GpuInstanceProfileInfo> profiles = Profiles("1xA100-40GB", 0, "1");
  // go-nvlib's rounding gives the catalog names: 3g.20gb is 19968 MiB, 7g.40gb 40192 MiB (plain
  // rounding of GiB would say 7g.39gb); +me comes from the NVML constant (1_SLICE_REV1).
  EXPECT_EQ(Names(profiles), kA100Names);
  for (const GpuInstanceProfileInfo& profile : profiles) EXPECT_TRUE(profile.name_derived);
  ASSERT_EQ(profiles.size(), 7U);
  EXPECT_EQ(profiles[2].memory_mib, 19968);
  ExpectSameAsSimulator(profiles, 0);
}

TEST_F(ProfileVersionsTest, V1OnlyDerivedNamesOnH100AndA30) {
  std::vector<GpuInstanceProfileInfo> profiles = Profiles("1xH100-80GB,1xA30", 0, "1");
  std::vector<std::string> base;  // the profiles without a media suffix
  for (const GpuInstanceProfileInfo& profile : profiles) {
    if (profile.name.find_first_of("+-") == std::string::npos) base.push_back(profile.name);
  }
  EXPECT_EQ(base, (std::vector<std::string>{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb",
                                            "1g.20gb"}));
  ExpectSameAsSimulator(profiles, 0);
  EnableMigBoth(1);
  absl::StatusOr<std::vector<GpuInstanceProfileInfo>> a30 = nvml_->ListGpuInstanceProfiles(1);
  ASSERT_TRUE(a30.ok()) << a30.status();
  absl::StatusOr<std::vector<GpuInstanceProfileInfo>> want = sim_->ListGpuInstanceProfiles(1);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(Names(*a30), Names(*want));
}

TEST_F(ProfileVersionsTest, NotSupportedWithoutMigOrWithMigOff) {
  Start("1xA100-40GB,1xL4");
  EXPECT_TRUE(HasNvmlCode(nvml_->ListGpuInstanceProfiles(0).status(), kNvmlNotSupported));
  EXPECT_TRUE(HasNvmlCode(nvml_->ListGpuInstanceProfiles(1).status(), kNvmlNotSupported));
  EXPECT_TRUE(HasNvmlCode(sim_->ListGpuInstanceProfiles(1).status(), kNvmlNotSupported));
  EXPECT_TRUE(HasNvmlCode(nvml_->ListGpuInstanceProfiles(7).status(), kNvmlInvalidArgument));
}

TEST_F(NvmlBackendTest, GpuInstancesMatchTheSimulator) {
  Start("2xH100-80GB,1xA30");
  for (int gpu = 0; gpu < 3; ++gpu) EnableMigBoth(gpu);
  // Driver placement: "9,19,19" on H100.
  for (int profile : {9, 19, 19}) ASSERT_TRUE(CreateGiBoth(0, profile, std::nullopt).has_value());
  ExpectSameGis(0);
  // Explicit placements on the second H100: 3g@0, 1g.20gb@4, 1g@6.
  std::optional<GpuInstanceInfo> gi = CreateGiBoth(1, 9, 0);
  ASSERT_TRUE(gi.has_value());
  EXPECT_EQ(gi->start, 0);
  EXPECT_EQ(gi->size, 4);
  EXPECT_EQ(gi->id, 1);
  gi = CreateGiBoth(1, 15, 4);
  ASSERT_TRUE(gi.has_value());
  EXPECT_EQ(gi->start, 4);
  EXPECT_EQ(gi->size, 2);
  gi = CreateGiBoth(1, 19, 6);
  ASSERT_TRUE(gi.has_value());
  EXPECT_EQ(gi->start, 6);
  EXPECT_EQ(gi->id, 13);
  // A start the profile does not allow, an unknown profile, an occupied slot.
  EXPECT_FALSE(CreateGiBoth(1, 9, 2).has_value());
  EXPECT_FALSE(CreateGiBoth(1, 77, std::nullopt).has_value());
  EXPECT_FALSE(CreateGiBoth(1, 19, 4).has_value());
  ExpectSameGis(1);
  // A30: 2g.12gb then two 1g.6gb.
  for (int profile : {5, 14, 14}) ASSERT_TRUE(CreateGiBoth(2, profile, std::nullopt).has_value());
  ExpectSameGis(2);
  absl::StatusOr<std::vector<GpuInstanceInfo>> a30 = nvml_->ListGpuInstances(2);
  ASSERT_TRUE(a30.ok());
  ASSERT_EQ(a30->size(), 3U);
}

TEST_F(NvmlBackendTest, InsufficientResources) {
  Start("1xH100-80GB");
  EnableMigBoth(0);
  ASSERT_TRUE(CreateGiBoth(0, 0, std::nullopt).has_value());  // 7g takes the whole GPU
  absl::StatusOr<GpuInstanceInfo> more = nvml_->CreateGpuInstance(0, 19, std::nullopt);
  EXPECT_TRUE(HasNvmlCode(more.status(), kNvmlInsufficientResources)) << more.status();
  more = nvml_->CreateGpuInstance(0, 19, 3);
  EXPECT_TRUE(HasNvmlCode(more.status(), kNvmlInsufficientResources)) << more.status();
  EXPECT_NE(more.status().message().find("nvmlDeviceCreateGpuInstanceWithPlacement"),
            std::string::npos);
  CreateGiBoth(0, 14, std::nullopt);
}

// -------------------------------------------------------------------------- compute instances

TEST_F(NvmlBackendTest, ComputeInstancesWithUuids) {
  Start("1xH100-80GB");
  EnableMigBoth(0);
  std::optional<GpuInstanceInfo> gi = CreateGiBoth(0, 9, std::nullopt);  // 3g.40gb
  ASSERT_TRUE(gi.has_value());
  std::optional<ComputeInstanceInfo> first = CreateCiBoth(0, gi->id, 0, std::nullopt);  // 1c
  ASSERT_TRUE(first.has_value());
  std::optional<ComputeInstanceInfo> second = CreateCiBoth(0, gi->id, 1, 1);  // 2c@1: not allowed
  EXPECT_FALSE(second.has_value());
  second = CreateCiBoth(0, gi->id, 0, 2);  // 1c@2
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->start, 2);
  EXPECT_EQ(second->size, 1);
  EXPECT_FALSE(CreateCiBoth(0, gi->id, 3, std::nullopt).has_value());  // 4c does not fit a 3g
  EXPECT_EQ(first->uuid.rfind("MIG-", 0), 0U) << first->uuid;
  EXPECT_NE(first->uuid, second->uuid);
  ExpectSameCis(0, gi->id);

  // The UUIDs stay for the CIs' life and are the ones in the simulator's state.
  absl::StatusOr<std::vector<ComputeInstanceInfo>> cis = nvml_->ListComputeInstances(0, gi->id);
  ASSERT_TRUE(cis.ok()) << cis.status();
  ASSERT_EQ(cis->size(), 2U);
  EXPECT_EQ((*cis)[0].uuid, first->uuid);
  EXPECT_EQ((*cis)[1].uuid, second->uuid);
  absl::StatusOr<SimState> state = SameFile()->State();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->gpus[0].gis[0].cis[1].uuid, second->uuid);

  // A GI that does not exist.
  ExpectSameCis(0, 5);
  EXPECT_FALSE(CreateCiBoth(0, 5, 0, std::nullopt).has_value());
}

TEST_F(NvmlBackendTest, DestroyOrderAndInUse) {
  Start("1xA30");
  EnableMigBoth(0);
  std::optional<GpuInstanceInfo> gi = CreateGiBoth(0, 5, std::nullopt);  // 2g.12gb
  ASSERT_TRUE(gi.has_value());
  std::optional<ComputeInstanceInfo> ci = CreateCiBoth(0, gi->id, 1, std::nullopt);
  ASSERT_TRUE(ci.has_value());

  absl::Status status = nvml_->DestroyGpuInstance(0, gi->id);
  EXPECT_TRUE(HasNvmlCode(status, kNvmlInUse)) << status;
  EXPECT_TRUE(HasNvmlCode(sim_->DestroyGpuInstance(0, gi->id), kNvmlInUse));

  // A process on the CI blocks its destruction.
  ControlBoth([&](SimMachine& machine) {
    return machine.AddProcess(0, {4242, "trainer", 2048, gi->id, ci->id});
  });
  status = nvml_->DestroyComputeInstance(0, gi->id, ci->id);
  EXPECT_TRUE(HasNvmlCode(status, kNvmlInUse)) << status;
  ControlBoth([&](SimMachine& machine) { return machine.RemoveProcess(4242); });

  EXPECT_TRUE(HasNvmlCode(nvml_->DestroyComputeInstance(0, gi->id, 6), kNvmlNotFound));
  ASSERT_TRUE(nvml_->DestroyComputeInstance(0, gi->id, ci->id).ok());
  ASSERT_TRUE(sim_->DestroyComputeInstance(0, gi->id, ci->id).ok());
  ExpectSameCis(0, gi->id);
  ASSERT_TRUE(nvml_->DestroyGpuInstance(0, gi->id).ok());
  ASSERT_TRUE(sim_->DestroyGpuInstance(0, gi->id).ok());
  EXPECT_TRUE(HasNvmlCode(nvml_->DestroyGpuInstance(0, gi->id), kNvmlNotFound));
  ExpectSameGis(0);
  // Disabling MIG with instances present is IN_USE; without, it applies.
  ASSERT_TRUE(CreateGiBoth(0, 14, std::nullopt).has_value());
  EXPECT_TRUE(HasNvmlCode(nvml_->SetMigMode(0, MigMode::kDisabled).status(), kNvmlInUse));
}

// --------------------------------------------------------------------- processes and memory

TEST_F(NvmlBackendTest, ProcessesAndMemory) {
  Start("1xH100-80GB,1xA30");
  ControlBoth([](SimMachine& machine) {
    return machine.AddProcess(0, {101, "python", 1000, -1, -1});
  });
  ControlBoth([](SimMachine& machine) {
    return machine.AddProcess(0, {102, "trainer", 500, -1, -1});
  });
  absl::StatusOr<std::vector<ProcessInfo>> processes = nvml_->ListProcesses(0);
  ASSERT_TRUE(processes.ok()) << processes.status();
  ASSERT_EQ(processes->size(), 2U);
  EXPECT_EQ((*processes)[0].pid, 101U);
  EXPECT_EQ((*processes)[0].name, "python");
  EXPECT_EQ((*processes)[0].used_memory_mib, 1000);
  EXPECT_EQ((*processes)[0].gi, -1);
  EXPECT_EQ((*processes)[0].ci, -1);
  EXPECT_EQ((*processes)[1].name, "trainer");
  absl::StatusOr<MemoryInfo> memory = nvml_->GetMemory(0, std::nullopt, std::nullopt);
  ASSERT_TRUE(memory.ok()) << memory.status();
  absl::StatusOr<MemoryInfo> expected = sim_->GetMemory(0, std::nullopt, std::nullopt);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(memory->total_mib, expected->total_mib);
  EXPECT_EQ(memory->used_mib, 1500);
  EXPECT_EQ(memory->free_mib, expected->free_mib);

  // MIG on the A30: a process in GI/CI, per-instance memory.
  EnableMigBoth(1);
  std::optional<GpuInstanceInfo> gi = CreateGiBoth(1, 14, std::nullopt);       // 1g.6gb
  std::optional<GpuInstanceInfo> empty_gi = CreateGiBoth(1, 5, std::nullopt);  // 2g.12gb, no CI
  ASSERT_TRUE(gi.has_value() && empty_gi.has_value());
  std::optional<ComputeInstanceInfo> ci = CreateCiBoth(1, gi->id, 0, std::nullopt);
  ASSERT_TRUE(ci.has_value());
  ControlBoth([&](SimMachine& machine) {
    return machine.AddProcess(1, {202, "server", 3000, gi->id, ci->id});
  });
  processes = nvml_->ListProcesses(1);
  ASSERT_TRUE(processes.ok()) << processes.status();
  ASSERT_EQ(processes->size(), 1U);
  EXPECT_EQ((*processes)[0].gi, gi->id);
  EXPECT_EQ((*processes)[0].ci, ci->id);
  EXPECT_EQ((*processes)[0].name, "server");

  struct Query {
    std::optional<int> gi;
    std::optional<int> ci;
  };
  for (const Query& query :
       {Query{gi->id, ci->id}, Query{gi->id, std::nullopt}, Query{empty_gi->id, std::nullopt},
        Query{empty_gi->id, 0}, Query{9, std::nullopt}, Query{gi->id, 5}}) {
    absl::StatusOr<MemoryInfo> a = nvml_->GetMemory(1, query.gi, query.ci);
    absl::StatusOr<MemoryInfo> b = sim_->GetMemory(1, query.gi, query.ci);
    ASSERT_EQ(a.ok(), b.ok()) << "nvml: " << a.status() << "\nsim: " << b.status();
    EXPECT_EQ(CodeOf(a), CodeOf(b)) << a.status();
    if (!a.ok()) continue;
    EXPECT_EQ(a->total_mib, b->total_mib);
    EXPECT_EQ(a->used_mib, b->used_mib);
    EXPECT_EQ(a->free_mib, b->free_mib);
  }
  memory = nvml_->GetMemory(1, gi->id, ci->id);
  ASSERT_TRUE(memory.ok());
  EXPECT_EQ(memory->used_mib, 3000);
}

// Simulated pids are not real processes: NvmlBackend on the test library ends them through its
// hook, never with a signal.
TEST_F(NvmlBackendTest, TerminateProcessEndsSimulatedProcesses) {
  Start("1xA30");
  ControlBoth([](SimMachine& machine) {
    return machine.AddProcess(0, {4242, "trainer", 64, -1, -1});
  });
  ASSERT_TRUE(nvml_->TerminateProcess(4242, 1).ok());
  ASSERT_TRUE(sim_->TerminateProcess(4242, 1).ok());
  absl::StatusOr<std::vector<ProcessInfo>> processes = nvml_->ListProcesses(0);
  ASSERT_TRUE(processes.ok()) << processes.status();
  EXPECT_TRUE(processes->empty());
  const absl::Status again = nvml_->TerminateProcess(4242, 1);
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound) << again;
  EXPECT_EQ(again.code(), sim_->TerminateProcess(4242, 1).code());
}

// Resets and terminations go to the injected HostActions, not to the library's hooks.
TEST_F(NvmlBackendTest, InjectedHostActionsAreTheOnesCalled) {
  Start("1xA30");
  struct Recorder : HostActions {
    std::vector<std::string>* calls;
    explicit Recorder(std::vector<std::string>* out) : calls(out) {}
    absl::Status ResetGpu(int gpu) override {
      calls->push_back("reset " + std::to_string(gpu));
      return absl::OkStatus();
    }
    absl::Status TerminateProcess(std::uint32_t pid, int grace_seconds) override {
      calls->push_back("terminate " + std::to_string(pid) + " " + std::to_string(grace_seconds));
      return absl::OkStatus();
    }
  };
  std::vector<std::string> calls;
  absl::StatusOr<std::unique_ptr<NvmlBackend>> nvml =
      NvmlBackend::Load(Catalog(), GPUSLICE_FAKE_NVML, std::make_unique<Recorder>(&calls));
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  ControlBoth([](SimMachine& machine) {
    return machine.AddProcess(0, {4242, "trainer", 64, -1, -1});
  });
  ASSERT_TRUE((*nvml)->ResetGpu(0).ok());
  ASSERT_TRUE((*nvml)->TerminateProcess(4242, 3).ok());
  // A GPU the library does not have is refused before the actions are asked.
  EXPECT_TRUE(HasNvmlCode((*nvml)->ResetGpu(4), kNvmlInvalidArgument));
  EXPECT_EQ(calls, (std::vector<std::string>{"reset 0", "terminate 4242 3"}));
  // The simulated process is untouched: the library's hook was not called.
  absl::StatusOr<std::vector<ProcessInfo>> processes = (*nvml)->ListProcesses(0);
  ASSERT_TRUE(processes.ok()) << processes.status();
  EXPECT_EQ(processes->size(), 1U);
}

// The test library's actions are chosen for it; a library without the hooks gets the default.
TEST_F(NvmlBackendTest, HostActionsForChoosesTheTestLibrarysHooks) {
  EXPECT_NE(TestLibraryHostActions(GPUSLICE_FAKE_NVML), nullptr);
  EXPECT_EQ(TestLibraryHostActions("libc.so.6"), nullptr);
  EXPECT_EQ(TestLibraryHostActions(dir_ + "/no/such/lib.so"), nullptr);
  EXPECT_NE(HostActionsFor("libc.so.6"), nullptr);
}

// -------------------------------------------------------------------------- reset and holders

TEST_F(NvmlBackendTest, PendingMigModeAndReset) {
  Start("1xA30");
  ControlBoth([](SimMachine& machine) { return machine.AddHolder(0, "nvidia-persistenced"); });
  absl::StatusOr<MigModeChange> change = nvml_->SetMigMode(0, MigMode::kEnabled);
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_FALSE(change->applied);
  EXPECT_EQ(change->activation_code, kNvmlInUse);
  absl::StatusOr<std::vector<GpuInfo>> gpus = nvml_->ListGpus();
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ((*gpus)[0].mig_current, MigMode::kDisabled);
  EXPECT_EQ((*gpus)[0].mig_pending, MigMode::kEnabled);

  absl::Status status = nvml_->ResetGpu(0);
  EXPECT_TRUE(HasNvmlCode(status, kNvmlInUse)) << status;
  Edit([](SimState& state) { state.gpus[0].holders.clear(); });
  ASSERT_TRUE(nvml_->ResetGpu(0).ok());
  gpus = nvml_->ListGpus();
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ((*gpus)[0].mig_current, MigMode::kEnabled);
  EXPECT_TRUE(HasNvmlCode(nvml_->ResetGpu(4), kNvmlInvalidArgument));

  Edit([](SimState& state) { state.gpus[0].reset_supported = false; });
  EXPECT_TRUE(HasNvmlCode(nvml_->ResetGpu(0), kNvmlNotSupported));
}

TEST_F(NvmlBackendTest, HoldersFromProcAndSys) {
  Start("1xA30");
  const std::string proc = dir_ + "/proc";
  const std::string sys = dir_ + "/sys/module";
  auto write = [](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  };
  write(proc + "/812/comm", "nvidia-persiste\n");
  write(proc + "/77/comm", "nv-hostengine\n");
  write(proc + "/900/comm", "bash\n");
  write(proc + "/self/comm", "nvidia-persiste\n");  // not a pid
  nvml_->SetHostRoots(proc, sys);
  absl::StatusOr<std::vector<std::string>> holders = nvml_->ListGpuHolders(0);
  ASSERT_TRUE(holders.ok()) << holders.status();
  EXPECT_EQ(*holders, (std::vector<std::string>{"nv-hostengine (DCGM) (pid 77)",
                                                "nvidia-persistenced (pid 812)"}));

  std::filesystem::create_directories(sys + "/nvidia_drm");
  holders = nvml_->ListGpuHolders(0);
  ASSERT_TRUE(holders.ok());
  ASSERT_EQ(holders->size(), 3U);
  EXPECT_EQ(holders->back(), "nvidia_drm module loaded");
}

// ------------------------------------------------------------------------------ fault rules

TEST_F(NvmlBackendTest, FaultRuleSurfacesAsItsNvmlCode) {
  Start("1xH100-80GB");
  EnableMigBoth(0);
  sim::FaultRule rule;
  rule.match = "nvmlDeviceCreateGpuInstance";
  rule.code = kNvmlGpuIsLost;
  Edit([&](SimState& state) {
    state.faults.push_back(rule);
    state.calls = 0;
  });
  absl::StatusOr<GpuInstanceInfo> gi = nvml_->CreateGpuInstance(0, 9, std::nullopt);
  ASSERT_FALSE(gi.ok());
  EXPECT_TRUE(HasNvmlCode(gi.status(), kNvmlGpuIsLost)) << gi.status();
  EXPECT_NE(gi.status().message().find("nvmlDeviceCreateGpuInstance"), std::string::npos);
  // The rule fired once; nothing was created.
  absl::StatusOr<std::vector<GpuInstanceInfo>> gis = nvml_->ListGpuInstances(0);
  ASSERT_TRUE(gis.ok()) << gis.status();
  EXPECT_TRUE(gis->empty());
  ASSERT_TRUE(nvml_->CreateGpuInstance(0, 9, std::nullopt).ok());

  // A rule on a call number: DriverVersion is exactly one NVML call.
  sim::FaultRule numbered;
  numbered.at_call = 1;
  numbered.code = kNvmlTimeout;
  Edit([&](SimState& state) {
    state.faults = {numbered};
    state.calls = 0;
  });
  EXPECT_TRUE(HasNvmlCode(nvml_->DriverVersion().status(), kNvmlTimeout));
  EXPECT_TRUE(nvml_->DriverVersion().ok());
}

// ------------------------------------------------- the test library's NVML semantics, directly

class FakeNvmlTest : public NvmlBackendTest {
 protected:
  void Open() {
    handle_ = ::dlopen(GPUSLICE_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << ::dlerror();
#define GPUSLICE_TEST_RESOLVE(ret, name, params)                          \
  api_.name = reinterpret_cast<nvml::name##_fn>(::dlsym(handle_, #name)); \
  ASSERT_NE(api_.name, nullptr) << #name;
    GPUSLICE_NVML_FUNCTIONS(GPUSLICE_TEST_RESOLVE)
#undef GPUSLICE_TEST_RESOLVE
  }
  void TearDown() override {
    if (handle_ != nullptr) ::dlclose(handle_);
    NvmlBackendTest::TearDown();
  }
  void* handle_ = nullptr;
  nvml::Api api_;
};

TEST_F(FakeNvmlTest, ProfileInfoTakesConstantsAndReturnsSmiIds) {
  Start("1xH100-80GB,1xL4");  // NvmlBackend holds the library initialised
  Open();
  nvml::nvmlDevice_t device = nullptr;
  ASSERT_EQ(api_.nvmlDeviceGetHandleByIndex_v2(0, &device), kNvmlSuccess);
  nvml::nvmlGpuInstanceProfileInfo_t info{};
  // MIG disabled.
  EXPECT_EQ(api_.nvmlDeviceGetGpuInstanceProfileInfo(device, 2, &info), kNvmlNotSupported);
  EnableMigBoth(0);
  ASSERT_EQ(api_.nvmlDeviceGetGpuInstanceProfileInfo(device, 2, &info), kNvmlSuccess);  // 3_SLICE
  EXPECT_EQ(info.id, 9U);
  EXPECT_EQ(info.sliceCount, 3U);
  EXPECT_EQ(info.instanceCount, 2U);
  ASSERT_EQ(api_.nvmlDeviceGetGpuInstanceProfileInfo(device, 0, &info), kNvmlSuccess);  // 1_SLICE
  EXPECT_EQ(info.id, 19U);
  EXPECT_EQ(api_.nvmlDeviceGetGpuInstanceProfileInfo(device, 0x0A, &info), kNvmlNotSupported);
  EXPECT_EQ(api_.nvmlDeviceGetGpuInstanceProfileInfo(device, 0x12, &info), kNvmlInvalidArgument);

  unsigned count = 0;
  ASSERT_EQ(api_.nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, 9, nullptr, &count),
            kNvmlSuccess);
  EXPECT_EQ(count, 2U);
  std::vector<nvml::nvmlGpuInstancePlacement_t> placements(count);
  ASSERT_EQ(
      api_.nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, 9, placements.data(), &count),
      kNvmlSuccess);
  EXPECT_EQ(placements[1].start, 4U);
  EXPECT_EQ(placements[1].size, 4U);
  // Profile ids, not constants, everywhere else: constant 2 is no H100 profile id.
  EXPECT_EQ(api_.nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, 2, nullptr, &count),
            kNvmlInvalidArgument);

  nvml::nvmlDevice_t l4 = nullptr;
  ASSERT_EQ(api_.nvmlDeviceGetHandleByIndex_v2(1, &l4), kNvmlSuccess);
  unsigned current = 0;
  unsigned pending = 0;
  EXPECT_EQ(api_.nvmlDeviceGetMigMode(l4, &current, &pending), kNvmlNotSupported);
  const char* text =
      reinterpret_cast<nvml::nvmlErrorString_fn>(::dlsym(handle_, "nvmlErrorString"))(kNvmlInUse);
  EXPECT_NE(std::string(text).find("in use"), std::string::npos) << text;
}

TEST_F(FakeNvmlTest, VersionedProfileInfoChecksTheVersionWord) {
  Start("1xRTX-PRO-6000-Blackwell");
  Open();
  auto profile_info_v = reinterpret_cast<nvml::nvmlDeviceGetGpuInstanceProfileInfoV_fn>(
      ::dlsym(handle_, nvml::kGpuInstanceProfileInfoVSymbol));
  ASSERT_NE(profile_info_v, nullptr);
  nvml::nvmlDevice_t device = nullptr;
  ASSERT_EQ(api_.nvmlDeviceGetHandleByIndex_v2(0, &device), kNvmlSuccess);
  nvml::nvmlGpuInstanceProfileInfo_v2_t v2{};
  v2.version = nvml::kGpuInstanceProfileInfoV2;
  EXPECT_EQ(profile_info_v(device, 0, &v2), kNvmlNotSupported);  // MIG disabled
  EnableMigBoth(0);
  ASSERT_EQ(profile_info_v(device, 0, &v2), kNvmlSuccess);
  EXPECT_EQ(std::string(v2.name).rfind("MIG 1g.", 0), 0U) << v2.name;
  EXPECT_EQ(v2.version, nvml::kGpuInstanceProfileInfoV2);
  // Wrong size, unknown version, no version at all.
  for (unsigned version : {nvml::StructVersion(144, 2), nvml::StructVersion(152, 4), 0U,
                           nvml::StructVersion(152, 1)}) {
    v2 = {};
    v2.version = version;
    EXPECT_EQ(profile_info_v(device, 0, &v2), kNvmlArgumentVersionMismatch) << version;
  }
  // v3: capabilities carry the graphics bit on +gfx profiles.
  const hw::GpuModel* model = Catalog().Find("RTX-PRO-6000-Blackwell");
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->mig);
  bool saw_gfx = false;
  for (const hw::GiProfile& profile : model->mig->profiles) {
    nvml::nvmlGpuInstanceProfileInfo_v3_t v3{};
    v3.version = nvml::kGpuInstanceProfileInfoV3;
    ASSERT_EQ(profile_info_v(device, static_cast<unsigned>(profile.nvml_const),
                             reinterpret_cast<nvml::nvmlGpuInstanceProfileInfo_v2_t*>(&v3)),
              kNvmlSuccess)
        << profile.name;
    if (v3.id != static_cast<unsigned>(profile.smi_id)) continue;  // another profile of the const
    EXPECT_EQ(std::string(v3.name), "MIG " + profile.name);
    EXPECT_EQ(v3.memorySizeMB, static_cast<unsigned long long>(profile.memory_mib));
    const bool gfx = profile.variant == hw::MediaVariant::kGfx;
    saw_gfx = saw_gfx || gfx;
    EXPECT_EQ((v3.capabilities & nvml::kGpuInstanceProfileCapsGfx) != 0, gfx) << profile.name;
  }
  EXPECT_TRUE(saw_gfx);
}

TEST_F(FakeNvmlTest, StaleHandlesAreInvalid) {
  Start("1xA30");
  Open();
  EnableMigBoth(0);
  nvml::nvmlDevice_t device = nullptr;
  ASSERT_EQ(api_.nvmlDeviceGetHandleByIndex_v2(0, &device), kNvmlSuccess);
  nvml::nvmlGpuInstance_t gi = nullptr;
  ASSERT_EQ(api_.nvmlDeviceCreateGpuInstance(device, 14, &gi), kNvmlSuccess);
  nvml::nvmlComputeInstance_t ci = nullptr;
  ASSERT_EQ(api_.nvmlGpuInstanceCreateComputeInstance(gi, 0, &ci), kNvmlSuccess);
  nvml::nvmlDevice_t mig = nullptr;
  ASSERT_EQ(api_.nvmlDeviceGetMigDeviceHandleByIndex(device, 0, &mig), kNvmlSuccess);
  EXPECT_EQ(api_.nvmlDeviceGetMigDeviceHandleByIndex(device, 1, &mig), kNvmlNotFound);
  ASSERT_EQ(api_.nvmlDeviceGetMigDeviceHandleByIndex(device, 0, &mig), kNvmlSuccess);
  unsigned id = 0;
  EXPECT_EQ(api_.nvmlDeviceGetComputeInstanceId(device, &id),
            kNvmlNotSupported);  // not a MIG handle

  ASSERT_EQ(api_.nvmlComputeInstanceDestroy(ci), kNvmlSuccess);
  nvml::nvmlComputeInstanceInfo_t ci_info{};
  EXPECT_EQ(api_.nvmlComputeInstanceGetInfo_v2(ci, &ci_info), kNvmlInvalidArgument);
  EXPECT_EQ(api_.nvmlDeviceGetComputeInstanceId(mig, &id), kNvmlInvalidArgument);
  ASSERT_EQ(api_.nvmlGpuInstanceDestroy(gi), kNvmlSuccess);
  nvml::nvmlGpuInstanceInfo_t gi_info{};
  EXPECT_EQ(api_.nvmlGpuInstanceGetInfo(gi, &gi_info), kNvmlInvalidArgument);
  EXPECT_EQ(api_.nvmlGpuInstanceDestroy(gi), kNvmlInvalidArgument);
  // A pointer the library never handed out.
  int bogus = 0;
  EXPECT_EQ(
      api_.nvmlGpuInstanceGetInfo(reinterpret_cast<nvml::nvmlGpuInstance_t>(&bogus), &gi_info),
      kNvmlInvalidArgument);
}

TEST_F(FakeNvmlTest, ProcessIdsAreInvalidWithoutMig) {
  Start("1xA30");
  Open();
  ControlBoth([](SimMachine& machine) { return machine.AddProcess(0, {55, "job", 64, -1, -1}); });
  nvml::nvmlDevice_t device = nullptr;
  ASSERT_EQ(api_.nvmlDeviceGetHandleByIndex_v2(0, &device), kNvmlSuccess);
  unsigned count = 0;
  EXPECT_EQ(api_.nvmlDeviceGetComputeRunningProcesses_v3(device, &count, nullptr),
            kNvmlInsufficientSize);
  EXPECT_EQ(count, 1U);
  nvml::nvmlProcessInfo_t info{};
  ASSERT_EQ(api_.nvmlDeviceGetComputeRunningProcesses_v3(device, &count, &info), kNvmlSuccess);
  EXPECT_EQ(info.pid, 55U);
  EXPECT_EQ(info.usedGpuMemory, 64ULL * 1024 * 1024);
  EXPECT_EQ(info.gpuInstanceId, 0xFFFFFFFFU);
  EXPECT_EQ(info.computeInstanceId, 0xFFFFFFFFU);
}

}  // namespace
}  // namespace gpuslice::device
