// gpuslice/device/sim_machine.h
//
// A simulated GPU machine that behaves like the NVIDIA driver for everything MIG
// (../shared/reference/mig-facts.md §0 and §4):
//   * MIG mode is two-phase: SetMigMode records a pending mode, which becomes current at once
//     when nothing holds the GPU (the driver resets it itself), otherwise it stays pending until a
//     ResetGpu succeeds. A reset is refused (IN_USE) while a process or a holder (e.g.
//     nvidia-persistenced) is on the GPU, and is NOT_SUPPORTED where the GPU cannot be reset
//     (passthrough VM). A reset destroys every instance.
//   * GPU instances are created at an explicit placement or, without one, where the driver's
//     default heuristic puts them (geometry::Shape::DefaultStart). Overlap, caps and media-engine
//     rules give INSUFFICIENT_RESOURCES; a placement the profile does not allow, INVALID_ARGUMENT.
//   * GI ids follow the placement (full 0, halves 1-2, quarters 3-6, eighths 7-14); CI ids are the
//     lowest free id of the GI; every CI gets a MIG UUID that stays for its life.
//   * Destroying a GI with compute instances or processes, or a CI with processes, is IN_USE.
//   * Profile ids are nvidia-smi ids; NVML constants are used only to look profiles up.
//   * Fault injection: every call is counted; a FaultRule makes call N, or the calls whose name
//     contains a text, fail with an NVML code or abort the process.
//
// SimState is plain data (serialised as JSON by gpuslice/device/sim_store.h). SimMachine applies
// the rules to one SimState; it is not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::device::sim {

struct SimCi {
  int id = 0;
  int profile_id = 0;
  int start = 0;
  int size = 0;
  std::string uuid;
};

struct SimGi {
  int id = 0;
  int profile_id = 0;
  int start = 0;
  int size = 0;
  std::vector<SimCi> cis;
};

struct SimProcess {
  std::uint32_t pid = 0;
  std::string name;
  std::int64_t used_mib = 0;
  int gi = -1;  // MIG on: the GI and CI it runs in
  int ci = -1;
  double sm_activity_pct = 60;  // how busy it keeps the SMs of its GPU or instance (0-100)
};

// Health figures of a simulated GPU. Figures without an override are derived from the load (the
// processes' sm_activity_pct): power, temperature, clocks, utilisation and GPM activity rise with
// it, and an idle GPU reports the GPU-idle throttle reason. Counters only move when set.
struct SimTelemetry {
  std::optional<int> temperature_c;    // override
  std::optional<double> power_w;       // override
  std::optional<int> utilization_pct;  // override (whole GPU, MIG off)
  std::uint64_t throttle_reasons = 0;  // reasons added to the derived ones (kThrottle* bits)
  std::uint64_t ecc_corrected = 0;
  std::uint64_t ecc_uncorrected = 0;
  int remapped_rows_correctable = 0;
  int remapped_rows_uncorrectable = 0;
  bool remap_pending = false;
  bool remap_failure = false;
  // Figures this GPU does not give (NOT_SUPPORTED), besides those its model never gives:
  // "temperature", "power", "clocks", "utilization", "throttle", "ecc", "remapped_rows", "gpm".
  std::vector<std::string> unsupported;
};

// A critical Xid error waiting to be taken (Backend::TakeXidEvents).
struct SimXid {
  int gpu = 0;
  std::uint64_t xid = 0;
  int gi = -1;  // -1: the whole GPU
  int ci = -1;
};

struct SimGpu {
  int index = 0;
  std::string model_id;  // catalog id
  std::string uuid;
  std::string name;
  std::uint16_t pci_device_id = 0;
  std::string bus_id;
  std::int64_t memory_total_mib = 0;
  bool mig_capable = false;
  MigMode mig_current = MigMode::kDisabled;
  MigMode mig_pending = MigMode::kDisabled;
  bool reset_supported = true;
  std::vector<SimGi> gis;  // ordered by GI id
  std::vector<SimProcess> processes;
  std::vector<std::string> holders;  // clients that block a reset
  SimTelemetry telemetry;
  bool lost = false;  // fell off the bus: every query on it answers GPU_IS_LOST
};

