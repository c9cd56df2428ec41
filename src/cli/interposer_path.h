// Where the CUDA interposer libgpuslice-cuda.so is, for the commands that load it into a child
// process (`gpuslice run` for share leases, `gpuslice measure`) or a container (`gpuslice lease
// docker-args`).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gpuslice::cli {

// $GPUSLICE_INTERPOSER when set (NotFound when that file is not there); else the first that
// exists of: <dir of this binary>/shim/libgpuslice-cuda.so
// (the build tree); <dir of this binary>/../lib/gpuslice/libgpuslice-cuda.so (installed);
// /usr/lib/gpuslice/libgpuslice-cuda.so. NotFound names every place looked at.
absl::StatusOr<std::string> FindInterposer();

// `library` put first in LD_PRELOAD, keeping what `current` (the value now, may be empty) had.
std::string PrependPreload(const std::string& library, const std::string& current);

// `docker run` arguments that enforce a share inside a container: `host_interposer` mounted
// read-only at /usr/lib/gpuslice/libgpuslice-cuda.so and preloaded there, and `host_slice_dir`
// (shim::SliceDirectory() of the host) mounted at /dev/shm/gpuslice and named by
// GPUSLICE_SHM_DIR, so that the container's processes share their slice's accounting and their
// GPU's schedule with every other process of the host and with the agent that exports them. The
// same places as the Kubernetes device plugin's.
std::vector<std::string> DockerInterposerArgs(const std::string& host_interposer,
                                              const std::string& host_slice_dir);

// Whether a lease environment (alloc::LeaseEnvironment) asks for limits the interposer enforces.
bool NeedsInterposer(const std::map<std::string, std::string>& env);

}  // namespace gpuslice::cli
