// Trace replay (gpuslice/place/replay.h): the strict CSV readers, the MIG conversion, the arrival
// sequence (shuffle and tuning to the target), and replays: curve semantics, consistency of the
// summary numbers, and the real Alibaba default trace against the FGD artefact.
#include "gpuslice/place/replay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "gpuslice/place/engine.h"
#include "gpuslice/place/go_rand.h"
#include "place/place_test_util.h"
#include "require.h"

namespace gpuslice::place {
namespace {

namespace fs = std::filesystem;

using testing::CatalogModel;
using testing::CpuOnly;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MigRequest;
using testing::NewPolicy;
using testing::Share;
using testing::SharedNode;
using ::testing::StartsWith;
using testing::Whole;

// Writes `text` to a fresh file named `name` and returns its path.
std::string WriteTemp(const std::string& name, const std::string& text) {
  const fs::path dir = fs::path(::testing::TempDir()) / "gpuslice_replay_test";
  fs::create_directories(dir);
  const fs::path path = dir / name;
  std::ofstream out(path, std::ios::trunc);
  out << text;
  return path.string();
}

// Whether `message` is "<path>:<line>: ..." with a line number.
bool NamesFileAndLine(const std::string& message, const std::string& path) {
  if (message.rfind(path + ":", 0) != 0) return false;
  const size_t at = path.size() + 1;
  return at < message.size() && message[at] >= '0' && message[at] <= '9';
}

constexpr const char* kNodeHeader = "sn,cpu_milli,memory_mib,gpu,model\n";
constexpr const char* kPodHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n";

// ---------------------------------------------------------------------------------------------
// ReadNodesCsv

TEST(ReadNodesCsv, ParsesByColumnNameAndSortsByName) {
  const std::string path = WriteTemp("nodes.csv",
                                     "sn,model,gpu,cpu_milli,memory_mib,extra\n"
                                     "node-b,G2,8,96000,786432,x\n"
                                     "node-a,G1,2,32000,262144,y\n"
                                     "\n"
                                     "node-c,,0,64000,1000,z\n");
  absl::StatusOr<std::vector<NodeSpec>> nodes = ReadNodesCsv(path);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_EQ((*nodes)[0].name, "node-a");
  EXPECT_EQ((*nodes)[1].name, "node-b");
  EXPECT_EQ((*nodes)[2].name, "node-c");
  const NodeSpec& a = (*nodes)[0];
  EXPECT_EQ(a.model, "G1");
  EXPECT_EQ(a.gpus, 2);
  EXPECT_EQ(a.cpu_milli, 32000);
  EXPECT_EQ(a.memory_mib, 262144);
  EXPECT_EQ(a.mode, GpuMode::kShared);
  EXPECT_EQ(a.max_pods, 1001);
  EXPECT_EQ(a.hardware, nullptr);
  EXPECT_EQ((*nodes)[1].gpus, 8);
  EXPECT_EQ((*nodes)[2].model, "");
  EXPECT_EQ((*nodes)[2].gpus, 0);
}

TEST(ReadNodesCsv, CrLfLineEndingsAndBlankLines) {
  const std::string path =
      WriteTemp("crlf.csv", "sn,cpu_milli,memory_mib,gpu,model\r\n\r\na,1000,10,1,G1\r\n");
  absl::StatusOr<std::vector<NodeSpec>> nodes = ReadNodesCsv(path);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].model, "G1");
}

