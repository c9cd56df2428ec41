// NvmlBackend: GI profiles, GPU and compute instances, MIG mode.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "gpuslice/device/nvml_backend.h"
#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/util/process_scan.h"
#include "nvml_api.h"
#include "nvml_internal.h"

namespace gpuslice::device {

using namespace nvml_internal;  // NOLINT(google-build-using-namespace): the helpers of this class

namespace {

// The media suffix of the profiles an NVML_GPU_INSTANCE_PROFILE_* constant selects (the v1 struct
// has no name to read it from).
std::string ConstantSuffix(unsigned constant) {
  switch (constant) {
    case 0x07:  // 1_SLICE_REV1
    case 0x08:  // 2_SLICE_REV1
      return "+me";
    case 0x0A:  // 1_SLICE_GFX
    case 0x0B:  // 2_SLICE_GFX
    case 0x0C:  // 4_SLICE_GFX
    case 0x11:  // 3_SLICE_GFX
      return "+gfx";
    case 0x0D:  // 1_SLICE_NO_ME
    case 0x0E:  // 2_SLICE_NO_ME
      return "-me";
    case 0x0F:  // 1_SLICE_ALL_ME
    case 0x10:  // 2_SLICE_ALL_ME
      return "+me.all";
    default:
      return "";
  }
}

// The name of a profile the driver did not name: "<slices>g.<GB>gb" + the constant's suffix, with
// go-nvlib's rounding (mig-facts §5.3): GB = round(ceil(8 * memory / total) / 8 * ceil(total GiB)),
// which gives the marketing sizes (A100-40GB 7g: 40192 MiB -> "40gb", not 39).
std::string DerivedProfileName(int slices, std::int64_t memory_mib, std::int64_t total_mib,
                               unsigned constant) {
  std::int64_t gb = 0;
  if (total_mib > 0) {
    const std::int64_t eighths = (8 * memory_mib + total_mib - 1) / total_mib;
    const std::int64_t total_gib = (total_mib + 1023) / 1024;
    gb = (eighths * total_gib + 4) / 8;  // round half up
  } else {
    gb = (memory_mib + 512) / 1024;
  }
  return Str(slices) + "g." + std::to_string(gb) + "gb" + ConstantSuffix(constant);
}

// The profile name without NVML's "MIG " prefix.
std::string StripMigPrefix(std::string name) {
  constexpr std::string_view kPrefix = "MIG ";
  if (name.starts_with(kPrefix)) name.erase(0, kPrefix.size());
  return name;
}

template <typename Info>
GpuInstanceProfileInfo ProfileFrom(const Info& info, unsigned constant) {
  GpuInstanceProfileInfo out;
  out.nvml_const = I(constant);
  out.id = I(info.id);
  out.slices = I(info.sliceCount);
  out.instance_count = I(info.instanceCount);
  out.sms = I(info.multiprocessorCount);
  out.memory_mib = static_cast<std::int64_t>(info.memorySizeMB);
  out.copy_engines = I(info.copyEngineCount);
  out.decoders = I(info.decoderCount);
  out.encoders = I(info.encoderCount);
  out.jpegs = I(info.jpegCount);
  out.ofas = I(info.ofaCount);
  return out;
}

// Reads the profile of one NVML constant with the newest struct version the driver takes, starting
// at `*version` (3, 2 or 1) and lowering it for the next calls when the driver refuses a version
// (ARGUMENT_VERSION_MISMATCH) or lacks the V function (absent, or FUNCTION_NOT_FOUND). Returns the
// NVML code of the last call.
int QueryProfile(const Api& api, nvmlDevice_t device, unsigned constant, int* version,
                 GpuInstanceProfileInfo* out) {
  for (;;) {
    if (*version >= 2 && api.nvmlDeviceGetGpuInstanceProfileInfoV == nullptr) *version = 1;
    int code = kNvmlSuccess;
    if (*version == 3) {
      nvml::nvmlGpuInstanceProfileInfo_v3_t info{};
      info.version = nvml::kGpuInstanceProfileInfoV3;
      code = api.nvmlDeviceGetGpuInstanceProfileInfoV(
          device, constant, reinterpret_cast<nvml::nvmlGpuInstanceProfileInfo_v2_t*>(&info));
      if (code == kNvmlSuccess) {
        *out = ProfileFrom(info, constant);
        out->name = StripMigPrefix(FromBuffer(info.name, sizeof info.name));
      }
    } else if (*version == 2) {
      nvml::nvmlGpuInstanceProfileInfo_v2_t info{};
      info.version = nvml::kGpuInstanceProfileInfoV2;
      code = api.nvmlDeviceGetGpuInstanceProfileInfoV(device, constant, &info);
      if (code == kNvmlSuccess) {
        *out = ProfileFrom(info, constant);
        out->name = StripMigPrefix(FromBuffer(info.name, sizeof info.name));
      }
    } else {
      nvmlGpuInstanceProfileInfo_t info{};
      code = api.nvmlDeviceGetGpuInstanceProfileInfo(device, constant, &info);
      if (code == kNvmlSuccess) *out = ProfileFrom(info, constant);
      return code;
    }
    if (code == kNvmlArgumentVersionMismatch) {
      --*version;
    } else if (code == kNvmlFunctionNotFound) {
      *version = 1;
    } else {
      return code;
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<GpuInstanceProfileInfo>> NvmlBackend::ListGpuInstanceProfiles(int gpu) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  const std::string what = "listing GPU instance profiles of " + GpuText(gpu);
  unsigned current = 0;
  unsigned pending = 0;
  int code = api.nvmlDeviceGetMigMode(*device, &current, &pending);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceGetMigMode (" + what + ")");
  if (current != nvml::kMigEnable) {
    return NvmlError(kNvmlNotSupported,
                     what + ": MIG mode is disabled (the driver lists profiles only with MIG on)");
  }
  std::vector<GpuInstanceProfileInfo> out;
  int version = 3;
  for (unsigned constant = 0; constant < nvml::kGpuInstanceProfileCount; ++constant) {
    GpuInstanceProfileInfo info;
    code = QueryProfile(api, *device, constant, &version, &info);
    // NOT_SUPPORTED: the GPU has no such profile; INVALID_ARGUMENT: the driver does not know the
    // constant (older than the constant).
    if (code == kNvmlNotSupported || code == kNvmlInvalidArgument) continue;
    if (code != kNvmlSuccess) {
      return NvmlError(code, std::string(version >= 2 ? "nvmlDeviceGetGpuInstanceProfileInfoV"
                                                      : "nvmlDeviceGetGpuInstanceProfileInfo") +
                                 " (" + GpuText(gpu) + ", constant " + Str(constant) + ")");
    }
    out.push_back(std::move(info));
  }
  // Names from the v1 struct (or empty ones) are derived from slices and memory, relative to the
  // GPU's memory: the driver's total, else the largest profile's (the full-GPU one).
  std::int64_t total_mib = 0;
  for (const GpuInstanceProfileInfo& info : out) total_mib = std::max(total_mib, info.memory_mib);
  bool need_total = false;
  for (const GpuInstanceProfileInfo& info : out) need_total = need_total || info.name.empty();
  if (need_total) {
    nvml::nvmlMemory_t memory{};
    if (api.nvmlDeviceGetMemoryInfo(*device, &memory) == kNvmlSuccess && memory.total > 0) {
      total_mib = ToMib(memory.total);
    }
  }
  for (GpuInstanceProfileInfo& info : out) {
    if (!info.name.empty()) continue;
    info.name = DerivedProfileName(info.slices, info.memory_mib, total_mib, U(info.nvml_const));
    info.name_derived = true;
  }
  return out;
}

absl::StatusOr<std::vector<GpuInstanceInfo>> NvmlBackend::ListGpuInstances(int gpu) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  const std::string what = "listing GPU instances of " + GpuText(gpu);
  unsigned current = 0;
  unsigned pending = 0;
  int code = api.nvmlDeviceGetMigMode(*device, &current, &pending);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceGetMigMode (" + what + ")");
  if (current != nvml::kMigEnable) {
    return NvmlError(kNvmlNotSupported, what + ": MIG mode is disabled");
  }

  std::vector<GpuInstanceInfo> out;
  std::set<unsigned> seen;
  for (unsigned constant = 0; constant < nvml::kGpuInstanceProfileCount; ++constant) {
    nvmlGpuInstanceProfileInfo_t profile{};
    code = api.nvmlDeviceGetGpuInstanceProfileInfo(*device, constant, &profile);
    if (code == kNvmlNotSupported) continue;  // this GPU has no such profile
    if (code == kNvmlInvalidArgument) break;  // past the driver's last constant
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceGetGpuInstanceProfileInfo (" + GpuText(gpu) +
                                 ", constant " + Str(constant) + ")");
    }
    if (!seen.insert(profile.id).second || profile.instanceCount == 0) continue;
    std::vector<nvmlGpuInstance_t> handles(profile.instanceCount);
    unsigned count = 0;
    code = api.nvmlDeviceGetGpuInstances(*device, profile.id, handles.data(), &count);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceGetGpuInstances (" + GpuText(gpu) + ", profile " +
                                 Str(profile.id) + ")");
    }
    count = std::min<unsigned>(count, profile.instanceCount);
    for (unsigned i = 0; i < count; ++i) {
      absl::StatusOr<GpuInstanceInfo> info =
          GiInfo(api, handles[i], gpu, GpuText(gpu) + ", profile " + Str(profile.id));
      if (!info.ok()) return info.status();
      out.push_back(*info);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const GpuInstanceInfo& a, const GpuInstanceInfo& b) { return a.id < b.id; });
  return out;
}

absl::StatusOr<std::vector<ComputeInstanceInfo>> NvmlBackend::ListComputeInstances(int gpu,
                                                                                   int gi) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  absl::StatusOr<nvmlGpuInstance_t> instance = GiHandle(api, *device, gpu, gi);
  if (!instance.ok()) return instance.status();

