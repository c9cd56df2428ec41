// The one way a command names and opens the machine it works on (`--sim` on every command).
//
// `sim` is either empty (this machine's GPUs through NVML), the path of a simulator state file
// (made by `gpuslice sim create`; what is done to the machine is saved to the file), or a fleet
// spec such as "2xH100-80GB,1xA100-80GB" (a new simulated machine that lives as long as the
// command, with MIG on where the model has it). A text that names an existing file is a state
// file; otherwise it is read as a fleet spec, and when it is neither the error says both.
//
// Contract: no exceptions; errors as values; never falls back from one kind to another (a broken
// driver is an error, not a simulated machine).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/device/sim_machine.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::device {

enum class MachineKind { kLocalGpus, kStateFile, kFleet };

// What `sim` names (see above). Reads the file system only to see whether the file exists.
MachineKind KindOf(const std::string& sim);

// A new simulated machine of `spec` whose MIG-capable GPUs are in MIG mode, seeded by `seed`
// (distinct seeds give distinct UUIDs). Errors name the unknown model and suggest others.
absl::StatusOr<sim::SimState> NewMigMachine(const hw::Catalog& catalog, const std::string& spec,
                                            std::uint64_t seed);

// Opens what `sim` names. A fleet is seeded by `seed`. Errors: NVML's own when there is no
// usable driver; the state file's when it cannot be read; for a text that is neither an existing
// file nor a fleet spec, InvalidArgument saying so.
absl::StatusOr<std::unique_ptr<Backend>> OpenMachine(const std::string& sim,
                                                     const hw::Catalog& catalog,
                                                     std::uint64_t seed = 1);

}  // namespace gpuslice::device
