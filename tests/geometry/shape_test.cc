// Tests of the MIG layout rules (gpuslice/geometry/shape.h) against mig-facts.md §0, §2, §3 and §6.
#include "gpuslice/geometry/shape.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "test_util.h"

namespace gpuslice::geometry {
namespace {

using gpuslice::testing::At;
using gpuslice::testing::Multiset;
using gpuslice::testing::P;
using gpuslice::testing::ShapeOf;
using gpuslice::testing::Show;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<ViolationKind> Kinds(const std::vector<Violation>& violations) {
  std::vector<ViolationKind> kinds;
  for (const Violation& v : violations) kinds.push_back(v.kind);
  return kinds;
}

bool HasKind(const std::vector<Violation>& violations, ViolationKind kind) {
  return std::any_of(violations.begin(), violations.end(),
                     [kind](const Violation& v) { return v.kind == kind; });
}

// Validate and AllViolations must agree on validity and Validate's kind must be among all kinds.
void ExpectInvalid(const Shape& shape, const std::vector<Placed>& layout, ViolationKind kind,
                   const Rules& rules = {}) {
  SCOPED_TRACE(shape.model().id + ": " + Show(shape, layout));
  const Violation v = shape.Validate(layout, rules);
  EXPECT_EQ(v.kind, kind);
  EXPECT_FALSE(v.ok());
  const std::vector<Violation> all = shape.AllViolations(layout, rules);
  EXPECT_TRUE(HasKind(all, kind));
}

void ExpectValid(const Shape& shape, const std::vector<Placed>& layout, const Rules& rules = {}) {
  SCOPED_TRACE(shape.model().id + ": " + Show(shape, layout));
  const Violation v = shape.Validate(layout, rules);
  EXPECT_TRUE(v.ok()) << "kind " << static_cast<int>(v.kind) << ": "
                      << Describe(shape, layout, v, rules);
  EXPECT_THAT(shape.AllViolations(layout, rules), IsEmpty());
}

// ------------------------------------------------------------------------------------------------
// Basics.

TEST(Shape, GeometryOfA100) {
  const Shape& s = ShapeOf("A100-40GB");
  EXPECT_EQ(s.units(), 8);
  EXPECT_EQ(s.all_units(), 0xFFu);
  EXPECT_EQ(s.profile_count(), 7);
  EXPECT_EQ(s.placement_size(P(s, "3g.20gb")), 4);
  EXPECT_EQ(s.compute_slices(P(s, "3g.20gb")), 3);
  EXPECT_EQ(s.MaskOf(P(s, "3g.20gb"), 4), 0xF0u);
  EXPECT_EQ(s.MaskOf(P(s, "1g.10gb"), 6), 0xC0u);
  EXPECT_TRUE(s.StartAllowed(P(s, "1g.5gb"), 6));
  EXPECT_FALSE(s.StartAllowed(P(s, "1g.5gb"), 7));  // slot 7 is never a 1g start (§0.2)
  EXPECT_FALSE(s.StartAllowed(P(s, "3g.20gb"), 2));
  EXPECT_FALSE(s.StartAllowed(P(s, "1g.10gb"), 1));
  EXPECT_FALSE(s.StartAllowed(P(s, "1g.5gb"), -1));
  EXPECT_FALSE(s.StartAllowed(P(s, "1g.5gb"), 8));
}

TEST(Shape, GeometryOfRtxPro) {
  const Shape& s = ShapeOf("RTX-PRO-6000-Blackwell");
  EXPECT_EQ(s.units(), 12);
  EXPECT_EQ(s.all_units(), 0xFFFu);
  EXPECT_EQ(s.MaskOf(P(s, "1g.24gb"), 3), 0x38u);
  EXPECT_TRUE(s.StartAllowed(P(s, "2g.48gb"), 6));
  EXPECT_FALSE(s.StartAllowed(P(s, "2g.48gb"), 3));
}

TEST(Shape, EmptyLayoutIsValid) {
  for (const std::string& id : gpuslice::testing::MigModelIds()) ExpectValid(ShapeOf(id), {});
}

TEST(Shape, OccupancyAndCounts) {
  const Shape& s = ShapeOf("A100-40GB");
  const std::vector<Placed> layout = {At(s, "3g.20gb", 4), At(s, "1g.5gb", 0), At(s, "1g.5gb", 1)};
  const Occupancy occ = s.OccupancyOf(layout);
  EXPECT_EQ(occ.used, 0xF3u);
  EXPECT_EQ(occ.instances, 3);
  EXPECT_EQ(occ.count[static_cast<size_t>(P(s, "1g.5gb"))], 2);
  EXPECT_EQ(occ.three_slice, 1);
  EXPECT_EQ(s.CountsOf(layout), Multiset(s, {"1g.5gb", "3g.20gb", "1g.5gb"}));
  Occupancy built;
  for (const Placed& p : layout) {
    ASSERT_TRUE(s.CanAdd(built, p.profile, p.start, {}).ok());
    s.Add(built, p.profile, p.start);
  }
  EXPECT_EQ(built.used, occ.used);
  s.Remove(built, P(s, "3g.20gb"), 4);
  EXPECT_EQ(built.used, 0x03u);
  EXPECT_EQ(built.three_slice, 0);
  EXPECT_EQ(built.instances, 2);
}

// ------------------------------------------------------------------------------------------------
// Validate / AllViolations: one test per rule (mig-facts §3.1).

TEST(Validate, StartNotAllowed) {
  const Shape& s = ShapeOf("A100-40GB");
  ExpectInvalid(s, {At(s, "1g.5gb", 7)}, ViolationKind::kStartNotAllowed);
  ExpectInvalid(s, {At(s, "3g.20gb", 2)}, ViolationKind::kStartNotAllowed);
  ExpectInvalid(s, {At(s, "2g.10gb", 6)}, ViolationKind::kStartNotAllowed);
  ExpectInvalid(s, {At(s, "4g.20gb", 4)}, ViolationKind::kStartNotAllowed);
  ExpectInvalid(s, {At(s, "1g.10gb", 3)}, ViolationKind::kStartNotAllowed);
  ExpectInvalid(s, {At(s, "1g.5gb", 200)}, ViolationKind::kStartNotAllowed);
  const std::vector<Placed> layout = {At(s, "1g.5gb", 0), At(s, "1g.5gb", 7)};
  const Violation v = s.Validate(layout);
  EXPECT_EQ(v.instance, 1);
  EXPECT_EQ(v.profile, P(s, "1g.5gb"));
  const std::string text = Describe(s, layout, v);
  EXPECT_THAT(text, AllOf(HasSubstr("1g.5gb"), HasSubstr("7"), HasSubstr("{0,1,2,3,4,5,6}:1")));
  ExpectInvalid(ShapeOf("RTX-PRO-6000-Blackwell"),
                {At(ShapeOf("RTX-PRO-6000-Blackwell"), "1g.24gb", 1)},
                ViolationKind::kStartNotAllowed);
}

TEST(Validate, Overlap) {
  const Shape& s = ShapeOf("A100-40GB");
  const std::vector<Placed> layout = {At(s, "3g.20gb", 0), At(s, "1g.5gb", 1)};
  ExpectInvalid(s, layout, ViolationKind::kOverlap);
  const Violation v = s.Validate(layout);
  EXPECT_EQ(v.instance, 1);
  EXPECT_EQ(v.other, 0);
  EXPECT_THAT(Describe(s, layout, v), AllOf(HasSubstr("3g.20gb@0"), HasSubstr("1g.5gb@1")));
  ExpectInvalid(s, {At(s, "7g.40gb", 0), At(s, "1g.5gb", 6)}, ViolationKind::kOverlap);
  ExpectInvalid(s, {At(s, "1g.10gb", 2), At(s, "1g.5gb", 3)}, ViolationKind::kOverlap);
  ExpectInvalid(s, {At(s, "1g.5gb", 3), At(s, "1g.5gb", 3)}, ViolationKind::kOverlap);
  // Touching is fine.
  ExpectValid(s, {At(s, "3g.20gb", 0), At(s, "3g.20gb", 4)});
  ExpectValid(s, {At(s, "1g.10gb", 0), At(s, "2g.10gb", 2), At(s, "3g.20gb", 4)});
}

TEST(Validate, InstanceCap) {
  const Shape& h100 = ShapeOf("H100-80GB");
  const std::vector<Placed> two_4g = {At(h100, "4g.40gb", 0), At(h100, "4g.40gb", 0)};
  ExpectInvalid(h100, two_4g, ViolationKind::kInstanceCap);
  const Violation v = h100.Validate(two_4g);
  EXPECT_EQ(v.profile, P(h100, "4g.40gb"));
  EXPECT_THAT(Describe(h100, two_4g, v), AllOf(HasSubstr("4g.40gb"), HasSubstr("H100-80GB"),
                                               HasSubstr("at most 1"), HasSubstr("2")));
  // +me profiles: one instance (§3.1).
  const Shape& a100 = ShapeOf("A100-40GB");
  ExpectInvalid(a100, {At(a100, "1g.5gb+me", 0), At(a100, "1g.5gb+me", 1)},
                ViolationKind::kInstanceCap);
  // A100-40GB's 1g.10gb is the double-memory profile with max 4 (§0.6); 4 fit exactly.
  ExpectValid(a100, {At(a100, "1g.10gb", 0), At(a100, "1g.10gb", 2), At(a100, "1g.10gb", 4),
                     At(a100, "1g.10gb", 6)});
  // The multiset rule is reported before the geometric one.
  EXPECT_EQ(h100.Validate(std::vector<Placed>{At(h100, "4g.40gb", 0), At(h100, "4g.40gb", 0),
                                              At(h100, "1g.10gb", 7)})
                .kind,
            ViolationKind::kInstanceCap);
}

TEST(Validate, MediaExclusiveOnRtxPro) {
  const Shape& s = ShapeOf("RTX-PRO-6000-Blackwell");
  const std::vector<Placed> with_plain = {At(s, "1g.24gb+me.all", 0), At(s, "1g.24gb", 3)};
  ExpectInvalid(s, with_plain, ViolationKind::kMediaExclusive);
  EXPECT_THAT(Describe(s, with_plain, s.Validate(with_plain)), HasSubstr("+me.all"));
  const std::vector<Violation> all = s.AllViolations(with_plain);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].instance, 0);
  EXPECT_EQ(all[0].other, 1);
  EXPECT_THAT(Describe(s, with_plain, all[0]),
              AllOf(HasSubstr("1g.24gb+me.all@0"), HasSubstr("1g.24gb@3")));
  // Order does not matter.
  ExpectInvalid(s, {At(s, "1g.24gb", 3), At(s, "1g.24gb+me.all", 0)},
                ViolationKind::kMediaExclusive);
  // Graphics and +me profiles use media engines too.
  ExpectInvalid(s, {At(s, "1g.24gb+me.all", 0), At(s, "1g.24gb+gfx", 3)},
                ViolationKind::kMediaExclusive);
  ExpectInvalid(s, {At(s, "2g.48gb+me.all", 0), At(s, "2g.48gb", 6)},
                ViolationKind::kMediaExclusive);
  // Two +me.all instances.
  ExpectInvalid(s, {At(s, "1g.24gb+me.all", 0), At(s, "2g.48gb+me.all", 6)},
                ViolationKind::kMediaExclusive);
  // Only -me profiles may coexist with +me.all (NVML header).
  ExpectValid(s, {At(s, "1g.24gb+me.all", 0), At(s, "1g.24gb-me", 3), At(s, "1g.24gb-me", 6),
                  At(s, "1g.24gb-me", 9)});
  ExpectValid(s, {At(s, "1g.24gb-me", 0), At(s, "1g.24gb+me.all", 3), At(s, "2g.48gb-me", 6)});
  ExpectValid(s, {At(s, "2g.48gb+me.all", 0), At(s, "2g.48gb-me", 6)});
  // -me and plain profiles mix freely without a +me.all.
  ExpectValid(s, {At(s, "1g.24gb", 0), At(s, "1g.24gb-me", 3), At(s, "2g.48gb+gfx", 6)});
}

