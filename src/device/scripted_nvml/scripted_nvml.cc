// The scripted NVML library: a libnvidia-ml.so.1 whose every answer is written out by hand, per
// test, in a scenario file. It is the independent oracle for NvmlBackend (issue 23, part 2): it
// links neither the simulator nor the catalog, and it does not include src/device/nvml_api.h. The
// structs, constants and function signatures below were written from NVIDIA's NVML API reference
// (docs.nvidia.com/deploy/nvml-api, R590 and the change log up to v615), so a layout, constant or
// call-order mistake in nvml_api.h or nvml_backend.cc shows up as a wrong value or a refused call
// instead of agreeing with itself.
//
// $GPUSLICE_SCRIPTED_NVML names the scenario (JSON), read by every nvmlInit_v2 that starts the
// library (reference counted, like NVML). Each call is appended to a log, one line per call:
// "<function> <key args> -> <NVML code name>", e.g.
//   nvmlDeviceGetGpuInstanceProfileInfoV gpu=0 constant=0x07 version=3 -> NVML_SUCCESS
// (handles are written gpu=G, mig=G/INDEX, gi=G/GI, ci=G/GI/CI). The log is
// $GPUSLICE_SCRIPTED_NVML_LOG, else the scenario's "log" (relative to the scenario's directory).
//
// Scenario (unknown keys are errors, so a typo cannot pass silently):
//   { "log": "calls.log", "driver_version": "580.65.06",
//     "returns": {FUNCTION: ANSWER},             // library-wide answers, see below
//     "process_names": {"4242": "python3", "77": {"returns": "NVML_ERROR_NO_PERMISSION"}},
//     "gpus": [GPU, ...] }
//   GPU = { "name", "uuid",
//     "pci": {"bus_id", "bus_id_legacy", "domain", "bus", "device", "device_id": "0x2330",
//             "subsystem_id"},                    // vendor 0x10DE
//     "memory": {"total_mib", "used_mib", "free_mib"?},   // free defaults to total - used
//     "mig": {"current": "enabled"|"disabled", "pending": ...},   // absent: no MIG (NOT_SUPPORTED)
//     "returns": {FUNCTION or "*": ANSWER},       // calls on this GPU, its MIG devices, GIs, CIs
//     "gi_profile_constants": 17,                 // NVML_GPU_INSTANCE_PROFILE_COUNT of this driver
//     "profile_info_versions": [2, 3],            // struct versions ...ProfileInfoV accepts
//     "gi_profiles": [{"constant": 0, "id": 19, "name": "MIG 1g.10gb", "slices": 1,
//        "instances": 7, "sms": 16, "copy_engines": 1, "decoders": 1, "encoders": 0,
//        "jpegs": 1, "ofas": 0, "memory_mib": 9984, "p2p": false, "gfx": false,
//        "placements": [[0, 1], ...]}            // or {"constant": 5, "returns": CODE}
//     "ci_profile_constants": 8,                  // NVML_COMPUTE_INSTANCE_PROFILE_COUNT
//     "ci_profiles": {"<GI profile id>": [{"constant": 0, "id": 0, "slices": 1, "instances": 3,
//        "sms": 16, "copy_engines": 1, ..., "placements": [[0, 1], ...]}]},
//     "gpu_instances": [{"id": 1, "profile_id": 9, "placement": [0, 4],
//        "compute_instances": [{"id": 0, "profile_id": 2, "placement": [0, 3], "mig_index": 0,
//          "uuid": "MIG-…", "memory": {"total_mib", "used_mib"}}]}],
//     "max_mig_devices": 7,
//     "processes": [{"pid": 4242, "used_mib": 1024 | "n/a", "gi": 1, "ci": 0}],
//     "create_gpu_instance": [{"profile_id": 9, "start"?: 4, "returns"?: CODE, "id": 2,
//        "placement": [4, 4]}],                   // scripted results, each used once
//     "create_compute_instance": [{"gpu_instance": 2, "profile_id": 2, "start"?, "returns"?,
//        "id": 0, "placement": [0, 3], "mig_index": 1, "uuid": "MIG-…"}],
//     "set_mig_mode": {"activation": CODE},       // activation status (SUCCESS: applied now)
//     "telemetry": {"temperature_c", "power_mw", "power_limit_mw",
//        "clocks_mhz": {"graphics", "sm", "mem", "video"}, "utilization": {"gpu", "memory"},
//        "clocks_event_reasons", "ecc": {"corrected": {"volatile", "aggregate"}, "uncorrected": …},
//        "remapped_rows": {"correctable", "uncorrectable", "pending", "failure"}},  // absent: N/S
//     "gpm": {"metrics": {"2": 41.5, ...}, "gi_metrics": {"<GI id>": {...}}},  // absent: no GPM
//     "xid_events": [{"xid": 79, "gi"?: 1, "ci"?: 0}] }   // absent: events NOT_SUPPORTED
//   ANSWER = a code name ("NVML_ERROR_IN_USE") or number: every such call answers it; or a list
//   of them, one per call in order (NVML_SUCCESS = answer normally), then normal answers.
//   A function's own entry wins over "*"; "*" never applies to nvmlDeviceGetHandleByIndex_v2.
//
// What is not in the scenario is refused the way NVML documents it: NOT_SUPPORTED for a feature
// the GPU lacks (no MIG, MIG disabled, a profile constant it does not have), INVALID_ARGUMENT for
// unknown handles, ids, placements and constants past the driver's count, NOT_FOUND for an id
// with no instance, INSUFFICIENT_SIZE for short buffers. A create call that the scenario did not
// script answers NVML_ERROR_UNKNOWN and says so on stderr.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#define SCRIPTED_NVML_EXPORT extern "C" __attribute__((visibility("default")))

// ------------------------------------------------------------------ NVML's C API, from its docs
// Written from the NVML API reference (struct pages list members in declaration order; LP64).
namespace scripted_nvml_c {

using nvmlReturn_t = int;  // enum nvmlReturn_t

struct nvmlDevice_st;
struct nvmlGpuInstance_st;
struct nvmlComputeInstance_st;
struct nvmlEventSet_st;
struct nvmlGpmSample_st;
using nvmlDevice_t = nvmlDevice_st*;
using nvmlGpuInstance_t = nvmlGpuInstance_st*;
using nvmlComputeInstance_t = nvmlComputeInstance_st*;
using nvmlEventSet_t = nvmlEventSet_st*;
using nvmlGpmSample_t = nvmlGpmSample_st*;

constexpr unsigned NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
constexpr unsigned NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;
constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_DEVICE_MIG_DISABLE = 0x0;
constexpr unsigned NVML_DEVICE_MIG_ENABLE = 0x1;
constexpr unsigned NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT = 0x1;
constexpr unsigned NVML_GPU_INSTANCE_PROFILE_CAPS_P2P = 0x1;
constexpr unsigned NVML_GPU_INSTANCE_PROFILE_CAPS_GFX = 0x2;
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ULL;
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x0000000000000008ULL;
constexpr unsigned NVML_GPM_METRICS_GET_VERSION = 1;
constexpr unsigned NVML_GPM_SUPPORT_VERSION = 1;
// nvmlProcessInfo_t.gpuInstanceId / computeInstanceId and nvmlEventData_t's when not applicable.
constexpr unsigned kNoInstance = 0xFFFFFFFFU;

struct nvmlPciInfo_t {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;  // combined 16-bit device id and 16-bit vendor id
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

// nvmlProcessInfo_t (= the v2 layout) as nvmlDeviceGetComputeRunningProcesses_v3 fills it.
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct nvmlGpuInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};

struct nvmlGpuInstanceProfileInfo_t {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};

struct nvmlGpuInstanceProfileInfo_v2_t {
  unsigned int version;
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
};

struct nvmlGpuInstanceProfileInfo_v3_t {
  unsigned int version;
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  unsigned int capabilities;
};

// NVML_STRUCT_VERSION(data, ver): sizeof(nvml<data>_v<ver>_t) | (ver << 24).
constexpr unsigned nvmlGpuInstanceProfileInfo_v2 =
    static_cast<unsigned>(sizeof(nvmlGpuInstanceProfileInfo_v2_t)) | (2U << 24U);
constexpr unsigned nvmlGpuInstanceProfileInfo_v3 =
    static_cast<unsigned>(sizeof(nvmlGpuInstanceProfileInfo_v3_t)) | (3U << 24U);

struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
};

struct nvmlComputeInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};

struct nvmlComputeInstanceProfileInfo_t {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
};

struct nvmlComputeInstanceInfo_t {
  nvmlDevice_t device;
  nvmlGpuInstance_t gpuInstance;
  unsigned int id;
  unsigned int profileId;
  nvmlComputeInstancePlacement_t placement;
};

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct nvmlGpmMetric_t {
  unsigned int metricId;
  nvmlReturn_t nvmlReturn;
  double value;
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;
};

// metrics[] has NVML_GPM_METRIC_MAX entries, a number that grew between releases; only the first
// numMetrics are read and written, so the array is declared open here.
struct nvmlGpmMetricsGet_t {
  unsigned int version;
  unsigned int numMetrics;
  nvmlGpmSample_t sample1;
  nvmlGpmSample_t sample2;
  nvmlGpmMetric_t metrics[1];
};

struct nvmlGpmSupport_t {
  unsigned int version;
  unsigned int isSupportedDevice;
};

// The sizes that follow from the declarations above (LP64), written out as a check on them.
static_assert(sizeof(nvmlPciInfo_t) == 68);
static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlProcessInfo_t) == 24);
static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48);
static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) == 152);
static_assert(sizeof(nvmlGpuInstanceProfileInfo_v3_t) == 152);
static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24);
static_assert(sizeof(nvmlComputeInstanceProfileInfo_t) == 36);
static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32);
static_assert(sizeof(nvmlEventData_t) == 32);
static_assert(sizeof(nvmlGpmMetric_t) == 40);
static_assert(offsetof(nvmlGpmMetricsGet_t, metrics) == 24);

}  // namespace scripted_nvml_c

