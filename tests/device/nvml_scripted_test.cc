// NvmlBackend against the scripted NVML library (src/device/scripted_nvml): every answer the
// "driver" gives is written out by hand below, per scenario, from NVIDIA's documentation and
// nvidia-smi output (the MIG user guide's `nvidia-smi mig -lgip` tables), never derived from the
// simulator or the catalog. The library logs each call, so the tests also pin the call sequence,
// the buffer sizes and the ids the backend passes (profile IDs, not NVML constants, where NVML
// takes IDs). Field values are chosen distinct where a swapped or shifted struct field could
// otherwise go unnoticed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpuslice/agent/doctor.h"
#include "gpuslice/device/nvml_backend.h"
#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/hw/catalog.h"
#include "temp_dir.h"

#ifndef GPUSLICE_SCRIPTED_NVML_LIB
#error "GPUSLICE_SCRIPTED_NVML_LIB must name the scripted NVML library (libnvidia-ml.so.1)"
#endif

namespace gpuslice::device {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

// The H100 80GB's GPU instance profiles as driver 580 reports them (MIG user guide, `nvidia-smi
// mig -lgip` and `-lgipp` on H100 80GB): NVML constant, nvidia-smi ID, name, slices, instances,
// SMs, CE/DEC/ENC/JPEG/OFA, memory in MiB, placements.
constexpr char kH100Profiles[] = R"json([
  {"constant": 0, "id": 19, "name": "MIG 1g.10gb", "slices": 1, "instances": 7, "sms": 16,
   "copy_engines": 1, "decoders": 1, "encoders": 0, "jpegs": 1, "ofas": 0, "memory_mib": 9984,
   "placements": [[0,1],[1,1],[2,1],[3,1],[4,1],[5,1],[6,1]]},
  {"constant": 1, "id": 14, "name": "MIG 2g.20gb", "slices": 2, "instances": 3, "sms": 32,
   "copy_engines": 2, "decoders": 2, "encoders": 0, "jpegs": 2, "ofas": 0, "memory_mib": 20096,
   "placements": [[0,2],[2,2],[4,2]]},
  {"constant": 2, "id": 9, "name": "MIG 3g.40gb", "slices": 3, "instances": 2, "sms": 60,
   "copy_engines": 3, "decoders": 3, "encoders": 0, "jpegs": 3, "ofas": 0, "memory_mib": 40448,
   "placements": [[0,4],[4,4]]},
  {"constant": 3, "id": 5, "name": "MIG 4g.40gb", "slices": 4, "instances": 1, "sms": 64,
   "copy_engines": 4, "decoders": 4, "encoders": 0, "jpegs": 4, "ofas": 0, "memory_mib": 40448,
   "placements": [[0,4]]},
  {"constant": 4, "id": 0, "name": "MIG 7g.80gb", "slices": 7, "instances": 1, "sms": 132,
   "copy_engines": 8, "decoders": 7, "encoders": 0, "jpegs": 7, "ofas": 1, "memory_mib": 81152,
   "placements": [[0,8]]},
  {"constant": 5, "returns": "NVML_ERROR_NOT_SUPPORTED"},
  {"constant": 7, "id": 20, "name": "MIG 1g.10gb+me", "slices": 1, "instances": 1, "sms": 16,
   "copy_engines": 1, "decoders": 1, "encoders": 0, "jpegs": 1, "ofas": 1, "memory_mib": 9984,
   "placements": [[0,1],[1,1],[2,1],[3,1],[4,1],[5,1],[6,1]]},
  {"constant": 9, "id": 15, "name": "MIG 1g.20gb", "slices": 1, "instances": 4, "sms": 26,
   "copy_engines": 1, "decoders": 1, "encoders": 0, "jpegs": 1, "ofas": 0, "memory_mib": 20096,
   "placements": [[0,2],[2,2],[4,2],[6,2]]}
])json";

// A machine of two GPUs: an H100 80GB with MIG on and three GPU instances (3g@0 with one 3c CI,
// 2g@4 with two 1c CIs, 1g@6 without a CI) running three processes, and an L40S (no MIG) running
// one. The H100's profile table is kH100Profiles.
constexpr char kTwoGpus[] = R"json({
  "log": "calls.log",
  "driver_version": "580.65.06",
  "process_names": {"4242": "python3", "777": "vllm",
                    "6161": {"returns": "NVML_ERROR_NO_PERMISSION"}},
  "gpus": [
    {"name": "NVIDIA H100 80GB HBM3",
     "uuid": "GPU-5f0d3c1e-8a4b-4c2d-9e7f-0123456789ab",
     "pci": {"bus_id": "00000000:18:00.0", "bus_id_legacy": "0000:18:00.0", "domain": 0,
             "bus": 24, "device": 0, "device_id": "0x2330", "subsystem_id": "0x16C110DE"},
     "memory": {"total_mib": 81559, "used_mib": 3000, "free_mib": 77000},
     "mig": {"current": "enabled", "pending": "enabled"},
     "gi_profiles": "H100",
     "ci_profiles": {
       "9":  [{"constant": 0, "id": 0, "slices": 1, "instances": 3, "sms": 16,
               "placements": [[0,1],[1,1],[2,1]]},
              {"constant": 1, "id": 1, "slices": 2, "instances": 1, "sms": 32,
               "placements": [[0,2]]},
              {"constant": 2, "id": 2, "slices": 3, "instances": 1, "sms": 60,
               "placements": [[0,3]]}],
       "14": [{"constant": 0, "id": 0, "slices": 1, "instances": 2, "sms": 16,
               "placements": [[0,1],[1,1]]},
              {"constant": 1, "id": 1, "slices": 2, "instances": 1, "sms": 32,
               "placements": [[0,2]]}],
       "19": [{"constant": 0, "id": 0, "slices": 1, "instances": 1, "sms": 16,
               "placements": [[0,1]]}]
     },
     "gpu_instances": [
       {"id": 1, "profile_id": 9, "placement": [0, 4],
        "compute_instances": [
          {"id": 0, "profile_id": 2, "placement": [0, 3], "mig_index": 0,
           "uuid": "MIG-0a1b2c3d-0000-4000-8000-000000000001",
           "memory": {"total_mib": 40448, "used_mib": 1024}}]},
       {"id": 5, "profile_id": 14, "placement": [4, 2],
        "compute_instances": [
          {"id": 1, "profile_id": 0, "placement": [0, 1], "mig_index": 2,
           "uuid": "MIG-0a1b2c3d-0000-4000-8000-000000000002",
           "memory": {"total_mib": 20096, "used_mib": 0}},
          {"id": 0, "profile_id": 0, "placement": [1, 1], "mig_index": 3,
           "uuid": "MIG-0a1b2c3d-0000-4000-8000-000000000003",
           "memory": {"total_mib": 20096, "used_mib": 512}}]},
       {"id": 13, "profile_id": 19, "placement": [6, 1]}
     ],
     "max_mig_devices": 7,
     "processes": [{"pid": 4242, "used_mib": 1024, "gi": 1, "ci": 0},
                   {"pid": 5151, "used_mib": "n/a", "gi": 5, "ci": 0},
                   {"pid": 6161, "used_mib": 512, "gi": 5, "ci": 0}]},
    {"name": "NVIDIA L40S",
     "uuid": "GPU-77aa88bb-99cc-4dee-8f00-112233445566",
     "pci": {"bus_id": "00000000:AF:00.0", "bus_id_legacy": "0000:AF:00.0", "domain": 0,
             "bus": 175, "device": 0, "device_id": "0x26B9"},
     "memory": {"total_mib": 46068, "used_mib": 2048},
     "processes": [{"pid": 777, "used_mib": 2048}]}
  ]
})json";

// kTwoGpus with the H100's profile table filled in.
json TwoGpus() {
  json scenario = json::parse(kTwoGpus);
  scenario["gpus"][0]["gi_profiles"] = json::parse(kH100Profiles);
  return scenario;
}