TEST(Validate, OfaOnA30) {
  const Shape& s = ShapeOf("A30-24GB");
  const std::vector<Placed> layout = {At(s, "1g.6gb+me", 0), At(s, "2g.12gb+me", 2)};
  ExpectInvalid(s, layout, ViolationKind::kMediaEngines);
  const std::vector<Violation> all = s.AllViolations(layout);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].instance, 1);
  EXPECT_EQ(all[0].other, 0);
  EXPECT_THAT(Describe(s, layout, all[0]),
              AllOf(HasSubstr("1g.6gb+me@0"), HasSubstr("2g.12gb+me@2"), HasSubstr("OFA")));
  EXPECT_THAT(Describe(s, layout, s.Validate(layout)), HasSubstr("OFA"));
  // Each alone, beside plain profiles, is fine.
  ExpectValid(s, {At(s, "1g.6gb+me", 0), At(s, "1g.6gb", 1), At(s, "2g.12gb", 2)});
  ExpectValid(s, {At(s, "1g.6gb", 0), At(s, "1g.6gb", 1), At(s, "2g.12gb+me", 2)});
}

TEST(Validate, DriverPairingBeforeR510) {
  const Shape& s = ShapeOf("A100-40GB");
  const std::vector<Placed> layout = {At(s, "4g.20gb", 0), At(s, "3g.20gb", 4)};
  ExpectInvalid(s, layout, ViolationKind::kDriverPairing, Rules{470});
  const std::vector<Violation> all = s.AllViolations(layout, Rules{470});
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].instance, 1);
  EXPECT_EQ(all[0].other, 0);
  EXPECT_THAT(Describe(s, layout, all[0], Rules{470}),
              AllOf(HasSubstr("4g.20gb@0"), HasSubstr("3g.20gb@4"), HasSubstr("R510")));
  ExpectInvalid(s, {At(s, "3g.20gb", 4), At(s, "4g.20gb", 0)}, ViolationKind::kDriverPairing,
                Rules{509});
  ExpectValid(s, layout, Rules{510});
  ExpectValid(s, layout, Rules{});
  // 3g + 3g is fine on any driver.
  ExpectValid(s, {At(s, "3g.20gb", 0), At(s, "3g.20gb", 4)}, Rules{450});
}

