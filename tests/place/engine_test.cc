// The online placement engine (gpuslice/place/engine.h): rejections and their codes, rank
// tie-breaking, release, feasibility counts, and the incremental per-class cache checked against
// engines that re-score everything.
#include "gpuslice/place/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "place/place_test_util.h"

namespace gpuslice::place {
namespace {

using testing::CpuOnly;
using ::testing::HasSubstr;
using testing::MakeCluster;
using testing::MigNode;
using testing::MigRequest;
using testing::NewPolicy;
using testing::Share;
using testing::SharedNode;
using testing::StateDiff;
using testing::Whole;
using testing::WholeNode;

TEST(Engine, PlacesAndAppliesToItsCluster) {
  Engine engine(MakeCluster({SharedNode("a", 2), SharedNode("b", 2)}), NewPolicy("bestfit"));
  EXPECT_EQ(engine.policy().name(), "bestfit");
  absl::StatusOr<Allocation> allocation = engine.Place(Share(300, 1000));
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  EXPECT_EQ(allocation->request.gpu_milli, 300);
  ASSERT_EQ(allocation->gpus.size(), 1u);
  EXPECT_EQ(engine.cluster().allocated_milli(), 300);
  EXPECT_EQ(engine.cluster().cpu_free(allocation->node), 64000 - 1000);
  EXPECT_EQ(engine.cluster()
                .gpus(allocation->node)[static_cast<size_t>(allocation->gpus[0].gpu)]
                .milli_free,
            700);
}

TEST(Engine, InvalidRequestIsInvalidArgument) {
  Engine engine(MakeCluster({SharedNode("a", 2)}), NewPolicy("fgd"));
  Request bad = Share(500);
  bad.num_gpu = 2;
  EXPECT_EQ(engine.Place(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.Place(CpuOnly(-1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.FeasibleNodes(bad), 0);
  EXPECT_EQ(engine.cluster().pods(0), 0);
}

TEST(Engine, NoRoomNowIsResourceExhaustedWithTheReasons) {
  Engine engine(MakeCluster({SharedNode("a", 2, 4000), SharedNode("b", 2, 4000)}),
                NewPolicy("bestfit"));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(engine.Place(Whole(1)).ok()) << i;
  const Cluster before = engine.cluster();
  absl::StatusOr<Allocation> rejected = engine.Place(Whole(1));
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(rejected.status().message()), HasSubstr("GPUs on 2 node(s)"));
  EXPECT_EQ(StateDiff(engine.cluster(), before), "");
  // CPU is still free for CPU-only requests; more than is left is exhausted too.
  EXPECT_TRUE(engine.Place(CpuOnly(4000)).ok());
  EXPECT_TRUE(engine.Place(CpuOnly(4000)).ok());
  absl::StatusOr<Allocation> cpu = engine.Place(CpuOnly(1));
  ASSERT_FALSE(cpu.ok());
  EXPECT_EQ(cpu.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(cpu.status().message()), HasSubstr("cpu on 2 node(s)"));
  // Without explanations, the same code.
  engine.set_explain_rejections(false);
  EXPECT_EQ(engine.Place(Whole(1)).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(Engine, NeverPossibleIsFailedPrecondition) {
  Engine engine(MakeCluster({SharedNode("a", 8, 64000, 1 << 20, "G1"),
                             SharedNode("b", 8, 64000, 1 << 20, "G2"), WholeNode("w", 4)}),
                NewPolicy("fgd"));
  std::vector<std::pair<std::string, Request>> never;
  never.emplace_back("16 GPUs on 8-GPU nodes", Whole(16));
  Request model = Share(100);
  model.models = {"G9"};
  never.emplace_back("a model nobody has", model);
  never.emplace_back("more CPU than any node", CpuOnly(64001));
  never.emplace_back("a MIG profile without MIG GPUs", MigRequest("1g"));
  for (const auto& [what, request] : never) {
    absl::StatusOr<Allocation> rejected = engine.Place(request);
    ASSERT_FALSE(rejected.ok()) << what;
    EXPECT_EQ(rejected.status().code(), absl::StatusCode::kFailedPrecondition) << what;
  }
  // Full now but possible on an empty node: exhausted, not impossible.
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(engine.Place(Whole(8)).ok());
  EXPECT_EQ(engine.Place(Whole(8)).status().code(), absl::StatusCode::kResourceExhausted);
  Request g2 = Whole(1);
  g2.models = {"G2"};
  EXPECT_EQ(engine.Place(g2).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(Engine, TiesGoToTheLowestRank) {
  const Cluster cluster =
      MakeCluster({SharedNode("a", 1, 2000), SharedNode("b", 1, 2000), SharedNode("c", 1, 2000)});
  // CPU-only requests score 0 on every node under gpupacking: the rank alone decides, and the
  // node stays the winner until it is full.
  Engine engine(cluster, NewPolicy("gpupacking"), {2, 0, 1});
  std::vector<int> nodes;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<Allocation> allocation = engine.Place(CpuOnly(1000));
    ASSERT_TRUE(allocation.ok()) << allocation.status();
    nodes.push_back(allocation->node);
  }
  EXPECT_EQ(nodes, (std::vector<int>{1, 1, 2, 2, 0, 0}));
  EXPECT_EQ(engine.Place(CpuOnly(1000)).status().code(), absl::StatusCode::kResourceExhausted);

  // Equal scores under bestfit on identical nodes: rank decides; default rank = index.
  for (const std::vector<int>& rank : std::vector<std::vector<int>>{{2, 1, 0}, {1, 0, 2}, {}}) {
    Engine fresh(cluster, NewPolicy("bestfit"), rank);
    absl::StatusOr<Allocation> allocation = fresh.Place(Share(500));
    ASSERT_TRUE(allocation.ok());
    const int expected =
        rank.empty() ? 0 : static_cast<int>(std::find(rank.begin(), rank.end(), 0) - rank.begin());
    EXPECT_EQ(allocation->node, expected);
  }
}

TEST(Engine, ReleaseMakesRoomAgain) {
  Engine engine(MakeCluster({SharedNode("a", 1), MigNode("m", 1)}), NewPolicy("fgd"));
  const Cluster empty = engine.cluster();
  absl::StatusOr<Allocation> first = engine.Place(Whole(2));
  EXPECT_EQ(first.status().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<Allocation> held;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Allocation> allocation = engine.Place(Whole(1));
    ASSERT_TRUE(allocation.ok());
    held.push_back(*allocation);
  }
  EXPECT_EQ(engine.Place(Whole(1)).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(engine.FeasibleNodes(Whole(1)), 0);
  ASSERT_TRUE(engine.Release(held[1]).ok());
  EXPECT_EQ(engine.FeasibleNodes(Whole(1)), 1);
  absl::StatusOr<Allocation> again = engine.Place(Whole(1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->node, held[1].node);
  // Releasing twice fails and changes nothing.
  ASSERT_TRUE(engine.Release(*again).ok());
  const Cluster before = engine.cluster();
  EXPECT_FALSE(engine.Release(*again).ok());
  EXPECT_EQ(StateDiff(engine.cluster(), before), "");
  ASSERT_TRUE(engine.Release(held[0]).ok());
  EXPECT_EQ(StateDiff(engine.cluster(), empty), "");
  // MIG instances come back too: seven 1g, an eighth fails, release one, it fits again.
  std::vector<Allocation> instances;
  for (int i = 0; i < 7; ++i) {
    absl::StatusOr<Allocation> allocation = engine.Place(MigRequest("1g"));
    ASSERT_TRUE(allocation.ok()) << i << " " << allocation.status();
    instances.push_back(*allocation);
  }
  EXPECT_EQ(engine.Place(MigRequest("1g")).status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(engine.Release(instances[3]).ok());
  EXPECT_TRUE(engine.Place(MigRequest("1g")).ok());
}

TEST(Engine, FeasibleNodesCounts) {
  NodeSpec small = SharedNode("small", 0, 1000);
  Engine engine(MakeCluster({SharedNode("a", 2), SharedNode("b", 1), small, WholeNode("w", 2),
                             MigNode("m", 1)}),
                NewPolicy("bestfit"));
  EXPECT_EQ(engine.FeasibleNodes(CpuOnly(1000)), 5);
  EXPECT_EQ(engine.FeasibleNodes(CpuOnly(1001)), 4);
  EXPECT_EQ(engine.FeasibleNodes(Share(300)), 3);  // a, b, m
  EXPECT_EQ(engine.FeasibleNodes(Whole(1)), 4);
  EXPECT_EQ(engine.FeasibleNodes(Whole(2)), 2);
  EXPECT_EQ(engine.FeasibleNodes(MigRequest("3g")), 1);
  ASSERT_TRUE(engine.Place(Whole(1)).ok());  // bestfit: the tightest node is b or m
  ASSERT_TRUE(engine.Place(Whole(1)).ok());
  EXPECT_EQ(engine.FeasibleNodes(Whole(1)), 2);
  EXPECT_EQ(engine.FeasibleNodes(Whole(2)), 2);
}

// ---------------------------------------------------------------------------------------------
// The incremental cache against a reference that scores every node afresh for every request.

std::vector<NodeSpec> MixedNodes(std::mt19937_64& rng, int count) {
  std::vector<NodeSpec> nodes;
  std::uniform_int_distribution<int> gpus(0, 4);
  std::uniform_int_distribution<int> cores(4, 32);
  for (int i = 0; i < count; ++i) {
    const std::string name = "n" + std::to_string(i);
    const std::int64_t cpu = 1000 * cores(rng);
    switch (i % 4) {
      case 0:
      case 1:
        nodes.push_back(SharedNode(name, gpus(rng), cpu, 1 << 20, i % 8 == 1 ? "G2" : "G1"));
        break;
      case 2:
        nodes.push_back(
            MigNode(name, 1 + gpus(rng) / 2, i % 8 == 2 ? "H100-80GB" : "A100-80GB", cpu));
        break;
      default:
        nodes.push_back(WholeNode(name, gpus(rng), cpu));
    }
  }
  return nodes;
}

Request RandomRequest(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<int> cores(0, 6);
  Request request;
  request.cpu_milli = 500 * cores(rng);
  switch (kind(rng)) {
    case 0:
      break;  // CPU only
    case 1:
    case 2:
      request.num_gpu = 1;
      request.gpu_milli = 1000;
      break;
    case 3:
      request.num_gpu = 2;
      break;
    case 4:
      request.num_gpu = 1;
      request.mig_profile = std::vector<std::string>{"1g", "2g", "3g", "4g"}[rng() % 4];
      break;
    default:
      request.num_gpu = 1;
      request.gpu_milli = std::vector<int>{100, 250, 300, 500, 810}[rng() % 5];
  }
  if (request.num_gpu > 0 && rng() % 8 == 0) request.models = {"G2"};
  return request;
}

void ExpectSameDecisionsAsAFreshEngine(const std::string& policy_name) {
  std::mt19937_64 rng(12345);
  const std::vector<NodeSpec> nodes = MixedNodes(rng, 12);
  std::vector<Request> sample;
  for (int i = 0; i < 200; ++i) sample.push_back(RandomRequest(rng));
  const std::vector<TypicalRequest> typical = TypicalRequests(sample);
  std::vector<int> rank(nodes.size());
  std::iota(rank.begin(), rank.end(), 0);
  std::shuffle(rank.begin(), rank.end(), rng);

  Engine engine(MakeCluster(nodes), NewPolicy(policy_name, typical), rank);
  std::vector<Allocation> live;
  int placed = 0;
  int rejected = 0;
  for (int step = 0; step < 400; ++step) {
    if (!live.empty() && rng() % 3 == 0) {
      const size_t k = rng() % live.size();
      ASSERT_TRUE(engine.Release(live[k]).ok()) << step;
      live.erase(live.begin() + static_cast<long>(k));
      continue;
    }
    const Request request = RandomRequest(rng);
    Engine reference(engine.cluster(), NewPolicy(policy_name, typical), rank);
    absl::StatusOr<Allocation> expected = reference.Place(request);
    absl::StatusOr<Allocation> actual = engine.Place(request);
    ASSERT_EQ(actual.status().code(), expected.status().code())
        << policy_name << " step " << step << ": " << actual.status() << " vs "
        << expected.status();
    if (!actual.ok()) {
      ++rejected;
      continue;
    }
    ++placed;
    ASSERT_EQ(actual->node, expected->node) << policy_name << " step " << step;
    ASSERT_EQ(actual->gpus.size(), expected->gpus.size());
    for (size_t g = 0; g < actual->gpus.size(); ++g) {
      EXPECT_EQ(actual->gpus[g].gpu, expected->gpus[g].gpu) << policy_name << " step " << step;
      EXPECT_EQ(actual->gpus[g].mig_profile, expected->gpus[g].mig_profile);
      EXPECT_EQ(actual->gpus[g].mig_start, expected->gpus[g].mig_start);
      EXPECT_EQ(actual->gpus[g].milli, expected->gpus[g].milli);
    }
    ASSERT_EQ(StateDiff(engine.cluster(), reference.cluster()), "") << step;
    live.push_back(*actual);
  }
  // The walk exercised both outcomes.
  EXPECT_GT(placed, 50) << policy_name;
  EXPECT_GT(rejected, 5) << policy_name;
}

TEST(EngineCache, SameDecisionsAsAFreshEngineBestFit) {
  ExpectSameDecisionsAsAFreshEngine("bestfit");
}
TEST(EngineCache, SameDecisionsAsAFreshEngineFgd) { ExpectSameDecisionsAsAFreshEngine("fgd"); }
// Regression: the gpuslice policy's MIG waste memo was once keyed without the profiles placed (see
// GpuslicePolicy.MigScoreDoesNotDependOnWhatWasScoredBefore), so the long-lived policy of the
// engine scored a MIG node differently from a fresh one and picked another node.
TEST(EngineCache, SameDecisionsAsAFreshEngineGpuslice) {
  ExpectSameDecisionsAsAFreshEngine("gpuslice");
}
TEST(EngineCache, SameDecisionsAsAFreshEngineOtherBaselines) {
  for (const char* name : {"dotprod", "gpuclustering", "gpupacking"}) {
    ExpectSameDecisionsAsAFreshEngine(name);
  }
}

// A learning policy changes its epoch as it goes: every decision must still be the argmax of the
// policy's current scores (ties to the lowest rank) over the nodes the request fits.
TEST(EngineCache, LearningPolicyDecisionsFollowItsCurrentScores) {
  std::mt19937_64 rng(777);
  const std::vector<NodeSpec> nodes = MixedNodes(rng, 10);
  std::vector<int> rank(nodes.size());
  std::iota(rank.begin(), rank.end(), 0);
  std::shuffle(rank.begin(), rank.end(), rng);
  Engine engine(MakeCluster(nodes), NewPolicy("gpuslice"), rank);
  std::vector<Allocation> live;
  std::uint64_t epochs_seen = 0;
  for (int step = 0; step < 300; ++step) {
    if (!live.empty() && rng() % 4 == 0) {
      const size_t k = rng() % live.size();
      ASSERT_TRUE(engine.Release(live[k]).ok());
      live.erase(live.begin() + static_cast<long>(k));
      continue;
    }
    const Request request = RandomRequest(rng);
    int best = -1;
    Score best_score;
    for (int n = 0; n < engine.cluster().node_count(); ++n) {
      if (!engine.cluster().Fits(n, request)) continue;
      const Score score = engine.policy().ScoreNode(engine.cluster(), n, request);
      if (best < 0 || score > best_score ||
          (score == best_score && rank[static_cast<size_t>(n)] < rank[static_cast<size_t>(best)])) {
        best = n;
        best_score = score;
      }
    }
    absl::StatusOr<Allocation> allocation = engine.Place(request);
    if (best < 0) {
      EXPECT_FALSE(allocation.ok()) << step;
      continue;
    }
    ASSERT_TRUE(allocation.ok()) << step << " " << allocation.status();
    EXPECT_EQ(allocation->node, best) << "step " << step << ", epoch " << engine.policy().epoch();
    epochs_seen = engine.policy().epoch();
    live.push_back(*allocation);
  }
  EXPECT_GE(epochs_seen, 3u);  // re-estimated at 16, 32, 64, 128 observed requests
}

}  // namespace
}  // namespace gpuslice::place