TEST(ReadNodesCsv, ErrorsNameFileLineAndColumn) {
  {
    const std::string path =
        WriteTemp("bad_int.csv", std::string(kNodeHeader) + "a,1000,10,1,G1\n\nb,12x,10,1,G1\n");
    absl::StatusOr<std::vector<NodeSpec>> nodes = ReadNodesCsv(path);
    ASSERT_FALSE(nodes.ok());
    EXPECT_EQ(nodes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(nodes.status().message()),
              path + ":4: cpu_milli: '12x' is not a non-negative integer");
  }
  {
    const std::string path = WriteTemp("negative.csv", std::string(kNodeHeader) + "a,1,-5,1,G\n");
    EXPECT_EQ(std::string(ReadNodesCsv(path).status().message()),
              path + ":2: memory_mib: '-5' is not a non-negative integer");
  }
  {
    const std::string path = WriteTemp("cells.csv", std::string(kNodeHeader) + "a,1,1,1\n");
    EXPECT_EQ(std::string(ReadNodesCsv(path).status().message()),
              path + ":2: 4 cells, the header has 5");
  }
  {
    const std::string path = WriteTemp("column.csv", "sn,cpu_milli,memory_mib,gpu\na,1,1,1\n");
    EXPECT_EQ(std::string(ReadNodesCsv(path).status().message()),
              path + ":1: missing column 'model'");
  }
  {
    const std::string path =
        WriteTemp("many_gpus.csv", std::string(kNodeHeader) + "a,1,1,2000,G\n");
    const std::string message(ReadNodesCsv(path).status().message());
    EXPECT_THAT(message, StartsWith(path + ":2: gpu"));
  }
  {
    const std::string path = WriteTemp("no_name.csv", std::string(kNodeHeader) + ",1,1,1,G\n");
    EXPECT_THAT(std::string(ReadNodesCsv(path).status().message()), StartsWith(path + ":2: sn"));
  }
  EXPECT_FALSE(ReadNodesCsv(WriteTemp("empty.csv", "")).ok());
  EXPECT_EQ(ReadNodesCsv("/nonexistent/nodes.csv").status().code(), absl::StatusCode::kNotFound);
}

