// The placement policies (gpuslice/place/policy.h) on small hand-made clusters: each policy's
// documented choice, the integer scores of ../shared/reference/fgd-protocol.md §4, the default GPU
// choice, typical requests and the policy registry.
#include "gpuslice/place/policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "gpuslice/place/engine.h"
#include "place/place_test_util.h"

namespace gpuslice::place {
namespace {

using testing::CpuOnly;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MakeAllocation;
using testing::MakeCluster;
using testing::MigNode;
using testing::MigRequest;
using testing::NewPolicy;
using testing::Share;
using testing::ShareClaimOf;
using testing::SharedNode;
using testing::Whole;

std::int64_t ScoreOf(const Policy& policy, const Cluster& cluster, int node,
                     const Request& request) {
  EXPECT_TRUE(cluster.Fits(node, request)) << "ScoreNode requires a fitting node";
  return policy.ScoreNode(cluster, node, request).primary;
}

// Applies a share of `milli` on `gpu` of `node` (test setup).
void Use(Cluster& cluster, int node, int gpu, int milli) {
  ASSERT_TRUE(cluster.Apply(MakeAllocation(node, Share(milli), {ShareClaimOf(gpu, milli)})).ok());
}

// The node the engine gives `request` to, with the policy and default ranks.
int PlacedNode(const Cluster& cluster, const std::string& policy, const Request& request,
               std::vector<TypicalRequest> typical = {}) {
  Engine engine(cluster, NewPolicy(policy, std::move(typical)));
  absl::StatusOr<Allocation> allocation = engine.Place(request);
  EXPECT_TRUE(allocation.ok()) << allocation.status();
  return allocation.ok() ? allocation->node : -1;
}

std::vector<int> GpusOf(const std::vector<GpuClaim>& claims) {
  std::vector<int> gpus;
  for (const GpuClaim& claim : claims) gpus.push_back(claim.gpu);
  return gpus;
}

TypicalRequest Typical(Request request, double weight) {
  TypicalRequest typical;
  typical.request = std::move(request);
  typical.weight = weight;
  return typical;
}

// ---------------------------------------------------------------------------------------------
// Registry

TEST(PolicyRegistry, SevenNamesInReportOrder) {
  EXPECT_THAT(PolicyNames(), ElementsAre("random", "dotprod", "gpuclustering", "gpupacking",
                                         "bestfit", "fgd", "gpuslice"));
  for (const std::string& name : PolicyNames()) {
    absl::StatusOr<std::unique_ptr<Policy>> policy = MakePolicy(name, {});
    ASSERT_TRUE(policy.ok()) << name;
    EXPECT_EQ((*policy)->name(), name);
    EXPECT_EQ((*policy)->picks_uniformly(), name == "random");
  }
}

TEST(PolicyRegistry, UnknownNameIsNotFoundAndListsTheNames) {
  absl::StatusOr<std::unique_ptr<Policy>> policy = MakePolicy("tetris", {});
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kNotFound);
  const std::string message(policy.status().message());
  EXPECT_THAT(message, HasSubstr("'tetris'"));
  for (const std::string& name : PolicyNames()) EXPECT_THAT(message, HasSubstr(name));
  EXPECT_FALSE(MakePolicy("", {}).ok());
  EXPECT_FALSE(MakePolicy("FGD", {}).ok());
}

// ---------------------------------------------------------------------------------------------
// bestfit: the node left with the least free CPU and GPU.

TEST(BestFitPolicy, PicksTheNodeLeftWithLeastFreeCpuAndGpu) {
  const Cluster cluster = MakeCluster({SharedNode("big", 8, 64000), SharedNode("small", 4, 32000)});
  const std::unique_ptr<Policy> policy = NewPolicy("bestfit");
  const Request request = Whole(1, 1000);
  // s = 0.5·(63000/128000) + 0.5·(7000/8000) = 0.6836 -> trunc(31.6) = 31
  EXPECT_EQ(ScoreOf(*policy, cluster, 0, request), 31);
  // s = 0.5·(31000/128000) + 0.5·(3000/8000) = 0.3086 -> trunc(69.1) = 69
  EXPECT_EQ(ScoreOf(*policy, cluster, 1, request), 69);
  EXPECT_EQ(PlacedNode(cluster, "bestfit", request), 1);
}

TEST(BestFitPolicy, CountsPartlyUsedGpus) {
  Cluster cluster = MakeCluster({SharedNode("a", 2), SharedNode("b", 2)});
  Use(cluster, 1, 0, 600);
  EXPECT_EQ(PlacedNode(cluster, "bestfit", Share(300)), 1);
  EXPECT_EQ(PlacedNode(cluster, "bestfit", Whole(1)), 1);
  // Less free CPU wins among equal GPUs.
  const Cluster cpu = MakeCluster({SharedNode("a", 1, 64000), SharedNode("b", 1, 16000)});
  EXPECT_EQ(PlacedNode(cpu, "bestfit", Share(100, 1000)), 1);
}

// ---------------------------------------------------------------------------------------------
// gpupacking: partly used GPUs, then used nodes' free GPUs, then empty nodes (smaller first).

TEST(GpuPackingPolicy, PrefersAPartlyUsedGpuOverAnEmptyNode) {
  Cluster cluster =
      MakeCluster({SharedNode("empty2", 2), SharedNode("empty4", 4), SharedNode("used8", 8)});
  Use(cluster, 2, 3, 500);
  const std::unique_ptr<Policy> policy = NewPolicy("gpupacking");
  // Partly used GPU with 500 free: max(100 - trunc(500·100/1000)/10, 50) = 95.
  EXPECT_EQ(ScoreOf(*policy, cluster, 2, Share(300)), 95);
  EXPECT_EQ(ScoreOf(*policy, cluster, 0, Share(300)), 31);  // max(33 - 2, 2)
  EXPECT_EQ(ScoreOf(*policy, cluster, 1, Share(300)), 29);  // max(33 - 4, 4)
  Engine engine(cluster, NewPolicy("gpupacking"));
  absl::StatusOr<Allocation> allocation = engine.Place(Share(300));
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  EXPECT_EQ(allocation->node, 2);
  EXPECT_THAT(GpusOf(allocation->gpus), ElementsAre(3));
  // A whole GPU on a used node: max(50 - 1, 33) = 49, still above every empty node.
  EXPECT_EQ(ScoreOf(*policy, cluster, 2, Whole(1)), 49);
  EXPECT_EQ(PlacedNode(cluster, "gpupacking", Whole(1)), 2);
  // A tighter partly used GPU scores higher: 900 free -> 100 - 90/10 = 91.
  Cluster looser = MakeCluster({SharedNode("a", 1)});
  Use(looser, 0, 0, 100);
  EXPECT_EQ(ScoreOf(*policy, looser, 0, Share(300)), 91);
}

TEST(GpuPackingPolicy, AmongEmptyNodesTheSmallerOne) {
  const Cluster cluster = MakeCluster({SharedNode("four", 4), SharedNode("two", 2)});
  EXPECT_EQ(PlacedNode(cluster, "gpupacking", Share(300)), 1);
  EXPECT_EQ(PlacedNode(cluster, "gpupacking", Whole(1)), 1);
  const std::unique_ptr<Policy> policy = NewPolicy("gpupacking");
  // max(33 - f, f) over the node's GPU count.
  for (int gpus : {1, 2, 8, 16, 17, 32, 40}) {
    const Cluster empty = MakeCluster({SharedNode("n", gpus)});
    EXPECT_EQ(ScoreOf(*policy, empty, 0, Share(100)), std::max(33 - gpus, gpus)) << gpus;
  }
  // CPU-only requests score 0 everywhere.
  EXPECT_EQ(ScoreOf(*policy, cluster, 0, CpuOnly(100)), 0);
}

// ---------------------------------------------------------------------------------------------
// gpuclustering: nodes already running the same kind of GPU request.

TEST(GpuClusteringPolicy, PrefersNodesRunningTheSameKind) {
  Cluster cluster = MakeCluster({SharedNode("whole1", 8), SharedNode("shares", 8),
                                 SharedNode("empty", 8), SharedNode("mixed", 8)});
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, Whole(1), {Cluster::WholeClaim(0)})).ok());
  Use(cluster, 1, 0, 500);
  ASSERT_TRUE(cluster.Apply(MakeAllocation(3, Whole(1), {Cluster::WholeClaim(0)})).ok());
  Use(cluster, 3, 1, 500);
  // Cpu-only pods are not counted as a kind.
  ASSERT_TRUE(cluster.Apply(MakeAllocation(2, CpuOnly(100), {})).ok());
  const std::unique_ptr<Policy> policy = NewPolicy("gpuclustering");
  // base = 25·(8000 − gpuFree)/8000 (integer division).
  EXPECT_EQ(ScoreOf(*policy, cluster, 0, Share(300)), 3);       // other kind only
  EXPECT_EQ(ScoreOf(*policy, cluster, 1, Share(300)), 1 + 75);  // same kind only
  EXPECT_EQ(ScoreOf(*policy, cluster, 2, Share(300)), 25);      // no kind
  EXPECT_EQ(ScoreOf(*policy, cluster, 3, Share(300)), 4 + 50);  // same and other
  EXPECT_EQ(PlacedNode(cluster, "gpuclustering", Share(300)), 1);
  EXPECT_EQ(ScoreOf(*policy, cluster, 0, Whole(1)), 3 + 75);
  EXPECT_EQ(PlacedNode(cluster, "gpuclustering", Whole(1)), 0);
  // "2 GPUs" is another kind than "1 GPU": the empty node wins.
  EXPECT_EQ(ScoreOf(*policy, cluster, 0, Whole(2)), 3);
  EXPECT_EQ(PlacedNode(cluster, "gpuclustering", Whole(2)), 2);
  EXPECT_EQ(ScoreOf(*policy, cluster, 1, CpuOnly(100)), 0);
}

