// The cluster state of the placement engine (gpuslice/place/cluster.h): spec and request
// validation, Fits/WhyNot, Apply and Release (checked, all-or-nothing, exactly reversible) and the
// MIG mapping of shares and profile names.
#include "gpuslice/place/cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "place/place_test_util.h"

namespace gpuslice::place {
namespace {

using testing::CatalogModel;
using testing::CpuOnly;
using ::testing::HasSubstr;
using testing::MakeAllocation;
using testing::MakeCluster;
using testing::MigNode;
using testing::MigRequest;
using testing::Share;
using testing::ShareClaimOf;
using testing::SharedNode;
using ::testing::StartsWith;
using testing::StateDiff;
using testing::Whole;
using testing::WholeNode;

// ---------------------------------------------------------------------------------------------
// Create

TEST(ClusterCreate, CountsGpusAndStartsEmpty) {
  const Cluster cluster = MakeCluster(
      {SharedNode("a", 4), WholeNode("b", 2), SharedNode("c", 0), MigNode("d", 1, "A100-80GB")});
  EXPECT_EQ(cluster.node_count(), 4);
  EXPECT_EQ(cluster.total_gpus(), 7);
  EXPECT_EQ(cluster.allocated_milli(), 0);
  for (int n = 0; n < cluster.node_count(); ++n) {
    EXPECT_EQ(cluster.cpu_free(n), cluster.spec(n).cpu_milli);
    EXPECT_EQ(cluster.memory_free(n), cluster.spec(n).memory_mib);
    EXPECT_EQ(cluster.pods(n), 0);
    EXPECT_EQ(static_cast<int>(cluster.gpus(n).size()), cluster.spec(n).gpus);
    EXPECT_TRUE(cluster.gpu_request_tags(n).empty());
    for (int g = 0; g < cluster.spec(n).gpus; ++g) {
      EXPECT_TRUE(cluster.GpuFullyFree(n, g));
      EXPECT_EQ(cluster.FreeMilli(n, g), kMilliPerGpu);
    }
  }
  EXPECT_EQ(cluster.shape(0), nullptr);
  ASSERT_NE(cluster.shape(3), nullptr);
  EXPECT_EQ(cluster.shape(3)->model().id, "A100-80GB");
  // A MIG node without a VRAM amount gets the model's memory.
  EXPECT_EQ(cluster.spec(3).gpu_memory_mib, CatalogModel("A100-80GB")->memory_mib);
}

TEST(ClusterCreate, RejectsDuplicateNames) {
  absl::StatusOr<Cluster> cluster = Cluster::Create({SharedNode("a", 1), SharedNode("a", 2)});
  ASSERT_FALSE(cluster.ok());
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cluster.status().message()), HasSubstr("duplicate"));
  EXPECT_THAT(std::string(cluster.status().message()), HasSubstr("node a"));
}

TEST(ClusterCreate, RejectsEmptyNameAndNegativeCapacities) {
  EXPECT_FALSE(Cluster::Create({SharedNode("", 1)}).ok());
  NodeSpec cpu = SharedNode("n", 1);
  cpu.cpu_milli = -1;
  NodeSpec memory = SharedNode("n", 1);
  memory.memory_mib = -1;
  NodeSpec gpus = SharedNode("n", 1);
  gpus.gpus = -1;
  NodeSpec pods = SharedNode("n", 1);
  pods.max_pods = -1;
  NodeSpec vram = SharedNode("n", 1);
  vram.gpu_memory_mib = -1;
  for (const NodeSpec& spec : {cpu, memory, gpus, pods, vram}) {
    absl::StatusOr<Cluster> cluster = Cluster::Create({spec});
    ASSERT_FALSE(cluster.ok());
    EXPECT_EQ(cluster.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(cluster.status().message()), HasSubstr("negative capacity"));
  }
}

TEST(ClusterCreate, MigModeNeedsAMigCapableModel) {
  NodeSpec none = MigNode("m", 2);
  none.hardware = nullptr;
  absl::StatusOr<Cluster> missing = Cluster::Create({none});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("MIG-capable"));

  const hw::GpuModel* l4 = CatalogModel("L4");
  ASSERT_FALSE(l4->mig_capable());
  NodeSpec not_capable = MigNode("m", 2);
  not_capable.hardware = l4;
  absl::StatusOr<Cluster> rejected = Cluster::Create({not_capable});
  ASSERT_FALSE(rejected.ok());
  EXPECT_THAT(std::string(rejected.status().message()), HasSubstr("L4"));

  // Without GPUs MIG mode needs nothing; a MIG-capable model is accepted.
  NodeSpec no_gpus = MigNode("m", 0);
  no_gpus.hardware = nullptr;
  EXPECT_TRUE(Cluster::Create({no_gpus}).ok());
  EXPECT_TRUE(Cluster::Create({MigNode("m", 2, "H100-80GB")}).ok());
}

