// gpuslice/device/sim_backend.h
//
// device::Backend over a simulated machine (gpuslice/device/sim_machine.h): either in memory (for
// tests) or in a state file shared between processes (gpuslice/device/sim_store.h), which is what
// `--sim STATE_FILE` / GPUSLICE_SIM select on the command line. Fault rules stored in the state
// apply to every call; calls are named after the Backend methods ("CreateGpuInstance", ...).
#pragma once

#include <memory>
#include <string>

#include "gpuslice/device/backend.h"
#include "gpuslice/device/sim_machine.h"
#include "gpuslice/device/sim_store.h"

namespace gpuslice::device {

class SimBackend : public Backend {
 public:
  // A machine kept in memory only.
  SimBackend(sim::SimState state, const hw::Catalog& catalog);
  // A machine in a state file (see SimStore::Open for errors).
  static absl::StatusOr<std::unique_ptr<SimBackend>> OpenFile(const std::string& path,
                                                              const hw::Catalog& catalog);

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
  // Removes the simulated process (as if it exited).
  absl::Status TerminateProcess(std::uint32_t pid, int grace_seconds) override;

  // Runs `fn` on the machine under the store's lock (simulation controls such as adding a
  // process). `fn` returns an NVML code; the state is saved when it is 0 and `mutating`.
  absl::Status Control(const std::string& what, bool mutating,
                       const std::function<int(sim::SimMachine&)>& fn);
  // The current state (a copy).
  absl::StatusOr<sim::SimState> State();

 private:
  SimBackend(std::unique_ptr<sim::SimStore> store, const hw::Catalog& catalog);
  // Counts the call, applies faults, runs `fn`; saves the state when `mutating` and it succeeded
  // (or when fault counters moved).
  absl::Status Run(const char* call, bool mutating, const std::function<int(sim::SimMachine&)>& fn);
  // Run for a call on one GPU: INVALID_ARGUMENT out of range, GPU_IS_LOST on a lost GPU.
  absl::Status RunOnGpu(const char* call, int gpu, bool mutating,
                        const std::function<int(sim::SimMachine&)>& fn);

  std::unique_ptr<sim::SimStore> store_;  // null: in memory
  sim::SimState memory_state_;
  const hw::Catalog& catalog_;
};

}  // namespace gpuslice::device
