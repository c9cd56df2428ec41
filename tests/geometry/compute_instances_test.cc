// Tests of compute-instance splits inside one GPU instance (gpuslice/geometry/compute_instances.h),
// against mig-facts.md §2.11.
#include "gpuslice/geometry/compute_instances.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpuslice/hw/catalog.h"
#include "test_util.h"

namespace gpuslice::geometry {
namespace {

using gpuslice::testing::Model;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

CiShape CiShapeOf(std::string_view model, std::string_view gi) {
  const hw::MigSpec& mig = *Model(model).mig;
  const hw::GiProfile* profile = mig.FindProfile(gi);
  if (profile == nullptr) {
    ADD_FAILURE() << model << " has no " << gi;
    std::abort();
  }
  return CiShape(mig, *profile);
}

int Ci(const CiShape& shape, std::string_view name) {
  const int index = shape.Find(name);
  EXPECT_GE(index, 0) << name;
  return index;
}

std::vector<std::uint8_t> Wanted(const CiShape& shape, const std::vector<std::string>& names) {
  std::vector<std::uint8_t> out;
  for (const std::string& name : names) out.push_back(static_cast<std::uint8_t>(Ci(shape, name)));
  return out;
}

CiPlaced C(const CiShape& shape, std::string_view name, int start) {
  return {static_cast<std::uint8_t>(Ci(shape, name)), static_cast<std::uint8_t>(start)};
}

// Names of a placement, "1c@0 2c@1".
std::string Show(const CiShape& shape, const std::vector<CiPlaced>& cis) {
  std::string text;
  for (const CiPlaced& ci : cis) {
    text +=
        (text.empty() ? "" : " ") + shape.profiles()[ci.ci].name + "@" + std::to_string(ci.start);
  }
  return text;
}

TEST(CiShape, A100ThreeSliceProfiles) {
  const CiShape s = CiShapeOf("A100-40GB", "3g.20gb");
  EXPECT_EQ(s.slices(), 3);
  EXPECT_EQ(s.gi().name, "3g.20gb");
  ASSERT_EQ(s.profiles().size(), 3u);
  EXPECT_EQ(Ci(s, "1c"), 0);
  EXPECT_EQ(Ci(s, "2c"), 1);
  EXPECT_EQ(Ci(s, "3c"), 2);
  EXPECT_EQ(s.Find("4c"), -1);
  EXPECT_EQ(s.Find("7c"), -1);
  EXPECT_EQ(s.DefaultIndex(), Ci(s, "3c"));  // -lcip marks 3c as the default ("2*")
  EXPECT_EQ(s.profiles()[static_cast<size_t>(s.DefaultIndex())].id, 2);
}

TEST(CiShape, DefaultCiPerGiSize) {
  // `-cgi -C` default CI IDs: 1g -> 0, 2g -> 1, 3g -> 2, 4g -> 3 (§2.11); 7g -> 7c (ID 4).
  struct Expected {
    const char* gi;
    const char* ci;
    int id;
  };
  for (const Expected& e :
       {Expected{"1g.5gb", "1c", 0}, Expected{"2g.10gb", "2c", 1}, Expected{"3g.20gb", "3c", 2},
        Expected{"4g.20gb", "4c", 3}, Expected{"7g.40gb", "7c", 4}, Expected{"1g.10gb", "1c", 0}}) {
    const CiShape s = CiShapeOf("A100-40GB", e.gi);
    ASSERT_GE(s.DefaultIndex(), 0) << e.gi;
    EXPECT_EQ(s.profiles()[static_cast<size_t>(s.DefaultIndex())].name, e.ci) << e.gi;
    EXPECT_EQ(s.profiles()[static_cast<size_t>(s.DefaultIndex())].id, e.id) << e.gi;
  }
  const CiShape rtx = CiShapeOf("RTX-PRO-6000-Blackwell", "2g.48gb");
  EXPECT_EQ(rtx.profiles()[static_cast<size_t>(rtx.DefaultIndex())].name, "2c");
}

TEST(CiShape, PlaceInThreeSliceGi) {
  const CiShape s = CiShapeOf("A100-40GB", "3g.20gb");
  std::optional<std::vector<CiPlaced>> three_1c = s.Place(Wanted(s, {"1c", "1c", "1c"}));
  ASSERT_TRUE(three_1c.has_value());
  EXPECT_THAT(*three_1c, ElementsAre(C(s, "1c", 0), C(s, "1c", 1), C(s, "1c", 2)));
  std::optional<std::vector<CiPlaced>> mixed = s.Place(Wanted(s, {"1c", "2c"}));
  ASSERT_TRUE(mixed.has_value());
  EXPECT_THAT(*mixed, ElementsAre(C(s, "2c", 0), C(s, "1c", 2))) << Show(s, *mixed);
  EXPECT_FALSE(s.Place(Wanted(s, {"2c", "2c"})).has_value());
  EXPECT_FALSE(s.Place(Wanted(s, {"3c", "1c"})).has_value());
  EXPECT_FALSE(s.Place(Wanted(s, {"1c", "1c", "1c", "1c"})).has_value());
  EXPECT_TRUE(s.Place(Wanted(s, {"3c"})).has_value());
  EXPECT_TRUE(s.Place(Wanted(s, {})).has_value());
  // An index past the table is rejected, not read.
  EXPECT_FALSE(s.Place(std::vector<std::uint8_t>{7}).has_value());
}

TEST(CiShape, PlaceInSevenSliceGi) {
  const CiShape s = CiShapeOf("H100-80GB", "7g.80gb");
  // 3c at {0,4}, 2c at {0,2,4}, 1c anywhere (§2.11).
  std::optional<std::vector<CiPlaced>> placed = s.Place(Wanted(s, {"1c", "3c", "3c"}));
  ASSERT_TRUE(placed.has_value());
  EXPECT_TRUE(!s.Validate(*placed).has_value()) << Show(s, *placed);
  EXPECT_TRUE(s.Place(Wanted(s, {"2c", "2c", "2c", "1c"})).has_value());
  EXPECT_FALSE(s.Place(Wanted(s, {"2c", "2c", "2c", "1c", "1c"})).has_value());
  EXPECT_FALSE(s.Place(Wanted(s, {"3c", "3c", "2c"})).has_value());
  EXPECT_FALSE(s.Place(Wanted(s, {"7c", "1c"})).has_value());
  EXPECT_TRUE(s.Place(Wanted(s, {"1c", "1c", "1c", "1c", "1c", "1c", "1c"})).has_value());
  // 4c + 3c: 4c only at 0 and 3c only at {0,4} -> 4c@0 + 3c@4.
  std::optional<std::vector<CiPlaced>> four_three = s.Place(Wanted(s, {"3c", "4c"}));
  ASSERT_TRUE(four_three.has_value());
  EXPECT_THAT(*four_three, ElementsAre(C(s, "4c", 0), C(s, "3c", 4)));
}

TEST(CiShape, ValidateCatchesOverlapCapAndStart) {
  const CiShape s = CiShapeOf("A100-40GB", "3g.20gb");
  EXPECT_FALSE(s.Validate(std::vector<CiPlaced>{C(s, "2c", 0), C(s, "1c", 2)}).has_value());
  EXPECT_FALSE(s.Validate(std::vector<CiPlaced>{}).has_value());

  const std::optional<std::string> overlap =
      s.Validate(std::vector<CiPlaced>{C(s, "2c", 0), C(s, "1c", 1)});
  ASSERT_TRUE(overlap.has_value());
  EXPECT_THAT(*overlap, AllOf(HasSubstr("overlap"), HasSubstr("1c.3g.20gb")));

  const std::optional<std::string> start = s.Validate(std::vector<CiPlaced>{C(s, "2c", 1)});
  ASSERT_TRUE(start.has_value());
  EXPECT_THAT(*start, AllOf(HasSubstr("start"), HasSubstr("2c.3g.20gb"), HasSubstr("1")));

  const std::optional<std::string> cap =
      s.Validate(std::vector<CiPlaced>{C(s, "1c", 0), C(s, "1c", 1), C(s, "1c", 2), C(s, "1c", 2)});
  ASSERT_TRUE(cap.has_value());
  EXPECT_THAT(*cap, AllOf(HasSubstr("cap"), HasSubstr("3")));

  EXPECT_TRUE(s.Validate(std::vector<CiPlaced>{C(s, "1c", 3)}).has_value());
  EXPECT_TRUE(s.Validate(std::vector<CiPlaced>{CiPlaced{9, 0}}).has_value());
}

TEST(CiShape, FreeCount) {
  const CiShape s = CiShapeOf("A100-40GB", "3g.20gb");
  // -lcip on an empty 3g GI (§2.11): 1c x3, 2c x1, 3c x1.
  EXPECT_EQ(s.FreeCount({}, Ci(s, "1c")), 3);
  EXPECT_EQ(s.FreeCount({}, Ci(s, "2c")), 1);
  EXPECT_EQ(s.FreeCount({}, Ci(s, "3c")), 1);
  const std::vector<CiPlaced> one = {C(s, "1c", 0)};
  EXPECT_EQ(s.FreeCount(one, Ci(s, "1c")), 2);
  EXPECT_EQ(s.FreeCount(one, Ci(s, "2c")), 0);  // 2c only at 0
  EXPECT_EQ(s.FreeCount(one, Ci(s, "3c")), 0);
  const std::vector<CiPlaced> two = {C(s, "2c", 0)};
  EXPECT_EQ(s.FreeCount(two, Ci(s, "1c")), 1);
  EXPECT_EQ(s.FreeCount(two, Ci(s, "2c")), 0);
  EXPECT_EQ(s.FreeCount({}, -1), 0);
  EXPECT_EQ(s.FreeCount({}, 3), 0);

  const CiShape four = CiShapeOf("A100-40GB", "4g.20gb");
  const std::vector<CiPlaced> middle = {C(four, "1c", 1)};
  EXPECT_EQ(four.FreeCount(middle, Ci(four, "2c")), 1);  // 2c at {0,2}: only 2 is free
  EXPECT_EQ(four.FreeCount(middle, Ci(four, "1c")), 3);
  EXPECT_EQ(four.FreeCount(middle, Ci(four, "4c")), 0);
}

// The CI caps of the built-in table never bind below what fits, so test the cap with a user table
// in which a 2-slice GI holds one 1c only.
TEST(CiShape, CapBindsBelowGeometricCapacity) {
  const std::string yaml = gpuslice::testing::TestMigGpuYaml(
      "CI-CAP-GPU", "0xABD2", 2, 2, 16384,
      R"(    - {name: 2g.16gb, smi_id: 0, nvml_const: 2_SLICE, compute_slices: 2, placement_size: 2, memory_mib: 16256, sms: 100,
       engines: {ce: 2, dec: 1, enc: 0, jpeg: 1, ofa: 1}, max_instances: 1, starts: [0], confidence: unconfirmed}
)",
      R"(compute_instance_profiles:
  "2":
    - {name: 1c, id: 0, slices: 1, max: 1, starts: [0, 1], confidence: unconfirmed}
    - {name: 2c, id: 1, slices: 2, max: 1, starts: [0], default: true, confidence: unconfirmed}
)");
  absl::StatusOr<hw::Catalog> catalog = hw::Catalog::FromYaml(yaml, "ci.yaml");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  const hw::MigSpec& mig = *catalog->models()[0].mig;
  const CiShape s(mig, mig.profiles[0]);
  EXPECT_EQ(s.FreeCount({}, Ci(s, "1c")), 1);
  EXPECT_EQ(s.FreeCount(std::vector<CiPlaced>{C(s, "1c", 1)}, Ci(s, "1c")), 0);
  EXPECT_FALSE(s.Place(Wanted(s, {"1c", "1c"})).has_value());
  EXPECT_TRUE(s.Place(Wanted(s, {"1c"})).has_value());
  const std::optional<std::string> cap =
      s.Validate(std::vector<CiPlaced>{C(s, "1c", 0), C(s, "1c", 1)});
  ASSERT_TRUE(cap.has_value());
  EXPECT_THAT(*cap, HasSubstr("cap"));
}