// ---------------------------------------------------------------------------------------------
// Requests

TEST(Request, Kinds) {
  EXPECT_TRUE(CpuOnly(100).cpu_only());
  EXPECT_EQ(CpuOnly(100).milli(), 0);
  Request whole_by_default;
  whole_by_default.num_gpu = 2;
  EXPECT_TRUE(whole_by_default.whole());
  EXPECT_EQ(whole_by_default.milli(), 1000);
  EXPECT_TRUE(Whole(1).whole());
  EXPECT_FALSE(Whole(1).share());
  EXPECT_TRUE(Share(300).share());
  EXPECT_EQ(Share(300).milli(), 300);
  EXPECT_TRUE(MigRequest("3g").share());
  EXPECT_FALSE(MigRequest("7g").whole());
}

TEST(ValidateRequest, AcceptsWellFormedRequests) {
  EXPECT_TRUE(ValidateRequest(CpuOnly(1000, 512)).ok());
  EXPECT_TRUE(ValidateRequest(Share(1)).ok());
  EXPECT_TRUE(ValidateRequest(Share(1000)).ok());
  EXPECT_TRUE(ValidateRequest(Whole(8)).ok());
  EXPECT_TRUE(ValidateRequest(MigRequest("1g")).ok());
  Request vram = Share(200);
  vram.vram_mib = 4096;
  EXPECT_TRUE(ValidateRequest(vram).ok());
}

TEST(ValidateRequest, NamesTheBadField) {
  struct Case {
    Request request;
    std::string field;
  };
  std::vector<Case> cases;
  cases.push_back({CpuOnly(-1), "cpu_milli"});
  cases.push_back({CpuOnly(0, -1), "memory_mib"});
  Request negative_gpus;
  negative_gpus.num_gpu = -1;
  cases.push_back({negative_gpus, "num_gpu"});
  cases.push_back({Share(1001), "gpu_milli"});
  cases.push_back({Share(-5), "gpu_milli"});
  Request share_of_two = Share(500);
  share_of_two.num_gpu = 2;
  cases.push_back({share_of_two, "num_gpu"});
  Request mig_of_two = MigRequest("1g");
  mig_of_two.num_gpu = 2;
  cases.push_back({mig_of_two, "num_gpu"});
  Request mig_and_milli = MigRequest("3g");
  mig_and_milli.gpu_milli = 300;
  cases.push_back({mig_and_milli, "mig_profile"});
  Request mig_and_vram = MigRequest("3g");
  mig_and_vram.vram_mib = 100;
  cases.push_back({mig_and_vram, "mig_profile"});
  Request milli_without_gpu = CpuOnly(0);
  milli_without_gpu.gpu_milli = 500;
  cases.push_back({milli_without_gpu, "num_gpu"});
  Request profile_without_gpu = CpuOnly(0);
  profile_without_gpu.mig_profile = "1g";
  cases.push_back({profile_without_gpu, "num_gpu"});
  Request negative_vram = Share(100);
  negative_vram.vram_mib = -1;
  cases.push_back({negative_vram, "vram_mib"});
  for (const Case& c : cases) {
    const absl::Status status = ValidateRequest(c.request);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(std::string(status.message()), StartsWith(c.field)) << status;
  }
}

// ---------------------------------------------------------------------------------------------
// Fits / WhyNot

TEST(ClusterFits, Cpu) {
  const Cluster cluster = MakeCluster({SharedNode("n", 1, 4000)});
  EXPECT_TRUE(cluster.Fits(0, CpuOnly(4000)));
  EXPECT_EQ(cluster.WhyNot(0, CpuOnly(4000)), "");
  EXPECT_FALSE(cluster.Fits(0, CpuOnly(8000)));
  EXPECT_EQ(cluster.WhyNot(0, CpuOnly(8000)), "cpu: 4000m free, 8000m asked");
  EXPECT_FALSE(cluster.Fits(0, Share(100, 4001)));
}

TEST(ClusterFits, Memory) {
  const Cluster cluster = MakeCluster({SharedNode("n", 1, 4000, 1024)});
  EXPECT_TRUE(cluster.Fits(0, CpuOnly(0, 1024)));
  EXPECT_FALSE(cluster.Fits(0, CpuOnly(0, 1025)));
  EXPECT_THAT(cluster.WhyNot(0, CpuOnly(0, 1025)), StartsWith("memory: 1024 MiB free"));
}