// ---------------------------------------------------------------------------------------------
// dotprod: the smallest dot product of free (CPU, GPU) and the request.

TEST(DotProductPolicy, PrefersTheSmallerDotProduct) {
  const Cluster cluster =
      MakeCluster({SharedNode("roomy", 8, 128000), SharedNode("tight", 1, 16000)});
  const std::unique_ptr<Policy> policy = NewPolicy("dotprod");
  const Request request = Whole(1, 8000);
  // d = (1·0.0625 + 1·0.125)/2 -> trunc(100·(1 − 0.09375)) = 90
  EXPECT_EQ(ScoreOf(*policy, cluster, 0, request), 90);
  // d = (0.125·0.0625 + 0.125·0.125)/2 -> trunc(98.83) = 98
  EXPECT_EQ(ScoreOf(*policy, cluster, 1, request), 98);
  EXPECT_EQ(PlacedNode(cluster, "dotprod", request), 1);
  // CPU-only: the node with less free CPU. d = 1·0.0625/2 -> 96; d = 0.125·0.0625/2 -> 99.
  EXPECT_EQ(ScoreOf(*policy, cluster, 0, CpuOnly(8000)), 96);
  EXPECT_EQ(ScoreOf(*policy, cluster, 1, CpuOnly(8000)), 99);
  EXPECT_EQ(PlacedNode(cluster, "dotprod", CpuOnly(8000)), 1);
}

