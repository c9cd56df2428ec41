// Tests of layout text parsing and resolution (gpuslice/geometry/layout_text.h), with the
// nvidia-smi examples of mig-facts.md §0.8, §2.5 and §6.
#include "gpuslice/geometry/layout_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace gpuslice::geometry {
namespace {

using gpuslice::testing::At;
using gpuslice::testing::P;
using gpuslice::testing::ShapeOf;
using gpuslice::testing::Show;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

ParsedLayout ParseOrDie(const Shape& shape, std::string_view text) {
  absl::StatusOr<ParsedLayout> parsed = ParseLayout(shape, text);
  EXPECT_TRUE(parsed.ok()) << text << ": " << parsed.status();
  return parsed.ok() ? *parsed : ParsedLayout{};
}

std::vector<int> Profiles(const ParsedLayout& parsed) {
  std::vector<int> out;
  for (const LayoutItem& item : parsed.items) out.push_back(item.profile);
  return out;
}

std::vector<int> Starts(const ParsedLayout& parsed) {
  std::vector<int> out;
  for (const LayoutItem& item : parsed.items) out.push_back(item.start);
  return out;
}

ResolvedLayout Resolve(const Shape& shape, std::string_view text, const Rules& rules = {}) {
  return ResolveLayout(shape, ParseOrDie(shape, text), rules);
}

std::vector<int> GiIds(const Shape& shape, const std::vector<Placed>& layout) {
  std::vector<int> ids;
  for (const Placed& p : layout) ids.push_back(shape.GpuInstanceId(p.profile, p.start));
  return ids;
}

// ------------------------------------------------------------------------------------------------
// ParseLayout: the accepted forms.

TEST(ParseLayout, ProfileNames) {
  const Shape& s = ShapeOf("H100-80GB");
  const ParsedLayout parsed = ParseOrDie(s, "3g.40gb,1g.10gb,1g.10gb");
  EXPECT_THAT(Profiles(parsed), ElementsAre(P(s, "3g.40gb"), P(s, "1g.10gb"), P(s, "1g.10gb")));
  EXPECT_THAT(Starts(parsed), ElementsAre(-1, -1, -1));
  for (const LayoutItem& item : parsed.items) EXPECT_THAT(item.cis, IsEmpty());
  EXPECT_EQ(parsed.items[0].text, "3g.40gb");
  // Case and spaces do not matter.
  EXPECT_THAT(Profiles(ParseOrDie(s, " 3G.40GB , 1g.10gb+ME ")),
              ElementsAre(P(s, "3g.40gb"), P(s, "1g.10gb+me")));
}

TEST(ParseLayout, SmiIds) {
  const Shape& s = ShapeOf("H100-80GB");
  EXPECT_THAT(Profiles(ParseOrDie(s, "9,19,19")),
              ElementsAre(P(s, "3g.40gb"), P(s, "1g.10gb"), P(s, "1g.10gb")));
  // ID 15 is the double-memory 1g, ID 20 the +me one (§0.1).
  EXPECT_THAT(Profiles(ParseOrDie(s, "15,20,0")),
              ElementsAre(P(s, "1g.20gb"), P(s, "1g.10gb+me"), P(s, "7g.80gb")));
}

TEST(ParseLayout, ExplicitStarts) {
  const Shape& s = ShapeOf("H100-80GB");
  const ParsedLayout parsed = ParseOrDie(s, "9@4,19@0,19@1");
  EXPECT_THAT(Profiles(parsed), ElementsAre(P(s, "3g.40gb"), P(s, "1g.10gb"), P(s, "1g.10gb")));
  EXPECT_THAT(Starts(parsed), ElementsAre(4, 0, 1));
  const ParsedLayout colon = ParseOrDie(s, "9:4");
  ASSERT_EQ(colon.items.size(), 1u);
  EXPECT_EQ(colon.items[0].profile, P(s, "3g.40gb"));
  EXPECT_EQ(colon.items[0].start, 4);
  EXPECT_THAT(Starts(ParseOrDie(s, "3g.40gb@4,1g.10gb:6")), ElementsAre(4, 6));
}

TEST(ParseLayout, Counts) {
  const Shape& s = ShapeOf("H100-80GB");
  const ParsedLayout parsed = ParseOrDie(s, "2x1g.10gb");
  EXPECT_THAT(Profiles(parsed), ElementsAre(P(s, "1g.10gb"), P(s, "1g.10gb")));
  EXPECT_THAT(Profiles(ParseOrDie(s, "2x1g.10gb,3g.40gb@4")),
              ElementsAre(P(s, "1g.10gb"), P(s, "1g.10gb"), P(s, "3g.40gb")));
  EXPECT_THAT(Starts(ParseOrDie(s, "2x1g.10gb,3g.40gb@4")), ElementsAre(-1, -1, 4));
  EXPECT_EQ(ParseOrDie(s, "7x19").items.size(), 7u);
}

TEST(ParseLayout, MigPrefix) {
  const Shape& s = ShapeOf("H100-80GB");
  EXPECT_THAT(Profiles(ParseOrDie(s, "MIG 3g.40gb")), ElementsAre(P(s, "3g.40gb")));
  EXPECT_THAT(Profiles(ParseOrDie(s, "MIG 3g.40gb,MIG 1g.10gb")),
              ElementsAre(P(s, "3g.40gb"), P(s, "1g.10gb")));
}

TEST(ParseLayout, ComputeInstanceSplits) {
  const Shape& s = ShapeOf("H100-80GB");
  const ParsedLayout split = ParseOrDie(s, "3g.40gb[1c,2c]");
  ASSERT_EQ(split.items.size(), 1u);
  EXPECT_EQ(split.items[0].profile, P(s, "3g.40gb"));
  EXPECT_EQ(split.items[0].start, -1);
  ASSERT_EQ(split.items[0].cis.size(), 2u);
  const std::vector<hw::CiProfile>& cis = s.mig().CiProfilesFor(3);
  EXPECT_EQ(cis[static_cast<size_t>(split.items[0].cis[0].ci)].name, "1c");
  EXPECT_EQ(cis[static_cast<size_t>(split.items[0].cis[1].ci)].name, "2c");
  EXPECT_EQ(split.items[0].cis[0].start, -1);

  const ParsedLayout placed = ParseOrDie(s, "3g.40gb@4[1c@0,2c@1]");
  ASSERT_EQ(placed.items.size(), 1u);
  EXPECT_EQ(placed.items[0].start, 4);
  ASSERT_EQ(placed.items[0].cis.size(), 2u);
  EXPECT_EQ(placed.items[0].cis[0].start, 0);
  EXPECT_EQ(placed.items[0].cis[1].start, 1);
  // '+' separates CIs too.
  EXPECT_EQ(ParseOrDie(s, "3g.40gb[1c+1c+1c]").items[0].cis.size(), 3u);
}

TEST(ParseLayout, MigPartedCiDeviceNamesGroupIntoGpuInstances) {
  const Shape& s = ShapeOf("H100-80GB");
  // A 3-slice GI holds at most three 1c CIs (§2.11), so four 1c.3g.40gb need two GIs: 3 + 1.
  const ParsedLayout parsed = ParseOrDie(s, "1c.3g.40gb,1c.3g.40gb,1c.3g.40gb,1c.3g.40gb");
  ASSERT_EQ(parsed.items.size(), 2u);
  EXPECT_EQ(parsed.items[0].profile, P(s, "3g.40gb"));
  EXPECT_EQ(parsed.items[1].profile, P(s, "3g.40gb"));
  EXPECT_EQ(parsed.items[0].cis.size(), 3u);
  EXPECT_EQ(parsed.items[1].cis.size(), 1u);
  // 1c + 2c share one 3g GI; a second 2c needs a new one.
  const ParsedLayout mixed = ParseOrDie(s, "1c.3g.40gb,2c.3g.40gb,2c.3g.40gb");
  ASSERT_EQ(mixed.items.size(), 2u);
  EXPECT_EQ(mixed.items[0].cis.size(), 2u);
  EXPECT_EQ(mixed.items[1].cis.size(), 1u);
  // Counts work with CI names.
  EXPECT_EQ(ParseOrDie(s, "6x1c.3g.40gb").items.size(), 2u);
}

TEST(ParseLayout, CiItemsOfOneGiProfileFillOneGiWhereverTheyStand) {
  // layout_text.h: CI items of the same GI profile fill one GI before the next one is started,
  // wherever they stand in the list (mig-parted's maps have no order).
  const Shape& s = ShapeOf("H100-80GB");
  const ParsedLayout parsed = ParseOrDie(s, "1c.3g.40gb,1g.10gb,1c.3g.40gb");
  ASSERT_EQ(parsed.items.size(), 2u);
  EXPECT_EQ(s.profile(parsed.items[0].profile).name, "3g.40gb");
  EXPECT_EQ(parsed.items[0].cis.size(), 2u);
  EXPECT_EQ(s.profile(parsed.items[1].profile).name, "1g.10gb");
  // A fourth 1c does not fit in a 3g GI (3 compute slices): it starts a second GI.
  const ParsedLayout four = ParseOrDie(s, "1c.3g.40gb,1c.3g.40gb,1c.3g.40gb,1c.3g.40gb");
  ASSERT_EQ(four.items.size(), 2u);
  EXPECT_EQ(four.items[0].cis.size(), 3u);
  EXPECT_EQ(four.items[1].cis.size(), 1u);
}

TEST(ParseLayout, NoneAndEmpty) {
  const Shape& s = ShapeOf("A100-40GB");
  EXPECT_THAT(ParseOrDie(s, "none").items, IsEmpty());
  EXPECT_THAT(ParseOrDie(s, "NONE").items, IsEmpty());
  EXPECT_THAT(ParseOrDie(s, "").items, IsEmpty());
  const ResolvedLayout resolved = Resolve(s, "none");
  EXPECT_TRUE(resolved.valid());
  EXPECT_THAT(resolved.instances, IsEmpty());
}

// ------------------------------------------------------------------------------------------------
// ParseLayout: errors.

TEST(ParseLayout, UnknownIdOnA30ListsItsProfiles) {
  const Shape& s = ShapeOf("A30-24GB");
  absl::StatusOr<ParsedLayout> parsed = ParseLayout(s, "9");  // ID 9 does not exist on A30 (§6)
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(
      parsed.status().message(),
      AllOf(HasSubstr("9"), HasSubstr("A30-24GB"), HasSubstr("1g.6gb"), HasSubstr("1g.6gb+me"),
            HasSubstr("2g.12gb"), HasSubstr("2g.12gb+me"), HasSubstr("4g.24gb")));
}

TEST(ParseLayout, UnknownNameSuggestsSameSizeProfile) {
  const Shape& s = ShapeOf("A100-40GB");
  absl::StatusOr<ParsedLayout> parsed = ParseLayout(s, "3g.40gb");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(parsed.status().message(), AllOf(HasSubstr("3g.40gb"), HasSubstr("3g.20gb")));
  // Unknown CI profile inside a GI: 4c does not fit a 3-slice GI.
  absl::StatusOr<ParsedLayout> ci = ParseLayout(s, "3g.20gb[4c]");
  ASSERT_FALSE(ci.ok());
  EXPECT_EQ(ci.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ci.status().message(), AllOf(HasSubstr("4c"), HasSubstr("1c, 2c, 3c")));
  EXPECT_EQ(ParseLayout(s, "4c.3g.20gb").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseLayout(s, "1c.3g.40gb").status().code(), absl::StatusCode::kNotFound);
}

TEST(ParseLayout, MalformedTextIsInvalidArgument) {
  const Shape& s = ShapeOf("H100-80GB");
  for (const char* text :
       {"3g.40gb@x", "[", "3g.40gb,,1g.10gb", "2x3g.40gb@0", "3g.40gb[1c", "3g.40gb]",
        "3g.40gb[1c]x", "@4", "3g.40gb[]", "0x1g.10gb", "1c.3g.40gb@4", "3g.40gb,"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<ParsedLayout> parsed = ParseLayout(s, text);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
  }
  EXPECT_THAT(ParseLayout(s, "3g.40gb@x").status().message(), HasSubstr("x"));
}

TEST(ParseLayout, TooManyInstances) {
  const Shape& s = ShapeOf("H100-80GB");
  absl::StatusOr<ParsedLayout> parsed = ParseLayout(s, "9x1g.10gb,9x1g.10gb");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
}

// ------------------------------------------------------------------------------------------------
// ResolveLayout.

TEST(ResolveLayout, A100DriverDefault_9_19_19) {
  // §6: `nvidia-smi mig -cgi 9,19,19 -C` on A100: the 3g lands on 4:4, the 1g's on 0 and 1.
  const Shape& s = ShapeOf("A100-40GB");
  const ResolvedLayout r = Resolve(s, "9,19,19");
  EXPECT_TRUE(r.valid());
  EXPECT_EQ(r.method, PlacementMethod::kDriverDefault);
  EXPECT_EQ(r.default_order_fails_at, -1);
  EXPECT_THAT(r.instances,
              ElementsAre(At(s, "3g.20gb", 4), At(s, "1g.5gb", 0), At(s, "1g.5gb", 1)));
  EXPECT_THAT(GiIds(s, r.instances), ElementsAre(2, 7, 8));
  ASSERT_EQ(r.cis.size(), 3u);
  for (const auto& cis : r.cis) EXPECT_THAT(cis, IsEmpty());
}

TEST(ResolveLayout, MigGuideExample_9_19_14_19) {
  // §6: guide example "-cgi 9,19,14,19": GI 2 @4:4, GI 7 @0:1, GI 4 @2:2, GI 8 @1:1.
  const Shape& s = ShapeOf("A100-40GB");
  const ResolvedLayout r = Resolve(s, "9,19,14,19");
  EXPECT_TRUE(r.valid());
  EXPECT_EQ(r.method, PlacementMethod::kDriverDefault);
  EXPECT_THAT(r.instances, ElementsAre(At(s, "3g.20gb", 4), At(s, "1g.5gb", 0), At(s, "2g.10gb", 2),
                                       At(s, "1g.5gb", 1)));
  EXPECT_THAT(GiIds(s, r.instances), ElementsAre(2, 7, 4, 8));
}

TEST(ResolveLayout, KnownIssueOrderFallsBackToExactSearch) {
  // §0.8: -cgi 19,19,14,9 fails with Insufficient Resources at the 3g (item 4), yet the multiset
  // fits.
  const Shape& s = ShapeOf("A100-40GB");
  const ResolvedLayout r = Resolve(s, "19,19,14,9");
  EXPECT_TRUE(r.valid()) << Show(s, r.instances);
  EXPECT_EQ(r.method, PlacementMethod::kExactSearch);
  EXPECT_EQ(r.default_order_fails_at, 3);
  ASSERT_EQ(r.instances.size(), 4u);
  // Instances stay in item order, with the item's profile.
  EXPECT_EQ(r.instances[0].profile, P(s, "1g.5gb"));
  EXPECT_EQ(r.instances[1].profile, P(s, "1g.5gb"));
  EXPECT_EQ(r.instances[2].profile, P(s, "2g.10gb"));
  EXPECT_EQ(r.instances[3].profile, P(s, "3g.20gb"));
  EXPECT_TRUE(s.Validate(r.instances).ok()) << Show(s, r.instances);
}

TEST(ResolveLayout, H100NvlObservedGiIds) {
  // §2.5: `-cgi 9,15,19 -C` -> GI 1 (3g), GI 5 (1g.24gb), GI 13 (1g.12gb).
  const Shape& s = ShapeOf("H100-NVL-94GB");
  const ResolvedLayout r = Resolve(s, "9,15,19");
  EXPECT_TRUE(r.valid());
  EXPECT_EQ(r.method, PlacementMethod::kDriverDefault);
  EXPECT_THAT(r.instances,
              ElementsAre(At(s, "3g.47gb", 0), At(s, "1g.24gb", 4), At(s, "1g.12gb", 6)));
  EXPECT_THAT(GiIds(s, r.instances), ElementsAre(1, 5, 13));
}

TEST(ResolveLayout, InstanceCapIsInvalid) {
  const Shape& s = ShapeOf("H100-80GB");
  const ResolvedLayout r = Resolve(s, "4g.40gb,4g.40gb");
  EXPECT_FALSE(r.valid());
  ASSERT_FALSE(r.violations.empty());
  EXPECT_EQ(r.violations[0].kind, ViolationKind::kInstanceCap);
  EXPECT_EQ(r.violations[0].profile, P(s, "4g.40gb"));
  EXPECT_THAT(Describe(s, r.instances, r.violations[0]), HasSubstr("4g.40gb"));
}

TEST(ResolveLayout, ImpossibleMultisetIsNoPlacement) {
  const Shape& s = ShapeOf("A100-40GB");
  const ResolvedLayout r = Resolve(s, "14,14,14,19,19");
  EXPECT_FALSE(r.valid());
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].kind, ViolationKind::kNoPlacement);
  const ResolvedLayout too_big = Resolve(s, "0,19");
  EXPECT_FALSE(too_big.valid());
}

