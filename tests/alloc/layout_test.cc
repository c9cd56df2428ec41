// Fixed MIG layouts of a machine (gpuslice/alloc/layout.h): resolving a mig-parted config for the
// machine's GPUs around the leases held there, the layout as a mig-parted config again, its text
// and JSON forms; and InventoryFromGpus with fixed layouts (gpuslice/alloc/inventory.h).
#include "gpuslice/alloc/layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpuslice/alloc/inventory.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/spec/mig_parted.h"

namespace gpuslice::alloc {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

const hw::GpuModel& Model(const std::string& id) {
  const hw::GpuModel* model = hw::Catalog::Builtin().Find(id);
  if (model == nullptr) {
    ADD_FAILURE() << "no catalog model " << id;
    std::abort();
  }
  return *model;
}

int Profile(const std::string& model, const std::string& name) {
  const hw::GpuModel& m = Model(model);
  const hw::GiProfile* profile = m.mig->FindProfile(name);
  if (profile == nullptr) {
    ADD_FAILURE() << model << " has no profile " << name;
    std::abort();
  }
  return m.mig->IndexOf(*profile);
}

place::FixedInstance H100(const std::string& profile, int start) {
  return {Profile("H100-80GB", profile), start};
}

device::GpuInfo Gpu(int index, const std::string& model, bool mig_on) {
  device::GpuInfo gpu;
  gpu.index = index;
  gpu.uuid = "GPU-" + std::to_string(index) + "-0000";
  gpu.model = &Model(model);
  gpu.name = gpu.model->display_name;
  gpu.mig_capable = gpu.model->mig_capable();
  gpu.mig_current = mig_on ? device::MigMode::kEnabled : device::MigMode::kDisabled;
  gpu.mig_pending = gpu.mig_current;
  return gpu;
}

HeldDevice HeldMig(std::int64_t lease, int gpu, const place::FixedInstance& instance) {
  HeldDevice held;
  held.lease = lease;
  held.gpu_index = gpu;
  held.profile = instance.profile;
  held.start = instance.start;
  return held;
}

HeldDevice HeldWhole(std::int64_t lease, int gpu) {
  HeldDevice held;
  held.lease = lease;
  held.gpu_index = gpu;
  held.whole = true;
  return held;
}

spec::MigConfigFile Parse(std::string_view text) {
  absl::StatusOr<spec::MigConfigFile> file = spec::ParseMigPartedConfig(text, "test.yaml");
  if (!file.ok()) {
    ADD_FAILURE() << file.status();
    std::abort();
  }
  return *std::move(file);
}

// A file with one config "c" of one entry on `devices` ("all" or "[0, 1]").
spec::MigConfigFile OneEntry(const std::string& devices, const std::string& mig_devices,
                             const std::string& placements = "") {
  std::string text = "version: v1\nmig-configs:\n  c:\n    - devices: " + devices +
                     "\n      mig-enabled: true\n      mig-devices: " + mig_devices + "\n";
  if (!placements.empty()) text += "      gpuslice-placements: " + placements + "\n";
  return Parse(text);
}

std::vector<geometry::Placed> AsPlaced(const std::vector<place::FixedInstance>& instances) {
  std::vector<geometry::Placed> out;
  for (const place::FixedInstance& i : instances) {
    out.push_back({static_cast<std::uint8_t>(i.profile), static_cast<std::uint8_t>(i.start)});
  }
  return out;
}

bool Contains(const std::vector<place::FixedInstance>& instances,
              const place::FixedInstance& instance) {
  return std::find(instances.begin(), instances.end(), instance) != instances.end();
}

// Profile indices of a layout, sorted (the multiset of GIs).
std::vector<int> ProfilesOf(const std::vector<place::FixedInstance>& instances) {
  std::vector<int> out;
  for (const place::FixedInstance& i : instances) out.push_back(i.profile);
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------------------------------------
// ResolveLayout

TEST(ResolveLayout, ExplicitPlacementsAreHonoured) {
  const spec::MigConfigFile file = OneEntry("all", R"({"1g.10gb": 2, "3g.40gb": 1})",
                                            R"(["1g.10gb@6", "1g.10gb@5", "3g.40gb@0"])");
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(file, "c", {Gpu(0, "H100-80GB", true), Gpu(1, "H100-80GB", false)}, {});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_TRUE(resolved->conflicts.empty());
  ASSERT_EQ(resolved->gpus.size(), 2u);
  for (size_t g = 0; g < 2; ++g) {
    const GpuLayout& gpu = resolved->gpus[g];
    EXPECT_EQ(gpu.index, static_cast<int>(g));
    EXPECT_EQ(gpu.model, "H100-80GB");
    EXPECT_TRUE(gpu.mig);
    // Sorted by start.
    EXPECT_EQ(gpu.instances, (std::vector<place::FixedInstance>{
                                 H100("3g.40gb", 0), H100("1g.10gb", 5), H100("1g.10gb", 6)}));
    EXPECT_EQ(DescribeGpuLayout(gpu), "3g.40gb@0 1g.10gb@5 1g.10gb@6");
  }
}

TEST(ResolveLayout, UnplacedInstancesArePlacedValidly) {
  const spec::MigConfigFile file = OneEntry("[0]", R"({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1})");
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(file, "c", {Gpu(0, "H100-80GB", true)}, {});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  ASSERT_EQ(resolved->gpus.size(), 1u);
  const std::vector<place::FixedInstance>& instances = resolved->gpus[0].instances;
  EXPECT_EQ(ProfilesOf(instances),
            (std::vector<int>{Profile("H100-80GB", "1g.10gb"), Profile("H100-80GB", "1g.10gb"),
                              Profile("H100-80GB", "2g.20gb"), Profile("H100-80GB", "3g.40gb")}));
  const geometry::Shape shape(Model("H100-80GB"));
  EXPECT_TRUE(shape.Validate(AsPlaced(instances)).ok());
  EXPECT_TRUE(std::is_sorted(instances.begin(), instances.end(),
                             [](const auto& a, const auto& b) { return a.start < b.start; }));
}

TEST(ResolveLayout, UnplacedInstancesGoAroundALeaseWhichKeepsItsStart) {
  const spec::MigConfigFile file = OneEntry("all", R"({"1g.10gb": 2, "3g.40gb": 1})");
  // The lease's 1g.10gb at 3 rules out 3g.40gb@0: the 3g goes to 4.
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(file, "c", {Gpu(0, "H100-80GB", true)}, {HeldMig(7, 0, H100("1g.10gb", 3))});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_TRUE(resolved->conflicts.empty());
  ASSERT_EQ(resolved->gpus.size(), 1u);
  const std::vector<place::FixedInstance>& instances = resolved->gpus[0].instances;
  ASSERT_EQ(instances.size(), 3u);
  EXPECT_TRUE(Contains(instances, H100("1g.10gb", 3)));
  EXPECT_TRUE(Contains(instances, H100("3g.40gb", 4)));
  EXPECT_TRUE(geometry::Shape(Model("H100-80GB")).Validate(AsPlaced(instances)).ok());

  // Two leases of the same unplaced profile both keep theirs; a lease on another GPU is ignored.
  absl::StatusOr<ResolvedLayout> two =
      ResolveLayout(file, "c", {Gpu(0, "H100-80GB", true), Gpu(1, "H100-80GB", true)},
                    {HeldMig(1, 0, H100("1g.10gb", 6)), HeldMig(2, 0, H100("1g.10gb", 5)),
                     HeldMig(3, 1, H100("3g.40gb", 4))});
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_TRUE(two->conflicts.empty());
  ASSERT_EQ(two->gpus.size(), 2u);
  EXPECT_EQ(two->gpus[0].instances,
            (std::vector<place::FixedInstance>{H100("3g.40gb", 0), H100("1g.10gb", 5),
                                               H100("1g.10gb", 6)}));
  EXPECT_TRUE(Contains(two->gpus[1].instances, H100("3g.40gb", 4)));
  EXPECT_EQ(two->gpus[1].instances.size(), 3u);
}

TEST(ResolveLayout, LeaseMatchingAnExplicitPlacementIsFine) {
  const spec::MigConfigFile file =
      OneEntry("all", R"({"1g.10gb": 1, "3g.40gb": 1})", R"(["3g.40gb@4", "1g.10gb@0"])");
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(file, "c", {Gpu(0, "H100-80GB", true)},
                    {HeldMig(1, 0, H100("3g.40gb", 4)), HeldMig(2, 0, H100("1g.10gb", 0))});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_TRUE(resolved->conflicts.empty());
  EXPECT_EQ(resolved->gpus[0].instances,
            (std::vector<place::FixedInstance>{H100("1g.10gb", 0), H100("3g.40gb", 4)}));
}

TEST(ResolveLayout, LeaseOfAProfileNotInTheLayoutIsAConflict) {
  const spec::MigConfigFile file = OneEntry("all", R"({"1g.10gb": 7})");
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(file, "c", {Gpu(0, "H100-80GB", true), Gpu(1, "H100-80GB", true)},
                    {HeldMig(41, 1, H100("2g.20gb", 2)), HeldMig(42, 1, H100("1g.10gb", 0))});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  ASSERT_EQ(resolved->conflicts.size(), 1u);
  EXPECT_EQ(resolved->conflicts[0].lease, 41);
  EXPECT_EQ(resolved->conflicts[0].gpu_index, 1);
  EXPECT_THAT(resolved->conflicts[0].why, HasSubstr("2g.20gb@2"));
  EXPECT_THAT(resolved->conflicts[0].why, HasSubstr("not in the layout"));
}

TEST(ResolveLayout, LeaseAtAnotherStartThanThePlacementIsAConflict) {
  const spec::MigConfigFile file = OneEntry("all", R"({"3g.40gb": 1})", R"(["3g.40gb@0"])");
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(file, "c", {Gpu(0, "H100-80GB", true)}, {HeldMig(9, 0, H100("3g.40gb", 4))});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  ASSERT_EQ(resolved->conflicts.size(), 1u);
  EXPECT_EQ(resolved->conflicts[0].lease, 9);
  EXPECT_EQ(resolved->conflicts[0].gpu_index, 0);
  EXPECT_THAT(resolved->conflicts[0].why, HasSubstr("3g.40gb@4"));
  EXPECT_THAT(resolved->conflicts[0].why, HasSubstr("not in the layout"));
}

TEST(ResolveLayout, MoreLeasesOfAProfileThanTheLayoutHasAreConflicts) {
  const spec::MigConfigFile file = OneEntry("all", R"({"1g.10gb": 1, "3g.40gb": 1})");
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(file, "c", {Gpu(0, "H100-80GB", true)},
                    {HeldMig(1, 0, H100("1g.10gb", 0)), HeldMig(2, 0, H100("1g.10gb", 1))});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  ASSERT_EQ(resolved->conflicts.size(), 1u);
  EXPECT_EQ(resolved->conflicts[0].lease, 2);
}

TEST(ResolveLayout, WholeGpuLeaseConflictsWithMigOn) {
  const spec::MigConfigFile file = OneEntry("all", R"({"3g.40gb": 2})");
  for (bool mig_now : {false, true}) {
    absl::StatusOr<ResolvedLayout> resolved = ResolveLayout(
        file, "c", {Gpu(0, "H100-80GB", mig_now), Gpu(1, "H100-80GB", mig_now)}, {HeldWhole(5, 1)});
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    ASSERT_EQ(resolved->conflicts.size(), 1u) << mig_now;
    EXPECT_EQ(resolved->conflicts[0].lease, 5);
    EXPECT_EQ(resolved->conflicts[0].gpu_index, 1);
    EXPECT_THAT(resolved->conflicts[0].why, HasSubstr("whole GPU"));
  }
}

TEST(ResolveLayout, MigOffWithMigLeasesConflicts) {
  const spec::MigConfigFile file =
      Parse("version: v1\nmig-configs:\n  off:\n    - devices: all\n      mig-enabled: false\n");
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(file, "off", {Gpu(0, "H100-80GB", true), Gpu(1, "H100-80GB", true)},
                    {HeldMig(3, 0, H100("1g.10gb", 0)), HeldMig(4, 0, H100("3g.40gb", 4))});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  ASSERT_EQ(resolved->conflicts.size(), 2u);
  for (const LayoutConflict& conflict : resolved->conflicts) {
    EXPECT_EQ(conflict.gpu_index, 0);
    EXPECT_THAT(conflict.why, HasSubstr("MIG off"));
  }
  std::vector<std::int64_t> leases = {resolved->conflicts[0].lease, resolved->conflicts[1].lease};
  std::sort(leases.begin(), leases.end());
  EXPECT_EQ(leases, (std::vector<std::int64_t>{3, 4}));
  ASSERT_EQ(resolved->gpus.size(), 2u);
  for (const GpuLayout& gpu : resolved->gpus) {
    EXPECT_FALSE(gpu.mig);
    EXPECT_TRUE(gpu.instances.empty());
    EXPECT_EQ(DescribeGpuLayout(gpu), "MIG off");
  }
}

TEST(ResolveLayout, MigOffWithAWholeLeaseOnANonMigGpuIsFine) {
  const spec::MigConfigFile file =
      Parse("version: v1\nmig-configs:\n  off:\n    - devices: all\n      mig-enabled: false\n");
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(file, "off", {Gpu(0, "H100-80GB", false), Gpu(1, "L4", false)},
                    {HeldWhole(1, 0), HeldWhole(2, 1)});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_TRUE(resolved->conflicts.empty());
  ASSERT_EQ(resolved->gpus.size(), 2u);
  EXPECT_FALSE(resolved->gpus[0].mig);
  EXPECT_FALSE(resolved->gpus[1].mig);
  EXPECT_EQ(resolved->gpus[1].model, "L4");

  // The same lease while the GPU is in MIG mode now stands in the way.
  absl::StatusOr<ResolvedLayout> mig_now =
      ResolveLayout(file, "off", {Gpu(0, "H100-80GB", true)}, {HeldWhole(1, 0)});
  ASSERT_TRUE(mig_now.ok()) << mig_now.status();
  ASSERT_EQ(mig_now->conflicts.size(), 1u);
  EXPECT_EQ(mig_now->conflicts[0].lease, 1);
}

TEST(ResolveLayout, TheRestFitsOnlyIfTheLeasesInstanceMoves) {
  // 4g.40gb can only start at 0, so 3g.40gb must be at 4; the lease holds 3g.40gb@0.
  const spec::MigConfigFile file = OneEntry("all", R"({"4g.40gb": 1, "3g.40gb": 1})");
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(file, "c", {Gpu(0, "H100-80GB", true)}, {HeldMig(12, 0, H100("3g.40gb", 0))});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  ASSERT_EQ(resolved->conflicts.size(), 1u);
  EXPECT_EQ(resolved->conflicts[0].lease, 12);
  EXPECT_EQ(resolved->conflicts[0].gpu_index, 0);
  EXPECT_THAT(resolved->conflicts[0].why, HasSubstr("only if its instance moves"));

  // Without the lease it resolves to 4g@0 3g@4.
  absl::StatusOr<ResolvedLayout> free = ResolveLayout(file, "c", {Gpu(0, "H100-80GB", true)}, {});
  ASSERT_TRUE(free.ok()) << free.status();
  EXPECT_TRUE(free->conflicts.empty());
  EXPECT_EQ(free->gpus[0].instances,
            (std::vector<place::FixedInstance>{H100("4g.40gb", 0), H100("3g.40gb", 4)}));
  // With the lease where the layout puts it: fine.
  absl::StatusOr<ResolvedLayout> there =
      ResolveLayout(file, "c", {Gpu(0, "H100-80GB", true)}, {HeldMig(12, 0, H100("3g.40gb", 4))});
  ASSERT_TRUE(there.ok()) << there.status();
  EXPECT_TRUE(there->conflicts.empty());
}

TEST(ResolveLayout, SplitComputeInstancesAreRefused) {
  const spec::MigConfigFile file = OneEntry("all", R"({"1c.3g.40gb": 3, "4g.40gb": 1})");
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(file, "c", {Gpu(0, "H100-80GB", true)}, {});
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(resolved.status().message(), HasSubstr("split compute instances"));
  // "3c.3g.40gb" is the GI's full CI: not split.
  absl::StatusOr<ResolvedLayout> full =
      ResolveLayout(OneEntry("all", R"({"3c.3g.40gb": 2})"), "c", {Gpu(0, "H100-80GB", true)}, {});
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(ProfilesOf(full->gpus[0].instances),
            (std::vector<int>{Profile("H100-80GB", "3g.40gb"), Profile("H100-80GB", "3g.40gb")}));
}

TEST(ResolveLayout, ConfigSelectingNoGpuIsInvalidArgument) {
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(OneEntry("[5, 6]", R"({"3g.40gb": 2})"), "c",
                    {Gpu(0, "H100-80GB", true), Gpu(1, "H100-80GB", true)}, {});
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(resolved.status().message(), HasSubstr("selects none"));
  // A device filter of another model.
  const spec::MigConfigFile a100_only = Parse(
      "version: v1\nmig-configs:\n  c:\n    - device-filter: \"0x20B210DE\"\n"
      "      devices: all\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 2}\n");
  EXPECT_EQ(ResolveLayout(a100_only, "c", {Gpu(0, "H100-80GB", true)}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // "all" with MIG on, on a machine without MIG-capable GPUs.
  EXPECT_EQ(ResolveLayout(OneEntry("all", "{}"), "c", {Gpu(0, "L4", false)}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ResolveLayout, UnknownConfigIsNotFound) {
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(OneEntry("all", "{}"), "nope", {Gpu(0, "H100-80GB", true)}, {});
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kNotFound);
}

TEST(ResolveLayout, UnknownProfileIsAnError) {
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(OneEntry("all", R"({"5g.50gb": 1})"), "c", {Gpu(0, "H100-80GB", true)}, {});
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kNotFound);
}

TEST(ResolveLayout, LayoutThatDoesNotFitIsFailedPrecondition) {
  // 4 + 4 + 4 units of 8.
  absl::StatusOr<ResolvedLayout> too_big = ResolveLayout(
      OneEntry("all", R"({"4g.40gb": 1, "3g.40gb": 2})"), "c", {Gpu(0, "H100-80GB", true)}, {});
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(too_big.status().message(), HasSubstr("does not fit"));
  // Still a config error (not a conflict) when leases are held.
  absl::StatusOr<ResolvedLayout> with_lease =
      ResolveLayout(OneEntry("all", R"({"7g.80gb": 1, "1g.10gb": 1})"), "c",
                    {Gpu(0, "H100-80GB", true)}, {HeldMig(1, 0, H100("1g.10gb", 0))});
  EXPECT_EQ(with_lease.status().code(), absl::StatusCode::kFailedPrecondition);
  // Explicit placements that overlap.
  absl::StatusOr<ResolvedLayout> overlap = ResolveLayout(
      OneEntry("all", R"({"3g.40gb": 1, "2g.20gb": 1})", R"(["3g.40gb@0", "2g.20gb@2"])"), "c",
      {Gpu(0, "H100-80GB", true)}, {});
  EXPECT_EQ(overlap.status().code(), absl::StatusCode::kFailedPrecondition);
  // MIG on a GPU named by index that cannot run MIG.
  absl::StatusOr<ResolvedLayout> no_mig = ResolveLayout(
      OneEntry("[1]", "{}"), "c", {Gpu(0, "H100-80GB", true), Gpu(1, "L4", false)}, {});
  EXPECT_EQ(no_mig.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_mig.status().message(), HasSubstr("cannot run MIG"));
}

TEST(ResolveLayout, DevicesAllWithMigOnSkipsGpusThatCannot) {
  absl::StatusOr<ResolvedLayout> resolved = ResolveLayout(
      OneEntry("all", R"({"7g.80gb": 1})"), "c",
      {Gpu(0, "L4", false), Gpu(1, "H100-80GB", false), Gpu(2, "L40S", false)}, {HeldWhole(8, 0)});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_TRUE(resolved->conflicts.empty());  // the L4's lease is not in the way
  ASSERT_EQ(resolved->gpus.size(), 1u);
  EXPECT_EQ(resolved->gpus[0].index, 1);
  EXPECT_EQ(resolved->gpus[0].instances, (std::vector<place::FixedInstance>{H100("7g.80gb", 0)}));
}

TEST(ResolveLayout, EmptyMigDevicesIsMigOnWithoutInstances) {
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(OneEntry("all", "{}"), "c", {Gpu(0, "H100-80GB", false)}, {});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  ASSERT_EQ(resolved->gpus.size(), 1u);
  EXPECT_TRUE(resolved->gpus[0].mig);
  EXPECT_TRUE(resolved->gpus[0].instances.empty());
  EXPECT_EQ(DescribeGpuLayout(resolved->gpus[0]), "MIG on, no instances");
}

TEST(ResolveLayout, DeviceFilterIsRespected) {
  // H100 (0x2330) and A100-80GB (0x20B2) on one machine, one entry per model.
  const spec::MigConfigFile file = Parse(
      "version: v1\nmig-configs:\n  mixed:\n"
      "    - device-filter: [\"0x233010DE\"]\n      devices: all\n      mig-enabled: true\n"
      "      mig-devices: {\"2g.20gb\": 3}\n"
      "    - device-filter: \"0x20B210DE\"\n      devices: all\n      mig-enabled: true\n"
      "      mig-devices: {\"7g.80gb\": 1}\n"
      "  h100-only:\n"
      "    - device-filter: \"0x233010DE\"\n      devices: all\n      mig-enabled: false\n");
  const std::vector<device::GpuInfo> gpus = {Gpu(0, "A100-80GB", true), Gpu(1, "H100-80GB", true),
                                             Gpu(2, "A100-80GB", false)};
  absl::StatusOr<ResolvedLayout> mixed = ResolveLayout(file, "mixed", gpus, {});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  ASSERT_EQ(mixed->gpus.size(), 3u);
  const int a100_7g = Profile("A100-80GB", "7g.80gb");
  for (int g : {0, 2}) {
    EXPECT_EQ(mixed->gpus[static_cast<size_t>(g)].index, g);
    EXPECT_EQ(mixed->gpus[static_cast<size_t>(g)].model, "A100-80GB");
    EXPECT_EQ(mixed->gpus[static_cast<size_t>(g)].instances,
              (std::vector<place::FixedInstance>{{a100_7g, 0}}));
  }
  EXPECT_EQ(mixed->gpus[1].model, "H100-80GB");
  EXPECT_EQ(mixed->gpus[1].instances,
            (std::vector<place::FixedInstance>{H100("2g.20gb", 0), H100("2g.20gb", 2),
                                               H100("2g.20gb", 4)}));

  // Only the H100 is selected; the A100s keep what they had, and a lease on one is not in the way.
  absl::StatusOr<ResolvedLayout> h100 =
      ResolveLayout(file, "h100-only", gpus, {HeldMig(1, 0, {a100_7g, 0})});
  ASSERT_TRUE(h100.ok()) << h100.status();
  EXPECT_TRUE(h100->conflicts.empty());
  ASSERT_EQ(h100->gpus.size(), 1u);
  EXPECT_EQ(h100->gpus[0].index, 1);
  EXPECT_FALSE(h100->gpus[0].mig);
}

TEST(ResolveLayout, DeviceIndicesSelectOnlyThoseGpus) {
  absl::StatusOr<ResolvedLayout> resolved = ResolveLayout(
      OneEntry("[2, 0]", R"({"3g.40gb": 2})"), "c",
      {Gpu(0, "H100-80GB", true), Gpu(1, "H100-80GB", true), Gpu(2, "H100-80GB", true)},
      {HeldMig(1, 1, H100("1g.10gb", 0))});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_TRUE(resolved->conflicts.empty());
  ASSERT_EQ(resolved->gpus.size(), 2u);
  EXPECT_EQ(resolved->gpus[0].index, 0);
  EXPECT_EQ(resolved->gpus[1].index, 2);
}

TEST(ResolveLayout, ConflictsOnSeveralGpusAreAllReported) {
  const spec::MigConfigFile file = OneEntry("all", R"({"7g.80gb": 1})");
  absl::StatusOr<ResolvedLayout> resolved = ResolveLayout(
      file, "c", {Gpu(0, "H100-80GB", true), Gpu(1, "H100-80GB", true), Gpu(2, "H100-80GB", true)},
      {HeldMig(1, 0, H100("1g.10gb", 0)), HeldWhole(2, 2), HeldMig(3, 1, H100("7g.80gb", 0))});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  std::vector<std::pair<std::int64_t, int>> conflicts;
  for (const LayoutConflict& c : resolved->conflicts) conflicts.emplace_back(c.lease, c.gpu_index);
  std::sort(conflicts.begin(), conflicts.end());
  EXPECT_EQ(conflicts, (std::vector<std::pair<std::int64_t, int>>{{1, 0}, {2, 2}}));
}

// ---------------------------------------------------------------------------------------------
// Property: leases taken from one valid arrangement of the config's instances never stand in the
// way; the resolved layout keeps every lease's and every explicit placement's start, has exactly
// the config's instances and is valid.

template <typename T>
T Full(rc::Gen<T> gen) {
  return *rc::gen::resize(rc::kNominalSize, std::move(gen));
}
int Int(int low, int high) { return Full(rc::gen::inRange(low, high + 1)); }

RC_GTEST_PROP(ResolveLayoutProperty, LeasesFromAnArrangementOfTheLayoutNeverConflict, ()) {
  std::vector<const hw::GpuModel*> models;
  for (const hw::GpuModel& model : hw::Catalog::Builtin().models()) {
    if (model.mig_capable()) models.push_back(&model);
  }
  const hw::GpuModel& model =
      *models[static_cast<size_t>(Int(0, static_cast<int>(models.size()) - 1))];
  const geometry::Shape shape(model);
  // A random valid arrangement L.
  std::vector<place::FixedInstance> arrangement;
  geometry::Occupancy occupancy{};
  for (int i = Int(1, 12); i > 0; --i) {
    const int profile = Int(0, shape.profile_count() - 1);
    const int start = Int(0, shape.units() - 1);
    if (!shape.CanAdd(occupancy, profile, start, {}).ok()) continue;
    shape.Add(occupancy, profile, start);
    arrangement.push_back({profile, start});
  }
  // The config: L's profiles, some of them with their start given.
  spec::ConfigEntry entry;
  entry.devices.all = true;
  entry.mig_enabled = true;
  std::vector<place::FixedInstance> explicit_placements;
  for (const place::FixedInstance& instance : arrangement) {
    const std::string& name = model.mig->profiles[static_cast<size_t>(instance.profile)].name;
    auto it = std::find_if(entry.mig_devices.begin(), entry.mig_devices.end(),
                           [&](const spec::MigDevice& d) { return d.name == name; });
    if (it == entry.mig_devices.end()) {
      entry.mig_devices.push_back({name, 1});
    } else {
      ++it->count;
    }
  }
  // Placements name every GI or none (ResolveEntry's rule).
  if (Int(0, 2) == 0) {
    for (const place::FixedInstance& instance : arrangement) {
      entry.placements.push_back(model.mig->profiles[static_cast<size_t>(instance.profile)].name +
                                 "@" + std::to_string(instance.start));
      explicit_placements.push_back(instance);
    }
  }
  spec::MigConfigFile file;
  file.configs.push_back({"c", {entry}});
  // Leases: a random subset of L on GPU 0, in random order, and a copy on GPU 1.
  std::vector<HeldDevice> held;
  std::int64_t next = 1;
  for (const place::FixedInstance& instance : arrangement) {
    if (Int(0, 1) == 0) held.push_back(HeldMig(next++, 0, instance));
  }
  for (size_t i = held.size(); i > 1; --i) {
    std::swap(held[i - 1], held[static_cast<size_t>(Int(0, static_cast<int>(i) - 1))]);
  }
  const size_t on_zero = held.size();
  for (size_t i = 0; i < on_zero; ++i) {
    HeldDevice copy = held[i];
    copy.lease = next++;
    copy.gpu_index = 1;
    held.push_back(copy);
  }
  std::vector<device::GpuInfo> gpus = {Gpu(0, model.id, true), Gpu(1, model.id, true)};
  absl::StatusOr<ResolvedLayout> resolved = ResolveLayout(file, "c", gpus, held);
  RC_ASSERT(resolved.ok());
  if (!resolved->conflicts.empty()) {
    RC_FAIL("lease " + std::to_string(resolved->conflicts[0].lease) + " on GPU " +
            std::to_string(resolved->conflicts[0].gpu_index) + ": " + resolved->conflicts[0].why);
  }
  RC_ASSERT(resolved->gpus.size() == 2u);
  for (const GpuLayout& gpu : resolved->gpus) {
    RC_ASSERT(gpu.mig);
    RC_ASSERT(gpu.model == model.id);
    RC_ASSERT(shape.Validate(AsPlaced(gpu.instances)).ok());
    RC_ASSERT(ProfilesOf(gpu.instances) == ProfilesOf(arrangement));
    for (const HeldDevice& h : held) {
      if (h.gpu_index == gpu.index) {
        RC_ASSERT(Contains(gpu.instances, place::FixedInstance{h.profile, h.start}));
      }
    }
    for (const place::FixedInstance& instance : explicit_placements) {
      RC_ASSERT(Contains(gpu.instances, instance));
    }
    for (size_t i = 1; i < gpu.instances.size(); ++i) {
      RC_ASSERT(gpu.instances[i - 1].start <= gpu.instances[i].start);
    }
  }
  // A lease of a profile the config does not have is always a conflict.
  const std::vector<int> config_profiles = ProfilesOf(arrangement);
  for (int p = 0; p < shape.profile_count(); ++p) {
    if (std::find(config_profiles.begin(), config_profiles.end(), p) != config_profiles.end()) {
      continue;
    }
    for (int s = 0; s < shape.units(); ++s) {
      if (!shape.StartAllowed(p, s)) continue;
      absl::StatusOr<ResolvedLayout> other =
          ResolveLayout(file, "c", gpus, {HeldMig(99, 1, place::FixedInstance{p, s})});
      RC_ASSERT(other.ok());
      RC_ASSERT(other->conflicts.size() == 1u);
      RC_ASSERT(other->conflicts[0].lease == 99);
      RC_ASSERT(other->conflicts[0].gpu_index == 1);
      break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// LayoutAsMigParted, DescribeGpuLayout

NodeLayout SampleLayout() {
  NodeLayout layout;
  layout.host = "node-a";
  layout.generation = 3;
  layout.source = "layouts.yaml:inference";
  layout.set_by = "admin";
  layout.set_at = 1700000000;
  layout.gpus.push_back(
      {0,
       "H100-80GB",
       true,
       {H100("1g.10gb", 0), H100("1g.10gb", 1), H100("2g.20gb", 2), H100("1g.10gb+me", 6)}});
  layout.gpus.push_back({1, "H100-80GB", false, {}});
  layout.gpus.push_back(
      {2,
       "A100-80GB",
       true,
       {{Profile("A100-80GB", "3g.40gb"), 4}, {Profile("A100-80GB", "4g.40gb"), 0}}});
  layout.gpus.push_back({3, "H100-80GB", true, {}});
  layout.applied_generation = 2;
  layout.agent_message = "";
  layout.reported_at = 1700000100;
  return layout;
}

TEST(LayoutAsMigParted, ParsesBackToTheSameStarts) {
  const NodeLayout layout = SampleLayout();
  const spec::MigConfigFile file = LayoutAsMigParted(layout);
  ASSERT_EQ(file.configs.size(), 1u);
  EXPECT_EQ(file.configs[0].first, "node-a");
  for (spec::OutputFormat format : {spec::OutputFormat::kYaml, spec::OutputFormat::kJson}) {
    const std::string text = spec::WriteMigPartedConfig(file, format);
    absl::StatusOr<spec::MigConfigFile> parsed = spec::ParseMigPartedConfig(text, "layout");
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
    absl::StatusOr<const std::vector<spec::ConfigEntry>*> entries =
        spec::SelectConfig(*parsed, "node-a");
    ASSERT_TRUE(entries.ok()) << entries.status();
    for (const GpuLayout& gpu : layout.gpus) {
      const hw::GpuModel& model = Model(gpu.model);
      absl::StatusOr<const spec::ConfigEntry*> entry =
          spec::EntryForGpu(**entries, gpu.index, model.pci_device_ids.front());
      ASSERT_TRUE(entry.ok()) << entry.status();
      ASSERT_NE(*entry, nullptr) << gpu.index;
      EXPECT_EQ((*entry)->mig_enabled, gpu.mig) << gpu.index;
      absl::StatusOr<std::vector<spec::DesiredGi>> gis = spec::ResolveEntry(**entry, model);
      ASSERT_TRUE(gis.ok()) << gis.status();
      std::vector<place::FixedInstance> got;
      for (const spec::DesiredGi& gi : *gis) {
        EXPECT_TRUE(gi.cis.empty());
        ASSERT_TRUE(gi.start.has_value()) << gpu.index;
        got.push_back({gi.profile, *gi.start});
      }
      auto by_start = [](const auto& a, const auto& b) {
        return std::pair(a.start, a.profile) < std::pair(b.start, b.profile);
      };
      std::vector<place::FixedInstance> want = gpu.instances;
      std::sort(got.begin(), got.end(), by_start);
      std::sort(want.begin(), want.end(), by_start);
      EXPECT_EQ(got, want) << "GPU " << gpu.index << "\n" << text;
    }
    // A GPU the layout does not cover is left alone.
    absl::StatusOr<const spec::ConfigEntry*> none = spec::EntryForGpu(**entries, 4, 0x2330);
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(*none, nullptr);
  }
}

TEST(LayoutAsMigParted, ResolvingItAgainGivesTheSameLayout) {
  const NodeLayout layout = SampleLayout();
  const std::string text =
      spec::WriteMigPartedConfig(LayoutAsMigParted(layout), spec::OutputFormat::kYaml);
  const spec::MigConfigFile file = Parse(text);
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(file, "node-a",
                    {Gpu(0, "H100-80GB", true), Gpu(1, "H100-80GB", true),
                     Gpu(2, "A100-80GB", true), Gpu(3, "H100-80GB", false)},
                    {HeldMig(1, 0, H100("1g.10gb+me", 6)), HeldWhole(2, 1)});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  // GPU 1 is in MIG mode now and held whole: that lease is in the way of MIG off.
  ASSERT_EQ(resolved->conflicts.size(), 1u);
  EXPECT_EQ(resolved->conflicts[0].lease, 2);
  ASSERT_EQ(resolved->gpus.size(), layout.gpus.size());
  for (size_t g = 0; g < layout.gpus.size(); ++g) {
    GpuLayout want = layout.gpus[g];
    std::sort(want.instances.begin(), want.instances.end(),
              [](const auto& a, const auto& b) { return a.start < b.start; });
    EXPECT_EQ(resolved->gpus[g], want) << g << ": " << DescribeGpuLayout(resolved->gpus[g]);
  }
}

TEST(DescribeGpuLayout, NamesEachInstance) {
  const NodeLayout layout = SampleLayout();
  EXPECT_EQ(DescribeGpuLayout(layout.gpus[0]), "1g.10gb@0 1g.10gb@1 2g.20gb@2 1g.10gb+me@6");
  EXPECT_EQ(DescribeGpuLayout(layout.gpus[1]), "MIG off");
  EXPECT_EQ(DescribeGpuLayout(layout.gpus[2]), "3g.40gb@4 4g.40gb@0");
  EXPECT_EQ(DescribeGpuLayout(layout.gpus[3]), "MIG on, no instances");
}

// ---------------------------------------------------------------------------------------------
// JSON

TEST(LayoutJson, RoundTrips) {
  NodeLayout layout = SampleLayout();
  layout.agent_message = "nvidia-smi failed";
  const json j = LayoutToJson(layout);
  EXPECT_EQ(j.at("host"), "node-a");
  EXPECT_EQ(j.at("gpus").at(0).at("instances").at(3).at("profile"), "1g.10gb+me");
  EXPECT_EQ(j.at("gpus").at(0).at("instances").at(3).at("start"), 6);
  EXPECT_EQ(j.at("applied"), false);
  // Through text, as the store keeps it.
  absl::StatusOr<NodeLayout> back = LayoutFromJson("node-a", json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->host, layout.host);
  EXPECT_EQ(back->generation, layout.generation);
  EXPECT_EQ(back->source, layout.source);
  EXPECT_EQ(back->set_by, layout.set_by);
  EXPECT_EQ(back->set_at, layout.set_at);
  EXPECT_EQ(back->gpus, layout.gpus);
  EXPECT_EQ(back->applied_generation, layout.applied_generation);
  EXPECT_EQ(back->agent_message, layout.agent_message);
  EXPECT_EQ(back->reported_at, layout.reported_at);
  EXPECT_FALSE(back->applied());
  EXPECT_EQ(LayoutToJson(*back), j);

  // The host comes from the caller.
  absl::StatusOr<NodeLayout> other = LayoutFromJson("node-b", j);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->host, "node-b");
}

TEST(LayoutJson, AppliedWhenTheAgentCarriedOutThisGeneration) {
  NodeLayout layout = SampleLayout();
  layout.applied_generation = layout.generation;
  EXPECT_TRUE(layout.applied());
  EXPECT_EQ(LayoutToJson(layout).at("applied"), true);
  absl::StatusOr<NodeLayout> back = LayoutFromJson("node-a", LayoutToJson(layout));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->applied());
  layout.agent_message = "failed";
  EXPECT_FALSE(layout.applied());
  EXPECT_EQ(LayoutToJson(layout).at("applied"), false);
}

TEST(LayoutJson, EmptyLayoutRoundTrips) {
  NodeLayout layout;
  layout.host = "h";
  absl::StatusOr<NodeLayout> back = LayoutFromJson("h", LayoutToJson(layout));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->gpus.empty());
  EXPECT_EQ(back->generation, 0);
}

TEST(LayoutJson, BadDocumentsAreInvalidArgument) {
  const json good = LayoutToJson(SampleLayout());
  auto code = [](const json& j) { return LayoutFromJson("h", j).status().code(); };
  EXPECT_EQ(code(json::array()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(json("layout")), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(json(nullptr)), absl::StatusCode::kInvalidArgument);

  json bad = good;
  bad["generation"] = "three";
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);

  bad = good;
  bad["gpus"][0].erase("index");
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);

  bad = good;
  bad["gpus"][0]["mig"] = "yes";
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);

  bad = good;
  bad["gpus"][0]["model"] = "Z9000";
  absl::Status unknown_model = LayoutFromJson("h", bad).status();
  EXPECT_EQ(unknown_model.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown_model.message(), HasSubstr("Z9000"));

  bad = good;
  bad["gpus"][0]["instances"][1]["profile"] = "9g.90gb";
  absl::Status unknown_profile = LayoutFromJson("h", bad).status();
  EXPECT_EQ(unknown_profile.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown_profile.message(), HasSubstr("9g.90gb"));

  // A profile of another model (A30's) on an H100.
  bad = good;
  bad["gpus"][0]["instances"][0]["profile"] = "1g.6gb";
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);

  // A MIG profile on a model without MIG.
  bad = good;
  bad["gpus"][1]["model"] = "L4";
  bad["gpus"][1]["instances"] = json::array({{{"profile", "1g.10gb"}, {"start", 0}}});
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);

