#include "gpuslice/geometry/shape.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdio>
#include <cstdlib>

namespace gpuslice::geometry {
namespace {

constexpr int kPairingDriverBranch = 510;  // 4g + 3g together needs R510+ (MIG guide, concepts)

UnitMask Span(int start, int size) { return ((UnitMask{1} << size) - 1) << start; }

[[noreturn]] void Die(const char* message, const std::string& model) {
  std::fprintf(stderr, "gpuslice: internal error: %s (%s)\n", message, model.c_str());
  std::abort();
}

}  // namespace

Shape::Shape(const hw::GpuModel& model) : model_(&model) {
  if (!model.mig) Die("Shape needs a MIG-capable model", model.id);
  const hw::MigSpec& mig = *model.mig;
  if (mig.profiles.size() > kMaxProfiles || mig.placement_units > kMaxUnits) {
    Die("model exceeds the geometry engine's limits", model.id);
  }
  profile_count_ = static_cast<int>(mig.profiles.size());
  units_ = mig.placement_units;
  all_units_ = Span(0, units_);
  base_unit_ = units_;
  for (int p = 0; p < profile_count_; ++p) {
    const hw::GiProfile& profile = mig.profiles[static_cast<size_t>(p)];
    ProfileRule& r = rules_[static_cast<size_t>(p)];
    for (int start : profile.starts) r.start_mask |= UnitMask{1} << start;
    r.size = static_cast<std::uint8_t>(profile.placement_size);
    r.cap = static_cast<std::uint8_t>(profile.max_instances);
    r.jpeg = static_cast<std::uint8_t>(profile.engines.jpeg);
    r.ofa = static_cast<std::uint8_t>(profile.engines.ofa);
    r.compute_slices = static_cast<std::uint8_t>(profile.compute_slices);
    r.variant = profile.variant;
    r.min_driver = profile.min_driver_branch;
    for (int start : profile.default_order) {
      r.default_order[r.default_order_size++] = static_cast<std::uint8_t>(start);
    }
    ofa_total_ = std::max(ofa_total_, r.ofa);
    base_unit_ = std::min(base_unit_, profile.placement_size);
    size_order_[static_cast<size_t>(p)] = static_cast<std::uint8_t>(p);
  }
  std::stable_sort(size_order_.begin(), size_order_.begin() + profile_count_,
                   [this](std::uint8_t a, std::uint8_t b) { return rule(a).size > rule(b).size; });
}

const hw::GiProfile& Shape::profile(int index) const {
  return mig().profiles[static_cast<size_t>(index)];
}

UnitMask Shape::MaskOf(int profile, int start) const { return Span(start, rule(profile).size); }

bool Shape::StartAllowed(int profile, int start) const {
  return start >= 0 && start < units_ && ((rule(profile).start_mask >> start) & 1U) != 0;
}

Violation Shape::CanAddAnywhere(const Occupancy& occ, int profile, const Rules& rules) const {
  const ProfileRule& r = rule(profile);
  if (occ.instances >= kMaxInstances) return {ViolationKind::kTooManyInstances, -1, -1, profile};
  if (rules.driver_branch != 0 &&
      (r.min_driver > rules.driver_branch || mig().min_driver_branch > rules.driver_branch)) {
    return {ViolationKind::kProfileTooNew, -1, -1, profile};
  }
  if (occ.count[static_cast<size_t>(profile)] >= r.cap) {
    return {ViolationKind::kInstanceCap, -1, -1, profile};
  }
  if (r.variant == hw::MediaVariant::kMeAll
          ? occ.media_users > 0
          : (occ.all_me > 0 && r.variant != hw::MediaVariant::kNoMe)) {
    return {ViolationKind::kMediaExclusive, -1, -1, profile};
  }
  if (occ.ofa + r.ofa > ofa_total_) return {ViolationKind::kMediaEngines, -1, -1, profile};
  if (rules.driver_branch != 0 && rules.driver_branch < kPairingDriverBranch &&
      ((r.compute_slices == 4 && occ.three_slice > 0) ||
       (r.compute_slices == 3 && occ.four_slice > 0))) {
    return {ViolationKind::kDriverPairing, -1, -1, profile};
  }
  return {};
}

Violation Shape::CanAdd(const Occupancy& occ, int profile, int start, const Rules& rules) const {
  Violation v = CanAddAnywhere(occ, profile, rules);
  if (!v.ok()) return v;
  if (!StartAllowed(profile, start)) return {ViolationKind::kStartNotAllowed, -1, -1, profile};
  if ((occ.used & MaskOf(profile, start)) != 0) return {ViolationKind::kOverlap, -1, -1, profile};
  return {};
}

void Shape::Add(Occupancy& occ, int profile, int start) const {
  const ProfileRule& r = rule(profile);
  occ.used |= MaskOf(profile, start);
  ++occ.count[static_cast<size_t>(profile)];
  occ.jpeg = static_cast<std::uint8_t>(occ.jpeg + r.jpeg);
  occ.ofa = static_cast<std::uint8_t>(occ.ofa + r.ofa);
  ++occ.instances;
  if (r.variant == hw::MediaVariant::kMeAll) ++occ.all_me;
  if (r.variant != hw::MediaVariant::kNoMe) ++occ.media_users;
  if (r.compute_slices == 4) ++occ.four_slice;
  if (r.compute_slices == 3) ++occ.three_slice;
}

void Shape::Remove(Occupancy& occ, int profile, int start) const {
  const ProfileRule& r = rule(profile);
  occ.used &= ~MaskOf(profile, start);
  --occ.count[static_cast<size_t>(profile)];
  occ.jpeg = static_cast<std::uint8_t>(occ.jpeg - r.jpeg);
  occ.ofa = static_cast<std::uint8_t>(occ.ofa - r.ofa);
  --occ.instances;
  if (r.variant == hw::MediaVariant::kMeAll) --occ.all_me;
  if (r.variant != hw::MediaVariant::kNoMe) --occ.media_users;
  if (r.compute_slices == 4) --occ.four_slice;
  if (r.compute_slices == 3) --occ.three_slice;
}

Occupancy Shape::OccupancyOf(std::span<const Placed> layout) const {
  Occupancy occ;
  for (const Placed& placed : layout) Add(occ, placed.profile, placed.start);
  return occ;
}

Counts Shape::CountsOf(std::span<const Placed> layout) const {
  Counts counts{};
  for (const Placed& placed : layout) ++counts[placed.profile];
  return counts;
}

Violation Shape::CheckCounts(const Occupancy& existing, const Counts& wanted,
                             const Rules& rules) const {
  int total = existing.instances;
  int units_needed = 0;
  int ofa = existing.ofa;
  int all_me = existing.all_me;
  int media_users = existing.media_users;
  int four = existing.four_slice;
  int three = existing.three_slice;
  int last_ofa_profile = -1;
  int first_all_me = -1;
  int first_media_user = -1;
  for (int p = 0; p < profile_count_; ++p) {
    const int n = wanted[static_cast<size_t>(p)];
    if (n == 0) continue;
    const ProfileRule& r = rule(p);
    total += n;
    if (rules.driver_branch != 0 &&
        (r.min_driver > rules.driver_branch || mig().min_driver_branch > rules.driver_branch)) {
      return {ViolationKind::kProfileTooNew, -1, -1, p};
    }
    if (existing.count[static_cast<size_t>(p)] + n > r.cap) {
      return {ViolationKind::kInstanceCap, -1, -1, p};
    }
    units_needed += n * r.size;
    ofa += n * r.ofa;
    if (r.ofa > 0) last_ofa_profile = p;
    if (r.variant == hw::MediaVariant::kMeAll) {
      all_me += n;
      if (first_all_me < 0) first_all_me = p;
    }
    if (r.variant != hw::MediaVariant::kNoMe) {
      media_users += n;
      if (r.variant != hw::MediaVariant::kMeAll && first_media_user < 0) first_media_user = p;
    }
    if (r.compute_slices == 4) four += n;
    if (r.compute_slices == 3) three += n;
  }
  if (total > kMaxInstances) return {ViolationKind::kTooManyInstances};
  if (all_me > 0 && media_users > all_me) {
    return {ViolationKind::kMediaExclusive, -1, -1,
            first_all_me >= 0 ? first_all_me : first_media_user};
  }
  if (all_me > 1) return {ViolationKind::kMediaExclusive, -1, -1, first_all_me};
  if (ofa > ofa_total_) return {ViolationKind::kMediaEngines, -1, -1, last_ofa_profile};
  if (rules.driver_branch != 0 && rules.driver_branch < kPairingDriverBranch && four > 0 &&
      three > 0) {
    return {ViolationKind::kDriverPairing};
  }
  if (units_needed > units_ - std::popcount(existing.used)) return {ViolationKind::kNoPlacement};
  return {};
}

Violation Shape::Validate(std::span<const Placed> layout, const Rules& rules) const {
  if (layout.size() > kMaxInstances) return {ViolationKind::kTooManyInstances};
  Counts counts = CountsOf(layout);
  Violation v = CheckCounts(Occupancy{}, counts, rules);
  if (!v.ok() && v.kind != ViolationKind::kNoPlacement) {
    // Point at the instance that breaks the rule.
    for (size_t i = 0; i < layout.size(); ++i) {
      if (layout[i].profile == v.profile) v.instance = static_cast<int>(i);
    }
    return v;
  }
  UnitMask used = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    const Placed& placed = layout[i];
    if (!StartAllowed(placed.profile, placed.start) ||
        placed.start + rule(placed.profile).size > units_) {
      return {ViolationKind::kStartNotAllowed, static_cast<int>(i), -1, placed.profile};
    }
    const UnitMask mask = MaskOf(placed.profile, placed.start);
    if ((used & mask) != 0) {
      for (size_t j = 0; j < i; ++j) {
        if ((MaskOf(layout[j].profile, layout[j].start) & mask) != 0) {
          return {ViolationKind::kOverlap, static_cast<int>(i), static_cast<int>(j),
                  placed.profile};
        }
      }
    }
    used |= mask;
  }
  return {};
}

