// gpuslice/agent/reconciler.h
//
// Brings a GPU to a desired MIG layout with the smallest change, safely:
//   * instances that already match the target stay (the largest such set that still lets the rest
//     of the target fit, preferring instances that have processes); only conflicting ones go;
//   * new instances are created at exact placements solved by the layout engine, never by trying
//     creation orders;
//   * an instance with processes is never destroyed silently: planning reports it as busy with its
//     processes, and execution refuses unless `force` (then the processes are terminated first);
//   * a MIG mode change that stays pending reports what holds the GPU;
//   * every step can be interrupted: planning starts from what is on the GPU now, so the next run
//     finishes the work, including GPU instances left without compute instances.
//
// PlanGpu is pure (a snapshot in, a plan out); Execute performs a plan through a device::Backend.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/hw/gpu_model.h"
#include "gpuslice/spec/mig_parted.h"

namespace gpuslice::agent {

// The desired state of one GPU.
struct GpuTarget {
  int gpu = 0;
  bool mig_enabled = false;
  std::vector<spec::DesiredGi> gis;  // ignored unless mig_enabled
  std::string source;                // where the target came from, for messages
};

// What is on a GPU now.
struct GpuSnapshot {
  device::GpuInfo info;
  std::vector<device::GpuInstanceInfo> gis;                   // ordered by GI id
  std::vector<std::vector<device::ComputeInstanceInfo>> cis;  // cis[i] belongs to gis[i]
  std::vector<device::ProcessInfo> processes;
  std::vector<std::string> holders;
};

// Reads a GPU's snapshot through the backend.
absl::StatusOr<GpuSnapshot> TakeSnapshot(device::Backend& backend, int gpu);

enum class StepKind {
  kSetMigMode,
  kResetGpu,
  kTerminateProcess,
  kDestroyComputeInstance,
  kDestroyGpuInstance,
  kCreateGpuInstance,
  kCreateComputeInstance,
};

struct Step {
  StepKind kind = StepKind::kCreateGpuInstance;
  int gpu = 0;
  int gi = -1;            // existing GI (destroy, or create a CI in a kept GI)
  int gi_from_step = -1;  // CreateComputeInstance in a GI created by that step of the plan
  int ci = -1;
  int profile_id = -1;  // GI or CI profile id
  int start = -1;       // placement start (GI units or CI slices)
  device::MigMode mode = device::MigMode::kDisabled;
  std::uint32_t pid = 0;
  std::string text;  // for progress and --dry-run
};

// An instance the plan must remove although processes run on it.
struct BusyInstance {
  int gi = -1;
  int ci = -1;           // -1: the processes are counted for the whole GI
  std::string instance;  // e.g. "3g.40gb@4 (GI 2)"
  std::vector<device::ProcessInfo> processes;
};

struct GpuPlan {
  int gpu = 0;
  std::string model;
  bool mode_change = false;      // SetMigMode (and possibly a reset) is needed
  bool instance_change = false;  // instances are created or destroyed
  std::vector<Step> steps;
  std::vector<BusyInstance> busy;
  int kept = 0;       // GPU instances that stay
  int destroyed = 0;  // GPU instances destroyed
  int created = 0;    // GPU instances created
  std::vector<std::string> notes;
  bool empty() const { return steps.empty(); }
};

struct PlanOptions {
  bool force = false;      // terminate processes on instances that must go
  int grace_seconds = 10;  // for TerminateProcess
};

// The plan for one GPU. Errors: FailedPrecondition when the target is impossible on this GPU (MIG
// asked of a GPU without MIG, a layout that does not fit); NotFound for an unknown model.
absl::StatusOr<GpuPlan> PlanGpu(const hw::GpuModel* model, const GpuSnapshot& now,
                                const GpuTarget& target, const PlanOptions& options);

// Called before and after each step (for progress output and the journal).
struct ExecuteHooks {
  std::function<void(const Step&, size_t index, size_t total)> before;
  std::function<void(const Step&, size_t index, size_t total, const absl::Status&)> after;
};

struct ExecuteOptions {
  bool skip_reset = false;  // leave a pending MIG mode pending instead of resetting the GPU
};

// Performs the plan's steps in order, stopping at the first failure. A mode change that stays
// pending (the reset is refused or skipped) fails with the GPU's holders and processes listed.
// REQUIRES: plan.busy is empty or the plan was made with force.
absl::Status Execute(device::Backend& backend, const GpuPlan& plan, const ExecuteOptions& options,
                     const ExecuteHooks& hooks);

// Why `now` does not match `target` (empty when it does): for `assert`.
std::vector<std::string> Differences(const hw::GpuModel* model, const GpuSnapshot& now,
                                     const GpuTarget& target);

// The snapshot's instances as DesiredGi (profile and CI indices, with starts), for `export`.
std::vector<spec::DesiredGi> CurrentGis(const hw::GpuModel& model, const GpuSnapshot& now);

}  // namespace gpuslice::agent
