// gpuslice/device/backend.h
//
// The seam between gpuslice and GPUs. Everything that reads or changes a GPU goes through a
// device::Backend. There are two implementations, and one conformance suite
// (tests/device/conformance_test.cc) runs against both:
//   * NvmlBackend (gpuslice/device/nvml_backend.h): the real driver, through libnvidia-ml.so.1
//     loaded with dlopen;
//   * SimBackend (gpuslice/device/sim_backend.h): a simulated machine that follows the driver's
//     rules (../shared/reference/mig-facts.md §0, §4) and keeps its state in a file.
//
// Conventions: GPUs are addressed by NVML index, GPU instances by their GI id on that GPU, compute
// instances by (GI id, CI id). Profile ids are the nvidia-smi / nvmlGpuInstanceProfileInfo_t.id
// values (e.g. 9 = 3g on A100/H100), never NVML constants. Failures are absl::Status values that
// carry the NVML code (gpuslice/device/nvml_codes.h). A Backend is not thread-safe: use one per
// thread, or lock around it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuslice/hw/gpu_model.h"

namespace gpuslice::device {

enum class MigMode { kDisabled = 0, kEnabled = 1 };

struct GpuInfo {
  int index = 0;
  std::string uuid;  // "GPU-…"
  std::string name;  // nvmlDeviceGetName, e.g. "NVIDIA H100 80GB HBM3"
  std::uint16_t pci_device_id = 0;
  std::string pci_bus_id;  // "00000000:36:00.0"
  std::int64_t memory_total_mib = 0;
  bool mig_capable = false;
  MigMode mig_current = MigMode::kDisabled;
  MigMode mig_pending = MigMode::kDisabled;
  const hw::GpuModel* model = nullptr;  // catalog model matched by PCI id or name; null if unknown
};

// One GPU-instance profile as the driver reports it (`nvidia-smi mig -lgip`). Drivers differ in
// names (GB200 1g.24gb became 1g.23gb; A100-80GB 7g.80gb vs 7g.79gb) and memory sizes, so these can
// disagree with the catalog's GiProfile of the same id.
struct GpuInstanceProfileInfo {
  int nvml_const = 0;  // the NVML_GPU_INSTANCE_PROFILE_* constant it was looked up by
  int id = 0;          // nvidia-smi profile ID
  std::string name;    // without "MIG ", e.g. "1g.10gb+me"
  // The driver gave no name (only the v1 struct): `name` was built as
  // "<slices>g.<GB>gb" + the constant's media suffix, with go-nvlib's GB rounding.
  bool name_derived = false;
  int slices = 0;  // compute slices
  int instance_count = 0;
  int sms = 0;
  std::int64_t memory_mib = 0;
  int copy_engines = 0;
  int decoders = 0;
  int encoders = 0;
  int jpegs = 0;
  int ofas = 0;
};

struct GpuInstanceInfo {
  int gpu = 0;
  int id = 0;          // GI id (0..14)
  int profile_id = 0;  // nvidia-smi profile ID
  int start = 0;       // placement, in placement units
  int size = 0;
};

struct ComputeInstanceInfo {
  int gpu = 0;
  int gi = 0;
  int id = 0;          // CI id within the GI (0..7)
  int profile_id = 0;  // CI profile id (NVML_COMPUTE_INSTANCE_PROFILE_* value)
  int start = 0;       // in compute slices of the GI
  int size = 0;
  std::string uuid;  // MIG device UUID ("MIG-…"), stable for the instance's life
};

struct ProcessInfo {
  std::uint32_t pid = 0;
  std::string name;
  std::int64_t used_memory_mib = 0;
  int gi = -1;  // -1 when MIG is off
  int ci = -1;
};

struct MemoryInfo {
  std::int64_t total_mib = 0;
  std::int64_t used_mib = 0;
  std::int64_t free_mib = 0;
};

// Health figures of one GPU (nvidia-smi -q's temperature, power, clocks, throttle and ECC
// sections). Every figure is optional: absent when this GPU or driver does not give it
// (NOT_SUPPORTED), never a made-up zero.
struct GpuTelemetry {
  std::optional<int> temperature_c;               // nvmlDeviceGetTemperature(GPU)
  std::optional<double> power_w;                  // nvmlDeviceGetPowerUsage
  std::optional<double> power_limit_w;            // nvmlDeviceGetEnforcedPowerLimit
  std::optional<int> sm_clock_mhz;                // nvmlDeviceGetClockInfo(SM)
  std::optional<int> memory_clock_mhz;            // nvmlDeviceGetClockInfo(MEM)
  std::optional<int> utilization_pct;             // nvmlDeviceGetUtilizationRates.gpu; not with MIG
  std::optional<int> memory_utilization_pct;      // .memory (time the memory was read or written)
  std::optional<std::uint64_t> throttle_reasons;  // kThrottle* bits (clocks-event reasons)
  std::optional<std::uint64_t> ecc_corrected;     // volatile ECC counts since the driver loaded
  std::optional<std::uint64_t> ecc_uncorrected;
  std::optional<int> remapped_rows_correctable;  // nvmlDeviceGetRemappedRows (A100 and later)
  std::optional<int> remapped_rows_uncorrectable;
  std::optional<bool> remap_pending;  // a remap waits for a GPU reset
  std::optional<bool> remap_failure;
};

// nvmlClocksEventReasons bits (NVML's "clocks throttle reasons").
inline constexpr std::uint64_t kThrottleGpuIdle = 0x1;
inline constexpr std::uint64_t kThrottleApplicationsClocks = 0x2;
inline constexpr std::uint64_t kThrottleSwPowerCap = 0x4;
inline constexpr std::uint64_t kThrottleHwSlowdown = 0x8;
inline constexpr std::uint64_t kThrottleSyncBoost = 0x10;
inline constexpr std::uint64_t kThrottleSwThermal = 0x20;
inline constexpr std::uint64_t kThrottleHwThermal = 0x40;
inline constexpr std::uint64_t kThrottleHwPowerBrake = 0x80;
// The reasons that mean the GPU is held back by heat or power (not idling or a clock setting).
inline constexpr std::uint64_t kThrottleThermalOrPower = kThrottleSwPowerCap | kThrottleHwSlowdown |
                                                         kThrottleSwThermal | kThrottleHwThermal |
                                                         kThrottleHwPowerBrake;

// SM activity over an interval, from NVML GPM (Hopper and later; nvmlGpmSampleGet for the whole
// GPU, nvmlGpmMigSampleGet for one GPU instance). Percentages 0-100 of the device's own SMs.
struct Activity {
  double sm_active_pct = 0;       // NVML_GPM_METRIC_SM_UTIL
  double sm_occupancy_pct = 0;    // NVML_GPM_METRIC_SM_OCCUPANCY
  double dram_bandwidth_pct = 0;  // NVML_GPM_METRIC_DRAM_BW_UTIL
  double interval_s = 0;          // between the two samples (0: the simulator's instant figure)
};

// A critical Xid error the driver reported (nvmlEventTypeXidCriticalError).
struct XidEvent {
  int gpu = 0;
  std::uint64_t xid = 0;
  std::optional<int> gi;  // the GPU instance it concerns, when the driver says
  std::optional<int> ci;
};

// Result of SetMigMode: the mode is set as pending; `applied` when it is already current.
struct MigModeChange {
  bool applied = false;
  int activation_code = 0;  // NVML activation status: 0, IN_USE (a client holds the GPU), ...
};

class Backend {
 public:
  virtual ~Backend() = default;