TEST(ClusterFits, MaxPods) {
  NodeSpec spec = SharedNode("n", 2);
  spec.max_pods = 2;
  Cluster cluster = MakeCluster({spec});
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cluster.Fits(0, CpuOnly(1)));
    ASSERT_TRUE(cluster.Apply(MakeAllocation(0, CpuOnly(1), {})).ok());
  }
  EXPECT_EQ(cluster.pods(0), 2);
  EXPECT_FALSE(cluster.Fits(0, CpuOnly(1)));
  EXPECT_FALSE(cluster.Fits(0, Share(100)));
  EXPECT_EQ(cluster.WhyNot(0, CpuOnly(1)), "pods: 2 of 2");
  EXPECT_FALSE(cluster.Apply(MakeAllocation(0, CpuOnly(1), {})).ok());
}

TEST(ClusterFits, ModelRestriction) {
  const Cluster cluster = MakeCluster({SharedNode("n", 1, 64000, 1 << 20, "G1")});
  Request request = Share(100);
  request.models = {"G2"};
  EXPECT_FALSE(cluster.ModelAllowed(0, request));
  EXPECT_FALSE(cluster.Fits(0, request));
  EXPECT_THAT(cluster.WhyNot(0, request), HasSubstr("GPU model G1 not among those allowed"));
  request.models = {"G2", "G1"};
  EXPECT_TRUE(cluster.ModelAllowed(0, request));
  EXPECT_TRUE(cluster.Fits(0, request));
  // A node without a model label matches no restriction.
  const Cluster unlabelled = MakeCluster({SharedNode("n", 1, 64000, 1 << 20, "")});
  EXPECT_FALSE(unlabelled.Fits(0, request));
  EXPECT_TRUE(unlabelled.Fits(0, Share(100)));
}

TEST(ClusterFits, NodeWithoutGpus) {
  const Cluster cluster = MakeCluster({SharedNode("cpu", 0)});
  EXPECT_TRUE(cluster.Fits(0, CpuOnly(1000)));
  EXPECT_FALSE(cluster.Fits(0, Share(100)));
  EXPECT_FALSE(cluster.Fits(0, Whole(1)));
  EXPECT_EQ(cluster.WhyNot(0, Whole(1)), "no GPUs");
}

TEST(ClusterFits, WholeGpusMustBeCompletelyFree) {
  Cluster cluster = MakeCluster({SharedNode("n", 2)});
  EXPECT_TRUE(cluster.Fits(0, Whole(2)));
  EXPECT_FALSE(cluster.Fits(0, Whole(3)));
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, Share(1), {ShareClaimOf(1, 1)})).ok());
  EXPECT_FALSE(cluster.GpuFullyFree(0, 1));
  EXPECT_EQ(cluster.FreeMilli(0, 1), 999);
  EXPECT_FALSE(cluster.Fits(0, Whole(2)));
  EXPECT_EQ(cluster.WhyNot(0, Whole(2)), "GPUs: 1 completely free, 2 asked");
  EXPECT_TRUE(cluster.Fits(0, Whole(1)));
}

TEST(ClusterFits, Shares) {
  Cluster cluster = MakeCluster({SharedNode("n", 2)});
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, Share(400), {ShareClaimOf(0, 400)})).ok());
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, Whole(1), {Cluster::WholeClaim(1)})).ok());
  EXPECT_TRUE(cluster.Fits(0, Share(600)));
  EXPECT_TRUE(cluster.ShareFitsGpu(0, 0, Share(600)));
  EXPECT_FALSE(cluster.ShareFitsGpu(0, 1, Share(1)));  // taken whole
  EXPECT_FALSE(cluster.Fits(0, Share(601)));
  EXPECT_EQ(cluster.WhyNot(0, Share(601)), "no GPU has room for the share");
  // Shared GPUs never take MIG profiles.
  EXPECT_FALSE(cluster.Fits(0, MigRequest("1g")));
}

TEST(ClusterFits, SharesWithVram) {
  NodeSpec spec = SharedNode("n", 1);
  spec.gpu_memory_mib = 16000;
  Cluster cluster = MakeCluster({spec});
  Request big = Share(100);
  big.vram_mib = 16001;
  EXPECT_FALSE(cluster.Fits(0, big));
  Request half = Share(100);
  half.vram_mib = 8000;
  ASSERT_TRUE(cluster.Fits(0, half));
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, half, {ShareClaimOf(0, 100, 8000)})).ok());
  EXPECT_EQ(cluster.gpus(0)[0].vram_free_mib, 8000);
  half.vram_mib = 8001;
  EXPECT_FALSE(cluster.Fits(0, half));
  // Without VRAM accounting, VRAM amounts are not checked.
  const Cluster unaccounted = MakeCluster({SharedNode("n", 1)});
  EXPECT_TRUE(unaccounted.Fits(0, big));
}