// Regression (src/place/replay.cc, ReadNodesCsv): replay.h promises that the CSV readers' errors
// name the file, line and column; a duplicate node was once reported without the line. Expected:
// "<path>:<line>: sn: ..." (the second occurrence).
TEST(ReadNodesCsv, DuplicateNodeNamesTheLine) {
  const std::string path =
      WriteTemp("dup.csv", std::string(kNodeHeader) + "a,1,1,1,G\nb,1,1,1,G\na,2,2,2,G\n");
  absl::StatusOr<std::vector<NodeSpec>> nodes = ReadNodesCsv(path);
  ASSERT_FALSE(nodes.ok());
  EXPECT_EQ(nodes.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(nodes.status().message());
  EXPECT_THAT(message, HasSubstr("'a'"));
  EXPECT_THAT(message, StartsWith(path));
  EXPECT_TRUE(NamesFileAndLine(message, path)) << message;
}

// ---------------------------------------------------------------------------------------------
// ReadPodsCsv

TEST(ReadPodsCsv, ParsesSortsAndSplitsGpuSpec) {
  const std::string path = WriteTemp("pods.csv", std::string(kPodHeader) +
                                                     "pod-c,1000,100,1,500,G1|G2\n"
                                                     "pod-a,2000,0,0,0,\n"
                                                     "pod-b,3000,0,2,1000,|G3||\n"
                                                     "pod-d,0,0,1,1500,\n"
                                                     "pod-e,100,0,0,700,G1\n");
  absl::StatusOr<std::vector<TracePod>> pods = ReadPodsCsv(path);
  ASSERT_TRUE(pods.ok()) << pods.status();
  ASSERT_EQ(pods->size(), 5u);
  std::vector<std::string> names;
  for (const TracePod& pod : *pods) names.push_back(pod.name);
  EXPECT_THAT(names, ElementsAre("pod-a", "pod-b", "pod-c", "pod-d", "pod-e"));
  const Request& a = (*pods)[0].request;
  EXPECT_TRUE(a.cpu_only());
  EXPECT_EQ(a.cpu_milli, 2000);
  const Request& b = (*pods)[1].request;
  EXPECT_TRUE(b.whole());
  EXPECT_EQ(b.num_gpu, 2);
  EXPECT_THAT(b.models, ElementsAre("G3"));
  const Request& c = (*pods)[2].request;
  EXPECT_TRUE(c.share());
  EXPECT_EQ(c.gpu_milli, 500);
  EXPECT_EQ(c.memory_mib, 100);
  EXPECT_THAT(c.models, ElementsAre("G1", "G2"));
  // Above 1000 milli means a whole GPU.
  const Request& d = (*pods)[3].request;
  EXPECT_EQ(d.gpu_milli, 1000);
  EXPECT_TRUE(d.whole());
  EXPECT_TRUE(d.models.empty());
  // gpu_milli without GPUs: CPU only, no model restriction.
  const Request& e = (*pods)[4].request;
  EXPECT_TRUE(e.cpu_only());
  EXPECT_EQ(e.gpu_milli, 0);
  EXPECT_TRUE(e.models.empty());
  for (const TracePod& pod : *pods) EXPECT_TRUE(ValidateRequest(pod.request).ok()) << pod.name;
}

TEST(ReadPodsCsv, GpuSpecColumnIsOptional) {
  const std::string path = WriteTemp("nospec.csv",
                                     "gpu_milli,num_gpu,memory_mib,cpu_milli,name\n"
                                     "300,1,0,500,p1\n");
  absl::StatusOr<std::vector<TracePod>> pods = ReadPodsCsv(path);
  ASSERT_TRUE(pods.ok()) << pods.status();
  ASSERT_EQ(pods->size(), 1u);
  EXPECT_EQ((*pods)[0].request.gpu_milli, 300);
  EXPECT_EQ((*pods)[0].request.cpu_milli, 500);
  EXPECT_TRUE((*pods)[0].request.models.empty());
}

TEST(ReadPodsCsv, ErrorsNameFileLineAndColumn) {
  struct Case {
    std::string name;
    std::string text;
    std::string expected_prefix;  // after "<path>"
  };
  const std::vector<Case> cases = {
      {"zero_milli.csv", std::string(kPodHeader) + "p1,1,1,1,500,\np2,1,1,1,0,\n", ":3: gpu_milli"},
      {"partial_multi.csv", std::string(kPodHeader) + "p1,1,1,2,500,\n", ":2: gpu_milli"},
      {"too_many.csv", std::string(kPodHeader) + "p1,1,1,65,1000,\n", ":2: num_gpu"},
      {"negative_cpu.csv", std::string(kPodHeader) + "p1,-100,1,1,500,\n",
       ":2: cpu_milli: '-100' is not a non-negative integer"},
      {"bad_memory.csv", std::string(kPodHeader) + "p1,1,1.5,1,500,\n", ":2: memory_mib"},
      {"cells.csv", std::string(kPodHeader) + "p1,1,1,1,500\n", ":2: 5 cells, the header has 6"},
      {"missing.csv", "name,cpu_milli,memory_mib,gpu_milli\np1,1,1,1\n",
       ":1: missing column 'num_gpu'"},
  };
  for (const Case& c : cases) {
    const std::string path = WriteTemp(c.name, c.text);
    absl::StatusOr<std::vector<TracePod>> pods = ReadPodsCsv(path);
    ASSERT_FALSE(pods.ok()) << c.name;
    EXPECT_EQ(pods.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(pods.status().message()), StartsWith(path + c.expected_prefix));
  }
  EXPECT_EQ(ReadPodsCsv("/nonexistent/pods.csv").status().code(), absl::StatusCode::kNotFound);
}

// ---------------------------------------------------------------------------------------------
// ConvertToMig

TEST(ConvertToMig, NodesAndShares) {
  std::vector<NodeSpec> nodes = {SharedNode("eight", 8, 96000, 1 << 20, "G2"),
                                 SharedNode("two", 2, 32000, 1 << 20, "T4"), SharedNode("cpu", 0)};
  std::vector<TracePod> pods;
  for (int milli : {810, 470, 320, 100, 142, 143, 571, 572, 285, 286}) {
    pods.push_back({"share" + std::to_string(milli), Share(milli, 1000)});
  }
  pods.push_back({"whole", Whole(2, 500)});
  pods.push_back({"cpu", CpuOnly(700)});
  ASSERT_TRUE(ConvertToMig(nodes, pods).ok());

  EXPECT_EQ(nodes[0].mode, GpuMode::kMig);
  EXPECT_EQ(nodes[0].hardware, CatalogModel("H100-80GB"));
  EXPECT_EQ(nodes[0].gpu_memory_mib, CatalogModel("H100-80GB")->memory_mib);
  EXPECT_EQ(nodes[0].model, "G2");  // the label stays for gpu_spec constraints
  EXPECT_EQ(nodes[1].mode, GpuMode::kMig);
  EXPECT_EQ(nodes[1].hardware, CatalogModel("A100-80GB"));
  EXPECT_EQ(nodes[1].model, "T4");
  EXPECT_EQ(nodes[2].mode, GpuMode::kShared);
  EXPECT_EQ(nodes[2].hardware, nullptr);
  EXPECT_TRUE(Cluster::Create(nodes).ok());

  auto converted = [&](size_t i) {
    const Request& r = pods[i].request;
    return r.mig_profile.empty() ? "milli " + std::to_string(r.gpu_milli) : r.mig_profile;
  };
  EXPECT_EQ(converted(0), "milli 1000");  // 810 -> 7g: the whole GPU
  EXPECT_TRUE(pods[0].request.whole());
  EXPECT_EQ(converted(1), "4g");
  EXPECT_EQ(converted(2), "3g");
  EXPECT_EQ(converted(3), "1g");
  EXPECT_EQ(converted(4), "1g");  // 142·7 = 994 <= 1000
  EXPECT_EQ(converted(5), "2g");  // 143·7 = 1001
  EXPECT_EQ(converted(6), "4g");
  EXPECT_EQ(converted(7), "milli 1000");
  EXPECT_EQ(converted(8), "2g");
  EXPECT_EQ(converted(9), "3g");
  for (size_t i : {1u, 2u, 3u, 4u, 5u, 6u, 8u, 9u}) {
    EXPECT_EQ(pods[i].request.gpu_milli, 0) << i;
    EXPECT_EQ(pods[i].request.num_gpu, 1) << i;
    EXPECT_EQ(pods[i].request.cpu_milli, 1000) << i;
    EXPECT_TRUE(ValidateRequest(pods[i].request).ok()) << i;
  }
  EXPECT_TRUE(pods[10].request.whole());
  EXPECT_EQ(pods[10].request.num_gpu, 2);
  EXPECT_TRUE(pods[11].request.cpu_only());
}

// ---------------------------------------------------------------------------------------------
// MakeArrivals

std::vector<TracePod> SharesTrace(const std::vector<int>& milli) {
  std::vector<TracePod> trace;
  for (size_t i = 0; i < milli.size(); ++i) {
    trace.push_back({"p" + std::to_string(1000 + i), Share(milli[i], 100)});
  }
  return trace;
}

std::vector<TracePod> RepeatedShares(int count, int milli) {
  return SharesTrace(std::vector<int>(static_cast<size_t>(count), milli));
}

std::int64_t DemandOf(const Request& request) {
  if (request.cpu_only()) return 0;
  if (!request.mig_profile.empty()) return (request.mig_profile[0] - '0') * 1000 / 7;
  return static_cast<std::int64_t>(request.milli()) * request.num_gpu;
}

void ExpectRankPermutation(const Arrivals& arrivals, int nodes) {
  std::vector<int> sorted = arrivals.node_rank;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> expected(static_cast<size_t>(nodes));
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(sorted, expected);
}

TEST(MakeArrivals, DeterministicPerSeedDifferentAcrossSeeds) {
  const std::vector<TracePod> trace =
      SharesTrace({100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 150, 250, 350, 450, 550});
  const Arrivals a = MakeArrivals(trace, 20, 10, 42, 1.3);
  const Arrivals b = MakeArrivals(trace, 20, 10, 42, 1.3);
  const Arrivals c = MakeArrivals(trace, 20, 10, 43, 1.3);
  EXPECT_EQ(a.pods, b.pods);
  EXPECT_EQ(a.node_rank, b.node_rank);
  EXPECT_EQ(a.demand_milli, b.demand_milli);
  EXPECT_NE(a.pods, c.pods);
  EXPECT_NE(a.node_rank, c.node_rank);
  ExpectRankPermutation(a, 20);
  ExpectRankPermutation(c, 20);
  // The demand is the sum over the sequence; every pointer is into the trace.
  for (const Arrivals* arrivals : {&a, &c}) {
    std::int64_t demand = 0;
    for (const TracePod* pod : arrivals->pods) {
      ASSERT_GE(pod, trace.data());
      ASSERT_LT(pod, trace.data() + trace.size());
      demand += DemandOf(pod->request);
    }
    EXPECT_EQ(demand, arrivals->demand_milli);
  }
}

TEST(MakeArrivals, TunesUpToJustBelowTheTarget) {
  // 20 × 300 = 6000 < 13000 = 1.3 × 10 GPUs: clones of 300 until one more would pass.
  const std::vector<TracePod> trace = RepeatedShares(20, 300);
  const Arrivals arrivals = MakeArrivals(trace, 3, 10, 7, 1.3);
  EXPECT_EQ(arrivals.demand_milli, 12900);
  EXPECT_EQ(arrivals.pods.size(), 43u);
  // The original pods come first, each once (a shuffle).
  const std::set<const TracePod*> first(arrivals.pods.begin(), arrivals.pods.begin() + 20);
  EXPECT_EQ(first.size(), 20u);

  // Mixed sizes: below the target, and the largest per-GPU amount would pass it.
  const std::vector<TracePod> mixed = SharesTrace({100, 250, 500, 1000, 700, 330, 90});
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    const Arrivals tuned = MakeArrivals(mixed, 3, 10, seed, 1.3);
    EXPECT_LE(tuned.demand_milli, 13000) << seed;
    EXPECT_GT(tuned.demand_milli + 1000, 13000) << seed;
    EXPECT_GT(tuned.pods.size(), mixed.size());
  }
}

