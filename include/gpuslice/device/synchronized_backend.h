// gpuslice/device/synchronized_backend.h
//
// A device::Backend that many threads may share: every call runs under one lock, and a caller
// that needs several calls without others in between (a reconciler round: snapshot, plan,
// execute) holds Lock() around them. `serve` shares its machine's backend this way between the
// binder (called by API threads when slices are granted), the layout rounds of its tick and the
// metrics collector.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpuslice/device/backend.h"

namespace gpuslice::device {

class SynchronizedBackend final : public Backend {
 public:
  explicit SynchronizedBackend(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}

  // Holds the backend for a sequence of calls (the calls themselves may be made meanwhile by the
  // same thread; the lock is recursive).
  std::unique_lock<std::recursive_mutex> Lock() {
    return std::unique_lock<std::recursive_mutex>(mutex_);
  }

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

 private:
  std::shared_ptr<Backend> inner_;
  mutable std::recursive_mutex mutex_;
};

}  // namespace gpuslice::device