TEST(ClusterFits, WholeModeGpusTakeNoShares) {
  Cluster cluster = MakeCluster({WholeNode("n", 2)});
  EXPECT_FALSE(cluster.Fits(0, Share(100)));
  EXPECT_EQ(cluster.WhyNot(0, Share(100)), "GPUs are handed out whole only");
  EXPECT_TRUE(cluster.Fits(0, Whole(2)));
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, Whole(1), {Cluster::WholeClaim(0)})).ok());
  EXPECT_EQ(cluster.FreeMilli(0, 0), 0);
  EXPECT_EQ(cluster.FreeMilli(0, 1), 1000);
  EXPECT_FALSE(cluster.Fits(0, Whole(2)));
  // A share claim on a whole-mode GPU is refused.
  EXPECT_FALSE(cluster.Apply(MakeAllocation(0, Share(100), {ShareClaimOf(1, 100)})).ok());
}

// ---------------------------------------------------------------------------------------------
// Apply

TEST(ClusterApply, RejectsOvercommitAndChangesNothing) {
  NodeSpec spec = SharedNode("n", 2, 4000, 4096, "G1");
  spec.gpu_memory_mib = 1000;
  Cluster cluster = MakeCluster({spec, MigNode("m", 1)});
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, Share(400, 1000), {ShareClaimOf(0, 400, 100)})).ok());
  const GpuClaim three_g = *cluster.ShareClaim(1, 0, MigRequest("3g"));
  ASSERT_TRUE(cluster.Apply(MakeAllocation(1, MigRequest("3g"), {three_g})).ok());
  const Cluster before = cluster;
  const std::uint64_t version0 = cluster.version(0);
  const std::uint64_t version1 = cluster.version(1);

  std::vector<std::pair<std::string, Allocation>> bad;
  bad.emplace_back("share over free milli", MakeAllocation(0, Share(700), {ShareClaimOf(0, 700)}));
  bad.emplace_back("share over free VRAM",
                   MakeAllocation(0, Share(100), {ShareClaimOf(0, 100, 901)}));
  bad.emplace_back("whole on a used GPU", MakeAllocation(0, Whole(1), {Cluster::WholeClaim(0)}));
  bad.emplace_back("cpu over", MakeAllocation(0, CpuOnly(3001), {}));
  bad.emplace_back("memory over", MakeAllocation(0, CpuOnly(0, 4097), {}));
  bad.emplace_back("claim count", MakeAllocation(0, Whole(2), {Cluster::WholeClaim(1)}));
  bad.emplace_back("same GPU twice",
                   MakeAllocation(0, Whole(2), {Cluster::WholeClaim(1), Cluster::WholeClaim(1)}));
  bad.emplace_back("no such GPU", MakeAllocation(0, Share(100), {ShareClaimOf(2, 100)}));
  bad.emplace_back("zero milli", MakeAllocation(0, Share(100), {ShareClaimOf(1, 0)}));
  bad.emplace_back("no such node", MakeAllocation(2, CpuOnly(1), {}));
  Request wrong_model = Share(100);
  wrong_model.models = {"G2"};
  bad.emplace_back("model", MakeAllocation(0, wrong_model, {ShareClaimOf(1, 100)}));
  // All-or-nothing: the first claim is fine, the second is not.
  bad.emplace_back("second claim bad",
                   MakeAllocation(0, Whole(2), {Cluster::WholeClaim(1), Cluster::WholeClaim(0)}));
  // MIG: a second 3g at the start the first one holds overlaps it.
  bad.emplace_back("MIG overlap", MakeAllocation(1, MigRequest("3g"), {three_g}));
  GpuClaim other_start = three_g;
  other_start.mig_start = 1;  // 3g instances start at 0 or 4 only
  bad.emplace_back("MIG start not allowed", MakeAllocation(1, MigRequest("3g"), {other_start}));
  GpuClaim no_profile = three_g;
  no_profile.mig_start = three_g.mig_start == 0 ? 4 : 0;
  no_profile.mig_profile = -1;
  bad.emplace_back("MIG without profile", MakeAllocation(1, MigRequest("3g"), {no_profile}));
  bad.emplace_back("whole on a MIG GPU with an instance",
                   MakeAllocation(1, Whole(1), {Cluster::WholeClaim(0)}));

  for (const auto& [what, allocation] : bad) {
    EXPECT_FALSE(cluster.Apply(allocation).ok()) << what;
    EXPECT_EQ(StateDiff(cluster, before), "") << what;
  }
  EXPECT_EQ(cluster.version(0), version0);
  EXPECT_EQ(cluster.version(1), version1);
}

