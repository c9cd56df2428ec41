#include "gpuslice/device/open_machine.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "gpuslice/device/nvml_backend.h"
#include "gpuslice/device/sim_backend.h"

namespace gpuslice::device {

MachineKind KindOf(const std::string& sim) {
  if (sim.empty()) return MachineKind::kLocalGpus;
  std::error_code ec;
  return std::filesystem::exists(sim, ec) ? MachineKind::kStateFile : MachineKind::kFleet;
}

absl::StatusOr<sim::SimState> NewMigMachine(const hw::Catalog& catalog, const std::string& spec,
                                            std::uint64_t seed) {
  absl::StatusOr<sim::SimState> state = sim::NewMachine(catalog, spec, seed);
  if (!state.ok()) return state.status();
  for (sim::SimGpu& gpu : state->gpus) {
    if (gpu.mig_capable) {
      gpu.mig_current = MigMode::kEnabled;
      gpu.mig_pending = MigMode::kEnabled;
    }
  }
  return state;
}

absl::StatusOr<std::unique_ptr<Backend>> OpenMachine(const std::string& sim,
                                                     const hw::Catalog& catalog,
                                                     std::uint64_t seed) {
  switch (KindOf(sim)) {
    case MachineKind::kLocalGpus: {
      absl::StatusOr<std::unique_ptr<NvmlBackend>> nvml = NvmlBackend::Load(catalog);
      if (!nvml.ok()) return nvml.status();
      return std::unique_ptr<Backend>(*std::move(nvml));
    }
    case MachineKind::kStateFile: {
      absl::StatusOr<std::unique_ptr<SimBackend>> file = SimBackend::OpenFile(sim, catalog);
      if (!file.ok()) return file.status();
      return std::unique_ptr<Backend>(*std::move(file));
    }
    case MachineKind::kFleet:
      break;
  }
  absl::StatusOr<sim::SimState> state = NewMigMachine(catalog, sim, seed);
  if (!state.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sim ", sim,
                     ": no such state file (make one with `gpuslice sim create FILE SPEC`), and "
                     "not a fleet spec like 2xH100-80GB either: ",
                     state.status().message()));
  }
  return std::unique_ptr<Backend>(std::make_unique<SimBackend>(*std::move(state), catalog));
}

}  // namespace gpuslice::device