// ---------------------------------------------------------------------------------------------
// The default GPU choice.

TEST(BestFitGpus, TightestFittingGpuLowestIndexOnTies) {
  Cluster cluster = MakeCluster({SharedNode("n", 6)});
  Use(cluster, 0, 1, 400);  // 600 free
  Use(cluster, 0, 2, 600);  // 400 free
  Use(cluster, 0, 3, 600);  // 400 free
  EXPECT_THAT(GpusOf(BestFitGpus(cluster, 0, Share(300))), ElementsAre(2));
  EXPECT_THAT(GpusOf(BestFitGpus(cluster, 0, Share(400))), ElementsAre(2));
  EXPECT_THAT(GpusOf(BestFitGpus(cluster, 0, Share(500))), ElementsAre(1));
  EXPECT_THAT(GpusOf(BestFitGpus(cluster, 0, Share(700))), ElementsAre(0));
  const std::vector<GpuClaim> share = BestFitGpus(cluster, 0, Share(300));
  ASSERT_EQ(share.size(), 1u);
  EXPECT_EQ(share[0].milli, 300);
  EXPECT_FALSE(share[0].whole);
  // Whole GPUs: the lowest-index completely free ones.
  const std::vector<GpuClaim> whole = BestFitGpus(cluster, 0, Whole(2));
  EXPECT_THAT(GpusOf(whole), ElementsAre(0, 4));
  for (const GpuClaim& claim : whole) EXPECT_TRUE(claim.whole);
  EXPECT_THAT(GpusOf(BestFitGpus(cluster, 0, Whole(3))), ElementsAre(0, 4, 5));
  EXPECT_TRUE(BestFitGpus(cluster, 0, CpuOnly(10)).empty());
  // The baselines use it.
  for (const char* name : {"dotprod", "gpuclustering", "gpupacking", "bestfit"}) {
    EXPECT_THAT(GpusOf(NewPolicy(name)->ChooseGpus(cluster, 0, Share(300))), ElementsAre(2))
        << name;
  }
}

