// nvml_api.h (src/device/, internal to the device layer)
//
// gpuslice's own declarations of the part of the NVML C API it uses: opaque handle types, the
// structs those functions fill, the constants, and one function-pointer type per function. NVIDIA's
// nvml.h is not needed to build gpuslice: the layouts below follow the NVML API reference
// (NVML_API_VERSION 12/13) and ../shared/reference/mig-facts.md §4.
//
// Two users:
//   * NvmlBackend (nvml_backend.cc) resolves every function of GPUSLICE_NVML_FUNCTIONS with dlsym
//     into an nvml::Api table, plus the optional ones declared after that list (among them
//     GPUSLICE_NVML_HEALTH_FUNCTIONS, for the health figures);
//   * the test NVML library (fake_nvml/fake_nvml.cc) defines the same functions with C linkage and
//     static_asserts that each definition has exactly the type declared here, so the backend and
//     the library cannot drift apart.
//
// Only plain C types appear here; nothing is allocated. All layouts are for LP64 Linux.
#pragma once

#include <cstddef>

namespace gpuslice::device::nvml {

// nvmlReturn_t is a C enum (int-sized); the values are gpuslice::device::NvmlCode.
using nvmlReturn_t = int;

// Opaque handles. NVML hands out pointers to structs it never describes.
struct nvmlDevice_st;
struct nvmlGpuInstance_st;
struct nvmlComputeInstance_st;
using nvmlDevice_t = nvmlDevice_st*;
using nvmlGpuInstance_t = nvmlGpuInstance_st*;
using nvmlComputeInstance_t = nvmlComputeInstance_st*;

// Buffer sizes (NVML_*_BUFFER_SIZE).
inline constexpr unsigned kDeviceNameBufferSize = 96;      // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned kDeviceUuidBufferSize = 96;      // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned kDevicePciBusIdBufferSize = 32;  // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
inline constexpr unsigned kDevicePciBusIdLegacySize = 16;  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
inline constexpr unsigned kSystemDriverVersionBufferSize =
    80;                                                  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
inline constexpr unsigned kProcessNameBufferSize = 256;  // generous; NVML copies the command name

// MIG mode (NVML_DEVICE_MIG_DISABLE / _ENABLE).
inline constexpr unsigned kMigDisable = 0;
inline constexpr unsigned kMigEnable = 1;

// NVML_GPU_INSTANCE_PROFILE_* constants run from 0x00 (1_SLICE) to 0x11 (3_SLICE_GFX); the count is
// the first invalid value (nvmlDeviceGetGpuInstanceProfileInfo answers INVALID_ARGUMENT there).
// The R590 reference ends at 2_SLICE_ALL_ME 0x10 (COUNT 0x11); 3_SLICE_GFX came with NVML v595,
// so older drivers answer INVALID_ARGUMENT for 0x11.
inline constexpr unsigned kGpuInstanceProfileCount = 0x12;
// NVML_COMPUTE_INSTANCE_PROFILE_* constants (1_SLICE 0, 2_SLICE 1, 3_SLICE 2, 4_SLICE 3, 7_SLICE 4,
// 8_SLICE 5, 6_SLICE 6, 1_SLICE_REV1 7); NVML_COMPUTE_INSTANCE_PROFILE_COUNT is 0x8 (NVML API
// reference, R590; there is no 2_SLICE_REV1 CI constant). CI profile ids equal these constants.
inline constexpr unsigned kComputeInstanceProfileCount = 0x8;
// NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, the only engine profile.
inline constexpr unsigned kComputeInstanceEngineProfileShared = 0;
inline constexpr unsigned kComputeInstanceEngineProfileCount = 1;

// nvmlProcessInfo_t.gpuInstanceId / computeInstanceId when MIG is off, and
// NVML_VALUE_NOT_AVAILABLE for usedGpuMemory.
inline constexpr unsigned kInvalidInstanceId = 0xFFFFFFFFU;
inline constexpr unsigned long long kValueNotAvailable = ~0ULL;

// nvmlPciInfo_t, as filled by nvmlDeviceGetPciInfo_v3.
struct nvmlPciInfo_t {
  char busIdLegacy[kDevicePciBusIdLegacySize];  // "0000:36:00.0"
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;  // (16-bit device id << 16) | 16-bit vendor id (0x10DE)
  unsigned pciSubSystemId;
  char busId[kDevicePciBusIdBufferSize];  // "00000000:36:00.0"
};

// nvmlMemory_t (v1): bytes; total = free + used.
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlProcessInfo_t as returned by nvmlDeviceGetComputeRunningProcesses_v3 (nvmlProcessInfo_v2_t).
struct nvmlProcessInfo_t {
  unsigned pid;
  unsigned long long usedGpuMemory;  // bytes, or kValueNotAvailable
  unsigned gpuInstanceId;            // kInvalidInstanceId when MIG is off
  unsigned computeInstanceId;
};

// nvmlGpuInstancePlacement_t: in memory slices (placement units).
struct nvmlGpuInstancePlacement_t {
  unsigned start;
  unsigned size;
};

// nvmlGpuInstanceProfileInfo_t (v1, no version field).
struct nvmlGpuInstanceProfileInfo_t {
  unsigned id;  // the nvidia-smi profile ID, NOT the NVML constant it was looked up by
  unsigned isP2pSupported;
  unsigned sliceCount;
  unsigned instanceCount;
  unsigned multiprocessorCount;
  unsigned copyEngineCount;
  unsigned decoderCount;
  unsigned encoderCount;
  unsigned jpegCount;
  unsigned ofaCount;
  unsigned long long memorySizeMB;
};

// nvmlGpuInstanceProfileInfo_v2_t: a version word first, the v1 fields, then the profile name.
struct nvmlGpuInstanceProfileInfo_v2_t {
  unsigned version;  // kGpuInstanceProfileInfoV2
  unsigned id;
  unsigned isP2pSupported;
  unsigned sliceCount;
  unsigned instanceCount;
  unsigned multiprocessorCount;
  unsigned copyEngineCount;
  unsigned decoderCount;
  unsigned encoderCount;
  unsigned jpegCount;
  unsigned ofaCount;
  unsigned long long memorySizeMB;
  char name[kDeviceNameBufferSize];  // "MIG 1g.10gb"
};

// nvmlGpuInstanceProfileInfo_v3_t: like v2 without isP2pSupported, plus capability bits.
struct nvmlGpuInstanceProfileInfo_v3_t {
  unsigned version;  // kGpuInstanceProfileInfoV3
  unsigned id;
  unsigned sliceCount;
  unsigned instanceCount;
  unsigned multiprocessorCount;
  unsigned copyEngineCount;
  unsigned decoderCount;
  unsigned encoderCount;
  unsigned jpegCount;
  unsigned ofaCount;
  unsigned long long memorySizeMB;
  char name[kDeviceNameBufferSize];
  unsigned capabilities;  // kGpuInstanceProfileCaps*
};

// NVML_STRUCT_VERSION(data, ver): the struct's size in the low bits, the version in the top byte.
constexpr unsigned StructVersion(std::size_t size, unsigned version) {
  return static_cast<unsigned>(size) | (version << 24U);
}
inline constexpr unsigned kGpuInstanceProfileInfoV2 =
    StructVersion(sizeof(nvmlGpuInstanceProfileInfo_v2_t), 2);
inline constexpr unsigned kGpuInstanceProfileInfoV3 =
    StructVersion(sizeof(nvmlGpuInstanceProfileInfo_v3_t), 3);
// nvmlGpuInstanceProfileInfo_v3_t.capabilities bits (NVML_GPU_INSTANCE_PROFILE_CAPS_*).
inline constexpr unsigned kGpuInstanceProfileCapsP2p = 0x1;
inline constexpr unsigned kGpuInstanceProfileCapsGfx = 0x2;

// nvmlGpuInstanceInfo_t.
struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;  // parent device
  unsigned id;          // GI id on the device
  unsigned profileId;   // nvidia-smi profile ID
  nvmlGpuInstancePlacement_t placement;
};