namespace scripted_nvml {
namespace {

using json = nlohmann::json;
using namespace scripted_nvml_c;  // NOLINT(google-build-using-namespace)

// nvmlReturn_t values (NVML API reference, nvmlReturn_t).
struct CodeName {
  int code;
  const char* name;
};
constexpr CodeName kCodes[] = {
    {0, "NVML_SUCCESS"},
    {1, "NVML_ERROR_UNINITIALIZED"},
    {2, "NVML_ERROR_INVALID_ARGUMENT"},
    {3, "NVML_ERROR_NOT_SUPPORTED"},
    {4, "NVML_ERROR_NO_PERMISSION"},
    {5, "NVML_ERROR_ALREADY_INITIALIZED"},
    {6, "NVML_ERROR_NOT_FOUND"},
    {7, "NVML_ERROR_INSUFFICIENT_SIZE"},
    {8, "NVML_ERROR_INSUFFICIENT_POWER"},
    {9, "NVML_ERROR_DRIVER_NOT_LOADED"},
    {10, "NVML_ERROR_TIMEOUT"},
    {11, "NVML_ERROR_IRQ_ISSUE"},
    {12, "NVML_ERROR_LIBRARY_NOT_FOUND"},
    {13, "NVML_ERROR_FUNCTION_NOT_FOUND"},
    {14, "NVML_ERROR_CORRUPTED_INFOROM"},
    {15, "NVML_ERROR_GPU_IS_LOST"},
    {16, "NVML_ERROR_RESET_REQUIRED"},
    {17, "NVML_ERROR_OPERATING_SYSTEM"},
    {18, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"},
    {19, "NVML_ERROR_IN_USE"},
    {20, "NVML_ERROR_MEMORY"},
    {21, "NVML_ERROR_NO_DATA"},
    {22, "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED"},
    {23, "NVML_ERROR_INSUFFICIENT_RESOURCES"},
    {24, "NVML_ERROR_FREQ_NOT_SUPPORTED"},
    {25, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH"},
    {26, "NVML_ERROR_DEPRECATED"},
    {27, "NVML_ERROR_NOT_READY"},
    {28, "NVML_ERROR_GPU_NOT_FOUND"},
    {29, "NVML_ERROR_INVALID_STATE"},
    {30, "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED"},
    {999, "NVML_ERROR_UNKNOWN"},
};
constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;
constexpr int kInvalidArgument = 2;
constexpr int kNotSupported = 3;
constexpr int kNotFound = 6;
constexpr int kInsufficientSize = 7;
constexpr int kTimeout = 10;
constexpr int kInUse = 19;
constexpr int kArgumentVersionMismatch = 25;
constexpr int kUnknown = 999;

std::string CodeText(int code) {
  for (const CodeName& entry : kCodes) {
    if (entry.code == code) return entry.name;
  }
  return "NVML_ERROR_" + std::to_string(code);
}

// A scenario mistake: nvmlInit_v2 reports it on stderr and fails.
struct ScenarioError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int ParseCode(const json& value, const std::string& where) {
  if (value.is_number_integer()) return value.get<int>();
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    for (const CodeName& entry : kCodes) {
      if (text == entry.name) return entry.code;
    }
  }
  throw ScenarioError(where + ": not an NVML return code: " + value.dump());
}

void AllowKeys(const json& object, std::initializer_list<const char*> keys,
               const std::string& where) {
  if (!object.is_object()) throw ScenarioError(where + ": expected an object");
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool known = false;
    for (const char* key : keys) known = known || it.key() == key;
    if (!known) throw ScenarioError(where + ": unknown key \"" + it.key() + "\"");
  }
}

unsigned long long Number(const json& object, const char* key, const std::string& where,
                          std::optional<unsigned long long> fallback = std::nullopt) {
  if (!object.contains(key)) {
    if (fallback) return *fallback;
    throw ScenarioError(where + ": \"" + key + "\" is required");
  }
  const json& value = object.at(key);
  if (value.is_number_unsigned() || (value.is_number_integer() && value.get<long long>() >= 0)) {
    return value.get<unsigned long long>();
  }
  if (value.is_string()) {  // "0x2330"
    const std::string text = value.get<std::string>();
    char* end = nullptr;
    const unsigned long long parsed = std::strtoull(text.c_str(), &end, 0);
    if (end != nullptr && *end == '\0' && !text.empty()) return parsed;
  }
  throw ScenarioError(where + ": \"" + key + "\" is not a non-negative integer");
}

unsigned U32(const json& object, const char* key, const std::string& where,
             std::optional<unsigned> fallback = std::nullopt) {
  const unsigned long long value = Number(
      object, key, where, fallback ? std::optional<unsigned long long>(*fallback) : std::nullopt);
  if (value > 0xFFFFFFFFULL) throw ScenarioError(where + ": \"" + key + "\" is too large");
  return static_cast<unsigned>(value);
}

std::string Text(const json& object, const char* key, const std::string& where,
                 std::optional<std::string> fallback = std::nullopt) {
  if (!object.contains(key)) {
    if (fallback) return *fallback;
    throw ScenarioError(where + ": \"" + key + "\" is required");
  }
  if (!object.at(key).is_string()) throw ScenarioError(where + ": \"" + key + "\" is not text");
  return object.at(key).get<std::string>();
}

bool Flag(const json& object, const char* key, const std::string& where) {
  if (!object.contains(key)) return false;
  if (!object.at(key).is_boolean()) throw ScenarioError(where + ": \"" + key + "\" is not bool");
  return object.at(key).get<bool>();
}

std::pair<unsigned, unsigned> Pair(const json& value, const std::string& where) {
  if (!value.is_array() || value.size() != 2 || !value[0].is_number_integer() ||
      !value[1].is_number_integer() || value[0].get<long long>() < 0 ||
      value[1].get<long long>() < 0) {
    throw ScenarioError(where + ": expected [start, size]");
  }
  return {value[0].get<unsigned>(), value[1].get<unsigned>()};
}

constexpr unsigned long long kMiB = 1024ULL * 1024ULL;

// -------------------------------------------------------------------------------- the machine

struct Gpu;
struct Gi;
struct Ci;

// What an nvmlDevice_t points to: a GPU, or a MIG device (one CI).
struct Device {
  Gpu* gpu = nullptr;
  Ci* ci = nullptr;  // null for the GPU itself
};

struct Memory {
  unsigned long long total = 0;
  unsigned long long used = 0;
  unsigned long long free = 0;
};

struct Gi {
  Gpu* gpu = nullptr;
  unsigned id = 0;
  unsigned profile_id = 0;
  unsigned start = 0;
  unsigned size = 0;
  bool alive = true;
};

struct Ci {
  Gi* gi = nullptr;
  unsigned id = 0;
  unsigned profile_id = 0;
  unsigned start = 0;
  unsigned size = 0;
  std::optional<unsigned> mig_index;
  std::string uuid;
  std::optional<Memory> memory;
  bool alive = true;
  Device device;  // its MIG device handle
};

struct GiProfile {
  std::optional<int> refusal;  // {"constant": C, "returns": CODE}
  unsigned id = 0;
  std::string name;
  unsigned slices = 0;
  unsigned instances = 0;
  unsigned sms = 0;
  unsigned copy_engines = 0;
  unsigned decoders = 0;
  unsigned encoders = 0;
  unsigned jpegs = 0;
  unsigned ofas = 0;
  unsigned long long memory_mib = 0;
  bool p2p = false;
  bool gfx = false;
  std::vector<std::pair<unsigned, unsigned>> placements;
};

struct CiProfile {
  std::optional<int> refusal;
  unsigned id = 0;
  unsigned slices = 0;
  unsigned instances = 0;
  unsigned sms = 0;
  unsigned copy_engines = 0;
  unsigned decoders = 0;
  unsigned encoders = 0;
  unsigned jpegs = 0;
  unsigned ofas = 0;
  std::vector<std::pair<unsigned, unsigned>> placements;
};

struct Process {
  unsigned pid = 0;
  unsigned long long used = NVML_VALUE_NOT_AVAILABLE;  // bytes
  unsigned gi = kNoInstance;
  unsigned ci = kNoInstance;
};

struct Xid {
  unsigned long long xid = 0;
  unsigned gi = kNoInstance;
  unsigned ci = kNoInstance;
};

struct Gpu {
  unsigned index = 0;
  std::string where;
  json spec;
  Device device;
  std::string name;
  std::string uuid;
  std::optional<json> pci;
  std::optional<Memory> memory;
  bool mig_capable = false;
  unsigned mig_current = NVML_DEVICE_MIG_DISABLE;
  unsigned mig_pending = NVML_DEVICE_MIG_DISABLE;
  std::map<std::string, json> returns;
  unsigned gi_profile_constants = 0x11;
  unsigned ci_profile_constants = 0x8;
  std::set<unsigned> profile_info_versions = {2, 3};
  std::map<unsigned, GiProfile> gi_profiles;                      // by NVML constant
  std::map<unsigned, std::map<unsigned, CiProfile>> ci_profiles;  // GI profile id -> constant
  std::deque<Gi> gis;                                             // stable addresses
  std::deque<Ci> cis;
  unsigned max_mig_devices = 0;
  std::vector<Process> processes;
  json create_gi = json::array();
  json create_ci = json::array();
  std::set<size_t> create_gi_used;
  std::set<size_t> create_ci_used;
  int activation = kSuccess;
  std::optional<json> telemetry;
  std::optional<json> gpm;
  std::optional<std::deque<Xid>> xids;  // absent: events NOT_SUPPORTED
};

struct EventSet {
  std::vector<Gpu*> gpus;  // registered for Xid critical errors, in order
};

struct Sample {
  Gpu* gpu = nullptr;
  std::optional<unsigned> gi;
  bool taken = false;
};

struct State {
  std::string scenario_path;
  std::string log_path;
  std::string driver_version = "580.65.06";
  std::map<std::string, json> returns;
  std::map<unsigned, json> process_names;
  std::deque<Gpu> gpus;
  std::map<std::string, size_t> sequence_position;  // scope + function -> calls so far
  std::set<const void*> devices;
  std::set<const void*> gis;
  std::set<const void*> cis;
  std::set<const void*> event_sets;
  std::set<const void*> samples;
  std::deque<EventSet> event_set_storage;
  std::deque<Sample> sample_storage;
};

Memory ReadMemory(const json& spec, const std::string& where) {
  AllowKeys(spec, {"total_mib", "used_mib", "free_mib"}, where);
  Memory memory;
  memory.total = Number(spec, "total_mib", where) * kMiB;
  memory.used = Number(spec, "used_mib", where, 0ULL) * kMiB;
  if (memory.used > memory.total) throw ScenarioError(where + ": used_mib > total_mib");
  memory.free = Number(spec, "free_mib", where, (memory.total - memory.used) / kMiB) * kMiB;
  return memory;
}

void ReadGpu(const json& spec, Gpu& gpu) {
  const std::string& where = gpu.where;
  AllowKeys(spec,
            {"name",
             "uuid",
             "pci",
             "memory",
             "mig",
             "returns",
             "gi_profile_constants",
             "profile_info_versions",
             "gi_profiles",
             "ci_profile_constants",
             "ci_profiles",
             "gpu_instances",
             "max_mig_devices",
             "processes",
             "create_gpu_instance",
             "create_compute_instance",
             "set_mig_mode",
             "telemetry",
             "gpm",
             "xid_events"},
            where);
  gpu.spec = spec;
  gpu.name = Text(spec, "name", where);
  gpu.uuid = Text(spec, "uuid", where);
  if (spec.contains("pci")) {
    AllowKeys(spec["pci"],
              {"bus_id", "bus_id_legacy", "domain", "bus", "device", "device_id", "subsystem_id"},
              where + ".pci");
    gpu.pci = spec["pci"];
  }
  if (spec.contains("memory")) gpu.memory = ReadMemory(spec["memory"], where + ".memory");
  if (spec.contains("mig")) {
    const json& mig = spec["mig"];
    AllowKeys(mig, {"current", "pending"}, where + ".mig");
    auto mode = [&](const char* key) {
      const std::string text = Text(mig, key, where + ".mig");
      if (text == "enabled") return NVML_DEVICE_MIG_ENABLE;
      if (text == "disabled") return NVML_DEVICE_MIG_DISABLE;
      throw ScenarioError(where + ".mig." + key + ": \"enabled\" or \"disabled\"");
    };
    gpu.mig_capable = true;
    gpu.mig_current = mode("current");
    gpu.mig_pending = mode("pending");
  }
  if (spec.contains("returns")) {
    for (auto it = spec["returns"].begin(); it != spec["returns"].end(); ++it) {
      gpu.returns[it.key()] = it.value();
    }
  }
  gpu.gi_profile_constants = U32(spec, "gi_profile_constants", where, 0x11U);
  gpu.ci_profile_constants = U32(spec, "ci_profile_constants", where, 0x8U);
  if (spec.contains("profile_info_versions")) {
    gpu.profile_info_versions.clear();
    for (const json& version : spec["profile_info_versions"]) {
      gpu.profile_info_versions.insert(version.get<unsigned>());
    }
  }
  auto placements = [](const json& entry, const std::string& at) {
    std::vector<std::pair<unsigned, unsigned>> out;
    if (entry.contains("placements")) {
      for (const json& placement : entry["placements"]) out.push_back(Pair(placement, at));
    }
    return out;
  };
  if (spec.contains("gi_profiles")) {
    for (const json& entry : spec["gi_profiles"]) {
      const std::string at = where + ".gi_profiles[" + entry.value("name", "") + "]";
      AllowKeys(entry,
                {"constant", "returns", "id", "name", "slices", "instances", "sms", "copy_engines",
                 "decoders", "encoders", "jpegs", "ofas", "memory_mib", "p2p", "gfx", "placements"},
                at);
      GiProfile profile;
      const unsigned constant = U32(entry, "constant", at);
      if (entry.contains("returns")) {
        profile.refusal = ParseCode(entry["returns"], at);
      } else {
        profile.id = U32(entry, "id", at);
        profile.name = Text(entry, "name", at);
        profile.slices = U32(entry, "slices", at);
        profile.instances = U32(entry, "instances", at);
        profile.sms = U32(entry, "sms", at);
        profile.copy_engines = U32(entry, "copy_engines", at);
        profile.decoders = U32(entry, "decoders", at);
        profile.encoders = U32(entry, "encoders", at);
        profile.jpegs = U32(entry, "jpegs", at);
        profile.ofas = U32(entry, "ofas", at);
        profile.memory_mib = Number(entry, "memory_mib", at);
        profile.p2p = Flag(entry, "p2p", at);
        profile.gfx = Flag(entry, "gfx", at);
        profile.placements = placements(entry, at);
      }
      if (!gpu.gi_profiles.emplace(constant, profile).second) {
        throw ScenarioError(at + ": constant listed twice");
      }
    }
  }
  if (spec.contains("ci_profiles")) {
    for (auto it = spec["ci_profiles"].begin(); it != spec["ci_profiles"].end(); ++it) {
      const unsigned gi_profile = static_cast<unsigned>(std::stoul(it.key()));
      for (const json& entry : it.value()) {
        const std::string at = where + ".ci_profiles." + it.key();
        AllowKeys(entry,
                  {"constant", "returns", "id", "slices", "instances", "sms", "copy_engines",
                   "decoders", "encoders", "jpegs", "ofas", "placements"},
                  at);
        CiProfile profile;
        const unsigned constant = U32(entry, "constant", at);
        if (entry.contains("returns")) {
          profile.refusal = ParseCode(entry["returns"], at);
        } else {
          profile.id = U32(entry, "id", at);
          profile.slices = U32(entry, "slices", at);
          profile.instances = U32(entry, "instances", at);
          profile.sms = U32(entry, "sms", at);
          profile.copy_engines = U32(entry, "copy_engines", at, 0U);
          profile.decoders = U32(entry, "decoders", at, 0U);
          profile.encoders = U32(entry, "encoders", at, 0U);
          profile.jpegs = U32(entry, "jpegs", at, 0U);
          profile.ofas = U32(entry, "ofas", at, 0U);
          profile.placements = placements(entry, at);
        }
        gpu.ci_profiles[gi_profile][constant] = profile;
      }
    }
  }
  gpu.max_mig_devices = U32(spec, "max_mig_devices", where, 0U);
  if (spec.contains("processes")) {
    for (const json& entry : spec["processes"]) {
      const std::string at = where + ".processes";
      AllowKeys(entry, {"pid", "used_mib", "gi", "ci"}, at);
      Process process;
      process.pid = U32(entry, "pid", at);
      if (entry.contains("used_mib") && !entry["used_mib"].is_string()) {
        process.used = Number(entry, "used_mib", at) * kMiB;
      }
      process.gi = U32(entry, "gi", at, kNoInstance);
      process.ci = U32(entry, "ci", at, kNoInstance);
      gpu.processes.push_back(process);
    }
  }
  if (spec.contains("create_gpu_instance")) gpu.create_gi = spec["create_gpu_instance"];
  if (spec.contains("create_compute_instance")) gpu.create_ci = spec["create_compute_instance"];
  if (spec.contains("set_mig_mode")) {
    AllowKeys(spec["set_mig_mode"], {"activation"}, where + ".set_mig_mode");
    gpu.activation = ParseCode(spec["set_mig_mode"]["activation"], where + ".set_mig_mode");
  }
  if (spec.contains("telemetry")) gpu.telemetry = spec["telemetry"];
  if (spec.contains("gpm")) {
    AllowKeys(spec["gpm"], {"metrics", "gi_metrics"}, where + ".gpm");
    gpu.gpm = spec["gpm"];
  }
  if (spec.contains("xid_events")) {
    gpu.xids.emplace();
    for (const json& entry : spec["xid_events"]) {
      AllowKeys(entry, {"xid", "gi", "ci"}, where + ".xid_events");
      Xid xid;
      xid.xid = Number(entry, "xid", where + ".xid_events");
      xid.gi = U32(entry, "gi", where + ".xid_events", kNoInstance);
      xid.ci = U32(entry, "ci", where + ".xid_events", kNoInstance);
      gpu.xids->push_back(xid);
    }
  }
}

Gi& AddGi(State& state, Gpu& gpu, unsigned id, unsigned profile_id, unsigned start, unsigned size) {
  Gi& gi = gpu.gis.emplace_back();
  gi.gpu = &gpu;
  gi.id = id;
  gi.profile_id = profile_id;
  gi.start = start;
  gi.size = size;
  state.gis.insert(&gi);
  return gi;
}

Ci& AddCi(State& state, Gi& gi, const json& spec, const std::string& where) {
  Gpu& gpu = *gi.gpu;
  Ci& ci = gpu.cis.emplace_back();
  ci.gi = &gi;
  ci.id = U32(spec, "id", where);
  ci.profile_id = U32(spec, "profile_id", where);
  std::tie(ci.start, ci.size) = Pair(spec.at("placement"), where);
  if (spec.contains("mig_index")) ci.mig_index = U32(spec, "mig_index", where);
  ci.uuid = Text(spec, "uuid", where, "");
  if (spec.contains("memory")) ci.memory = ReadMemory(spec["memory"], where + ".memory");
  ci.device.gpu = &gpu;
  ci.device.ci = &ci;
  state.cis.insert(&ci);
  state.devices.insert(&ci.device);
  return ci;
}

std::unique_ptr<State> LoadScenario() {
  const char* path = std::getenv("GPUSLICE_SCRIPTED_NVML");
  if (path == nullptr || *path == '\0') {
    throw ScenarioError("$GPUSLICE_SCRIPTED_NVML does not name a scenario file");
  }
  std::ifstream in(path);
  if (!in) throw ScenarioError(std::string("cannot read ") + path);
  json scenario;
  try {
    scenario = json::parse(in);
  } catch (const json::exception& error) {
    throw ScenarioError(std::string(path) + ": " + error.what());
  }
  auto state = std::make_unique<State>();
  state->scenario_path = path;
  AllowKeys(scenario, {"log", "driver_version", "returns", "process_names", "gpus"}, "scenario");
  if (const char* log = std::getenv("GPUSLICE_SCRIPTED_NVML_LOG"); log != nullptr && *log) {
    state->log_path = log;
  } else if (scenario.contains("log")) {
    std::string log_path = Text(scenario, "log", "scenario");
    if (!log_path.empty() && log_path[0] != '/') {
      const std::string dir =
          state->scenario_path.substr(0, state->scenario_path.find_last_of('/') == std::string::npos
                                             ? 0
                                             : state->scenario_path.find_last_of('/') + 1);
      log_path = dir + log_path;
    }
    state->log_path = log_path;
  }
  state->driver_version = Text(scenario, "driver_version", "scenario", state->driver_version);
  if (scenario.contains("returns")) {
    for (auto it = scenario["returns"].begin(); it != scenario["returns"].end(); ++it) {
      state->returns[it.key()] = it.value();
    }
  }
  if (scenario.contains("process_names")) {
    for (auto it = scenario["process_names"].begin(); it != scenario["process_names"].end(); ++it) {
      state->process_names[static_cast<unsigned>(std::stoul(it.key()))] = it.value();
    }
  }
  if (scenario.contains("gpus")) {
    unsigned index = 0;
    for (const json& spec : scenario["gpus"]) {
      Gpu& gpu = state->gpus.emplace_back();
      gpu.index = index;
      gpu.where = "gpus[" + std::to_string(index) + "]";
      gpu.device.gpu = &gpu;
      state->devices.insert(&gpu.device);
      ReadGpu(spec, gpu);
      if (spec.contains("gpu_instances")) {
        for (const json& gi_spec : spec["gpu_instances"]) {
          const std::string at = gpu.where + ".gpu_instances";
          AllowKeys(gi_spec, {"id", "profile_id", "placement", "compute_instances"}, at);
          const auto [start, size] = Pair(gi_spec.at("placement"), at);
          Gi& gi = AddGi(*state, gpu, U32(gi_spec, "id", at), U32(gi_spec, "profile_id", at), start,
                         size);
          if (gi_spec.contains("compute_instances")) {
            for (const json& ci_spec : gi_spec["compute_instances"]) {
              AllowKeys(ci_spec, {"id", "profile_id", "placement", "mig_index", "uuid", "memory"},
                        at + ".compute_instances");
              AddCi(*state, gi, ci_spec, at + ".compute_instances");
            }
          }
        }
      }
      ++index;
    }
  }
  return state;
}

// ------------------------------------------------------------------------------ the library

struct Library {
  std::mutex mutex;
  int refcount = 0;
  std::unique_ptr<State> state;
  std::map<int, std::string> error_strings;
};

// Destroyed when the library is unloaded (NvmlBackend dlcloses it) or at exit; a heap object
// kept for ever would be reported as a leak by LeakSanitizer once the library is unloaded.
Library& Lib() {
  static Library library;
  return library;
}

std::string Hex(unsigned value) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%02X", value);
  return buffer;
}

void WriteLog(const State* state, const std::string& line) {
  if (state == nullptr || state->log_path.empty()) return;
  if (FILE* file = std::fopen(state->log_path.c_str(), "a"); file != nullptr) {
    std::fputs(line.c_str(), file);
    std::fputc('\n', file);
    std::fclose(file);
  }
}

// One call in progress: its arguments for the log and the scope for scripted answers.
class Call {
 public:
  Call(State& state, const char* function) : state_(state), function_(function) {}