  std::vector<ComputeInstanceInfo> out;
  std::set<unsigned> seen;
  for (unsigned constant = 0; constant < nvml::kComputeInstanceProfileCount; ++constant) {
    nvmlComputeInstanceProfileInfo_t profile{};
    int code = api.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        *instance, constant, nvml::kComputeInstanceEngineProfileShared, &profile);
    if (code == kNvmlNotSupported) continue;
    if (code == kNvmlInvalidArgument) break;
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlGpuInstanceGetComputeInstanceProfileInfo (" + GiText(gpu, gi) +
                                 ", constant " + Str(constant) + ")");
    }
    if (!seen.insert(profile.id).second || profile.instanceCount == 0) continue;
    std::vector<nvmlComputeInstance_t> handles(profile.instanceCount);
    unsigned count = 0;
    code = api.nvmlGpuInstanceGetComputeInstances(*instance, profile.id, handles.data(), &count);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlGpuInstanceGetComputeInstances (" + GiText(gpu, gi) +
                                 ", CI profile " + Str(profile.id) + ")");
    }
    count = std::min<unsigned>(count, profile.instanceCount);
    for (unsigned i = 0; i < count; ++i) {
      absl::StatusOr<ComputeInstanceInfo> info = CiInfo(api, handles[i], gpu, gi, GiText(gpu, gi));
      if (!info.ok()) return info.status();
      out.push_back(*std::move(info));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ComputeInstanceInfo& a, const ComputeInstanceInfo& b) { return a.id < b.id; });
  if (!out.empty()) {
    absl::StatusOr<std::map<int, std::string>> uuids = CiUuids(api, *device, gpu, gi);
    if (!uuids.ok()) return uuids.status();
    for (ComputeInstanceInfo& ci : out) {
      auto it = uuids->find(ci.id);
      if (it != uuids->end()) ci.uuid = it->second;
    }
  }
  return out;
}