TEST(MakeArrivals, TuningComparesThePerGpuAmountAsTheArtefactDoes) {
  // 4-GPU pods: a clone is appended while demand + 1000 (its per-GPU milli) <= target, so the
  // demand may end above the target.
  std::vector<TracePod> trace = {{"a", Whole(4)}, {"b", Whole(4)}};
  const Arrivals arrivals = MakeArrivals(trace, 2, 10, 42, 1.3);
  EXPECT_EQ(arrivals.pods.size(), 4u);
  EXPECT_EQ(arrivals.demand_milli, 16000);
}

TEST(MakeArrivals, TunesDownWhenTheTraceExceedsTheTarget) {
  // 50 × 300 = 15000 > 10000 = 1.0 × 10 GPUs: pods removed until 9900.
  const std::vector<TracePod> trace = RepeatedShares(50, 300);
  const Arrivals arrivals = MakeArrivals(trace, 3, 10, 5, 1.0);
  EXPECT_EQ(arrivals.demand_milli, 9900);
  EXPECT_EQ(arrivals.pods.size(), 33u);
  const std::set<const TracePod*> distinct(arrivals.pods.begin(), arrivals.pods.end());
  EXPECT_EQ(distinct.size(), 33u);

  const std::vector<TracePod> mixed =
      SharesTrace({100, 900, 500, 1000, 700, 330, 90, 600, 800, 1000, 1000, 1000, 400, 200});
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    const Arrivals tuned = MakeArrivals(mixed, 3, 5, seed, 1.0);
    EXPECT_LE(tuned.demand_milli, 5000) << seed;
    EXPECT_GT(tuned.demand_milli + 1000, 5000) << seed;
    EXPECT_LT(tuned.pods.size(), mixed.size());
  }
}

