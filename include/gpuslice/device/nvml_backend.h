// gpuslice/device/nvml_backend.h
//
// device::Backend over the real NVIDIA driver: libnvidia-ml.so.1 is loaded at run time with
// dlopen, so gpuslice builds and runs on machines without a driver (it then reports a clear error
// and points to the simulator). Every failed NVML call becomes an absl::Status carrying its NVML
// code (gpuslice/device/nvml_codes.h) and saying what was attempted.
//
// Behaviour matches SimBackend (the conformance suite runs both), with these NVML specifics:
//   * GI profiles are discovered with nvmlDeviceGetGpuInstanceProfileInfo over every
//     NVML_GPU_INSTANCE_PROFILE_* constant; profile ids in and out are nvidia-smi ids (info.id);
//   * ListGpuInstanceProfiles uses nvmlDeviceGetGpuInstanceProfileInfoV with the v3 struct, then
//     v2 when the driver answers ARGUMENT_VERSION_MISMATCH, then the v1 function when the library
//     lacks the V function (it is optional at load; FUNCTION_NOT_FOUND counts as lacking it); v1
//     has no names, so they are derived (GpuInstanceProfileInfo::name_derived);
//   * a CI's MIG UUID comes from the MIG device handle with that (GI, CI) pair;
//   * ResetGpu (after checking the GPU exists) and TerminateProcess go to the injected HostActions
//     (gpuslice/device/host_actions.h): by default HostActionsFor(library), i.e. the test
//     library's `gpusliceTestResetGpu` / `gpusliceTestTerminateProcess` when the library exports
//     them, else `nvidia-smi --gpu-reset -i N` (NVML has no public reset) and signals;
//   * health figures (GetTelemetry) come from optional functions: a figure whose function the
//     library lacks, or that the GPU answers NOT_SUPPORTED (or any error but GPU_IS_LOST), is
//     absent; GPU_IS_LOST fails the call. Throttle reasons come from
//     nvmlDeviceGetCurrentClocksEventReasons, else the older ...ClocksThrottleReasons;
//   * SampleActivity keeps the previous GPM sample of each (GPU, GI) with its time: the first call
//     for a device takes one and answers UNAVAILABLE; each later call computes SM_UTIL,
//     SM_OCCUPANCY and DRAM_BW_UTIL between the kept sample and a new one, which replaces it.
//     GPM support is asked once per GPU (NOT_SUPPORTED before Hopper); MIG instances are sampled
//     with nvmlGpmMigSampleGet;
//   * TakeXidEvents creates an event set on its first call and registers every GPU for Xid
//     critical errors (GPUs that answer NOT_SUPPORTED or GPU_IS_LOST are left out); every call
//     drains the set without waiting;
//   * ListGpus lists a GPU that fell off the bus (GPU_IS_LOST) with what could still be read, so
//     that the other GPUs stay visible; every call on that GPU then fails with GPU_IS_LOST;
//   * ListGpuHolders cannot ask NVML: it scans /proc/*/comm for nvidia-persistenced,
//     nv-hostengine, dcgm*, nvsm* and nv-fabricmanager, and reports the nvidia_drm module when
//     /sys/module/nvidia_drm exists. These are machine-wide, not per GPU.
//
// The library is initialised (nvmlInit_v2) by Load and shut down (nvmlShutdown) by the destructor,
// after it freed the GPM samples and the event set.
// Not thread-safe (like every Backend); NVML itself is, so several NvmlBackends may coexist.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpuslice/device/backend.h"
#include "gpuslice/device/host_actions.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::device {

namespace nvml {
struct Api;
struct nvmlDevice_st;
struct nvmlEventSet_st;
struct nvmlGpmSample_st;
}  // namespace nvml

class NvmlBackend : public Backend {
 public:
  // Environment variable that names the library to load instead of libnvidia-ml.so.1.
  static constexpr char kLibraryEnv[] = "GPUSLICE_NVML_LIBRARY";
  static constexpr char kDefaultLibrary[] = "libnvidia-ml.so.1";

