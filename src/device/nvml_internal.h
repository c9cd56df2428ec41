// Helpers shared by the files of NvmlBackend (nvml_backend.cc, nvml_mig.cc, nvml_health.cc):
// text for errors, int/unsigned conversions, device/GI handles, and the MIG devices of a GPU.
// Private to src/device.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/device/nvml_codes.h"
#include "nvml_api.h"

namespace gpuslice::device::nvml_internal {

using nvml::Api;
using nvml::nvmlComputeInstance_t;
using nvml::nvmlComputeInstanceInfo_t;
using nvml::nvmlComputeInstancePlacement_t;
using nvml::nvmlComputeInstanceProfileInfo_t;
using nvml::nvmlDevice_t;
using nvml::nvmlGpuInstance_t;
using nvml::nvmlGpuInstanceInfo_t;
using nvml::nvmlGpuInstancePlacement_t;
using nvml::nvmlGpuInstanceProfileInfo_t;

constexpr std::int64_t kMiB = 1024 * 1024;

inline std::string Str(int value) { return std::to_string(value); }
inline std::string Str(unsigned value) { return std::to_string(value); }

inline std::string GpuText(int gpu) { return "GPU " + Str(gpu); }
inline std::string GiText(int gpu, int gi) { return "GI " + Str(gi) + " on GPU " + Str(gpu); }

// Converts a caller's int to the unsigned NVML takes (negative values become large and are
// rejected by the driver like any other out-of-range id).
inline unsigned U(int value) { return static_cast<unsigned>(value); }
inline int I(unsigned value) { return static_cast<int>(value); }

inline std::string FromBuffer(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

inline std::int64_t ToMib(unsigned long long bytes) {
  if (bytes == nvml::kValueNotAvailable) return 0;
  return static_cast<std::int64_t>(bytes / static_cast<unsigned long long>(kMiB));
}

inline absl::StatusOr<nvmlDevice_t> DeviceHandle(const Api& api, int gpu) {
  nvmlDevice_t device = nullptr;
  const int code = api.nvmlDeviceGetHandleByIndex_v2(U(gpu), &device);
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlDeviceGetHandleByIndex_v2 (" + GpuText(gpu) + ")");
  }
  return device;
}

inline absl::StatusOr<nvmlGpuInstance_t> GiHandle(const Api& api, nvmlDevice_t device, int gpu,
                                                  int gi) {
  nvmlGpuInstance_t instance = nullptr;
  const int code = api.nvmlDeviceGetGpuInstanceById(device, U(gi), &instance);
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlDeviceGetGpuInstanceById (" + GiText(gpu, gi) + ")");
  }
  return instance;
}

inline absl::StatusOr<std::string> DeviceUuid(const Api& api, nvmlDevice_t device,
                                              const std::string& what) {
  char buffer[nvml::kDeviceUuidBufferSize] = {};
  const int code = api.nvmlDeviceGetUUID(device, buffer, sizeof buffer);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceGetUUID (" + what + ")");
  return FromBuffer(buffer, sizeof buffer);
}

inline absl::StatusOr<GpuInstanceInfo> GiInfo(const Api& api, nvmlGpuInstance_t instance, int gpu,
                                              const std::string& what) {
  nvmlGpuInstanceInfo_t info{};
  const int code = api.nvmlGpuInstanceGetInfo(instance, &info);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlGpuInstanceGetInfo (" + what + ")");
  return GpuInstanceInfo{gpu, I(info.id), I(info.profileId), I(info.placement.start),
                         I(info.placement.size)};
}

inline absl::StatusOr<ComputeInstanceInfo> CiInfo(const Api& api, nvmlComputeInstance_t instance,
                                                  int gpu, int gi, const std::string& what) {
  nvmlComputeInstanceInfo_t info{};
  const int code = api.nvmlComputeInstanceGetInfo_v2(instance, &info);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlComputeInstanceGetInfo_v2 (" + what + ")");
  ComputeInstanceInfo out;
  out.gpu = gpu;
  out.gi = gi;
  out.id = I(info.id);
  out.profile_id = I(info.profileId);
  out.start = I(info.placement.start);
  out.size = I(info.placement.size);
  return out;
}

// One MIG device (a GI + CI pair) of a GPU.
struct MigDevice {
  nvmlDevice_t handle = nullptr;
  int gi = 0;
  int ci = 0;
};

// The MIG devices of a GPU, from its sparse MIG device index space (NOT_FOUND slots skipped).
inline absl::StatusOr<std::vector<MigDevice>> MigDevices(const Api& api, nvmlDevice_t device,
                                                         int gpu) {
  unsigned max_count = 0;
  int code = api.nvmlDeviceGetMaxMigDeviceCount(device, &max_count);
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlDeviceGetMaxMigDeviceCount (" + GpuText(gpu) + ")");
  }
  std::vector<MigDevice> out;
  for (unsigned index = 0; index < max_count; ++index) {
    MigDevice mig;
    code = api.nvmlDeviceGetMigDeviceHandleByIndex(device, index, &mig.handle);
    if (code == kNvmlNotFound) continue;
    const std::string what = "MIG device " + Str(index) + " of " + GpuText(gpu);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceGetMigDeviceHandleByIndex (" + what + ")");
    }
    unsigned gi = 0;
    unsigned ci = 0;
    code = api.nvmlDeviceGetGpuInstanceId(mig.handle, &gi);
    if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceGetGpuInstanceId (" + what + ")");
    code = api.nvmlDeviceGetComputeInstanceId(mig.handle, &ci);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceGetComputeInstanceId (" + what + ")");
    }
    mig.gi = I(gi);
    mig.ci = I(ci);
    out.push_back(mig);
  }
  return out;
}

// MIG UUIDs of the CIs of GI `gi`, by CI id.
inline absl::StatusOr<std::map<int, std::string>> CiUuids(const Api& api, nvmlDevice_t device,
                                                          int gpu, int gi) {
  absl::StatusOr<std::vector<MigDevice>> migs = MigDevices(api, device, gpu);
  if (!migs.ok()) return migs.status();
  std::map<int, std::string> out;
  for (const MigDevice& mig : *migs) {
    if (mig.gi != gi) continue;
    absl::StatusOr<std::string> uuid =
        DeviceUuid(api, mig.handle,
                   "MIG device GI " + Str(mig.gi) + " CI " + Str(mig.ci) + " of " + GpuText(gpu));
    if (!uuid.ok()) return uuid.status();
    out[mig.ci] = *std::move(uuid);
  }
  return out;
}

// Info of the GI profile whose nvidia-smi id is `profile_id`, found by sweeping the NVML constants.
inline absl::StatusOr<nvmlGpuInstanceProfileInfo_t> GiProfileById(const Api& api,
                                                                  nvmlDevice_t device, int gpu,
                                                                  int profile_id) {
  for (unsigned constant = 0; constant < nvml::kGpuInstanceProfileCount; ++constant) {
    nvmlGpuInstanceProfileInfo_t info{};
    const int code = api.nvmlDeviceGetGpuInstanceProfileInfo(device, constant, &info);
    if (code == kNvmlNotSupported) continue;
    if (code == kNvmlInvalidArgument) break;
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceGetGpuInstanceProfileInfo (" + GpuText(gpu) +
                                 ", constant " + Str(constant) + ")");
    }
    if (I(info.id) == profile_id) return info;
  }
  return NvmlError(kNvmlNotFound,
                   "GPU instance profile " + Str(profile_id) + " on " + GpuText(gpu));
}

}  // namespace gpuslice::device::nvml_internal