  void Arg(const std::string& text) { args_ += " " + text; }
  const char* function() const { return function_; }
  State& state() { return state_; }

  // The scripted answer for this call on `gpu` (null: library-wide only), or nullopt to answer
  // normally.
  std::optional<int> Scripted(const Gpu* gpu) {
    if (auto it = state_.returns.find(function_); it != state_.returns.end()) {
      if (std::optional<int> code = Answer("*", it->second)) return code;
    }
    if (gpu == nullptr) return std::nullopt;
    const std::string scope = std::to_string(gpu->index);
    if (auto it = gpu->returns.find(function_); it != gpu->returns.end()) {
      return Answer(scope, it->second);
    }
    if (std::strcmp(function_, "nvmlDeviceGetHandleByIndex_v2") == 0) return std::nullopt;
    if (auto it = gpu->returns.find("*"); it != gpu->returns.end()) {
      return Answer(scope + "*", it->second);
    }
    return std::nullopt;
  }

  void Finish(int code) {
    WriteLog(&state_, std::string(function_) + args_ + " -> " + CodeText(code));
  }

 private:
  std::optional<int> Answer(const std::string& scope, const json& answer) {
    const std::string where = std::string(function_) + " (returns)";
    if (!answer.is_array()) {
      const int code = ParseCode(answer, where);
      return code == kSuccess ? std::nullopt : std::optional<int>(code);
    }
    size_t& position = state_.sequence_position[scope + "/" + function_];
    if (position >= answer.size()) return std::nullopt;
    const int code = ParseCode(answer[position++], where);
    return code == kSuccess ? std::nullopt : std::optional<int>(code);
  }

