// gpuslice/spec/mig_parted.h
//
// NVIDIA mig-parted's configuration file (api/spec/v1), read and written unchanged, so a file that
// works with `nvidia-mig-parted apply` works with gpuslice and the other way round:
//
//   version: v1
//   mig-configs:
//     all-balanced:                      # a config name (the nvidia.com/mig.config label value)
//       - device-filter: ["0x233010DE"]  # optional; a string or a list; "0x<device><vendor>"
//         devices: all                   # or a list of GPU indices
//         mig-enabled: true
//         mig-devices: {"1g.10gb": 2, "1c.3g.40gb": 3}  # {} = MIG on, no instances
//         gpuslice-placements: ["3g.40gb@4"]           # gpuslice only: where each GI goes
//
// gpuslice-placements is gpuslice's only addition. nvidia-mig-parted itself rejects unknown keys,
// so a file meant for it must not carry placements (clear ConfigEntry::placements before writing).
//
// Reading is strict: unknown keys, wrong types, malformed device ids and profile names are errors
// (InvalidArgument) that name the origin, the line and the field. Whether a profile exists on a GPU
// model is checked later, per GPU, by ResolveEntry. JSON text is read too (it is YAML).
//
// Everything here is pure and deterministic; the functions are safe to call from many threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/hw/gpu_model.h"

namespace gpuslice::spec {

// The NVIDIA PCI vendor id, the low half of every mig-parted device filter.
inline constexpr std::uint32_t kNvidiaVendorId = 0x10DE;

// The mig-parted device-filter id of an NVIDIA GPU: 0x2330 -> 0x233010DE.
constexpr std::uint32_t FullDeviceId(std::uint16_t pci_device_id) {
  return (static_cast<std::uint32_t>(pci_device_id) << 16) | kNvidiaVendorId;
}

// Which GPUs (by index) an entry covers: every GPU, or the listed indices.
struct DeviceSelector {
  bool all = false;
  std::vector<int> indices;  // when !all, in file order
  bool Includes(int index) const;
  friend bool operator==(const DeviceSelector&, const DeviceSelector&) = default;
};

// One "name: count" of mig-devices: a GI profile ("1g.10gb") or a CI of one ("1c.3g.40gb").
struct MigDevice {
  std::string name;
  int count = 0;
  friend bool operator==(const MigDevice&, const MigDevice&) = default;
};

// One list entry of a named config.
struct ConfigEntry {
  // Full ids as mig-parted writes them: 0x233010DE (device << 16 | 0x10DE); empty = any GPU.
  std::vector<std::uint32_t> device_filter;
  DeviceSelector devices;
  bool mig_enabled = false;
  // In file order. Empty with mig_enabled = "{}" (MIG on, no instances).
  std::vector<MigDevice> mig_devices;
  // gpuslice extension, key "gpuslice-placements": ["3g.40gb@4", "1g.10gb@0"]; empty if absent.
  std::vector<std::string> placements;
  int line = 0;  // 1-based line of the entry, for messages (0 when built in code)
};

// A whole file: the named configs in file order.
struct MigConfigFile {
  std::vector<std::pair<std::string, std::vector<ConfigEntry>>> configs;
};

// Parses YAML or JSON text. `origin` names the file in messages ("config.yaml", "<stdin>").
absl::StatusOr<MigConfigFile> ParseMigPartedConfig(std::string_view text, std::string_view origin);

enum class OutputFormat { kYaml, kJson };

// Writes `file` in mig-parted's format, configs and entries in their order. The result parses back
// (ParseMigPartedConfig) to an equal file, apart from `line`. A filter with one id is written as a
// string, several as a list; a disabled entry has no mig-devices; an enabled one with none has {}.
std::string WriteMigPartedConfig(const MigConfigFile& file, OutputFormat format);

// The config named `name` (exact match). An empty name is allowed when the file has exactly one
// config (InvalidArgument otherwise). An unknown name is NotFound, listing the names that exist.
// The pointer points into `file`.
absl::StatusOr<const std::vector<ConfigEntry>*> SelectConfig(const MigConfigFile& file,
                                                             std::string_view name);

// The entry of `entries` that applies to GPU `index` whose PCI device id is `pci_device_id` (16
// bit, e.g. 0x2330). An entry applies when its devices include the index and its filter is empty or
// holds the GPU's full id. nullptr when none applies (the GPU is left alone); InvalidArgument
// naming both lines when two entries apply to the same GPU.
absl::StatusOr<const ConfigEntry*> EntryForGpu(const std::vector<ConfigEntry>& entries, int index,
                                               std::uint16_t pci_device_id);

// One GPU instance wanted on a GPU.
struct DesiredGi {
  int profile = 0;           // index into MigSpec::profiles
  std::vector<int> cis;      // indices into MigSpec::CiProfilesFor(g); empty = one default CI
  std::optional<int> start;  // from gpuslice-placements; nullopt = wherever the driver puts it
  friend bool operator==(const DesiredGi&, const DesiredGi&) = default;
};

// The GPU instances `entry` asks for on one GPU of `model`, resolved the way mig-parted creates
// them:
//   * a plain device "<g>g.<mem>gb" (or "<g>c.<g>g.<mem>gb") is one GI with its default CI;
//   * a split device "<c>c.<g>g.<mem>gb" is one CI of a GI "<g>g.<mem>gb". The CIs of one GI
//     profile are taken largest first, and each fills the current GI of that profile while it fits
//     (exact CI placement inside the GI) before a new GI is started;
//   * GIs come in the order their profiles first appear in mig-devices; within one profile the
//     plain GIs come before the split ones.
// Profile names are matched with MigSpec::FindProfile, so the model's aliases (7g.79gb) work.
// gpuslice-placements must name each resolved GI exactly once (as a multiset of GI profiles); the
// i-th placement of a profile goes to the i-th GI of that profile, and its start must be one the
// profile allows. Whether the GIs fit together on the GPU is not checked here (geometry::Shape
// does that).
// Errors: an unknown GI or CI profile is NotFound naming the model, the entry line and the profiles
// that exist; a count <= 0, a bad placement or a placement multiset mismatch is InvalidArgument; an
// enabled entry on a model without MIG is FailedPrecondition. A disabled entry resolves to nothing.
absl::StatusOr<std::vector<DesiredGi>> ResolveEntry(const ConfigEntry& entry,
                                                    const hw::GpuModel& model);

// The reverse, for `export`: the mig-devices of a GPU holding `gis` (starts are ignored), sorted by
// name as mig-parted's export writes them. A GI with no CIs or with only its full-size CI counts as
// the GI's name ("3g.40gb"); each split CI counts as "<c>c.<gi name>".
// REQUIRES: model.mig_capable() and valid profile/CI indices.
std::vector<MigDevice> MigDevicesOf(const hw::GpuModel& model, const std::vector<DesiredGi>& gis);

// Syntax check of a mig-devices name: "<g>g.<n>gb" with an optional "+me", "+me.all", "+gfx" or
// "-me" suffix, optionally prefixed by "<c>c.". Numbers are positive decimals.
bool IsValidMigDeviceName(std::string_view name);

// Parses "0xDDDDVVVV" (8 hex digits, any case) into a full device id.
std::optional<std::uint32_t> ParseDeviceFilterId(std::string_view text);
// "0x233010DE".
std::string FormatDeviceFilterId(std::uint32_t id);

}  // namespace gpuslice::spec
