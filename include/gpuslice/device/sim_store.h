// gpuslice/device/sim_store.h
//
// The simulated machine's state file, shared by every process that touches it (`gpuslice apply
// --sim F`, then `gpuslice assert --sim F`, the test NVML library, tests). Each access takes an
// exclusive lock on F.lock (flock), rereads F if another process changed it, and writes F back
// atomically (temporary file + rename) when the state changed, so a simulated machine survives
// process restarts and crashes like a real one.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuslice/device/sim_machine.h"

namespace gpuslice::device::sim {

// JSON form of a SimState (versioned; unknown fields are errors).
std::string ToJson(const SimState& state);
absl::StatusOr<SimState> FromJson(std::string_view text, std::string_view origin);

class SimStore {
 public:
  // Opens an existing state file. NotFound if it does not exist (create it with
  // `gpuslice sim create`), InvalidArgument if it is not a simulator state.
  static absl::StatusOr<std::unique_ptr<SimStore>> Open(const std::string& path);
  // Writes a new state file; fails with AlreadyExists unless `overwrite`.
  static absl::Status Create(const std::string& path, const SimState& state, bool overwrite);

  // Runs `fn` on the current state while holding the lock. `fn` returns whether it changed the
  // state; if so the file is rewritten before the lock is released. `fn` may also call `save` to
  // write the state immediately (used before an injected abort).
  absl::Status Update(
      const std::function<bool(SimState& state, const std::function<void()>& save)>& fn);
  // A copy of the current state.
  absl::StatusOr<SimState> Read();

  const std::string& path() const { return path_; }
  ~SimStore();
  SimStore(const SimStore&) = delete;
  SimStore& operator=(const SimStore&) = delete;

 private:
  explicit SimStore(std::string path) : path_(std::move(path)) {}
  // The lock file's descriptor, opened once and kept (each call only flocks it); -1 on failure.
  int LockFd();
  absl::Status LoadIfChanged();
  absl::Status Save();

  std::string path_;
  SimState state_;
  bool loaded_ = false;
  std::timespec mtime_{};
  long long size_ = -1;
  unsigned long long inode_ = 0;
  int lock_fd_ = -1;
};

}  // namespace gpuslice::device::sim