template <typename T>
std::optional<int> CodeOf(const absl::StatusOr<T>& result) {
  return NvmlCodeOf(result.status());
}

class NvmlScriptedTest : public ::testing::Test {
 protected:
  void TearDown() override {
    backend_.reset();
    ::unsetenv("GPUSLICE_SCRIPTED_NVML");
  }

  // Writes `scenario` (with the call log in the test's directory) and loads NvmlBackend over the
  // scripted library.
  absl::StatusOr<std::unique_ptr<NvmlBackend>> Load(json scenario) {
    scenario["log"] = "calls.log";
    std::filesystem::remove(dir_ / "calls.log");
    std::ofstream(dir_ / "scenario.json") << scenario.dump(2);
    EXPECT_EQ(::setenv("GPUSLICE_SCRIPTED_NVML", (dir_ / "scenario.json").c_str(), 1), 0);
    return NvmlBackend::Load(Catalog(), GPUSLICE_SCRIPTED_NVML_LIB);
  }

  void Start(const json& scenario) {
    absl::StatusOr<std::unique_ptr<NvmlBackend>> backend = Load(scenario);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
    // Nothing from this machine's /proc or /sys: the holders are the scenario's business.
    backend_->SetHostRoots(dir_.path(), dir_.path());
  }

  // Every logged call so far, in order.
  std::vector<std::string> Log() const {
    std::vector<std::string> lines;
    std::ifstream in(dir_ / "calls.log");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  // The logged calls of one function.
  std::vector<std::string> Calls(const std::string& function) const {
    std::vector<std::string> out;
    for (const std::string& line : Log()) {
      if (line.rfind(function + " ", 0) == 0) out.push_back(line);
    }
    return out;
  }
  // Forgets the calls logged so far.
  void ClearLog() { std::filesystem::remove(dir_ / "calls.log"); }

  TempDir dir_;
  std::unique_ptr<NvmlBackend> backend_;
};

// ------------------------------------------------------------------------------------ discovery

TEST_F(NvmlScriptedTest, DiscoversTwoGpusFieldByField) {
  Start(TwoGpus());
  EXPECT_EQ(backend_->Describe(), "NVML (driver 580.65.06)");
  absl::StatusOr<std::vector<GpuInfo>> gpus = backend_->ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 2U);

  const GpuInfo& h100 = (*gpus)[0];
  EXPECT_EQ(h100.index, 0);
  EXPECT_EQ(h100.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100.uuid, "GPU-5f0d3c1e-8a4b-4c2d-9e7f-0123456789ab");
  EXPECT_EQ(h100.pci_bus_id, "00000000:18:00.0");  // busId, not the 16-byte legacy form
  EXPECT_EQ(h100.pci_device_id, 0x2330);           // the upper half of pciDeviceId
  EXPECT_EQ(h100.memory_total_mib, 81559);
  EXPECT_TRUE(h100.mig_capable);
  EXPECT_EQ(h100.mig_current, MigMode::kEnabled);
  EXPECT_EQ(h100.mig_pending, MigMode::kEnabled);
  ASSERT_NE(h100.model, nullptr);
  EXPECT_EQ(h100.model->id, "H100-80GB");

  const GpuInfo& l40s = (*gpus)[1];
  EXPECT_EQ(l40s.index, 1);
  EXPECT_EQ(l40s.name, "NVIDIA L40S");
  EXPECT_EQ(l40s.uuid, "GPU-77aa88bb-99cc-4dee-8f00-112233445566");
  EXPECT_EQ(l40s.pci_bus_id, "00000000:AF:00.0");
  EXPECT_EQ(l40s.pci_device_id, 0x26B9);
  EXPECT_EQ(l40s.memory_total_mib, 46068);
  EXPECT_FALSE(l40s.mig_capable);  // nvmlDeviceGetMigMode: NOT_SUPPORTED
  ASSERT_NE(l40s.model, nullptr);
  EXPECT_EQ(l40s.model->id, "L40S");
}

// The documented buffer sizes (NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80,
// NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_DEVICE_UUID_V2_BUFFER_SIZE 96) and one pass per GPU.
TEST_F(NvmlScriptedTest, ListGpusCallSequence) {
  Start(TwoGpus());
  ASSERT_TRUE(backend_->ListGpus().ok());
  EXPECT_THAT(Log(), ElementsAre("nvmlInit_v2 -> NVML_SUCCESS",
                                 "nvmlSystemGetDriverVersion length=80 -> NVML_SUCCESS",
                                 "nvmlDeviceGetCount_v2 -> NVML_SUCCESS",
                                 "nvmlDeviceGetHandleByIndex_v2 index=0 -> NVML_SUCCESS",
                                 "nvmlDeviceGetName gpu=0 length=96 -> NVML_SUCCESS",
                                 "nvmlDeviceGetUUID gpu=0 length=96 -> NVML_SUCCESS",
                                 "nvmlDeviceGetPciInfo_v3 gpu=0 -> NVML_SUCCESS",
                                 "nvmlDeviceGetMemoryInfo gpu=0 -> NVML_SUCCESS",
                                 "nvmlDeviceGetMigMode gpu=0 -> NVML_SUCCESS",
                                 "nvmlDeviceGetHandleByIndex_v2 index=1 -> NVML_SUCCESS",
                                 "nvmlDeviceGetName gpu=1 length=96 -> NVML_SUCCESS",
                                 "nvmlDeviceGetUUID gpu=1 length=96 -> NVML_SUCCESS",
                                 "nvmlDeviceGetPciInfo_v3 gpu=1 -> NVML_SUCCESS",
                                 "nvmlDeviceGetMemoryInfo gpu=1 -> NVML_SUCCESS",
                                 "nvmlDeviceGetMigMode gpu=1 -> NVML_ERROR_NOT_SUPPORTED"));
  backend_.reset();
  EXPECT_EQ(Log().back(), "nvmlShutdown -> NVML_SUCCESS");
}

TEST_F(NvmlScriptedTest, PendingMigModeAndParentMemoryWithoutPermission) {
  json scenario = TwoGpus();
  scenario["gpus"][0]["mig"] = {{"current", "disabled"}, {"pending", "enabled"}};
  scenario["gpus"][0]["memory"] = {{"total_mib", 80000}};  // not read: the call is refused
  scenario["gpus"][0]["returns"] = {{"nvmlDeviceGetMemoryInfo", "NVML_ERROR_NO_PERMISSION"}};
  Start(scenario);
  absl::StatusOr<std::vector<GpuInfo>> gpus = backend_->ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_EQ((*gpus)[0].mig_current, MigMode::kDisabled);
  EXPECT_EQ((*gpus)[0].mig_pending, MigMode::kEnabled);
  EXPECT_EQ((*gpus)[0].memory_total_mib, 81559);  // the catalog's H100-80GB total
  // With MIG off the profiles are not asked for at all.
  ClearLog();
  absl::StatusOr<std::vector<GpuInstanceProfileInfo>> profiles =
      backend_->ListGpuInstanceProfiles(0);
  EXPECT_EQ(CodeOf(profiles), kNvmlNotSupported);
  EXPECT_TRUE(Calls("nvmlDeviceGetGpuInstanceProfileInfoV").empty());
}

// --------------------------------------------------------------------------- the profile table

