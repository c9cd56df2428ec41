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

  // Ends a GPU process (used by `apply --force` to drain an instance before destroying it). The
  // default sends SIGTERM, waits up to `grace_seconds` for the process to exit, then SIGKILL; the
  // simulator removes its simulated process instead. NotFound if there is no such process.
  virtual absl::Status TerminateProcess(std::uint32_t pid, int grace_seconds);
};

}  // namespace gpuslice::device