TEST(ClusterApply, AccountsSharesWholeGpusAndTags) {
  NodeSpec spec = SharedNode("n", 4, 8000, 8192);
  spec.gpu_memory_mib = 16000;
  Cluster cluster = MakeCluster({spec});
  const std::uint64_t version = cluster.version(0);
  Request share = Share(300, 1000);
  share.memory_mib = 1024;
  share.vram_mib = 4000;
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, share, {ShareClaimOf(2, 300, 4000)})).ok());
  EXPECT_GT(cluster.version(0), version);
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, Share(250), {ShareClaimOf(2, 250)})).ok());
  ASSERT_TRUE(cluster
                  .Apply(MakeAllocation(0, Whole(2, 2000),
                                        {Cluster::WholeClaim(0), Cluster::WholeClaim(3)}))
                  .ok());
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, CpuOnly(500), {})).ok());
  EXPECT_EQ(cluster.cpu_free(0), 8000 - 1000 - 2000 - 500);
  EXPECT_EQ(cluster.memory_free(0), 8192 - 1024);
  EXPECT_EQ(cluster.pods(0), 4);
  const GpuState& shared = cluster.gpus(0)[2];
  EXPECT_EQ(shared.milli_free, 450);
  EXPECT_EQ(shared.vram_free_mib, 12000);
  EXPECT_EQ(shared.holders, 2);
  EXPECT_FALSE(shared.taken_whole);
  EXPECT_TRUE(cluster.gpus(0)[0].taken_whole);
  EXPECT_EQ(cluster.gpus(0)[0].holders, 1);
  EXPECT_EQ(cluster.FreeMilli(0, 0), 0);
  EXPECT_TRUE(cluster.GpuFullyFree(0, 1));
  EXPECT_EQ(cluster.allocated_milli(), 300 + 250 + 2000);
  const std::vector<std::pair<int, int>> tags = {{0, 2}, {2, 1}};
  EXPECT_EQ(cluster.gpu_request_tags(0), tags);
}

// ---------------------------------------------------------------------------------------------
// Release

TEST(ClusterRelease, RestoresEveryFieldExactly) {
  NodeSpec shared = SharedNode("s", 3, 16000, 65536);
  shared.gpu_memory_mib = 24000;
  const Cluster initial = MakeCluster(
      {shared, WholeNode("w", 2), MigNode("m", 2, "A100-80GB"), MigNode("h", 1, "H100-80GB")});
  Cluster cluster = initial;
  std::vector<Allocation> held;
  auto apply = [&](const Allocation& allocation) {
    ASSERT_TRUE(cluster.Apply(allocation).ok());
    held.push_back(allocation);
  };
  Request vram_share = Share(300, 2000);
  vram_share.memory_mib = 4096;
  vram_share.vram_mib = 6000;
  apply(MakeAllocation(0, vram_share, {ShareClaimOf(1, 300, 6000)}));
  apply(MakeAllocation(0, Share(700, 500), {ShareClaimOf(1, 700)}));
  apply(MakeAllocation(0, Whole(2, 1000), {Cluster::WholeClaim(0), Cluster::WholeClaim(2)}));
  apply(MakeAllocation(0, CpuOnly(1000, 100), {}));
  apply(MakeAllocation(1, Whole(1), {Cluster::WholeClaim(1)}));
  for (const char* profile : {"3g", "2g", "1g.20gb"}) {
    const Request request = MigRequest(profile, 100);
    apply(MakeAllocation(2, request, {*cluster.ShareClaim(2, 0, request)}));
  }
  apply(MakeAllocation(2, Whole(1), {Cluster::WholeClaim(1)}));
  apply(MakeAllocation(3, Share(300), {*cluster.ShareClaim(3, 0, Share(300))}));
  ASSERT_NE(StateDiff(cluster, initial), "");

  // Releasing the last allocation returns the state before it, exactly.
  const Allocation last = held.back();
  held.pop_back();
  Cluster before_last = initial;
  for (const Allocation& allocation : held) ASSERT_TRUE(before_last.Apply(allocation).ok());
  ASSERT_TRUE(cluster.Release(last).ok());
  EXPECT_EQ(StateDiff(cluster, before_last), "");

  // Releasing the others in a different order returns the initial state.
  ASSERT_EQ(held.size(), 9u);
  for (size_t i : {3u, 0u, 5u, 7u, 1u, 6u, 2u, 8u, 4u}) {
    ASSERT_TRUE(cluster.Release(held[i]).ok()) << i;
  }
  EXPECT_EQ(StateDiff(cluster, initial), "");
  EXPECT_EQ(cluster.allocated_milli(), 0);
}