TEST(ResolveLayout, ExplicitPlacements) {
  const Shape& s = ShapeOf("A100-40GB");
  const ResolvedLayout r = Resolve(s, "9@4,19@0,19@1");
  EXPECT_TRUE(r.valid());
  EXPECT_EQ(r.method, PlacementMethod::kExplicit);
  EXPECT_THAT(r.instances,
              ElementsAre(At(s, "3g.20gb", 4), At(s, "1g.5gb", 0), At(s, "1g.5gb", 1)));
  const ResolvedLayout bad = Resolve(s, "9@0,19@1");
  EXPECT_FALSE(bad.valid());
  ASSERT_FALSE(bad.violations.empty());
  EXPECT_EQ(bad.violations[0].kind, ViolationKind::kOverlap);
  const ResolvedLayout bad_start = Resolve(s, "19@7");
  ASSERT_FALSE(bad_start.violations.empty());
  EXPECT_EQ(bad_start.violations[0].kind, ViolationKind::kStartNotAllowed);
  const ResolvedLayout far = Resolve(s, "19@300");
  EXPECT_FALSE(far.valid());
}

TEST(ResolveLayout, FixedInstancesAreRespectedByDefaultPlacement) {
  const Shape& s = ShapeOf("A100-40GB");
  // Fixed first: the driver places the 1g around the 3g at 4.
  const ResolvedLayout r = Resolve(s, "9@4,19");
  EXPECT_TRUE(r.valid());
  EXPECT_EQ(r.method, PlacementMethod::kDriverDefault);
  EXPECT_THAT(r.instances, ElementsAre(At(s, "3g.20gb", 4), At(s, "1g.5gb", 0)));
}

