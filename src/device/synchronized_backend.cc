#include "gpuslice/device/synchronized_backend.h"

namespace gpuslice::device {

using Guard = std::lock_guard<std::recursive_mutex>;

std::string SynchronizedBackend::Describe() const {
  Guard guard(mutex_);
  return inner_->Describe();
}
absl::StatusOr<std::string> SynchronizedBackend::DriverVersion() {
  Guard guard(mutex_);
  return inner_->DriverVersion();
}
absl::StatusOr<std::vector<GpuInfo>> SynchronizedBackend::ListGpus() {
  Guard guard(mutex_);
  return inner_->ListGpus();
}
absl::StatusOr<std::vector<GpuInstanceProfileInfo>> SynchronizedBackend::ListGpuInstanceProfiles(
    int gpu) {
  Guard guard(mutex_);
  return inner_->ListGpuInstanceProfiles(gpu);
}
absl::StatusOr<std::vector<GpuInstanceInfo>> SynchronizedBackend::ListGpuInstances(int gpu) {
  Guard guard(mutex_);
  return inner_->ListGpuInstances(gpu);
}
absl::StatusOr<std::vector<ComputeInstanceInfo>> SynchronizedBackend::ListComputeInstances(int gpu,
                                                                                           int gi) {
  Guard guard(mutex_);
  return inner_->ListComputeInstances(gpu, gi);
}
absl::StatusOr<GpuInstanceInfo> SynchronizedBackend::CreateGpuInstance(int gpu, int profile_id,
                                                                       std::optional<int> start) {
  Guard guard(mutex_);
  return inner_->CreateGpuInstance(gpu, profile_id, start);
}
absl::StatusOr<ComputeInstanceInfo> SynchronizedBackend::CreateComputeInstance(
    int gpu, int gi, int ci_profile_id, std::optional<int> start) {
  Guard guard(mutex_);
  return inner_->CreateComputeInstance(gpu, gi, ci_profile_id, start);
}
absl::Status SynchronizedBackend::DestroyGpuInstance(int gpu, int gi) {
  Guard guard(mutex_);
  return inner_->DestroyGpuInstance(gpu, gi);
}
absl::Status SynchronizedBackend::DestroyComputeInstance(int gpu, int gi, int ci) {
  Guard guard(mutex_);
  return inner_->DestroyComputeInstance(gpu, gi, ci);
}
absl::StatusOr<MigModeChange> SynchronizedBackend::SetMigMode(int gpu, MigMode mode) {
  Guard guard(mutex_);
  return inner_->SetMigMode(gpu, mode);
}
absl::Status SynchronizedBackend::ResetGpu(int gpu) {
  Guard guard(mutex_);
  return inner_->ResetGpu(gpu);
}
absl::StatusOr<std::vector<ProcessInfo>> SynchronizedBackend::ListProcesses(int gpu) {
  Guard guard(mutex_);
  return inner_->ListProcesses(gpu);
}
absl::StatusOr<MemoryInfo> SynchronizedBackend::GetMemory(int gpu, std::optional<int> gi,
                                                          std::optional<int> ci) {
  Guard guard(mutex_);
  return inner_->GetMemory(gpu, gi, ci);
}
absl::StatusOr<std::vector<std::string>> SynchronizedBackend::ListGpuHolders(int gpu) {
  Guard guard(mutex_);
  return inner_->ListGpuHolders(gpu);
}
absl::StatusOr<GpuTelemetry> SynchronizedBackend::GetTelemetry(int gpu) {
  Guard guard(mutex_);
  return inner_->GetTelemetry(gpu);
}
absl::StatusOr<Activity> SynchronizedBackend::SampleActivity(int gpu, std::optional<int> gi) {
  Guard guard(mutex_);
  return inner_->SampleActivity(gpu, gi);
}
absl::StatusOr<std::vector<XidEvent>> SynchronizedBackend::TakeXidEvents() {
  Guard guard(mutex_);
  return inner_->TakeXidEvents();
}
absl::Status SynchronizedBackend::TerminateProcess(std::uint32_t pid, int grace_seconds) {
  Guard guard(mutex_);
  return inner_->TerminateProcess(pid, grace_seconds);
}

}  // namespace gpuslice::device
