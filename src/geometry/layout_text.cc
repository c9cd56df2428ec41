#include "gpuslice/geometry/layout_text.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>

#include "absl/status/status.h"
#include "gpuslice/util/strings.h"

namespace gpuslice::geometry {
namespace {

using util::Lower;
using util::Trim;

bool AllDigits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

std::optional<int> ParseInt(std::string_view text) {
  if (!AllDigits(text) || text.size() > 4) return std::nullopt;
  int value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

// Splits on commas outside brackets.
absl::StatusOr<std::vector<std::string>> SplitItems(std::string_view text) {
  std::vector<std::string> items;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) return absl::InvalidArgumentError("unbalanced ']' in layout");
    if (c == ',' && depth == 0) {
      items.push_back(Trim(current));
      current.clear();
      continue;
    }
    current.push_back(c);
  }
  if (depth != 0) return absl::InvalidArgumentError("unclosed '[' in layout");
  items.push_back(Trim(current));
  return items;
}

std::string ProfileList(const Shape& shape) {
  std::string text;
  for (int p = 0; p < shape.profile_count(); ++p) {
    if (p > 0) text += ", ";
    text += shape.profile(p).name + " (ID " + std::to_string(shape.profile(p).smi_id) + ")";
  }
  return text;
}

// Profiles with the same compute-slice count as the unknown name, as suggestions.
std::string SimilarProfiles(const Shape& shape, std::string_view name) {
  const size_t g = name.find('g');
  if (g == std::string_view::npos || g == 0 || !AllDigits(name.substr(0, g))) return "";
  std::string text;
  for (int p = 0; p < shape.profile_count(); ++p) {
    const std::string& candidate = shape.profile(p).name;
    if (candidate.starts_with(name.substr(0, g + 1)) && candidate.find('+') == std::string::npos &&
        candidate.find("-me") == std::string::npos) {
      text += text.empty() ? "" : " or ";
      text += candidate;
    }
  }
  return text.empty() ? "" : "; did you mean " + text + "?";
}

absl::StatusOr<int> ResolveProfile(const Shape& shape, std::string_view token,
                                   std::string_view item) {
  const hw::GiProfile* profile = nullptr;
  if (AllDigits(token)) {
    std::optional<int> id = ParseInt(token);
    if (id) profile = shape.mig().FindProfileBySmiId(*id);
    if (profile == nullptr) {
      return absl::NotFoundError("profile ID " + std::string(token) + " (in '" + std::string(item) +
                                 "') does not exist on " + shape.model().id +
                                 "; its profiles are: " + ProfileList(shape));
    }
  } else {
    profile = shape.mig().FindProfile(token);
    if (profile == nullptr) {
      const std::string similar = SimilarProfiles(shape, Lower(token));
      return absl::NotFoundError("profile '" + std::string(token) + "' does not exist on " +
                                 shape.model().id + (similar.empty() ? "." : similar) +
                                 " Its profiles are: " + ProfileList(shape));
    }
  }
  return shape.mig().IndexOf(*profile);
}

// Parses "NAME" or "NAME@START" / "NAME:START".
absl::StatusOr<std::pair<std::string, int>> SplitStart(std::string_view text,
                                                       std::string_view item) {
  const size_t at = text.find_last_of("@:");
  if (at == std::string_view::npos) return std::make_pair(Trim(text), -1);
  const std::string start_text = Trim(text.substr(at + 1));
  std::optional<int> start = ParseInt(start_text);
  if (!start) {
    return absl::InvalidArgumentError("bad placement start '" + start_text + "' in '" +
                                      std::string(item) + "': expected a number, e.g. 3g.40gb@4");
  }
  return std::make_pair(Trim(text.substr(0, at)), *start);
}

// Takes a leading count ("2x" or "2*") off `rest`; 1 when there is none.
absl::StatusOr<int> TakeCount(std::string_view& rest, const std::string& token) {
  size_t digits = 0;
  while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits]))) ++digits;
  if (digits > 0 && digits < rest.size() && (rest[digits] == 'x' || rest[digits] == '*')) {
    std::optional<int> n = ParseInt(rest.substr(0, digits));
    if (!n || *n < 1 || *n > kMaxInstances) {
      return absl::InvalidArgumentError("bad count in '" + token + "'");
    }
    rest.remove_prefix(digits + 1);
    return *n;
  }
  return 1;
}