TEST(BestFitGpus, MigGpusByFreeComputeSlices) {
  Cluster cluster = MakeCluster({MigNode("m", 3)});
  const Request three = MigRequest("3g");
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, three, {*cluster.ShareClaim(0, 2, three)})).ok());
  const std::vector<GpuClaim> claims = BestFitGpus(cluster, 0, MigRequest("1g"));
  ASSERT_EQ(claims.size(), 1u);
  EXPECT_EQ(claims[0].gpu, 2);
  EXPECT_EQ(cluster.shape(0)->profile(claims[0].mig_profile).name, "1g.10gb");
  // The 3g went to start 4, which keeps the 4g at start 0 possible: GPU 2 is still the tightest.
  EXPECT_EQ(cluster.gpus(0)[2].occupancy.used, 0xF0u);
  EXPECT_THAT(GpusOf(BestFitGpus(cluster, 0, MigRequest("4g"))), ElementsAre(2));
  // A 7g needs an empty GPU: the lowest-index one.
  EXPECT_THAT(GpusOf(BestFitGpus(cluster, 0, MigRequest("7g"))), ElementsAre(0));
}

// ---------------------------------------------------------------------------------------------
// fgd

// Mostly whole-GPU requests, some 500-milli shares.
std::vector<TypicalRequest> MostlyWholeGpus() {
  return {Typical(Whole(1), 0.9), Typical(Share(500), 0.1)};
}

TEST(FgdPolicy, PutsAShareIntoTheHoleItFillsNotOntoAnEmptyGpu) {
  Cluster cluster = MakeCluster({SharedNode("n", 2)});
  Use(cluster, 0, 1, 500);
  std::unique_ptr<Policy> policy = NewPolicy("fgd", MostlyWholeGpus());
  // F before = 0.9·500 (the whole-GPU typical cannot use GPU 1's 500) = 450; on GPU 1: F = 0,
  // score trunc(100·sigmoid(0.45)) = 61; on GPU 0: F = 0.9·1000, score trunc(100·sigmoid(-0.45)).
  EXPECT_EQ(ScoreOf(*policy, cluster, 0, Share(500)), 61);
  EXPECT_THAT(GpusOf(policy->ChooseGpus(cluster, 0, Share(500))), ElementsAre(1));
}

TEST(FgdPolicy, PicksTheNodeThatReducesFragmentation) {
  // Node 0 has an empty GPU and the lower rank; node 1 a GPU with exactly 500 free.
  Cluster cluster = MakeCluster({SharedNode("empty", 1), SharedNode("hole", 1)});
  Use(cluster, 1, 0, 500);
  std::unique_ptr<Policy> policy = NewPolicy("fgd", MostlyWholeGpus());
  EXPECT_EQ(ScoreOf(*policy, cluster, 1, Share(500)), 61);
  EXPECT_EQ(ScoreOf(*policy, cluster, 0, Share(500)), 38);
  EXPECT_EQ(PlacedNode(cluster, "fgd", Share(500), MostlyWholeGpus()), 1);
  // With no typical requests there is no fragmentation: every score is 50, the rank decides.
  std::unique_ptr<Policy> blind = NewPolicy("fgd");
  EXPECT_EQ(ScoreOf(*blind, cluster, 0, Share(500)), 50);
  EXPECT_EQ(ScoreOf(*blind, cluster, 1, Share(500)), 50);
  EXPECT_EQ(PlacedNode(cluster, "fgd", Share(500)), 0);
}

