// gpuslice/geometry/layout_text.h
//
// Layouts as people write them, and how gpuslice turns them into exact placements.
//
// Grammar (items separated by commas; spaces ignored; case-insensitive):
//   item     := [N "x"] gi [("@" | ":") START] ["[" ci ("," | "+") ci ... "]"]
//             | CI-DEVICE-NAME                    e.g. 1c.3g.40gb (mig-parted style)
//   gi       := profile name (3g.40gb, "MIG 3g.40gb") | nvidia-smi profile ID (9)
//   ci       := "1c" | "2c" ... [("@" | ":") START]
//   "none" or "" = MIG enabled with no instances.
// Examples: "3g.40gb,1g.10gb,1g.10gb", "9,19,19" (as `nvidia-smi mig -cgi 9,19,19 -C`),
// "9@4,19@0,19@1", "2x1g.10gb,3g.40gb@4", "3g.40gb[1c,2c]", "1c.3g.40gb,1c.3g.40gb,1c.3g.40gb".
// mig-parted style CI items of the same GI profile fill one GI while their CIs fit before the next
// GI of that profile is started, wherever they stand in the list (mig-parted's maps have no order).
//
// Resolution: instances given with a start stay there; the others are placed the way the driver
// places instances created without a placement, in the order given (Shape::DefaultStart). If that
// fails (no start left, or a later fixed instance collides with a default-placed one) although the
// multiset fits, an exact search places them around the fixed ones (the layout is still valid:
// gpuslice creates instances at explicit placements). Pure and deterministic.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/geometry/compute_instances.h"
#include "gpuslice/geometry/shape.h"

namespace gpuslice::geometry {

struct CiItem {
  int ci = 0;      // index into CiProfilesFor(GI compute slices)
  int start = -1;  // -1: not given
};

struct LayoutItem {
  int profile = 0;
  int start = -1;           // -1: not given
  std::vector<CiItem> cis;  // empty: one default CI spanning the GI
  std::string text;         // the text the item came from, for messages
};

struct ParsedLayout {
  std::vector<LayoutItem> items;
};

// Parses `text` against the profiles of `shape`'s model. A profile or CI profile this model does
// not have is NotFound, naming the item and what exists instead ("profile ID 9 ... does not exist
// on A30-24GB; its profiles are: ..."); malformed text is InvalidArgument.
absl::StatusOr<ParsedLayout> ParseLayout(const Shape& shape, std::string_view text);

enum class PlacementMethod {
  kExplicit,       // every instance came with its start
  kDriverDefault,  // the driver's default placement, in the order given, produces this layout
  kExactSearch,    // the driver's default order would fail (or is not used); exact placements found
};

struct ResolvedLayout {
  std::vector<Placed> instances;           // in item order
  std::vector<std::vector<CiPlaced>> cis;  // per instance; empty vector = default CI
  PlacementMethod method = PlacementMethod::kExplicit;
  // When the driver's default placement in the given order fails: the index of the item it fails
  // at.
  int default_order_fails_at = -1;
  std::vector<Violation> violations;     // empty = valid
  std::vector<std::string> ci_problems;  // CI split problems, with the GI they concern
  bool valid() const { return violations.empty() && ci_problems.empty(); }
};

ResolvedLayout ResolveLayout(const Shape& shape, const ParsedLayout& parsed,
                             const Rules& rules = {});

// An order of `layout`'s instances in which creating them without placements makes the driver put
// each exactly where it is (so `nvidia-smi mig -cgi IDS` reproduces the layout), or nullopt.
std::optional<std::vector<size_t>> DriverCreationOrder(const Shape& shape,
                                                       std::span<const Placed> layout,
                                                       const Rules& rules = {});

// "3g.40gb@4, 1g.10gb@0" style text for a layout.
std::string FormatLayout(const Shape& shape, std::span<const Placed> layout);

}  // namespace gpuslice::geometry