// The compute-instance items between the brackets, split on ',' and '+'.
std::vector<std::string> SplitCiParts(const std::string& inner) {
  std::string part;
  std::vector<std::string> parts;
  for (char c : inner) {
    if (c == ',' || c == '+') {
      parts.push_back(Trim(part));
      part.clear();
    } else {
      part.push_back(c);
    }
  }
  parts.push_back(Trim(part));
  return parts;
}

std::string CiProfileNames(const CiShape& ci_shape) {
  std::string names;
  for (const hw::CiProfile& ci : ci_shape.profiles())
    names += (names.empty() ? "" : ", ") + ci.name;
  return names;
}

// "3g.40gb@4[1c,2c]": a GPU instance with its compute instances given in brackets.
absl::Status AddBracketItem(const Shape& shape, std::string_view rest, size_t bracket,
                            const std::string& token, int repeat, ParsedLayout& parsed) {
  if (rest.back() != ']') {
    return absl::InvalidArgumentError("'" + token + "': text after ']'");
  }
  const std::string inner(rest.substr(bracket + 1, rest.size() - bracket - 2));
  rest = rest.substr(0, bracket);
  const std::vector<std::string> parts = SplitCiParts(inner);
  std::vector<CiItem> cis;
  for (const std::string& ci_text : parts) {
    absl::StatusOr<std::pair<std::string, int>> ci_split = SplitStart(ci_text, token);
    if (!ci_split.ok()) return ci_split.status();
    if (ci_split->first.empty()) {
      return absl::InvalidArgumentError("empty compute-instance name in '" + token + "'");
    }
    cis.push_back({-1, ci_split->second});
  }
  // Resolve CI names.
  absl::StatusOr<std::pair<std::string, int>> gi_split = SplitStart(rest, token);
  if (!gi_split.ok()) return gi_split.status();
  absl::StatusOr<int> gi = ResolveProfile(shape, Lower(gi_split->first), token);
  if (!gi.ok()) return gi.status();
  CiShape ci_shape(shape.mig(), shape.profile(*gi));
  for (size_t k = 0; k < parts.size(); ++k) {
    const std::string ci_name = Lower(SplitStart(parts[k], token)->first);
    const int index = ci_shape.Find(ci_name);
    if (index < 0) {
      return absl::NotFoundError("compute-instance profile '" + ci_name + "' in '" + token +
                                 "' does not exist in a " + shape.profile(*gi).name +
                                 " GPU instance; it has " + CiProfileNames(ci_shape));
    }
    cis[k].ci = index;
  }
  for (int r = 0; r < repeat; ++r) {
    parsed.items.push_back({*gi, gi_split->second, cis, token});
  }
  return absl::OkStatus();
}

// Adds compute instance `ci` to the open GPU instance of its profile when it still fits there;
// false when there is none or it does not fit.
bool JoinOpenGroup(const CiShape& ci_shape, int gi, int ci, const std::string& token,
                   const std::map<int, size_t>& open_ci_group, ParsedLayout& parsed) {
  auto open = open_ci_group.find(gi);
  if (open == open_ci_group.end()) return false;
  LayoutItem& item = parsed.items[open->second];
  std::vector<std::uint8_t> wanted;
  for (const CiItem& existing : item.cis) wanted.push_back(static_cast<std::uint8_t>(existing.ci));
  wanted.push_back(static_cast<std::uint8_t>(ci));
  if (!ci_shape.Place(wanted)) return false;
  item.cis.push_back({ci, -1});
  item.text += "," + token;
  return true;
}

// mig-parted style CI device name, e.g. 1c.3g.40gb: joins the open GPU instance of its profile
// while it fits, else opens a new one.
absl::Status AddCiDeviceItem(const Shape& shape, const std::pair<std::string, std::string>& ci_name,
                             int start, const std::string& token, int repeat,
                             std::map<int, size_t>& open_ci_group, ParsedLayout& parsed) {
  absl::StatusOr<int> gi = ResolveProfile(shape, ci_name.second, token);
  if (!gi.ok()) return gi.status();
  CiShape ci_shape(shape.mig(), shape.profile(*gi));
  const int ci = ci_shape.Find(ci_name.first);
  if (ci < 0) {
    return absl::NotFoundError("compute-instance profile '" + ci_name.first +
                               "' does not exist in a " + shape.profile(*gi).name +
                               " GPU instance");
  }
  if (start >= 0) {
    return absl::InvalidArgumentError(
        "'" + token + "': give the GPU instance's placement with bracket syntax, e.g. " +
        shape.profile(*gi).name + "@4[" + ci_name.first + "]");
  }
  for (int r = 0; r < repeat; ++r) {
    if (!JoinOpenGroup(ci_shape, *gi, ci, token, open_ci_group, parsed)) {
      open_ci_group[*gi] = parsed.items.size();
      parsed.items.push_back({*gi, -1, {CiItem{ci, -1}}, token});
    }
  }
  return absl::OkStatus();
}