// fgd-protocol.md §4.6 by hand: CPU-only typical requests and those lacking CPU or GPUs count all
// idle milli; the others the idle milli of the GPUs they cannot use.
TEST(FgdPolicy, ScoreFollowsTheFragmentationFormula) {
  Cluster cluster = MakeCluster({SharedNode("n", 2, 8000)});
  Use(cluster, 0, 0, 700);  // GPU 0: 300 free, GPU 1: 1000 free
  const std::vector<TypicalRequest> typical = {Typical(Share(500, 1000), 0.5),
                                               Typical(CpuOnly(100), 0.2), Typical(Whole(2), 0.3)};
  // F before = 0.5·300 + 0.2·1300 + 0.3·1300 = 800.
  std::unique_ptr<Policy> policy = NewPolicy("fgd", typical);
  // 200 milli on GPU 0: F = 0.5·100 + 0.2·1100 + 0.3·1100 = 600, ΔF = 200 -> trunc(54.98).
  // On GPU 1: F = 0.5·300 + 0.2·1100 + 0.3·1100 = 700, ΔF = 100 -> trunc(52.50).
  EXPECT_EQ(ScoreOf(*policy, cluster, 0, Share(200, 1000)), 54);
  EXPECT_THAT(GpusOf(policy->ChooseGpus(cluster, 0, Share(200, 1000))), ElementsAre(0));
  // Taking 7500 of the 8000 milli-CPU leaves the 500-milli typical request without CPU: it counts
  // all idle milli wherever the share goes, F = 1100 on either GPU, ΔF = −300 -> trunc(42.56), and
  // the first GPU wins the tie.
  EXPECT_EQ(ScoreOf(*policy, cluster, 0, Share(200, 7500)), 42);
  EXPECT_THAT(GpusOf(policy->ChooseGpus(cluster, 0, Share(200, 7500))), ElementsAre(0));
  // A CPU-only request changes no GPU: ΔF = 0 -> 50.
  EXPECT_EQ(ScoreOf(*policy, cluster, 0, CpuOnly(1000)), 50);
}

TEST(FgdPolicy, WholeGpusAreTheLowestFreeOnes) {
  Cluster cluster = MakeCluster({SharedNode("n", 4)});
  Use(cluster, 0, 0, 100);
  std::unique_ptr<Policy> policy = NewPolicy("fgd", MostlyWholeGpus());
  EXPECT_THAT(GpusOf(policy->ChooseGpus(cluster, 0, Whole(2))), ElementsAre(1, 2));
}

// ---------------------------------------------------------------------------------------------
// gpuslice

// Whole GPUs and 200-milli shares: a 500-milli hole can only be filled down to 100 by the shares.
std::vector<TypicalRequest> WholeAndSmallShares() {
  return {Typical(Whole(1), 0.7), Typical(Share(200), 0.3)};
}

TEST(GpuslicePolicy, FillsAnExactHoleRatherThanOpeningAnEmptyGpu) {
  Cluster cluster = MakeCluster({SharedNode("n", 2)});
  Use(cluster, 0, 1, 500);
  std::unique_ptr<Policy> policy = NewPolicy("gpuslice", WholeAndSmallShares());
  EXPECT_THAT(GpusOf(policy->ChooseGpus(cluster, 0, Share(500))), ElementsAre(1));
  EXPECT_EQ(policy->epoch(), 0u);

  Cluster nodes = MakeCluster({SharedNode("empty", 1), SharedNode("hole", 1)});
  Use(nodes, 1, 0, 500);
  EXPECT_GT(ScoreOf(*policy, nodes, 1, Share(500)), ScoreOf(*policy, nodes, 0, Share(500)));
  EXPECT_EQ(PlacedNode(nodes, "gpuslice", Share(500), WholeAndSmallShares()), 1);
}

