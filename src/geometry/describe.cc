// Human-readable reasons for broken layout rules.
#include <string>

#include "gpuslice/geometry/shape.h"

namespace gpuslice::geometry {
namespace {

std::string At(const Shape& shape, std::span<const Placed> layout, int index) {
  if (index < 0 || static_cast<size_t>(index) >= layout.size()) return "";
  const Placed& placed = layout[static_cast<size_t>(index)];
  return shape.profile(placed.profile).name + "@" + std::to_string(placed.start);
}

std::string StartsOf(const hw::GiProfile& profile) {
  std::string text = "{";
  for (size_t i = 0; i < profile.starts.size(); ++i) {
    if (i > 0) text += ",";
    text += std::to_string(profile.starts[i]);
  }
  return text + "}:" + std::to_string(profile.placement_size);
}

}  // namespace

std::string Describe(const Shape& shape, std::span<const Placed> layout, const Violation& v,
                     const Rules& rules) {
  const std::string& gpu = shape.model().id;
  const hw::GiProfile* profile = v.profile >= 0 ? &shape.profile(v.profile) : nullptr;
  const std::string name = profile != nullptr ? profile->name : "";
  switch (v.kind) {
    case ViolationKind::kNone:
      return "valid";
    case ViolationKind::kStartNotAllowed: {
      const Placed& placed = layout[static_cast<size_t>(v.instance)];
      return "start not allowed: " + name + " cannot start at placement unit " +
             std::to_string(placed.start) + " on " + gpu + "; its placements are " +
             StartsOf(*profile);
    }
    case ViolationKind::kOverlap: {
      const Placed& a = layout[static_cast<size_t>(v.instance)];
      const Placed& b = layout[static_cast<size_t>(v.other)];
      const int a_end = a.start + shape.placement_size(a.profile) - 1;
      const int b_end = b.start + shape.placement_size(b.profile) - 1;
      return "overlap: " + At(shape, layout, v.instance) + " (units " + std::to_string(a.start) +
             "-" + std::to_string(a_end) + ") overlaps " + At(shape, layout, v.other) + " (units " +
             std::to_string(b.start) + "-" + std::to_string(b_end) + ")";
    }
    case ViolationKind::kInstanceCap: {
      int count = 0;
      for (const Placed& placed : layout) count += placed.profile == v.profile ? 1 : 0;
      std::string text = "instance cap: " + gpu + " allows at most " +
                         std::to_string(profile->max_instances) + " " + name + " instance" +
                         (profile->max_instances == 1 ? "" : "s");
      if (count > 0) text += ", the layout has " + std::to_string(count);
      return text;
    }
    case ViolationKind::kMediaExclusive: {
      std::string text = "media-engine exclusivity: ";
      if (v.instance >= 0 && v.other >= 0) {
        text += At(shape, layout, v.instance) + " takes all media engines, so " +
                At(shape, layout, v.other) + " cannot be on the same GPU";
      } else {
        text += "a +me.all instance takes all media engines";
      }
      return text + "; only -me profiles may coexist with a +me.all instance";
    }
    case ViolationKind::kMediaEngines: {
      std::string text = "media engines: ";
      if (v.instance >= 0 && v.other >= 0) {
        text += At(shape, layout, v.instance) + " and " + At(shape, layout, v.other) +
                " both need the optical-flow accelerator (OFA), and " + gpu + " has only one";
      } else {
        text += name + " needs the optical-flow accelerator (OFA), which " + gpu +
                " has only once and is already taken";
      }
      if (profile != nullptr && profile->confidence.engines != hw::Confidence::kConfirmed) {
        text +=
            " (engine counts are " + std::string(hw::ToString(profile->confidence.engines)) + ")";
      }
      return text;
    }
    case ViolationKind::kProfileTooNew: {
      if (shape.mig().min_driver_branch > rules.driver_branch) {
        return "driver too old: MIG on " + gpu + " needs driver R" +
               std::to_string(shape.mig().min_driver_branch) + " or newer (" +
               shape.mig().min_driver + "), the layout is checked for R" +
               std::to_string(rules.driver_branch);
      }
      return "driver too old: " + name + " exists from driver R" +
             std::to_string(profile->min_driver_branch) + ", the layout is checked for R" +
             std::to_string(rules.driver_branch);
    }
    case ViolationKind::kDriverPairing: {
      std::string pair = v.instance >= 0 && v.other >= 0
                             ? At(shape, layout, v.instance) + " and " + At(shape, layout, v.other)
                             : "a 4-slice and a 3-slice GPU instance";
      return "driver too old: " + pair + " together need driver R510 or newer, the layout is " +
             "checked for R" + std::to_string(rules.driver_branch);
    }
    case ViolationKind::kNoPlacement:
      return "no placement: these instances satisfy the counting rules but cannot be arranged "
             "without overlap on " +
             gpu + "'s " + std::to_string(shape.units()) + " placement units";
    case ViolationKind::kTooManyInstances:
      return "too many instances: a GPU holds at most " + std::to_string(kMaxInstances);
  }
  return "invalid";
}

}  // namespace gpuslice::geometry