struct FaultRule {
  std::int64_t at_call = 0;  // fire on this call number (1-based, counted from when armed); 0 = any
  std::string match;         // fire on calls whose name contains this; "" = any
  int code = kNvmlUnknown;   // the NVML code the call fails with
  bool abort_process = false;
  int times = 1;  // how many times it fires; -1 = always
};

struct SimState {
  std::string driver_version = "580.65.06";
  std::vector<SimGpu> gpus;
  std::int64_t calls = 0;  // calls since the faults were armed
  std::vector<FaultRule> faults;
  std::uint64_t uuid_counter = 0;
  std::uint64_t seed = 1;
  std::vector<SimXid> xids;  // not yet taken
};

// Makes a machine from a fleet spec such as "2xH100-80GB,1xA100-40GB" or "H100,A30" (GPU models
// resolved through the catalog, in order). Errors name the unknown model and suggest others.
absl::StatusOr<SimState> NewMachine(const hw::Catalog& catalog, std::string_view spec,
                                    std::uint64_t seed = 1);

class SimMachine {
 public:
  // `state` and `catalog` must outlive the machine.
  SimMachine(SimState& state, const hw::Catalog& catalog);

  // Called just before an injected abort, so that a persistent store can save the state first
  // (the aborted call itself has not taken effect).
  void set_before_abort(std::function<void()> hook) { before_abort_ = std::move(hook); }

  // Counts one call named `call` and applies the fault rules: returns the NVML code of a rule that
  // fires (and the caller must then fail without changing anything), aborts the process for an
  // abort rule, else 0. Every public call of a backend goes through this first.
  int Enter(std::string_view call);

  int GpuCount() const { return static_cast<int>(state_.gpus.size()); }
  // The whole state, for simulation controls (fault rules, passthrough) and tests.
  SimState& state() { return state_; }
  const std::string& driver_version() const { return state_.driver_version; }
  // nullptr if out of range.
  const SimGpu* Gpu(int index) const;
  const hw::GpuModel* ModelOf(int gpu) const;
  const SimGi* Gi(int gpu, int gi) const;

  int SetMigMode(int gpu, MigMode mode, MigModeChange* change);
  int ResetGpu(int gpu);
  int CreateGi(int gpu, int profile_id, std::optional<int> start, int* gi_id);
  int CreateCi(int gpu, int gi, int ci_profile_id, std::optional<int> start, int* ci_id);
  int DestroyGi(int gpu, int gi);
  int DestroyCi(int gpu, int gi, int ci);
  int Memory(int gpu, std::optional<int> gi, std::optional<int> ci, MemoryInfo* out) const;
  // 0 for a GPU that exists and answers; INVALID_ARGUMENT out of range; GPU_IS_LOST when lost.
  int CheckGpu(int gpu) const;
  // Health figures: overrides, else derived from the load; absent where the model or the
  // GPU's `unsupported` list says so.
  int Telemetry(int gpu, GpuTelemetry* out) const;
  // GPM activity of the whole GPU (no gi) or of one GPU instance, as an instant figure.
  // NOT_SUPPORTED before Hopper or when "gpm" is unsupported; NOT_FOUND for an unknown GI.
  int SampleActivity(int gpu, std::optional<int> gi, Activity* out) const;
  // Moves the waiting Xid events to `out`.
  void TakeXids(std::vector<XidEvent>* out);

  // Simulation controls (not NVML): attach processes and holders to make GPUs "busy".
  // A process needs a CI when MIG is on (gi/ci given), and none when it is off.
  int AddProcess(int gpu, const SimProcess& process);
  int RemoveProcess(std::uint32_t pid);
  int AddHolder(int gpu, const std::string& name);
  int RemoveHolder(int gpu, const std::string& name);
  // Queues a critical Xid error on a GPU (gi/ci -1: the whole GPU).
  int InjectXid(int gpu, std::uint64_t xid, int gi, int ci);
  // The GPU falls off the bus (lost) or comes back.
  int SetLost(int gpu, bool lost);

 private:
  SimGpu* MutableGpu(int index);
  SimGi* MutableGi(int gpu, int gi);
  // How busy a GPU or one of its instances is (0-100) from its processes.
  double Load(const SimGpu& gpu, std::optional<int> gi) const;
  std::string NewUuid(std::string_view prefix);

  SimState& state_;
  const hw::Catalog& catalog_;
  std::function<void()> before_abort_;
};

}  // namespace gpuslice::device::sim