TEST(GpuslicePolicy, LearnsTheMixAndBumpsTheEpoch) {
  Cluster cluster = MakeCluster({SharedNode("n", 2)});
  Use(cluster, 0, 1, 500);
  std::unique_ptr<Policy> policy = NewPolicy("gpuslice");  // no typical requests: learns
  // Knowing nothing, every free milli is as good as wasted: both GPUs score the same and the
  // lower index wins.
  EXPECT_THAT(GpusOf(policy->ChooseGpus(cluster, 0, Share(500))), ElementsAre(0));
  for (int i = 0; i < 15; ++i) {
    policy->Observe(i % 3 == 0 ? Share(200) : Whole(1), true);
    EXPECT_EQ(policy->epoch(), 0u) << i;
  }
  policy->Observe(Whole(1), false);
  EXPECT_EQ(policy->epoch(), 1u);
  // Now it knows whole GPUs are most of the stream.
  EXPECT_THAT(GpusOf(policy->ChooseGpus(cluster, 0, Share(500))), ElementsAre(1));
  for (int i = 16; i < 31; ++i) policy->Observe(Whole(1), true);
  EXPECT_EQ(policy->epoch(), 1u);
  policy->Observe(Whole(1), true);
  EXPECT_EQ(policy->epoch(), 2u);

  // Given typical requests, it does not learn.
  std::unique_ptr<Policy> fixed = NewPolicy("gpuslice", WholeAndSmallShares());
  for (int i = 0; i < 64; ++i) fixed->Observe(Whole(1), true);
  EXPECT_EQ(fixed->epoch(), 0u);
}

TEST(GpuslicePolicy, MigShareGoesIntoTheUsedGpu) {
  // An A100 with a 4g: a 3g fits the rest exactly; opening the empty GPU would strand its rest.
  Cluster cluster = MakeCluster({MigNode("m", 2)});
  const Request four = MigRequest("4g");
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, four, {*cluster.ShareClaim(0, 1, four)})).ok());
  std::unique_ptr<Policy> policy =
      NewPolicy("gpuslice", {Typical(Whole(1), 0.8), Typical(MigRequest("3g"), 0.2)});
  EXPECT_THAT(GpusOf(policy->ChooseGpus(cluster, 0, MigRequest("3g"))), ElementsAre(1));
}

// Regression (src/place/waste.cc, WasteModel::MigAt): the memo of MIG waste was once keyed by
// (shape, used placement units, instance count, CPU) but not by which profiles hold those units, so
// a 4g.40gb and a 3g.40gb at start 0 (both units 0-3, one instance) shared an entry. The gpuslice
// policy's scores then depend on what it scored before, breaking the engine's contract that a score
// depends only on the node's state and the request (and the engine's incremental cache: see
// EngineCache.SameDecisionsAsAFreshEngineGpuslice). Here, with only 3g requests typical, node x
// (4g@0) wastes nothing (a 3g fills it) and node y (3g@0) strands one slice (142 milli). A 1g on y
// adds 428 - 142 = 286 of waste: score floor(-2.86) = -3. After a 3g was scored on x, y's waste
// before is taken from x's memo entry (0): score -5.
TEST(GpuslicePolicy, MigScoreDoesNotDependOnWhatWasScoredBefore) {
  Cluster cluster = MakeCluster({MigNode("x", 1), MigNode("y", 1)});
  auto place = [&](int node, const std::string& profile) {
    const Request request = MigRequest(profile);
    GpuClaim claim;
    claim.gpu = 0;
    claim.mig_profile = cluster.MigProfileFor(node, request);
    claim.mig_start = 0;
    claim.milli = cluster.MigMilli(node, claim.mig_profile);
    ASSERT_TRUE(cluster.Apply(MakeAllocation(node, request, {claim})).ok());
  };
  place(0, "4g");
  place(1, "3g");
  ASSERT_EQ(cluster.gpus(0)[0].occupancy.used, cluster.gpus(1)[0].occupancy.used);
  ASSERT_NE(cluster.FreeMilli(0, 0), cluster.FreeMilli(1, 0));
  const std::vector<TypicalRequest> typical = {Typical(MigRequest("3g"), 1.0)};
  std::unique_ptr<Policy> fresh = NewPolicy("gpuslice", typical);
  EXPECT_EQ(ScoreOf(*fresh, cluster, 1, MigRequest("1g")), -3);
  std::unique_ptr<Policy> used = NewPolicy("gpuslice", typical);
  EXPECT_EQ(ScoreOf(*used, cluster, 0, MigRequest("3g")), 0);  // fills x exactly
  EXPECT_EQ(ScoreOf(*used, cluster, 1, MigRequest("1g")), -3);
}

