// Fixed MIG layouts in the placement layer (NodeSpec::fixed, gpuslice/place/cluster.h): Create's
// validation, a fixed GPU hands out only its listed instances through the Engine under several
// policies, is never taken whole, Apply/Adopt refuse claims outside the layout, releases free the
// instance for the next request; plus a rapidcheck property over random models, random valid fixed
// layouts and random acquire/release sequences.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/place/engine.h"
#include "gpuslice/place/policy.h"
#include "place/place_test_util.h"

namespace gpuslice::place {
namespace {

using testing::CatalogModel;
using ::testing::HasSubstr;
using testing::MakeAllocation;
using testing::MakeCluster;
using testing::MigNode;
using testing::MigRequest;
using testing::NewPolicy;
using testing::Share;
using testing::SharedNode;
using testing::Whole;
using testing::WholeNode;

// Profile index of `name` on catalog model `model`.
int ProfileIndex(const std::string& model, const std::string& name) {
  const hw::GpuModel* m = CatalogModel(model);
  const hw::GiProfile* profile = m->mig->FindProfile(name);
  if (profile == nullptr) {
    ADD_FAILURE() << model << " has no profile " << name;
    std::abort();
  }
  return m->mig->IndexOf(*profile);
}

FixedInstance H100(const std::string& profile, int start) {
  return FixedInstance{ProfileIndex("H100-80GB", profile), start};
}

FixedLayout Fixed(std::vector<FixedInstance> instances) {
  return FixedLayout{true, std::move(instances)};
}

// H100 all-balanced with exact starts: 1g.10gb@0 1g.10gb@1 2g.20gb@2 3g.40gb@4.
FixedLayout Balanced() {
  return Fixed({H100("1g.10gb", 0), H100("1g.10gb", 1), H100("2g.20gb", 2), H100("3g.40gb", 4)});
}

NodeSpec FixedNode(const std::string& name, std::vector<FixedLayout> layouts,
                   const std::string& hardware = "H100-80GB") {
  NodeSpec spec = MigNode(name, static_cast<int>(layouts.size()), hardware);
  spec.fixed = std::move(layouts);
  return spec;
}

GpuClaim MigClaim(int gpu, const FixedInstance& instance) {
  GpuClaim claim;
  claim.gpu = gpu;
  claim.mig_profile = instance.profile;
  claim.mig_start = instance.start;
  return claim;
}

FixedInstance InstanceOf(const GpuClaim& claim) {
  return FixedInstance{claim.mig_profile, claim.mig_start};
}

// ---------------------------------------------------------------------------------------------
// Cluster::Create validation

absl::Status CreateStatus(std::vector<NodeSpec> nodes) {
  return Cluster::Create(std::move(nodes)).status();
}

TEST(FixedLayoutCreate, AcceptsValidLayouts) {
  EXPECT_TRUE(CreateStatus({FixedNode("a", {Balanced()})}).ok());
  // MIG on with no instances, a non-fixed entry beside a fixed one, a full-GPU instance.
  EXPECT_TRUE(
      CreateStatus({FixedNode("b", {Fixed({}), FixedLayout{}, Fixed({H100("7g.80gb", 0)})})}).ok());
  // Seven 1g.10gb: the profile's cap exactly.
  std::vector<FixedInstance> sevens;
  for (int s = 0; s < 7; ++s) sevens.push_back(H100("1g.10gb", s));
  EXPECT_TRUE(CreateStatus({FixedNode("c", {Fixed(sevens)})}).ok());
  // Other models.
  const int a30_1g = ProfileIndex("A30-24GB", "1g.6gb");
  const int a30_2g = ProfileIndex("A30-24GB", "2g.12gb");
  EXPECT_TRUE(
      CreateStatus({FixedNode("d", {Fixed({{a30_2g, 0}, {a30_1g, 2}, {a30_1g, 3}})}, "A30-24GB")})
          .ok());
}

TEST(FixedLayoutCreate, NeedsMigMode) {
  NodeSpec shared = SharedNode("s", 1);
  shared.fixed = {Balanced()};
  absl::Status status = CreateStatus({shared});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("fixed layouts need MIG mode"));

