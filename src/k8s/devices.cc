#include "gpuslice/k8s/devices.h"

#include <algorithm>
#include <charconv>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace gpuslice::k8s {

bool SharingConfig::Shares(const NodeGpu& gpu) const {
  if (gpu.mig_enabled) return false;
  for (const std::string& name : shared_gpus) {
    if (name == "all" || name == gpu.uuid || name == absl::StrCat(gpu.index)) return true;
  }
  return false;
}

absl::Status ValidateSharing(const SharingConfig& config) {
  if (config.units < 2 || config.units > 1000 || 1000 % config.units != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "share units: ", config.units,
        " per GPU is not allowed (a divisor of 1000 from 2 to 1000, e.g. 10, 20, 100, 1000)"));
  }
  for (const std::string& name : config.shared_gpus) {
    if (name.empty()) return absl::InvalidArgumentError("shared GPUs: an empty GPU name");
  }
  return absl::OkStatus();
}

std::string MigResourceName(std::string_view profile) {
  return absl::StrCat(std::string(kMigResourcePrefix),
                      absl::StrReplaceAll(std::string(profile), {{"+", "."}}));
}

std::string ShareDeviceId(std::string_view gpu_uuid, int unit) {
  return absl::StrCat(std::string(gpu_uuid), "::", unit);
}

absl::StatusOr<ShareUnit> ParseShareId(std::string_view id) {
  const size_t separator = id.rfind("::");
  if (separator == std::string_view::npos || separator == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", std::string(id), "' is not a share unit (<GPU UUID>::<n>)"));
  }
  ShareUnit unit;
  unit.gpu_uuid = std::string(id.substr(0, separator));
  const std::string_view number = id.substr(separator + 2);
  const auto [end, error] =
      std::from_chars(number.data(), number.data() + number.size(), unit.unit);
  if (number.empty() || error != std::errc() || end != number.data() + number.size() ||
      unit.unit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", std::string(id), "' is not a share unit (<GPU UUID>::<n>)"));
  }
  return unit;
}

NodeResources ResourcesOf(const NodeSnapshot& node, const SharingConfig& sharing) {
  NodeResources out;
  std::vector<const NodeGpu*> gpus;
  for (const NodeGpu& gpu : node.gpus) gpus.push_back(&gpu);
  std::sort(gpus.begin(), gpus.end(),
            [](const NodeGpu* a, const NodeGpu* b) { return a->index < b->index; });
  for (const NodeGpu* gpu : gpus) {
    auto device = [&](std::string id) {
      return PluginDevice{std::move(id), gpu->healthy, gpu->numa_node};
    };
    if (!gpu->mig_enabled) {
      if (sharing.Shares(*gpu)) {
        std::vector<PluginDevice>& units = out.resources[std::string(kShareResource)];
        for (int unit = 0; unit < sharing.units; ++unit) {
          units.push_back(device(ShareDeviceId(gpu->uuid, unit)));
        }
      } else {
        out.resources[std::string(kWholeGpuResource)].push_back(device(gpu->uuid));
      }
      continue;
    }
    std::vector<const MigDevice*> migs;
    for (const MigDevice& mig : gpu->mig_devices) migs.push_back(&mig);
    std::sort(migs.begin(), migs.end(), [](const MigDevice* a, const MigDevice* b) {
      return std::tie(a->start, a->gi, a->ci) < std::tie(b->start, b->gi, b->ci);
    });
    for (const MigDevice* mig : migs) {
      if (mig->ci_slices != mig->gi_slices) {
        out.skipped.push_back(absl::StrCat("GPU ", gpu->index, " GI ", mig->gi, " CI ", mig->ci,
                                           " (", mig->ci_slices, "c.", mig->profile,
                                           "): a compute instance smaller than its GPU "
                                           "instance is not offered"));
        continue;
      }
      out.resources[MigResourceName(mig->profile)].push_back(device(mig->uuid));
    }
  }
  return out;
}

absl::StatusOr<DeviceLocation> Locate(const NodeSnapshot& node, std::string_view id) {
  for (const NodeGpu& gpu : node.gpus) {
    if (gpu.uuid == id) return DeviceLocation{&gpu, nullptr, -1};
    for (const MigDevice& mig : gpu.mig_devices) {
      if (mig.uuid == id) return DeviceLocation{&gpu, &mig, -1};
    }
  }
  if (absl::StatusOr<ShareUnit> unit = ParseShareId(id); unit.ok()) {
    for (const NodeGpu& gpu : node.gpus) {
      if (gpu.uuid == unit->gpu_uuid) return DeviceLocation{&gpu, nullptr, unit->unit};
    }
  }
  return absl::NotFoundError(absl::StrCat("no device '", std::string(id), "' on this node"));
}

}  // namespace gpuslice::k8s
