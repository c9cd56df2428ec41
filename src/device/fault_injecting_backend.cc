#include "gpuslice/device/fault_injecting_backend.h"

#include "absl/strings/str_cat.h"
#include "gpuslice/device/nvml_codes.h"

namespace gpuslice::device {

absl::Status FaultInjectingBackend::Inject(InjectedFault fault) {
  if (fault.code == kNvmlSuccess) {
    return absl::InvalidArgumentError("an injected fault needs an NVML error code, not success");
  }
  if (fault.times == 0 || fault.times < -1) {
    return absl::InvalidArgumentError("an injected fault fires at least once (times >= 1 or -1)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  faults_.push_back(std::move(fault));
  return absl::OkStatus();
}

void FaultInjectingBackend::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.clear();
  calls_ = 0;
  injected_ = 0;
}

std::int64_t FaultInjectingBackend::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

std::int64_t FaultInjectingBackend::injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return injected_;
}

BackendWrapper::Entry FaultInjectingBackend::Enter(std::string_view call) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::int64_t number = ++calls_;
  for (InjectedFault& fault : faults_) {
    if (fault.times == 0) continue;
    if (call.find(fault.match) == std::string_view::npos) continue;
    if (fault.at_call != 0 && fault.at_call != number) continue;
    if (fault.times > 0) --fault.times;
    ++injected_;
    return {NvmlError(fault.code, absl::StrCat(std::string(call), " (injected)")), {}};
  }
  return {};
}

}  // namespace gpuslice::device