absl::StatusOr<GpuInstanceInfo> NvmlBackend::CreateGpuInstance(int gpu, int profile_id,
                                                               std::optional<int> start) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  const std::string what = GpuText(gpu) + ", profile " + Str(profile_id) +
                           (start ? ", start " + Str(*start) : std::string());
  nvmlGpuInstance_t instance = nullptr;
  int code = kNvmlSuccess;
  if (start) {
    // The placement's size is the profile's: read it from the possible placements.
    unsigned count = 0;
    code =
        api.nvmlDeviceGetGpuInstancePossiblePlacements_v2(*device, U(profile_id), nullptr, &count);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceGetGpuInstancePossiblePlacements_v2 (" + what + ")");
    }
    std::vector<nvmlGpuInstancePlacement_t> placements(count);
    if (count > 0) {
      code = api.nvmlDeviceGetGpuInstancePossiblePlacements_v2(*device, U(profile_id),
                                                               placements.data(), &count);
      if (code != kNvmlSuccess) {
        return NvmlError(code, "nvmlDeviceGetGpuInstancePossiblePlacements_v2 (" + what + ")");
      }
      placements.resize(std::min<size_t>(count, placements.size()));
    }
    nvmlGpuInstancePlacement_t placement{U(*start), placements.empty() ? 0U : placements[0].size};
    for (const nvmlGpuInstancePlacement_t& candidate : placements) {
      if (I(candidate.start) == *start) placement.size = candidate.size;
    }
    code =
        api.nvmlDeviceCreateGpuInstanceWithPlacement(*device, U(profile_id), &placement, &instance);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceCreateGpuInstanceWithPlacement (" + what + ")");
    }
  } else {
    code = api.nvmlDeviceCreateGpuInstance(*device, U(profile_id), &instance);
    if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceCreateGpuInstance (" + what + ")");
  }
  return GiInfo(api, instance, gpu, "new GPU instance, " + what);
}