std::vector<Violation> Shape::AllViolations(std::span<const Placed> layout,
                                            const Rules& rules) const {
  std::vector<Violation> out;
  if (layout.size() > kMaxInstances) {
    out.push_back({ViolationKind::kTooManyInstances});
    return out;
  }
  const Counts counts = CountsOf(layout);
  auto last_index_of = [&](int profile) {
    int index = -1;
    for (size_t i = 0; i < layout.size(); ++i) {
      if (layout[i].profile == profile) index = static_cast<int>(i);
    }
    return index;
  };
  for (int p = 0; p < profile_count_; ++p) {
    if (counts[static_cast<size_t>(p)] == 0) continue;
    if (rules.driver_branch != 0 && (rule(p).min_driver > rules.driver_branch ||
                                     mig().min_driver_branch > rules.driver_branch)) {
      out.push_back({ViolationKind::kProfileTooNew, last_index_of(p), -1, p});
    }
    if (counts[static_cast<size_t>(p)] > rule(p).cap) {
      out.push_back({ViolationKind::kInstanceCap, last_index_of(p), -1, p});
    }
  }
  // Media and driver-pairing rules, checked instance by instance so the pair can be named.
  Occupancy occ;
  bool media_reported = false;
  bool pairing_reported = false;
  bool ofa_reported = false;
  for (size_t i = 0; i < layout.size(); ++i) {
    const int p = layout[i].profile;
    const ProfileRule& r = rule(p);
    if (!media_reported) {
      for (size_t j = 0; j < i; ++j) {
        const ProfileRule& other = rule(layout[j].profile);
        const bool a_all = r.variant == hw::MediaVariant::kMeAll;
        const bool b_all = other.variant == hw::MediaVariant::kMeAll;
        if ((a_all && other.variant != hw::MediaVariant::kNoMe) ||
            (b_all && r.variant != hw::MediaVariant::kNoMe)) {
          out.push_back({ViolationKind::kMediaExclusive,
                         a_all ? static_cast<int>(i) : static_cast<int>(j),
                         a_all ? static_cast<int>(j) : static_cast<int>(i), p});
          media_reported = true;
          break;
        }
      }
    }
    if (!ofa_reported && r.ofa > 0 && occ.ofa + r.ofa > ofa_total_) {
      int holder = -1;
      for (size_t j = 0; j < i; ++j) {
        if (rule(layout[j].profile).ofa > 0) holder = static_cast<int>(j);
      }
      out.push_back({ViolationKind::kMediaEngines, static_cast<int>(i), holder, p});
      ofa_reported = true;
    }
    if (!pairing_reported && rules.driver_branch != 0 &&
        rules.driver_branch < kPairingDriverBranch &&
        ((r.compute_slices == 4 && occ.three_slice > 0) ||
         (r.compute_slices == 3 && occ.four_slice > 0))) {
      int other = -1;
      for (size_t j = 0; j < i; ++j) {
        const int slices = rule(layout[j].profile).compute_slices;
        if (slices == (r.compute_slices == 4 ? 3 : 4)) other = static_cast<int>(j);
      }
      out.push_back({ViolationKind::kDriverPairing, static_cast<int>(i), other, p});
      pairing_reported = true;
    }
    Add(occ, p, 0);  // only the counters matter here
    occ.used = 0;
  }
  UnitMask used = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    const Placed& placed = layout[i];
    if (!StartAllowed(placed.profile, placed.start) ||
        placed.start + rule(placed.profile).size > units_) {
      out.push_back({ViolationKind::kStartNotAllowed, static_cast<int>(i), -1, placed.profile});
      continue;
    }
    const UnitMask mask = MaskOf(placed.profile, placed.start);
    if ((used & mask) != 0) {
      for (size_t j = 0; j < i; ++j) {
        if ((MaskOf(layout[j].profile, layout[j].start) & mask) != 0 &&
            StartAllowed(layout[j].profile, layout[j].start)) {
          out.push_back(
              {ViolationKind::kOverlap, static_cast<int>(i), static_cast<int>(j), placed.profile});
          break;
        }
      }
    }
    used |= mask;
  }
  return out;
}

