// gpuslice replay: replay a cluster's request trace under every placement policy, side by side,
// to choose one (FGD's protocol; gpuslice/place/replay.h).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common.h"
#include "gpuslice/place/policy.h"
#include "gpuslice/place/replay.h"

namespace gpuslice::cli {
namespace {

struct ReplayCliOptions {
  std::string nodes;
  std::string pods;
  std::string policy = "all";
  std::string seeds = "42-51";
  double ratio = 1.3;
  bool mig = false;
  bool learn = false;
  int jobs = 0;
  bool json = false;
  bool quiet = false;
};

// "42-51" or "42,45,50" or "7".
absl::StatusOr<std::vector<std::uint64_t>> ParseSeeds(const std::string& text) {
  std::vector<std::uint64_t> seeds;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> range = absl::StrSplit(part, '-');
    std::uint64_t from = 0;
    std::uint64_t to = 0;
    if (range.size() > 2 || !absl::SimpleAtoi(range[0], &from) ||
        !absl::SimpleAtoi(range.back(), &to) || to < from || to - from > 10000) {
      return absl::InvalidArgumentError(
          absl::StrCat("--seeds: '", std::string(part), "' is not a seed or a range like 42-51"));
    }
    for (std::uint64_t s = from; s <= to; ++s) seeds.push_back(s);
  }
  if (seeds.empty()) return absl::InvalidArgumentError("--seeds: no seed given");
  return seeds;
}

struct Summary {
  std::string policy;
  double unallocated = 0;
  double unallocated_min = 0;
  double unallocated_max = 0;
  double alloc_ratio = 0;
  double seconds = 0;
  double failed = 0;
  double pods = 0;
  std::array<double, place::kCurvePoints> curve{};
  std::vector<std::pair<std::uint64_t, double>> per_seed;  // (seed, unallocated GPUs)
};

nlohmann::json PerSeedJson(const Summary& summary) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [seed, unallocated] : summary.per_seed) {
    out.push_back({{"seed", seed}, {"unallocated_gpus", unallocated}});
  }
  return out;
}

Summary Summarise(const std::string& policy, const std::vector<place::ReplayResult>& runs) {
  Summary summary;
  summary.policy = policy;
  summary.unallocated_min = 1e300;
  summary.unallocated_max = -1e300;
  for (const place::ReplayResult& run : runs)
    summary.per_seed.emplace_back(run.seed, run.unallocated_gpus);
  std::array<int, place::kCurvePoints> curve_count{};
  for (const place::ReplayResult& run : runs) {
    summary.unallocated += run.unallocated_gpus;
    summary.unallocated_min = std::min(summary.unallocated_min, run.unallocated_gpus);
    summary.unallocated_max = std::max(summary.unallocated_max, run.unallocated_gpus);
    summary.alloc_ratio += run.alloc_ratio;
    summary.seconds += run.seconds;
    summary.failed += run.failed;
    summary.pods += run.pods;
    for (size_t x = 0; x < run.curve.size(); ++x) {
      if (!std::isnan(run.curve[x])) {
        summary.curve[x] += run.curve[x];
        curve_count[x] += 1;
      }
    }
  }
  const double n = static_cast<double>(runs.size());
  summary.unallocated /= n;
  summary.alloc_ratio /= n;
  summary.seconds /= n;
  summary.failed /= n;
  summary.pods /= n;
  for (size_t x = 0; x < summary.curve.size(); ++x) {
    summary.curve[x] = curve_count[x] > 0 ? summary.curve[x] / curve_count[x]
                                          : std::numeric_limits<double>::quiet_NaN();
  }
  return summary;
}