  bad = good;
  bad["gpus"][0]["instances"][0].erase("start");
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);

  bad = good;
  bad["gpus"] = json::array({42});
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// InventoryFromGpus with fixed layouts

int NodeNamed(const place::Cluster& cluster, const std::string& name) {
  for (int n = 0; n < cluster.node_count(); ++n) {
    if (cluster.spec(n).name == name) return n;
  }
  ADD_FAILURE() << "no node " << name;
  return -1;
}

place::FixedLayout Fixed(std::vector<place::FixedInstance> instances) {
  return place::FixedLayout{true, std::move(instances)};
}

TEST(InventoryFromGpus, FixedLayoutsGoToMigNodesInTheGroupsGpuOrder) {
  // MIG H100s at indices 3 and 1 (listed in that order), an H100 not in MIG mode, an L4.
  const std::vector<device::GpuInfo> gpus = {Gpu(3, "H100-80GB", true), Gpu(0, "L4", false),
                                             Gpu(1, "H100-80GB", true), Gpu(2, "H100-80GB", false)};
  const std::map<int, place::FixedLayout> fixed = {
      {1, Fixed({H100("7g.80gb", 0)})},
      {3, Fixed({H100("3g.40gb", 0), H100("3g.40gb", 4)})},
      {2, Fixed({H100("1g.10gb", 0)})},  // not in MIG mode: ignored
      {0, Fixed({})},                    // L4: ignored
  };
  absl::StatusOr<place::Cluster> cluster =
      InventoryFromGpus("host", gpus, 64000, 262144, /*mig_if_capable=*/false, &fixed);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_EQ(cluster->node_count(), 3);
  const int mig = NodeNamed(*cluster, "host/H100-80GB-mig");
  const int whole = NodeNamed(*cluster, "host/H100-80GB");
  const int l4 = NodeNamed(*cluster, "host/L4");
  ASSERT_GE(mig, 0);
  ASSERT_GE(whole, 0);
  ASSERT_GE(l4, 0);
  EXPECT_EQ(cluster->spec(mig).mode, place::GpuMode::kMig);
  EXPECT_EQ(cluster->spec(mig).fixed, (std::vector<place::FixedLayout>{fixed.at(3), fixed.at(1)}));
  EXPECT_TRUE(cluster->spec(whole).fixed.empty());
  EXPECT_TRUE(cluster->spec(l4).fixed.empty());
  EXPECT_TRUE(cluster->HasFixedLayout(mig, 0));
  EXPECT_TRUE(cluster->HasFixedLayout(mig, 1));
  EXPECT_TRUE(cluster->GpuFullyFree(whole, 0));

  // The fixed instances are what the node hands out: node GPU 0 is NVML 3 (two 3g), GPU 1 is
  // NVML 1 (one 7g).
  int profile = -1;
  place::Request three;
  three.num_gpu = 1;
  three.mig_profile = "3g.40gb";
  EXPECT_TRUE(cluster->ShareFitsGpu(mig, 0, three, &profile));
  EXPECT_FALSE(cluster->ShareFitsGpu(mig, 1, three));
  place::Request seven = three;
  seven.mig_profile = "7g.80gb";
  EXPECT_FALSE(cluster->ShareFitsGpu(mig, 0, seven));
  EXPECT_TRUE(cluster->ShareFitsGpu(mig, 1, seven));
}