// Regression (src/place/waste.cc, WasteModel::MigAt): a typical request's MIG profile was once
// resolved by a rule of its own instead of Cluster::MigProfileFor: a full profile name ("3g.40gb")
// never matched (only "<n>g" did), and a share's milli was rounded up to 10 first, so a 281-milli
// share (2 slices: 281·7 <= 2000) counted as a 3-slice request. Expected: the same scores as with
// the profile the cluster resolves the typical request to.
TEST(GpuslicePolicy, TypicalMigRequestsResolveAsTheClusterDoes) {
  Cluster cluster = MakeCluster({MigNode("m", 1)});
  const Request four = MigRequest("4g");
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, four, {*cluster.ShareClaim(0, 0, four)})).ok());
  ASSERT_EQ(cluster.shape(0)->profile(cluster.MigProfileFor(0, Share(281))).name, "2g.20gb");
  auto score = [&](const Request& typical, const Request& request) {
    return ScoreOf(*NewPolicy("gpuslice", {Typical(typical, 1.0)}), cluster, 0, request);
  };
  for (const Request& request : {MigRequest("1g"), MigRequest("2g"), MigRequest("3g")}) {
    EXPECT_EQ(score(MigRequest("3g.40gb"), request), score(MigRequest("3g"), request))
        << request.mig_profile;
    EXPECT_EQ(score(Share(281), request), score(MigRequest("2g"), request)) << request.mig_profile;
  }
}

// ---------------------------------------------------------------------------------------------
// random

TEST(RandomPolicy, OnlyFeasibleNodesAndEveryFeasibleNodeEventually) {
  const Cluster cluster =
      MakeCluster({SharedNode("a", 1), SharedNode("small1", 1, 500), SharedNode("b", 1),
                   SharedNode("small2", 1, 500), SharedNode("c", 1)});
  auto sequence = [&](std::uint64_t seed) {
    Engine engine(cluster, NewPolicy("random", {}, seed));
    std::vector<int> nodes;
    for (int i = 0; i < 200; ++i) {
      absl::StatusOr<Allocation> allocation = engine.Place(CpuOnly(1000));
      EXPECT_TRUE(allocation.ok()) << allocation.status();
      if (!allocation.ok()) break;
      nodes.push_back(allocation->node);
      EXPECT_TRUE(engine.Release(*allocation).ok());
    }
    return nodes;
  };
  const std::vector<int> first = sequence(7);
  const std::set<int> seen(first.begin(), first.end());
  EXPECT_EQ(seen, (std::set<int>{0, 2, 4}));
  EXPECT_EQ(sequence(7), first);
  EXPECT_NE(sequence(8), first);
}

TEST(RandomPolicy, RandomFittingGpuForShares) {
  Cluster cluster = MakeCluster({SharedNode("n", 4)});
  Use(cluster, 0, 2, 900);
  std::unique_ptr<Policy> policy = NewPolicy("random", {}, 3);
  std::set<int> gpus;
  for (int i = 0; i < 200; ++i) {
    const std::vector<GpuClaim> claims = policy->ChooseGpus(cluster, 0, Share(500));
    ASSERT_EQ(claims.size(), 1u);
    gpus.insert(claims[0].gpu);
    EXPECT_EQ(claims[0].milli, 500);
  }
  EXPECT_EQ(gpus, (std::set<int>{0, 1, 3}));
  // Whole GPUs: the lowest free ones.
  EXPECT_THAT(GpusOf(policy->ChooseGpus(cluster, 0, Whole(2))), ElementsAre(0, 1));
}

// ---------------------------------------------------------------------------------------------
// TypicalRequests

