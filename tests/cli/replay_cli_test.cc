// Black-box tests of `gpuslice replay`: a tiny hand-made trace under every policy (text summary
// lines and JSON curves), policy and seed selection, the MIG and learn variants, and bad input
// (exit code 2, the message naming file, line and column).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_gpuslice.h"
#include "nlohmann/json.hpp"

#ifndef GPUSLICE_BINARY
#error "GPUSLICE_BINARY must name the built gpuslice executable"
#endif
#ifndef GPUSLICE_SOURCE_DIR
#error "GPUSLICE_SOURCE_DIR must name the source tree"
#endif

namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;

namespace fs = std::filesystem;

using Outcome = gpuslice::cli::testing::CommandResult;

Outcome Gpuslice(const std::string& args, bool with_stderr = true) {
  return gpuslice::cli::testing::RunGpuslice(args, with_stderr);
}

const std::vector<std::string> kPolicies = {"random",  "dotprod", "gpuclustering", "gpupacking",
                                            "bestfit", "fgd",     "gpuslice"};

std::string Data(const std::string& name) {
  return std::string(GPUSLICE_SOURCE_DIR) + "/tests/place/data/" + name;
}

const std::string kTinyArgs =
    "replay --nodes '" + Data("tiny_nodes.csv") + "' --pods '" + Data("tiny_pods.csv") + "'";

constexpr int kTinyGpus = 14;  // 8 + 2 + 4 + 0

std::string WriteTemp(const std::string& name, const std::string& text) {
  const fs::path dir = fs::path(::testing::TempDir()) / "gpuslice_replay_cli";
  fs::create_directories(dir);
  const fs::path path = dir / name;
  std::ofstream out(path, std::ios::trunc);
  out << text;
  return path.string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct SummaryLine {
  std::string trace;
  std::string policy;
  double unallocated = 0;
  double alloc_ratio = 0;
  int seeds = 0;
};

// The `replay <trace> <policy> unallocated_gpus=... alloc_ratio=... seeds=N` lines, which must be
// the last lines of the output.
std::vector<SummaryLine> SummaryLines(const std::string& output) {
  static const std::regex line_re(
      R"(^replay (\S+) (\S+) unallocated_gpus=([0-9.]+) alloc_ratio=([0-9.]+) seeds=([0-9]+)$)");
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::vector<SummaryLine> summary;
  // Collect the trailing block of summary lines.
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    std::smatch match;
    if (!std::regex_match(*it, match, line_re)) break;
    summary.insert(summary.begin(), SummaryLine{match[1], match[2], std::stod(match[3]),
                                                std::stod(match[4]), std::stoi(match[5])});
  }
  return summary;
}

TEST(ReplayCli, HelpListsTheOptions) {
  const Outcome help = Gpuslice("replay --help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* option : {"--nodes", "--pods", "--policy", "--seeds", "--ratio", "--mig",
                             "--learn", "--jobs", "--json", "--quiet"}) {
    EXPECT_THAT(help.output, HasSubstr(option));
  }
}

TEST(ReplayCli, EveryPolicyEndsWithOneSummaryLineEach) {
  const Outcome run = Gpuslice(kTinyArgs + " --policy all --seeds 1-2 -q -j 2");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // -q: no progress lines.
  EXPECT_THAT(run.output, Not(HasSubstr("runs done")));
  EXPECT_THAT(run.output, HasSubstr("replay of tiny_pods on 4 nodes, 14 GPUs"));
  const std::vector<SummaryLine> summary = SummaryLines(run.output);
  ASSERT_EQ(summary.size(), kPolicies.size()) << run.output;
  for (size_t i = 0; i < summary.size(); ++i) {
    EXPECT_EQ(summary[i].trace, "tiny_pods");
    EXPECT_EQ(summary[i].policy, kPolicies[i]);
    EXPECT_EQ(summary[i].seeds, 2);
    EXPECT_GT(summary[i].alloc_ratio, 0);
    EXPECT_LE(summary[i].alloc_ratio, 100);
    // The mean of GPUs × (1 − ratio) over seeds is GPUs × (1 − mean ratio); printed rounded.
    EXPECT_NEAR(summary[i].unallocated, kTinyGpus * (1 - summary[i].alloc_ratio / 100),
                0.05 + kTinyGpus * 0.00005 + 1e-9)
        << kPolicies[i];
  }
}

