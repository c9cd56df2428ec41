#include "gpuslice/device/backend_wrapper.h"

namespace gpuslice::device {

// Runs the hook for `call`; returns its status when not OK, else the inner backend's answer to
// `expr` (evaluated while the hook's lock, if any, is held).
#define GPUSLICE_FORWARD(call, expr)             \
  do {                                           \
    const Entry entry = Enter(call);             \
    if (!entry.status.ok()) return entry.status; \
    return (expr);                               \
  } while (false)

BackendWrapper::Entry BackendWrapper::Enter(std::string_view) const { return {}; }

std::string BackendWrapper::Describe() const {
  const Entry entry = Enter("Describe");
  return inner_->Describe();
}
absl::StatusOr<std::string> BackendWrapper::DriverVersion() {
  GPUSLICE_FORWARD("DriverVersion", inner_->DriverVersion());
}
absl::StatusOr<std::vector<GpuInfo>> BackendWrapper::ListGpus() {
  GPUSLICE_FORWARD("ListGpus", inner_->ListGpus());
}
absl::StatusOr<std::vector<GpuInstanceProfileInfo>> BackendWrapper::ListGpuInstanceProfiles(
    int gpu) {
  GPUSLICE_FORWARD("ListGpuInstanceProfiles", inner_->ListGpuInstanceProfiles(gpu));
}
absl::StatusOr<std::vector<GpuInstanceInfo>> BackendWrapper::ListGpuInstances(int gpu) {
  GPUSLICE_FORWARD("ListGpuInstances", inner_->ListGpuInstances(gpu));
}
absl::StatusOr<std::vector<ComputeInstanceInfo>> BackendWrapper::ListComputeInstances(int gpu,
                                                                                      int gi) {
  GPUSLICE_FORWARD("ListComputeInstances", inner_->ListComputeInstances(gpu, gi));
}
absl::StatusOr<GpuInstanceInfo> BackendWrapper::CreateGpuInstance(int gpu, int profile_id,
                                                                  std::optional<int> start) {
  GPUSLICE_FORWARD("CreateGpuInstance", inner_->CreateGpuInstance(gpu, profile_id, start));
}
absl::StatusOr<ComputeInstanceInfo> BackendWrapper::CreateComputeInstance(
    int gpu, int gi, int ci_profile_id, std::optional<int> start) {
  GPUSLICE_FORWARD("CreateComputeInstance",
                   inner_->CreateComputeInstance(gpu, gi, ci_profile_id, start));
}
absl::Status BackendWrapper::DestroyGpuInstance(int gpu, int gi) {
  GPUSLICE_FORWARD("DestroyGpuInstance", inner_->DestroyGpuInstance(gpu, gi));
}
absl::Status BackendWrapper::DestroyComputeInstance(int gpu, int gi, int ci) {
  GPUSLICE_FORWARD("DestroyComputeInstance", inner_->DestroyComputeInstance(gpu, gi, ci));
}
absl::StatusOr<MigModeChange> BackendWrapper::SetMigMode(int gpu, MigMode mode) {
  GPUSLICE_FORWARD("SetMigMode", inner_->SetMigMode(gpu, mode));
}
absl::Status BackendWrapper::ResetGpu(int gpu) {
  GPUSLICE_FORWARD("ResetGpu", inner_->ResetGpu(gpu));
}
absl::StatusOr<std::vector<ProcessInfo>> BackendWrapper::ListProcesses(int gpu) {
  GPUSLICE_FORWARD("ListProcesses", inner_->ListProcesses(gpu));
}
absl::StatusOr<MemoryInfo> BackendWrapper::GetMemory(int gpu, std::optional<int> gi,
                                                     std::optional<int> ci) {
  GPUSLICE_FORWARD("GetMemory", inner_->GetMemory(gpu, gi, ci));
}
absl::StatusOr<std::vector<std::string>> BackendWrapper::ListGpuHolders(int gpu) {
  GPUSLICE_FORWARD("ListGpuHolders", inner_->ListGpuHolders(gpu));
}
absl::StatusOr<GpuTelemetry> BackendWrapper::GetTelemetry(int gpu) {
  GPUSLICE_FORWARD("GetTelemetry", inner_->GetTelemetry(gpu));
}
absl::StatusOr<Activity> BackendWrapper::SampleActivity(int gpu, std::optional<int> gi) {
  GPUSLICE_FORWARD("SampleActivity", inner_->SampleActivity(gpu, gi));
}
absl::StatusOr<std::vector<XidEvent>> BackendWrapper::TakeXidEvents() {
  GPUSLICE_FORWARD("TakeXidEvents", inner_->TakeXidEvents());
}
absl::Status BackendWrapper::TerminateProcess(std::uint32_t pid, int grace_seconds) {
  GPUSLICE_FORWARD("TerminateProcess", inner_->TerminateProcess(pid, grace_seconds));
}

#undef GPUSLICE_FORWARD

}  // namespace gpuslice::device