// nvmlComputeInstancePlacement_t: in compute slices of the parent GI.
struct nvmlComputeInstancePlacement_t {
  unsigned start;
  unsigned size;
};

// nvmlComputeInstanceProfileInfo_t (v1, no version field).
struct nvmlComputeInstanceProfileInfo_t {
  unsigned id;
  unsigned sliceCount;
  unsigned instanceCount;
  unsigned multiprocessorCount;
  unsigned sharedCopyEngineCount;
  unsigned sharedDecoderCount;
  unsigned sharedEncoderCount;
  unsigned sharedJpegCount;
  unsigned sharedOfaCount;
};

// nvmlComputeInstanceInfo_t (filled by nvmlComputeInstanceGetInfo_v2).
struct nvmlComputeInstanceInfo_t {
  nvmlDevice_t device;            // parent device
  nvmlGpuInstance_t gpuInstance;  // parent GI
  unsigned id;                    // CI id within the GI
  unsigned profileId;             // CI profile id
  nvmlComputeInstancePlacement_t placement;
};

// Layout checks against the documented C layouts (LP64).
static_assert(sizeof(nvmlPciInfo_t) == 16 + 5 * 4 + 32 && offsetof(nvmlPciInfo_t, busId) == 36);
static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlProcessInfo_t) == 24 && offsetof(nvmlProcessInfo_t, usedGpuMemory) == 8 &&
              offsetof(nvmlProcessInfo_t, gpuInstanceId) == 16);
