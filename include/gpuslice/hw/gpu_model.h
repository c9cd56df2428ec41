// gpuslice/hw/gpu_model.h
//
// The facts gpuslice knows about one GPU model: identity (names, PCI ids), memory and SMs, and for
// MIG-capable models every GPU-instance (GI) profile with its placements and the compute-instance
// (CI) profiles that fit inside each GI. These are plain values: they are built once by the catalog
// loader (gpuslice/hw/catalog.h) and never change afterwards, so they are safe to share between
// threads.
//
// Every fact carries a Confidence, because NVIDIA publishes some numbers only through captures of
// real hardware and others not at all (see docs/CATALOG.md). Users always see how sure we are.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::hw {

// How well a fact is established. Ordered: a larger value is weaker.
enum class Confidence : std::uint8_t {
  kConfirmed = 0,    // seen in real nvidia-smi/NVML output or an NVIDIA table
  kPartial = 1,      // sources agree only in part, or the fact is inferred from a sibling model
  kUnconfirmed = 2,  // no primary source: an estimate or an assumption
};

std::string_view ToString(Confidence confidence);
// Parses "confirmed" | "partial" | "unconfirmed".
std::optional<Confidence> ParseConfidence(std::string_view text);
// The weaker of two confidences.
constexpr Confidence Weakest(Confidence a, Confidence b) { return a > b ? a : b; }

// The media-engine flavour of a GI profile, from its name suffix.
enum class MediaVariant : std::uint8_t {
  kStandard,  // no suffix
  kMe,        // "+me": takes the GPU's single JPEG/OFA engines (NVML *_REV1)
  kMeAll,     // "+me.all": takes all media engines; only "-me" profiles may coexist (NVML *_ALL_ME)
  kNoMe,      // "-me": no media engines at all (NVML *_NO_ME)
  kGfx,       // "+gfx": graphics-capable (NVML *_GFX), used for MIG-backed vGPU
};

struct EngineCounts {
  int copy = 0;     // CE
  int decoder = 0;  // NVDEC
  int encoder = 0;  // NVENC
  int jpeg = 0;     // NVJPG
  int ofa = 0;      // optical-flow accelerator
};

// Confidence of each group of facts of one GI profile.
struct ProfileConfidence {
  Confidence ids = Confidence::kConfirmed;         // smi_id and NVML constant
  Confidence memory = Confidence::kConfirmed;      // memory_mib
  Confidence sms = Confidence::kConfirmed;         // multiprocessor count
  Confidence engines = Confidence::kConfirmed;     // engine counts
  Confidence placements = Confidence::kConfirmed;  // starts, placement_size, max_instances
  Confidence Overall() const;
};

// A memory size some driver version reports instead of the main value.
struct AlternateMemory {
  std::int64_t mib = 0;
  std::string note;
};

// One GPU-instance profile of one GPU model, e.g. H100-80GB "3g.40gb".
struct GiProfile {
  std::string name;                  // as nvidia-smi prints it without "MIG ", e.g. "1g.10gb+me"
  std::vector<std::string> aliases;  // names other drivers used for the same profile ("7g.79gb")
  int smi_id = 0;                    // nvidia-smi profile ID == nvmlGpuInstanceProfileInfo_t.id
  int nvml_const = 0;           // NVML_GPU_INSTANCE_PROFILE_* value used to look the profile up
  std::string nvml_const_name;  // e.g. "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1"
  int compute_slices = 0;       // the "g" of the name
  int placement_size = 0;       // placement units (memory slices) the instance occupies
  std::int64_t memory_mib = 0;  // nvmlGpuInstanceProfileInfo_t.memorySizeMB
  std::vector<AlternateMemory> memory_alt;
  int sms = 0;
  EngineCounts engines;
  int max_instances = 0;           // instanceCount ("Instances Total" of -lgip)
  std::vector<int> starts;         // allowed placement starts, ascending (-lgipp)
  std::vector<int> default_order;  // starts the driver tries when no placement is given
  MediaVariant variant = MediaVariant::kStandard;
  int min_driver_branch = 0;  // e.g. 470 for "R470"; 0 = any driver that supports MIG on this GPU
  ProfileConfidence confidence;
  std::string note;
};

// One compute-instance profile that fits inside a GI with a given number of compute slices.
struct CiProfile {
  std::string name;  // "1c", "2c", ...
  int id = 0;        // NVML CI profile id (equal to its NVML constant)
  int slices = 0;    // compute slices of the parent GI it uses
  int max_instances = 0;
  std::vector<int> starts;  // in compute slices of the parent GI
  bool is_default = false;  // the CI `nvidia-smi mig -cgi ... -C` creates
  Confidence confidence = Confidence::kConfirmed;
  std::string note;
};

// The MIG facts of a MIG-capable model.
struct MigSpec {
  int compute_slices = 0;   // 7 on A100/H100/B200, 4 on A30 and RTX PRO 6000
  int placement_units = 0;  // 8, 4 or 12
  int sms = 0;              // SMs of the full-GPU instance
  int min_driver_branch = 0;
  std::string min_driver;  // full version text, e.g. "525.85.12"
  Confidence default_placement_confidence = Confidence::kUnconfirmed;
  std::string default_placement_note;
  std::vector<std::string> balanced;  // mig-parted's all-balanced layout, one name per instance
  std::vector<GiProfile> profiles;    // in catalog order (largest memory last is not guaranteed)
  // ci_profiles[g] lists the CI profiles of a GI with g compute slices (index 0 unused).
  std::vector<std::vector<CiProfile>> ci_profiles;

  // The profile with this name or alias (exact, case-insensitive, optional "MIG " prefix), or null.
  const GiProfile* FindProfile(std::string_view name) const;
  // The profile with this nvidia-smi profile ID, or null.
  const GiProfile* FindProfileBySmiId(int smi_id) const;
  // Index of `profile` in `profiles`. REQUIRES: profile points into profiles.
  int IndexOf(const GiProfile& profile) const;
  // CI profiles of a GI with `gi_compute_slices` slices (empty if none).
  const std::vector<CiProfile>& CiProfilesFor(int gi_compute_slices) const;
};

// One GPU model, MIG-capable or not.
struct GpuModel {
  std::string id;            // canonical id, e.g. "H100-80GB"
  std::string display_name;  // e.g. "NVIDIA H100 80GB"
  std::vector<std::string> aliases;
  std::vector<std::string> nvml_names;
  std::vector<std::uint16_t> pci_device_ids;  // vendor 0x10DE implied
  std::string architecture;
  std::string chip;
  std::string compute_capability;
  std::int64_t memory_mib = 0;
  int sms = 0;
  Confidence confidence = Confidence::kConfirmed;
  Confidence memory_confidence = Confidence::kConfirmed;
  Confidence sms_confidence = Confidence::kConfirmed;
  Confidence pci_confidence = Confidence::kConfirmed;
  Confidence nvml_names_confidence = Confidence::kConfirmed;
  std::vector<std::string> sources;
  std::vector<std::string> notes;
  std::optional<MigSpec> mig;  // empty for GPUs without MIG

  bool mig_capable() const { return mig.has_value(); }
  // mig-parted's device-filter form of the PCI ids, e.g. "0x233010DE".
  std::vector<std::string> MigPartedDeviceFilters() const;
};

}  // namespace gpuslice::hw