TEST(Validate, ProfileTooNew) {
  const Shape& s = ShapeOf("A100-40GB");
  const std::vector<Placed> layout = {At(s, "1g.10gb", 0)};  // ID 15, R525+ (§2.1)
  ExpectInvalid(s, layout, ViolationKind::kProfileTooNew, Rules{470});
  EXPECT_THAT(Describe(s, layout, s.Validate(layout, Rules{470}), Rules{470}),
              AllOf(HasSubstr("1g.10gb"), HasSubstr("R525"), HasSubstr("R470")));
  ExpectInvalid(s, layout, ViolationKind::kProfileTooNew, Rules{520});
  ExpectValid(s, layout, Rules{525});
  ExpectValid(s, layout, Rules{});
  ExpectInvalid(s, {At(s, "1g.5gb+me", 0)}, ViolationKind::kProfileTooNew, Rules{460});
  ExpectValid(s, {At(s, "1g.5gb+me", 0)}, Rules{470});
  // MIG itself needs R450 on A100 and R525 on H100 (§7).
  ExpectInvalid(s, {At(s, "1g.5gb", 0)}, ViolationKind::kProfileTooNew, Rules{440});
  const Shape& h100 = ShapeOf("H100-80GB");
  const std::vector<Placed> h = {At(h100, "7g.80gb", 0)};
  ExpectInvalid(h100, h, ViolationKind::kProfileTooNew, Rules{520});
  EXPECT_THAT(Describe(h100, h, h100.Validate(h, Rules{520}), Rules{520}), HasSubstr("R525"));
  ExpectValid(h100, h, Rules{525});
}

TEST(Validate, TooManyInstances) {
  const Shape& s = ShapeOf("A100-40GB");
  std::vector<Placed> layout(17, At(s, "1g.5gb", 0));
  EXPECT_EQ(s.Validate(layout).kind, ViolationKind::kTooManyInstances);
  EXPECT_TRUE(HasKind(s.AllViolations(layout), ViolationKind::kTooManyInstances));
}

