// gpuslice/device/synchronized_backend.h
//
// A device::Backend that many threads may share: every call runs under one lock, and a caller
// that needs several calls without others in between (a reconciler round: snapshot, plan,
// execute) holds Lock() around them. `serve` shares its machine's backend this way between the
// binder (called by API threads when slices are granted), the layout rounds of its tick and the
// metrics collector. A BackendWrapper (gpuslice/device/backend_wrapper.h) whose hook is the lock.
#pragma once

#include <memory>
#include <mutex>
#include <string_view>

#include "gpuslice/device/backend_wrapper.h"

namespace gpuslice::device {

class SynchronizedBackend final : public BackendWrapper {
 public:
  explicit SynchronizedBackend(std::shared_ptr<Backend> inner) : BackendWrapper(std::move(inner)) {}

  // Holds the backend for a sequence of calls (the calls themselves may be made meanwhile by the
  // same thread; the lock is recursive).
  std::unique_lock<std::recursive_mutex> Lock() {
    return std::unique_lock<std::recursive_mutex>(mutex_);
  }

 protected:
  Entry Enter(std::string_view) const override {
    return {absl::OkStatus(), std::unique_lock<std::recursive_mutex>(mutex_)};
  }

 private:
  mutable std::recursive_mutex mutex_;
};

}  // namespace gpuslice::device
