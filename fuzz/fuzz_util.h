// Helpers shared by the libFuzzer harnesses: a failed invariant aborts (libFuzzer reports it as a
// crash), a scratch directory of the run's own, and a placement node spec.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "gpuslice/hw/catalog.h"
#include "gpuslice/place/cluster.h"

namespace gpuslice::fuzz {

inline void Check(bool condition) {
  if (!condition) std::abort();
}

// A directory of the run's own, named after `prefix` (tmpfs when there is one), removed at exit.
// The first call's prefix names it.
inline const std::string& Scratch(const char* prefix) {
  static const std::string* dir = [prefix] {
    std::string pattern = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    pattern += std::string("/") + prefix + "_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    auto* path = new std::string(pattern);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(*dir, ignored);
    });
    return path;
  }();
  return *dir;
}

// A node of `gpus` GPUs of `model`: MIG nodes carry the catalog model, shared ones
// `shared_gpu_memory_mib` per GPU.
inline place::NodeSpec Node(const std::string& name, place::GpuMode mode, int gpus,
                            const std::string& model, std::int64_t shared_gpu_memory_mib) {
  place::NodeSpec spec;
  spec.name = name;
  spec.model = model;
  spec.cpu_milli = 64000;
  spec.memory_mib = 262144;
  spec.gpus = gpus;
  spec.mode = mode;
  if (mode == place::GpuMode::kMig) {
    spec.hardware = hw::Catalog::Builtin().Find(model);
  } else if (mode == place::GpuMode::kShared) {
    spec.gpu_memory_mib = shared_gpu_memory_mib;
  }
  return spec;
}

}  // namespace gpuslice::fuzz