TEST(ResolveLayout, DefaultItemBeforeAFixedOneIsPlacedAroundIt) {
  // layout_text.h: instances given with a start stay there; if the driver's order fails although
  // the multiset fits, an exact search finds placements. 1g.5gb@6 plus any other 1g fits.
  const Shape& s = ShapeOf("A100-40GB");
  for (const char* text : {"19,19@6", "19,9@4", "14,9@4"}) {
    SCOPED_TRACE(text);
    const ResolvedLayout r = Resolve(s, text);
    ASSERT_TRUE(r.valid()) << Show(s, r.instances);
    EXPECT_EQ(r.method, PlacementMethod::kExactSearch);
    EXPECT_EQ(r.default_order_fails_at, 1);
    EXPECT_TRUE(s.Validate(r.instances).ok()) << Show(s, r.instances);
    EXPECT_EQ(r.instances[1].start, std::string_view(text).ends_with("@6") ? 6 : 4);
  }
}

TEST(ResolveLayout, DriverRules) {
  const Shape& s = ShapeOf("A100-40GB");
  EXPECT_TRUE(Resolve(s, "5,9").valid());
  const ResolvedLayout r470 = Resolve(s, "5,9", Rules{470});
  EXPECT_FALSE(r470.valid());
  ASSERT_FALSE(r470.violations.empty());
  EXPECT_EQ(r470.violations[0].kind, ViolationKind::kDriverPairing);
  const ResolvedLayout old = Resolve(s, "15", Rules{470});
  ASSERT_FALSE(old.violations.empty());
  EXPECT_EQ(old.violations[0].kind, ViolationKind::kProfileTooNew);
}