static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48 &&
              offsetof(nvmlGpuInstanceProfileInfo_t, memorySizeMB) == 40);
static_assert(offsetof(nvmlGpuInstanceProfileInfo_v2_t, id) == 4 &&
              offsetof(nvmlGpuInstanceProfileInfo_v2_t, ofaCount) == 40 &&
              offsetof(nvmlGpuInstanceProfileInfo_v2_t, memorySizeMB) == 48 &&
              offsetof(nvmlGpuInstanceProfileInfo_v2_t, name) == 56 &&
              sizeof(nvmlGpuInstanceProfileInfo_v2_t) == 152);
static_assert(offsetof(nvmlGpuInstanceProfileInfo_v3_t, id) == 4 &&
              offsetof(nvmlGpuInstanceProfileInfo_v3_t, sliceCount) == 8 &&
              offsetof(nvmlGpuInstanceProfileInfo_v3_t, memorySizeMB) == 40 &&
              offsetof(nvmlGpuInstanceProfileInfo_v3_t, name) == 48 &&
              offsetof(nvmlGpuInstanceProfileInfo_v3_t, capabilities) == 144 &&
              sizeof(nvmlGpuInstanceProfileInfo_v3_t) == 152);
// Both versions are 152 bytes: only the version number in the top byte tells them apart.
static_assert(kGpuInstanceProfileInfoV2 == 0x02000098U && kGpuInstanceProfileInfoV3 == 0x03000098U);
static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24 &&
              offsetof(nvmlGpuInstanceInfo_t, placement) == 16);
static_assert(sizeof(nvmlComputeInstanceProfileInfo_t) == 36);
static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32 &&
              offsetof(nvmlComputeInstanceInfo_t, placement) == 24);