  // Loads `library` (default: $GPUSLICE_NVML_LIBRARY, else libnvidia-ml.so.1), resolves every NVML
  // function gpuslice uses and initialises NVML. Errors: Unavailable when the library cannot be
  // loaded (with a hint to use --sim); FUNCTION_NOT_FOUND naming a missing function (driver too
  // old); the nvmlInit_v2 code (e.g. DRIVER_NOT_LOADED). `catalog` must outlive the backend.
  // `actions` does resets and terminations; nullptr: HostActionsFor(library).
  static absl::StatusOr<std::unique_ptr<NvmlBackend>> Load(
      const hw::Catalog& catalog, std::string library = "",
      std::unique_ptr<HostActions> actions = nullptr);
  // Whether `library` (default as for Load) can be loaded at all: a machine with a driver
  // library whose NVML then fails is not a machine without a driver.
  static bool LibraryLoadable(std::string library = "");
  ~NvmlBackend() override;
  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  std::string Describe() const override;
  absl::StatusOr<std::string> DriverVersion() override;
  absl::StatusOr<std::vector<GpuInfo>> ListGpus() override;
  absl::StatusOr<std::vector<GpuInstanceProfileInfo>> ListGpuInstanceProfiles(int gpu) override;
  absl::StatusOr<std::vector<GpuInstanceInfo>> ListGpuInstances(int gpu) override;
  absl::StatusOr<std::vector<ComputeInstanceInfo>> ListComputeInstances(int gpu, int gi) override;
  absl::StatusOr<GpuInstanceInfo> CreateGpuInstance(int gpu, int profile_id,
                                                    std::optional<int> start) override;
  absl::StatusOr<ComputeInstanceInfo> CreateComputeInstance(int gpu, int gi, int ci_profile_id,
                                                            std::optional<int> start) override;
  absl::Status DestroyGpuInstance(int gpu, int gi) override;
  absl::Status DestroyComputeInstance(int gpu, int gi, int ci) override;
  absl::StatusOr<MigModeChange> SetMigMode(int gpu, MigMode mode) override;
  absl::Status ResetGpu(int gpu) override;
  absl::StatusOr<std::vector<ProcessInfo>> ListProcesses(int gpu) override;
  absl::StatusOr<MemoryInfo> GetMemory(int gpu, std::optional<int> gi,
                                       std::optional<int> ci) override;
  absl::StatusOr<std::vector<std::string>> ListGpuHolders(int gpu) override;
  absl::StatusOr<GpuTelemetry> GetTelemetry(int gpu) override;
  absl::StatusOr<Activity> SampleActivity(int gpu, std::optional<int> gi) override;
  absl::StatusOr<std::vector<XidEvent>> TakeXidEvents() override;
  // The injected HostActions: on the real driver, Backend's default (SIGTERM, then SIGKILL); on the
  // test NVML library, whose processes are simulated, its gpusliceTestTerminateProcess hook.
  absl::Status TerminateProcess(std::uint32_t pid, int grace_seconds) override;

  // The path given to dlopen.
  const std::string& library() const { return library_; }
  // For tests: where ListGpuHolders looks for processes ("/proc") and kernel modules
  // ("/sys/module").
  void SetHostRoots(std::string proc_root, std::string sys_module_root);

 private:
  NvmlBackend(const hw::Catalog& catalog, std::string library, void* handle,
              std::unique_ptr<nvml::Api> api, std::unique_ptr<HostActions> actions);

  // The GPM sample a device's previous SampleActivity took, and when.
  struct GpmSample {
    nvml::nvmlGpmSample_st* sample = nullptr;
    std::chrono::steady_clock::time_point taken;
  };

  const hw::Catalog& catalog_;
  std::string library_;
  void* handle_ = nullptr;  // from dlopen
  std::unique_ptr<nvml::Api> api_;
  std::unique_ptr<HostActions> actions_;
  bool initialized_ = false;
  std::string driver_version_;  // cached for Describe()
  std::string proc_root_ = "/proc";
  std::string sys_module_root_ = "/sys/module";
  std::map<int, bool> gpm_supported_;  // by GPU: nvmlGpmQueryDeviceSupport's answer
  std::map<std::pair<int, int>, GpmSample> gpm_samples_;  // by (GPU, GI id or -1)
  nvml::nvmlEventSet_st* event_set_ = nullptr;  // Xid events, from the first TakeXidEvents
  std::vector<std::pair<nvml::nvmlDevice_st*, int>> event_gpus_;  // handle -> index
};

}  // namespace gpuslice::device