TEST(ResolveLayout, ComputeInstances) {
  const Shape& s = ShapeOf("H100-80GB");
  const ResolvedLayout split = Resolve(s, "3g.40gb[1c,2c]");
  EXPECT_TRUE(split.valid());
  ASSERT_EQ(split.cis.size(), 1u);
  ASSERT_EQ(split.cis[0].size(), 2u);
  // 2c can only start at 0 in a 3-slice GI (§2.11), so the 1c goes to slice 2.
  const std::vector<hw::CiProfile>& cis = s.mig().CiProfilesFor(3);
  EXPECT_EQ(cis[split.cis[0][0].ci].name, "2c");
  EXPECT_EQ(split.cis[0][0].start, 0);
  EXPECT_EQ(cis[split.cis[0][1].ci].name, "1c");
  EXPECT_EQ(split.cis[0][1].start, 2);

  // "3g.40gb@4[1c@0,2c@1]" parses, but 2c@1 is not an allowed CI placement.
  const ResolvedLayout bad = Resolve(s, "3g.40gb@4[1c@0,2c@1]");
  EXPECT_THAT(bad.violations, IsEmpty());
  EXPECT_FALSE(bad.valid());
  ASSERT_EQ(bad.ci_problems.size(), 1u);
  EXPECT_THAT(bad.ci_problems[0], AllOf(HasSubstr("3g.40gb@4"), HasSubstr("2c.3g.40gb")));
  EXPECT_TRUE(Resolve(s, "3g.40gb@4[2c@0,1c@2]").valid());
  // Two 2c do not fit in three slices.
  const ResolvedLayout too_many = Resolve(s, "3g.40gb[2c,2c]");
  EXPECT_FALSE(too_many.valid());
  EXPECT_THAT(too_many.ci_problems, Not(IsEmpty()));
  // mig-parted style: four 1c.3g.40gb = two GIs with 3 + 1 CIs.
  const ResolvedLayout grouped = Resolve(s, "1c.3g.40gb,1c.3g.40gb,1c.3g.40gb,1c.3g.40gb");
  EXPECT_TRUE(grouped.valid());
  ASSERT_EQ(grouped.instances.size(), 2u);
  EXPECT_EQ(grouped.cis[0].size(), 3u);
  EXPECT_EQ(grouped.cis[1].size(), 1u);
}