// Every NVML function NvmlBackend needs: X(return type, name, parameter list).
#define GPUSLICE_NVML_FUNCTIONS(X)                                                                \
  X(nvmlReturn_t, nvmlInit_v2, (void))                                                            \
  X(nvmlReturn_t, nvmlShutdown, (void))                                                           \
  X(nvmlReturn_t, nvmlSystemGetDriverVersion, (char* version, unsigned length))                   \
  X(nvmlReturn_t, nvmlSystemGetProcessName, (unsigned pid, char* name, unsigned length))          \
  X(nvmlReturn_t, nvmlDeviceGetCount_v2, (unsigned* count))                                       \
  X(nvmlReturn_t, nvmlDeviceGetHandleByIndex_v2, (unsigned index, nvmlDevice_t* device))          \
  X(nvmlReturn_t, nvmlDeviceGetName, (nvmlDevice_t device, char* name, unsigned length))          \
  X(nvmlReturn_t, nvmlDeviceGetUUID, (nvmlDevice_t device, char* uuid, unsigned length))          \
  X(nvmlReturn_t, nvmlDeviceGetPciInfo_v3, (nvmlDevice_t device, nvmlPciInfo_t * pci))            \
  X(nvmlReturn_t, nvmlDeviceGetMemoryInfo, (nvmlDevice_t device, nvmlMemory_t * memory))          \
  X(nvmlReturn_t, nvmlDeviceGetMigMode,                                                           \
    (nvmlDevice_t device, unsigned* current_mode, unsigned* pending_mode))                        \
  X(nvmlReturn_t, nvmlDeviceSetMigMode,                                                           \
    (nvmlDevice_t device, unsigned mode, nvmlReturn_t* activation_status))                        \
  X(nvmlReturn_t, nvmlDeviceGetGpuInstanceProfileInfo,                                            \
    (nvmlDevice_t device, unsigned profile, nvmlGpuInstanceProfileInfo_t* info))                  \
  X(nvmlReturn_t, nvmlDeviceGetGpuInstancePossiblePlacements_v2,                                  \
    (nvmlDevice_t device, unsigned profile_id, nvmlGpuInstancePlacement_t* placements,            \
     unsigned* count))                                                                            \
  X(nvmlReturn_t, nvmlDeviceGetGpuInstances,                                                      \
    (nvmlDevice_t device, unsigned profile_id, nvmlGpuInstance_t* instances, unsigned* count))    \
  X(nvmlReturn_t, nvmlDeviceGetGpuInstanceById,                                                   \
    (nvmlDevice_t device, unsigned id, nvmlGpuInstance_t* instance))                              \
  X(nvmlReturn_t, nvmlDeviceCreateGpuInstance,                                                    \
    (nvmlDevice_t device, unsigned profile_id, nvmlGpuInstance_t* instance))                      \
  X(nvmlReturn_t, nvmlDeviceCreateGpuInstanceWithPlacement,                                       \
    (nvmlDevice_t device, unsigned profile_id, const nvmlGpuInstancePlacement_t* placement,       \
     nvmlGpuInstance_t* instance))                                                                \
  X(nvmlReturn_t, nvmlGpuInstanceDestroy, (nvmlGpuInstance_t instance))                           \
  X(nvmlReturn_t, nvmlGpuInstanceGetInfo,                                                         \
    (nvmlGpuInstance_t instance, nvmlGpuInstanceInfo_t * info))                                   \
  X(nvmlReturn_t, nvmlGpuInstanceGetComputeInstanceProfileInfo,                                   \
    (nvmlGpuInstance_t instance, unsigned profile, unsigned engine_profile,                       \
     nvmlComputeInstanceProfileInfo_t* info))                                                     \
  X(nvmlReturn_t, nvmlGpuInstanceGetComputeInstancePossiblePlacements,                            \
    (nvmlGpuInstance_t instance, unsigned profile_id, nvmlComputeInstancePlacement_t* placements, \
     unsigned* count))                                                                            \
  X(nvmlReturn_t, nvmlGpuInstanceGetComputeInstances,                                             \
    (nvmlGpuInstance_t instance, unsigned profile_id, nvmlComputeInstance_t* instances,           \
     unsigned* count))                                                                            \
  X(nvmlReturn_t, nvmlGpuInstanceGetComputeInstanceById,                                          \
    (nvmlGpuInstance_t instance, unsigned id, nvmlComputeInstance_t* compute_instance))           \
  X(nvmlReturn_t, nvmlGpuInstanceCreateComputeInstance,                                           \
    (nvmlGpuInstance_t instance, unsigned profile_id, nvmlComputeInstance_t* compute_instance))   \
  X(nvmlReturn_t, nvmlGpuInstanceCreateComputeInstanceWithPlacement,                              \
    (nvmlGpuInstance_t instance, unsigned profile_id,                                             \
     const nvmlComputeInstancePlacement_t* placement, nvmlComputeInstance_t* compute_instance))   \
  X(nvmlReturn_t, nvmlComputeInstanceDestroy, (nvmlComputeInstance_t compute_instance))           \
  X(nvmlReturn_t, nvmlComputeInstanceGetInfo_v2,                                                  \
    (nvmlComputeInstance_t compute_instance, nvmlComputeInstanceInfo_t * info))                   \
  X(nvmlReturn_t, nvmlDeviceGetMaxMigDeviceCount, (nvmlDevice_t device, unsigned* count))         \
  X(nvmlReturn_t, nvmlDeviceGetMigDeviceHandleByIndex,                                            \
    (nvmlDevice_t device, unsigned index, nvmlDevice_t* mig_device))                              \
  X(nvmlReturn_t, nvmlDeviceGetGpuInstanceId, (nvmlDevice_t device, unsigned* id))                \
  X(nvmlReturn_t, nvmlDeviceGetComputeInstanceId, (nvmlDevice_t device, unsigned* id))            \
  X(nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses_v3,                                        \
    (nvmlDevice_t device, unsigned* info_count, nvmlProcessInfo_t* infos))