// One `replay-seed <trace> <policy> seed=S unallocated_gpus=X` line per policy and seed, before
// the summary lines; the summary's mean is theirs.
TEST(ReplayCli, PerSeedLinesAverageToTheSummary) {
  const Outcome run = Gpuslice(kTinyArgs + " --policy fgd,bestfit --seeds 1-3 -q -j 2");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  static const std::regex seed_re(
      R"(^replay-seed tiny_pods (\S+) seed=([0-9]+) unallocated_gpus=([0-9.]+)$)");
  std::map<std::string, std::vector<std::pair<int, double>>> per_seed;
  std::istringstream in(run.output);
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (std::regex_match(line, match, seed_re)) {
      per_seed[match[1]].emplace_back(std::stoi(match[2]), std::stod(match[3]));
    }
  }
  const std::vector<SummaryLine> summary = SummaryLines(run.output);
  ASSERT_EQ(summary.size(), 2u) << run.output;
  for (const SummaryLine& line : summary) {
    const auto& seeds = per_seed[line.policy];
    ASSERT_EQ(seeds.size(), 3u) << line.policy;
    double sum = 0;
    for (size_t i = 0; i < seeds.size(); ++i) {
      EXPECT_EQ(seeds[i].first, static_cast<int>(i) + 1);
      sum += seeds[i].second;
    }
    EXPECT_NEAR(sum / 3, line.unallocated, 0.1) << line.policy;
  }
}

TEST(ReplayCli, ProgressOnStderrWithoutQuiet) {
  const Outcome run = Gpuslice(kTinyArgs + " --policy fgd,bestfit --seeds 3 -j 1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("replay: 2/2 runs done"));
  const std::vector<SummaryLine> summary = SummaryLines(run.output);
  ASSERT_EQ(summary.size(), 2u);
  EXPECT_EQ(summary[0].policy, "fgd");
  EXPECT_EQ(summary[1].policy, "bestfit");
  EXPECT_EQ(summary[0].seeds, 1);
}

TEST(ReplayCli, JsonHasEveryPolicyWithFullCurves) {
  const Outcome run = Gpuslice(kTinyArgs + " --seeds 1-2 --json -q", /*with_stderr=*/false);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json json = nlohmann::json::parse(run.output);
  EXPECT_EQ(json["trace"], "tiny_pods");
  EXPECT_EQ(json["nodes"].get<int>(), 4);
  EXPECT_EQ(json["gpus"].get<int>(), kTinyGpus);
  EXPECT_EQ(json["seeds"], nlohmann::json::array({1, 2}));
  EXPECT_FALSE(json["mig"].get<bool>());
  EXPECT_GT(json["typical_requests"].get<int>(), 0);
  ASSERT_EQ(json["policies"].size(), kPolicies.size());
  std::vector<std::string> names;
  for (const nlohmann::json& policy : json["policies"]) {
    names.push_back(policy["policy"].get<std::string>());
    ASSERT_EQ(policy["curve"].size(), 131u);
    const double ratio = policy["alloc_ratio"].get<double>();
    EXPECT_GT(ratio, 0);
    EXPECT_LE(ratio, 100);
    EXPECT_NEAR(policy["unallocated_gpus"].get<double>(), kTinyGpus * (1 - ratio / 100), 1e-6);
    EXPECT_LE(policy["unallocated_gpus_min"].get<double>(),
              policy["unallocated_gpus"].get<double>() + 1e-9);
    EXPECT_GE(policy["unallocated_gpus_max"].get<double>(),
              policy["unallocated_gpus"].get<double>() - 1e-9);
    EXPECT_GT(policy["pods"].get<double>(), 0);
    ASSERT_EQ(policy["per_seed"].size(), 2u);
    double seed_sum = 0;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(policy["per_seed"][i]["seed"].get<int>(), static_cast<int>(i) + 1);
      seed_sum += policy["per_seed"][i]["unallocated_gpus"].get<double>();
    }
    EXPECT_NEAR(seed_sum / 2, policy["unallocated_gpus"].get<double>(), 1e-6);
    // Points are allocation percentages, null where no event of any seed fell near them.
    int defined = 0;
    for (const nlohmann::json& point : policy["curve"]) {
      if (point.is_null()) continue;
      ++defined;
      EXPECT_GE(point.get<double>(), 0);
      EXPECT_LE(point.get<double>(), 100 + 1e-9);
    }
    EXPECT_GT(defined, 20);
  }
  EXPECT_THAT(names, ElementsAreArray(kPolicies));
}

