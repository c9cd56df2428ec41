#include "gpuslice/geometry/enumerate.h"

#include <map>

namespace gpuslice::geometry {

bool IsBaseProfile(const hw::GiProfile& profile) {
  return profile.variant == hw::MediaVariant::kStandard && profile.nvml_const <= 0x06;
}

ProfileSet BaseProfiles(const Shape& shape) {
  ProfileSet set;
  for (int p = 0; p < shape.profile_count(); ++p) {
    if (IsBaseProfile(shape.profile(p))) set.set(static_cast<size_t>(p));
  }
  return set;
}

ProfileSet AllProfiles(const Shape& shape) {
  ProfileSet set;
  for (int p = 0; p < shape.profile_count(); ++p) set.set(static_cast<size_t>(p));
  return set;
}

bool IsMaximal(const Shape& shape, const Occupancy& occupancy, const ProfileSet& profiles,
               const Rules& rules) {
  for (int p = 0; p < shape.profile_count(); ++p) {
    if (profiles.test(static_cast<size_t>(p)) && shape.FreeCount(occupancy, p, rules) > 0) {
      return false;
    }
  }
  return true;
}

namespace {

struct Walker {
  const Shape& shape;
  const EnumerateOptions& options;
  std::vector<std::vector<Placed>>* out;
  std::vector<Placed> current;
  Occupancy occupancy;

  void Walk(int unit) {
    if (unit >= shape.units()) {
      if (current.empty() && !options.include_empty) return;
      if (options.maximal_only && !IsMaximal(shape, occupancy, options.profiles, options.rules)) {
        return;
      }
      out->push_back(current);
      return;
    }
    Walk(unit + 1);  // leave this unit free
    for (int p = 0; p < shape.profile_count(); ++p) {
      if (!options.profiles.test(static_cast<size_t>(p))) continue;
      if (!shape.CanAdd(occupancy, p, unit, options.rules).ok()) continue;
      shape.Add(occupancy, p, unit);
      current.push_back({static_cast<std::uint8_t>(p), static_cast<std::uint8_t>(unit)});
      Walk(unit + shape.placement_size(p));
      current.pop_back();
      shape.Remove(occupancy, p, unit);
    }
  }
};

}  // namespace

std::vector<std::vector<Placed>> EnumerateLayouts(const Shape& shape,
                                                  const EnumerateOptions& options) {
  std::vector<std::vector<Placed>> out;
  Walker walker{shape, options, &out, {}, {}};
  walker.Walk(0);
  return out;
}

std::vector<Multiset> DistinctMultisets(const Shape& shape,
                                        const std::vector<std::vector<Placed>>& layouts) {
  std::vector<Multiset> out;
  std::map<Counts, size_t> index;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const Counts counts = shape.CountsOf(layouts[i]);
    auto [it, inserted] = index.emplace(counts, out.size());
    if (inserted) out.push_back({counts, i, 0});
    ++out[it->second].layouts;
  }
  return out;
}

}  // namespace gpuslice::geometry