// One function-pointer type per function: nvml::nvmlInit_v2_fn, ...
#define GPUSLICE_NVML_FN_TYPE(ret, name, params) using name##_fn = ret(*) params;
GPUSLICE_NVML_FUNCTIONS(GPUSLICE_NVML_FN_TYPE)
#undef GPUSLICE_NVML_FN_TYPE

// ------------------------------------------------------------------------------- health figures
// What NvmlBackend::GetTelemetry, SampleActivity and TakeXidEvents use. Enum-typed parameters
// (nvmlTemperatureSensors_t, nvmlClockType_t, nvmlMemoryErrorType_t, nvmlEccCounterType_t) are C
// enums with small non-negative values, passed as unsigned like the other enums here.

// nvmlTemperatureSensors_t: the GPU die.
inline constexpr unsigned kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
// nvmlClockType_t (NVML_CLOCK_GRAPHICS 0, _SM 1, _MEM 2, _VIDEO 3).
inline constexpr unsigned kClockGraphics = 0;
inline constexpr unsigned kClockSm = 1;
inline constexpr unsigned kClockMem = 2;
inline constexpr unsigned kClockVideo = 3;
// nvmlMemoryErrorType_t and nvmlEccCounterType_t.
inline constexpr unsigned kMemoryErrorTypeCorrected = 0;    // NVML_MEMORY_ERROR_TYPE_CORRECTED
inline constexpr unsigned kMemoryErrorTypeUncorrected = 1;  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
inline constexpr unsigned kVolatileEcc = 0;                 // NVML_VOLATILE_ECC (since driver load)
inline constexpr unsigned kAggregateEcc = 1;                // NVML_AGGREGATE_ECC (device lifetime)
// nvmlEventType* bits.
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x8ULL;

// nvmlUtilization_t: percent of the last sample period.
struct nvmlUtilization_t {
  unsigned gpu;     // a kernel was running
  unsigned memory;  // device memory was read or written
};

// An event set (nvmlEventSetCreate) and one event taken from it (nvmlEventSetWait_v2).
struct nvmlEventSet_st;
using nvmlEventSet_t = nvmlEventSet_st*;
struct nvmlEventData_t {
  nvmlDevice_t device;           // the GPU (not a MIG device) the event concerns
  unsigned long long eventType;  // one nvmlEventType* bit
  unsigned long long eventData;  // for Xid events the Xid (999: unknown)
  unsigned gpuInstanceId;        // kInvalidInstanceId when not attributable to a GI
  unsigned computeInstanceId;    // likewise for a CI
};

// GPM (GPU performance monitoring, Hopper and later). A sample is an opaque handle from
// nvmlGpmSampleAlloc; metrics are computed between two samples of the same device. (nvml.h wraps
// the pointer in a one-member struct, which has the same size and is passed the same way.)
struct nvmlGpmSample_st;
using nvmlGpmSample_t = nvmlGpmSample_st*;
// nvmlGpmMetricId_t values used here: percentages 0-100 over the interval.
inline constexpr unsigned kGpmMetricSmUtil = 2;       // NVML_GPM_METRIC_SM_UTIL
inline constexpr unsigned kGpmMetricSmOccupancy = 3;  // NVML_GPM_METRIC_SM_OCCUPANCY
inline constexpr unsigned kGpmMetricDramBwUtil = 10;  // NVML_GPM_METRIC_DRAM_BW_UTIL
// Entries of nvmlGpmMetricsGet_t.metrics. NVML_GPM_METRIC_MAX has grown between releases (98, 210,
// 333) without a new struct version; the driver reads and writes only the first numMetrics.
inline constexpr unsigned kGpmMetricMax = 210;
inline constexpr unsigned kGpmMetricsGetVersion = 1;  // NVML_GPM_METRICS_GET_VERSION
inline constexpr unsigned kGpmSupportVersion = 1;     // NVML_GPM_SUPPORT_VERSION