// ------------------------------------------------------------------------------------------------
// DriverCreationOrder.

TEST(DriverCreationOrder, ReproducesA100Layout) {
  const Shape& s = ShapeOf("A100-40GB");
  // Given in an order the driver would not reproduce; the 3g must be created first (§0.8).
  const std::vector<Placed> layout = {At(s, "1g.5gb", 0), At(s, "1g.5gb", 1), At(s, "3g.20gb", 4)};
  std::optional<std::vector<size_t>> order = DriverCreationOrder(s, layout);
  ASSERT_TRUE(order.has_value());
  EXPECT_THAT(*order, ElementsAre(2, 0, 1));
  // Replaying the order with default placement gives the layout back.
  Occupancy occ;
  for (size_t i : *order) {
    EXPECT_EQ(s.DefaultStart(occ, layout[i].profile), layout[i].start);
    s.Add(occ, layout[i].profile, layout[i].start);
  }
}

TEST(DriverCreationOrder, GuideExample) {
  const Shape& s = ShapeOf("A100-40GB");
  const std::vector<Placed> layout = {At(s, "2g.10gb", 2), At(s, "1g.5gb", 1), At(s, "3g.20gb", 4),
                                      At(s, "1g.5gb", 0)};
  std::optional<std::vector<size_t>> order = DriverCreationOrder(s, layout);
  ASSERT_TRUE(order.has_value());
  ASSERT_EQ(order->size(), 4u);
  EXPECT_EQ(order->front(), 2u);  // the 3g first
  Occupancy occ;
  for (size_t i : *order) {
    ASSERT_EQ(s.DefaultStart(occ, layout[i].profile), layout[i].start) << i;
    s.Add(occ, layout[i].profile, layout[i].start);
  }
}