TEST(AllViolations, ReportsEveryDistinctProblem) {
  const Shape& s = ShapeOf("A100-40GB");
  // 1g@7 (bad start), 3g@0 and 1g@1 (overlap), two +me (cap and OFA), 4g beside 3g on R470.
  const std::vector<Placed> layout = {At(s, "1g.5gb", 7), At(s, "3g.20gb", 0), At(s, "1g.5gb", 1)};
  const std::vector<Violation> all = s.AllViolations(layout);
  EXPECT_THAT(Kinds(all), ElementsAre(ViolationKind::kStartNotAllowed, ViolationKind::kOverlap));
  EXPECT_EQ(all[0].instance, 0);
  EXPECT_EQ(all[1].instance, 2);
  EXPECT_EQ(all[1].other, 1);
  // Multiset problems come first in Validate.
  EXPECT_EQ(s.Validate(layout).kind, ViolationKind::kStartNotAllowed);

  const std::vector<Placed> many = {At(s, "1g.5gb+me", 0), At(s, "1g.5gb+me", 0),
                                    At(s, "4g.20gb", 0), At(s, "3g.20gb", 4)};
  const std::vector<Violation> many_all = s.AllViolations(many, Rules{470});
  EXPECT_TRUE(HasKind(many_all, ViolationKind::kInstanceCap));
  EXPECT_TRUE(HasKind(many_all, ViolationKind::kMediaEngines));
  EXPECT_TRUE(HasKind(many_all, ViolationKind::kDriverPairing));
  EXPECT_TRUE(HasKind(many_all, ViolationKind::kProfileTooNew) == false);
  EXPECT_TRUE(HasKind(many_all, ViolationKind::kOverlap));
  for (const Violation& v : many_all) {
    EXPECT_FALSE(Describe(s, many, v, Rules{470}).empty());
  }
}

// shape.h: only the OFA is budgeted; JPEG counts are not. No built-in model has more JPEG users
// than JPEG engines without also over-committing the OFA, so use a user catalog.
TEST(Validate, JpegEnginesAreNotBudgetedOnlyTheOfaIs) {
  const std::string yaml = gpuslice::testing::TestMigGpuYaml(
      "JPEG-GPU", "0xABD0", 2, 2, 16384,
      R"(    - {name: 1g.8gb, smi_id: 19, nvml_const: 1_SLICE, compute_slices: 1, placement_size: 1, memory_mib: 8128, sms: 50,
       engines: {ce: 1, dec: 1, enc: 0, jpeg: 1, ofa: 0}, max_instances: 2, starts: [0, 1], confidence: unconfirmed}
    - {name: 2g.16gb, smi_id: 0, nvml_const: 2_SLICE, compute_slices: 2, placement_size: 2, memory_mib: 16256, sms: 100,
       engines: {ce: 2, dec: 2, enc: 0, jpeg: 1, ofa: 1}, max_instances: 1, starts: [0], confidence: unconfirmed}
)");
  absl::StatusOr<hw::Catalog> catalog = hw::Catalog::FromYaml(yaml, "jpeg.yaml");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  const Shape s(catalog->models()[0]);
  // shape.h: only the OFA is budgeted; JPEG counts (estimated on several models) are not.
  const std::vector<Placed> two = {At(0, 0),
                                   At(0, 1)};  // 2 JPEG users, the GPU's full profile has 1
  EXPECT_TRUE(s.Validate(two).ok());
  EXPECT_EQ(s.FreeCount(s.OccupancyOf(std::vector<Placed>{At(0, 0)}), 0), 1);
}

// In the built-in data every instance cap equals what fits geometrically (or the OFA limit), so the
// cap rule on its own needs a user catalog: 1g capped at 2 and 2g at 1 on a 4-unit grid.
TEST(InstanceCap, BindsBelowGeometricCapacity) {
  const std::string yaml = gpuslice::testing::TestMigGpuYaml(
      "CAP-GPU", "0xABD1", 4, 4, 32768,
      R"(    - {name: 1g.8gb, smi_id: 19, nvml_const: 1_SLICE, compute_slices: 1, placement_size: 1, memory_mib: 8128, sms: 25,
       engines: {ce: 1, dec: 0, enc: 0, jpeg: 0, ofa: 0}, max_instances: 2, starts: [0, 1, 2, 3], confidence: unconfirmed}
    - {name: 2g.16gb, smi_id: 14, nvml_const: 2_SLICE, compute_slices: 2, placement_size: 2, memory_mib: 16256, sms: 50,
       engines: {ce: 2, dec: 0, enc: 0, jpeg: 0, ofa: 0}, max_instances: 1, starts: [0, 2], confidence: unconfirmed}
    - {name: 4g.32gb, smi_id: 0, nvml_const: 4_SLICE, compute_slices: 4, placement_size: 4, memory_mib: 32640, sms: 100,
       engines: {ce: 4, dec: 1, enc: 0, jpeg: 1, ofa: 1}, max_instances: 1, starts: [0], confidence: unconfirmed}
)");
  absl::StatusOr<hw::Catalog> catalog = hw::Catalog::FromYaml(yaml, "cap.yaml");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  const Shape s(catalog->models()[0]);
  const int one = P(s, "1g.8gb");
  const int two = P(s, "2g.16gb");
  EXPECT_EQ(s.FreeCount(Occupancy{}, one), 2);
  EXPECT_EQ(s.FreeCount(Occupancy{}, two), 1);
  EXPECT_EQ(s.FreeCount(s.OccupancyOf(std::vector<Placed>{At(one, 3)}), one), 1);
  ExpectInvalid(s, {At(one, 0), At(one, 1), At(one, 2)}, ViolationKind::kInstanceCap);
  ExpectInvalid(s, {At(two, 0), At(two, 2)}, ViolationKind::kInstanceCap);
  ExpectValid(s, {At(one, 0), At(one, 1), At(two, 2)});
  Counts three_ones{};
  three_ones[static_cast<size_t>(one)] = 3;
  EXPECT_FALSE(s.Place(three_ones).has_value());
  Counts two_twos{};
  two_twos[static_cast<size_t>(two)] = 2;
  EXPECT_FALSE(s.Place(two_twos).has_value());
  Occupancy occ;
  s.Add(occ, one, 0);
  s.Add(occ, one, 1);
  EXPECT_EQ(s.CanAdd(occ, one, 2, {}).kind, ViolationKind::kInstanceCap);
  EXPECT_EQ(s.DefaultStart(occ, one), -1);
}