TEST(ClusterRelease, RejectsWhatIsNotHeldAndChangesNothing) {
  Cluster cluster = MakeCluster({SharedNode("s", 2, 8000), MigNode("m", 1)});
  // Nothing is held at all.
  EXPECT_FALSE(cluster.Release(MakeAllocation(0, CpuOnly(1), {})).ok());
  EXPECT_FALSE(cluster.Release(MakeAllocation(0, Share(100), {ShareClaimOf(0, 100)})).ok());

  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, Share(300, 1000), {ShareClaimOf(0, 300)})).ok());
  const Request one_g = MigRequest("1g");
  const GpuClaim mig_claim = *cluster.ShareClaim(1, 0, one_g);
  ASSERT_TRUE(cluster.Apply(MakeAllocation(1, one_g, {mig_claim})).ok());
  const Cluster before = cluster;

  std::vector<std::pair<std::string, Allocation>> bad;
  bad.emplace_back("whole GPU never taken", MakeAllocation(0, Whole(1), {Cluster::WholeClaim(1)}));
  bad.emplace_back("share on a GPU without holders",
                   MakeAllocation(0, Share(100), {ShareClaimOf(1, 100)}));
  bad.emplace_back("more CPU than held",
                   MakeAllocation(0, Share(300, 1001), {ShareClaimOf(0, 300)}));
  bad.emplace_back("more milli than used", MakeAllocation(0, Share(800), {ShareClaimOf(0, 800)}));
  bad.emplace_back("no such GPU", MakeAllocation(0, Share(300), {ShareClaimOf(5, 300)}));
  bad.emplace_back("no such node", MakeAllocation(7, CpuOnly(0), {}));
  GpuClaim elsewhere = mig_claim;
  elsewhere.mig_start = mig_claim.mig_start == 0 ? 1 : 0;
  bad.emplace_back("MIG instance not placed there", MakeAllocation(1, one_g, {elsewhere}));
  // All-or-nothing: the first claim is held, the second is not.
  bad.emplace_back("second claim not held",
                   MakeAllocation(0, Whole(2), {ShareClaimOf(0, 300), Cluster::WholeClaim(1)}));
  for (const auto& [what, allocation] : bad) {
    EXPECT_FALSE(cluster.Release(allocation).ok()) << what;
    EXPECT_EQ(StateDiff(cluster, before), "") << what;
  }
}

// ---------------------------------------------------------------------------------------------
// MIG

TEST(ClusterMig, ShareMapsToTheSmallestProfileWithEnoughSlices) {
  const Cluster cluster = MakeCluster({MigNode("m", 1, "A100-80GB")});
  const geometry::Shape& shape = *cluster.shape(0);
  auto profile_name = [&](const Request& request) {
    const int p = cluster.MigProfileFor(0, request);
    return p < 0 ? std::string("none") : shape.profile(p).name;
  };
  // 300 milli = 2.1 of 7 slices -> 3 slices.
  EXPECT_EQ(profile_name(Share(300)), "3g.40gb");
  // 2/7 = 285.7 milli: 285 fits 2 slices, 286 needs 3.
  EXPECT_EQ(profile_name(Share(285)), "2g.20gb");
  EXPECT_EQ(profile_name(Share(286)), "3g.40gb");
  EXPECT_EQ(profile_name(Share(100)), "1g.10gb");
  EXPECT_EQ(profile_name(Share(142)), "1g.10gb");
  EXPECT_EQ(profile_name(Share(143)), "2g.20gb");
  EXPECT_EQ(profile_name(Share(572)), "7g.80gb");
  EXPECT_EQ(profile_name(Share(571)), "4g.40gb");
  // VRAM raises the profile too.
  Request memory = Share(100);
  memory.vram_mib = 30000;
  EXPECT_EQ(profile_name(memory), "3g.40gb");
  memory.vram_mib = 90000;
  EXPECT_EQ(profile_name(memory), "none");
  // Names: short names pick the smallest standard profile of that many slices.
  EXPECT_EQ(profile_name(MigRequest("1g")), "1g.10gb");
  EXPECT_EQ(profile_name(MigRequest("1g.20gb")), "1g.20gb");
  EXPECT_EQ(profile_name(MigRequest("3g")), "3g.40gb");
  EXPECT_EQ(profile_name(MigRequest("7g")), "7g.80gb");
  EXPECT_EQ(profile_name(MigRequest("5g")), "none");
  EXPECT_EQ(profile_name(MigRequest("g")), "none");
  EXPECT_EQ(profile_name(MigRequest("bogus")), "none");
  // A shared node has no profiles.
  EXPECT_EQ(MakeCluster({SharedNode("s", 1)}).MigProfileFor(0, Share(300)), -1);

  const Cluster h100 = MakeCluster({MigNode("h", 1, "H100-80GB")});
  EXPECT_EQ(h100.shape(0)->profile(h100.MigProfileFor(0, Share(300))).name, "3g.40gb");
  EXPECT_EQ(h100.shape(0)->profile(h100.MigProfileFor(0, MigRequest("1g"))).name, "1g.10gb");
}

