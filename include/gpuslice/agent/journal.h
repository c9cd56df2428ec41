// gpuslice/agent/journal.h
//
// The apply journal: an append-only file of JSON lines written before and after every step of an
// apply (fsync'd), so that an apply interrupted at any point (crash, kill -9, power loss, an NVML
// error) is detected by the next run, which reports it and converges from the GPUs' actual state.
// One journal per machine (for the simulator: next to its state file).
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpuslice::agent {

struct InterruptedApply {
  std::string started;      // UTC time of the interrupted apply
  std::string description;  // e.g. "config all-balanced from mig.yaml"
  int steps_done = 0;
  int steps_total = 0;
  std::string last_step;  // text of the last step begun
};

class Journal {
 public:
  // Opens (creating if needed) the journal at `path` and reads whether the last apply finished.
  static absl::StatusOr<Journal> Open(const std::string& path);

  // The last apply recorded in the journal if it never finished.
  const std::optional<InterruptedApply>& interrupted() const { return interrupted_; }

  absl::Status Begin(const std::string& description, int total_steps);
  absl::Status StepStarted(int index, const std::string& text);
  absl::Status StepDone(int index, const std::string& text, const std::string& error);
  absl::Status End(bool ok, const std::string& summary);

  const std::string& path() const { return path_; }

 private:
  explicit Journal(std::string path) : path_(std::move(path)) {}
  absl::Status Append(const std::string& json_line);

  std::string path_;
  std::optional<InterruptedApply> interrupted_;
};

}  // namespace gpuslice::agent
