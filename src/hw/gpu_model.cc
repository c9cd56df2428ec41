#include "gpuslice/hw/gpu_model.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace gpuslice::hw {

std::string_view ToString(Confidence confidence) {
  switch (confidence) {
    case Confidence::kConfirmed:
      return "confirmed";
    case Confidence::kPartial:
      return "partial";
    case Confidence::kUnconfirmed:
      return "unconfirmed";
  }
  return "unconfirmed";
}

std::optional<Confidence> ParseConfidence(std::string_view text) {
  if (text == "confirmed") return Confidence::kConfirmed;
  if (text == "partial") return Confidence::kPartial;
  if (text == "unconfirmed") return Confidence::kUnconfirmed;
  return std::nullopt;
}

Confidence ProfileConfidence::Overall() const {
  return Weakest(Weakest(Weakest(ids, memory), Weakest(sms, engines)), placements);
}

namespace {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view StripMigPrefix(std::string_view name) {
  while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
  if (name.size() > 4 && EqualsIgnoreCase(name.substr(0, 4), "MIG ")) name.remove_prefix(4);
  while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
  return name;
}

}  // namespace

const GiProfile* MigSpec::FindProfile(std::string_view name) const {
  name = StripMigPrefix(name);
  for (const GiProfile& profile : profiles) {
    if (EqualsIgnoreCase(profile.name, name)) return &profile;
  }
  for (const GiProfile& profile : profiles) {
    for (const std::string& alias : profile.aliases) {
      if (EqualsIgnoreCase(alias, name)) return &profile;
    }
  }
  return nullptr;
}

const GiProfile* MigSpec::FindProfileBySmiId(int smi_id) const {
  for (const GiProfile& profile : profiles) {
    if (profile.smi_id == smi_id) return &profile;
  }
  return nullptr;
}

int MigSpec::IndexOf(const GiProfile& profile) const {
  return static_cast<int>(&profile - profiles.data());
}

const std::vector<CiProfile>& MigSpec::CiProfilesFor(int gi_compute_slices) const {
  static const std::vector<CiProfile> kNone;
  if (gi_compute_slices <= 0 || static_cast<size_t>(gi_compute_slices) >= ci_profiles.size()) {
    return kNone;
  }
  return ci_profiles[static_cast<size_t>(gi_compute_slices)];
}

std::vector<std::string> GpuModel::MigPartedDeviceFilters() const {
  std::vector<std::string> filters;
  for (std::uint16_t pci_id : pci_device_ids) {
    char buffer[16];
    std::snprintf(buffer, sizeof buffer, "0x%04X10DE", static_cast<unsigned>(pci_id));
    filters.emplace_back(buffer);
  }
  return filters;
}

}  // namespace gpuslice::hw