  // A short description for messages: "NVML (driver 550.90.07)" or "simulator (state.json)".
  virtual std::string Describe() const = 0;
  virtual absl::StatusOr<std::string> DriverVersion() = 0;

  virtual absl::StatusOr<std::vector<GpuInfo>> ListGpus() = 0;
  // Every GPU-instance profile the driver reports for this GPU, ordered by NVML constant.
  // NOT_SUPPORTED on GPUs without MIG, and while MIG mode is disabled: the driver answers
  // nvmlDeviceGetGpuInstanceProfileInfo(V) only with MIG enabled (mig-facts §4.1).
  virtual absl::StatusOr<std::vector<GpuInstanceProfileInfo>> ListGpuInstanceProfiles(int gpu) = 0;
  // All GPU instances of a GPU, ordered by GI id.
  virtual absl::StatusOr<std::vector<GpuInstanceInfo>> ListGpuInstances(int gpu) = 0;
  // All compute instances of a GI, ordered by CI id.
  virtual absl::StatusOr<std::vector<ComputeInstanceInfo>> ListComputeInstances(int gpu,
                                                                                int gi) = 0;

  // Creates a GI of `profile_id`; at `start` if given (NVML ...WithPlacement), else where the
  // driver chooses. Fails with INSUFFICIENT_RESOURCES when it does not fit, INVALID_ARGUMENT for a
  // placement the profile does not allow, NOT_SUPPORTED when MIG is off.
  virtual absl::StatusOr<GpuInstanceInfo> CreateGpuInstance(int gpu, int profile_id,
                                                            std::optional<int> start) = 0;
  // Creates a CI in GI `gi`; at `start` (compute slices) if given.
  virtual absl::StatusOr<ComputeInstanceInfo> CreateComputeInstance(int gpu, int gi,
                                                                    int ci_profile_id,
                                                                    std::optional<int> start) = 0;
  // IN_USE while the GI has compute instances or processes.
  virtual absl::Status DestroyGpuInstance(int gpu, int gi) = 0;
  // IN_USE while processes run on the CI.
  virtual absl::Status DestroyComputeInstance(int gpu, int gi, int ci) = 0;

