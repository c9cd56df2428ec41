// gpuslice/k8s/devices.h: what one Kubernetes node offers, as device-plugin resources.
//
// The device plugin (gpuslice/k8s/plugin.h) reads a NodeSnapshot of the machine through the device
// layer and turns it into resources with this pure code:
//   * whole GPUs (MIG disabled, not shared)   → `nvidia.com/gpu`, one device per GPU, ID = GPU
//   UUID;
//   * MIG devices whose compute instance spans its whole GPU instance (NVIDIA's "mixed" strategy)
//                                             → `nvidia.com/mig-<profile>` with `+` replaced by `.`
//                                               (`1g.10gb+me` → `nvidia.com/mig-1g.10gb.me`), one
//                                               device per MIG device, ID = MIG UUID; a GI split
//                                               into several compute instances is not offered
//                                               (as NVIDIA's plugin) and is listed in `skipped`;
//   * GPUs chosen for sharing (MIG disabled)  → `gpuslice.io/gpu-share`, `units` devices per GPU,
//                                               ID = `<GPU UUID>::<k>`. One unit is 1/units of the
//                                               GPU's compute time and of its memory: a container
//                                               asking for 25 of 100 units gets a 25% compute
//                                               share and a quarter of the VRAM as its cap,
//                                               enforced by the CUDA interposer (docs/SHIM.md).
// A MIG-enabled GPU with no instances offers nothing. An unhealthy GPU's devices are listed as
// "Unhealthy" (kubelet then does not hand them out).
//
// Everything here is pure and deterministic: same snapshot, same resources, same order.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gpuslice::k8s {

inline constexpr std::string_view kWholeGpuResource = "nvidia.com/gpu";
inline constexpr std::string_view kMigResourcePrefix = "nvidia.com/mig-";
inline constexpr std::string_view kShareResource = "gpuslice.io/gpu-share";
inline constexpr std::string_view kHealthy = "Healthy";
inline constexpr std::string_view kUnhealthy = "Unhealthy";

// One MIG device (a compute instance) of a GPU.
struct MigDevice {
  int gi = 0;
  int ci = 0;
  std::string profile;  // the GI profile as nvidia-smi names it, "1g.10gb+me"
  int gi_slices = 0;    // compute slices of the GI
  int ci_slices = 0;    // compute slices of the CI (== gi_slices: the CI spans the GI)
  int start = 0;        // GI placement start
  std::int64_t memory_mib = 0;
  std::string uuid;  // "MIG-…"
  // Minors of /dev/nvidia-caps/nvidia-cap<N> that grant access to the GI and the CI, from
  // /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<gi>[/ci<ci>]/access; -1 = unknown.
  int gi_cap_minor = -1;
  int ci_cap_minor = -1;
  friend bool operator==(const MigDevice&, const MigDevice&) = default;
};

// One GPU of the node as the device layer reports it.
struct NodeGpu {
  int index = 0;
  std::string uuid;     // "GPU-…"
  std::string product;  // nvmlDeviceGetName, "NVIDIA H100 80GB HBM3"
  std::string model;    // catalog model id ("H100-80GB"), "" when unknown
  std::string pci_bus_id;
  int device_minor = -1;  // /dev/nvidia<minor>; -1 = unknown (the index is used)
  std::int64_t memory_mib = 0;
  bool mig_enabled = false;  // current MIG mode
  int numa_node = -1;        // -1 = unknown
  bool healthy = true;
  std::string unhealthy_reason;  // why not, when !healthy
  std::vector<MigDevice> mig_devices;
  friend bool operator==(const NodeGpu&, const NodeGpu&) = default;
};

struct NodeSnapshot {
  std::vector<NodeGpu> gpus;
  friend bool operator==(const NodeSnapshot&, const NodeSnapshot&) = default;
};

// Which GPUs are offered in shares, and in how many units.
struct SharingConfig {
  // GPUs offered as gpuslice.io/gpu-share instead of nvidia.com/gpu: by index ("0") or UUID.
  // "all" = every MIG-disabled GPU.
  std::vector<std::string> shared_gpus;
  int units =
      100;  // units per shared GPU: a divisor of 1000 from 2 to 1000 (a unit = 1000/units milli)

  bool Shares(const NodeGpu& gpu) const;
};

// Checks the sharing settings (units in range, no empty names).
absl::Status ValidateSharing(const SharingConfig& config);

struct PluginDevice {
  std::string id;
  bool healthy = true;
  int numa_node = -1;
  friend bool operator==(const PluginDevice&, const PluginDevice&) = default;
};

// Resource name → its devices (ordered by GPU index, then placement start / unit number).
using ResourceMap = std::map<std::string, std::vector<PluginDevice>>;

struct NodeResources {
  ResourceMap resources;
  std::vector<std::string> skipped;  // devices not offered, with the reason
};

NodeResources ResourcesOf(const NodeSnapshot& node, const SharingConfig& sharing);

// `nvidia.com/mig-<profile>` for a GI profile name ('+' → '.').
std::string MigResourceName(std::string_view profile);

// The share device ID of unit `unit` of a GPU, and back. ParseShareId fails on anything else.
std::string ShareDeviceId(std::string_view gpu_uuid, int unit);
struct ShareUnit {
  std::string gpu_uuid;
  int unit = 0;
};
absl::StatusOr<ShareUnit> ParseShareId(std::string_view id);

// Where a device ID lives on the node: its GPU, and for MIG devices the MIG device.
struct DeviceLocation {
  const NodeGpu* gpu = nullptr;
  const MigDevice* mig = nullptr;  // null for whole GPUs and share units
  int unit = -1;                   // share units only
};
// NotFound when the node has no such device.
absl::StatusOr<DeviceLocation> Locate(const NodeSnapshot& node, std::string_view id);

}  // namespace gpuslice::k8s