struct nvmlGpmMetric_t {
  unsigned metricId;        // in
  nvmlReturn_t nvmlReturn;  // out: this metric's status; `value` is valid only on success
  double value;             // out
  struct {
    char* shortName;  // out, may be null
    char* longName;
    char* unit;
  } metricInfo;
};

struct nvmlGpmMetricsGet_t {
  unsigned version;  // kGpmMetricsGetVersion
  unsigned numMetrics;
  nvmlGpmSample_t sample1;  // the earlier sample
  nvmlGpmSample_t sample2;  // the later one
  nvmlGpmMetric_t metrics[kGpmMetricMax];
};

struct nvmlGpmSupport_t {
  unsigned version;            // kGpmSupportVersion
  unsigned isSupportedDevice;  // out
};

static_assert(sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlEventData_t) == 32 && offsetof(nvmlEventData_t, eventData) == 16 &&
              offsetof(nvmlEventData_t, gpuInstanceId) == 24 &&
              offsetof(nvmlEventData_t, computeInstanceId) == 28);
static_assert(sizeof(nvmlGpmMetric_t) == 40 && offsetof(nvmlGpmMetric_t, value) == 8 &&
              offsetof(nvmlGpmMetric_t, metricInfo) == 16);
static_assert(offsetof(nvmlGpmMetricsGet_t, sample1) == 8 &&
              offsetof(nvmlGpmMetricsGet_t, metrics) == 24 &&
              sizeof(nvmlGpmMetricsGet_t) == 24 + 40 * kGpmMetricMax);
static_assert(sizeof(nvmlGpmSupport_t) == 8);

// Optional functions for the health figures, resolved when the library has them: a figure whose
// function is missing (older driver) is absent, like one the GPU answers NOT_SUPPORTED.
// nvmlDeviceGetCurrentClocksEventReasons is the newer name of
// nvmlDeviceGetCurrentClocksThrottleReasons (same bits); the backend uses whichever exists.
#define GPUSLICE_NVML_HEALTH_FUNCTIONS(X)                                                         \
  X(nvmlReturn_t, nvmlDeviceGetTemperature,                                                       \
    (nvmlDevice_t device, unsigned sensor, unsigned* celsius))                                    \
  X(nvmlReturn_t, nvmlDeviceGetPowerUsage, (nvmlDevice_t device, unsigned* milliwatts))           \
  X(nvmlReturn_t, nvmlDeviceGetEnforcedPowerLimit, (nvmlDevice_t device, unsigned* milliwatts))   \
  X(nvmlReturn_t, nvmlDeviceGetClockInfo, (nvmlDevice_t device, unsigned type, unsigned* mhz))    \
  X(nvmlReturn_t, nvmlDeviceGetUtilizationRates,                                                  \
    (nvmlDevice_t device, nvmlUtilization_t * utilization))                                       \
  X(nvmlReturn_t, nvmlDeviceGetCurrentClocksEventReasons,                                         \
    (nvmlDevice_t device, unsigned long long* reasons))                                           \
  X(nvmlReturn_t, nvmlDeviceGetCurrentClocksThrottleReasons,                                      \
    (nvmlDevice_t device, unsigned long long* reasons))                                           \
  X(nvmlReturn_t, nvmlDeviceGetTotalEccErrors,                                                    \
    (nvmlDevice_t device, unsigned error_type, unsigned counter_type, unsigned long long* count)) \
  X(nvmlReturn_t, nvmlDeviceGetRemappedRows,                                                      \
    (nvmlDevice_t device, unsigned* correctable, unsigned* uncorrectable, unsigned* pending,      \
     unsigned* failure))                                                                          \
  X(nvmlReturn_t, nvmlEventSetCreate, (nvmlEventSet_t * set))                                     \
  X(nvmlReturn_t, nvmlDeviceRegisterEvents,                                                       \
    (nvmlDevice_t device, unsigned long long event_types, nvmlEventSet_t set))                    \
  X(nvmlReturn_t, nvmlEventSetWait_v2,                                                            \
    (nvmlEventSet_t set, nvmlEventData_t * data, unsigned timeout_ms))                            \
  X(nvmlReturn_t, nvmlEventSetFree, (nvmlEventSet_t set))                                         \
  X(nvmlReturn_t, nvmlGpmQueryDeviceSupport, (nvmlDevice_t device, nvmlGpmSupport_t * support))   \
  X(nvmlReturn_t, nvmlGpmSampleAlloc, (nvmlGpmSample_t * sample))                                 \
  X(nvmlReturn_t, nvmlGpmSampleFree, (nvmlGpmSample_t sample))                                    \
  X(nvmlReturn_t, nvmlGpmSampleGet, (nvmlDevice_t device, nvmlGpmSample_t sample))                \
  X(nvmlReturn_t, nvmlGpmMigSampleGet,                                                            \
    (nvmlDevice_t device, unsigned gpu_instance_id, nvmlGpmSample_t sample))                      \
  X(nvmlReturn_t, nvmlGpmMetricsGet, (nvmlGpmMetricsGet_t * metrics))