TEST(MakeArrivals, MigProfilesCountTheirSlices) {
  std::vector<TracePod> trace;
  for (int i = 0; i < 10; ++i) trace.push_back({"m" + std::to_string(i), MigRequest("3g")});
  // 10 × 428 = 4280 > 2600 = 1.3 × 2 GPUs: 6 × 428 = 2568 remain.
  const Arrivals arrivals = MakeArrivals(trace, 1, 2, 42, 1.3);
  EXPECT_EQ(arrivals.demand_milli, 2568);
  EXPECT_EQ(arrivals.pods.size(), 6u);
}

TEST(MakeArrivals, EmptyTrace) {
  const Arrivals arrivals = MakeArrivals({}, 4, 8, 42, 1.3);
  EXPECT_TRUE(arrivals.pods.empty());
  EXPECT_EQ(arrivals.demand_milli, 0);
  ExpectRankPermutation(arrivals, 4);
}

// Runs MakeArrivals on `trace` with 5 s and 1 GiB of address space; exits 0 if it returns. Go's
// seeding table is computed first, outside the limit (a fixed one-time cost, not the tuning's).
// Under AddressSanitizer, whose shadow memory needs address space of its own, only the time limit
// applies.
[[noreturn]] void ArrivalsWithLimits(const std::vector<TracePod>& trace) {
  GoRand::Cooked();
  alarm(5);
#ifndef __SANITIZE_ADDRESS__
  struct rlimit memory = {};
  memory.rlim_cur = rlim_t{1} << 30;
  memory.rlim_max = rlim_t{1} << 30;
  setrlimit(RLIMIT_AS, &memory);
#endif
  const Arrivals arrivals = MakeArrivals(trace, 1, 4, 42, 1.3);
  std::_Exit(arrivals.demand_milli == 0 ? 0 : 1);
}

