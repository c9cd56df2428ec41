#include "gpuslice/geometry/compute_instances.h"

#include <algorithm>
#include <cctype>

namespace gpuslice::geometry {
namespace {

std::uint32_t SliceMask(int start, int size) { return ((1U << size) - 1U) << start; }

}  // namespace

CiShape::CiShape(const hw::MigSpec& mig, const hw::GiProfile& gi)
    : mig_(&mig), gi_(&gi), profiles_(&mig.CiProfilesFor(gi.compute_slices)) {}

int CiShape::Find(std::string_view ci_name) const {
  for (size_t i = 0; i < profiles_->size(); ++i) {
    if ((*profiles_)[i].name == ci_name) return static_cast<int>(i);
  }
  return -1;
}

int CiShape::FindById(int ci_profile_id) const {
  for (size_t i = 0; i < profiles_->size(); ++i) {
    if ((*profiles_)[i].id == ci_profile_id) return static_cast<int>(i);
  }
  return -1;
}

int CiShape::DefaultIndex() const {
  for (size_t i = 0; i < profiles_->size(); ++i) {
    if ((*profiles_)[i].is_default) return static_cast<int>(i);
  }
  return -1;
}

std::optional<std::string> CiShape::Validate(std::span<const CiPlaced> cis) const {
  std::vector<int> counts(profiles_->size(), 0);
  std::uint32_t used = 0;
  for (const CiPlaced& placed : cis) {
    if (placed.ci >= profiles_->size()) return "unknown compute-instance profile";
    const hw::CiProfile& ci = (*profiles_)[placed.ci];
    const std::string name = DeviceName(placed.ci);
    if (std::find(ci.starts.begin(), ci.starts.end(), placed.start) == ci.starts.end()) {
      return "start not allowed: " + name + " cannot start at compute slice " +
             std::to_string(placed.start) + " of " + gi_->name;
    }
    if (++counts[placed.ci] > ci.max_instances) {
      return "instance cap: a " + gi_->name + " GPU instance holds at most " +
             std::to_string(ci.max_instances) + " " + ci.name + " compute instance" +
             (ci.max_instances == 1 ? "" : "s");
    }
    const std::uint32_t mask = SliceMask(placed.start, ci.slices);
    if ((used & mask) != 0) {
      return "overlap: " + name + "@" + std::to_string(placed.start) +
             " overlaps another compute instance of the same " + gi_->name + " GPU instance";
    }
    used |= mask;
  }
  return std::nullopt;
}

std::optional<std::vector<CiPlaced>> CiShape::Place(std::span<const std::uint8_t> wanted) const {
  std::vector<std::uint8_t> items(wanted.begin(), wanted.end());
  for (std::uint8_t ci : items) {
    if (ci >= profiles_->size()) return std::nullopt;
  }
  // Largest first; exhaustive depth-first search (at most 7 slices, so tiny).
  std::sort(items.begin(), items.end(), [this](std::uint8_t a, std::uint8_t b) {
    return (*profiles_)[a].slices > (*profiles_)[b].slices;
  });
  std::vector<CiPlaced> placed(items.size());
  std::vector<int> counts(profiles_->size(), 0);
  auto search = [&](auto&& self, size_t index, std::uint32_t used) -> bool {
    if (index == items.size()) return true;
    const hw::CiProfile& ci = (*profiles_)[items[index]];
    if (counts[items[index]] >= ci.max_instances) return false;
    for (int start : ci.starts) {
      const std::uint32_t mask = SliceMask(start, ci.slices);
      if ((used & mask) != 0) continue;
      placed[index] = {items[index], static_cast<std::uint8_t>(start)};
      ++counts[items[index]];
      if (self(self, index + 1, used | mask)) return true;
      --counts[items[index]];
    }
    return false;
  };
  if (!search(search, 0, 0)) return std::nullopt;
  std::sort(placed.begin(), placed.end(),
            [](const CiPlaced& a, const CiPlaced& b) { return a.start < b.start; });
  return placed;
}

int CiShape::FreeCount(std::span<const CiPlaced> cis, int ci_index) const {
  if (ci_index < 0 || static_cast<size_t>(ci_index) >= profiles_->size()) return 0;
  const hw::CiProfile& ci = (*profiles_)[static_cast<size_t>(ci_index)];
  std::uint32_t used = 0;
  int count = 0;
  for (const CiPlaced& placed : cis) {
    used |= SliceMask(placed.start, (*profiles_)[placed.ci].slices);
    count += placed.ci == ci_index ? 1 : 0;
  }
  int free = 0;
  for (int start : ci.starts) {
    if (count + free >= ci.max_instances) break;
    const std::uint32_t mask = SliceMask(start, ci.slices);
    if ((used & mask) != 0) continue;
    used |= mask;
    ++free;
  }
  return free;
}

std::string CiShape::DeviceName(int ci_index) const {
  const hw::CiProfile& ci = (*profiles_)[static_cast<size_t>(ci_index)];
  if (ci.slices == gi_->compute_slices) return gi_->name;
  return ci.name + "." + gi_->name;
}

std::optional<std::pair<std::string, std::string>> SplitCiDeviceName(std::string_view name) {
  // "<c>c.<g>g.<mem>gb..." : digits, 'c', '.', then the GI name.
  size_t i = 0;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == 0 || i + 2 >= name.size() || name[i] != 'c' || name[i + 1] != '.') return std::nullopt;
  return std::make_pair(std::string(name.substr(0, i + 1)), std::string(name.substr(i + 2)));
}

}  // namespace gpuslice::geometry
