// gpuslice/geometry/compute_instances.h
//
// Compute-instance (CI) splits inside one GPU instance, e.g. a 3g.40gb GI split into 1c + 2c. CIs
// share the GI's memory and engines and divide its compute slices; placements are in compute slices
// of the GI. Pure and deterministic.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpuslice/hw/gpu_model.h"

namespace gpuslice::geometry {

// One CI: an index into MigSpec::CiProfilesFor(gi compute slices) and its first compute slice.
struct CiPlaced {
  std::uint8_t ci = 0;
  std::uint8_t start = 0;
  friend bool operator==(const CiPlaced&, const CiPlaced&) = default;
};

// The CI profiles of one GI and the rules among them.
class CiShape {
 public:
  // REQUIRES: gi is a profile of mig. Both must outlive the CiShape.
  CiShape(const hw::MigSpec& mig, const hw::GiProfile& gi);

  const hw::GiProfile& gi() const { return *gi_; }
  const std::vector<hw::CiProfile>& profiles() const { return *profiles_; }
  int slices() const { return gi_->compute_slices; }
  // Index of the CI profile named "1c" / "2c" … or -1.
  int Find(std::string_view ci_name) const;
  // Index of the CI profile with this NVML CI profile id, or -1.
  int FindById(int ci_profile_id) const;
  // Index of the default CI profile (the one `-C` creates).
  int DefaultIndex() const;

  // Empty when valid, else the reason (overlap, start not allowed, cap).
  std::optional<std::string> Validate(std::span<const CiPlaced> cis) const;
  // Exact placement of the CI profiles `wanted` (indices, any order) inside the empty GI.
  std::optional<std::vector<CiPlaced>> Place(std::span<const std::uint8_t> wanted) const;
  // How many more CIs of profile `ci` fit beside `cis`.
  int FreeCount(std::span<const CiPlaced> cis, int ci) const;

  // The MIG device name of a CI: "1c.3g.40gb", or the GI's name when the CI spans the whole GI.
  std::string DeviceName(int ci) const;

 private:
  const hw::MigSpec* mig_;
  const hw::GiProfile* gi_;
  const std::vector<hw::CiProfile>* profiles_;
};

// Splits a MIG device name such as "1c.3g.40gb" into ("1c", "3g.40gb"); nullopt if it has no CI
// part.
std::optional<std::pair<std::string, std::string>> SplitCiDeviceName(std::string_view name);

}  // namespace gpuslice::geometry
