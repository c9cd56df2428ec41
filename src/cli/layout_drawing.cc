#include "layout_drawing.h"

#include <algorithm>

#include "common.h"

namespace gpuslice::cli {
namespace {

struct Segment {
  int start = 0;
  int size = 0;
  int instance = -1;  // -1: free
  bool usable = true;
};

std::string Repeat(const std::string& piece, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) out += piece;
  return out;
}

// `text` centred in `width` columns, shortened with "…" if too long.
std::string Center(std::string text, size_t width) {
  if (DisplayWidth(text) > width) {
    while (!text.empty() && DisplayWidth(text) + 1 > width) {
      // Drop whole UTF-8 sequences from the end.
      do {
        text.pop_back();
      } while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80);
    }
    text += width > 0 ? "…" : "";
  }
  const size_t pad = width - DisplayWidth(text);
  return std::string(pad / 2, ' ') + text + std::string(pad - pad / 2, ' ');
}

// Whether any profile could still be placed over `unit` on this occupancy.
bool UnitUsable(const geometry::Shape& shape, const geometry::Occupancy& occupancy, int unit) {
  for (int p = 0; p < shape.profile_count(); ++p) {
    for (int start : shape.profile(p).starts) {
      if (start <= unit && unit < start + shape.placement_size(p) &&
          shape.CanAdd(occupancy, p, start, {}).ok()) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

std::string DrawLayout(const geometry::Shape& shape, std::span<const geometry::Placed> layout,
                       const std::vector<std::vector<geometry::CiPlaced>>& cis,
                       const std::string& indent) {
  const int units = shape.units();
  int base = units;
  for (int p = 0; p < shape.profile_count(); ++p) base = std::min(base, shape.placement_size(p));
  const size_t cell = static_cast<size_t>(std::max(5, 80 / units));
  const geometry::Occupancy occupancy = shape.OccupancyOf(layout);

  std::vector<Segment> segments;
  for (int unit = 0; unit < units;) {
    int found = -1;
    for (size_t i = 0; i < layout.size(); ++i) {
      if (layout[i].start == unit) found = static_cast<int>(i);
    }
    if (found >= 0) {
      const int size = shape.placement_size(layout[static_cast<size_t>(found)].profile);
      segments.push_back({unit, size, found, true});
      unit += size;
      continue;
    }
    // A free block: one base block if it is wholly free, else one unit.
    int size = 1;
    if (unit % base == 0 && unit + base <= units &&
        (occupancy.used & (((geometry::UnitMask{1} << base) - 1) << unit)) == 0) {
      size = base;
    }
    segments.push_back({unit, size, -1, UnitUsable(shape, occupancy, unit)});
    unit += size;
  }

  std::vector<std::string> lines(4);
  std::string top = "┌";
  std::string bottom = "└";
  for (size_t s = 0; s < segments.size(); ++s) {
    const Segment& segment = segments[s];
    const size_t width = static_cast<size_t>(segment.size) * cell - 1;
    const bool last = s + 1 == segments.size();
    top += Repeat("─", width) + (last ? "┐" : "┬");
    bottom += Repeat("─", width) + (last ? "┘" : "┴");
    std::vector<std::string> text(4);
    if (segment.instance >= 0) {
      const geometry::Placed& placed = layout[static_cast<size_t>(segment.instance)];
      const hw::GiProfile& profile = shape.profile(placed.profile);
      text[0] = profile.name;
      text[1] = "GI " + std::to_string(shape.GpuInstanceId(placed.profile, placed.start));
      text[2] = Gib(profile.memory_mib) + " GiB";
      const auto index = static_cast<size_t>(segment.instance);
      if (index < cis.size() && !cis[index].empty()) {
        geometry::CiShape ci_shape(shape.mig(), profile);
        std::string split;
        for (const geometry::CiPlaced& ci : cis[index]) {
          split += (split.empty() ? "" : "+") + ci_shape.profiles()[ci.ci].name;
        }
        text[3] = "CI " + split;
      } else {
        text[3] = std::to_string(profile.sms) + " SMs";
      }
    } else {
      text[0] = segment.usable ? "free" : "unusable";
    }
    for (size_t line = 0; line < lines.size(); ++line) {
      lines[line] += "│" + Center(text[line], width);
    }
  }
  std::string out;
  // Unit numbers over the left edge of each unit column.
  std::string ruler(indent.size() + 1, ' ');
  for (int unit = 0; unit < units; ++unit) {
    std::string number = std::to_string(unit);
    ruler += Center(number, cell - 1) + " ";
  }
  out += indent + "memory slice (placement unit)\n";
  out += ruler + "\n";
  out += indent + top + "\n";
  for (std::string& line : lines) {
    if (line.find_first_not_of(" │") == std::string::npos && &line != &lines[0]) continue;
    out += indent + line + "│\n";
  }
  out += indent + bottom + "\n";
  return out;
}

}  // namespace gpuslice::cli