TEST(TypicalRequests, MostFrequentFirstTiesByLargerKeyWeightsSumToOne) {
  std::vector<Request> requests;
  for (int i = 0; i < 5; ++i) requests.push_back(Share(500, 1000));
  for (int i = 0; i < 3; ++i) {
    Request whole = Whole(1, 2000);
    whole.memory_mib = 4096 * (i + 1);  // memory is not part of the key
    requests.push_back(whole);
  }
  requests.push_back(CpuOnly(0));
  Request constrained = Share(500, 1000);
  constrained.models = {"G2"};
  requests.push_back(constrained);

  const std::vector<TypicalRequest> typical = TypicalRequests(requests);
  ASSERT_EQ(typical.size(), 4u);
  EXPECT_EQ(typical[0].request.cpu_milli, 1000);
  EXPECT_EQ(typical[0].request.gpu_milli, 500);
  EXPECT_TRUE(typical[0].request.models.empty());
  EXPECT_DOUBLE_EQ(typical[0].weight, 0.5);
  EXPECT_TRUE(typical[1].request.whole());
  EXPECT_EQ(typical[1].request.memory_mib, 0);
  EXPECT_DOUBLE_EQ(typical[1].weight, 0.3);
  // Count 1 each: the larger key (cpu 1000 > 0) first.
  EXPECT_THAT(typical[2].request.models, ElementsAre("G2"));
  EXPECT_TRUE(typical[3].request.cpu_only());
  double sum = 0;
  for (const TypicalRequest& t : typical) sum += t.weight;
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(TypicalRequests, CoverageCutAndRenormalisation) {
  std::vector<Request> requests;
  for (int i = 0; i < 60; ++i) requests.push_back(Share(300));
  for (int i = 0; i < 36; ++i) requests.push_back(Whole(1));
  for (int i = 0; i < 3; ++i) requests.push_back(Whole(2));
  requests.push_back(Share(700));
  // 60 + 36 = 96 % >= 95 %: two kept, weights 60/96 and 36/96.
  std::vector<TypicalRequest> typical = TypicalRequests(requests);
  ASSERT_EQ(typical.size(), 2u);
  EXPECT_DOUBLE_EQ(typical[0].weight, 60.0 / 96);
  EXPECT_DOUBLE_EQ(typical[1].weight, 36.0 / 96);
  EXPECT_EQ(TypicalRequests(requests, 0.97).size(), 3u);
  EXPECT_EQ(TypicalRequests(requests, 1.0).size(), 4u);
  ASSERT_EQ(TypicalRequests(requests, 0.1).size(), 1u);
  EXPECT_DOUBLE_EQ(TypicalRequests(requests, 0.1)[0].weight, 1.0);
  EXPECT_TRUE(TypicalRequests({}).empty());
}

TEST(TypicalRequests, WholeGpuWithOrWithoutMilliIsOneKey) {
  Request implicit;
  implicit.num_gpu = 1;  // gpu_milli 0 = whole
  const std::vector<Request> requests = {implicit, Whole(1), Whole(1)};
  const std::vector<TypicalRequest> typical = TypicalRequests(requests);
  ASSERT_EQ(typical.size(), 1u);
  EXPECT_DOUBLE_EQ(typical[0].weight, 1.0);
}

// Regression (src/place/policies.cc, TypicalRequests): the key was once (cpu, milli(), num_gpu,
// models), and Request::milli() is 1000 for a MIG-profile request (gpu_milli 0), so requests for
// different MIG profiles with equal CPU, and whole-GPU requests with that CPU, collapsed into one
// key. After ConvertToMig (gpuslice replay --mig) the typical requests were therefore wrong.
// Expected: one key per profile.
TEST(TypicalRequests, MigProfilesAreDistinctKeys) {
  std::vector<Request> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(MigRequest("1g", 1000));
  for (int i = 0; i < 3; ++i) requests.push_back(MigRequest("4g", 1000));
  for (int i = 0; i < 2; ++i) requests.push_back(Whole(1, 1000));
  const std::vector<TypicalRequest> typical = TypicalRequests(requests, 1.0);
  ASSERT_EQ(typical.size(), 3u);
  EXPECT_EQ(typical[0].request.mig_profile, "1g");
  EXPECT_DOUBLE_EQ(typical[0].weight, 4.0 / 9);
  EXPECT_EQ(typical[1].request.mig_profile, "4g");
  EXPECT_TRUE(typical[2].request.whole());
}

}  // namespace
}  // namespace gpuslice::place