// One comma-separated item of the layout text.
absl::Status AddItem(const Shape& shape, const std::string& token,
                     std::map<int, size_t>& open_ci_group, ParsedLayout& parsed) {
  std::string_view rest = token;
  absl::StatusOr<int> repeat = TakeCount(rest, token);
  if (!repeat.ok()) return repeat.status();
  const size_t bracket = rest.find('[');
  if (bracket != std::string_view::npos) {
    return AddBracketItem(shape, rest, bracket, token, *repeat, parsed);
  }
  absl::StatusOr<std::pair<std::string, int>> split = SplitStart(rest, token);
  if (!split.ok()) return split.status();
  const std::string name = Lower(split->first);
  if (name.empty()) return absl::InvalidArgumentError("missing profile in '" + token + "'");
  if (std::optional<std::pair<std::string, std::string>> ci_name = SplitCiDeviceName(name)) {
    return AddCiDeviceItem(shape, *ci_name, split->second, token, *repeat, open_ci_group, parsed);
  }
  absl::StatusOr<int> gi = ResolveProfile(shape, name, token);
  if (!gi.ok()) return gi.status();
  if (split->second >= 0 && *repeat > 1) {
    return absl::InvalidArgumentError("'" + token +
                                      "': a count and a placement start cannot be combined");
  }
  for (int r = 0; r < *repeat; ++r) parsed.items.push_back({*gi, split->second, {}, token});
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ParsedLayout> ParseLayout(const Shape& shape, std::string_view text) {
  ParsedLayout parsed;
  const std::string trimmed = Trim(text);
  if (trimmed.empty() || Lower(trimmed) == "none") return parsed;
  absl::StatusOr<std::vector<std::string>> tokens = SplitItems(trimmed);
  if (!tokens.ok()) return tokens.status();
  // Open GI per GI profile for mig-parted style CI items ("1c.3g.40gb").
  std::map<int, size_t> open_ci_group;
  for (const std::string& token : *tokens) {
    if (token.empty()) {
      return absl::InvalidArgumentError("empty item in layout '" + std::string(text) +
                                        "' (two commas in a row?)");
    }
    if (absl::Status status = AddItem(shape, token, open_ci_group, parsed); !status.ok()) {
      return status;
    }
  }
  if (parsed.items.size() > static_cast<size_t>(kMaxInstances)) {
    return absl::InvalidArgumentError("layout has " + std::to_string(parsed.items.size()) +
                                      " GPU instances; a GPU holds at most " +
                                      std::to_string(kMaxInstances));
  }
  return parsed;
}

ResolvedLayout ResolveLayout(const Shape& shape, const ParsedLayout& parsed, const Rules& rules) {
  ResolvedLayout result;
  const size_t n = parsed.items.size();
  result.instances.resize(n);
  bool all_explicit = true;
  for (size_t i = 0; i < n; ++i) {
    result.instances[i].profile = static_cast<std::uint8_t>(parsed.items[i].profile);
    all_explicit = all_explicit && parsed.items[i].start >= 0;
  }
  // 1. Fixed instances where they are given; the others as the driver would place them.
  Occupancy occupancy;
  bool default_ok = true;
  bool placed_by_default = false;
  for (size_t i = 0; i < n; ++i) {
    const LayoutItem& item = parsed.items[i];
    if (item.start >= 0) {
      // Out-of-range starts are kept out of range (reported as "start not allowed").
      result.instances[i].start = static_cast<std::uint8_t>(std::min(item.start, kMaxUnits));
      if (shape.CanAdd(occupancy, item.profile, item.start, rules).ok()) {
        shape.Add(occupancy, item.profile, item.start);
      } else if (placed_by_default) {
        // The driver's choice for an earlier item may be what collides: search instead.
        default_ok = false;
        result.default_order_fails_at = static_cast<int>(i);
        break;
      }
      continue;
    }
    placed_by_default = true;
    const int start = shape.DefaultStart(occupancy, item.profile, rules);
    if (start < 0) {
      default_ok = false;
      result.default_order_fails_at = static_cast<int>(i);
      break;
    }
    result.instances[i].start = static_cast<std::uint8_t>(start);
    shape.Add(occupancy, item.profile, start);
  }
  if (default_ok) {
    result.method = all_explicit ? PlacementMethod::kExplicit : PlacementMethod::kDriverDefault;
    result.violations = shape.AllViolations(result.instances, rules);
  } else {
    // 2. The driver's order fails: find exact placements around the fixed instances.
    std::vector<Placed> fixed;
    Counts wanted{};
    for (size_t i = 0; i < n; ++i) {
      if (parsed.items[i].start >= 0) {
        fixed.push_back(result.instances[i]);
      } else {
        ++wanted[static_cast<size_t>(parsed.items[i].profile)];
      }
    }
    result.violations = shape.AllViolations(fixed, rules);
    if (result.violations.empty()) {
      std::vector<Placed> placed;
      const Occupancy existing = shape.OccupancyOf(fixed);
      Violation counts = shape.CheckCounts(existing, wanted, rules);
      if (counts.ok() && shape.Place(existing, wanted, rules, &placed)) {
        result.method = PlacementMethod::kExactSearch;
        std::vector<bool> used(placed.size(), false);
        for (size_t i = 0; i < n; ++i) {
          if (parsed.items[i].start >= 0) continue;
          for (size_t k = 0; k < placed.size(); ++k) {
            if (!used[k] && placed[k].profile == parsed.items[i].profile) {
              used[k] = true;
              result.instances[i].start = placed[k].start;
              break;
            }
          }
        }
      } else {
        if (counts.ok()) counts.kind = ViolationKind::kNoPlacement;
        counts.instance = counts.other = -1;
        result.violations.push_back(counts);
      }
    }
  }
  // 3. Compute-instance splits.
  result.cis.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const LayoutItem& item = parsed.items[i];
    if (item.cis.empty()) continue;
    CiShape ci_shape(shape.mig(), shape.profile(item.profile));
    const std::string where =
        shape.profile(item.profile).name + "@" + std::to_string(result.instances[i].start);
    const bool all_given = std::all_of(item.cis.begin(), item.cis.end(),
                                       [](const CiItem& ci) { return ci.start >= 0; });
    if (all_given) {
      for (const CiItem& ci : item.cis) {
        result.cis[i].push_back(
            {static_cast<std::uint8_t>(ci.ci), static_cast<std::uint8_t>(ci.start)});
      }
      if (std::optional<std::string> problem = ci_shape.Validate(result.cis[i])) {
        result.ci_problems.push_back(where + ": " + *problem);
      }
    } else {
      std::vector<std::uint8_t> wanted;
      for (const CiItem& ci : item.cis) wanted.push_back(static_cast<std::uint8_t>(ci.ci));
      if (std::optional<std::vector<CiPlaced>> placed = ci_shape.Place(wanted)) {
        result.cis[i] = *placed;
      } else {
        result.ci_problems.push_back(where + ": these compute instances do not fit in one " +
                                     shape.profile(item.profile).name + " GPU instance (" +
                                     std::to_string(ci_shape.slices()) + " compute slices)");
      }
    }
  }
  return result;
}