TEST(InventoryFromGpus, MigGpusWithoutAnEntryArePartitionedOnDemand) {
  const std::vector<device::GpuInfo> gpus = {Gpu(0, "H100-80GB", true), Gpu(1, "H100-80GB", true)};
  const std::map<int, place::FixedLayout> fixed = {{1, Fixed({H100("4g.40gb", 0)})}};
  absl::StatusOr<place::Cluster> cluster = InventoryFromGpus("h", gpus, 1000, 1024, false, &fixed);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_EQ(cluster->node_count(), 1);
  ASSERT_EQ(cluster->spec(0).fixed.size(), 2u);
  EXPECT_FALSE(cluster->spec(0).fixed[0].fixed);
  EXPECT_EQ(cluster->spec(0).fixed[1], fixed.at(1));
  EXPECT_FALSE(cluster->HasFixedLayout(0, 0));
  EXPECT_TRUE(cluster->HasFixedLayout(0, 1));
  EXPECT_TRUE(cluster->GpuFullyFree(0, 0));
  EXPECT_FALSE(cluster->GpuFullyFree(0, 1));
}

TEST(InventoryFromGpus, NoFixedLayoutsLeaveFixedEmpty) {
  const std::vector<device::GpuInfo> gpus = {Gpu(0, "H100-80GB", true), Gpu(1, "H100-80GB", true)};
  for (const std::map<int, place::FixedLayout>& fixed :
       {std::map<int, place::FixedLayout>{}, std::map<int, place::FixedLayout>{{0, {}}}}) {
    absl::StatusOr<place::Cluster> cluster =
        InventoryFromGpus("h", gpus, 1000, 1024, false, &fixed);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    EXPECT_TRUE(cluster->spec(0).fixed.empty());
    EXPECT_TRUE(cluster->GpuFullyFree(0, 0));
  }
  absl::StatusOr<place::Cluster> null_map = InventoryFromGpus("h", gpus, 1000, 1024, false);
  ASSERT_TRUE(null_map.ok());
  EXPECT_TRUE(null_map->spec(0).fixed.empty());
}