  State& state_;
  const char* function_;
  std::string args_;
};

// Runs `body` for an NVML function under the library lock, logs it, and turns a scenario mistake
// found on the way into NVML_ERROR_UNKNOWN with a message on stderr.
int Run(const char* function, const std::function<int(Call&)>& body) {
  Library& lib = Lib();
  std::lock_guard<std::mutex> lock(lib.mutex);
  if (lib.state == nullptr) return kUninitialized;
  Call call(*lib.state, function);
  int code = kUnknown;
  try {
    code = body(call);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "scripted NVML: %s: %s\n", function, error.what());
    code = kUnknown;
  }
  call.Finish(code);
  return code;
}

std::string DeviceText(const Device* device) {
  if (device->ci == nullptr) return "gpu=" + std::to_string(device->gpu->index);
  return "mig=" + std::to_string(device->gpu->index) + "/" +
         (device->ci->mig_index ? std::to_string(*device->ci->mig_index) : std::string("?"));
}

std::string GiText(const Gi* gi) {
  return "gi=" + std::to_string(gi->gpu->index) + "/" + std::to_string(gi->id);
}

std::string CiText(const Ci* ci) {
  return "ci=" + std::to_string(ci->gi->gpu->index) + "/" + std::to_string(ci->gi->id) + "/" +
         std::to_string(ci->id);
}

bool Alive(const Device&) { return true; }
bool Alive(const Gi& gi) { return gi.alive; }
bool Alive(const Ci& ci) { return ci.alive; }
std::string Text(const Device* device) { return DeviceText(device); }
std::string Text(const Gi* gi) { return GiText(gi); }
std::string Text(const Ci* ci) { return CiText(ci); }

// Resolves a handle the library gave out (`known`: those of its kind) to its object, which must
// still exist; logs it as `kind=...`. Returns 0 or the NVML code to answer.
template <typename Object, typename HandleType>
int Resolve(Call& call, HandleType handle, const std::set<const void*>& known, const char* kind,
            Object** out) {
  if (known.count(handle) == 0 || !Alive(*reinterpret_cast<Object*>(handle))) {
    call.Arg(std::string(kind) + "=invalid");
    return kInvalidArgument;
  }
  *out = reinterpret_cast<Object*>(handle);
  call.Arg(Text(*out));
  return 0;
}

int ResolveDevice(Call& call, nvmlDevice_t handle, Device** out) {
  return Resolve(call, handle, call.state().devices, "device", out);
}

int ResolveGi(Call& call, nvmlGpuInstance_t handle, Gi** out) {
  return Resolve(call, handle, call.state().gis, "gi", out);
}

int ResolveCi(Call& call, nvmlComputeInstance_t handle, Ci** out) {
  return Resolve(call, handle, call.state().cis, "ci", out);
}

nvmlDevice_t Handle(Device* device) { return reinterpret_cast<nvmlDevice_t>(device); }
nvmlGpuInstance_t Handle(Gi* gi) { return reinterpret_cast<nvmlGpuInstance_t>(gi); }
nvmlComputeInstance_t Handle(Ci* ci) { return reinterpret_cast<nvmlComputeInstance_t>(ci); }

// Copies `text` into a caller's buffer of `length` bytes with its terminator.
int CopyText(const std::string& text, char* buffer, unsigned length) {
  if (buffer == nullptr) return kInvalidArgument;
  if (text.size() + 1 > length) return kInsufficientSize;
  std::memcpy(buffer, text.c_str(), text.size() + 1);
  return kSuccess;
}

const GiProfile* GiProfileById(const Gpu& gpu, unsigned id) {
  for (const auto& [constant, profile] : gpu.gi_profiles) {
    if (!profile.refusal && profile.id == id) return &profile;
  }
  return nullptr;
}

const CiProfile* CiProfileById(const Gpu& gpu, unsigned gi_profile, unsigned id) {
  auto table = gpu.ci_profiles.find(gi_profile);
  if (table == gpu.ci_profiles.end()) return nullptr;
  for (const auto& [constant, profile] : table->second) {
    if (!profile.refusal && profile.id == id) return &profile;
  }
  return nullptr;
}

// Common checks of a GI-level query on a GPU handle: a MIG device handle or MIG off is refused.
int NeedMigGpu(const Device& device) {
  if (device.ci != nullptr) return kInvalidArgument;
  if (!device.gpu->mig_capable || device.gpu->mig_current != NVML_DEVICE_MIG_ENABLE) {
    return kNotSupported;
  }
  return kSuccess;
}

// Looks up the GI profile of `constant`: 0 and the profile, or the code to answer.
int LookupGiProfile(const Device& device, unsigned constant, const GiProfile** out) {
  if (int code = NeedMigGpu(device)) return code;
  if (constant >= device.gpu->gi_profile_constants) return kInvalidArgument;
  auto it = device.gpu->gi_profiles.find(constant);
  if (it == device.gpu->gi_profiles.end()) return kNotSupported;
  if (it->second.refusal) return *it->second.refusal;
  *out = &it->second;
  return kSuccess;
}