// A made-up GPU whose two profiles have a distinct value in every field (and a memory size past
// 2^32 MiB), read through each struct version the backend knows: v3, v2 (the driver refuses v3)
// and v1 (no V function).
TEST_F(NvmlScriptedTest, EveryProfileFieldSurvivesEachStructVersion) {
  const json gpu = json::parse(R"json({
    "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-00000000-1111-4222-8333-444444444444",
    "memory": {"total_mib": 81559},
    "mig": {"current": "enabled", "pending": "enabled"},
    "gi_profiles": [
      {"constant": 0, "id": 19, "name": "MIG 1g.10gb", "slices": 1, "instances": 7, "sms": 16,
       "copy_engines": 2, "decoders": 3, "encoders": 4, "jpegs": 5, "ofas": 6,
       "memory_mib": 9984, "p2p": true},
      {"constant": 5, "returns": "NVML_ERROR_NOT_SUPPORTED"},
      {"constant": 7, "id": 20, "name": "MIG 1g.10gb+me", "slices": 11, "instances": 12,
       "sms": 13, "copy_engines": 14, "decoders": 15, "encoders": 16, "jpegs": 17, "ofas": 18,
       "memory_mib": 4294968320, "gfx": true}
    ]
  })json");
  struct Version {
    int number;
    json returns;
    json versions;
  };
  const Version kVersions[] = {
      {3, json::object(), json::array({2, 3})},
      {2, json::object(), json::array({2})},
      {1,
       {{"nvmlDeviceGetGpuInstanceProfileInfoV", "NVML_ERROR_FUNCTION_NOT_FOUND"}},
       json::array({2, 3})},
  };
  for (const Version& version : kVersions) {
    SCOPED_TRACE("struct version " + std::to_string(version.number));
    json scenario = {{"gpus", json::array({gpu})}};
    scenario["gpus"][0]["profile_info_versions"] = version.versions;
    scenario["gpus"][0]["returns"] = version.returns;
    Start(scenario);
    absl::StatusOr<std::vector<GpuInstanceProfileInfo>> profiles =
        backend_->ListGpuInstanceProfiles(0);
    ASSERT_TRUE(profiles.ok()) << profiles.status();
    ASSERT_EQ(profiles->size(), 2U);
    const GpuInstanceProfileInfo& a = (*profiles)[0];
    EXPECT_EQ(a.nvml_const, 0);
    EXPECT_EQ(a.id, 19);
    EXPECT_EQ(a.slices, 1);
    EXPECT_EQ(a.instance_count, 7);
    EXPECT_EQ(a.sms, 16);
    EXPECT_EQ(a.copy_engines, 2);
    EXPECT_EQ(a.decoders, 3);
    EXPECT_EQ(a.encoders, 4);
    EXPECT_EQ(a.jpegs, 5);
    EXPECT_EQ(a.ofas, 6);
    EXPECT_EQ(a.memory_mib, 9984);
    const GpuInstanceProfileInfo& b = (*profiles)[1];
    EXPECT_EQ(b.nvml_const, 7);
    EXPECT_EQ(b.id, 20);
    EXPECT_EQ(b.slices, 11);
    EXPECT_EQ(b.instance_count, 12);
    EXPECT_EQ(b.sms, 13);
    EXPECT_EQ(b.copy_engines, 14);
    EXPECT_EQ(b.decoders, 15);
    EXPECT_EQ(b.encoders, 16);
    EXPECT_EQ(b.jpegs, 17);
    EXPECT_EQ(b.ofas, 18);
    EXPECT_EQ(b.memory_mib, 4294968320);
    if (version.number >= 2) {
      EXPECT_EQ(a.name, "1g.10gb");
      EXPECT_EQ(b.name, "1g.10gb+me");
      EXPECT_FALSE(a.name_derived);
    } else {
      EXPECT_TRUE(a.name_derived);
      EXPECT_EQ(a.name, "1g.10gb");  // 9984 of 81559 MiB, go-nvlib's rounding
    }
    // Which struct the backend handed the driver, call by call.
    const std::vector<std::string> v_calls = Calls("nvmlDeviceGetGpuInstanceProfileInfoV");
    if (version.number == 3) {
      ASSERT_FALSE(v_calls.empty());
      for (const std::string& call : v_calls) EXPECT_THAT(call, HasSubstr(" version=3 "));
    } else if (version.number == 2) {
      ASSERT_GE(v_calls.size(), 2U);
      EXPECT_EQ(v_calls[0],
                "nvmlDeviceGetGpuInstanceProfileInfoV gpu=0 constant=0x00 version=3 "
                "-> NVML_ERROR_ARGUMENT_VERSION_MISMATCH");
      EXPECT_EQ(v_calls[1],
                "nvmlDeviceGetGpuInstanceProfileInfoV gpu=0 constant=0x00 version=2 -> "
                "NVML_SUCCESS");
      for (size_t i = 1; i < v_calls.size(); ++i) {
        EXPECT_THAT(v_calls[i], HasSubstr(" version=2 "));
      }
    } else {
      EXPECT_EQ(v_calls.size(), 1U);  // FUNCTION_NOT_FOUND once, then the v1 function
      EXPECT_FALSE(Calls("nvmlDeviceGetGpuInstanceProfileInfo").empty());
    }
    backend_.reset();
  }
}

// The H100's table as the driver gives it: IDs, slices, instances, SMs and memory back exactly,
// in NVML-constant order, with the constants it answers NOT_SUPPORTED left out.
TEST_F(NvmlScriptedTest, H100ProfileTableReadBackEqualsTheScenario) {
  Start(TwoGpus());
  absl::StatusOr<std::vector<GpuInstanceProfileInfo>> profiles =
      backend_->ListGpuInstanceProfiles(0);
  ASSERT_TRUE(profiles.ok()) << profiles.status();
  struct Expected {
    int constant, id;
    const char* name;
    int slices, instances, sms;
    std::int64_t memory_mib;
  };
  const Expected kExpected[] = {
      {0, 19, "1g.10gb", 1, 7, 16, 9984},  {1, 14, "2g.20gb", 2, 3, 32, 20096},
      {2, 9, "3g.40gb", 3, 2, 60, 40448},  {3, 5, "4g.40gb", 4, 1, 64, 40448},
      {4, 0, "7g.80gb", 7, 1, 132, 81152}, {7, 20, "1g.10gb+me", 1, 1, 16, 9984},
      {9, 15, "1g.20gb", 1, 4, 26, 20096},
  };
  ASSERT_EQ(profiles->size(), std::size(kExpected));
  for (size_t i = 0; i < std::size(kExpected); ++i) {
    SCOPED_TRACE(kExpected[i].name);
    const GpuInstanceProfileInfo& got = (*profiles)[i];
    EXPECT_EQ(got.nvml_const, kExpected[i].constant);
    EXPECT_EQ(got.id, kExpected[i].id);
    EXPECT_EQ(got.name, kExpected[i].name);
    EXPECT_EQ(got.slices, kExpected[i].slices);
    EXPECT_EQ(got.instance_count, kExpected[i].instances);
    EXPECT_EQ(got.sms, kExpected[i].sms);
    EXPECT_EQ(got.memory_mib, kExpected[i].memory_mib);
  }
  EXPECT_EQ((*profiles)[4].copy_engines, 8);  // 7g: 8 CE, 7 DEC, 7 JPEG, 1 OFA
  EXPECT_EQ((*profiles)[4].decoders, 7);
  EXPECT_EQ((*profiles)[4].ofas, 1);
}

