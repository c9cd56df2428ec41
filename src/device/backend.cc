#include "gpuslice/device/backend.h"

#include <signal.h>
#include <time.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "gpuslice/device/host_actions.h"

namespace gpuslice::device {
namespace {

bool Alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

void SleepMs(long ms) {
  timespec delay{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&delay, nullptr);
}

}  // namespace

absl::Status Backend::TerminateProcess(std::uint32_t pid, int grace_seconds) {
  return SignalProcess(pid, grace_seconds);
}

absl::Status SignalProcess(std::uint32_t pid, int grace_seconds) {
  const auto target = static_cast<pid_t>(pid);
  if (target <= 1)
    return absl::InvalidArgumentError("refusing to signal pid " + std::to_string(pid));
  if (::kill(target, SIGTERM) != 0) {
    if (errno == ESRCH) return absl::NotFoundError("no process " + std::to_string(pid));
    return absl::PermissionDeniedError("cannot signal process " + std::to_string(pid) + ": " +
                                       std::strerror(errno));
  }
  for (long waited = 0; waited < grace_seconds * 1000L; waited += 100) {
    if (!Alive(target)) return absl::OkStatus();
    SleepMs(100);
  }
  if (Alive(target) && ::kill(target, SIGKILL) != 0 && errno != ESRCH) {
    return absl::PermissionDeniedError("cannot kill process " + std::to_string(pid) + ": " +
                                       std::strerror(errno));
  }
  return absl::OkStatus();
}

absl::StatusOr<GpuTelemetry> Backend::GetTelemetry(int) {
  return absl::UnimplementedError(Describe() + " gives no health figures");
}

absl::StatusOr<Activity> Backend::SampleActivity(int, std::optional<int>) {
  return absl::UnimplementedError(Describe() + " gives no SM activity");
}

absl::StatusOr<std::vector<XidEvent>> Backend::TakeXidEvents() {
  return absl::UnimplementedError(Describe() + " gives no Xid events");
}

}  // namespace gpuslice::device