template <typename Info>
void FillGiProfile(const GiProfile& profile, Info* info) {
  info->id = profile.id;
  info->sliceCount = profile.slices;
  info->instanceCount = profile.instances;
  info->multiprocessorCount = profile.sms;
  info->copyEngineCount = profile.copy_engines;
  info->decoderCount = profile.decoders;
  info->encoderCount = profile.encoders;
  info->jpegCount = profile.jpegs;
  info->ofaCount = profile.ofas;
  info->memorySizeMB = profile.memory_mib;
}

template <typename Name>
void CopyName(const std::string& name, Name& buffer) {
  std::memset(buffer, 0, sizeof buffer);
  std::memcpy(buffer, name.c_str(), std::min(name.size(), sizeof buffer - 1));
}

// The next scripted creation matching `matches`, marked used; null if none.
const json* TakeScripted(const json& list, std::set<size_t>& used,
                         const std::function<bool(const json&)>& matches) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (used.count(i) == 0 && matches(list[i])) {
      used.insert(i);
      return &list[i];
    }
  }
  return nullptr;
}

bool StartMatches(const json& entry, std::optional<unsigned> start) {
  if (!entry.contains("start")) return !start.has_value();
  return start.has_value() && entry["start"].get<unsigned>() == *start;
}

int CreateGi(Call& call, nvmlDevice_t handle, unsigned profile_id,
             const nvmlGpuInstancePlacement_t* placement, nvmlGpuInstance_t* instance) {
  Device* device = nullptr;
  if (int code = ResolveDevice(call, handle, &device)) return code;
  call.Arg("profile=" + std::to_string(profile_id));
  if (placement != nullptr) {
    call.Arg("start=" + std::to_string(placement->start) +
             " size=" + std::to_string(placement->size));
  }
  if (std::optional<int> code = call.Scripted(device->gpu)) return *code;
  if (instance == nullptr) return kInvalidArgument;
  if (int code = NeedMigGpu(*device)) return code;
  const GiProfile* profile = GiProfileById(*device->gpu, profile_id);
  if (profile == nullptr) return kInvalidArgument;
  std::optional<unsigned> start;
  if (placement != nullptr) {
    bool allowed = false;
    for (const auto& [s, size] : profile->placements) {
      allowed = allowed || (s == placement->start && size == placement->size);
    }
    if (!allowed) return kInvalidArgument;
    start = placement->start;
  }
  Gpu& gpu = *device->gpu;
  const json* entry = TakeScripted(gpu.create_gi, gpu.create_gi_used, [&](const json& candidate) {
    return candidate.value("profile_id", ~0U) == profile_id && StartMatches(candidate, start);
  });
  if (entry == nullptr) {
    std::fprintf(stderr, "scripted NVML: %s: GPU %u, profile %u%s is not in the scenario\n",
                 call.function(), gpu.index, profile_id,
                 start ? (", start " + std::to_string(*start)).c_str() : "");
    return kUnknown;
  }
  const std::string at = gpu.where + ".create_gpu_instance";
  AllowKeys(*entry, {"profile_id", "start", "returns", "id", "placement"}, at);
  if (entry->contains("returns")) {
    if (const int code = ParseCode((*entry)["returns"], at); code != kSuccess) return code;
  }
  const auto [new_start, new_size] = Pair(entry->at("placement"), at);
  Gi& gi = AddGi(call.state(), gpu, U32(*entry, "id", at), profile_id, new_start, new_size);
  *instance = Handle(&gi);
  return kSuccess;
}

int CreateCi(Call& call, nvmlGpuInstance_t handle, unsigned profile_id,
             const nvmlComputeInstancePlacement_t* placement, nvmlComputeInstance_t* out) {
  Gi* gi = nullptr;
  if (int code = ResolveGi(call, handle, &gi)) return code;
  call.Arg("profile=" + std::to_string(profile_id));
  if (placement != nullptr) {
    call.Arg("start=" + std::to_string(placement->start) +
             " size=" + std::to_string(placement->size));
  }
  if (std::optional<int> code = call.Scripted(gi->gpu)) return *code;
  if (out == nullptr) return kInvalidArgument;
  const CiProfile* profile = CiProfileById(*gi->gpu, gi->profile_id, profile_id);
  if (profile == nullptr) return kInvalidArgument;
  std::optional<unsigned> start;
  if (placement != nullptr) {
    bool allowed = false;
    for (const auto& [s, size] : profile->placements) {
      allowed = allowed || (s == placement->start && size == placement->size);
    }
    if (!allowed) return kInvalidArgument;
    start = placement->start;
  }
  Gpu& gpu = *gi->gpu;
  const json* entry = TakeScripted(gpu.create_ci, gpu.create_ci_used, [&](const json& candidate) {
    return candidate.value("gpu_instance", ~0U) == gi->id &&
           candidate.value("profile_id", ~0U) == profile_id && StartMatches(candidate, start);
  });
  if (entry == nullptr) {
    std::fprintf(stderr,
                 "scripted NVML: %s: GI %u on GPU %u, CI profile %u is not in the scenario\n",
                 call.function(), gi->id, gpu.index, profile_id);
    return kUnknown;
  }
  const std::string at = gpu.where + ".create_compute_instance";
  AllowKeys(*entry,
            {"gpu_instance", "profile_id", "start", "returns", "id", "placement", "mig_index",
             "uuid", "memory"},
            at);
  if (entry->contains("returns")) {
    if (const int code = ParseCode((*entry)["returns"], at); code != kSuccess) return code;
  }
  Ci& ci = AddCi(call.state(), *gi, *entry, at);
  *out = Handle(&ci);
  return kSuccess;
}

const json* Telemetry(const Gpu& gpu, const char* key) {
  if (!gpu.telemetry || !gpu.telemetry->contains(key)) return nullptr;
  return &gpu.telemetry->at(key);
}

}  // namespace
}  // namespace scripted_nvml

using namespace scripted_nvml_c;  // NOLINT(google-build-using-namespace)
namespace sn = scripted_nvml;

// ------------------------------------------------------------------------------------- system

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  sn::Library& lib = sn::Lib();
  std::lock_guard<std::mutex> lock(lib.mutex);
  if (lib.state == nullptr) {
    try {
      lib.state = sn::LoadScenario();
    } catch (const std::exception& error) {
      std::fprintf(stderr, "scripted NVML: nvmlInit_v2: %s\n", error.what());
      return sn::kUnknown;
    }
  }
  sn::Call call(*lib.state, "nvmlInit_v2");
  int code = sn::kSuccess;
  try {
    if (std::optional<int> scripted = call.Scripted(nullptr)) code = *scripted;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "scripted NVML: nvmlInit_v2: %s\n", error.what());
    code = sn::kUnknown;
  }
  call.Finish(code);
  if (code == sn::kSuccess) {
    ++lib.refcount;
  } else if (lib.refcount == 0) {
    lib.state.reset();
  }
  return code;
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlShutdown(void) {
  sn::Library& lib = sn::Lib();
  std::lock_guard<std::mutex> lock(lib.mutex);
  if (lib.state == nullptr) return sn::kUninitialized;
  sn::WriteLog(lib.state.get(), "nvmlShutdown -> NVML_SUCCESS");
  if (--lib.refcount == 0) lib.state.reset();
  return sn::kSuccess;
}