  // Sets the MIG mode (pending until applied). Disabling with instances present is IN_USE.
  virtual absl::StatusOr<MigModeChange> SetMigMode(int gpu, MigMode mode) = 0;
  // Resets the GPU so a pending MIG mode takes effect; destroys all instances. IN_USE while any
  // process or client holds the GPU; NOT_SUPPORTED where the GPU cannot be reset (passthrough VM).
  virtual absl::Status ResetGpu(int gpu) = 0;

  // Compute processes on the GPU, with their GI/CI when MIG is on.
  virtual absl::StatusOr<std::vector<ProcessInfo>> ListProcesses(int gpu) = 0;
  // Memory of the whole GPU, or of one MIG device (gi and ci given).
  virtual absl::StatusOr<MemoryInfo> GetMemory(int gpu, std::optional<int> gi = std::nullopt,
                                               std::optional<int> ci = std::nullopt) = 0;
  // Non-process clients that hold the GPU and would block a reset (nvidia-persistenced, DCGM, the
  // display driver …), as far as the backend can tell.
  virtual absl::StatusOr<std::vector<std::string>> ListGpuHolders(int gpu) = 0;

  // Health figures (GpuTelemetry); each figure the GPU does not give is absent. A GPU that fell
  // off the bus fails with GPU_IS_LOST (as every other call on it does). The default answers
  // UNIMPLEMENTED.
  virtual absl::StatusOr<GpuTelemetry> GetTelemetry(int gpu);
  // SM activity of the whole GPU (no gi) or of one GPU instance, between the previous call for the
  // same device and this one. UNAVAILABLE on the first call for a device (one sample only);
  // NOT_SUPPORTED without GPM (before Hopper) or for an instance on drivers without MIG GPM. The
  // default answers UNIMPLEMENTED.
  virtual absl::StatusOr<Activity> SampleActivity(int gpu, std::optional<int> gi = std::nullopt);
  // Critical Xid events of every GPU since the previous call; never blocks. The first call starts
  // listening (events before it are not seen). The default answers UNIMPLEMENTED.
  virtual absl::StatusOr<std::vector<XidEvent>> TakeXidEvents();

  // Ends a GPU process (used by `apply --force` to drain an instance before destroying it). The
  // default sends SIGTERM, waits up to `grace_seconds` for the process to exit, then SIGKILL; the
  // simulator removes its simulated process instead. NotFound if there is no such process.
  virtual absl::Status TerminateProcess(std::uint32_t pid, int grace_seconds);
};

}  // namespace gpuslice::device