// Regression (src/place/replay.cc, MakeArrivals): when no pod of the trace asks for a GPU, tuning
// up never reached the target (every clone adds 0 milli) and the loop appended clones until memory
// ran out; `gpuslice replay` on a CPU-only pod list hung. Expected: it terminates. The
// death-test child has 5 s and 1 GiB of address space; a hang ends it by a signal
// (or by std::bad_alloc).
TEST(MakeArrivalsDeathTest, CpuOnlyTraceTerminates) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<TracePod> trace = {{"a", CpuOnly(1000)}, {"b", CpuOnly(2000)}};
  EXPECT_EXIT(ArrivalsWithLimits(trace), ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------------------------
// Replay

std::vector<NodeSpec> SmallNodes() {
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < 6; ++i) {
    nodes.push_back(SharedNode("node-" + std::to_string(i), i % 3 == 0 ? 8 : 4, 48000 + 8000 * i,
                               1 << 20, i % 2 == 0 ? "G1" : "G2"));
  }
  return nodes;
}

std::vector<TracePod> SmallTrace() {
  std::vector<TracePod> trace;
  const int milli[] = {100, 200, 250, 300, 500, 700, 810, 1000, 1000, 1000};
  for (int i = 0; i < 60; ++i) {
    Request request;
    request.cpu_milli = 1000 + 500 * (i % 7);
    request.memory_mib = 1024;
    if (i % 11 == 5) {
      // CPU only
    } else if (i % 13 == 7) {
      request.num_gpu = 2;
      request.gpu_milli = 1000;
    } else {
      request.num_gpu = 1;
      request.gpu_milli = milli[i % 10];
      if (i % 9 == 4) request.models = {"G2"};
    }
    trace.push_back({"pod-" + std::to_string(100 + i), request});
  }
  return trace;
}

std::vector<TypicalRequest> TypicalOf(const std::vector<TracePod>& trace) {
  std::vector<Request> requests;
  for (const TracePod& pod : trace) requests.push_back(pod.request);
  return TypicalRequests(requests);
}

int TotalGpus(const std::vector<NodeSpec>& nodes) {
  int gpus = 0;
  for (const NodeSpec& node : nodes) gpus += node.gpus;
  return gpus;
}