TEST(InventoryFromGpus, InvalidFixedLayoutIsAnError) {
  const std::vector<device::GpuInfo> gpus = {Gpu(0, "H100-80GB", true)};
  const std::map<int, place::FixedLayout> fixed = {
      {0, Fixed({H100("4g.40gb", 0), H100("3g.40gb", 0)})}};
  EXPECT_EQ(InventoryFromGpus("h", gpus, 1000, 1024, false, &fixed).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(InventoryFromGpus, ResolvedLayoutFeedsTheInventory) {
  // The service's path: resolve, then hand the layout's instances to the inventory.
  const std::vector<device::GpuInfo> gpus = {Gpu(0, "H100-80GB", true), Gpu(1, "H100-80GB", true)};
  absl::StatusOr<ResolvedLayout> resolved =
      ResolveLayout(OneEntry("[1]", R"({"1g.10gb": 2, "3g.40gb": 1})"), "c", gpus, {});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  std::map<int, place::FixedLayout> fixed;
  for (const GpuLayout& gpu : resolved->gpus) fixed[gpu.index] = Fixed(gpu.instances);
  absl::StatusOr<place::Cluster> cluster = InventoryFromGpus("h", gpus, 1000, 1024, false, &fixed);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_EQ(cluster->spec(0).fixed.size(), 2u);
  EXPECT_FALSE(cluster->spec(0).fixed[0].fixed);
  EXPECT_EQ(cluster->spec(0).fixed[1].instances, resolved->gpus[0].instances);
}

}  // namespace
}  // namespace gpuslice::alloc