#define GPUSLICE_NVML_FN_TYPE(ret, name, params) using name##_fn = ret(*) params;
GPUSLICE_NVML_HEALTH_FUNCTIONS(GPUSLICE_NVML_FN_TYPE)
#undef GPUSLICE_NVML_FN_TYPE

// Optional: resolved when the library has it (drivers since R470 or so; older ones only have the
// v1 nvmlDeviceGetGpuInstanceProfileInfo). `info->version` selects v2 or v3 (the v3 struct is
// passed through the same pointer type); an unknown version is ARGUMENT_VERSION_MISMATCH.
using nvmlDeviceGetGpuInstanceProfileInfoV_fn =
    nvmlReturn_t (*)(nvmlDevice_t device, unsigned profile, nvmlGpuInstanceProfileInfo_v2_t* info);
inline constexpr char kGpuInstanceProfileInfoVSymbol[] = "nvmlDeviceGetGpuInstanceProfileInfoV";

// Exported by NVML and by the test library, but not needed by NvmlBackend.
using nvmlErrorString_fn = const char* (*)(nvmlReturn_t result);
// Exported only by the test NVML library (fake_nvml): resets a simulated GPU, the operation NVML
// has no public function for. NvmlBackend uses it when the loaded library has it.
using gpusliceTestResetGpu_fn = nvmlReturn_t (*)(unsigned index);
inline constexpr char kTestResetGpuSymbol[] = "gpusliceTestResetGpu";
// Also only in the test library: ends a simulated process (its pids are not real processes, so
// NvmlBackend must never signal them).
using gpusliceTestTerminateProcess_fn = nvmlReturn_t (*)(unsigned pid);
inline constexpr char kTestTerminateProcessSymbol[] = "gpusliceTestTerminateProcess";

// The resolved function table.
struct Api {
#define GPUSLICE_NVML_FN_MEMBER(ret, name, params) name##_fn name = nullptr;
  GPUSLICE_NVML_FUNCTIONS(GPUSLICE_NVML_FN_MEMBER)
#undef GPUSLICE_NVML_FN_MEMBER
  nvmlDeviceGetGpuInstanceProfileInfoV_fn nvmlDeviceGetGpuInstanceProfileInfoV =
      nullptr;                                                             // optional
  gpusliceTestResetGpu_fn gpusliceTestResetGpu = nullptr;                  // optional
  gpusliceTestTerminateProcess_fn gpusliceTestTerminateProcess = nullptr;  // optional
  // Optional (GPUSLICE_NVML_HEALTH_FUNCTIONS): null when the library lacks them.
#define GPUSLICE_NVML_FN_MEMBER(ret, name, params) name##_fn name = nullptr;
  GPUSLICE_NVML_HEALTH_FUNCTIONS(GPUSLICE_NVML_FN_MEMBER)
#undef GPUSLICE_NVML_FN_MEMBER
};

}  // namespace gpuslice::device::nvml
