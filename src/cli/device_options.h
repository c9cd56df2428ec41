// The device a command works on: a simulated machine (--sim STATE_FILE or GPUSLICE_SIM) or the
// local GPUs through NVML.
#pragma once

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "gpuslice/device/backend.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::cli {

struct DeviceOptions {
  std::string sim;  // state file; empty: GPUSLICE_SIM, else NVML
};

// Adds --sim to a command.
void AddDeviceOptions(CLI::App& command, DeviceOptions& options);

// The state file in effect ("" when NVML is used).
std::string SimPath(const DeviceOptions& options);

// Opens the backend; prints a clear error and returns null on failure (no driver, no state file).
std::unique_ptr<device::Backend> OpenBackend(const DeviceOptions& options,
                                             const hw::Catalog& catalog);

// Where the apply journal of this device lives: next to the simulator state, or
// /var/lib/gpuslice/apply.journal for real GPUs (GPUSLICE_STATE_DIR overrides the directory).
std::string JournalPath(const DeviceOptions& options);

}  // namespace gpuslice::cli