absl::StatusOr<ComputeInstanceInfo> NvmlBackend::CreateComputeInstance(int gpu, int gi,
                                                                       int ci_profile_id,
                                                                       std::optional<int> start) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  absl::StatusOr<nvmlGpuInstance_t> instance = GiHandle(api, *device, gpu, gi);
  if (!instance.ok()) return instance.status();
  const std::string what = GiText(gpu, gi) + ", CI profile " + Str(ci_profile_id) +
                           (start ? ", start " + Str(*start) : std::string());
  nvmlComputeInstance_t compute = nullptr;
  int code = kNvmlSuccess;
  if (start) {
    unsigned count = 0;
    code = api.nvmlGpuInstanceGetComputeInstancePossiblePlacements(*instance, U(ci_profile_id),
                                                                   nullptr, &count);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlGpuInstanceGetComputeInstancePossiblePlacements (" + what + ")");
    }
    std::vector<nvmlComputeInstancePlacement_t> placements(count);
    if (count > 0) {
      code = api.nvmlGpuInstanceGetComputeInstancePossiblePlacements(*instance, U(ci_profile_id),
                                                                     placements.data(), &count);
      if (code != kNvmlSuccess) {
        return NvmlError(code,
                         "nvmlGpuInstanceGetComputeInstancePossiblePlacements (" + what + ")");
      }
      placements.resize(std::min<size_t>(count, placements.size()));
    }
    nvmlComputeInstancePlacement_t placement{U(*start),
                                             placements.empty() ? 0U : placements[0].size};
    for (const nvmlComputeInstancePlacement_t& candidate : placements) {
      if (I(candidate.start) == *start) placement.size = candidate.size;
    }
    code = api.nvmlGpuInstanceCreateComputeInstanceWithPlacement(*instance, U(ci_profile_id),
                                                                 &placement, &compute);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlGpuInstanceCreateComputeInstanceWithPlacement (" + what + ")");
    }
  } else {
    code = api.nvmlGpuInstanceCreateComputeInstance(*instance, U(ci_profile_id), &compute);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlGpuInstanceCreateComputeInstance (" + what + ")");
    }
  }
  absl::StatusOr<ComputeInstanceInfo> info =
      CiInfo(api, compute, gpu, gi, "new compute instance, " + what);
  if (!info.ok()) return info.status();
  absl::StatusOr<std::map<int, std::string>> uuids = CiUuids(api, *device, gpu, gi);
  if (!uuids.ok()) return uuids.status();
  if (auto it = uuids->find(info->id); it != uuids->end()) info->uuid = it->second;
  return info;
}

absl::Status NvmlBackend::DestroyGpuInstance(int gpu, int gi) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  absl::StatusOr<nvmlGpuInstance_t> instance = GiHandle(api, *device, gpu, gi);
  if (!instance.ok()) return instance.status();
  const int code = api.nvmlGpuInstanceDestroy(*instance);
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlGpuInstanceDestroy (" + GiText(gpu, gi) + ")");
  }
  return absl::OkStatus();
}

absl::Status NvmlBackend::DestroyComputeInstance(int gpu, int gi, int ci) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  absl::StatusOr<nvmlGpuInstance_t> instance = GiHandle(api, *device, gpu, gi);
  if (!instance.ok()) return instance.status();
  const std::string what = "CI " + Str(ci) + " of " + GiText(gpu, gi);
  nvmlComputeInstance_t compute = nullptr;
  int code = api.nvmlGpuInstanceGetComputeInstanceById(*instance, U(ci), &compute);
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlGpuInstanceGetComputeInstanceById (" + what + ")");
  }
  code = api.nvmlComputeInstanceDestroy(compute);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlComputeInstanceDestroy (" + what + ")");
  return absl::OkStatus();
}

absl::StatusOr<MigModeChange> NvmlBackend::SetMigMode(int gpu, MigMode mode) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  const unsigned value = mode == MigMode::kEnabled ? nvml::kMigEnable : nvml::kMigDisable;
  nvml::nvmlReturn_t activation = kNvmlSuccess;
  const int code = api.nvmlDeviceSetMigMode(*device, value, &activation);
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlDeviceSetMigMode (" + GpuText(gpu) + ", " +
                               (mode == MigMode::kEnabled ? "enable" : "disable") + ")");
  }
  MigModeChange change;
  change.applied = activation == kNvmlSuccess;
  change.activation_code = activation;
  return change;
}

}  // namespace gpuslice::device