// NVML documents NVML_GPU_INSTANCE_PROFILE_* up to 0x10 (R590) plus 0x11 (3_SLICE_GFX, v595)
// and NVML_COMPUTE_INSTANCE_PROFILE_* up to 1_SLICE_REV1 = 7 (NVML_COMPUTE_INSTANCE_PROFILE_COUNT
// 0x8). The backend asks the driver about those and nothing past them.
TEST_F(NvmlScriptedTest, AsksOnlyDocumentedProfileConstants) {
  json scenario = TwoGpus();
  scenario["gpus"][0]["gi_profile_constants"] = 0x12;  // a driver that knows 3_SLICE_GFX
  Start(scenario);
  ASSERT_TRUE(backend_->ListGpuInstanceProfiles(0).ok());
  absl::StatusOr<std::vector<GpuInstanceInfo>> gis = backend_->ListGpuInstances(0);
  ASSERT_TRUE(gis.ok()) << gis.status();
  for (const GpuInstanceInfo& gi : *gis) ASSERT_TRUE(backend_->ListComputeInstances(0, gi.id).ok());

  std::set<std::string> gi_constants;
  for (const char* function :
       {"nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlDeviceGetGpuInstanceProfileInfo"}) {
    for (const std::string& call : Calls(function)) {
      const size_t at = call.find("constant=");
      ASSERT_NE(at, std::string::npos) << call;
      gi_constants.insert(call.substr(at + 9, 4));
    }
  }
  std::set<std::string> documented;
  for (unsigned constant = 0; constant <= 0x11; ++constant) {
    char text[8];
    std::snprintf(text, sizeof text, "0x%02X", constant);
    documented.insert(text);
  }
  EXPECT_EQ(gi_constants, documented);

  const std::vector<std::string> ci_calls = Calls("nvmlGpuInstanceGetComputeInstanceProfileInfo");
  ASSERT_FALSE(ci_calls.empty());
  for (const std::string& call : ci_calls) {
    const size_t at = call.find("constant=0x");
    ASSERT_NE(at, std::string::npos) << call;
    EXPECT_LT(std::stoul(call.substr(at + 9, 4), nullptr, 16), 0x8U) << call;
    EXPECT_THAT(call, HasSubstr(" engine=0 "));  // NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
  }
}

// ----------------------------------------------------------------------------------- instances

TEST_F(NvmlScriptedTest, ExistingInstancesWithTheirProfilesPlacementsAndUuids) {
  Start(TwoGpus());
  absl::StatusOr<std::vector<GpuInstanceInfo>> gis = backend_->ListGpuInstances(0);
  ASSERT_TRUE(gis.ok()) << gis.status();
  ASSERT_EQ(gis->size(), 3U);
  const int kGis[3][4] = {{1, 9, 0, 4}, {5, 14, 4, 2}, {13, 19, 6, 1}};  // id, profile, start, size
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*gis)[i].gpu, 0);
    EXPECT_EQ((*gis)[i].id, kGis[i][0]);
    EXPECT_EQ((*gis)[i].profile_id, kGis[i][1]);
    EXPECT_EQ((*gis)[i].start, kGis[i][2]);
    EXPECT_EQ((*gis)[i].size, kGis[i][3]);
  }
  // nvmlDeviceGetGpuInstances takes the profile ID (info.id), never the NVML constant.
  EXPECT_THAT(Calls("nvmlDeviceGetGpuInstances"),
              ElementsAre("nvmlDeviceGetGpuInstances gpu=0 profile=19 -> NVML_SUCCESS",
                          "nvmlDeviceGetGpuInstances gpu=0 profile=14 -> NVML_SUCCESS",
                          "nvmlDeviceGetGpuInstances gpu=0 profile=9 -> NVML_SUCCESS",
                          "nvmlDeviceGetGpuInstances gpu=0 profile=5 -> NVML_SUCCESS",
                          "nvmlDeviceGetGpuInstances gpu=0 profile=0 -> NVML_SUCCESS",
                          "nvmlDeviceGetGpuInstances gpu=0 profile=20 -> NVML_SUCCESS",
                          "nvmlDeviceGetGpuInstances gpu=0 profile=15 -> NVML_SUCCESS"));

  absl::StatusOr<std::vector<ComputeInstanceInfo>> cis = backend_->ListComputeInstances(0, 1);
  ASSERT_TRUE(cis.ok()) << cis.status();
  ASSERT_EQ(cis->size(), 1U);
  EXPECT_EQ((*cis)[0].gi, 1);
  EXPECT_EQ((*cis)[0].id, 0);
  EXPECT_EQ((*cis)[0].profile_id, 2);
  EXPECT_EQ((*cis)[0].start, 0);
  EXPECT_EQ((*cis)[0].size, 3);
  EXPECT_EQ((*cis)[0].uuid, "MIG-0a1b2c3d-0000-4000-8000-000000000001");

  cis = backend_->ListComputeInstances(0, 5);
  ASSERT_TRUE(cis.ok()) << cis.status();
  ASSERT_EQ(cis->size(), 2U);  // by CI id
  EXPECT_EQ((*cis)[0].id, 0);
  EXPECT_EQ((*cis)[0].profile_id, 0);
  EXPECT_EQ((*cis)[0].start, 1);
  EXPECT_EQ((*cis)[0].size, 1);
  EXPECT_EQ((*cis)[0].uuid, "MIG-0a1b2c3d-0000-4000-8000-000000000003");
  EXPECT_EQ((*cis)[1].id, 1);
  EXPECT_EQ((*cis)[1].start, 0);
  EXPECT_EQ((*cis)[1].uuid, "MIG-0a1b2c3d-0000-4000-8000-000000000002");

  cis = backend_->ListComputeInstances(0, 13);
  ASSERT_TRUE(cis.ok()) << cis.status();
  EXPECT_TRUE(cis->empty());
  EXPECT_EQ(CodeOf(backend_->ListComputeInstances(0, 2)), kNvmlNotFound);  // no GI 2
}

// A scenario without instances in which the test creates some: the backend reads the profile's
// possible placements and asks for the placement of the driver's size at the start it wants.
TEST_F(NvmlScriptedTest, CreatesAtPlacementsOfTheDriversSize) {
  json scenario = TwoGpus();
  json& h100 = scenario["gpus"][0];
  h100["gpu_instances"] = json::array();
  h100["processes"] = json::array();
  h100["create_gpu_instance"] = json::parse(R"json([
    {"profile_id": 9, "start": 4, "id": 2, "placement": [4, 4]},
    {"profile_id": 15, "start": 2, "id": 4, "placement": [2, 2]},
    {"profile_id": 19, "id": 7, "placement": [0, 1]},
    {"profile_id": 0, "returns": "NVML_ERROR_INSUFFICIENT_RESOURCES"}
  ])json");
  h100["create_compute_instance"] = json::parse(R"json([
    {"gpu_instance": 2, "profile_id": 2, "start": 0, "id": 0, "placement": [0, 3],
     "mig_index": 1, "uuid": "MIG-0a1b2c3d-0000-4000-8000-000000000009"}
  ])json");
  Start(scenario);

  ClearLog();
  absl::StatusOr<GpuInstanceInfo> gi = backend_->CreateGpuInstance(0, 9, 4);
  ASSERT_TRUE(gi.ok()) << gi.status();
  EXPECT_EQ(gi->id, 2);
  EXPECT_EQ(gi->profile_id, 9);
  EXPECT_EQ(gi->start, 4);
  EXPECT_EQ(gi->size, 4);
  EXPECT_THAT(
      Log(),
      ElementsAre("nvmlDeviceGetHandleByIndex_v2 index=0 -> NVML_SUCCESS",
                  "nvmlDeviceGetGpuInstancePossiblePlacements_v2 gpu=0 profile=9 "
                  "placements=null -> NVML_SUCCESS",
                  "nvmlDeviceGetGpuInstancePossiblePlacements_v2 gpu=0 profile=9 -> NVML_SUCCESS",
                  "nvmlDeviceCreateGpuInstanceWithPlacement gpu=0 profile=9 start=4 size=4 -> "
                  "NVML_SUCCESS",
                  "nvmlGpuInstanceGetInfo gi=0/2 -> NVML_SUCCESS"));

  gi = backend_->CreateGpuInstance(0, 15, 2);  // 1g.20gb: two memory slices
  ASSERT_TRUE(gi.ok()) << gi.status();
  EXPECT_EQ(gi->id, 4);
  EXPECT_EQ(gi->size, 2);
  EXPECT_THAT(Calls("nvmlDeviceCreateGpuInstanceWithPlacement").back(),
              HasSubstr("profile=15 start=2 size=2 "));

  gi = backend_->CreateGpuInstance(0, 19, std::nullopt);  // where the driver chooses
  ASSERT_TRUE(gi.ok()) << gi.status();
  EXPECT_EQ(gi->id, 7);
  EXPECT_EQ(gi->start, 0);
  EXPECT_THAT(Calls("nvmlDeviceCreateGpuInstance"),
              ElementsAre("nvmlDeviceCreateGpuInstance gpu=0 profile=19 -> NVML_SUCCESS"));

  absl::StatusOr<GpuInstanceInfo> full = backend_->CreateGpuInstance(0, 0, std::nullopt);
  EXPECT_EQ(CodeOf(full), kNvmlInsufficientResources);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);

  ClearLog();
  absl::StatusOr<ComputeInstanceInfo> ci = backend_->CreateComputeInstance(0, 2, 2, 0);
  ASSERT_TRUE(ci.ok()) << ci.status();
  EXPECT_EQ(ci->gi, 2);
  EXPECT_EQ(ci->id, 0);
  EXPECT_EQ(ci->profile_id, 2);
  EXPECT_EQ(ci->start, 0);
  EXPECT_EQ(ci->size, 3);
  EXPECT_EQ(ci->uuid, "MIG-0a1b2c3d-0000-4000-8000-000000000009");
  EXPECT_THAT(Calls("nvmlGpuInstanceCreateComputeInstanceWithPlacement"),
              ElementsAre("nvmlGpuInstanceCreateComputeInstanceWithPlacement gi=0/2 profile=2 "
                          "start=0 size=3 -> NVML_SUCCESS"));

  // A start the profile does not allow: the driver refuses the placement.
  absl::StatusOr<GpuInstanceInfo> refused = backend_->CreateGpuInstance(0, 9, 2);
  EXPECT_EQ(CodeOf(refused), kNvmlInvalidArgument);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("nvmlDeviceCreateGpuInstanceWithPlacement"));
}