std::optional<std::vector<size_t>> DriverCreationOrder(const Shape& shape,
                                                       std::span<const Placed> layout,
                                                       const Rules& rules) {
  std::vector<size_t> order;
  std::vector<bool> done(layout.size(), false);
  Occupancy occupancy;
  auto search = [&](auto&& self) -> bool {
    if (order.size() == layout.size()) return true;
    std::array<bool, kMaxProfiles> tried{};
    for (size_t i = 0; i < layout.size(); ++i) {
      if (done[i] || tried[layout[i].profile]) continue;
      const int start = shape.DefaultStart(occupancy, layout[i].profile, rules);
      if (start != layout[i].start) continue;
      tried[layout[i].profile] = true;  // other instances of this profile would land here too
      done[i] = true;
      order.push_back(i);
      shape.Add(occupancy, layout[i].profile, layout[i].start);
      if (self(self)) return true;
      shape.Remove(occupancy, layout[i].profile, layout[i].start);
      order.pop_back();
      done[i] = false;
    }
    return false;
  };
  if (!search(search)) return std::nullopt;
  return order;
}

std::string FormatLayout(const Shape& shape, std::span<const Placed> layout) {
  std::string text;
  for (const Placed& placed : layout) {
    if (!text.empty()) text += ", ";
    text += shape.profile(placed.profile).name + "@" + std::to_string(placed.start);
  }
  return text.empty() ? "none" : text;
}

}  // namespace gpuslice::geometry