bool Shape::PlaceRecursive(UnitMask used, std::span<const std::uint8_t> items, size_t index,
                           int min_start, std::uint8_t* starts) const {
  if (index == items.size()) return true;
  const int p = items[index];
  const ProfileRule& r = rule(p);
  // Remaining units must fit in the free units.
  int needed = 0;
  for (size_t k = index; k < items.size(); ++k) needed += rule(items[k]).size;
  if (needed > units_ - std::popcount(used)) return false;
  UnitMask candidates = r.start_mask & ~((UnitMask{1} << min_start) - 1);
  while (candidates != 0) {
    const int start = std::countr_zero(candidates);
    candidates &= candidates - 1;
    const UnitMask mask = Span(start, r.size);
    if ((used & mask) != 0) continue;
    starts[index] = static_cast<std::uint8_t>(start);
    const bool same_as_next = index + 1 < items.size() && items[index + 1] == p;
    if (PlaceRecursive(used | mask, items, index + 1, same_as_next ? start + r.size : 0, starts)) {
      return true;
    }
  }
  return false;
}

bool Shape::Place(const Occupancy& existing, const Counts& wanted, const Rules& rules,
                  std::vector<Placed>* out) const {
  if (!CheckCounts(existing, wanted, rules).ok()) return false;
  std::array<std::uint8_t, kMaxInstances> items{};
  size_t n = 0;
  for (int k = 0; k < profile_count_; ++k) {
    const std::uint8_t p = size_order_[static_cast<size_t>(k)];
    for (int c = 0; c < wanted[p]; ++c) items[n++] = p;
  }
  std::array<std::uint8_t, kMaxInstances> starts{};
  if (!PlaceRecursive(existing.used, std::span(items.data(), n), 0, 0, starts.data())) return false;
  if (out != nullptr) {
    out->clear();
    for (size_t i = 0; i < n; ++i) out->push_back({items[i], starts[i]});
    std::sort(out->begin(), out->end(),
              [](const Placed& a, const Placed& b) { return a.start < b.start; });
  }
  return true;
}

