// gpuslice/geometry/shape.h
//
// The MIG layout rules of one GPU model, compiled for speed, and the operations every other layer
// builds on: validating a layout, placing a multiset of GPU-instance profiles exactly, simulating
// the driver's default placement, and counting the free capacity per profile.
//
// The rules (docs/ARCHITECTURE.md, ../shared/reference/mig-facts.md §3.1):
//   * an instance of profile P occupies placement units [start, start + P.placement_size), and
//   start
//     must be one of P's allowed starts;
//   * instances may not overlap;
//   * at most P.max_instances instances of P;
//   * a "+me.all" instance takes every media engine: only "-me" instances may coexist with it;
//   * the GPU's JPEG and OFA engines are not shared: the instances' JPEG/OFA counts may not add up
//   to
//     more than the full-GPU profile has (this is what limits "+me" profiles to one instance);
//   * with an explicit driver version (Rules::driver_branch): profiles newer than the driver are
//     unavailable, and a 4-slice GI beside a 3-slice GI needs R510 or newer.
//
// Everything here is pure and deterministic, allocation-free on the hot paths (Validate, CanAdd,
// Place, FreeCount), and safe to call from many threads on one Shape.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpuslice/hw/gpu_model.h"

namespace gpuslice::geometry {

inline constexpr int kMaxProfiles = 24;  // GI profiles per model
inline constexpr int kMaxUnits = 16;     // placement units per GPU
inline constexpr int kMaxInstances = 16;

using UnitMask = std::uint32_t;  // bit u set = placement unit u occupied

// One GPU instance at a placement: an index into MigSpec::profiles and the first placement unit.
struct Placed {
  std::uint8_t profile = 0;
  std::uint8_t start = 0;
  friend bool operator==(const Placed&, const Placed&) = default;
  friend auto operator<=>(const Placed&, const Placed&) = default;
};

// A multiset of profiles: count[p] instances of profile p.
using Counts = std::array<std::uint8_t, kMaxProfiles>;

// Version-dependent rules. The default is the newest driver, on which every catalog profile exists.
struct Rules {
  int driver_branch = 0;  // e.g. 470 for R470; 0 = newest driver
};

enum class ViolationKind : std::uint8_t {
  kNone = 0,
  kStartNotAllowed,   // `instance` starts where its profile cannot
  kOverlap,           // `instance` overlaps `other`
  kInstanceCap,       // more instances of `profile` than it allows
  kMediaExclusive,    // a "+me.all" instance (`instance`) beside one that is not "-me" (`other`)
  kMediaEngines,      // JPEG/OFA engines over-committed (`profile` is the last one that needs them)
  kProfileTooNew,     // `profile` needs a newer driver than Rules::driver_branch
  kDriverPairing,     // 4-slice beside 3-slice GI before R510 (`instance`, `other`)
  kNoPlacement,       // a multiset fits the rules but no arrangement of placements exists
  kTooManyInstances,  // more than kMaxInstances instances
};

// The first broken rule. Fields not meaningful for a kind are -1.
struct Violation {
  ViolationKind kind = ViolationKind::kNone;
  int instance = -1;  // index into the checked layout
  int other = -1;     // index into the checked layout
  int profile = -1;   // profile index
  bool ok() const { return kind == ViolationKind::kNone; }
};

// Occupancy of one GPU: what is placed, in a form that answers "can I add P at s?" in O(1).
struct Occupancy {
  UnitMask used = 0;
  Counts count{};
  std::uint8_t jpeg = 0;
  std::uint8_t ofa = 0;
  std::uint8_t instances = 0;
  std::uint8_t all_me = 0;       // "+me.all" instances
  std::uint8_t media_users = 0;  // instances that are not "-me"
  std::uint8_t four_slice = 0;   // instances with 4 compute slices
  std::uint8_t three_slice = 0;  // instances with 3 compute slices
};

class Shape {
 public:
  // REQUIRES: model.mig_capable(), at most kMaxProfiles profiles and kMaxUnits units. `model` must
  // outlive the Shape (catalog models live for the whole program).
  explicit Shape(const hw::GpuModel& model);

  const hw::GpuModel& model() const { return *model_; }
  const hw::MigSpec& mig() const { return *model_->mig; }
  const hw::GiProfile& profile(int index) const;
  int profile_count() const { return profile_count_; }
  int units() const { return units_; }
  UnitMask all_units() const { return all_units_; }
  int placement_size(int profile) const { return rule(profile).size; }
  int compute_slices(int profile) const { return rule(profile).compute_slices; }