TEST_F(NvmlScriptedTest, DestroysCisByIdThenGisAndHonoursInUse) {
  Start(TwoGpus());
  // GI 1 still has CI 0: NVML answers IN_USE.
  absl::Status busy = backend_->DestroyGpuInstance(0, 1);
  EXPECT_TRUE(HasNvmlCode(busy, kNvmlInUse)) << busy;
  EXPECT_EQ(busy.code(), absl::StatusCode::kFailedPrecondition);
  // CI 0 of GI 5 runs pids 5151 and 6161.
  EXPECT_TRUE(HasNvmlCode(backend_->DestroyComputeInstance(0, 5, 0), kNvmlInUse));
  // CI 1 of GI 5 is idle.
  ClearLog();
  ASSERT_TRUE(backend_->DestroyComputeInstance(0, 5, 1).ok());
  EXPECT_THAT(Log(), ElementsAre("nvmlDeviceGetHandleByIndex_v2 index=0 -> NVML_SUCCESS",
                                 "nvmlDeviceGetGpuInstanceById gpu=0 id=5 -> NVML_SUCCESS",
                                 "nvmlGpuInstanceGetComputeInstanceById gi=0/5 id=1 -> "
                                 "NVML_SUCCESS",
                                 "nvmlComputeInstanceDestroy ci=0/5/1 -> NVML_SUCCESS"));
  ASSERT_TRUE(backend_->DestroyGpuInstance(0, 13).ok());  // no CI
  absl::StatusOr<std::vector<GpuInstanceInfo>> gis = backend_->ListGpuInstances(0);
  ASSERT_TRUE(gis.ok()) << gis.status();
  ASSERT_EQ(gis->size(), 2U);
  EXPECT_EQ((*gis)[1].id, 5);
}

// ------------------------------------------------------------------------ memory and processes

TEST_F(NvmlScriptedTest, MemoryOfTheGpuMigDevicesAndAGiWithoutCi) {
  Start(TwoGpus());
  absl::StatusOr<MemoryInfo> memory = backend_->GetMemory(0, std::nullopt, std::nullopt);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->total_mib, 81559);
  EXPECT_EQ(memory->used_mib, 3000);
  EXPECT_EQ(memory->free_mib, 77000);  // NVML's free, not total - used

  memory = backend_->GetMemory(0, 5, 0);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->total_mib, 20096);
  EXPECT_EQ(memory->used_mib, 512);
  EXPECT_EQ(memory->free_mib, 19584);

  memory = backend_->GetMemory(0, 1, std::nullopt);  // the GI's MIG device
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->total_mib, 40448);
  EXPECT_EQ(memory->used_mib, 1024);

  memory = backend_->GetMemory(0, 13, std::nullopt);  // no CI yet: the profile's memory, all free
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->total_mib, 9984);
  EXPECT_EQ(memory->free_mib, 9984);
  EXPECT_EQ(CodeOf(backend_->GetMemory(0, 13, 0)), kNvmlNotFound);

  memory = backend_->GetMemory(1, std::nullopt, std::nullopt);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->total_mib, 46068);
  EXPECT_EQ(memory->used_mib, 2048);
  EXPECT_EQ(memory->free_mib, 44020);
}

TEST_F(NvmlScriptedTest, ProcessesWithTheirInstancesNamesAndMemory) {
  Start(TwoGpus());
  absl::StatusOr<std::vector<ProcessInfo>> processes = backend_->ListProcesses(0);
  ASSERT_TRUE(processes.ok()) << processes.status();
  ASSERT_EQ(processes->size(), 3U);
  EXPECT_EQ((*processes)[0].pid, 4242U);
  EXPECT_EQ((*processes)[0].name, "python3");
  EXPECT_EQ((*processes)[0].used_memory_mib, 1024);
  EXPECT_EQ((*processes)[0].gi, 1);
  EXPECT_EQ((*processes)[0].ci, 0);
  EXPECT_EQ((*processes)[1].pid, 5151U);
  EXPECT_EQ((*processes)[1].name, "");            // exited: NOT_FOUND
  EXPECT_EQ((*processes)[1].used_memory_mib, 0);  // NVML_VALUE_NOT_AVAILABLE
  EXPECT_EQ((*processes)[1].gi, 5);
  EXPECT_EQ((*processes)[1].ci, 0);
  EXPECT_EQ((*processes)[2].pid, 6161U);
  EXPECT_EQ((*processes)[2].name, "");  // NO_PERMISSION
  EXPECT_EQ((*processes)[2].used_memory_mib, 512);
  // The documented size query: no buffer first, INSUFFICIENT_SIZE with the count, then the list.
  EXPECT_THAT(
      Calls("nvmlDeviceGetComputeRunningProcesses_v3"),
      ElementsAre("nvmlDeviceGetComputeRunningProcesses_v3 gpu=0 count=0 infos=null -> "
                  "NVML_ERROR_INSUFFICIENT_SIZE",
                  "nvmlDeviceGetComputeRunningProcesses_v3 gpu=0 count=11 -> NVML_SUCCESS"));

  processes = backend_->ListProcesses(1);
  ASSERT_TRUE(processes.ok()) << processes.status();
  ASSERT_EQ(processes->size(), 1U);
  EXPECT_EQ((*processes)[0].pid, 777U);
  EXPECT_EQ((*processes)[0].name, "vllm");
  EXPECT_EQ((*processes)[0].used_memory_mib, 2048);
  EXPECT_EQ((*processes)[0].gi, -1);  // 0xFFFFFFFF: MIG off
  EXPECT_EQ((*processes)[0].ci, -1);
}

// ------------------------------------------------------------------------------------- errors

