// The interposer's settings: from the environment, else from GPUSLICE_LIMITS_FILE, else defaults
// (docs/SHIM.md). Pure apart from reading the environment and that one file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gpuslice/shim/slice_region.h"

namespace gpuslice::shim {

enum class Mode { kEnforce, kMeasure, kPassthrough };

struct Config {
  Mode mode = Mode::kEnforce;
  std::uint64_t cap_bytes = 0;  // 0 = no cap
  int share_milli = 0;          // 1..999; 0 = no compute limit (1000 and more mean none)
  SharePolicy policy = SharePolicy::kStrict;
  std::string slice_id;
  // What a CUDA context is counted as. Set explicitly (GPUSLICE_CONTEXT_RESERVE_MIB or the limits
  // file's context_reserve_mib), it is what every context counts; otherwise each context counts
  // what it was measured to take when created, and this default only where that cannot be measured.
  std::uint64_t context_reserve_bytes = 320ull << 20;
  bool context_reserve_set = false;
  std::string shm_dir = "/dev/shm/gpuslice";
  int log_level = 1;
  std::string real_libcuda = "libcuda.so.1";
  std::string real_nvml = "libnvidia-ml.so.1";
  // A setting that could not be read ("GPUSLICE_VRAM_LIMIT_MIB=abc: not a whole number"): the
  // interposer then refuses CUDA rather than run without the limit that was meant.
  std::string error;

  bool Enforcing() const {
    return mode == Mode::kEnforce && (cap_bytes > 0 || (share_milli > 0 && share_milli < 1000));
  }
  // Whether the interposer does anything at all (else every call passes straight on).
  bool Active() const { return mode == Mode::kMeasure || Enforcing(); }
};

// `lookup` returns the value of an environment variable or nullptr (getenv in the library,
// a map in tests).
using EnvLookup = const char* (*)(const char* name);
Config LoadConfig(EnvLookup lookup);

// Keeps [A-Za-z0-9._-], replaces other characters with '_', cuts to kSliceIdSize - 1.
std::string SanitizeSliceId(std::string_view id);

}  // namespace gpuslice::shim
