// Where the CUDA interposer libgpuslice-cuda.so is, for the commands that load it into a child
// process (`gpuslice run` for share leases, `gpuslice measure`).
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace gpuslice::cli {

// $GPUSLICE_INTERPOSER when set (NotFound when that file is not there); else the first that
// exists of: <dir of this binary>/shim/libgpuslice-cuda.so
// (the build tree); <dir of this binary>/../lib/gpuslice/libgpuslice-cuda.so (installed);
// /usr/lib/gpuslice/libgpuslice-cuda.so. NotFound names every place looked at.
absl::StatusOr<std::string> FindInterposer();

// `library` put first in LD_PRELOAD, keeping what `current` (the value now, may be empty) had.
std::string PrependPreload(const std::string& library, const std::string& current);

// Whether a lease environment (alloc::LeaseEnvironment) asks for limits the interposer enforces.
bool NeedsInterposer(const std::map<std::string, std::string>& env);

}  // namespace gpuslice::cli