// A driver's refusal becomes the backend's error: the NVML code carried, the absl code that goes
// with it, and the failed function named.
TEST_F(NvmlScriptedTest, DriverErrorsMapToBackendErrors) {
  struct Case {
    const char* name;
    int gpu;  // -1: the library-wide "returns"
    const char* function;
    const char* answer;
    std::function<absl::Status(NvmlBackend&)> run;
    int code;
    absl::StatusCode absl_code;
  };
  const Case kCases[] = {
      {"MIG mode", 0, "nvmlDeviceGetMigMode", "NVML_ERROR_NO_PERMISSION",
       [](NvmlBackend& b) { return b.ListGpus().status(); }, kNvmlNoPermission,
       absl::StatusCode::kPermissionDenied},
      {"GPU count", -1, "nvmlDeviceGetCount_v2", "NVML_ERROR_UNKNOWN",
       [](NvmlBackend& b) { return b.ListGpus().status(); }, kNvmlUnknown,
       absl::StatusCode::kInternal},
      {"handle", 0, "nvmlDeviceGetHandleByIndex_v2", "NVML_ERROR_GPU_NOT_FOUND",
       [](NvmlBackend& b) { return b.GetMemory(0, std::nullopt, std::nullopt).status(); },
       kNvmlGpuNotFound, absl::StatusCode::kNotFound},
      {"profiles", 0, "nvmlDeviceGetGpuInstanceProfileInfoV", "NVML_ERROR_NO_PERMISSION",
       [](NvmlBackend& b) { return b.ListGpuInstanceProfiles(0).status(); }, kNvmlNoPermission,
       absl::StatusCode::kPermissionDenied},
      {"instances", 0, "nvmlDeviceGetGpuInstances", "NVML_ERROR_NOT_SUPPORTED",
       [](NvmlBackend& b) { return b.ListGpuInstances(0).status(); }, kNvmlNotSupported,
       absl::StatusCode::kUnimplemented},
      {"CI profiles", 0, "nvmlGpuInstanceGetComputeInstanceProfileInfo", "NVML_ERROR_UNKNOWN",
       [](NvmlBackend& b) { return b.ListComputeInstances(0, 1).status(); }, kNvmlUnknown,
       absl::StatusCode::kInternal},
      {"processes", 0, "nvmlDeviceGetComputeRunningProcesses_v3", "NVML_ERROR_GPU_IS_LOST",
       [](NvmlBackend& b) { return b.ListProcesses(0).status(); }, kNvmlGpuIsLost,
       absl::StatusCode::kUnavailable},
      {"process name", -1, "nvmlSystemGetProcessName", "NVML_ERROR_UNKNOWN",
       [](NvmlBackend& b) { return b.ListProcesses(1).status(); }, kNvmlUnknown,
       absl::StatusCode::kInternal},
      {"destroy", 0, "nvmlGpuInstanceDestroy", "NVML_ERROR_IN_USE",
       [](NvmlBackend& b) { return b.DestroyGpuInstance(0, 13); }, kNvmlInUse,
       absl::StatusCode::kFailedPrecondition},
      {"set MIG mode", 0, "nvmlDeviceSetMigMode", "NVML_ERROR_NO_PERMISSION",
       [](NvmlBackend& b) { return b.SetMigMode(0, MigMode::kDisabled).status(); },
       kNvmlNoPermission, absl::StatusCode::kPermissionDenied},
      {"MIG devices", 0, "nvmlDeviceGetMaxMigDeviceCount", "NVML_ERROR_INVALID_STATE",
       [](NvmlBackend& b) { return b.ListComputeInstances(0, 1).status(); }, kNvmlInvalidState,
       absl::StatusCode::kFailedPrecondition},
  };
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    json scenario = TwoGpus();
    if (c.gpu < 0) {
      scenario["returns"] = {{c.function, c.answer}};
    } else {
      scenario["gpus"][static_cast<size_t>(c.gpu)]["returns"] = {{c.function, c.answer}};
    }
    Start(scenario);
    const absl::Status status = c.run(*backend_);
    EXPECT_EQ(NvmlCodeOf(status), c.code) << status;
    EXPECT_EQ(status.code(), c.absl_code) << status;
    EXPECT_THAT(status.message(), HasSubstr(c.function));
    EXPECT_THAT(status.message(), HasSubstr(c.answer));
    backend_.reset();
  }
}

TEST_F(NvmlScriptedTest, GpuWithoutMigHasNoProfiles) {
  Start(TwoGpus());
  absl::StatusOr<std::vector<GpuInstanceProfileInfo>> profiles =
      backend_->ListGpuInstanceProfiles(1);
  EXPECT_EQ(CodeOf(profiles), kNvmlNotSupported);
  EXPECT_EQ(profiles.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(CodeOf(backend_->ListGpuInstances(1)), kNvmlNotSupported);
  EXPECT_EQ(CodeOf(backend_->SetMigMode(1, MigMode::kEnabled)), kNvmlNotSupported);
}

TEST_F(NvmlScriptedTest, LostGpuStaysListedAndFailsEveryCall) {
  json scenario = TwoGpus();
  scenario["gpus"][1]["returns"] = {{"*", "NVML_ERROR_GPU_IS_LOST"}};
  scenario["gpus"][0]["xid_events"] = json::array({{{"xid", 79}}});
  scenario["gpus"][1]["xid_events"] = json::array({{{"xid", 48}}});
  Start(scenario);
  absl::StatusOr<std::vector<GpuInfo>> gpus = backend_->ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 2U);
  EXPECT_EQ((*gpus)[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ((*gpus)[1].index, 1);
  EXPECT_EQ((*gpus)[1].name, "");  // nvmlDeviceGetName already failed
  const absl::Status lost = backend_->ListProcesses(1).status();
  EXPECT_TRUE(HasNvmlCode(lost, kNvmlGpuIsLost)) << lost;
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CodeOf(backend_->GetTelemetry(1)), kNvmlGpuIsLost);
  // Xid events still come from the other GPU.
  absl::StatusOr<std::vector<XidEvent>> events = backend_->TakeXidEvents();
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1U);
  EXPECT_EQ((*events)[0].gpu, 0);
  EXPECT_EQ((*events)[0].xid, 79U);
}

TEST_F(NvmlScriptedTest, InitFailureIsTheLoadError) {
  json scenario = TwoGpus();
  scenario["returns"] = {{"nvmlInit_v2", "NVML_ERROR_DRIVER_NOT_LOADED"}};
  absl::StatusOr<std::unique_ptr<NvmlBackend>> backend = Load(scenario);
  ASSERT_FALSE(backend.ok());
  EXPECT_TRUE(HasNvmlCode(backend.status(), kNvmlDriverNotLoaded)) << backend.status();
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(backend.status().message(), HasSubstr("nvmlInit_v2"));
  EXPECT_THAT(Log(), ElementsAre("nvmlInit_v2 -> NVML_ERROR_DRIVER_NOT_LOADED"));
}

TEST_F(NvmlScriptedTest, MigModeChangeStaysPendingWhileInUse) {
  json scenario = TwoGpus();
  scenario["gpus"][0]["mig"] = {{"current", "disabled"}, {"pending", "disabled"}};
  scenario["gpus"][0]["gpu_instances"] = json::array();
  scenario["gpus"][0]["set_mig_mode"] = {{"activation", "NVML_ERROR_IN_USE"}};
  Start(scenario);
  absl::StatusOr<MigModeChange> change = backend_->SetMigMode(0, MigMode::kEnabled);
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_FALSE(change->applied);
  EXPECT_EQ(change->activation_code, kNvmlInUse);
  EXPECT_THAT(Calls("nvmlDeviceSetMigMode"),
              ElementsAre("nvmlDeviceSetMigMode gpu=0 mode=1 -> NVML_SUCCESS"));
  absl::StatusOr<std::vector<GpuInfo>> gpus = backend_->ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_EQ((*gpus)[0].mig_current, MigMode::kDisabled);
  EXPECT_EQ((*gpus)[0].mig_pending, MigMode::kEnabled);
}

// ------------------------------------------------------------------------------ health figures