// Checks one replay against an independent run of the same arrival sequence: the counts, the
// summary numbers, a non-decreasing curve, and curve points equal to the arrival itself (the mean
// of the arrived % of the events in the bucket) in every bucket before the first failure.
void CheckReplay(const std::vector<NodeSpec>& nodes, const std::vector<TracePod>& trace,
                 const std::string& policy, std::uint64_t seed, const ReplayOptions& options) {
  SCOPED_TRACE(policy + " seed " + std::to_string(seed));
  const std::vector<TypicalRequest> typical = TypicalOf(trace);
  absl::StatusOr<ReplayResult> result = Replay(nodes, trace, typical, policy, seed, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->policy, policy);
  EXPECT_EQ(result->seed, seed);

  const int gpus = TotalGpus(nodes);
  const double capacity = gpus;
  const Arrivals arrivals =
      MakeArrivals(trace, static_cast<int>(nodes.size()), gpus, seed, options.target_ratio);
  Engine engine(
      *Cluster::Create(nodes),
      NewPolicy(policy,
                options.learn && policy == "gpuslice" ? std::vector<TypicalRequest>{} : typical,
                seed),
      arrivals.node_rank);
  engine.set_explain_rejections(false);
  int placed = 0;
  size_t first_failure = arrivals.pods.size();
  std::vector<std::int64_t> arrived_after;
  std::int64_t arrived = 0;
  for (size_t i = 0; i < arrivals.pods.size(); ++i) {
    arrived += DemandOf(arrivals.pods[i]->request);
    arrived_after.push_back(arrived);
    if (engine.Place(arrivals.pods[i]->request).ok()) {
      ++placed;
    } else if (first_failure == arrivals.pods.size()) {
      first_failure = i;
    }
  }
  EXPECT_EQ(result->pods, static_cast<int>(arrivals.pods.size()));
  EXPECT_EQ(result->placed, placed);
  EXPECT_EQ(result->placed + result->failed, result->pods);
  EXPECT_NEAR(result->final_alloc_ratio,
              100.0 * static_cast<double>(engine.cluster().allocated_milli()) / (capacity * 1000),
              1e-9);

  const int last = static_cast<int>(std::lround(options.target_ratio * 100));
  // The curve's last point, or the final allocation where no event fell near it.
  const double at_last = result->curve[static_cast<size_t>(last)];
  EXPECT_EQ(result->alloc_ratio, std::isnan(at_last) ? result->final_alloc_ratio : at_last);
  EXPECT_NEAR(result->unallocated_gpus, capacity * (1 - result->alloc_ratio / 100), 1e-9);
  EXPECT_GT(result->alloc_ratio, 0);
  EXPECT_LE(result->alloc_ratio, 100);

  double previous = -1;
  for (int x = 0; x < kCurvePoints; ++x) {
    const double value = result->curve[static_cast<size_t>(x)];
    if (std::isnan(value)) continue;
    EXPECT_GE(value, previous - 1e-9) << "curve decreases at " << x;
    EXPECT_LE(value, 100 + 1e-9);
    previous = value;
  }

  // Buckets of events before the first failure: allocation == arrival.
  std::vector<double> sum(kCurvePoints, 0);
  std::vector<int> count(kCurvePoints, 0);
  std::vector<size_t> last_event(kCurvePoints, 0);
  for (size_t i = 0; i < arrived_after.size(); ++i) {
    const double percent = static_cast<double>(arrived_after[i]) / capacity / 10.0;
    const int a = static_cast<int>(std::nearbyint(percent));
    if (a < 0 || a >= kCurvePoints) continue;
    sum[static_cast<size_t>(a)] += std::round(percent * 100) / 100;
    count[static_cast<size_t>(a)] += 1;
    last_event[static_cast<size_t>(a)] = i;
  }
  int checked = 0;
  for (int x = 0; x < kCurvePoints; ++x) {
    const size_t i = static_cast<size_t>(x);
    if (count[i] == 0 || last_event[i] >= first_failure) continue;
    EXPECT_NEAR(result->curve[i], sum[i] / count[i], 1e-9) << "bucket " << x;
    EXPECT_NEAR(result->curve[i], x, 0.5 + 1e-9) << "bucket " << x;
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(Replay, EveryPolicyOnASmallTrace) {
  const std::vector<NodeSpec> nodes = SmallNodes();
  const std::vector<TracePod> trace = SmallTrace();
  for (const std::string& policy : PolicyNames()) {
    for (std::uint64_t seed : {1u, 2u}) CheckReplay(nodes, trace, policy, seed, {});
  }
}

TEST(Replay, LowerTargetAndLearnMode) {
  ReplayOptions options;
  options.target_ratio = 1.0;
  CheckReplay(SmallNodes(), SmallTrace(), "fgd", 3, options);
  options.learn = true;
  options.target_ratio = 1.3;
  CheckReplay(SmallNodes(), SmallTrace(), "gpuslice", 3, options);
}

TEST(Replay, MigVariant) {
  std::vector<NodeSpec> nodes = SmallNodes();
  std::vector<TracePod> trace = SmallTrace();
  ASSERT_TRUE(ConvertToMig(nodes, trace).ok());
  ReplayOptions options;
  options.mig = true;
  for (const char* policy : {"bestfit", "fgd", "gpuslice"}) {
    CheckReplay(nodes, trace, policy, 42, options);
  }
}

TEST(Replay, DeterministicPerSeed) {
  const std::vector<TracePod> trace = SmallTrace();
  const std::vector<TypicalRequest> typical = TypicalOf(trace);
  for (const std::string& policy : PolicyNames()) {
    absl::StatusOr<ReplayResult> a = Replay(SmallNodes(), trace, typical, policy, 9);
    absl::StatusOr<ReplayResult> b = Replay(SmallNodes(), trace, typical, policy, 9);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->placed, b->placed) << policy;
    EXPECT_EQ(a->alloc_ratio, b->alloc_ratio) << policy;
    for (size_t x = 0; x < a->curve.size(); ++x) {
      if (std::isnan(a->curve[x])) {
        EXPECT_TRUE(std::isnan(b->curve[x])) << policy << " " << x;
      } else {
        EXPECT_EQ(a->curve[x], b->curve[x]) << policy << " " << x;
      }
    }
  }
}

TEST(Replay, Errors) {
  const std::vector<TracePod> trace = SmallTrace();
  const std::vector<TypicalRequest> typical = TypicalOf(trace);
  EXPECT_EQ(Replay(SmallNodes(), trace, typical, "nope", 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Replay({SharedNode("cpu", 0)}, trace, typical, "fgd", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      Replay({SharedNode("a", 1), SharedNode("a", 1)}, trace, typical, "fgd", 1).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// The artefact's arrival sequences (fgd-protocol.md §2.4, step 5), drawn from Go's math/rand.
TEST(MakeArrivals, AlibabaDefaultTraceArrivesAsInTheArtefact) {
  const std::string dir = std::string(GPUSLICE_SHARED_DIR) + "/data/alibaba-gpu-v2023";
  if (!fs::exists(dir)) GPUSLICE_SKIP_OR_FAIL_IN_CI(dir << " not found");
  absl::StatusOr<std::vector<TracePod>> pods = ReadPodsCsv(dir + "/openb_pod_list_default.csv");
  ASSERT_TRUE(pods.ok()) << pods.status();
  struct Case {
    std::uint64_t seed;
    std::vector<std::string> first;
    size_t clones;
    size_t total;
  };
  for (const Case& c : {Case{42, {"0255", "1685", "6784", "4463", "0602"}, 2714, 10866},
                        Case{43, {"2283", "7248", "5897", "4175", "5883"}, 2641, 10793}}) {
    const Arrivals arrivals = MakeArrivals(*pods, 1213, 6212, c.seed, 1.3);
    ASSERT_EQ(arrivals.pods.size(), c.total) << c.seed;
    EXPECT_EQ(arrivals.pods.size() - pods->size(), c.clones) << c.seed;
    for (size_t i = 0; i < c.first.size(); ++i) {
      EXPECT_EQ(arrivals.pods[i]->name, "openb-pod-" + c.first[i]) << c.seed << " #" << i;
    }
    if (c.seed == 42) {
      EXPECT_EQ(arrivals.demand_milli, 8075080);
    }
    ExpectRankPermutation(arrivals, 1213);
  }
}

// The real default trace of the FGD artefact (Alibaba cluster-trace-gpu-v2023), one seed.
TEST(Replay, AlibabaDefaultTraceAgainstTheArtefact) {
  const std::string dir = std::string(GPUSLICE_SHARED_DIR) + "/data/alibaba-gpu-v2023";
  if (!fs::exists(dir)) GPUSLICE_SKIP_OR_FAIL_IN_CI(dir << " not found");
  absl::StatusOr<std::vector<NodeSpec>> nodes = ReadNodesCsv(dir + "/openb_node_list_gpu_node.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  absl::StatusOr<std::vector<TracePod>> pods = ReadPodsCsv(dir + "/openb_pod_list_default.csv");
  ASSERT_TRUE(pods.ok()) << pods.status();
  EXPECT_EQ(TotalGpus(*nodes), 6212);
  const std::vector<TypicalRequest> typical = TypicalOf(*pods);
  EXPECT_EQ(typical.size(), 35u);  // fgd-protocol.md §4.6: top 35 of 91 keys

  absl::StatusOr<ReplayResult> fgd = Replay(*nodes, *pods, typical, "fgd", 42);
  absl::StatusOr<ReplayResult> ours = Replay(*nodes, *pods, typical, "gpuslice", 42);
  ASSERT_TRUE(fgd.ok()) << fgd.status();
  ASSERT_TRUE(ours.ok()) << ours.status();
  // fgd-protocol.md §5.4: FGD at 130 % on the default trace, 10-seed mean 95.39.
  EXPECT_NEAR(fgd->alloc_ratio, 95.39, 1.5);
  EXPECT_LT(ours->unallocated_gpus, fgd->unallocated_gpus);
  EXPECT_NEAR(fgd->unallocated_gpus, 6212 * (1 - fgd->alloc_ratio / 100), 1e-6);
}

}  // namespace
}  // namespace gpuslice::place