// ------------------------------------------------------------------------------------------------
// CanAdd / CanAddAnywhere.

TEST(CanAdd, ReportsTheForbiddingRule) {
  const Shape& s = ShapeOf("A100-40GB");
  Occupancy occ;
  s.Add(occ, P(s, "3g.20gb"), 4);
  EXPECT_TRUE(s.CanAdd(occ, P(s, "1g.5gb"), 0, {}).ok());
  EXPECT_EQ(s.CanAdd(occ, P(s, "1g.5gb"), 5, {}).kind, ViolationKind::kOverlap);
  EXPECT_EQ(s.CanAdd(occ, P(s, "1g.5gb"), 7, {}).kind, ViolationKind::kStartNotAllowed);
  EXPECT_EQ(s.CanAdd(occ, P(s, "4g.20gb"), 0, Rules{470}).kind, ViolationKind::kDriverPairing);
  EXPECT_TRUE(s.CanAdd(occ, P(s, "4g.20gb"), 0, {}).ok());
  EXPECT_EQ(s.CanAddAnywhere(occ, P(s, "1g.10gb"), Rules{470}).kind, ViolationKind::kProfileTooNew);
  s.Add(occ, P(s, "1g.5gb+me"), 0);
  EXPECT_EQ(s.CanAddAnywhere(occ, P(s, "1g.5gb+me"), {}).kind, ViolationKind::kInstanceCap);
}

// ------------------------------------------------------------------------------------------------
// FreeCount: "Free" of `nvidia-smi mig -lgip`.

TEST(FreeCount, EmptyGpuEqualsInstanceCounts) {
  // On an empty GPU -lgip shows Free == Total (§6: "MIG 1g.10gb 19 7/7").
  for (const std::string& id : gpuslice::testing::MigModelIds()) {
    const Shape& s = ShapeOf(id);
    for (int p = 0; p < s.profile_count(); ++p) {
      EXPECT_EQ(s.FreeCount(Occupancy{}, p), s.profile(p).max_instances)
          << id << " " << s.profile(p).name;
    }
  }
}

TEST(FreeCount, AfterA100ThreeSliceInstance) {
  const Shape& s = ShapeOf("A100-40GB");
  const Occupancy occ = s.OccupancyOf(std::vector<Placed>{At(s, "3g.20gb", 4)});
  // mig-facts §6 -lgip example: after one 3g, 1g shows 4/7, 3g 1/2, 4g 0/1. The 4g count is 0 only
  // before R510: from R510 on, 4g@0 beside 3g@4 is a valid layout (§3.1, §3.2 #2).
  for (const Rules& rules : {Rules{470}, Rules{}}) {
    SCOPED_TRACE(rules.driver_branch);
    EXPECT_EQ(s.FreeCount(occ, P(s, "1g.5gb"), rules), 4);
    EXPECT_EQ(s.FreeCount(occ, P(s, "3g.20gb"), rules), 1);
    EXPECT_EQ(s.FreeCount(occ, P(s, "7g.40gb"), rules), 0);
    EXPECT_EQ(s.FreeCount(occ, P(s, "2g.10gb"), rules), 2);
  }
  EXPECT_EQ(s.FreeCount(occ, P(s, "4g.20gb"), Rules{470}), 0);
  EXPECT_EQ(s.FreeCount(occ, P(s, "4g.20gb"), Rules{}), 1);
  EXPECT_EQ(s.FreeCount(occ, P(s, "1g.10gb"), Rules{}), 2);
  EXPECT_EQ(s.FreeCount(occ, P(s, "1g.10gb"), Rules{470}), 0);  // profile needs R525
}

TEST(FreeCount, MediaRules) {
  const Shape& a100 = ShapeOf("A100-40GB");
  const Occupancy me = a100.OccupancyOf(std::vector<Placed>{At(a100, "1g.5gb+me", 0)});
  EXPECT_EQ(a100.FreeCount(me, P(a100, "1g.5gb+me")), 0);
  EXPECT_EQ(a100.FreeCount(me, P(a100, "1g.5gb")), 6);
  EXPECT_EQ(a100.FreeCount(me, P(a100, "7g.40gb")), 0);

  const Shape& a30 = ShapeOf("A30-24GB");
  const Occupancy a30_me = a30.OccupancyOf(std::vector<Placed>{At(a30, "1g.6gb+me", 0)});
  EXPECT_EQ(a30.FreeCount(a30_me, P(a30, "2g.12gb+me")), 0);  // single OFA
  EXPECT_EQ(a30.FreeCount(a30_me, P(a30, "2g.12gb")), 1);
  EXPECT_EQ(a30.FreeCount(a30_me, P(a30, "1g.6gb")), 3);

  const Shape& rtx = ShapeOf("RTX-PRO-6000-Blackwell");
  const Occupancy all = rtx.OccupancyOf(std::vector<Placed>{At(rtx, "1g.24gb+me.all", 0)});
  EXPECT_EQ(rtx.FreeCount(all, P(rtx, "1g.24gb")), 0);
  EXPECT_EQ(rtx.FreeCount(all, P(rtx, "1g.24gb+gfx")), 0);
  EXPECT_EQ(rtx.FreeCount(all, P(rtx, "2g.48gb")), 0);
  EXPECT_EQ(rtx.FreeCount(all, P(rtx, "1g.24gb-me")), 3);
  EXPECT_EQ(rtx.FreeCount(all, P(rtx, "2g.48gb-me")), 1);
  EXPECT_EQ(rtx.FreeCount(all, P(rtx, "2g.48gb+me.all")), 0);
  const Occupancy plain = rtx.OccupancyOf(std::vector<Placed>{At(rtx, "1g.24gb-me", 0)});
  EXPECT_EQ(rtx.FreeCount(plain, P(rtx, "1g.24gb+me.all")), 1);
  const Occupancy media = rtx.OccupancyOf(std::vector<Placed>{At(rtx, "1g.24gb", 0)});
  EXPECT_EQ(rtx.FreeCount(media, P(rtx, "1g.24gb+me.all")), 0);
}