  NodeSpec whole = WholeNode("w", 1);
  whole.fixed = {Balanced()};
  EXPECT_EQ(CreateStatus({whole}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FixedLayoutCreate, NeedsOneEntryPerGpu) {
  NodeSpec spec = MigNode("m", 2, "H100-80GB");
  spec.fixed = {Balanced()};
  absl::Status status = CreateStatus({spec});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("one entry per GPU"));
  spec.fixed = {Balanced(), Balanced(), Balanced()};
  EXPECT_EQ(CreateStatus({spec}).code(), absl::StatusCode::kInvalidArgument);
  spec.fixed = {Balanced(), Balanced()};
  EXPECT_TRUE(CreateStatus({spec}).ok());
}

TEST(FixedLayoutCreate, RejectsOverlappingInstances) {
  absl::Status status =
      CreateStatus({FixedNode("m", {Balanced(), Fixed({H100("3g.40gb", 0), H100("1g.10gb", 3)})})});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("GPU 1"));
  EXPECT_THAT(status.message(), HasSubstr("not a valid placement"));
  // The same instance twice.
  EXPECT_EQ(
      CreateStatus({FixedNode("m", {Fixed({H100("2g.20gb", 2), H100("2g.20gb", 2)})})}).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(FixedLayoutCreate, RejectsBadStartsAndProfiles) {
  // 3g.40gb may start at 0 or 4 only.
  EXPECT_EQ(CreateStatus({FixedNode("m", {Fixed({H100("3g.40gb", 2)})})}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateStatus({FixedNode("m", {Fixed({H100("1g.10gb", -1)})})}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateStatus({FixedNode("m", {Fixed({H100("1g.10gb", 8)})})}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateStatus({FixedNode("m", {Fixed({H100("1g.10gb", 1000)})})}).code(),
            absl::StatusCode::kInvalidArgument);
  const int profiles = geometry::Shape(*CatalogModel("H100-80GB")).profile_count();
  EXPECT_EQ(CreateStatus({FixedNode("m", {Fixed({FixedInstance{profiles, 0}})})}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateStatus({FixedNode("m", {Fixed({FixedInstance{-1, 0}})})}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FixedLayoutCreate, RejectsLayoutsBreakingMultisetRules) {
  // 1g.10gb+me: at most one instance per GPU.
  EXPECT_EQ(CreateStatus({FixedNode("m", {Fixed({H100("1g.10gb+me", 0), H100("1g.10gb+me", 1)})})})
                .code(),
            absl::StatusCode::kInvalidArgument);
  // The first entry valid, the second bad: the error names GPU 1, not 0.
  absl::Status status =
      CreateStatus({FixedNode("m", {Balanced(), Fixed({H100("4g.40gb", 0), H100("3g.40gb", 0)})})});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("GPU 1"));
}

// ---------------------------------------------------------------------------------------------
// Cluster queries

TEST(FixedLayoutCluster, FixedGpuIsNeverFullyFree) {
  Cluster cluster = MakeCluster({FixedNode("m", {Balanced(), FixedLayout{}, Fixed({})})});
  EXPECT_TRUE(cluster.HasFixedLayout(0, 0));
  EXPECT_FALSE(cluster.HasFixedLayout(0, 1));
  EXPECT_TRUE(cluster.HasFixedLayout(0, 2));
  EXPECT_FALSE(cluster.GpuFullyFree(0, 0));
  EXPECT_TRUE(cluster.GpuFullyFree(0, 1));
  EXPECT_FALSE(cluster.GpuFullyFree(0, 2));
  EXPECT_TRUE(cluster.Fits(0, Whole(1)));
  EXPECT_FALSE(cluster.Fits(0, Whole(2)));

  Cluster plain = MakeCluster({MigNode("p", 1, "H100-80GB")});
  EXPECT_FALSE(plain.HasFixedLayout(0, 0));
  EXPECT_TRUE(plain.GpuFullyFree(0, 0));
}

TEST(FixedLayoutCluster, ShareFitsOnlyProfilesOfTheLayout) {
  Cluster cluster = MakeCluster({FixedNode("m", {Balanced()})});
  int profile = -1;
  EXPECT_TRUE(cluster.ShareFitsGpu(0, 0, MigRequest("1g.10gb"), &profile));
  EXPECT_EQ(profile, ProfileIndex("H100-80GB", "1g.10gb"));
  EXPECT_TRUE(cluster.ShareFitsGpu(0, 0, MigRequest("3g")));
  // Room on the GPU for these on demand, but not in the layout.
  EXPECT_FALSE(cluster.ShareFitsGpu(0, 0, MigRequest("1g.20gb")));
  EXPECT_FALSE(cluster.ShareFitsGpu(0, 0, MigRequest("4g.40gb")));
  EXPECT_FALSE(cluster.ShareFitsGpu(0, 0, MigRequest("7g.80gb")));
  EXPECT_FALSE(cluster.ShareFitsGpu(0, 0, MigRequest("1g.10gb+me")));
  EXPECT_FALSE(cluster.ShareClaim(0, 0, MigRequest("4g.40gb")).has_value());
}

TEST(FixedLayoutCluster, ShareClaimTakesTheFirstFreeInstanceInLayoutOrder) {
  // Listed out of start order: the first *listed* free instance is taken.
  Cluster cluster = MakeCluster(
      {FixedNode("m", {Fixed({H100("1g.10gb", 6), H100("1g.10gb", 0), H100("1g.10gb", 3)})})});
  std::vector<int> starts;
  for (int i = 0; i < 3; ++i) {
    std::optional<GpuClaim> claim = cluster.ShareClaim(0, 0, MigRequest("1g.10gb"));
    ASSERT_TRUE(claim.has_value()) << i;
    EXPECT_FALSE(claim->whole);
    EXPECT_EQ(claim->mig_profile, ProfileIndex("H100-80GB", "1g.10gb"));
    starts.push_back(claim->mig_start);
    ASSERT_TRUE(cluster.Apply(MakeAllocation(0, MigRequest("1g.10gb"), {*claim})).ok());
  }
  EXPECT_EQ(starts, (std::vector<int>{6, 0, 3}));
  EXPECT_FALSE(cluster.ShareClaim(0, 0, MigRequest("1g.10gb")).has_value());
  EXPECT_FALSE(cluster.ShareFitsGpu(0, 0, MigRequest("1g.10gb")));
  // On demand the GPU would still have room for four more.
  EXPECT_EQ(cluster.shape(0)->FreeCount(cluster.gpus(0)[0].occupancy,
                                        ProfileIndex("H100-80GB", "1g.10gb")),
            4);
}

TEST(FixedLayoutCluster, ShareRequestsRoundUpToAFixedInstance) {
  Cluster cluster = MakeCluster({FixedNode("m", {Fixed({H100("3g.40gb", 4)})})});
  // 100 milli rounds up to 1g.10gb: not in the layout.
  EXPECT_FALSE(cluster.Fits(0, Share(100)));
  // 400 milli rounds up to 3g.40gb (3 of 7 slices): the fixed one.
  std::optional<GpuClaim> claim = cluster.ShareClaim(0, 0, Share(400));
  ASSERT_TRUE(claim.has_value());
  EXPECT_EQ(InstanceOf(*claim), H100("3g.40gb", 4));
}

TEST(FixedLayoutCluster, ApplyRefusesClaimsOutsideTheLayout) {
  Cluster cluster = MakeCluster({FixedNode("m", {Balanced(), FixedLayout{}})});
  // Whole: refused on the fixed GPU, fine on the on-demand one.
  absl::Status whole = cluster.Apply(MakeAllocation(0, Whole(1), {Cluster::WholeClaim(0)}));
  EXPECT_EQ(whole.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(whole.message(), HasSubstr("fixed MIG layout"));
  // A valid placement on an empty GPU, but not in the layout.
  absl::Status other_start =
      cluster.Apply(MakeAllocation(0, MigRequest("1g.10gb"), {MigClaim(0, H100("1g.10gb", 5))}));
  EXPECT_EQ(other_start.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other_start.message(), HasSubstr("not in its fixed layout"));
  absl::Status other_profile =
      cluster.Apply(MakeAllocation(0, MigRequest("4g.40gb"), {MigClaim(0, H100("4g.40gb", 0))}));
  EXPECT_EQ(other_profile.code(), absl::StatusCode::kFailedPrecondition);
  // 1g.20gb@2 covers the units of the layout's 2g.20gb@2 but is another profile.
  EXPECT_FALSE(
      cluster.Apply(MakeAllocation(0, MigRequest("1g.20gb"), {MigClaim(0, H100("1g.20gb", 2))}))
          .ok());
  EXPECT_EQ(cluster.pods(0), 0);
  EXPECT_EQ(cluster.allocated_milli(), 0);

  // Instances of the layout are accepted, each once.
  Allocation ok = MakeAllocation(0, MigRequest("2g.20gb"), {MigClaim(0, H100("2g.20gb", 2))});
  ok.gpus[0].milli = cluster.MigMilli(0, ok.gpus[0].mig_profile);
  ASSERT_TRUE(cluster.Apply(ok).ok());
  EXPECT_FALSE(cluster.Apply(ok).ok());
  // The on-demand GPU takes anything that fits, and whole.
  EXPECT_TRUE(
      cluster.Apply(MakeAllocation(0, MigRequest("1g.10gb"), {MigClaim(1, H100("1g.10gb", 5))}))
          .ok());
  Cluster fresh = MakeCluster({FixedNode("m", {Balanced(), FixedLayout{}})});
  EXPECT_TRUE(fresh.Apply(MakeAllocation(0, Whole(1), {Cluster::WholeClaim(1)})).ok());
}

TEST(FixedLayoutEngine, AdoptRefusesClaimsOutsideTheLayout) {
  Engine engine(MakeCluster({FixedNode("m", {Balanced()})}), NewPolicy("bestfit"));
  EXPECT_FALSE(engine.Adopt(MakeAllocation(0, Whole(1), {Cluster::WholeClaim(0)})).ok());
  EXPECT_FALSE(
      engine.Adopt(MakeAllocation(0, MigRequest("1g.10gb"), {MigClaim(0, H100("1g.10gb", 2))}))
          .ok());
  absl::StatusOr<Allocation> adopted =
      engine.Adopt(MakeAllocation(0, MigRequest("1g.10gb"), {MigClaim(0, H100("1g.10gb", 1))}));
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  // The adopted instance is taken: the next 1g.10gb gets the other one, then none is left.
  absl::StatusOr<Allocation> next = engine.Place(MigRequest("1g.10gb"));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(InstanceOf(next->gpus[0]), H100("1g.10gb", 0));
  EXPECT_FALSE(engine.Place(MigRequest("1g.10gb")).ok());
}

// ---------------------------------------------------------------------------------------------
// Through the Engine, for several policies

class FixedLayoutPolicy : public ::testing::TestWithParam<std::string> {};

TEST_P(FixedLayoutPolicy, HandsOutOnlyTheFixedInstances) {
  Engine engine(MakeCluster({FixedNode("m", {Balanced()})}), NewPolicy(GetParam()));
  std::vector<Allocation> live;
  auto take = [&](const std::string& profile) -> std::optional<FixedInstance> {
    absl::StatusOr<Allocation> allocation = engine.Place(MigRequest(profile));
    if (!allocation.ok()) return std::nullopt;
    EXPECT_EQ(allocation->gpus.size(), 1u);
    EXPECT_FALSE(allocation->gpus[0].whole);
    live.push_back(*allocation);
    return InstanceOf(allocation->gpus[0]);
  };
  std::set<std::pair<int, int>> got;
  for (int i = 0; i < 2; ++i) {
    std::optional<FixedInstance> instance = take("1g.10gb");
    ASSERT_TRUE(instance.has_value()) << i;
    got.insert({instance->profile, instance->start});
  }
  EXPECT_EQ(got, (std::set<std::pair<int, int>>{{ProfileIndex("H100-80GB", "1g.10gb"), 0},
                                                {ProfileIndex("H100-80GB", "1g.10gb"), 1}}));
  // A third 1g.10gb would fit on demand (units 2, 3, 6, ...) but the layout has only two.
  EXPECT_FALSE(take("1g.10gb").has_value());
  EXPECT_EQ(take("2g"), H100("2g.20gb", 2));
  EXPECT_FALSE(take("2g.20gb").has_value());
  EXPECT_EQ(take("3g.40gb"), H100("3g.40gb", 4));
  EXPECT_FALSE(take("3g.40gb").has_value());
  EXPECT_EQ(engine.live_allocations(), 4u);
  EXPECT_EQ(engine.cluster().FreeMilli(0, 0), 0);

  // Release 1g.10gb@1: the next 1g.10gb gets exactly that instance back.
  auto it = std::find_if(live.begin(), live.end(), [](const Allocation& a) {
    return InstanceOf(a.gpus[0]) == H100("1g.10gb", 1);
  });
  ASSERT_NE(it, live.end());
  ASSERT_TRUE(engine.Release(*it).ok());
  live.erase(it);
  EXPECT_FALSE(take("2g.20gb").has_value());
  EXPECT_EQ(take("1g.10gb"), H100("1g.10gb", 1));
  EXPECT_FALSE(take("1g.10gb").has_value());

  // Release everything: the GPU is empty, and still not handed out whole.
  for (const Allocation& allocation : live) ASSERT_TRUE(engine.Release(allocation).ok());
  live.clear();
  EXPECT_EQ(engine.cluster().gpus(0)[0].holders, 0);
  EXPECT_EQ(engine.cluster().allocated_milli(), 0);
  EXPECT_FALSE(engine.Place(Whole(1)).ok());
  EXPECT_EQ(engine.FeasibleNodes(Whole(1)), 0);
}

TEST_P(FixedLayoutPolicy, ProfilesNotInTheLayoutAreNeverGranted) {
  Engine engine(MakeCluster({FixedNode("m", {Balanced(), Balanced()})}), NewPolicy(GetParam()));
  for (const std::string profile : {"1g.20gb", "4g.40gb", "4g", "7g.80gb", "7g", "1g.10gb+me"}) {
    EXPECT_EQ(engine.FeasibleNodes(MigRequest(profile)), 0) << profile;
    absl::StatusOr<Allocation> allocation = engine.Place(MigRequest(profile));
    EXPECT_FALSE(allocation.ok()) << profile;
    EXPECT_NE(allocation.status().code(), absl::StatusCode::kInvalidArgument) << profile;
  }
  EXPECT_FALSE(engine.Place(Whole(1)).ok());
  EXPECT_FALSE(engine.Place(Whole(2)).ok());
  EXPECT_EQ(engine.live_allocations(), 0u);
  for (int g = 0; g < 2; ++g)
    EXPECT_EQ(engine.cluster().gpus(0)[static_cast<size_t>(g)].holders, 0);
}

TEST_P(FixedLayoutPolicy, MixedNodeKeepsWholeRequestsOffTheFixedGpus) {
  // GPU 0 and 2 fixed, GPU 1 and 3 on demand.
  Engine engine(MakeCluster({FixedNode("m", {Fixed({H100("4g.40gb", 0)}), FixedLayout{},
                                             Fixed({H100("7g.80gb", 0)}), FixedLayout{}})}),
                NewPolicy(GetParam()));
  EXPECT_EQ(engine.FeasibleNodes(Whole(3)), 0);
  EXPECT_FALSE(engine.Place(Whole(3)).ok());
  absl::StatusOr<Allocation> two = engine.Place(Whole(2));
  ASSERT_TRUE(two.ok()) << two.status();
  std::vector<int> gpus;
  for (const GpuClaim& claim : two->gpus) {
    EXPECT_TRUE(claim.whole);
    gpus.push_back(claim.gpu);
  }
  std::sort(gpus.begin(), gpus.end());
  EXPECT_EQ(gpus, (std::vector<int>{1, 3}));
  EXPECT_FALSE(engine.Place(Whole(1)).ok());
  // The fixed instances are still there.
  absl::StatusOr<Allocation> seven = engine.Place(MigRequest("7g"));
  ASSERT_TRUE(seven.ok()) << seven.status();
  EXPECT_EQ(seven->gpus[0].gpu, 2);
  EXPECT_EQ(InstanceOf(seven->gpus[0]), H100("7g.80gb", 0));
  absl::StatusOr<Allocation> four = engine.Place(MigRequest("4g.40gb"));
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(four->gpus[0].gpu, 0);
  EXPECT_EQ(InstanceOf(four->gpus[0]), H100("4g.40gb", 0));
  // 1g.10gb is in no layout, and the on-demand GPUs are taken whole.
  EXPECT_FALSE(engine.Place(MigRequest("1g.10gb")).ok());
  // Release the whole GPUs: a 1g.10gb now goes on demand to GPU 1 or 3, never 0 or 2.
  ASSERT_TRUE(engine.Release(*two).ok());
  for (int i = 0; i < 14; ++i) {
    absl::StatusOr<Allocation> small = engine.Place(MigRequest("1g.10gb"));
    ASSERT_TRUE(small.ok()) << i << ": " << small.status();
    EXPECT_TRUE(small->gpus[0].gpu == 1 || small->gpus[0].gpu == 3) << small->gpus[0].gpu;
  }
  EXPECT_FALSE(engine.Place(MigRequest("1g.10gb")).ok());
}

TEST_P(FixedLayoutPolicy, RequestsGoToTheNodeWhoseLayoutHasTheProfile) {
  // Node 0: fixed 1g.10gb only; node 1: fixed 3g.40gb only; node 2: on demand, whole mode.
  Engine engine(MakeCluster({FixedNode("small", {Fixed({H100("1g.10gb", 0), H100("1g.10gb", 3)})}),
                             FixedNode("big", {Fixed({H100("3g.40gb", 0), H100("3g.40gb", 4)})}),
                             WholeNode("whole", 1)}),
                NewPolicy(GetParam()));
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Allocation> big = engine.Place(MigRequest("3g.40gb"));
    ASSERT_TRUE(big.ok()) << big.status();
    EXPECT_EQ(big->node, 1);
    absl::StatusOr<Allocation> small = engine.Place(MigRequest("1g.10gb"));
    ASSERT_TRUE(small.ok()) << small.status();
    EXPECT_EQ(small->node, 0);
  }
  EXPECT_FALSE(engine.Place(MigRequest("3g.40gb")).ok());
  EXPECT_FALSE(engine.Place(MigRequest("1g.10gb")).ok());
  absl::StatusOr<Allocation> whole = engine.Place(Whole(1));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->node, 2);
  EXPECT_FALSE(engine.Place(Whole(1)).ok());
}

TEST_P(FixedLayoutPolicy, MigClassResolvesPerModelAgainstEachLayout) {
  const int a30_1g = ProfileIndex("A30-24GB", "1g.6gb");
  Engine engine(MakeCluster({FixedNode("h100", {Fixed({H100("2g.20gb", 4)})}),
                             FixedNode("a30", {Fixed({{a30_1g, 2}})}, "A30-24GB")}),
                NewPolicy(GetParam()));
  Request request;
  request.num_gpu = 1;
  request.mig_class = {{"H100-80GB", "2g.20gb"}, {"A30-24GB", "1g.6gb"}};
  std::set<int> nodes;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Allocation> allocation = engine.Place(request);
    ASSERT_TRUE(allocation.ok()) << i << ": " << allocation.status();
    nodes.insert(allocation->node);
    if (allocation->node == 0) {
      EXPECT_EQ(InstanceOf(allocation->gpus[0]), H100("2g.20gb", 4));
    } else {
      EXPECT_EQ(InstanceOf(allocation->gpus[0]), (FixedInstance{a30_1g, 2}));
    }
  }
  EXPECT_EQ(nodes, (std::set<int>{0, 1}));
  EXPECT_FALSE(engine.Place(request).ok());
}

INSTANTIATE_TEST_SUITE_P(Policies, FixedLayoutPolicy,
                         ::testing::Values("gpuslice", "bestfit", "fgd", "dotprod", "gpupacking",
                                           "gpuclustering", "random"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param;
                         });

TEST(FixedLayoutPolicy, CoversEveryPolicy) {
  // The suite above lists the policies by name; a new one must be added there.
  std::vector<std::string> names = PolicyNames();
  std::sort(names.begin(), names.end());
  std::vector<std::string> listed = {"gpuslice",   "bestfit",       "fgd",   "dotprod",
                                     "gpupacking", "gpuclustering", "random"};
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(names, listed);
}

TEST(FixedLayoutEngine, LearningGpuslicePolicyHandsOutOnlyFixedInstances) {
  // The gpuslice policy with typical requests that favour other placements.
  std::vector<TypicalRequest> typical = {{MigRequest("1g.10gb"), 0.5}, {MigRequest("4g"), 0.5}};
  Engine engine(MakeCluster({FixedNode(
                    "m", {Fixed({H100("1g.10gb", 6), H100("1g.10gb", 5), H100("3g.40gb", 0)})})}),
                NewPolicy("gpuslice", typical));
  std::set<int> starts;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Allocation> allocation = engine.Place(MigRequest("1g.10gb"));
    ASSERT_TRUE(allocation.ok()) << allocation.status();
    starts.insert(allocation->gpus[0].mig_start);
  }
  EXPECT_EQ(starts, (std::set<int>{5, 6}));
  EXPECT_FALSE(engine.Place(MigRequest("1g.10gb")).ok());
}

// ---------------------------------------------------------------------------------------------
// Property: random MIG models, random valid fixed layouts, random acquire/release sequences.

// 200 cases (RC_PARAMS, when set, wins); each case is small (about a millisecond).
[[maybe_unused]] const bool kCases = [] {
  return setenv("RC_PARAMS", "max_success=200", 0) == 0;
}();

template <typename T>
T Full(rc::Gen<T> gen) {
  return *rc::gen::resize(rc::kNominalSize, std::move(gen));
}
int Int(int low, int high) { return Full(rc::gen::inRange(low, high + 1)); }

const std::vector<const hw::GpuModel*>& MigModels() {
  static const std::vector<const hw::GpuModel*> models = [] {
    std::vector<const hw::GpuModel*> out;
    for (const hw::GpuModel& model : hw::Catalog::Builtin().models()) {
      if (model.mig_capable()) out.push_back(&model);
    }
    return out;
  }();
  return models;
}

// A random valid layout: random (profile, start) tries, each kept when it fits beside the others.
FixedLayout RandomLayout(const geometry::Shape& shape) {
  FixedLayout layout;
  layout.fixed = true;
  geometry::Occupancy occupancy{};
  const int tries = Int(0, 12);
  for (int i = 0; i < tries; ++i) {
    const int profile = Int(0, shape.profile_count() - 1);
    const int start = Int(0, shape.units() - 1);
    if (!shape.CanAdd(occupancy, profile, start, {}).ok()) continue;
    shape.Add(occupancy, profile, start);
    layout.instances.push_back({profile, start});
  }
  return layout;
}

struct Live {
  Allocation allocation;
  bool on_fixed = false;
};

void RunFixedSteps(const std::vector<NodeSpec>& specs, const std::string& policy,
                   const std::vector<std::tuple<int, int, int>>& steps, int* granted_fixed,
                   int* rejected_mig) {
  absl::StatusOr<Cluster> created = Cluster::Create(specs);
  RC_ASSERT(created.ok());
  Engine engine(*std::move(created), NewPolicy(policy));
  const Cluster& cluster = engine.cluster();
  std::vector<Live> live;
  // (node, gpu) -> instances held on fixed GPUs, tracked independently of the cluster.
  std::map<std::pair<int, int>, std::vector<FixedInstance>> held;
  for (const auto& [kind, a, b] : steps) {
    if (kind == 0) {  // release
      if (live.empty()) continue;
      const size_t k = static_cast<size_t>(a) % live.size();
      RC_ASSERT(engine.Release(live[k].allocation).ok());
      const Allocation& gone = live[k].allocation;
      for (const GpuClaim& claim : gone.gpus) {
        std::vector<FixedInstance>& on = held[{gone.node, claim.gpu}];
        auto it = std::find(on.begin(), on.end(), InstanceOf(claim));
        if (live[k].on_fixed) {
          RC_ASSERT(it != on.end());
          on.erase(it);
        }
      }
      live.erase(live.begin() + static_cast<long>(k));
      continue;
    }
    Request request;
    if (kind == 1) {
      request = Whole(1 + a % 2);
    } else {
      // A profile of one of the nodes' models (possibly missing on the others).
      const NodeSpec& spec = specs[static_cast<size_t>(a) % specs.size()];
      const auto& profiles = spec.hardware->mig->profiles;
      request = MigRequest(profiles[static_cast<size_t>(b) % profiles.size()].name);
    }
    absl::StatusOr<Allocation> allocation = engine.Place(request);
    if (allocation.ok()) {
      const Allocation& got = *allocation;
      RC_ASSERT(got.gpus.size() == static_cast<size_t>(request.num_gpu));
      bool on_fixed = false;
      for (const GpuClaim& claim : got.gpus) {
        const NodeSpec& spec = cluster.spec(got.node);
        const bool fixed = !spec.fixed.empty() && spec.fixed[static_cast<size_t>(claim.gpu)].fixed;
        if (request.whole()) {
          RC_ASSERT(claim.whole);
          RC_ASSERT(!fixed);  // whole requests never land on a fixed GPU
          continue;
        }
        RC_ASSERT(!claim.whole);
        RC_ASSERT(claim.mig_profile == cluster.MigProfileFor(got.node, request));
        if (!fixed) continue;
        on_fixed = true;
        const std::vector<FixedInstance>& layout =
            spec.fixed[static_cast<size_t>(claim.gpu)].instances;
        // One of the GPU's fixed instances ...
        RC_ASSERT(std::find(layout.begin(), layout.end(), InstanceOf(claim)) != layout.end());
        // ... not held by another live claim.
        std::vector<FixedInstance>& on = held[{got.node, claim.gpu}];
        RC_ASSERT(std::find(on.begin(), on.end(), InstanceOf(claim)) == on.end());
        on.push_back(InstanceOf(claim));
        *granted_fixed += 1;
      }
      live.push_back({got, on_fixed});
    } else {
      RC_ASSERT(allocation.status().code() != absl::StatusCode::kInvalidArgument);
      if (!request.mig()) continue;
      *rejected_mig += 1;
      // No free fixed instance of the profile on any fixed GPU of a node the request may use, and
      // no room on demand on the others.
      for (int n = 0; n < cluster.node_count(); ++n) {
        const NodeSpec& spec = cluster.spec(n);
        const int profile = cluster.MigProfileFor(n, request);
        if (profile < 0) continue;
        for (int g = 0; g < spec.gpus; ++g) {
          const bool fixed = !spec.fixed.empty() && spec.fixed[static_cast<size_t>(g)].fixed;
          if (!fixed) {
            const GpuState& state = cluster.gpus(n)[static_cast<size_t>(g)];
            RC_ASSERT(state.taken_whole ||
                      cluster.shape(n)->FreeCount(state.occupancy, profile) == 0);
            continue;
          }
          const std::vector<FixedInstance>& on = held[{n, g}];
          for (const FixedInstance& instance : spec.fixed[static_cast<size_t>(g)].instances) {
            if (instance.profile != profile) continue;
            RC_ASSERT(std::find(on.begin(), on.end(), instance) != on.end());
          }
        }
      }
    }
  }
  // Everything released: the cluster is empty again.
  for (const Live& l : live) RC_ASSERT(engine.Release(l.allocation).ok());
  RC_ASSERT(engine.cluster().allocated_milli() == 0);
  for (int n = 0; n < cluster.node_count(); ++n) {
    for (const GpuState& state : cluster.gpus(n)) {
      RC_ASSERT(state.holders == 0);
      RC_ASSERT(state.occupancy.used == 0u);
    }
  }
}

RC_GTEST_PROP(FixedLayoutProperty, OnlyFixedInstancesAreGrantedAndRejectionsAreJustified, ()) {
  std::vector<NodeSpec> specs;
  const int nodes = Int(1, 3);
  for (int i = 0; i < nodes; ++i) {
    const hw::GpuModel* model =
        MigModels()[static_cast<size_t>(Int(0, static_cast<int>(MigModels().size()) - 1))];
    NodeSpec spec = MigNode("node-" + std::to_string(i), Int(1, 3), model->id);
    const geometry::Shape shape(*model);
    for (int g = 0; g < spec.gpus; ++g) {
      // Mostly fixed; now and then a GPU partitioned on demand beside them.
      spec.fixed.push_back(Int(0, 4) == 0 ? FixedLayout{} : RandomLayout(shape));
    }
    specs.push_back(std::move(spec));
  }
  std::vector<std::tuple<int, int, int>> steps(static_cast<size_t>(Int(1, 40)));
  for (auto& step : steps) {
    const int roll = Int(0, 9);
    step = {roll < 3 ? 0 : (roll == 3 ? 1 : 2), Int(0, 100), Int(0, 100)};
  }
  int granted_fixed = 0;
  int rejected_mig = 0;
  for (const std::string policy : {"gpuslice", "bestfit", "fgd"}) {
    RunFixedSteps(specs, policy, steps, &granted_fixed, &rejected_mig);
  }
  RC_CLASSIFY(granted_fixed > 0, "fixed instances granted");
  RC_CLASSIFY(rejected_mig > 0, "MIG requests rejected");
}

}  // namespace
}  // namespace gpuslice::place