int RunReplay(const ReplayCliOptions& options) {
  absl::StatusOr<std::vector<std::uint64_t>> seeds = ParseSeeds(options.seeds);
  if (!seeds.ok()) {
    PrintError(std::string(seeds.status().message()));
    return kExitBadInput;
  }
  std::vector<std::string> policies;
  if (options.policy == "all") {
    policies = place::PolicyNames();
  } else {
    for (absl::string_view name_view : absl::StrSplit(options.policy, ',')) {
      const std::string name(name_view);
      place::PolicyOptions probe;
      if (absl::StatusOr<std::unique_ptr<place::Policy>> made = place::MakePolicy(name, probe);
          !made.ok()) {
        PrintError(absl::StrCat("--policy: ", std::string(made.status().message())));
        return kExitBadInput;
      }
      policies.emplace_back(name);
    }
  }
  if (!(options.ratio > 0 && options.ratio <= 1.3)) {
    PrintError("--ratio: must be in (0, 1.3] (the curve covers arrivals up to 130%)");
    return kExitBadInput;
  }
  absl::StatusOr<std::vector<place::NodeSpec>> nodes = place::ReadNodesCsv(options.nodes);
  if (!nodes.ok()) {
    PrintError(std::string(nodes.status().message()));
    return kExitBadInput;
  }
  absl::StatusOr<std::vector<place::TracePod>> pods = place::ReadPodsCsv(options.pods);
  if (!pods.ok()) {
    PrintError(std::string(pods.status().message()));
    return kExitBadInput;
  }
  if (options.mig) {
    if (absl::Status status = place::ConvertToMig(*nodes, *pods); !status.ok()) {
      PrintError(std::string(status.message()));
      return kExitBadInput;
    }
  }
  std::vector<place::Request> requests;
  requests.reserve(pods->size());
  for (const place::TracePod& pod : *pods) requests.push_back(pod.request);
  const std::vector<place::TypicalRequest> typical = place::TypicalRequests(requests);

  // Every (policy, seed) run is independent; run them on a small pool of threads.
  struct Job {
    size_t policy = 0;
    std::uint64_t seed = 0;
    absl::StatusOr<place::ReplayResult> result = absl::UnknownError("not run");
  };
  std::vector<Job> jobs;
  for (size_t p = 0; p < policies.size(); ++p) {
    for (std::uint64_t seed : *seeds) jobs.push_back(Job{p, seed, absl::UnknownError("not run")});
  }
  int threads = options.jobs > 0
                    ? options.jobs
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min<int>(threads, static_cast<int>(jobs.size()));
  place::ReplayOptions replay_options;
  replay_options.target_ratio = options.ratio;
  replay_options.mig = options.mig;
  replay_options.learn = options.learn;
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::mutex print_mutex;
  auto worker = [&] {
    for (size_t j = next++; j < jobs.size(); j = next++) {
      Job& job = jobs[j];
      job.result =
          place::Replay(*nodes, *pods, typical, policies[job.policy], job.seed, replay_options);
      const size_t finished = ++done;
      if (!options.quiet) {
        std::lock_guard<std::mutex> lock(print_mutex);
        std::cerr << "replay: " << finished << "/" << jobs.size() << " runs done ("
                  << policies[job.policy] << ", seed " << job.seed << ")\n";
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (std::thread& thread : pool) thread.join();

  std::vector<Summary> summaries;
  for (size_t p = 0; p < policies.size(); ++p) {
    std::vector<place::ReplayResult> runs;
    for (const Job& job : jobs) {
      if (job.policy != p) continue;
      if (!job.result.ok()) {
        PrintError(absl::StrCat(policies[p], " seed ", job.seed, ": ",
                                std::string(job.result.status().message())));
        return kExitCheckFailed;
      }
      runs.push_back(*job.result);
    }
    summaries.push_back(Summarise(policies[p], runs));
  }
  const std::string trace = std::filesystem::path(options.pods).stem().string();
  int total_gpus = 0;
  for (const place::NodeSpec& node : *nodes) total_gpus += node.gpus;

  if (options.json) {
    nlohmann::json out;
    out["trace"] = trace;
    out["nodes"] = nodes->size();
    out["gpus"] = total_gpus;
    out["mig"] = options.mig;
    out["learn"] = options.learn;
    out["ratio"] = options.ratio;
    out["seeds"] = *seeds;
    out["typical_requests"] = typical.size();
    out["policies"] = nlohmann::json::array();
    for (const Summary& s : summaries) {
      nlohmann::json curve = nlohmann::json::array();
      for (double v : s.curve)
        curve.push_back(std::isnan(v) ? nlohmann::json() : nlohmann::json(v));
      out["policies"].push_back({{"policy", s.policy},
                                 {"unallocated_gpus", s.unallocated},
                                 {"unallocated_gpus_min", s.unallocated_min},
                                 {"unallocated_gpus_max", s.unallocated_max},
                                 {"alloc_ratio", s.alloc_ratio},
                                 {"failed_pods", s.failed},
                                 {"pods", s.pods},
                                 {"seconds_per_run", s.seconds},
                                 {"per_seed", PerSeedJson(s)},
                                 {"curve", curve}});
    }
    PrintJson(out);
    return kExitOk;
  }
  std::cout << "replay of " << trace << " on " << nodes->size() << " nodes, " << total_gpus
            << " GPUs" << (options.mig ? " (MIG variant: A100/H100, shares as MIG profiles)" : "")
            << (options.learn ? " (gpuslice learns the request mix online)" : "")
            << "; arrivals to " << options.ratio * 100 << "% of GPU capacity; " << seeds->size()
            << " seed(s); " << typical.size() << " typical requests\n\n";
  Table table({"policy", "unallocated GPUs", "min-max", "alloc %", "failed pods", "s/run"});
  for (size_t c = 1; c < 6; ++c) table.RightAlign(c);
  for (const Summary& s : summaries) {
    table.Add({s.policy, absl::StrFormat("%.1f", s.unallocated),
               absl::StrFormat("%.0f-%.0f", s.unallocated_min, s.unallocated_max),
               absl::StrFormat("%.2f", s.alloc_ratio), absl::StrFormat("%.0f", s.failed),
               absl::StrFormat("%.2f", s.seconds)});
  }
  std::cout << table.Render() << "\n";
  std::cout << "allocation (% of GPUs) against arrived demand (% of capacity), mean over seeds:\n";
  std::vector<std::string> header = {"policy"};
  std::vector<int> points;
  for (int x = 50; x <= std::lround(options.ratio * 100); x += 10) points.push_back(x);
  for (int x : points) header.push_back(absl::StrCat(x, "%"));
  Table curve(header);
  for (size_t c = 1; c < header.size(); ++c) curve.RightAlign(c);
  for (const Summary& s : summaries) {
    std::vector<std::string> row = {s.policy};
    for (int x : points) {
      const double v = s.curve[static_cast<size_t>(x)];
      row.push_back(std::isnan(v) ? "-" : absl::StrFormat("%.2f", v));
    }
    curve.Add(row);
  }
  std::cout << curve.Render() << "\n";
  // Per-seed lines first: the summary lines stay the last lines of the output.
  for (const Summary& s : summaries) {
    for (const auto& [seed, unallocated] : s.per_seed) {
      std::cout << absl::StrFormat("replay-seed %s %s seed=%d unallocated_gpus=%.1f\n", trace,
                                   s.policy, seed, unallocated);
    }
  }
  for (const Summary& s : summaries) {
    std::cout << absl::StrFormat("replay %s %s unallocated_gpus=%.1f alloc_ratio=%.2f seeds=%d\n",
                                 trace, s.policy, s.unallocated, s.alloc_ratio, seeds->size());
  }
  return kExitOk;
}

}  // namespace

void AddReplayCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  (void)global;
  auto options = std::make_shared<ReplayCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "replay",
      "Replay a request trace under each placement policy (FGD's protocol: shuffled arrival per "
      "seed, demand tuned to 130% of GPU capacity, no departures) and compare unallocated GPUs");
  cmd->add_option("--nodes", options->nodes,
                  "Node list CSV: sn,cpu_milli,memory_mib,gpu,model (e.g. Alibaba's "
                  "openb_node_list_gpu_node.csv)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--pods", options->pods,
                  "Pod list CSV: name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec]")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--policy", options->policy,
                  "A policy, a comma-separated list, or 'all' (random, dotprod, gpuclustering, "
                  "gpupacking, bestfit, fgd, gpuslice)")
      ->capture_default_str();
  cmd->add_option("--seeds", options->seeds, "Seeds: 42-51, 42,43 or 7")->capture_default_str();
  cmd->add_option("--ratio", options->ratio,
                  "Arrived GPU demand to reach, as a fraction of GPU capacity")
      ->capture_default_str();
  cmd->add_flag("--mig", options->mig,
                "MIG variant: A100/H100 GPUs in MIG mode, shares rounded up to MIG profiles");
  cmd->add_flag("--learn", options->learn,
                "The gpuslice policy is not given the trace's request mix and learns it from the "
                "requests as they arrive");
  cmd->add_option("-j,--jobs", options->jobs, "Runs in parallel (default: one per CPU core)");
  cmd->add_flag("--json", options->json, "Machine-readable summary with the full curves");
  cmd->add_flag("-q,--quiet", options->quiet, "No progress lines on stderr");
  cmd->callback([options, action] { *action = [options] { return RunReplay(*options); }; });
}

}  // namespace gpuslice::cli