std::optional<std::vector<Placed>> Shape::Place(const Counts& wanted, const Rules& rules) const {
  std::vector<Placed> out;
  if (!Place(Occupancy{}, wanted, rules, &out)) return std::nullopt;
  return out;
}

int Shape::DefaultStart(const Occupancy& occ, int profile, const Rules& rules) const {
  if (!CanAddAnywhere(occ, profile, rules).ok()) return -1;
  const ProfileRule& r = rule(profile);
  for (int i = 0; i < r.default_order_size; ++i) {
    const int start = r.default_order[static_cast<size_t>(i)];
    if ((occ.used & Span(start, r.size)) == 0) return start;
  }
  return -1;
}

int Shape::FreeCount(const Occupancy& occ, int profile, const Rules& rules) const {
  if (!CanAddAnywhere(occ, profile, rules).ok()) return 0;
  const ProfileRule& r = rule(profile);
  int limit = r.cap - occ.count[static_cast<size_t>(profile)];
  if (r.ofa > 0) limit = std::min(limit, (ofa_total_ - occ.ofa) / r.ofa);
  // Same-size intervals: taking the lowest free start each time is optimal.
  int free = 0;
  UnitMask used = occ.used;
  UnitMask candidates = r.start_mask;
  while (candidates != 0 && free < limit) {
    const int start = std::countr_zero(candidates);
    candidates &= candidates - 1;
    const UnitMask mask = Span(start, r.size);
    if ((used & mask) != 0) continue;
    used |= mask;
    ++free;
  }
  return free;
}

int Shape::GpuInstanceId(int profile, int start) const {
  const int blocks = units_ / base_unit_;
  const int size = rule(profile).size / base_unit_;
  const int ratio = size > 0 ? blocks / size : 0;
  if (size <= 0 || blocks % size != 0 || !std::has_single_bit(static_cast<unsigned>(ratio))) {
    return -1;
  }
  const int level = std::countr_zero(static_cast<unsigned>(ratio));
  return (1 << level) - 1 + (start / base_unit_) / size;
}

}  // namespace gpuslice::geometry