TEST(FreeCount, FragmentedA100) {
  const Shape& s = ShapeOf("A100-40GB");
  // 1g at 1, 3 and 5 leave slots 0, 2, 4, 6: four 1g, no 2g (starts 0/2/4 all blocked), no 3g.
  const Occupancy occ = s.OccupancyOf(
      std::vector<Placed>{At(s, "1g.5gb", 1), At(s, "1g.5gb", 3), At(s, "1g.5gb", 5)});
  EXPECT_EQ(s.FreeCount(occ, P(s, "1g.5gb")), 4);
  EXPECT_EQ(s.FreeCount(occ, P(s, "2g.10gb")), 0);
  EXPECT_EQ(s.FreeCount(occ, P(s, "1g.10gb")), 1);  // only {6,7}
  EXPECT_EQ(s.FreeCount(occ, P(s, "3g.20gb")), 0);
}

// ------------------------------------------------------------------------------------------------
// DefaultStart: the driver's placement without an explicit start (mig-facts §0.8).

TEST(DefaultStart, A100OneSliceOrder) {
  const Shape& s = ShapeOf("A100-40GB");
  Occupancy occ;
  std::vector<int> starts;
  for (int i = 0; i < 8; ++i) {
    const int start = s.DefaultStart(occ, P(s, "1g.5gb"));
    starts.push_back(start);
    if (start < 0) break;
    s.Add(occ, P(s, "1g.5gb"), start);
  }
  EXPECT_THAT(starts, ElementsAre(6, 4, 5, 0, 1, 2, 3, -1));
}

TEST(DefaultStart, A100ThreeSliceLandsOnFourFirst) {
  const Shape& s = ShapeOf("A100-40GB");
  Occupancy occ;
  EXPECT_EQ(s.DefaultStart(occ, P(s, "3g.20gb")), 4);
  s.Add(occ, P(s, "3g.20gb"), 4);
  EXPECT_EQ(s.DefaultStart(occ, P(s, "3g.20gb")), 0);
  EXPECT_EQ(s.DefaultStart(occ, P(s, "1g.5gb")), 0);  // 6, 4, 5 are taken
  s.Add(occ, P(s, "3g.20gb"), 0);
  EXPECT_EQ(s.DefaultStart(occ, P(s, "1g.5gb")), -1);
}

TEST(DefaultStart, KnownIssueOrder) {
  // "-cgi 19,19,14,9 fails with Insufficient Resources while -cgi 9,19,14,19 succeeds" (§0.8).
  const Shape& s = ShapeOf("A100-40GB");
  auto create = [&](const std::vector<const char*>& names) {
    Occupancy occ;
    for (const char* name : names) {
      const int start = s.DefaultStart(occ, P(s, name));
      if (start < 0) return false;
      s.Add(occ, P(s, name), start);
    }
    return true;
  };
  EXPECT_FALSE(create({"1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"}));
  EXPECT_TRUE(create({"3g.20gb", "1g.5gb", "2g.10gb", "1g.5gb"}));
}

TEST(DefaultStart, H100NvlAscending) {
  // §2.5: -cgi 9,15,19 -> 3g@0, 1g.24gb@4, 1g.12gb@6.
  const Shape& s = ShapeOf("H100-NVL-94GB");
  Occupancy occ;
  EXPECT_EQ(s.DefaultStart(occ, P(s, "3g.47gb")), 0);
  s.Add(occ, P(s, "3g.47gb"), 0);
  EXPECT_EQ(s.DefaultStart(occ, P(s, "1g.24gb")), 4);
  s.Add(occ, P(s, "1g.24gb"), 4);
  EXPECT_EQ(s.DefaultStart(occ, P(s, "1g.12gb")), 6);
}

TEST(DefaultStart, RespectsRules) {
  const Shape& s = ShapeOf("A100-40GB");
  Occupancy occ;
  s.Add(occ, P(s, "3g.20gb"), 4);
  EXPECT_EQ(s.DefaultStart(occ, P(s, "4g.20gb"), Rules{470}), -1);
  EXPECT_EQ(s.DefaultStart(occ, P(s, "4g.20gb")), 0);
  EXPECT_EQ(s.DefaultStart(Occupancy{}, P(s, "1g.10gb"), Rules{470}), -1);
}

// ------------------------------------------------------------------------------------------------
// GpuInstanceId: the buddy-tree ids observed on hardware (§0.4, §2.3, §2.5, §2.10, §6).