TEST_F(NvmlScriptedTest, TelemetryInTheDocumentedUnits) {
  json scenario = TwoGpus();
  scenario["gpus"][1]["telemetry"] = json::parse(R"json({
    "temperature_c": 41, "power_mw": 123456, "power_limit_mw": 350000,
    "clocks_mhz": {"graphics": 2100, "sm": 2520, "mem": 9001, "video": 1965},
    "utilization": {"gpu": 57, "memory": 23}, "clocks_event_reasons": 4,
    "ecc": {"corrected": {"volatile": 3, "aggregate": 30}, "uncorrected": {"volatile": 1,
            "aggregate": 10}}
  })json");
  // A driver from before the rename to ...ClocksEventReasons.
  scenario["gpus"][1]["returns"] = {
      {"nvmlDeviceGetCurrentClocksEventReasons", "NVML_ERROR_FUNCTION_NOT_FOUND"}};
  Start(scenario);
  absl::StatusOr<GpuTelemetry> telemetry = backend_->GetTelemetry(1);
  ASSERT_TRUE(telemetry.ok()) << telemetry.status();
  EXPECT_EQ(telemetry->temperature_c, 41);
  EXPECT_DOUBLE_EQ(telemetry->power_w.value_or(0), 123.456);
  EXPECT_DOUBLE_EQ(telemetry->power_limit_w.value_or(0), 350.0);
  EXPECT_EQ(telemetry->sm_clock_mhz, 2520);      // NVML_CLOCK_SM = 1
  EXPECT_EQ(telemetry->memory_clock_mhz, 9001);  // NVML_CLOCK_MEM = 2
  EXPECT_EQ(telemetry->utilization_pct, 57);
  EXPECT_EQ(telemetry->memory_utilization_pct, 23);
  EXPECT_EQ(telemetry->throttle_reasons, 4U);
  EXPECT_EQ(telemetry->ecc_corrected, 3U);  // volatile counts
  EXPECT_EQ(telemetry->ecc_uncorrected, 1U);
  EXPECT_FALSE(telemetry->remapped_rows_correctable.has_value());  // NOT_SUPPORTED
  EXPECT_THAT(Calls("nvmlDeviceGetTemperature"),
              ElementsAre("nvmlDeviceGetTemperature gpu=1 sensor=0 -> NVML_SUCCESS"));
  EXPECT_THAT(Calls("nvmlDeviceGetCurrentClocksThrottleReasons"),
              ElementsAre("nvmlDeviceGetCurrentClocksThrottleReasons gpu=1 -> NVML_SUCCESS"));

  telemetry = backend_->GetTelemetry(0);  // the scenario gives the H100 no figures
  ASSERT_TRUE(telemetry.ok()) << telemetry.status();
  EXPECT_FALSE(telemetry->temperature_c.has_value());
  EXPECT_FALSE(telemetry->power_w.has_value());
}

TEST_F(NvmlScriptedTest, GpmActivityAndXidEvents) {
  json scenario = TwoGpus();
  scenario["gpus"][0]["gpm"] = json::parse(R"json({
    "metrics": {"2": 41.5, "3": 30.25, "10": 12.0},
    "gi_metrics": {"1": {"2": 80.0, "3": 60.5, "10": 33.0}}
  })json");
  scenario["gpus"][0]["xid_events"] = json::parse(R"json([
    {"xid": 79}, {"xid": 94, "gi": 5, "ci": 0}
  ])json");
  Start(scenario);
  EXPECT_EQ(backend_->SampleActivity(0, std::nullopt).status().code(),
            absl::StatusCode::kUnavailable);
  absl::StatusOr<Activity> activity = backend_->SampleActivity(0, std::nullopt);
  ASSERT_TRUE(activity.ok()) << activity.status();
  EXPECT_DOUBLE_EQ(activity->sm_active_pct, 41.5);       // NVML_GPM_METRIC_SM_UTIL = 2
  EXPECT_DOUBLE_EQ(activity->sm_occupancy_pct, 30.25);   // NVML_GPM_METRIC_SM_OCCUPANCY = 3
  EXPECT_DOUBLE_EQ(activity->dram_bandwidth_pct, 12.0);  // NVML_GPM_METRIC_DRAM_BW_UTIL = 10
  EXPECT_EQ(backend_->SampleActivity(0, 1).status().code(), absl::StatusCode::kUnavailable);
  activity = backend_->SampleActivity(0, 1);
  ASSERT_TRUE(activity.ok()) << activity.status();
  EXPECT_DOUBLE_EQ(activity->sm_active_pct, 80.0);
  EXPECT_DOUBLE_EQ(activity->sm_occupancy_pct, 60.5);
  EXPECT_DOUBLE_EQ(activity->dram_bandwidth_pct, 33.0);
  EXPECT_THAT(Calls("nvmlGpmMetricsGet"),
              ElementsAre("nvmlGpmMetricsGet version=1 metrics=3 -> NVML_SUCCESS",
                          "nvmlGpmMetricsGet version=1 metrics=3 -> NVML_SUCCESS"));
  EXPECT_EQ(CodeOf(backend_->SampleActivity(1, std::nullopt)),
            kNvmlNotSupported);  // the L40S: no GPM here

  absl::StatusOr<std::vector<XidEvent>> events = backend_->TakeXidEvents();
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 2U);
  EXPECT_EQ((*events)[0].gpu, 0);
  EXPECT_EQ((*events)[0].xid, 79U);
  EXPECT_FALSE((*events)[0].gi.has_value());
  EXPECT_EQ((*events)[1].xid, 94U);
  EXPECT_EQ((*events)[1].gi, 5);
  EXPECT_EQ((*events)[1].ci, 0);
  EXPECT_THAT(Calls("nvmlDeviceRegisterEvents"),
              ElementsAre("nvmlDeviceRegisterEvents gpu=0 types=0x8 -> NVML_SUCCESS",
                          "nvmlDeviceRegisterEvents gpu=1 types=0x8 -> NVML_ERROR_NOT_SUPPORTED"));
  events = backend_->TakeXidEvents();
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_TRUE(events->empty());
}

// ------------------------------------------------------------------------------------- doctor

bool Has(const std::vector<agent::Check>& checks, agent::CheckLevel level,
         const std::string& subject, const std::string& text) {
  for (const agent::Check& check : checks) {
    if (check.level == level && check.subject == subject &&
        check.what.find(text) != std::string::npos) {
      return true;
    }
  }
  return false;
}

std::string Describe(const std::vector<agent::Check>& checks) {
  std::string out;
  for (const agent::Check& check : checks) {
    out += agent::ToString(check.level) + " " + check.subject + ": " + check.what + "\n";
  }
  return out;
}

std::vector<agent::Check> Doctor(NvmlBackend& backend, const std::string& dir) {
  agent::DoctorOptions options;
  options.proc_root = dir;  // no Kubernetes agents
  options.cuda_library = "libcuda.so.1";
  return agent::RunDoctor(backend, Catalog(), options);
}

// The driver's H100 table is the MIG user guide's, which is what the catalog holds: doctor says so.
TEST_F(NvmlScriptedTest, DoctorPassesWhenTheDriverTableMatchesTheCatalog) {
  Start(TwoGpus());
  const std::vector<agent::Check> checks = Doctor(*backend_, dir_.path());
  SCOPED_TRACE(Describe(checks));
  EXPECT_TRUE(Has(checks, agent::CheckLevel::kPass, "GPU 0",
                  "the driver's 7 GPU instance profiles match the catalog"));
  EXPECT_TRUE(Has(checks, agent::CheckLevel::kPass, "GPU 0", "supports MIG on H100-80GB"));
  EXPECT_TRUE(Has(checks, agent::CheckLevel::kInfo, "GPU 0", "3 GPU process(es) run"));
  EXPECT_TRUE(Has(checks, agent::CheckLevel::kWarn, "GPU 0",
                  "1 GPU instance(s) without a compute instance"));  // GI 13
  EXPECT_TRUE(Has(checks, agent::CheckLevel::kInfo, "GPU 1", "has no MIG"));
  for (const agent::Check& check : checks) {
    EXPECT_NE(check.level, agent::CheckLevel::kFail) << check.what;
    EXPECT_EQ(check.what.find("does not"), std::string::npos) << check.what;
    EXPECT_EQ(check.what.find("driver gives"), std::string::npos) << check.what;
    EXPECT_EQ(check.what.find("driver names"), std::string::npos) << check.what;
  }
}

