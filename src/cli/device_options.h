// The device a command works on: a simulated machine (--sim STATE_FILE|FLEET or GPUSLICE_SIM;
// gpuslice/device/open_machine.h) or the local GPUs through NVML.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "gpuslice/device/backend.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::cli {

struct DeviceOptions {
  std::string sim;  // state file or fleet spec; empty: GPUSLICE_SIM, else NVML
};

// --sim's help, the same on every command that takes it.
inline constexpr char kSimHelp[] =
    "A simulated machine instead of the local GPUs: a state file (made by `gpuslice sim create`, "
    "changes saved to it) or a fleet such as 2xH100-80GB (new each run, MIG on where possible); "
    "default: $GPUSLICE_SIM";

// Adds --sim to a command.
void AddDeviceOptions(CLI::App& command, DeviceOptions& options);

// The state file in effect ("" when NVML is used).
std::string SimPath(const DeviceOptions& options);

// Opens the backend; prints a clear error and returns null on failure (no driver, no state file).
std::unique_ptr<device::Backend> OpenBackend(const DeviceOptions& options,
                                             const hw::Catalog& catalog);

// The seed of a simulated fleet on this machine: its host name's, so that machines differ.
std::uint64_t HostSeed();

// Where the apply journal of this device lives: next to the simulator state, none for a fleet
// that lives as long as the command (""), or /var/lib/gpuslice/apply.journal for real GPUs
// (GPUSLICE_STATE_DIR overrides the directory).
std::string JournalPath(const DeviceOptions& options);

}  // namespace gpuslice::cli