TEST(GpuInstanceId, A100) {
  const Shape& s = ShapeOf("A100-40GB");
  EXPECT_EQ(s.GpuInstanceId(P(s, "7g.40gb"), 0), 0);
  EXPECT_EQ(s.GpuInstanceId(P(s, "3g.20gb"), 0), 1);
  EXPECT_EQ(s.GpuInstanceId(P(s, "3g.20gb"), 4), 2);
  EXPECT_EQ(s.GpuInstanceId(P(s, "4g.20gb"), 0), 1);
  EXPECT_EQ(s.GpuInstanceId(P(s, "2g.10gb"), 0), 3);
  EXPECT_EQ(s.GpuInstanceId(P(s, "2g.10gb"), 2), 4);
  EXPECT_EQ(s.GpuInstanceId(P(s, "2g.10gb"), 4), 5);
  for (int start = 0; start < 7; ++start) {
    EXPECT_EQ(s.GpuInstanceId(P(s, "1g.5gb"), start), 7 + start);
    EXPECT_EQ(s.GpuInstanceId(P(s, "1g.5gb+me"), start), 7 + start);
  }
}

TEST(GpuInstanceId, A30) {
  const Shape& s = ShapeOf("A30-24GB");
  for (int start = 0; start < 4; ++start)
    EXPECT_EQ(s.GpuInstanceId(P(s, "1g.6gb"), start), 3 + start);
  EXPECT_EQ(s.GpuInstanceId(P(s, "2g.12gb"), 0), 1);
  EXPECT_EQ(s.GpuInstanceId(P(s, "2g.12gb"), 2), 2);
  EXPECT_EQ(s.GpuInstanceId(P(s, "4g.24gb"), 0), 0);
}

TEST(GpuInstanceId, RtxPro) {
  const Shape& s = ShapeOf("RTX-PRO-6000-Blackwell");
  EXPECT_EQ(s.GpuInstanceId(P(s, "1g.24gb"), 0), 3);
  EXPECT_EQ(s.GpuInstanceId(P(s, "1g.24gb"), 3), 4);
  EXPECT_EQ(s.GpuInstanceId(P(s, "1g.24gb"), 6), 5);
  EXPECT_EQ(s.GpuInstanceId(P(s, "1g.24gb"), 9), 6);
  EXPECT_EQ(s.GpuInstanceId(P(s, "2g.48gb"), 0), 1);
  EXPECT_EQ(s.GpuInstanceId(P(s, "2g.48gb"), 6), 2);
  EXPECT_EQ(s.GpuInstanceId(P(s, "4g.96gb"), 0), 0);
}

TEST(GpuInstanceId, H100Nvl) {
  const Shape& s = ShapeOf("H100-NVL-94GB");
  EXPECT_EQ(s.GpuInstanceId(P(s, "3g.47gb"), 0), 1);
  EXPECT_EQ(s.GpuInstanceId(P(s, "1g.24gb"), 4), 5);
  EXPECT_EQ(s.GpuInstanceId(P(s, "1g.12gb"), 6), 13);
}

TEST(GpuInstanceId, DistinctWithinEveryValidLayout) {
  // GI ids 0..14 (§4.4) and, being tied to placement, never shared by two instances of a layout.
  const Shape& s = ShapeOf("A100-40GB");
  for (int p = 0; p < s.profile_count(); ++p) {
    for (int start : s.profile(p).starts) {
      const int id = s.GpuInstanceId(p, start);
      EXPECT_GE(id, 0);
      EXPECT_LE(id, 14);
    }
  }
  const std::vector<Placed> layout = {At(s, "2g.10gb", 0), At(s, "1g.5gb", 2), At(s, "1g.5gb", 3),
                                      At(s, "2g.10gb", 4), At(s, "1g.5gb", 6)};
  std::vector<int> ids;
  for (const Placed& p : layout) ids.push_back(s.GpuInstanceId(p.profile, p.start));
  EXPECT_THAT(ids, ElementsAre(3, 9, 10, 5, 13));
}

// ------------------------------------------------------------------------------------------------
// Place: exact placement of a multiset.

void ExpectPlaceable(const Shape& s, const std::vector<std::string>& names,
                     const Rules& rules = {}) {
  SCOPED_TRACE(s.model().id);
  const Counts wanted = Multiset(s, names);
  std::optional<std::vector<Placed>> placed = s.Place(wanted, rules);
  ASSERT_TRUE(placed.has_value());
  EXPECT_TRUE(s.Validate(*placed, rules).ok()) << Show(s, *placed);
  EXPECT_EQ(s.CountsOf(*placed), wanted);
  EXPECT_TRUE(std::is_sorted(placed->begin(), placed->end(),
                             [](const Placed& a, const Placed& b) { return a.start < b.start; }));
}

TEST(Place, A100Examples) {
  const Shape& s = ShapeOf("A100-40GB");
  ExpectPlaceable(s, {"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"});
  ExpectPlaceable(s, {"1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"});
  ExpectPlaceable(s, {"7g.40gb"});
  ExpectPlaceable(s, {"4g.20gb", "3g.20gb"});
  ExpectPlaceable(s, {"2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb"});
  ExpectPlaceable(s, {"1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"});
  ExpectPlaceable(s, {"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"});
  ExpectPlaceable(s, {});
  // 2g at 0, 2, 4 and 1g at 6 leave only slot 7, which no 1g can start at.
  EXPECT_FALSE(
      s.Place(Multiset(s, {"2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb", "1g.5gb"})).has_value());
  EXPECT_FALSE(s.Place(Multiset(s, {"4g.20gb", "3g.20gb"}), Rules{470}).has_value());
  EXPECT_FALSE(s.Place(Multiset(s, {"3g.20gb", "3g.20gb", "1g.5gb"})).has_value());
  EXPECT_FALSE(s.Place(Multiset(s, {"7g.40gb", "1g.5gb"})).has_value());
  EXPECT_FALSE(s.Place(Multiset(s, {"1g.5gb+me", "1g.5gb+me"})).has_value());
  // 4 x double-memory 1g take all 8 units; a further 1g cannot fit.
  EXPECT_FALSE(
      s.Place(Multiset(s, {"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.5gb"})).has_value());
  EXPECT_FALSE(s.Place(Multiset(s, {"1g.10gb"}), Rules{470}).has_value());
}