// The same H100 with a driver whose table differs from the catalog in every way doctor knows:
// 3g.40gb at an older driver's known alternate size, 4g.40gb at a size the catalog has never
// seen, 7g renamed, 1g.20gb missing, and a profile ID the catalog does not know.
TEST_F(NvmlScriptedTest, DoctorReportsEveryDifferenceFromTheCatalog) {
  json scenario = TwoGpus();
  scenario["gpus"][0]["gi_profiles"] = json::parse(R"json([
    {"constant": 0, "id": 19, "name": "MIG 1g.10gb", "slices": 1, "instances": 7, "sms": 16,
     "copy_engines": 1, "decoders": 1, "encoders": 0, "jpegs": 1, "ofas": 0, "memory_mib": 9984},
    {"constant": 1, "id": 14, "name": "MIG 2g.20gb", "slices": 2, "instances": 3, "sms": 32,
     "copy_engines": 2, "decoders": 2, "encoders": 0, "jpegs": 2, "ofas": 0, "memory_mib": 20096},
    {"constant": 2, "id": 9, "name": "MIG 3g.40gb", "slices": 3, "instances": 2, "sms": 60,
     "copy_engines": 3, "decoders": 3, "encoders": 0, "jpegs": 3, "ofas": 0, "memory_mib": 40192},
    {"constant": 3, "id": 5, "name": "MIG 4g.40gb", "slices": 4, "instances": 1, "sms": 64,
     "copy_engines": 4, "decoders": 4, "encoders": 0, "jpegs": 4, "ofas": 0, "memory_mib": 40000},
    {"constant": 4, "id": 0, "name": "MIG 7g.79gb", "slices": 7, "instances": 1, "sms": 132,
     "copy_engines": 8, "decoders": 7, "encoders": 0, "jpegs": 7, "ofas": 1, "memory_mib": 81152},
    {"constant": 6, "id": 99, "name": "MIG 6g.70gb", "slices": 6, "instances": 1, "sms": 112,
     "copy_engines": 6, "decoders": 6, "encoders": 0, "jpegs": 6, "ofas": 0, "memory_mib": 70000},
    {"constant": 7, "id": 20, "name": "MIG 1g.10gb+me", "slices": 1, "instances": 1, "sms": 16,
     "copy_engines": 1, "decoders": 1, "encoders": 0, "jpegs": 1, "ofas": 1, "memory_mib": 9984}
  ])json");
  Start(scenario);
  const std::vector<agent::Check> checks = Doctor(*backend_, dir_.path());
  SCOPED_TRACE(Describe(checks));
  EXPECT_TRUE(Has(checks, agent::CheckLevel::kInfo, "GPU 0",
                  "driver gives profile ID 9 (3g.40gb) 40192 MiB (catalog: 40448 MiB; a known "
                  "alternate"));
  EXPECT_TRUE(Has(checks, agent::CheckLevel::kInfo, "GPU 0",
                  "driver gives profile ID 5 (4g.40gb) 40000 MiB (catalog: 40448 MiB)"));
  EXPECT_FALSE(Has(checks, agent::CheckLevel::kInfo, "GPU 0",
                   "40000 MiB (catalog: 40448 MiB; a known alternate"));
  EXPECT_TRUE(Has(checks, agent::CheckLevel::kInfo, "GPU 0",
                  "driver names profile ID 0 '7g.79gb' (catalog: '7g.80gb'"));
  EXPECT_TRUE(Has(checks, agent::CheckLevel::kWarn, "GPU 0",
                  "driver does not offer 1g.20gb (profile ID 15) that the catalog lists for "
                  "H100-80GB"));
  EXPECT_TRUE(Has(checks, agent::CheckLevel::kWarn, "GPU 0",
                  "driver reports profile ID 99 (6g.70gb) that the catalog for H100-80GB does "
                  "not know"));
  EXPECT_FALSE(Has(checks, agent::CheckLevel::kPass, "GPU 0", "match the catalog"));
  // Only those: the profiles that agree are not reported.
  size_t differences = 0;
  for (const agent::Check& check : checks) {
    if (check.subject == "GPU 0" &&
        (check.what.rfind("driver gives", 0) == 0 || check.what.rfind("driver names", 0) == 0 ||
         check.what.rfind("driver does not offer", 0) == 0 ||
         check.what.rfind("driver reports", 0) == 0)) {
      ++differences;
    }
  }
  EXPECT_EQ(differences, 5U);
}

// An A100 40GB on an R470 driver lacks 1g.10gb (ID 15), which the catalog says needs R525: doctor
// explains it instead of warning; on an R535 driver the same gap is a warning.
TEST_F(NvmlScriptedTest, DoctorExcusesAProfileTheDriverIsTooOldFor) {
  const json a100 = json::parse(R"json({
    "name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-a1000000-0000-4000-8000-00000000a100",
    "pci": {"bus_id": "00000000:07:00.0", "device_id": "0x20B0"},
    "memory": {"total_mib": 40960, "used_mib": 0},
    "mig": {"current": "enabled", "pending": "enabled"},
    "max_mig_devices": 7,
    "gi_profiles": [
      {"constant": 0, "id": 19, "name": "MIG 1g.5gb", "slices": 1, "instances": 7, "sms": 14,
       "copy_engines": 1, "decoders": 0, "encoders": 0, "jpegs": 0, "ofas": 0,
       "memory_mib": 4864},
      {"constant": 1, "id": 14, "name": "MIG 2g.10gb", "slices": 2, "instances": 3, "sms": 28,
       "copy_engines": 2, "decoders": 1, "encoders": 0, "jpegs": 0, "ofas": 0,
       "memory_mib": 9856},
      {"constant": 2, "id": 9, "name": "MIG 3g.20gb", "slices": 3, "instances": 2, "sms": 42,
       "copy_engines": 3, "decoders": 2, "encoders": 0, "jpegs": 0, "ofas": 0,
       "memory_mib": 19968},
      {"constant": 3, "id": 5, "name": "MIG 4g.20gb", "slices": 4, "instances": 1, "sms": 56,
       "copy_engines": 4, "decoders": 2, "encoders": 0, "jpegs": 0, "ofas": 0,
       "memory_mib": 19968},
      {"constant": 4, "id": 0, "name": "MIG 7g.40gb", "slices": 7, "instances": 1, "sms": 98,
       "copy_engines": 7, "decoders": 5, "encoders": 0, "jpegs": 1, "ofas": 1,
       "memory_mib": 40192},
      {"constant": 7, "id": 20, "name": "MIG 1g.5gb+me", "slices": 1, "instances": 1, "sms": 14,
       "copy_engines": 1, "decoders": 1, "encoders": 0, "jpegs": 1, "ofas": 1,
       "memory_mib": 4864}
    ]
  })json");
  for (const char* driver : {"470.82.01", "535.161.08"}) {
    SCOPED_TRACE(driver);
    const json scenario = {{"driver_version", driver}, {"gpus", json::array({a100})}};
    Start(scenario);
    const std::vector<agent::Check> checks = Doctor(*backend_, dir_.path());
    SCOPED_TRACE(Describe(checks));
    const std::string gap = "driver does not offer 1g.10gb (profile ID 15)";
    if (std::string(driver) == "470.82.01") {
      EXPECT_TRUE(Has(checks, agent::CheckLevel::kInfo, "GPU 0",
                      gap + " that the catalog lists for A100-40GB: it needs driver R525"));
      EXPECT_FALSE(Has(checks, agent::CheckLevel::kWarn, "GPU 0", gap));
    } else {
      EXPECT_TRUE(Has(checks, agent::CheckLevel::kWarn, "GPU 0", gap));
    }
    EXPECT_FALSE(Has(checks, agent::CheckLevel::kPass, "GPU 0", "match the catalog"));
    backend_.reset();
  }
}

}  // namespace
}  // namespace gpuslice::device