// A class (small/medium/...) arrives resolved to one profile per GPU model: each node takes the
// profile of its own model, and nodes of models the class does not list are not eligible.
TEST(ClusterMig, ClassMapsToTheProfileOfEachModel) {
  Cluster cluster = MakeCluster({MigNode("a", 1, "A100-80GB"), MigNode("h", 1, "H100-80GB"),
                                 MigNode("b", 1, "A100-40GB"), SharedNode("s", 1)});
  Request medium;
  medium.num_gpu = 1;
  medium.mig_class = {{"A100-80GB", "3g.40gb"}, {"H100-80GB", "2g"}};
  ASSERT_TRUE(ValidateRequest(medium).ok());
  EXPECT_TRUE(medium.mig());
  EXPECT_FALSE(medium.whole());
  EXPECT_EQ(cluster.shape(0)->profile(cluster.MigProfileFor(0, medium)).name, "3g.40gb");
  EXPECT_EQ(cluster.shape(1)->profile(cluster.MigProfileFor(1, medium)).name, "2g.20gb");
  EXPECT_EQ(cluster.MigProfileFor(2, medium), -1);  // A100-40GB is not in the class
  EXPECT_TRUE(cluster.Fits(0, medium));
  EXPECT_TRUE(cluster.Fits(1, medium));
  EXPECT_FALSE(cluster.Fits(2, medium));
  EXPECT_FALSE(cluster.Fits(3, medium));  // shared GPUs take no MIG instance
  const std::optional<GpuClaim> claim = cluster.ShareClaim(1, 0, medium);
  ASSERT_TRUE(claim.has_value());
  EXPECT_EQ(cluster.shape(1)->profile(claim->mig_profile).name, "2g.20gb");
  EXPECT_EQ(claim->milli, 2 * kMilliPerGpu / 7);

  Request both = medium;
  both.mig_profile = "1g";
  EXPECT_FALSE(ValidateRequest(both).ok());
  Request no_gpu = medium;
  no_gpu.num_gpu = 0;
  EXPECT_FALSE(ValidateRequest(no_gpu).ok());
}

TEST(ClusterMig, ShareClaimTakesTheMappedProfile) {
  Cluster cluster = MakeCluster({MigNode("m", 1)});
  const std::optional<GpuClaim> claim = cluster.ShareClaim(0, 0, Share(300));
  ASSERT_TRUE(claim.has_value());
  EXPECT_EQ(cluster.shape(0)->profile(claim->mig_profile).compute_slices, 3);
  EXPECT_EQ(claim->milli, 3 * 1000 / 7);
  EXPECT_FALSE(claim->whole);
  EXPECT_TRUE(cluster.shape(0)->StartAllowed(claim->mig_profile, claim->mig_start));
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, Share(300), {*claim})).ok());
  EXPECT_EQ(cluster.allocated_milli(), 428);
  EXPECT_EQ(cluster.FreeMilli(0, 0), 4 * 1000 / 7);
  // Shares never take a whole MIG GPU's worth unless they need it; 7g does not fit now.
  EXPECT_FALSE(cluster.Fits(0, MigRequest("7g")));
  EXPECT_FALSE(cluster.Fits(0, Whole(1)));
  EXPECT_TRUE(cluster.Fits(0, MigRequest("4g")));
}

TEST(ClusterMig, EightOneSliceInstancesDoNotFit) {
  Cluster cluster = MakeCluster({MigNode("m", 1)});
  const Request one_g = MigRequest("1g");
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(cluster.Fits(0, one_g)) << i;
    const std::optional<GpuClaim> claim = cluster.ShareClaim(0, 0, one_g);
    ASSERT_TRUE(claim.has_value()) << i;
    ASSERT_TRUE(cluster.Apply(MakeAllocation(0, one_g, {*claim})).ok()) << i;
  }
  EXPECT_FALSE(cluster.Fits(0, one_g));
  EXPECT_FALSE(cluster.ShareFitsGpu(0, 0, one_g));
  EXPECT_FALSE(cluster.ShareClaim(0, 0, one_g).has_value());
  EXPECT_EQ(cluster.WhyNot(0, one_g), "no GPU has room for the share");
  EXPECT_EQ(cluster.FreeMilli(0, 0), 0);
  EXPECT_EQ(cluster.allocated_milli(), 7 * (1000 / 7));
  EXPECT_EQ(cluster.gpus(0)[0].holders, 7);
}