  // Units covered by `profile` at `start`.
  UnitMask MaskOf(int profile, int start) const;
  bool StartAllowed(int profile, int start) const;

  // Whether `profile` can be added at all given the multiset rules (cap, media engines, driver),
  // ignoring geometry. Returns the rule that forbids it.
  Violation CanAddAnywhere(const Occupancy& occupancy, int profile, const Rules& rules) const;
  // Whether `profile` can be added at `start`: CanAddAnywhere plus allowed start and no overlap.
  Violation CanAdd(const Occupancy& occupancy, int profile, int start, const Rules& rules) const;
  // REQUIRES: CanAdd(...).ok() (Add) / the instance was added (Remove).
  void Add(Occupancy& occupancy, int profile, int start) const;
  void Remove(Occupancy& occupancy, int profile, int start) const;

  // Validates a whole layout. Multiset rules (cap, media, driver) are reported before geometric
  // ones (start, overlap), so the reason is the most fundamental one.
  Violation Validate(std::span<const Placed> layout, const Rules& rules = {}) const;
  // Every broken rule, for explanations (one entry per distinct problem).
  std::vector<Violation> AllViolations(std::span<const Placed> layout,
                                       const Rules& rules = {}) const;
  // Multiset rules only: cap, media engines, driver, and a quick capacity bound.
  Violation CheckCounts(const Occupancy& existing, const Counts& wanted, const Rules& rules) const;

  // Places `wanted` (a multiset) on a GPU already holding `existing`, exactly: returns placements
  // for the wanted instances if any arrangement exists, independent of any order, else nullopt. The
  // answer is deterministic (bigger profiles first, lowest starts first). `out` receives the new
  // instances (profile-sorted).
  bool Place(const Occupancy& existing, const Counts& wanted, const Rules& rules,
             std::vector<Placed>* out) const;
  // Convenience: place on an empty GPU.
  std::optional<std::vector<Placed>> Place(const Counts& wanted, const Rules& rules = {}) const;

  // The start the driver picks when `profile` is created without a placement (the first start of
  // the profile's default order that can be used), or -1 (INSUFFICIENT_RESOURCES).
  int DefaultStart(const Occupancy& occupancy, int profile, const Rules& rules = {}) const;

  // How many more instances of `profile` fit together on this occupancy (the "Free" of
  // `nvidia-smi mig -lgip`, nvmlDeviceGetGpuInstanceRemainingCapacity).
  int FreeCount(const Occupancy& occupancy, int profile, const Rules& rules = {}) const;

  // The GPU-instance id the driver assigns to an instance of `profile` at `start`: a buddy-tree
  // index (full GPU 0, halves 1-2, quarters 3-6, eighths 7-14), as observed on A100, A30, H100 NVL
  // and RTX PRO 6000.
  int GpuInstanceId(int profile, int start) const;

  // Builds the occupancy of a layout without checking it.
  Occupancy OccupancyOf(std::span<const Placed> layout) const;
  // Counts of a layout.
  Counts CountsOf(std::span<const Placed> layout) const;

 private:
  struct ProfileRule {
    UnitMask start_mask = 0;  // bit s = start s allowed
    std::uint8_t size = 0;
    std::uint8_t cap = 0;
    std::uint8_t jpeg = 0;
    std::uint8_t ofa = 0;
    std::uint8_t compute_slices = 0;
    hw::MediaVariant variant = hw::MediaVariant::kStandard;
    int min_driver = 0;
    std::array<std::uint8_t, kMaxUnits> default_order{};
    std::uint8_t default_order_size = 0;
  };
  const ProfileRule& rule(int profile) const { return rules_[static_cast<size_t>(profile)]; }
  bool PlaceRecursive(UnitMask used, std::span<const std::uint8_t> items, size_t index,
                      int min_start, std::uint8_t* starts) const;

  const hw::GpuModel* model_;
  int profile_count_ = 0;
  int units_ = 0;
  UnitMask all_units_ = 0;
  std::uint8_t ofa_total_ = 0;
  int base_unit_ = 1;
  std::array<ProfileRule, kMaxProfiles> rules_{};
  std::array<std::uint8_t, kMaxProfiles> size_order_{};  // profiles by size, largest first
};

// A readable one-line reason, e.g. "4g.40gb: at most 1 instance allowed on H100-80GB, layout has
// 2".
std::string Describe(const Shape& shape, std::span<const Placed> layout, const Violation& violation,
                     const Rules& rules = {});

}  // namespace gpuslice::geometry
