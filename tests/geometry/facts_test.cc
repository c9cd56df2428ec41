// The enumeration against the published counts and tables of mig-facts.md §3.2 / §3.3, and the
// mig-parted default configs (§5.1) against the placement rules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpuslice/geometry/enumerate.h"
#include "gpuslice/geometry/shape.h"
#include "test_util.h"

namespace gpuslice::geometry {
namespace {

using gpuslice::testing::MigModelIds;
using gpuslice::testing::Multiset;
using gpuslice::testing::P;
using gpuslice::testing::ShapeOf;
using gpuslice::testing::Show;
using ::testing::ContainerEq;

const std::vector<std::string> kSevenSliceModels = {
    "A100-40GB", "A100-80GB",  "H100-80GB",   "H100-NVL-94GB", "H100-96GB",
    "H20",       "H200-141GB", "GH200-144GB", "B200",          "GB200"};

std::vector<std::vector<Placed>> Maximal(const Shape& shape, const ProfileSet& profiles,
                                         const Rules& rules = {}) {
  EnumerateOptions options;
  options.profiles = profiles;
  options.maximal_only = true;
  options.rules = rules;
  return EnumerateLayouts(shape, options);
}

// "3g" of "3g.20gb".
std::string Prefix(const Shape& shape, int profile) {
  const std::string& name = shape.profile(profile).name;
  return name.substr(0, name.find('.'));
}

using PrefixLayout = std::set<std::pair<std::string, int>>;

std::set<PrefixLayout> AsPrefixLayouts(const Shape& shape,
                                       const std::vector<std::vector<Placed>>& layouts) {
  std::set<PrefixLayout> out;
  for (const auto& layout : layouts) {
    PrefixLayout entry;
    for (const Placed& p : layout) entry.emplace(Prefix(shape, p.profile), p.start);
    out.insert(entry);
  }
  return out;
}

std::set<std::multiset<std::string>> AsPrefixMultisets(
    const Shape& shape, const std::vector<std::vector<Placed>>& layouts) {
  std::set<std::multiset<std::string>> out;
  for (const auto& layout : layouts) {
    std::multiset<std::string> entry;
    for (const Placed& p : layout) entry.insert(Prefix(shape, p.profile));
    out.insert(entry);
  }
  return out;
}

// "3g@0 1g@4" -> {("3g",0), ("1g",4)}.
PrefixLayout L(const std::string& text) {
  PrefixLayout out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t at = item.find('@');
    out.emplace(item.substr(0, at), std::stoi(item.substr(at + 1)));
    pos = end + 1;
  }
  return out;
}

std::multiset<std::string> M(std::initializer_list<std::pair<const char*, int>> parts) {
  std::multiset<std::string> out;
  for (const auto& [name, count] : parts) {
    for (int i = 0; i < count; ++i) out.insert(name);
  }
  return out;
}

// mig-facts §3.2: the 19 maximal placements of the base profiles on A100/H100-class parts.
const std::set<PrefixLayout>& SevenSliceTable() {
  static const std::set<PrefixLayout> table = {
      L("7g@0"),
      L("4g@0 3g@4"),
      L("4g@0 2g@4 1g@6"),
      L("4g@0 1g@4 1g@5 1g@6"),
      L("3g@0 3g@4"),
      L("3g@0 2g@4 1g@6"),
      L("3g@0 1g@4 1g@5 1g@6"),
      L("2g@0 2g@2 3g@4"),
      L("2g@0 1g@2 1g@3 3g@4"),
      L("1g@0 1g@1 2g@2 3g@4"),
      L("1g@0 1g@1 2g@2 2g@4 1g@6"),
      L("2g@0 1g@2 1g@3 2g@4 1g@6"),
      L("2g@0 2g@2 1g@4 1g@5 1g@6"),
      L("2g@0 1g@2 1g@3 1g@4 1g@5 1g@6"),
      L("1g@0 1g@1 2g@2 1g@4 1g@5 1g@6"),
      L("1g@0 1g@1 1g@2 1g@3 2g@4 1g@6"),
      L("2g@0 2g@2 2g@4 1g@6"),
      L("1g@0 1g@1 1g@2 1g@3 3g@4"),
      L("1g@0 1g@1 1g@2 1g@3 1g@4 1g@5 1g@6"),
  };
  return table;
}

TEST(Facts, SevenSliceTableHas19Entries) { EXPECT_EQ(SevenSliceTable().size(), 19u); }

TEST(Facts, SevenSliceBaseProfiles_19Placements_14Multisets) {
  const std::set<std::multiset<std::string>> multisets = {
      M({{"7g", 1}}),
      M({{"4g", 1}, {"3g", 1}}),
      M({{"4g", 1}, {"2g", 1}, {"1g", 1}}),
      M({{"4g", 1}, {"1g", 3}}),
      M({{"3g", 2}}),
      M({{"3g", 1}, {"2g", 1}, {"1g", 1}}),
      M({{"3g", 1}, {"1g", 3}}),
      M({{"3g", 1}, {"2g", 2}}),
      M({{"3g", 1}, {"2g", 1}, {"1g", 2}}),
      M({{"3g", 1}, {"1g", 4}}),
      M({{"2g", 3}, {"1g", 1}}),
      M({{"2g", 2}, {"1g", 3}}),
      M({{"2g", 1}, {"1g", 5}}),
      M({{"1g", 7}}),
  };
  ASSERT_EQ(multisets.size(), 14u);
  for (const std::string& id : kSevenSliceModels) {
    SCOPED_TRACE(id);
    const Shape& s = ShapeOf(id);
    EXPECT_EQ(BaseProfiles(s).count(), 5u);
    const auto layouts = Maximal(s, BaseProfiles(s));
    EXPECT_EQ(layouts.size(), 19u);
    EXPECT_EQ(DistinctMultisets(s, layouts).size(), 14u);
    EXPECT_THAT(AsPrefixLayouts(s, layouts), ContainerEq(SevenSliceTable()));
    EXPECT_THAT(AsPrefixMultisets(s, layouts), ContainerEq(multisets));
  }
}

TEST(Facts, A100BaseProfilesBeforeR510) {
  // Table entry #2 (4g@0 3g@4) needs R510 (§3.1, §3.2); before it the other 18 remain.
  const Shape& s = ShapeOf("A100-40GB");
  const auto layouts = Maximal(s, BaseProfiles(s), Rules{470});
  std::set<PrefixLayout> expected = SevenSliceTable();
  expected.erase(L("4g@0 3g@4"));
  EXPECT_THAT(AsPrefixLayouts(s, layouts), ContainerEq(expected));
  EXPECT_EQ(DistinctMultisets(s, layouts).size(), 13u);
}

TEST(Facts, SevenSliceAllProfiles_239Placements_64Multisets) {
  for (const std::string& id : kSevenSliceModels) {
    SCOPED_TRACE(id);
    const Shape& s = ShapeOf(id);
    EXPECT_EQ(AllProfiles(s).count(), 7u);
    const auto layouts = Maximal(s, AllProfiles(s));
    EXPECT_EQ(layouts.size(), 239u);
    EXPECT_EQ(DistinctMultisets(s, layouts).size(), 64u);
  }
}

TEST(Facts, A100AllProfilesWithoutMe_78Placements_38Multisets) {
  const Shape& s = ShapeOf("A100-40GB");
  ProfileSet profiles = AllProfiles(s);
  profiles.reset(static_cast<size_t>(P(s, "1g.5gb+me")));
  const auto layouts = Maximal(s, profiles);
  EXPECT_EQ(layouts.size(), 78u);
  EXPECT_EQ(DistinctMultisets(s, layouts).size(), 38u);
}

TEST(Facts, A30Base_5Placements_4Multisets) {
  // §3.3: 4g; 2g+2g; 2g@0+1g@2+1g@3 and 1g@0+1g@1+2g@2; 4x1g.
  const Shape& s = ShapeOf("A30-24GB");
  EXPECT_EQ(BaseProfiles(s).count(), 3u);
  const auto layouts = Maximal(s, BaseProfiles(s));
  EXPECT_EQ(layouts.size(), 5u);
  EXPECT_EQ(DistinctMultisets(s, layouts).size(), 4u);
  const std::set<PrefixLayout> expected = {L("4g@0"), L("2g@0 2g@2"), L("2g@0 1g@2 1g@3"),
                                           L("1g@0 1g@1 2g@2"), L("1g@0 1g@1 1g@2 1g@3")};
  EXPECT_THAT(AsPrefixLayouts(s, layouts), ContainerEq(expected));
}

TEST(Facts, RtxProBase_5Placements_4Multisets) {
  // §3.3: 4g; 2x2g; 2g+2x1g (2 placements); 4x1g on the 12-unit grid.
  const Shape& s = ShapeOf("RTX-PRO-6000-Blackwell");
  EXPECT_EQ(BaseProfiles(s).count(), 3u);
  const auto layouts = Maximal(s, BaseProfiles(s));
  EXPECT_EQ(layouts.size(), 5u);
  EXPECT_EQ(DistinctMultisets(s, layouts).size(), 4u);
  const std::set<PrefixLayout> expected = {L("4g@0"), L("2g@0 2g@6"), L("2g@0 1g@6 1g@9"),
                                           L("1g@0 1g@3 2g@6"), L("1g@0 1g@3 1g@6 1g@9")};
  EXPECT_THAT(AsPrefixLayouts(s, layouts), ContainerEq(expected));
}

TEST(Facts, BaseProfileSets) {
  const Shape& a100 = ShapeOf("A100-40GB");
  const ProfileSet base = BaseProfiles(a100);
  EXPECT_TRUE(base.test(static_cast<size_t>(P(a100, "1g.5gb"))));
  EXPECT_FALSE(base.test(static_cast<size_t>(P(a100, "1g.5gb+me"))));
  EXPECT_FALSE(base.test(static_cast<size_t>(P(a100, "1g.10gb"))));  // double-memory 1g
  EXPECT_TRUE(base.test(static_cast<size_t>(P(a100, "7g.40gb"))));
  const Shape& rtx = ShapeOf("RTX-PRO-6000-Blackwell");
  EXPECT_EQ(BaseProfiles(rtx).count(), 3u);
  EXPECT_FALSE(BaseProfiles(rtx).test(static_cast<size_t>(P(rtx, "1g.24gb+gfx"))));
  EXPECT_FALSE(BaseProfiles(rtx).test(static_cast<size_t>(P(rtx, "2g.48gb-me"))));
  EXPECT_EQ(AllProfiles(rtx).count(), 11u);
}

// ------------------------------------------------------------------------------------------------
// mig-parted's default configs (§5.1).

// Whether some creation order makes the driver's default placement succeed (mig-parted tries the
// permutations of the creation order, §5.3, and uses no explicit placements).
bool SomeDriverOrderWorks(const Shape& s, std::vector<int> profiles) {
  std::sort(profiles.begin(), profiles.end());
  do {
    Occupancy occ;
    bool ok = true;
    for (int p : profiles) {
      const int start = s.DefaultStart(occ, p);
      if (start < 0) {
        ok = false;
        break;
      }
      s.Add(occ, p, start);
    }
    if (ok) return true;
  } while (std::next_permutation(profiles.begin(), profiles.end()));
  return false;
}

TEST(MigPartedConfigs, BalancedIsPlaceableOnEveryMigModel) {
  for (const std::string& id : MigModelIds()) {
    SCOPED_TRACE(id);
    const Shape& s = ShapeOf(id);
    ASSERT_FALSE(s.mig().balanced.empty());
    const Counts wanted = Multiset(s, s.mig().balanced);
    std::optional<std::vector<Placed>> placed = s.Place(wanted);
    ASSERT_TRUE(placed.has_value());
    EXPECT_TRUE(s.Validate(*placed).ok()) << Show(s, *placed);
    std::vector<int> profiles;
    for (const std::string& name : s.mig().balanced) profiles.push_back(P(s, name));
    EXPECT_TRUE(SomeDriverOrderWorks(s, profiles));
  }
}

// mig-parted ships one all-<profile> config per profile, at the profile's max count. Every one of
// them is placeable: the media rules never forbid it, because each media-exclusive profile (+me,
// +me.all) has an instance count of 1, so all-1g.5gb.me, all-1g.24gb.me.all etc. hold one instance.
TEST(MigPartedConfigs, EveryProfileAtItsMaxCountIsPlaceable) {
  for (const std::string& id : MigModelIds()) {
    const Shape& s = ShapeOf(id);
    for (int p = 0; p < s.profile_count(); ++p) {
      SCOPED_TRACE(id + " all-" + s.profile(p).name);
      const hw::GiProfile& profile = s.profile(p);
      if (profile.variant == hw::MediaVariant::kMe || profile.variant == hw::MediaVariant::kMeAll) {
        EXPECT_EQ(profile.max_instances, 1);
      }
      Counts wanted{};
      wanted[static_cast<size_t>(p)] = static_cast<std::uint8_t>(profile.max_instances);
      std::optional<std::vector<Placed>> placed = s.Place(wanted);
      ASSERT_TRUE(placed.has_value());
      EXPECT_EQ(placed->size(), static_cast<size_t>(profile.max_instances));
      EXPECT_TRUE(s.Validate(*placed).ok());
      // The driver's own placement manages it too.
      EXPECT_TRUE(
          SomeDriverOrderWorks(s, std::vector<int>(static_cast<size_t>(profile.max_instances), p)));
      // One more never fits.
      wanted[static_cast<size_t>(p)] = static_cast<std::uint8_t>(profile.max_instances + 1);
      EXPECT_FALSE(s.Place(wanted).has_value());
    }
  }
}

TEST(MigPartedConfigs, AllOneGTenGbDependsOnTheModel) {
  // §5.1: all-1g.10gb is 7 instances on 80GB parts and 4 on A100-40GB (double-memory profile).
  EXPECT_EQ(ShapeOf("A100-40GB").mig().FindProfile("1g.10gb")->max_instances, 4);
  EXPECT_EQ(ShapeOf("A100-80GB").mig().FindProfile("1g.10gb")->max_instances, 7);
  EXPECT_EQ(ShapeOf("H100-80GB").mig().FindProfile("1g.10gb")->max_instances, 7);
}

}  // namespace
}  // namespace gpuslice::geometry
