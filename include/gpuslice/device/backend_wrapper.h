// gpuslice/device/backend_wrapper.h
//
// A device::Backend that forwards every call to another one (the inner backend), with one hook
// around each call, so that a wrapper writes only what it adds:
//   * Enter(call) runs first, with the name of the Backend method ("CreateGpuInstance", ...);
//   * a non-OK status from it is the call's answer, and the inner backend is not called;
//   * the lock it may return is held until the inner call has returned.
// Describe() ignores the status (it answers a string). Wrappers: SynchronizedBackend (one lock
// for every call), FaultInjectingBackend (failures injected over any backend, simulated or NVML).
// Thread-safety is the wrapper's and the inner backend's.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpuslice/device/backend.h"

namespace gpuslice::device {

class BackendWrapper : public Backend {
 public:
  // REQUIRES: inner != nullptr.
  explicit BackendWrapper(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}

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
  absl::Status TerminateProcess(std::uint32_t pid, int grace_seconds) override;

 protected:
  struct Entry {
    absl::Status status;                          // not OK: the call's answer
    std::unique_lock<std::recursive_mutex> lock;  // held during the inner call, if owned
  };
  // The hook; the default lets every call through.
  virtual Entry Enter(std::string_view call) const;
  Backend& inner() const { return *inner_; }

 private:
  std::shared_ptr<Backend> inner_;
};

}  // namespace gpuslice::device