TEST(ClusterMig, FreeMilliCountsComputeSlicesNotPlacementUnits) {
  Cluster cluster = MakeCluster({MigNode("m", 1)});
  // 1g.20gb takes two placement units but one compute slice.
  const Request request = MigRequest("1g.20gb");
  const std::optional<GpuClaim> claim = cluster.ShareClaim(0, 0, request);
  ASSERT_TRUE(claim.has_value());
  EXPECT_EQ(cluster.shape(0)->placement_size(claim->mig_profile), 2);
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, request, {*claim})).ok());
  EXPECT_EQ(cluster.FreeMilli(0, 0), 6 * 1000 / 7);
  EXPECT_EQ(Cluster::MigFreeMilli(*cluster.shape(0), cluster.gpus(0)[0].occupancy), 857);
  EXPECT_EQ(cluster.allocated_milli(), 142);
  EXPECT_EQ(cluster.MigMilli(0, claim->mig_profile), 142);
  const Request three = MigRequest("3g");
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, three, {*cluster.ShareClaim(0, 0, three)})).ok());
  EXPECT_EQ(cluster.FreeMilli(0, 0), 3 * 1000 / 7);
  EXPECT_EQ(cluster.allocated_milli(), 142 + 428);
}

TEST(ClusterMig, WholeRequestTakesAnEmptyMigGpu) {
  Cluster cluster = MakeCluster({MigNode("m", 2)});
  ASSERT_TRUE(
      cluster
          .Apply(MakeAllocation(0, MigRequest("1g"), {*cluster.ShareClaim(0, 0, MigRequest("1g"))}))
          .ok());
  EXPECT_FALSE(cluster.GpuFullyFree(0, 0));
  EXPECT_TRUE(cluster.Fits(0, Whole(1)));
  EXPECT_FALSE(cluster.Fits(0, Whole(2)));
  ASSERT_TRUE(cluster.Apply(MakeAllocation(0, Whole(1), {Cluster::WholeClaim(1)})).ok());
  EXPECT_TRUE(cluster.gpus(0)[1].taken_whole);
  EXPECT_EQ(cluster.FreeMilli(0, 1), 0);
  EXPECT_FALSE(cluster.ShareFitsGpu(0, 1, MigRequest("1g")));
  EXPECT_EQ(cluster.allocated_milli(), 142 + 1000);
  // A MIG claim on a GPU taken whole is refused.
  GpuClaim claim = *cluster.ShareClaim(0, 0, MigRequest("1g"));
  claim.gpu = 1;
  EXPECT_FALSE(cluster.Apply(MakeAllocation(0, MigRequest("1g"), {claim})).ok());
}

TEST(ClusterMig, BestMigStartKeepsTheMostRoom) {
  const Cluster cluster = MakeCluster({MigNode("m", 1)});
  const geometry::Shape& shape = *cluster.shape(0);
  const geometry::Occupancy empty{};
  for (int p = 0; p < shape.profile_count(); ++p) {
    const int start = Cluster::BestMigStart(shape, empty, p);
    ASSERT_GE(start, 0) << shape.profile(p).name;
    // No allowed start leaves more room for every profile together.
    auto room_after = [&](int s) {
      geometry::Occupancy after = empty;
      shape.Add(after, p, s);
      int room = 0;
      for (int q = 0; q < shape.profile_count(); ++q) room += shape.FreeCount(after, q);
      return room;
    };
    for (int s = 0; s < shape.units(); ++s) {
      if (!shape.CanAdd(empty, p, s, {}).ok()) continue;
      EXPECT_LE(room_after(s), room_after(start)) << shape.profile(p).name << "@" << s;
      if (s < start) {
        EXPECT_LT(room_after(s), room_after(start)) << "ties go to the lowest start";
      }
    }
  }
  // A full GPU has no start for anything.
  geometry::Occupancy full{};
  const int seven = cluster.MigProfileFor(0, MigRequest("7g"));
  shape.Add(full, seven, 0);
  EXPECT_EQ(Cluster::BestMigStart(shape, full, cluster.MigProfileFor(0, MigRequest("1g"))), -1);
}

TEST(GpuMode, Names) {
  EXPECT_EQ(ToString(GpuMode::kWhole), "whole");
  EXPECT_EQ(ToString(GpuMode::kShared), "shared");
  EXPECT_EQ(ToString(GpuMode::kMig), "mig");
}

}  // namespace
}  // namespace gpuslice::place
