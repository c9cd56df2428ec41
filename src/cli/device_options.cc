#include "device_options.h"

#include <sys/stat.h>

#include <cstdlib>
#include <functional>

#include "common.h"
#include "gpuslice/device/open_machine.h"

namespace gpuslice::cli {

void AddDeviceOptions(CLI::App& command, DeviceOptions& options) {
  command.add_option("--sim", options.sim, kSimHelp);
}

std::string SimPath(const DeviceOptions& options) {
  if (!options.sim.empty()) return options.sim;
  const char* env = std::getenv("GPUSLICE_SIM");
  return env != nullptr ? env : "";
}

std::unique_ptr<device::Backend> OpenBackend(const DeviceOptions& options,
                                             const hw::Catalog& catalog) {
  absl::StatusOr<std::unique_ptr<device::Backend>> backend =
      device::OpenMachine(SimPath(options), catalog, HostSeed());
  if (!backend.ok()) {
    PrintError(std::string(backend.status().message()));
    return nullptr;
  }
  return *std::move(backend);
}

std::uint64_t HostSeed() { return std::hash<std::string>{}(Hostname()) | 1; }

std::string JournalPath(const DeviceOptions& options) {
  const std::string sim = SimPath(options);
  if (device::KindOf(sim) == device::MachineKind::kFleet) return "";
  if (!sim.empty()) return sim + ".journal";
  const char* dir = std::getenv("GPUSLICE_STATE_DIR");
  const std::string base = dir != nullptr ? dir : "/var/lib/gpuslice";
  ::mkdir(base.c_str(), 0755);
  return base + "/apply.journal";
}

}  // namespace gpuslice::cli
