#include "device_options.h"

#include <sys/stat.h>

#include <cstdlib>

#include "common.h"
#include "gpuslice/device/nvml_backend.h"
#include "gpuslice/device/sim_backend.h"

namespace gpuslice::cli {

void AddDeviceOptions(CLI::App& command, DeviceOptions& options) {
  command.add_option("--sim", options.sim,
                     "Work on the simulated machine in this state file (made by `gpuslice sim "
                     "create`) instead of the local GPUs; default: $GPUSLICE_SIM");
}

std::string SimPath(const DeviceOptions& options) {
  if (!options.sim.empty()) return options.sim;
  const char* env = std::getenv("GPUSLICE_SIM");
  return env != nullptr ? env : "";
}

std::unique_ptr<device::Backend> OpenBackend(const DeviceOptions& options,
                                             const hw::Catalog& catalog) {
  const std::string sim = SimPath(options);
  if (!sim.empty()) {
    absl::StatusOr<std::unique_ptr<device::SimBackend>> backend =
        device::SimBackend::OpenFile(sim, catalog);
    if (!backend.ok()) {
      PrintError(std::string(backend.status().message()));
      return nullptr;
    }
    return *std::move(backend);
  }
  absl::StatusOr<std::unique_ptr<device::NvmlBackend>> backend = device::NvmlBackend::Load(catalog);
  if (!backend.ok()) {
    PrintError(std::string(backend.status().message()));
    return nullptr;
  }
  return *std::move(backend);
}

std::string JournalPath(const DeviceOptions& options) {
  const std::string sim = SimPath(options);
  if (!sim.empty()) return sim + ".journal";
  const char* dir = std::getenv("GPUSLICE_STATE_DIR");
  const std::string base = dir != nullptr ? dir : "/var/lib/gpuslice";
  ::mkdir(base.c_str(), 0755);
  return base + "/apply.journal";
}

}  // namespace gpuslice::cli
