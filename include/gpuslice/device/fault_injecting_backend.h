// gpuslice/device/fault_injecting_backend.h
//
// Failures injected over any device::Backend (the simulator or NVML), for tests and for trying
// how gpuslice behaves when the driver fails part-way: a BackendWrapper whose hook answers a call
// with an NVML error (gpuslice/device/nvml_codes.h) when a rule matches, without calling the inner
// backend, so the failed call changes nothing. The simulator has the same rules in its state
// file (`gpuslice sim fault`); these work over the real driver too.
//
// Rules, in the order injected; the first that fires answers the call:
//   * `match`: calls whose Backend method name contains it ("" = every call);
//   * `at_call`: only the call with this number (1-based, counted over every call since the
//     backend was made or Clear()ed); 0 = any matching call;
//   * `times`: how often the rule fires before it is spent; -1 = always.
// Thread-safe (the rules and the count are under a lock of their own; the inner backend's own
// rules apply to it).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gpuslice/device/backend_wrapper.h"

namespace gpuslice::device {

struct InjectedFault {
  std::string match;
  int code = 0;  // the NVML error code to answer with (not success)
  std::int64_t at_call = 0;
  int times = 1;
};

class FaultInjectingBackend final : public BackendWrapper {
 public:
  explicit FaultInjectingBackend(std::shared_ptr<Backend> inner)
      : BackendWrapper(std::move(inner)) {}

  // InvalidArgument for a success code or times == 0.
  absl::Status Inject(InjectedFault fault);
  // Drops every rule and restarts the call count.
  void Clear();
  // Calls seen since construction or Clear(), failed ones included.
  std::int64_t calls() const;
  // Calls answered by an injected fault.
  std::int64_t injected() const;

 protected:
  Entry Enter(std::string_view call) const override;

 private:
  mutable std::mutex mu_;
  mutable std::vector<InjectedFault> faults_;
  mutable std::int64_t calls_ = 0;
  mutable std::int64_t injected_ = 0;
};

}  // namespace gpuslice::device