TEST(ReplayCli, MigAndLearnVariants) {
  const Outcome mig = Gpuslice(kTinyArgs + " --policy fgd,gpuslice --seeds 1 --mig -q");
  ASSERT_EQ(mig.exit_code, 0) << mig.output;
  EXPECT_THAT(mig.output, HasSubstr("MIG variant"));
  EXPECT_EQ(SummaryLines(mig.output).size(), 2u);
  const Outcome learn = Gpuslice(kTinyArgs + " --policy gpuslice --seeds 1 --learn -q");
  ASSERT_EQ(learn.exit_code, 0) << learn.output;
  EXPECT_THAT(learn.output, HasSubstr("learns the request mix online"));
  EXPECT_EQ(SummaryLines(learn.output).size(), 1u);
  const Outcome ratio = Gpuslice(kTinyArgs + " --policy bestfit --seeds 1 --ratio 1.0 -q");
  ASSERT_EQ(ratio.exit_code, 0) << ratio.output;
  EXPECT_THAT(ratio.output, HasSubstr("arrivals to 100% of GPU capacity"));
}

TEST(ReplayCli, BadPodsFileNamesFileLineAndColumn) {
  std::string pods = ReadFile(Data("tiny_pods.csv"));
  // Line 4 gets a negative cpu_milli.
  std::vector<std::string> lines;
  std::istringstream in(pods);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_GE(lines.size(), 5u);
  lines[3] = "pod-bad,-100,1024,1,500,";
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  const std::string path = WriteTemp("negative_pods.csv", text);
  const Outcome run =
      Gpuslice("replay --nodes '" + Data("tiny_nodes.csv") + "' --pods '" + path + "' -q");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr(path + ":4: cpu_milli: '-100' is not a non-negative integer"));
}

TEST(ReplayCli, MissingColumnAndWrongCellCount) {
  const std::string no_milli =
      WriteTemp("no_milli.csv", "name,cpu_milli,memory_mib,num_gpu\np1,1000,10,1\n");
  const Outcome missing =
      Gpuslice("replay --nodes '" + Data("tiny_nodes.csv") + "' --pods '" + no_milli + "' -q");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr(no_milli + ":1: missing column 'gpu_milli'"));

  const std::string nodes =
      WriteTemp("short_nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\na,1000,10,1,G1\nb,1,1\n");
  const Outcome cells =
      Gpuslice("replay --nodes '" + nodes + "' --pods '" + Data("tiny_pods.csv") + "' -q");
  EXPECT_EQ(cells.exit_code, 2) << cells.output;
  EXPECT_THAT(cells.output, HasSubstr(nodes + ":3: 3 cells, the header has 5"));

  const std::string zero =
      WriteTemp("zero_milli.csv",
                "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,10,1,300\np2,1000,10,1,0\n");
  const Outcome zero_run =
      Gpuslice("replay --nodes '" + Data("tiny_nodes.csv") + "' --pods '" + zero + "' -q");
  EXPECT_EQ(zero_run.exit_code, 2) << zero_run.output;
  EXPECT_THAT(zero_run.output, HasSubstr(zero + ":3: gpu_milli"));
}

TEST(ReplayCli, UnknownPolicyBadSeedsAndBadRatio) {
  const Outcome policy = Gpuslice(kTinyArgs + " --policy fgd,tetris -q");
  EXPECT_EQ(policy.exit_code, 2) << policy.output;
  EXPECT_THAT(policy.output, HasSubstr("--policy: unknown policy 'tetris'"));
  for (const std::string& name : kPolicies) EXPECT_THAT(policy.output, HasSubstr(name));

  for (const char* seeds : {"5-3", "x", "1-2-3", "", "1,,2"}) {
    const Outcome run = Gpuslice(kTinyArgs + " --seeds '" + seeds + "' -q");
    EXPECT_EQ(run.exit_code, 2) << seeds << "\n" << run.output;
    EXPECT_THAT(run.output, HasSubstr("--seeds")) << seeds;
  }
  for (const char* ratio : {"0", "1.5", "-1"}) {
    const Outcome run = Gpuslice(kTinyArgs + " --ratio " + ratio + " -q");
    EXPECT_EQ(run.exit_code, 2) << ratio << "\n" << run.output;
    EXPECT_THAT(run.output, HasSubstr("--ratio")) << ratio;
  }
}

TEST(ReplayCli, MissingFilesAreRejected) {
  const Outcome run =
      Gpuslice("replay --nodes /nonexistent/nodes.csv --pods '" + Data("tiny_pods.csv") + "' -q");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.output, HasSubstr("nodes"));
}

}  // namespace