TEST(Place, OtherModels) {
  ExpectPlaceable(ShapeOf("A30-24GB"), {"2g.12gb", "1g.6gb", "1g.6gb"});
  EXPECT_FALSE(
      ShapeOf("A30-24GB").Place(Multiset(ShapeOf("A30-24GB"), {"1g.6gb+me", "2g.12gb+me"})));
  const Shape& rtx = ShapeOf("RTX-PRO-6000-Blackwell");
  ExpectPlaceable(rtx, {"1g.24gb+me.all", "1g.24gb-me", "2g.48gb-me"});
  EXPECT_FALSE(rtx.Place(Multiset(rtx, {"1g.24gb+me.all", "1g.24gb"})).has_value());
  ExpectPlaceable(rtx, {"2g.48gb", "1g.24gb", "1g.24gb"});
  EXPECT_FALSE(rtx.Place(Multiset(rtx, {"2g.48gb", "2g.48gb", "1g.24gb"})).has_value());
}

TEST(Place, AroundExistingInstances) {
  const Shape& s = ShapeOf("A100-40GB");
  const Occupancy three_at_four = s.OccupancyOf(std::vector<Placed>{At(s, "3g.20gb", 4)});
  std::vector<Placed> out;
  ASSERT_TRUE(s.Place(three_at_four, Multiset(s, {"4g.20gb"}), {}, &out));
  EXPECT_THAT(out, ElementsAre(At(s, "4g.20gb", 0)));
  EXPECT_FALSE(s.Place(three_at_four, Multiset(s, {"4g.20gb"}), Rules{470}, &out));
  ASSERT_TRUE(s.Place(three_at_four, Multiset(s, {"3g.20gb"}), {}, &out));
  EXPECT_THAT(out, ElementsAre(At(s, "3g.20gb", 0)));
  ASSERT_TRUE(s.Place(three_at_four, Multiset(s, {"1g.5gb", "2g.10gb", "1g.5gb"}), {}, &out));
  ASSERT_EQ(out.size(), 3u);
  std::vector<Placed> whole = out;
  whole.push_back(At(s, "3g.20gb", 4));
  EXPECT_TRUE(s.Validate(whole).ok()) << Show(s, whole);
  EXPECT_FALSE(s.Place(three_at_four, Multiset(s, {"2g.10gb", "2g.10gb", "1g.5gb"}), {}, &out));
  EXPECT_FALSE(s.Place(three_at_four, Multiset(s, {"3g.20gb", "3g.20gb"}), {}, &out));  // cap 2
  // Null output is allowed.
  EXPECT_TRUE(s.Place(three_at_four, Multiset(s, {"1g.5gb"}), {}, nullptr));
  const Occupancy one_at_zero = s.OccupancyOf(std::vector<Placed>{At(s, "1g.5gb", 0)});
  EXPECT_FALSE(s.Place(one_at_zero, Multiset(s, {"7g.40gb"}), {}, &out));
  EXPECT_FALSE(s.Place(one_at_zero, Multiset(s, {"4g.20gb"}), {}, &out));
}

TEST(CheckCounts, MultisetRulesOnly) {
  const Shape& s = ShapeOf("A100-40GB");
  EXPECT_TRUE(s.CheckCounts({}, Multiset(s, {"3g.20gb", "3g.20gb"}), {}).ok());
  EXPECT_EQ(s.CheckCounts({}, Multiset(s, {"3g.20gb", "3g.20gb", "3g.20gb"}), {}).kind,
            ViolationKind::kInstanceCap);
  EXPECT_EQ(s.CheckCounts({}, Multiset(s, {"7g.40gb", "1g.5gb"}), {}).kind,
            ViolationKind::kNoPlacement);
  EXPECT_EQ(s.CheckCounts({}, Multiset(s, {"4g.20gb", "3g.20gb"}), Rules{470}).kind,
            ViolationKind::kDriverPairing);
  const Shape& rtx = ShapeOf("RTX-PRO-6000-Blackwell");
  EXPECT_EQ(rtx.CheckCounts({}, Multiset(rtx, {"1g.24gb+me.all", "1g.24gb"}), {}).kind,
            ViolationKind::kMediaExclusive);
  EXPECT_EQ(rtx.CheckCounts({}, Multiset(rtx, {"1g.24gb+me.all", "2g.48gb+me.all"}), {}).kind,
            ViolationKind::kMediaExclusive);
  const Shape& a30 = ShapeOf("A30-24GB");
  EXPECT_EQ(a30.CheckCounts({}, Multiset(a30, {"1g.6gb+me", "2g.12gb+me"}), {}).kind,
            ViolationKind::kMediaEngines);
}

// ------------------------------------------------------------------------------------------------
// Describe.

TEST(Describe, EveryKindHasText) {
  const Shape& s = ShapeOf("A100-40GB");
  const std::vector<Placed> layout = {At(s, "3g.20gb", 0), At(s, "1g.5gb", 1)};
  EXPECT_EQ(Describe(s, layout, Violation{}), "valid");
  EXPECT_THAT(Describe(s, layout, Violation{ViolationKind::kNoPlacement}),
              AllOf(HasSubstr("A100-40GB"), HasSubstr("8 placement units")));
  EXPECT_THAT(Describe(s, layout, Violation{ViolationKind::kTooManyInstances}), HasSubstr("16"));
  EXPECT_THAT(Describe(s, layout, Violation{ViolationKind::kDriverPairing}, Rules{470}),
              HasSubstr("R510"));
}

}  // namespace
}  // namespace gpuslice::geometry