SCRIPTED_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  sn::Library& lib = sn::Lib();
  std::lock_guard<std::mutex> lock(lib.mutex);
  auto [it, added] = lib.error_strings.try_emplace(result);
  if (added) it->second = sn::CodeText(result);
  return it->second.c_str();
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return sn::Run("nvmlSystemGetDriverVersion", [&](sn::Call& call) {
    call.Arg("length=" + std::to_string(length));
    if (std::optional<int> code = call.Scripted(nullptr)) return *code;
    return sn::CopyText(call.state().driver_version, version, length);
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name,
                                                           unsigned int length) {
  return sn::Run("nvmlSystemGetProcessName", [&](sn::Call& call) {
    call.Arg("pid=" + std::to_string(pid) + " length=" + std::to_string(length));
    if (std::optional<int> code = call.Scripted(nullptr)) return *code;
    auto it = call.state().process_names.find(pid);
    if (it == call.state().process_names.end()) return sn::kNotFound;
    if (it->second.is_object()) return sn::ParseCode(it->second.at("returns"), "process_names");
    if (name == nullptr || length == 0) return sn::kInvalidArgument;
    // NVML truncates the name to the buffer.
    const std::string text = it->second.get<std::string>();
    const size_t n = std::min<size_t>(text.size(), length - 1);
    std::memcpy(name, text.data(), n);
    name[n] = '\0';
    return sn::kSuccess;
  });
}

// ------------------------------------------------------------------------------------ devices

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  return sn::Run("nvmlDeviceGetCount_v2", [&](sn::Call& call) {
    if (std::optional<int> code = call.Scripted(nullptr)) return *code;
    if (count == nullptr) return sn::kInvalidArgument;
    *count = static_cast<unsigned>(call.state().gpus.size());
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                                nvmlDevice_t* device) {
  return sn::Run("nvmlDeviceGetHandleByIndex_v2", [&](sn::Call& call) {
    call.Arg("index=" + std::to_string(index));
    if (index >= call.state().gpus.size()) return sn::kInvalidArgument;
    sn::Gpu& gpu = call.state().gpus[index];
    if (std::optional<int> code = call.Scripted(&gpu)) return *code;
    if (device == nullptr) return sn::kInvalidArgument;
    *device = sn::Handle(&gpu.device);
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                                    unsigned int length) {
  return sn::Run("nvmlDeviceGetName", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    call.Arg("length=" + std::to_string(length));
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (target->ci != nullptr) return sn::kNotSupported;
    return sn::CopyText(target->gpu->name, name, length);
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                    unsigned int length) {
  return sn::Run("nvmlDeviceGetUUID", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    call.Arg("length=" + std::to_string(length));
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    const std::string& text = target->ci != nullptr ? target->ci->uuid : target->gpu->uuid;
    if (text.empty()) return sn::kNotSupported;
    return sn::CopyText(text, uuid, length);
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return sn::Run("nvmlDeviceGetPciInfo_v3", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (pci == nullptr) return sn::kInvalidArgument;
    if (target->ci != nullptr || !target->gpu->pci) return sn::kNotSupported;
    const sn::json& spec = *target->gpu->pci;
    const std::string where = target->gpu->where + ".pci";
    std::memset(pci, 0, sizeof *pci);
    sn::CopyName(sn::Text(spec, "bus_id_legacy", where, ""), pci->busIdLegacy);
    pci->domain = sn::U32(spec, "domain", where, 0U);
    pci->bus = sn::U32(spec, "bus", where, 0U);
    pci->device = sn::U32(spec, "device", where, 0U);
    pci->pciDeviceId = (sn::U32(spec, "device_id", where) << 16U) | 0x10DEU;
    pci->pciSubSystemId = sn::U32(spec, "subsystem_id", where, 0U);
    sn::CopyName(sn::Text(spec, "bus_id", where), pci->busId);
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device,
                                                          nvmlMemory_t* memory) {
  return sn::Run("nvmlDeviceGetMemoryInfo", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (memory == nullptr) return sn::kInvalidArgument;
    const std::optional<sn::Memory>& figures =
        target->ci != nullptr ? target->ci->memory : target->gpu->memory;
    if (!figures) return sn::kNotSupported;
    memory->total = figures->total;
    memory->free = figures->free;
    memory->used = figures->used;
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device,
                                                       unsigned int* currentMode,
                                                       unsigned int* pendingMode) {
  return sn::Run("nvmlDeviceGetMigMode", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (currentMode == nullptr || pendingMode == nullptr) return sn::kInvalidArgument;
    if (target->ci != nullptr) return sn::kInvalidArgument;
    if (!target->gpu->mig_capable) return sn::kNotSupported;
    *currentMode = target->gpu->mig_current;
    *pendingMode = target->gpu->mig_pending;
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                                       nvmlReturn_t* activationStatus) {
  return sn::Run("nvmlDeviceSetMigMode", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    call.Arg("mode=" + std::to_string(mode));
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (activationStatus == nullptr || target->ci != nullptr) return sn::kInvalidArgument;
    if (mode != NVML_DEVICE_MIG_DISABLE && mode != NVML_DEVICE_MIG_ENABLE) {
      return sn::kInvalidArgument;
    }
    sn::Gpu& gpu = *target->gpu;
    if (!gpu.mig_capable) return sn::kNotSupported;
    gpu.mig_pending = mode;
    *activationStatus = gpu.activation;
    if (gpu.activation == sn::kSuccess) gpu.mig_current = mode;
    return sn::kSuccess;
  });
}

// ----------------------------------------------------------------------------- GPU instances

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(
    nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t* info) {
  return sn::Run("nvmlDeviceGetGpuInstanceProfileInfo", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    call.Arg("constant=" + sn::Hex(profile));
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (info == nullptr) return sn::kInvalidArgument;
    const sn::GiProfile* found = nullptr;
    if (int code = sn::LookupGiProfile(*target, profile, &found)) return code;
    std::memset(info, 0, sizeof *info);
    sn::FillGiProfile(*found, info);
    info->isP2pSupported = found->p2p ? 1U : 0U;
    return sn::kSuccess;
  });
}

// Reads info->version; nvmlGpuInstanceProfileInfo_v2_t and _v3_t come through the same pointer.
SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(
    nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t* info) {
  return sn::Run("nvmlDeviceGetGpuInstanceProfileInfoV", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    call.Arg("constant=" + sn::Hex(profile));
    if (info == nullptr) return sn::kInvalidArgument;
    const unsigned version = info->version;
    const bool v2 = version == nvmlGpuInstanceProfileInfo_v2;
    const bool v3 = version == nvmlGpuInstanceProfileInfo_v3;
    call.Arg(v2 || v3 ? "version=" + std::to_string(version >> 24U)
                      : "version=invalid(" + sn::Hex(version) + ")");
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if ((!v2 && !v3) || target->gpu->profile_info_versions.count(version >> 24U) == 0) {
      return sn::kArgumentVersionMismatch;
    }
    const sn::GiProfile* found = nullptr;
    if (int code = sn::LookupGiProfile(*target, profile, &found)) return code;
    if (v3) {
      auto* out = reinterpret_cast<nvmlGpuInstanceProfileInfo_v3_t*>(info);
      std::memset(out, 0, sizeof *out);
      out->version = version;
      sn::FillGiProfile(*found, out);
      sn::CopyName(found->name, out->name);
      out->capabilities = (found->p2p ? NVML_GPU_INSTANCE_PROFILE_CAPS_P2P : 0U) |
                          (found->gfx ? NVML_GPU_INSTANCE_PROFILE_CAPS_GFX : 0U);
    } else {
      std::memset(info, 0, sizeof *info);
      info->version = version;
      sn::FillGiProfile(*found, info);
      info->isP2pSupported = found->p2p ? 1U : 0U;
      sn::CopyName(found->name, info->name);
    }
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t* placements,
    unsigned int* count) {
  return sn::Run("nvmlDeviceGetGpuInstancePossiblePlacements_v2", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    call.Arg("profile=" + std::to_string(profileId) +
             (placements == nullptr ? " placements=null" : ""));
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (count == nullptr) return sn::kInvalidArgument;
    if (int code = sn::NeedMigGpu(*target)) return code;
    const sn::GiProfile* profile = sn::GiProfileById(*target->gpu, profileId);
    if (profile == nullptr) return sn::kInvalidArgument;
    *count = static_cast<unsigned>(profile->placements.size());
    if (placements != nullptr) {
      for (size_t i = 0; i < profile->placements.size(); ++i) {
        placements[i].start = profile->placements[i].first;
        placements[i].size = profile->placements[i].second;
      }
    }
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device,
                                                            unsigned int profileId,
                                                            nvmlGpuInstance_t* instances,
                                                            unsigned int* count) {
  return sn::Run("nvmlDeviceGetGpuInstances", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    call.Arg("profile=" + std::to_string(profileId));
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (instances == nullptr || count == nullptr) return sn::kInvalidArgument;
    if (int code = sn::NeedMigGpu(*target)) return code;
    if (sn::GiProfileById(*target->gpu, profileId) == nullptr) return sn::kInvalidArgument;
    unsigned n = 0;
    for (sn::Gi& gi : target->gpu->gis) {
      if (gi.alive && gi.profile_id == profileId) instances[n++] = sn::Handle(&gi);
    }
    *count = n;
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                               nvmlGpuInstance_t* instance) {
  return sn::Run("nvmlDeviceGetGpuInstanceById", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    call.Arg("id=" + std::to_string(id));
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (instance == nullptr) return sn::kInvalidArgument;
    if (int code = sn::NeedMigGpu(*target)) return code;
    for (sn::Gi& gi : target->gpu->gis) {
      if (gi.alive && gi.id == id) {
        *instance = sn::Handle(&gi);
        return sn::kSuccess;
      }
    }
    return sn::kNotFound;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device,
                                                              unsigned int profileId,
                                                              nvmlGpuInstance_t* instance) {
  return sn::Run("nvmlDeviceCreateGpuInstance", [&](sn::Call& call) {
    return sn::CreateGi(call, device, profileId, nullptr, instance);
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profileId, const nvmlGpuInstancePlacement_t* placement,
    nvmlGpuInstance_t* instance) {
  return sn::Run("nvmlDeviceCreateGpuInstanceWithPlacement", [&](sn::Call& call) {
    if (placement == nullptr) return sn::kInvalidArgument;
    return sn::CreateGi(call, device, profileId, placement, instance);
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
  return sn::Run("nvmlGpuInstanceDestroy", [&](sn::Call& call) {
    sn::Gi* gi = nullptr;
    if (int code = sn::ResolveGi(call, gpuInstance, &gi)) return code;
    if (std::optional<int> code = call.Scripted(gi->gpu)) return *code;
    // NVML: IN_USE while the GI has compute instances (or processes).
    for (const sn::Ci& ci : gi->gpu->cis) {
      if (ci.alive && ci.gi == gi) return sn::kInUse;
    }
    gi->alive = false;
    call.state().gis.erase(gi);
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance,
                                                         nvmlGpuInstanceInfo_t* info) {
  return sn::Run("nvmlGpuInstanceGetInfo", [&](sn::Call& call) {
    sn::Gi* gi = nullptr;
    if (int code = sn::ResolveGi(call, gpuInstance, &gi)) return code;
    if (std::optional<int> code = call.Scripted(gi->gpu)) return *code;
    if (info == nullptr) return sn::kInvalidArgument;
    info->device = sn::Handle(&gi->gpu->device);
    info->id = gi->id;
    info->profileId = gi->profile_id;
    info->placement.start = gi->start;
    info->placement.size = gi->size;
    return sn::kSuccess;
  });
}

// ------------------------------------------------------------------------- compute instances

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_t* info) {
  return sn::Run("nvmlGpuInstanceGetComputeInstanceProfileInfo", [&](sn::Call& call) {
    sn::Gi* gi = nullptr;
    if (int code = sn::ResolveGi(call, gpuInstance, &gi)) return code;
    call.Arg("constant=" + sn::Hex(profile) + " engine=" + std::to_string(engProfile));
    if (std::optional<int> code = call.Scripted(gi->gpu)) return *code;
    if (info == nullptr) return sn::kInvalidArgument;
    if (profile >= gi->gpu->ci_profile_constants ||
        engProfile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT) {
      return sn::kInvalidArgument;
    }
    auto table = gi->gpu->ci_profiles.find(gi->profile_id);
    if (table == gi->gpu->ci_profiles.end()) return sn::kNotSupported;
    auto it = table->second.find(profile);
    if (it == table->second.end()) return sn::kNotSupported;
    const sn::CiProfile& found = it->second;
    if (found.refusal) return *found.refusal;
    std::memset(info, 0, sizeof *info);
    info->id = found.id;
    info->sliceCount = found.slices;
    info->instanceCount = found.instances;
    info->multiprocessorCount = found.sms;
    info->sharedCopyEngineCount = found.copy_engines;
    info->sharedDecoderCount = found.decoders;
    info->sharedEncoderCount = found.encoders;
    info->sharedJpegCount = found.jpegs;
    info->sharedOfaCount = found.ofas;
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    nvmlComputeInstancePlacement_t* placements, unsigned int* count) {
  return sn::Run("nvmlGpuInstanceGetComputeInstancePossiblePlacements", [&](sn::Call& call) {
    sn::Gi* gi = nullptr;
    if (int code = sn::ResolveGi(call, gpuInstance, &gi)) return code;
    call.Arg("profile=" + std::to_string(profileId) +
             (placements == nullptr ? " placements=null" : ""));
    if (std::optional<int> code = call.Scripted(gi->gpu)) return *code;
    if (count == nullptr) return sn::kInvalidArgument;
    const sn::CiProfile* profile = sn::CiProfileById(*gi->gpu, gi->profile_id, profileId);
    if (profile == nullptr) return sn::kInvalidArgument;
    *count = static_cast<unsigned>(profile->placements.size());
    if (placements != nullptr) {
      for (size_t i = 0; i < profile->placements.size(); ++i) {
        placements[i].start = profile->placements[i].first;
        placements[i].size = profile->placements[i].second;
      }
    }
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t
nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                   nvmlComputeInstance_t* computeInstances, unsigned int* count) {
  return sn::Run("nvmlGpuInstanceGetComputeInstances", [&](sn::Call& call) {
    sn::Gi* gi = nullptr;
    if (int code = sn::ResolveGi(call, gpuInstance, &gi)) return code;
    call.Arg("profile=" + std::to_string(profileId));
    if (std::optional<int> code = call.Scripted(gi->gpu)) return *code;
    if (computeInstances == nullptr || count == nullptr) return sn::kInvalidArgument;
    if (sn::CiProfileById(*gi->gpu, gi->profile_id, profileId) == nullptr) {
      return sn::kInvalidArgument;
    }
    unsigned n = 0;
    for (sn::Ci& ci : gi->gpu->cis) {
      if (ci.alive && ci.gi == gi && ci.profile_id == profileId) {
        computeInstances[n++] = sn::Handle(&ci);
      }
    }
    *count = n;
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(
    nvmlGpuInstance_t gpuInstance, unsigned int id, nvmlComputeInstance_t* computeInstance) {
  return sn::Run("nvmlGpuInstanceGetComputeInstanceById", [&](sn::Call& call) {
    sn::Gi* gi = nullptr;
    if (int code = sn::ResolveGi(call, gpuInstance, &gi)) return code;
    call.Arg("id=" + std::to_string(id));
    if (std::optional<int> code = call.Scripted(gi->gpu)) return *code;
    if (computeInstance == nullptr) return sn::kInvalidArgument;
    for (sn::Ci& ci : gi->gpu->cis) {
      if (ci.alive && ci.gi == gi && ci.id == id) {
        *computeInstance = sn::Handle(&ci);
        return sn::kSuccess;
      }
    }
    return sn::kNotFound;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t* computeInstance) {
  return sn::Run("nvmlGpuInstanceCreateComputeInstance", [&](sn::Call& call) {
    return sn::CreateCi(call, gpuInstance, profileId, nullptr, computeInstance);
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    const nvmlComputeInstancePlacement_t* placement, nvmlComputeInstance_t* computeInstance) {
  return sn::Run("nvmlGpuInstanceCreateComputeInstanceWithPlacement", [&](sn::Call& call) {
    if (placement == nullptr) return sn::kInvalidArgument;
    return sn::CreateCi(call, gpuInstance, profileId, placement, computeInstance);
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t
nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
  return sn::Run("nvmlComputeInstanceDestroy", [&](sn::Call& call) {
    sn::Ci* ci = nullptr;
    if (int code = sn::ResolveCi(call, computeInstance, &ci)) return code;
    if (std::optional<int> code = call.Scripted(ci->gi->gpu)) return *code;
    // NVML: IN_USE while processes run on the CI.
    for (const sn::Process& process : ci->gi->gpu->processes) {
      if (process.gi == ci->gi->id && process.ci == ci->id) return sn::kInUse;
    }
    ci->alive = false;
    call.state().cis.erase(ci);
    call.state().devices.erase(&ci->device);
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(
    nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t* info) {
  return sn::Run("nvmlComputeInstanceGetInfo_v2", [&](sn::Call& call) {
    sn::Ci* ci = nullptr;
    if (int code = sn::ResolveCi(call, computeInstance, &ci)) return code;
    if (std::optional<int> code = call.Scripted(ci->gi->gpu)) return *code;
    if (info == nullptr) return sn::kInvalidArgument;
    info->device = sn::Handle(&ci->gi->gpu->device);
    info->gpuInstance = sn::Handle(ci->gi);
    info->id = ci->id;
    info->profileId = ci->profile_id;
    info->placement.start = ci->start;
    info->placement.size = ci->size;
    return sn::kSuccess;
  });
}

// -------------------------------------------------------------------------------- MIG devices

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device,
                                                                 unsigned int* count) {
  return sn::Run("nvmlDeviceGetMaxMigDeviceCount", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (count == nullptr || target->ci != nullptr) return sn::kInvalidArgument;
    if (!target->gpu->mig_capable) return sn::kNotSupported;
    *count = target->gpu->max_mig_devices;
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                                      unsigned int index,
                                                                      nvmlDevice_t* migDevice) {
  return sn::Run("nvmlDeviceGetMigDeviceHandleByIndex", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    call.Arg("index=" + std::to_string(index));
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (migDevice == nullptr || target->ci != nullptr) return sn::kInvalidArgument;
    if (!target->gpu->mig_capable) return sn::kNotSupported;
    if (index >= target->gpu->max_mig_devices) return sn::kInvalidArgument;
    for (sn::Ci& ci : target->gpu->cis) {
      if (ci.alive && ci.mig_index == index) {
        *migDevice = sn::Handle(&ci.device);
        return sn::kSuccess;
      }
    }
    return sn::kNotFound;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device,
                                                             unsigned int* id) {
  return sn::Run("nvmlDeviceGetGpuInstanceId", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (id == nullptr) return sn::kInvalidArgument;
    if (target->ci == nullptr) return sn::kNotSupported;  // not a MIG device handle
    *id = target->ci->gi->id;
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device,
                                                                 unsigned int* id) {
  return sn::Run("nvmlDeviceGetComputeInstanceId", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (id == nullptr) return sn::kInvalidArgument;
    if (target->ci == nullptr) return sn::kNotSupported;
    *id = target->ci->id;
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_t* infos) {
  return sn::Run("nvmlDeviceGetComputeRunningProcesses_v3", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    call.Arg("count=" + (infoCount == nullptr ? std::string("null") : std::to_string(*infoCount)) +
             (infos == nullptr ? " infos=null" : ""));
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (infoCount == nullptr) return sn::kInvalidArgument;
    std::vector<const sn::Process*> listed;
    for (const sn::Process& process : target->gpu->processes) {
      if (target->ci == nullptr ||
          (process.gi == target->ci->gi->id && process.ci == target->ci->id)) {
        listed.push_back(&process);
      }
    }
    const unsigned n = static_cast<unsigned>(listed.size());
    if (n > *infoCount || (n > 0 && infos == nullptr)) {
      *infoCount = n;
      return sn::kInsufficientSize;
    }
    *infoCount = n;
    for (unsigned i = 0; i < n; ++i) {
      infos[i].pid = listed[i]->pid;
      infos[i].usedGpuMemory = listed[i]->used;
      infos[i].gpuInstanceId = listed[i]->gi;
      infos[i].computeInstanceId = listed[i]->ci;
    }
    return sn::kSuccess;
  });
}

// ----------------------------------------------------------------------------- health figures

namespace scripted_nvml {
namespace {

// Runs a telemetry query: the figure under `key` (absent: NOT_SUPPORTED) handed to `fill`.
int TelemetryCall(const char* function, nvmlDevice_t device, const char* key,
                  const std::string& args, const std::function<int(const json&)>& fill) {
  return Run(function, [&](Call& call) {
    Device* target = nullptr;
    if (int code = ResolveDevice(call, device, &target)) return code;
    if (!args.empty()) call.Arg(args);
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (target->ci != nullptr) return kNotSupported;
    const json* figure = Telemetry(*target->gpu, key);
    if (figure == nullptr) return kNotSupported;
    return fill(*figure);
  });
}

}  // namespace
}  // namespace scripted_nvml

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                           unsigned int sensorType,
                                                           unsigned int* temp) {
  return sn::TelemetryCall("nvmlDeviceGetTemperature", device, "temperature_c",
                           "sensor=" + std::to_string(sensorType), [&](const sn::json& figure) {
                             if (temp == nullptr || sensorType != 0)
                               return sn::kInvalidArgument;  // NVML_TEMPERATURE_GPU
                             *temp = figure.get<unsigned>();
                             return sn::kSuccess;
                           });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device,
                                                          unsigned int* power) {
  return sn::TelemetryCall("nvmlDeviceGetPowerUsage", device, "power_mw", "",
                           [&](const sn::json& figure) {
                             if (power == nullptr) return sn::kInvalidArgument;
                             *power = figure.get<unsigned>();
                             return sn::kSuccess;
                           });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device,
                                                                  unsigned int* limit) {
  return sn::TelemetryCall("nvmlDeviceGetEnforcedPowerLimit", device, "power_limit_mw", "",
                           [&](const sn::json& figure) {
                             if (limit == nullptr) return sn::kInvalidArgument;
                             *limit = figure.get<unsigned>();
                             return sn::kSuccess;
                           });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type,
                                                         unsigned int* clock) {
  // nvmlClockType_t: NVML_CLOCK_GRAPHICS 0, NVML_CLOCK_SM 1, NVML_CLOCK_MEM 2, NVML_CLOCK_VIDEO 3.
  static const char* const kNames[] = {"graphics", "sm", "mem", "video"};
  return sn::TelemetryCall("nvmlDeviceGetClockInfo", device, "clocks_mhz",
                           "type=" + std::to_string(type), [&](const sn::json& figure) {
                             if (clock == nullptr || type > 3) return sn::kInvalidArgument;
                             if (!figure.contains(kNames[type])) return sn::kNotSupported;
                             *clock = figure[kNames[type]].get<unsigned>();
                             return sn::kSuccess;
                           });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                                nvmlUtilization_t* utilization) {
  return sn::TelemetryCall("nvmlDeviceGetUtilizationRates", device, "utilization", "",
                           [&](const sn::json& figure) {
                             if (utilization == nullptr) return sn::kInvalidArgument;
                             utilization->gpu = figure.at("gpu").get<unsigned>();
                             utilization->memory = figure.at("memory").get<unsigned>();
                             return sn::kSuccess;
                           });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(
    nvmlDevice_t device, unsigned long long* clocksEventReasons) {
  return sn::TelemetryCall("nvmlDeviceGetCurrentClocksEventReasons", device, "clocks_event_reasons",
                           "", [&](const sn::json& figure) {
                             if (clocksEventReasons == nullptr) return sn::kInvalidArgument;
                             *clocksEventReasons = figure.get<unsigned long long>();
                             return sn::kSuccess;
                           });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(
    nvmlDevice_t device, unsigned long long* clocksThrottleReasons) {
  return sn::TelemetryCall("nvmlDeviceGetCurrentClocksThrottleReasons", device,
                           "clocks_event_reasons", "", [&](const sn::json& figure) {
                             if (clocksThrottleReasons == nullptr) return sn::kInvalidArgument;
                             *clocksThrottleReasons = figure.get<unsigned long long>();
                             return sn::kSuccess;
                           });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                              unsigned int errorType,
                                                              unsigned int counterType,
                                                              unsigned long long* eccCounts) {
  // nvmlMemoryErrorType_t: CORRECTED 0, UNCORRECTED 1; nvmlEccCounterType_t: VOLATILE 0,
  // AGGREGATE 1.
  return sn::TelemetryCall(
      "nvmlDeviceGetTotalEccErrors", device, "ecc",
      "error=" + std::to_string(errorType) + " counter=" + std::to_string(counterType),
      [&](const sn::json& figure) {
        if (eccCounts == nullptr || errorType > 1 || counterType > 1) {
          return sn::kInvalidArgument;
        }
        const char* error = errorType == 0 ? "corrected" : "uncorrected";
        const char* counter = counterType == 0 ? "volatile" : "aggregate";
        if (!figure.contains(error) || !figure[error].contains(counter)) {
          return sn::kNotSupported;
        }
        *eccCounts = figure[error][counter].get<unsigned long long>();
        return sn::kSuccess;
      });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device,
                                                            unsigned int* corrRows,
                                                            unsigned int* uncRows,
                                                            unsigned int* isPending,
                                                            unsigned int* failureOccurred) {
  return sn::TelemetryCall("nvmlDeviceGetRemappedRows", device, "remapped_rows", "",
                           [&](const sn::json& figure) {
                             if (corrRows == nullptr || uncRows == nullptr ||
                                 isPending == nullptr || failureOccurred == nullptr) {
                               return sn::kInvalidArgument;
                             }
                             *corrRows = figure.at("correctable").get<unsigned>();
                             *uncRows = figure.at("uncorrectable").get<unsigned>();
                             *isPending = figure.value("pending", false) ? 1U : 0U;
                             *failureOccurred = figure.value("failure", false) ? 1U : 0U;
                             return sn::kSuccess;
                           });
}

// ---------------------------------------------------------------------------------- events

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  return sn::Run("nvmlEventSetCreate", [&](sn::Call& call) {
    if (std::optional<int> code = call.Scripted(nullptr)) return *code;
    if (set == nullptr) return sn::kInvalidArgument;
    sn::EventSet& created = call.state().event_set_storage.emplace_back();
    call.state().event_sets.insert(&created);
    *set = reinterpret_cast<nvmlEventSet_t>(&created);
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                           unsigned long long eventTypes,
                                                           nvmlEventSet_t set) {
  return sn::Run("nvmlDeviceRegisterEvents", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    char types[32];
    std::snprintf(types, sizeof types, "types=0x%llX", eventTypes);
    call.Arg(types);
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (call.state().event_sets.count(set) == 0 || target->ci != nullptr) {
      return sn::kInvalidArgument;
    }
    if (!target->gpu->xids || (eventTypes & nvmlEventTypeXidCriticalError) == 0) {
      return sn::kNotSupported;
    }
    reinterpret_cast<sn::EventSet*>(set)->gpus.push_back(target->gpu);
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                                      unsigned int timeoutms) {
  return sn::Run("nvmlEventSetWait_v2", [&](sn::Call& call) {
    call.Arg("timeout_ms=" + std::to_string(timeoutms));
    if (std::optional<int> code = call.Scripted(nullptr)) return *code;
    if (call.state().event_sets.count(set) == 0 || data == nullptr) return sn::kInvalidArgument;
    for (sn::Gpu* gpu : reinterpret_cast<sn::EventSet*>(set)->gpus) {
      if (gpu->xids->empty()) continue;
      const sn::Xid xid = gpu->xids->front();
      gpu->xids->pop_front();
      data->device = sn::Handle(&gpu->device);
      data->eventType = nvmlEventTypeXidCriticalError;
      data->eventData = xid.xid;
      data->gpuInstanceId = xid.gi;
      data->computeInstanceId = xid.ci;
      return sn::kSuccess;
    }
    return sn::kTimeout;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  return sn::Run("nvmlEventSetFree", [&](sn::Call& call) {
    if (call.state().event_sets.erase(set) == 0) return sn::kInvalidArgument;
    return sn::kSuccess;
  });
}

// ------------------------------------------------------------------------------------- GPM

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device,
                                                            nvmlGpmSupport_t* gpmSupport) {
  return sn::Run("nvmlGpmQueryDeviceSupport", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (gpmSupport == nullptr) return sn::kInvalidArgument;
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION) return sn::kArgumentVersionMismatch;
    gpmSupport->isSupportedDevice = target->gpu->gpm ? 1U : 0U;
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t* gpmSample) {
  return sn::Run("nvmlGpmSampleAlloc", [&](sn::Call& call) {
    if (std::optional<int> code = call.Scripted(nullptr)) return *code;
    if (gpmSample == nullptr) return sn::kInvalidArgument;
    sn::Sample& sample = call.state().sample_storage.emplace_back();
    call.state().samples.insert(&sample);
    *gpmSample = reinterpret_cast<nvmlGpmSample_t>(&sample);
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample) {
  return sn::Run("nvmlGpmSampleFree", [&](sn::Call& call) {
    if (call.state().samples.erase(gpmSample) == 0) return sn::kInvalidArgument;
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample) {
  return sn::Run("nvmlGpmSampleGet", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (call.state().samples.count(gpmSample) == 0) return sn::kInvalidArgument;
    if (!target->gpu->gpm || target->ci != nullptr) return sn::kNotSupported;
    auto* sample = reinterpret_cast<sn::Sample*>(gpmSample);
    sample->gpu = target->gpu;
    sample->gi.reset();
    sample->taken = true;
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device,
                                                      unsigned int gpuInstanceId,
                                                      nvmlGpmSample_t gpmSample) {
  return sn::Run("nvmlGpmMigSampleGet", [&](sn::Call& call) {
    sn::Device* target = nullptr;
    if (int code = sn::ResolveDevice(call, device, &target)) return code;
    call.Arg("gi=" + std::to_string(gpuInstanceId));
    if (std::optional<int> code = call.Scripted(target->gpu)) return *code;
    if (call.state().samples.count(gpmSample) == 0) return sn::kInvalidArgument;
    if (!target->gpu->gpm || target->ci != nullptr) return sn::kNotSupported;
    bool found = false;
    for (const sn::Gi& gi : target->gpu->gis) found = found || (gi.alive && gi.id == gpuInstanceId);
    if (!found) return sn::kNotFound;
    auto* sample = reinterpret_cast<sn::Sample*>(gpmSample);
    sample->gpu = target->gpu;
    sample->gi = gpuInstanceId;
    sample->taken = true;
    return sn::kSuccess;
  });
}

SCRIPTED_NVML_EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t* metricsGet) {
  return sn::Run("nvmlGpmMetricsGet", [&](sn::Call& call) {
    if (metricsGet == nullptr) return sn::kInvalidArgument;
    call.Arg("version=" + std::to_string(metricsGet->version) +
             " metrics=" + std::to_string(metricsGet->numMetrics));
    if (std::optional<int> code = call.Scripted(nullptr)) return *code;
    if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION) return sn::kArgumentVersionMismatch;
    sn::State& state = call.state();
    if (state.samples.count(metricsGet->sample1) == 0 ||
        state.samples.count(metricsGet->sample2) == 0) {
      return sn::kInvalidArgument;
    }
    const auto* first = reinterpret_cast<const sn::Sample*>(metricsGet->sample1);
    const auto* second = reinterpret_cast<const sn::Sample*>(metricsGet->sample2);
    if (!first->taken || !second->taken || first->gpu != second->gpu || first->gi != second->gi) {
      return sn::kInvalidArgument;
    }
    const sn::json& gpm = *second->gpu->gpm;
    sn::json figures = sn::json::object();
    if (second->gi) {
      const std::string key = std::to_string(*second->gi);
      if (gpm.contains("gi_metrics") && gpm["gi_metrics"].contains(key)) {
        figures = gpm["gi_metrics"][key];
      }
    } else if (gpm.contains("metrics")) {
      figures = gpm["metrics"];
    }
    // The caller's array is longer than the one entry declared here.
    auto* metrics = reinterpret_cast<nvmlGpmMetric_t*>(reinterpret_cast<char*>(metricsGet) +
                                                       offsetof(nvmlGpmMetricsGet_t, metrics));
    for (unsigned i = 0; i < metricsGet->numMetrics; ++i) {
      nvmlGpmMetric_t& metric = metrics[i];
      const std::string key = std::to_string(metric.metricId);
      metric.metricInfo.shortName = nullptr;
      metric.metricInfo.longName = nullptr;
      metric.metricInfo.unit = nullptr;
      if (figures.contains(key)) {
        metric.nvmlReturn = sn::kSuccess;
        metric.value = figures[key].get<double>();
      } else {
        metric.nvmlReturn = sn::kNotSupported;
        metric.value = 0;
      }
    }
    return sn::kSuccess;
  });
}