TEST(DriverCreationOrder, ImpossibleLayouts) {
  const Shape& s = ShapeOf("A100-40GB");
  // A lone 1g always lands on slot 6 first (§0.8), so 1g@3 alone is never the driver's choice.
  EXPECT_FALSE(DriverCreationOrder(s, std::vector<Placed>{At(s, "1g.5gb", 3)}).has_value());
  // The 3g always takes 4 before 0, so a lone 3g@0 cannot be produced either.
  EXPECT_FALSE(DriverCreationOrder(s, std::vector<Placed>{At(s, "3g.20gb", 0)}).has_value());
  EXPECT_TRUE(DriverCreationOrder(s, std::vector<Placed>{At(s, "1g.5gb", 6)}).has_value());
  EXPECT_TRUE(DriverCreationOrder(s, std::vector<Placed>{}).has_value());
  // On H100 NVL (lowest free start first) the lone 1g@0 is reproducible, 1g@3 is not.
  const Shape& nvl = ShapeOf("H100-NVL-94GB");
  EXPECT_TRUE(DriverCreationOrder(nvl, std::vector<Placed>{At(nvl, "1g.12gb", 0)}).has_value());
  EXPECT_FALSE(DriverCreationOrder(nvl, std::vector<Placed>{At(nvl, "1g.12gb", 3)}).has_value());
}

TEST(FormatLayout, Text) {
  const Shape& s = ShapeOf("A100-40GB");
  EXPECT_EQ(FormatLayout(s, std::vector<Placed>{At(s, "3g.20gb", 4), At(s, "1g.5gb", 0)}),
            "3g.20gb@4, 1g.5gb@0");
  EXPECT_EQ(FormatLayout(s, std::vector<Placed>{}), "none");
}

}  // namespace
}  // namespace gpuslice::geometry
