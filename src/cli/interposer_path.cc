#include "interposer_path.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace gpuslice::cli {

absl::StatusOr<std::string> FindInterposer() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("GPUSLICE_INTERPOSER"); env != nullptr && *env != '\0') {
    // An explicit choice is the only one: never a different library than the one named.
    if (access(env, R_OK) == 0) return std::string(env);
    return absl::NotFoundError(
        absl::StrCat("GPUSLICE_INTERPOSER=", env, ": the CUDA interposer is not there"));
  }
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path dir = self.parent_path();
    candidates.push_back((dir / "shim" / "libgpuslice-cuda.so").string());
    candidates.push_back((dir.parent_path() / "lib" / "gpuslice" / "libgpuslice-cuda.so").string());
  }
  candidates.push_back("/usr/lib/gpuslice/libgpuslice-cuda.so");
  for (const std::string& path : candidates) {
    if (access(path.c_str(), R_OK) == 0) return path;
  }
  return absl::NotFoundError(absl::StrCat("the CUDA interposer libgpuslice-cuda.so is not in ",
                                          absl::StrJoin(candidates, ", "),
                                          "; build it or set GPUSLICE_INTERPOSER"));
}

std::string PrependPreload(const std::string& library, const std::string& current) {
  std::vector<std::string> parts = {library};
  for (absl::string_view part : absl::StrSplit(current, absl::ByAnyChar(": "), absl::SkipEmpty())) {
    if (part != library) parts.emplace_back(part);
  }
  return absl::StrJoin(parts, ":");
}

std::vector<std::string> DockerInterposerArgs(const std::string& host_interposer,
                                              const std::string& host_slice_dir) {
  constexpr const char* kInterposer = "/usr/lib/gpuslice/libgpuslice-cuda.so";
  constexpr const char* kSliceDir = "/dev/shm/gpuslice";
  return {"-v", absl::StrCat(host_interposer, ":", kInterposer, ":ro"),
          "-e", absl::StrCat("LD_PRELOAD=", kInterposer),
          "-v", absl::StrCat(host_slice_dir, ":", kSliceDir),
          "-e", absl::StrCat("GPUSLICE_SHM_DIR=", kSliceDir)};
}

bool NeedsInterposer(const std::map<std::string, std::string>& env) {
  return env.contains("GPUSLICE_VRAM_LIMIT_MIB") || env.contains("GPUSLICE_COMPUTE_SHARE_MILLI");
}

}  // namespace gpuslice::cli
