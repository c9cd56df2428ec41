// Property tests (rapidcheck) of the layout engine. Every property runs on every MIG-capable model
// of the built-in catalog: the random data of one test case is interpreted once per model. The
// oracles are brute force: exhaustive recursion with Shape::CanAdd, and the complete enumeration.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gpuslice/geometry/enumerate.h"
#include "gpuslice/geometry/layout_text.h"
#include "gpuslice/geometry/shape.h"
#include "test_util.h"

namespace gpuslice::geometry {
namespace {

using gpuslice::testing::MigModelIds;
using gpuslice::testing::ShapeOf;
using gpuslice::testing::Show;

#define PROP_CHECK(condition, message)                                       \
  do {                                                                       \
    if (!(condition)) RC_FAIL(std::string(#condition) + " -- " + (message)); \
  } while (false)

// Every valid layout (including the empty one) of one model with all profiles and the newest
// driver, indexed for the oracles.
struct ModelData {
  const Shape* shape = nullptr;
  std::vector<std::vector<Placed>> layouts;
  std::set<std::vector<Placed>> layout_set;
  std::map<Counts, std::vector<size_t>> by_counts;
};

const std::vector<ModelData>& Models() {
  static const std::vector<ModelData> models = [] {
    std::vector<ModelData> out;
    for (const std::string& id : MigModelIds()) {
      ModelData data;
      data.shape = &ShapeOf(id);
      EnumerateOptions options;
      options.profiles = AllProfiles(*data.shape);
      options.include_empty = true;
      data.layouts = EnumerateLayouts(*data.shape, options);
      for (size_t i = 0; i < data.layouts.size(); ++i) {
        data.layout_set.insert(data.layouts[i]);
        data.by_counts[data.shape->CountsOf(data.layouts[i])].push_back(i);
      }
      out.push_back(std::move(data));
    }
    return out;
  }();
  return models;
}

const std::vector<Rules>& SomeRules() {
  static const std::vector<Rules> rules = {Rules{},    Rules{470}, Rules{509}, Rules{510},
                                           Rules{525}, Rules{550}, Rules{570}};
  return rules;
}

// Generators at full size: rapidcheck scales inRange by the test case's size, which would make
// most early cases tiny (and their values small, favouring the first profiles).
template <typename T>
T Full(rc::Gen<T> gen) {
  return *rc::gen::resize(rc::kNominalSize, std::move(gen));
}

int RawInt() { return Full(rc::gen::inRange(0, 1 << 20)); }

// Raw random numbers; each model reads them modulo its own sizes.
std::vector<int> RawInts(int max_length) {
  const int n = Full(rc::gen::inRange(0, max_length + 1));
  return Full(
      rc::gen::container<std::vector<int>>(static_cast<size_t>(n), rc::gen::inRange(0, 1 << 20)));
}

int Pick(int raw, int n) { return raw % n; }

// A valid layout built by random CanAdd/Add steps: pairs (profile, index into its starts).
std::vector<Placed> RandomValidLayout(const Shape& s, const std::vector<int>& raw,
                                      const Rules& rules, Occupancy* occupancy) {
  std::vector<Placed> layout;
  Occupancy occ;
  for (size_t i = 0; i + 1 < raw.size(); i += 2) {
    const int p = Pick(raw[i], s.profile_count());
    const std::vector<int>& starts = s.profile(p).starts;
    const int start =
        starts[static_cast<size_t>(Pick(raw[i + 1], static_cast<int>(starts.size())))];
    if (!s.CanAdd(occ, p, start, rules).ok()) continue;
    s.Add(occ, p, start);
    layout.push_back({static_cast<std::uint8_t>(p), static_cast<std::uint8_t>(start)});
  }
  if (occupancy != nullptr) *occupancy = occ;
  return layout;
}

std::vector<Placed> SortedByStart(std::vector<Placed> layout) {
  std::sort(layout.begin(), layout.end(), [](const Placed& a, const Placed& b) {
    return a.start != b.start ? a.start < b.start : a.profile < b.profile;
  });
  return layout;
}

Counts RandomCounts(const Shape& s, const std::vector<int>& raw) {
  Counts counts{};
  for (int value : raw) ++counts[static_cast<size_t>(Pick(value, s.profile_count()))];
  return counts;
}

bool NothingFits(const Shape& s, const Occupancy& occ, const ProfileSet& profiles,
                 const Rules& rules) {
  for (int p = 0; p < s.profile_count(); ++p) {
    if (!profiles.test(static_cast<size_t>(p))) continue;
    for (int start : s.profile(p).starts) {
      if (s.CanAdd(occ, p, start, rules).ok()) return false;
    }
  }
  return true;
}

// The complete enumeration itself (all profiles, newest driver): valid, sorted, no duplicates, and
// the empty layout first. The properties below use it as their oracle.
TEST(EnumerateOracle, CompleteEnumerationIsSound) {
  for (const ModelData& model : Models()) {
    const Shape& s = *model.shape;
    SCOPED_TRACE(s.model().id);
    ASSERT_FALSE(model.layouts.empty());
    EXPECT_TRUE(model.layouts.front().empty());
    EXPECT_EQ(model.layout_set.size(), model.layouts.size());
    for (const std::vector<Placed>& layout : model.layouts) {
      ASSERT_TRUE(s.Validate(layout).ok()) << Show(s, layout);
      ASSERT_EQ(SortedByStart(layout), layout);
    }
    // Every single instance at every allowed start is a layout of its own.
    for (int p = 0; p < s.profile_count(); ++p) {
      for (int start : s.profile(p).starts) {
        const std::vector<Placed> one = {
            {static_cast<std::uint8_t>(p), static_cast<std::uint8_t>(start)}};
        EXPECT_EQ(model.layout_set.count(one), 1u) << Show(s, one);
      }
    }
  }
}

// (a) Every enumerated layout validates, is sorted, uses only the allowed profiles and appears
// once; the maximal ones are exactly those nothing more fits into; with the newest driver the
// enumeration for a profile subset is the complete enumeration restricted to that subset.
RC_GTEST_PROP(EnumerateProperty, LayoutsAreValidAndMaximalityIsExact, ()) {
  const int mask_raw = RawInt();
  const int rules_raw = RawInt();
  for (const ModelData& model : Models()) {
    const Shape& s = *model.shape;
    ProfileSet profiles;
    for (int p = 0; p < s.profile_count(); ++p) {
      if (((mask_raw >> p) & 1) != 0) profiles.set(static_cast<size_t>(p));
    }
    const Rules rules =
        SomeRules()[static_cast<size_t>(Pick(rules_raw, static_cast<int>(SomeRules().size())))];
    EnumerateOptions options;
    options.profiles = profiles;
    options.rules = rules;
    const std::vector<std::vector<Placed>> layouts = EnumerateLayouts(s, options);
    options.maximal_only = true;
    const std::vector<std::vector<Placed>> maximal = EnumerateLayouts(s, options);

    const std::string where = s.model().id + " R" + std::to_string(rules.driver_branch);
    std::set<std::vector<Placed>> seen;
    std::vector<std::vector<Placed>> expected_maximal;
    for (const std::vector<Placed>& layout : layouts) {
      PROP_CHECK(!layout.empty(), where);
      PROP_CHECK(s.Validate(layout, rules).ok(), where + ": " + Show(s, layout));
      PROP_CHECK(seen.insert(layout).second, where + " duplicate " + Show(s, layout));
      for (size_t i = 0; i < layout.size(); ++i) {
        PROP_CHECK(profiles.test(layout[i].profile), where + ": " + Show(s, layout));
        if (i > 0)
          PROP_CHECK(layout[i - 1].start < layout[i].start, where + ": " + Show(s, layout));
      }
      const Occupancy occ = s.OccupancyOf(layout);
      const bool nothing_fits = NothingFits(s, occ, profiles, rules);
      PROP_CHECK(IsMaximal(s, occ, profiles, rules) == nothing_fits,
                 where + ": " + Show(s, layout));
      if (nothing_fits) expected_maximal.push_back(layout);
    }
    PROP_CHECK(maximal == expected_maximal,
               where + ": maximal_only differs from the filtered list");
    if (rules.driver_branch == 0) {
      size_t restricted = 0;
      for (const std::vector<Placed>& layout : model.layouts) {
        const bool inside = std::all_of(layout.begin(), layout.end(),
                                        [&](const Placed& p) { return profiles.test(p.profile); });
        if (inside && !layout.empty()) {
          ++restricted;
          PROP_CHECK(seen.count(layout) == 1, where + " missing " + Show(s, layout));
        }
      }
      PROP_CHECK(restricted == layouts.size(), where);
    }
  }
}

// (b) A random valid layout built step by step is, sorted by start, in the full enumeration.
RC_GTEST_PROP(EnumerateProperty, RandomValidLayoutIsEnumerated, ()) {
  const std::vector<int> raw = RawInts(40);
  for (const ModelData& model : Models()) {
    const Shape& s = *model.shape;
    const std::vector<Placed> layout = RandomValidLayout(s, raw, {}, nullptr);
    PROP_CHECK(s.Validate(layout).ok(), s.model().id + ": " + Show(s, layout));
    PROP_CHECK(model.layout_set.count(SortedByStart(layout)) == 1,
               s.model().id + ": " + Show(s, layout));
  }
}

// (c) Place agrees with brute force, on an empty GPU and around existing instances.
RC_GTEST_PROP(PlaceProperty, AgreesWithEnumeration, ()) {
  const std::vector<int> wanted_raw = RawInts(9);
  const std::vector<int> existing_raw = RawInts(12);
  for (const ModelData& model : Models()) {
    const Shape& s = *model.shape;
    const Counts wanted = RandomCounts(s, wanted_raw);
    const bool exists = model.by_counts.count(wanted) == 1;
    const std::optional<std::vector<Placed>> placed = s.Place(wanted);
    RC_CLASSIFY(exists && s.model().id == "A100-40GB", "A100-40GB multiset placeable");
    PROP_CHECK(placed.has_value() == exists, s.model().id);
    if (placed) {
      PROP_CHECK(s.Validate(*placed).ok(), s.model().id + ": " + Show(s, *placed));
      PROP_CHECK(s.CountsOf(*placed) == wanted, s.model().id + ": " + Show(s, *placed));
      PROP_CHECK(s.Place(wanted) == placed, s.model().id + ": not deterministic");
    }

    Occupancy occ;
    const std::vector<Placed> existing = RandomValidLayout(s, existing_raw, {}, &occ);
    Counts total = s.CountsOf(existing);
    for (size_t p = 0; p < total.size(); ++p)
      total[p] = static_cast<std::uint8_t>(total[p] + wanted[p]);
    bool brute = false;
    if (auto it = model.by_counts.find(total); it != model.by_counts.end()) {
      for (size_t index : it->second) {
        const std::vector<Placed>& candidate = model.layouts[index];
        if (std::all_of(existing.begin(), existing.end(), [&](const Placed& p) {
              return std::find(candidate.begin(), candidate.end(), p) != candidate.end();
            })) {
          brute = true;
          break;
        }
      }
    }
    std::vector<Placed> out;
    const bool ok = s.Place(occ, wanted, {}, &out);
    RC_CLASSIFY(brute && !existing.empty() && s.model().id == "A100-40GB",
                "A100-40GB placeable around existing instances");
    PROP_CHECK(ok == brute, s.model().id + " around " + Show(s, existing));
    if (ok) {
      PROP_CHECK(s.CountsOf(out) == wanted, s.model().id);
      std::vector<Placed> whole = existing;
      whole.insert(whole.end(), out.begin(), out.end());
      PROP_CHECK(s.Validate(whole).ok(), s.model().id + ": " + Show(s, whole));
    }
  }
}

// (d) Order does not matter: the same items shuffled resolve to valid/invalid alike, and valid
// exactly when the multiset can be placed.
RC_GTEST_PROP(LayoutTextProperty, ShuffledItemsResolveAlike, ()) {
  const std::vector<int> raw = RawInts(24);
  const bool from_valid_layout = *rc::gen::arbitrary<bool>();
  const bool by_id = *rc::gen::arbitrary<bool>();
  const unsigned seed = static_cast<unsigned>(RawInt());
  for (const ModelData& model : Models()) {
    const Shape& s = *model.shape;
    // Either the profiles of a random valid layout (in a random order) or random profiles.
    std::vector<int> profiles;
    if (from_valid_layout) {
      for (const Placed& p : RandomValidLayout(s, raw, {}, nullptr)) profiles.push_back(p.profile);
      std::shuffle(profiles.begin(), profiles.end(), std::mt19937(seed + 1));
    } else {
      for (size_t i = 0; i < raw.size() && i < 8; ++i)
        profiles.push_back(Pick(raw[i], s.profile_count()));
    }
    std::vector<std::string> items;
    for (int p : profiles) {
      const hw::GiProfile& profile = s.profile(p);
      items.push_back(by_id ? std::to_string(profile.smi_id) : profile.name);
    }
    std::vector<std::string> shuffled = items;
    std::mt19937 rng(seed);
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    auto join = [](const std::vector<std::string>& parts) {
      std::string text;
      for (const std::string& part : parts) text += (text.empty() ? "" : ",") + part;
      return text;
    };
    const std::string text = join(items);
    const std::string shuffled_text = join(shuffled);
    const absl::StatusOr<ParsedLayout> a = ParseLayout(s, text);
    const absl::StatusOr<ParsedLayout> b = ParseLayout(s, shuffled_text);
    PROP_CHECK(a.ok() && b.ok(), s.model().id + ": " + text);
    PROP_CHECK(a->items.size() == items.size(), s.model().id + ": " + text);
    const ResolvedLayout ra = ResolveLayout(s, *a);
    const ResolvedLayout rb = ResolveLayout(s, *b);
    const std::string where = s.model().id + ": '" + text + "' vs '" + shuffled_text + "'";
    RC_CLASSIFY(s.model().id == "A100-40GB" && ra.valid(), "A100-40GB valid");
    RC_CLASSIFY(
        s.model().id == "A100-40GB" && ra.valid() && ra.method == PlacementMethod::kExactSearch,
        "A100-40GB valid by exact search");
    PROP_CHECK(ra.valid() == rb.valid(), where);
    Counts counts{};
    for (const LayoutItem& item : a->items) ++counts[static_cast<size_t>(item.profile)];
    PROP_CHECK(ra.valid() == (model.by_counts.count(counts) == 1), where);
    for (const ResolvedLayout* r : {&ra, &rb}) {
      if (!r->valid()) continue;
      PROP_CHECK(s.Validate(r->instances).ok(), where + ": " + Show(s, r->instances));
      PROP_CHECK(s.CountsOf(r->instances) == counts, where);
      PROP_CHECK(r->method != PlacementMethod::kExplicit || r->instances.empty(), where);
      if (r->method == PlacementMethod::kDriverDefault) {
        // The driver's default placement, in the order given, produces exactly this layout.
        Occupancy occ;
        for (const Placed& p : r->instances) {
          PROP_CHECK(s.DefaultStart(occ, p.profile) == p.start, where);
          s.Add(occ, p.profile, p.start);
        }
        PROP_CHECK(r->default_order_fails_at == -1, where);
      } else if (r->method == PlacementMethod::kExactSearch) {
        PROP_CHECK(r->default_order_fails_at >= 0, where);
      }
    }
  }
}

int BruteFreeCount(const Shape& s, Occupancy& occ, int p, int min_start, const Rules& rules) {
  int best = 0;
  for (int start : s.profile(p).starts) {
    if (start < min_start || !s.CanAdd(occ, p, start, rules).ok()) continue;
    s.Add(occ, p, start);
    best = std::max(best, 1 + BruteFreeCount(s, occ, p, start + 1, rules));
    s.Remove(occ, p, start);
  }
  return best;
}

// (e) FreeCount is the largest number of extra instances exhaustive search can add; DefaultStart
// finds a start exactly when one fits.
RC_GTEST_PROP(FreeCountProperty, EqualsExhaustiveSearch, ()) {
  const std::vector<int> raw = RawInts(16);
  const int rules_raw = RawInt();
  for (const ModelData& model : Models()) {
    const Shape& s = *model.shape;
    const Rules rules =
        SomeRules()[static_cast<size_t>(Pick(rules_raw, static_cast<int>(SomeRules().size())))];
    Occupancy occ;
    const std::vector<Placed> layout = RandomValidLayout(s, raw, rules, &occ);
    RC_CLASSIFY(s.model().id == "A100-40GB" && layout.size() >= 3, "A100-40GB with 3+ instances");
    for (int p = 0; p < s.profile_count(); ++p) {
      const std::string where = s.model().id + " R" + std::to_string(rules.driver_branch) + " " +
                                s.profile(p).name + " beside " + Show(s, layout);
      Occupancy scratch = occ;
      const int brute = BruteFreeCount(s, scratch, p, 0, rules);
      PROP_CHECK(s.FreeCount(occ, p, rules) == brute, where);
      const int start = s.DefaultStart(occ, p, rules);
      PROP_CHECK((start >= 0) == (brute > 0), where);
      if (start >= 0) PROP_CHECK(s.CanAdd(occ, p, start, rules).ok(), where);
    }
  }
}

// (f) Validate and AllViolations agree on random, mostly invalid layouts; a layout is valid under
// the newest driver exactly when it is in the enumeration.
RC_GTEST_PROP(ValidateProperty, AgreesWithAllViolationsAndEnumeration, ()) {
  const std::vector<int> raw = RawInts(16);
  const int rules_raw = RawInt();
  for (const ModelData& model : Models()) {
    const Shape& s = *model.shape;
    const Rules rules =
        SomeRules()[static_cast<size_t>(Pick(rules_raw, static_cast<int>(SomeRules().size())))];
    std::vector<Placed> layout;
    for (size_t i = 0; i + 1 < raw.size(); i += 2) {
      layout.push_back({static_cast<std::uint8_t>(Pick(raw[i], s.profile_count())),
                        static_cast<std::uint8_t>(Pick(raw[i + 1], s.units() + 2))});
    }
    const std::string where =
        s.model().id + " R" + std::to_string(rules.driver_branch) + ": " + Show(s, layout);
    const Violation first = s.Validate(layout, rules);
    const std::vector<Violation> all = s.AllViolations(layout, rules);
    PROP_CHECK(first.ok() == all.empty(), where);
    if (!first.ok()) {
      PROP_CHECK(std::any_of(all.begin(), all.end(),
                             [&](const Violation& v) { return v.kind == first.kind; }),
                 where);
      for (const Violation& v : all) {
        PROP_CHECK(v.kind != ViolationKind::kNone, where);
        PROP_CHECK(!Describe(s, layout, v, rules).empty(), where);
      }
    }
    if (rules.driver_branch == 0) {
      PROP_CHECK(first.ok() == (model.layout_set.count(SortedByStart(layout)) == 1), where);
    }
  }
}

// (g) A layout made by the driver's default placement has a creation order that reproduces it, and
// any order DriverCreationOrder returns does reproduce it.
RC_GTEST_PROP(DriverOrderProperty, DefaultPlacedLayoutsAreReproducible, ()) {
  const std::vector<int> raw = RawInts(10);
  const std::vector<int> other = RawInts(12);
  for (const ModelData& model : Models()) {
    const Shape& s = *model.shape;
    std::vector<Placed> made;
    Occupancy occ;
    for (int value : raw) {
      const int p = Pick(value, s.profile_count());
      const int start = s.DefaultStart(occ, p);
      if (start < 0) continue;
      s.Add(occ, p, start);
      made.push_back({static_cast<std::uint8_t>(p), static_cast<std::uint8_t>(start)});
    }
    const std::vector<Placed> sorted = SortedByStart(made);
    const std::vector<Placed> arbitrary = RandomValidLayout(s, other, {}, nullptr);
    for (const std::vector<Placed>* layout : {&sorted, &arbitrary}) {
      const std::optional<std::vector<size_t>> order = DriverCreationOrder(s, *layout);
      const std::string where = s.model().id + ": " + Show(s, *layout);
      if (layout == &sorted) PROP_CHECK(order.has_value(), where);
      if (!order) continue;
      PROP_CHECK(order->size() == layout->size(), where);
      std::vector<size_t> check = *order;
      std::sort(check.begin(), check.end());
      for (size_t i = 0; i < check.size(); ++i) PROP_CHECK(check[i] == i, where);
      Occupancy replay;
      for (size_t i : *order) {
        const Placed& p = (*layout)[i];
        PROP_CHECK(s.DefaultStart(replay, p.profile) == p.start, where);
        s.Add(replay, p.profile, p.start);
      }
    }
  }
}

}  // namespace
}  // namespace gpuslice::geometry
