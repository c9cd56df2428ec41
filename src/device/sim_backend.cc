#include "gpuslice/device/sim_backend.h"

#include "gpuslice/device/nvml_codes.h"

namespace gpuslice::device {

using sim::SimMachine;
using sim::SimState;

namespace {

// NVML_GPU_INSTANCE_PROFILE_* constants run from 0x00 to 0x11.
constexpr int kGpuInstanceProfileConstants = 0x12;

}  // namespace

SimBackend::SimBackend(SimState state, const hw::Catalog& catalog)
    : memory_state_(std::move(state)), catalog_(catalog) {}

SimBackend::SimBackend(std::unique_ptr<sim::SimStore> store, const hw::Catalog& catalog)
    : store_(std::move(store)), catalog_(catalog) {}

absl::StatusOr<std::unique_ptr<SimBackend>> SimBackend::OpenFile(const std::string& path,
                                                                 const hw::Catalog& catalog) {
  absl::StatusOr<std::unique_ptr<sim::SimStore>> store = sim::SimStore::Open(path);
  if (!store.ok()) return store.status();
  return std::unique_ptr<SimBackend>(new SimBackend(*std::move(store), catalog));
}

std::string SimBackend::Describe() const {
  return store_ ? "simulator (" + store_->path() + ")" : "simulator (in memory)";
}

absl::Status SimBackend::Run(const char* call, bool mutating,
                             const std::function<int(SimMachine&)>& fn) {
  int code = kNvmlSuccess;
  auto body = [&](SimState& state, const std::function<void()>& save) {
    const std::int64_t calls_before = state.calls;
    SimMachine machine(state, catalog_);
    machine.set_before_abort(save);
    code = machine.Enter(call);
    if (code == kNvmlSuccess) code = fn(machine);
    return (mutating && code == kNvmlSuccess) || state.calls != calls_before;
  };
  if (store_) {
    if (absl::Status status = store_->Update(body); !status.ok()) return status;
  } else {
    body(memory_state_, [] {});
  }
  if (code != kNvmlSuccess) return NvmlError(code, call);
  return absl::OkStatus();
}

absl::Status SimBackend::RunOnGpu(const char* call, int gpu, bool mutating,
                                  const std::function<int(SimMachine&)>& fn) {
  return Run(call, mutating, [&](SimMachine& machine) {
    const int code = machine.CheckGpu(gpu);
    return code != kNvmlSuccess ? code : fn(machine);
  });
}

absl::Status SimBackend::Control(const std::string& what, bool mutating,
                                 const std::function<int(SimMachine&)>& fn) {
  int code = kNvmlSuccess;
  auto body = [&](SimState& state, const std::function<void()>&) {
    SimMachine machine(state, catalog_);
    code = fn(machine);
    return mutating && code == kNvmlSuccess;
  };
  if (store_) {
    if (absl::Status status = store_->Update(body); !status.ok()) return status;
  } else {
    body(memory_state_, [] {});
  }
  if (code != kNvmlSuccess) return NvmlError(code, what);
  return absl::OkStatus();
}

absl::StatusOr<SimState> SimBackend::State() {
  if (store_) return store_->Read();
  return memory_state_;
}

absl::StatusOr<std::string> SimBackend::DriverVersion() {
  std::string version;
  absl::Status status = Run("DriverVersion", false, [&](SimMachine& machine) {
    version = machine.driver_version();
    return static_cast<int>(kNvmlSuccess);
  });
  if (!status.ok()) return status;
  return version;
}

absl::StatusOr<std::vector<GpuInfo>> SimBackend::ListGpus() {
  std::vector<GpuInfo> gpus;
  absl::Status status = Run("ListGpus", false, [&](SimMachine& machine) {
    for (int i = 0; i < machine.GpuCount(); ++i) {
      const sim::SimGpu& gpu = *machine.Gpu(i);
      GpuInfo info;
      info.index = gpu.index;
      info.uuid = gpu.uuid;
      info.name = gpu.name;
      info.pci_device_id = gpu.pci_device_id;
      info.pci_bus_id = gpu.bus_id;
      info.memory_total_mib = gpu.memory_total_mib;
      info.mig_capable = gpu.mig_capable;
      info.mig_current = gpu.mig_current;
      info.mig_pending = gpu.mig_pending;
      info.model = machine.ModelOf(i);
      gpus.push_back(std::move(info));
    }
    return kNvmlSuccess;
  });
  if (!status.ok()) return status;
  return gpus;
}

absl::StatusOr<std::vector<GpuInstanceProfileInfo>> SimBackend::ListGpuInstanceProfiles(int gpu) {
  std::vector<GpuInstanceProfileInfo> out;
  absl::Status status = RunOnGpu("ListGpuInstanceProfiles", gpu, false, [&](SimMachine& machine) {
    const sim::SimGpu* g = machine.Gpu(gpu);
    if (g == nullptr) return static_cast<int>(kNvmlInvalidArgument);
    const hw::GpuModel* model = machine.ModelOf(gpu);
    if (!g->mig_capable || g->mig_current != MigMode::kEnabled || model == nullptr || !model->mig) {
      return static_cast<int>(kNvmlNotSupported);
    }
    // Like the driver: one answer per NVML constant, the first catalog profile with it.
    for (int constant = 0; constant < kGpuInstanceProfileConstants; ++constant) {
      for (const hw::GiProfile& profile : model->mig->profiles) {
        if (profile.nvml_const != constant) continue;
        GpuInstanceProfileInfo info;
        info.nvml_const = constant;
        info.id = profile.smi_id;
        info.name = profile.name;
        info.slices = profile.compute_slices;
        info.instance_count = profile.max_instances;
        info.sms = profile.sms;
        info.memory_mib = profile.memory_mib;
        info.copy_engines = profile.engines.copy;
        info.decoders = profile.engines.decoder;
        info.encoders = profile.engines.encoder;
        info.jpegs = profile.engines.jpeg;
        info.ofas = profile.engines.ofa;
        out.push_back(std::move(info));
        break;
      }
    }
    return static_cast<int>(kNvmlSuccess);
  });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::vector<GpuInstanceInfo>> SimBackend::ListGpuInstances(int gpu) {
  std::vector<GpuInstanceInfo> out;
  absl::Status status = RunOnGpu("ListGpuInstances", gpu, false, [&](SimMachine& machine) {
    const sim::SimGpu* g = machine.Gpu(gpu);
    if (g == nullptr) return static_cast<int>(kNvmlInvalidArgument);
    if (!g->mig_capable || g->mig_current != MigMode::kEnabled)
      return static_cast<int>(kNvmlNotSupported);
    for (const sim::SimGi& gi : g->gis)
      out.push_back({gpu, gi.id, gi.profile_id, gi.start, gi.size});
    return static_cast<int>(kNvmlSuccess);
  });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::vector<ComputeInstanceInfo>> SimBackend::ListComputeInstances(int gpu, int gi) {
  std::vector<ComputeInstanceInfo> out;
  absl::Status status = RunOnGpu("ListComputeInstances", gpu, false, [&](SimMachine& machine) {
    if (machine.Gpu(gpu) == nullptr) return static_cast<int>(kNvmlInvalidArgument);
    const sim::SimGi* instance = machine.Gi(gpu, gi);
    if (instance == nullptr) return static_cast<int>(kNvmlNotFound);
    for (const sim::SimCi& ci : instance->cis) {
      out.push_back({gpu, gi, ci.id, ci.profile_id, ci.start, ci.size, ci.uuid});
    }
    return static_cast<int>(kNvmlSuccess);
  });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<GpuInstanceInfo> SimBackend::CreateGpuInstance(int gpu, int profile_id,
                                                              std::optional<int> start) {
  GpuInstanceInfo info;
  absl::Status status = RunOnGpu("CreateGpuInstance", gpu, true, [&](SimMachine& machine) {
    int id = 0;
    const int code = machine.CreateGi(gpu, profile_id, start, &id);
    if (code != kNvmlSuccess) return code;
    const sim::SimGi& gi = *machine.Gi(gpu, id);
    info = {gpu, gi.id, gi.profile_id, gi.start, gi.size};
    return code;
  });
  if (!status.ok()) return status;
  return info;
}

absl::StatusOr<ComputeInstanceInfo> SimBackend::CreateComputeInstance(int gpu, int gi,
                                                                      int ci_profile_id,
                                                                      std::optional<int> start) {
  ComputeInstanceInfo info;
  absl::Status status = RunOnGpu("CreateComputeInstance", gpu, true, [&](SimMachine& machine) {
    int id = 0;
    const int code = machine.CreateCi(gpu, gi, ci_profile_id, start, &id);
    if (code != kNvmlSuccess) return code;
    for (const sim::SimCi& ci : machine.Gi(gpu, gi)->cis) {
      if (ci.id == id) info = {gpu, gi, ci.id, ci.profile_id, ci.start, ci.size, ci.uuid};
    }
    return code;
  });
  if (!status.ok()) return status;
  return info;
}

absl::Status SimBackend::DestroyGpuInstance(int gpu, int gi) {
  return RunOnGpu("DestroyGpuInstance", gpu, true,
                  [&](SimMachine& machine) { return machine.DestroyGi(gpu, gi); });
}

absl::Status SimBackend::DestroyComputeInstance(int gpu, int gi, int ci) {
  return RunOnGpu("DestroyComputeInstance", gpu, true,
                  [&](SimMachine& machine) { return machine.DestroyCi(gpu, gi, ci); });
}

absl::StatusOr<MigModeChange> SimBackend::SetMigMode(int gpu, MigMode mode) {
  MigModeChange change;
  absl::Status status = RunOnGpu("SetMigMode", gpu, true, [&](SimMachine& machine) {
    return machine.SetMigMode(gpu, mode, &change);
  });
  if (!status.ok()) return status;
  return change;
}

absl::Status SimBackend::ResetGpu(int gpu) {
  return RunOnGpu("ResetGpu", gpu, true,
                  [&](SimMachine& machine) { return machine.ResetGpu(gpu); });
}

absl::StatusOr<std::vector<ProcessInfo>> SimBackend::ListProcesses(int gpu) {
  std::vector<ProcessInfo> out;
  absl::Status status = RunOnGpu("ListProcesses", gpu, false, [&](SimMachine& machine) {
    const sim::SimGpu* g = machine.Gpu(gpu);
    if (g == nullptr) return static_cast<int>(kNvmlInvalidArgument);
    for (const sim::SimProcess& p : g->processes)
      out.push_back({p.pid, p.name, p.used_mib, p.gi, p.ci});
    return static_cast<int>(kNvmlSuccess);
  });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<MemoryInfo> SimBackend::GetMemory(int gpu, std::optional<int> gi,
                                                 std::optional<int> ci) {
  MemoryInfo info;
  absl::Status status = RunOnGpu("GetMemory", gpu, false, [&](SimMachine& machine) {
    return machine.Memory(gpu, gi, ci, &info);
  });
  if (!status.ok()) return status;
  return info;
}

absl::StatusOr<std::vector<std::string>> SimBackend::ListGpuHolders(int gpu) {
  std::vector<std::string> out;
  absl::Status status = RunOnGpu("ListGpuHolders", gpu, false, [&](SimMachine& machine) {
    const sim::SimGpu* g = machine.Gpu(gpu);
    if (g == nullptr) return static_cast<int>(kNvmlInvalidArgument);
    out = g->holders;
    return static_cast<int>(kNvmlSuccess);
  });
  if (!status.ok()) return status;
  return out;
}

absl::Status SimBackend::TerminateProcess(std::uint32_t pid, int /*grace_seconds*/) {
  return Run("TerminateProcess", true,
             [&](SimMachine& machine) { return machine.RemoveProcess(pid); });
}

absl::StatusOr<GpuTelemetry> SimBackend::GetTelemetry(int gpu) {
  GpuTelemetry out;
  absl::Status status =
      Run("GetTelemetry", false, [&](SimMachine& machine) { return machine.Telemetry(gpu, &out); });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<Activity> SimBackend::SampleActivity(int gpu, std::optional<int> gi) {
  Activity out;
  absl::Status status = Run("SampleActivity", false, [&](SimMachine& machine) {
    return machine.SampleActivity(gpu, gi, &out);
  });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::vector<XidEvent>> SimBackend::TakeXidEvents() {
  std::vector<XidEvent> out;
  // Look first, so that the state file is rewritten only when there is something to take.
  bool waiting = false;
  absl::Status looked = Run("TakeXidEvents", false, [&](SimMachine& machine) {
    waiting = !machine.state().xids.empty();
    return static_cast<int>(kNvmlSuccess);
  });
  if (!looked.ok()) return looked;
  if (!waiting) return out;
  absl::Status status = Run("TakeXidEvents", true, [&](SimMachine& machine) {
    machine.TakeXids(&out);
    return static_cast<int>(kNvmlSuccess);
  });
  if (!status.ok()) return status;
  return out;
}

}  // namespace gpuslice::device