TEST(CiShape, DeviceNames) {
  const CiShape s = CiShapeOf("A100-40GB", "3g.20gb");
  EXPECT_EQ(s.DeviceName(Ci(s, "1c")), "1c.3g.20gb");
  EXPECT_EQ(s.DeviceName(Ci(s, "2c")), "2c.3g.20gb");
  EXPECT_EQ(s.DeviceName(Ci(s, "3c")), "3g.20gb");  // one full CI is just the GI name (§2.11)
  const CiShape h = CiShapeOf("H100-80GB", "7g.80gb");
  EXPECT_EQ(h.DeviceName(Ci(h, "7c")), "7g.80gb");
  EXPECT_EQ(h.DeviceName(Ci(h, "4c")), "4c.7g.80gb");
  const CiShape one = CiShapeOf("H100-80GB", "1g.10gb+me");
  EXPECT_EQ(one.DeviceName(Ci(one, "1c")), "1g.10gb+me");
}

TEST(SplitCiDeviceName, Splits) {
  EXPECT_EQ(SplitCiDeviceName("1c.3g.40gb"),
            std::make_pair(std::string("1c"), std::string("3g.40gb")));
  EXPECT_EQ(SplitCiDeviceName("2c.7g.80gb+me"),
            std::make_pair(std::string("2c"), std::string("7g.80gb+me")));
  EXPECT_EQ(SplitCiDeviceName("3g.40gb"), std::nullopt);
  EXPECT_EQ(SplitCiDeviceName("c.3g.40gb"), std::nullopt);
  EXPECT_EQ(SplitCiDeviceName("1c"), std::nullopt);
  EXPECT_EQ(SplitCiDeviceName(""), std::nullopt);
  EXPECT_EQ(SplitCiDeviceName("MIG 1c.3g.40gb"), std::nullopt);
}

}  // namespace
}  // namespace gpuslice::geometry
