// Planner scaling benchmark: how long plan::Plan takes, and how close to its proven lower bound it
// gets, on synthetic but realistic fleets and workload mixes of growing size.
//
//   plan_scaling_bench [--sizes W[:G],...] [--mode fast|exact|both] [--time-limit S]
//                      [--data DIR] [--seed N] [--json]
//
// Each size is W workloads on a fleet of about G GPUs (default G = W). The inputs are deterministic
// (std::mt19937_64 with a fixed seed):
//   * fleet: nodes of H100-80GB, A100-80GB, H200, B200 and A30 with MIG allowed, H100-80GB nodes
//     kept whole (MIG disabled) and L4 nodes (no MIG), at list-like prices per GPU-hour;
//   * workloads: replica workloads whose peak memory follows per-kind distributions (inference
//     5-60 GiB, notebooks 4-20 GiB, fine-tuning 20-130 GiB, batch 4-80 GiB), some restricted to a
//     few GPU models, a few needing a video decoder; and throughput workloads (rate + latency SLO)
//     with perf tables for every GPU model of the fleet: a concave throughput curve generated here,
//     or, with --data, ParvaGPU's A100-80GB tables scaled to the other models.
// Fast mode runs at every size; exact mode (--mode exact|both) on fleets of at most 1,000 GPUs.
// Every plan is checked with plan::CheckPlan. The targets (exact mode proves optimality on fleets
// up to 1,000 GPUs within 2 s; fast mode within 1% of the lower bound on 10,000 GPUs within 5 s)
// are reported as met or missed.
//
// Exit status: 0 every plan passed CheckPlan, 1 a plan failed it or Plan returned an error, 2 bad
// usage or input. A missed target is reported, not an error.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "gpuslice/geometry/enumerate.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/plan/inputs.h"
#include "gpuslice/plan/model.h"
#include "gpuslice/plan/plan.h"
#include "nlohmann/json.hpp"

namespace {

namespace fs = std::filesystem;
namespace plan = gpuslice::plan;
using gpuslice::hw::GpuModel;

constexpr int kExactMaxGpus = 1000;
constexpr double kExactTargetS = 2.0;
constexpr int kFastTargetGpus = 10000;
constexpr double kFastTargetS = 5.0;
constexpr double kFastTargetGapPct = 1.0;

struct Size {
  int workloads = 0;
  int gpus = 0;
};

struct Options {
  std::vector<Size> sizes = {{100, 100}, {1000, 1000}, {10000, 10000}};
  bool fast = true;
  bool exact = true;
  double time_limit_s = 10;
  std::string data_dir;
  std::uint64_t seed = 20261130;
  bool uniform_cost = false;  // every GPU costs 1 (a diagnostic: the objective is the GPU count)
  bool json = false;
};

int Usage(const std::string& message) {
  if (!message.empty()) std::cerr << "plan_scaling_bench: " << message << "\n";
  std::cerr << "usage: plan_scaling_bench [--sizes W[:G],...] [--mode fast|exact|both]"
               " [--time-limit S] [--data DIR] [--seed N] [--uniform-cost] [--json]\n"
               "  --sizes  W workloads on about G GPUs (default G = W); default"
               " 100,1000,10000\n"
               "  --mode   fast: the fast plan only; exact: the exact search (fleets <= 1000 GPUs);"
               " both (default)\n"
               "  --data   ParvaGPU's A100-80GB profile directory: scale its tables for the"
               " throughput workloads\n"
               "  --uniform-cost  every GPU costs 1 (diagnostic: minimise the GPU count)\n";
  return 2;
}

std::optional<long> ParseLong(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (*end != '\0') return std::nullopt;
  return value;
}

std::optional<std::vector<Size>> ParseSizes(const std::string& text) {
  std::vector<Size> sizes;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t colon = item.find(':');
    const auto workloads = ParseLong(item.substr(0, colon));
    const auto gpus = colon == std::string::npos ? workloads : ParseLong(item.substr(colon + 1));
    if (!workloads || !gpus || *workloads < 1 || *workloads > 1000000 || *gpus < 8 ||
        *gpus > 1000000) {
      return std::nullopt;
    }
    sizes.push_back({static_cast<int>(*workloads), static_cast<int>(*gpus)});
  }
  if (sizes.empty()) return std::nullopt;
  return sizes;
}

// Returns the options, or the exit status of a usage error.
std::optional<Options> ParseArgs(int argc, char** argv, int* status) {
  Options options;
  *status = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--uniform-cost") {
      options.uniform_cost = true;
    } else if (arg == "--sizes" && has_value) {
      auto sizes = ParseSizes(argv[++i]);
      if (!sizes) {
        Usage("bad --sizes");
        return std::nullopt;
      }
      options.sizes = std::move(*sizes);
    } else if (arg == "--mode" && has_value) {
      const std::string mode = argv[++i];
      options.fast = mode == "fast" || mode == "both";
      options.exact = mode == "exact" || mode == "both";
      if (!options.fast && !options.exact) {
        Usage("bad --mode '" + mode + "'");
        return std::nullopt;
      }
    } else if (arg == "--time-limit" && has_value) {
      char* end = nullptr;
      options.time_limit_s = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(options.time_limit_s > 0)) {
        Usage("bad --time-limit");
        return std::nullopt;
      }
    } else if (arg == "--data" && has_value) {
      options.data_dir = argv[++i];
    } else if (arg == "--seed" && has_value) {
      const auto seed = ParseLong(argv[++i]);
      if (!seed || *seed < 0) {
        Usage("bad --seed");
        return std::nullopt;
      }
      options.seed = static_cast<std::uint64_t>(*seed);
    } else if (arg == "-h" || arg == "--help") {
      Usage("");
      *status = 0;
      return std::nullopt;
    } else {
      Usage("unknown or incomplete argument '" + arg + "'");
      return std::nullopt;
    }
  }
  return options;
}

// ---------------------------------------------------------------------------------------------
// The fleet.

struct GpuType {
  const char* model;
  int per_node;
  double cost_per_hour;
  bool mig_allowed;
  double share;  // of the fleet's GPUs
  const char* prefix;
};

constexpr GpuType kGpuTypes[] = {
    {"H100-80GB", 8, 2.99, true, 0.27, "h100"},       {"A100-80GB", 8, 1.79, true, 0.22, "a100"},
    {"H200-141GB", 8, 3.79, true, 0.13, "h200"},      {"B200", 8, 5.99, true, 0.06, "b200"},
    {"A30-24GB", 4, 0.89, true, 0.10, "a30"},         {"L4", 8, 0.80, false, 0.12, "l4"},
    {"H100-80GB", 8, 2.99, false, 0.10, "h100whole"},
};

// Exactly `gpus` GPUs: each type gets its share (rounded down; the rest goes to the first type),
// in full nodes and one partial node.
plan::Fleet MakeFleet(int gpus, bool uniform_cost) {
  plan::Fleet fleet;
  fleet.costs_given = !uniform_cost;
  std::vector<int> per_type;
  int assigned = 0;
  for (const GpuType& type : kGpuTypes) {
    per_type.push_back(static_cast<int>(std::floor(gpus * type.share)));
    assigned += per_type.back();
  }
  per_type[0] += gpus - assigned;
  for (size_t t = 0; t < per_type.size(); ++t) {
    const GpuType& type = kGpuTypes[t];
    for (int node = 0; node * type.per_node < per_type[t]; ++node) {
      plan::GpuGroup group;
      group.model = type.model;
      group.count = std::min(type.per_node, per_type[t] - node * type.per_node);
      group.cost_per_hour = uniform_cost ? 1.0 : type.cost_per_hour;
      group.mig_allowed = type.mig_allowed;
      group.origin = "synthetic";
      plan::Node n;
      char name[64];
      std::snprintf(name, sizeof name, "%s-%05d", type.prefix, node);
      n.name = name;
      n.gpus.push_back(std::move(group));
      n.origin = "synthetic";
      fleet.nodes.push_back(std::move(n));
    }
  }
  return fleet;
}

int FleetGpus(const plan::Fleet& fleet) {
  int gpus = 0;
  for (const auto& node : fleet.nodes) {
    for (const auto& group : node.gpus) gpus += group.count;
  }
  return gpus;
}

// ---------------------------------------------------------------------------------------------
// Perf tables for the throughput workloads.

// How fast one compute slice of each model runs a typical CNN, relative to an A100 slice, and the
// memory of its base profiles. L4 has no MIG: it is measured whole, like 3 A100 slices.
struct ModelPerf {
  const GpuModel* model = nullptr;
  double speed = 1;
  std::vector<std::pair<int, double>> sizes;  // (compute slices, GiB); slices 0 = whole GPU
};

double SpeedOf(const std::string& id) {
  if (id == "H100-80GB") return 1.9;
  if (id == "H200-141GB") return 2.1;
  if (id == "B200") return 3.2;
  if (id == "A30-24GB") return 0.85;
  if (id == "L4") return 1.0;
  return 1.0;  // A100-80GB
}

std::vector<ModelPerf> FleetModels(const plan::Fleet& fleet, const gpuslice::hw::Catalog& catalog) {
  std::vector<ModelPerf> models;
  for (const auto& node : fleet.nodes) {
    for (const auto& group : node.gpus) {
      const GpuModel* model = catalog.Find(group.model);
      if (model == nullptr) continue;
      if (std::any_of(models.begin(), models.end(),
                      [&](const ModelPerf& m) { return m.model == model; })) {
        continue;
      }
      ModelPerf perf;
      perf.model = model;
      perf.speed = SpeedOf(model->id);
      if (model->mig_capable()) {
        for (const auto& profile : model->mig->profiles) {
          if (!gpuslice::geometry::IsBaseProfile(profile)) continue;
          const double gib = static_cast<double>(profile.memory_mib) / 1024.0;
          const bool seen = std::any_of(perf.sizes.begin(), perf.sizes.end(), [&](const auto& s) {
            return s.first == profile.compute_slices;
          });
          if (!seen) perf.sizes.emplace_back(profile.compute_slices, gib);
        }
        std::sort(perf.sizes.begin(), perf.sizes.end());
      } else {
        perf.sizes.emplace_back(0, static_cast<double>(model->memory_mib) / 1024.0);
      }
      models.push_back(std::move(perf));
    }
  }
  return models;
}

// A synthetic DNN: throughput T(g, b) = P x speed x g^alpha x b / (b + b0) on g compute slices
// at batch b (concave in g and b), one batch takes b / T, and a batch fits when
// weights + b x activations <= 90% of the instance memory.
struct Family {
  std::string name;
  double per_slice_rps = 0;  // P
  double alpha = 1;
  double half_batch = 4;  // b0
  double weights_gib = 1;
  double activation_gib = 0.1;
  // With --data: ParvaGPU's A100-80GB 1-process rows, keyed by (slices, batch).
  std::vector<plan::PerfPoint> measured;
};

constexpr int kBatches[] = {1, 2, 4, 8, 16, 32, 64, 128};

plan::PerfTable TableFor(const Family& family, const ModelPerf& perf) {
  plan::PerfTable table;
  table.gpu_model = perf.model->id;
  table.origin = "synthetic:" + family.name + "@" + perf.model->id;
  for (const auto& [slices, gib] : perf.sizes) {
    const int a100_slices = slices == 0 ? 3 : slices;
    if (!family.measured.empty()) {
      for (const auto& point : family.measured) {
        if (point.compute_slices != a100_slices) continue;
        plan::PerfPoint scaled = point;
        scaled.compute_slices = slices;
        scaled.throughput_rps = point.throughput_rps * perf.speed;
        scaled.latency_ms = point.latency_ms / perf.speed;
        table.points.push_back(scaled);
      }
      continue;
    }
    for (const int batch : kBatches) {
      plan::PerfPoint point;
      point.compute_slices = slices;
      point.batch = batch;
      if (family.weights_gib + batch * family.activation_gib <= 0.9 * gib) {
        point.throughput_rps = family.per_slice_rps * perf.speed *
                               std::pow(a100_slices, family.alpha) * batch /
                               (batch + family.half_batch);
        point.latency_ms = 1000.0 * batch / point.throughput_rps;
      }
      table.points.push_back(point);
    }
  }
  return table;
}

// The best A100 7g throughput and the latency of `batch` on an A100 2g (0 = infeasible).
double A100Throughput(const Family& family, int slices, int batch, double* latency_ms) {
  const double gib = slices == 7 ? 79.0 : 9.5 * slices;
  if (!family.measured.empty()) {
    for (const auto& point : family.measured) {
      if (point.compute_slices == slices && point.batch == batch && point.throughput_rps > 0) {
        *latency_ms = point.latency_ms;
        return point.throughput_rps;
      }
    }
    return 0;
  }
  if (family.weights_gib + batch * family.activation_gib > 0.9 * gib) return 0;
  const double rps =
      family.per_slice_rps * std::pow(slices, family.alpha) * batch / (batch + family.half_batch);
  *latency_ms = 1000.0 * batch / rps;
  return rps;
}

std::vector<Family> MakeFamilies(std::mt19937_64& rng, const std::string& data_dir,
                                 std::string* error) {
  std::vector<Family> families;
  if (!data_dir.empty()) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(data_dir, ec)) {
      const fs::path& path = entry.path();
      if (path.extension() == ".csv" && path.filename().string().rfind("SLO_", 0) != 0) {
        files.push_back(path);
      }
    }
    if (ec || files.empty()) {
      *error = "no ParvaGPU profile CSV in " + data_dir;
      return {};
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      auto table = plan::ReadPerfCsv(file.string(), "A100-80GB");
      if (!table.ok()) {
        *error = std::string(table.status().message());
        return {};
      }
      Family family;
      family.name = file.stem().string();
      for (const auto& point : table->points) {
        if (point.processes == 1 && point.profile.empty()) family.measured.push_back(point);
      }
      families.push_back(std::move(family));
    }
    return families;
  }
  std::uniform_real_distribution<double> per_slice(120, 800);
  std::uniform_real_distribution<double> alpha(0.75, 1.0);
  std::uniform_real_distribution<double> half_batch(1, 12);
  std::uniform_real_distribution<double> weights(0.5, 6);
  std::uniform_real_distribution<double> activations(0.02, 0.6);
  for (int f = 0; f < 12; ++f) {
    Family family;
    family.name = "dnn" + std::to_string(f);
    family.per_slice_rps = per_slice(rng);
    family.alpha = alpha(rng);
    family.half_batch = half_batch(rng);
    family.weights_gib = weights(rng);
    family.activation_gib = activations(rng);
    families.push_back(std::move(family));
  }
  return families;
}

// ---------------------------------------------------------------------------------------------
// Workloads.

double Clamp(double value, double low, double high) { return std::min(high, std::max(low, value)); }

double LogNormal(std::mt19937_64& rng, double median, double sigma, double low, double high) {
  std::lognormal_distribution<double> distribution(std::log(median), sigma);
  return Clamp(std::round(distribution(rng) * 10) / 10, low, high);
}

// An index in [0, n).
size_t Pick(std::mt19937_64& rng, size_t n) {
  return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}

int Replicas(std::mt19937_64& rng, double p, int cap) {
  std::geometric_distribution<int> distribution(p);
  return std::min(cap, 1 + distribution(rng));
}

// The largest memory (GiB) a workload restricted to `models` could get: a whole GPU.
double LargestGib(const std::vector<std::string>& models, const gpuslice::hw::Catalog& catalog) {
  double best = 0;
  for (const auto& id : models) {
    const GpuModel* model = catalog.Find(id);
    if (model != nullptr) best = std::max(best, static_cast<double>(model->memory_mib) / 1024.0);
  }
  return best;
}

plan::WorkloadSet MakeWorkloads(int count, const std::vector<Family>& families,
                                const std::vector<ModelPerf>& fleet_models,
                                const gpuslice::hw::Catalog& catalog, std::mt19937_64& rng) {
  static const std::vector<std::vector<std::string>> kRestrictions = {
      {"H100-80GB", "H200-141GB"},
      {"A100-80GB", "H100-80GB"},
      {"H200-141GB", "B200"},
      {"A100-80GB"},
      {"H100-80GB", "H200-141GB", "B200"},
  };
  plan::WorkloadSet set;
  std::uniform_real_distribution<double> unit(0, 1);
  for (int i = 0; i < count; ++i) {
    plan::Workload w;
    char name[32];
    std::snprintf(name, sizeof name, "w%05d", i);
    w.name = name;
    w.tenant = "team-" + std::to_string(static_cast<int>(unit(rng) * 40));
    w.origin = "synthetic:" + w.name;
    const double pick = unit(rng);
    double headroom = set.policy.memory_headroom;
    if (pick < 0.20) {
      // Throughput inference with perf tables on every model of the fleet.
      const Family& family = families[Pick(rng, families.size())];
      w.kind = plan::WorkloadKind::kInference;
      double latency = 0;
      int batch = std::array<int, 5>{2, 4, 8, 16, 32}[Pick(rng, 5)];
      while (batch > 1 && A100Throughput(family, 2, batch, &latency) <= 0) batch /= 2;
      if (A100Throughput(family, 2, batch, &latency) <= 0) latency = 50;
      double best7 = 0;
      for (const int b : kBatches) {
        double unused = 0;
        best7 = std::max(best7, A100Throughput(family, 7, b, &unused));
      }
      w.latency_p99_ms = std::round(2.0 / 0.9 * latency * (1.05 + 0.5 * unit(rng)) * 10) / 10;
      w.throughput_rps = std::round(std::max(1.0, best7 * (0.15 + 1.6 * unit(rng))));
      w.min_instances = unit(rng) < 0.3 ? 2 : 1;
      for (const auto& perf : fleet_models) w.perf.push_back(TableFor(family, perf));
      if (unit(rng) < 0.15) w.gpu_models = {unit(rng) < 0.5 ? "A100-80GB" : "H100-80GB"};
      set.workloads.push_back(std::move(w));
      continue;
    }
    if (pick < 0.55) {
      w.kind = plan::WorkloadKind::kInference;
      w.replicas = Replicas(rng, 0.45, 12);
      w.peak_memory_gib = LogNormal(rng, 14, 0.7, 5, 60);
      w.min_instances = 1;
      if (unit(rng) < 0.02) w.media.decoders = 1;
    } else if (pick < 0.73) {
      w.kind = plan::WorkloadKind::kNotebook;
      w.replicas = unit(rng) < 0.8 ? 1 : 2 + static_cast<int>(unit(rng) * 3);
      w.peak_memory_gib = LogNormal(rng, 8, 0.5, 4, 20);
    } else if (pick < 0.85) {
      w.kind = plan::WorkloadKind::kFineTune;
      w.replicas = unit(rng) < 0.7 ? 1 : 2;
      // 130 GiB x 1.3 fine-tune headroom = 169 GiB: only a B200 holds more than ~140 GiB.
      w.peak_memory_gib = LogNormal(rng, 40, 0.55, 20, 130);
      w.measured = unit(rng) < 0.3;
      headroom = set.policy.fine_tune_headroom;
    } else {
      w.kind = plan::WorkloadKind::kBatch;
      w.replicas = Replicas(rng, 0.5, 6);
      w.peak_memory_gib = LogNormal(rng, 18, 0.7, 4, 80);
    }
    if (unit(rng) < 0.15) {
      const auto& models = kRestrictions[Pick(rng, kRestrictions.size())];
      // Only restrictions the workload can live with: a whole GPU holds it (notebooks, which only
      // get small profiles, are never restricted).
      if (w.kind != plan::WorkloadKind::kNotebook &&
          LargestGib(models, catalog) >= w.peak_memory_gib * (1 + headroom)) {
        w.gpu_models = models;
      }
    }
    set.workloads.push_back(std::move(w));
  }
  return set;
}

// ---------------------------------------------------------------------------------------------
// Running.

struct RunResult {
  int workloads = 0;
  int gpus = 0;
  std::string mode;
  bool ok = false;
  std::string error;
  double generate_s = 0;
  double plan_s = 0;   // Plan() wall time measured here
  double solve_s = 0;  // as the planner reports it
  double check_s = 0;
  std::string solver;
  int gpus_used = 0;
  double cost = 0;
  double lower_bound = 0;
  double gap_pct = 0;  // (cost - bound) / bound
  bool proven = false;
  int unplaced = 0;
  int unsatisfiable = 0;  // of the unplaced: no sizing option at all (an input property)
  std::vector<std::string> unplaced_why;  // "w00012: reason", the first few
  std::string used_by_type;               // "H100-80GB 120/270, ..." (MIG-disabled pools apart)
  std::vector<std::string> problems;      // CheckPlan
  std::vector<std::string> notes;
};

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// "w00032 (fine-tune, 1 x 95.3 GiB, on H200-141GB|B200)" or "w00007 (inference, 830 req/s
// within 40.2 ms, at least 2 instances)".
std::string WorkloadText(const plan::Workload& w) {
  char text[160];
  if (w.throughput_rps > 0) {
    std::snprintf(text, sizeof text, "%s (%s, %.0f req/s within %.1f ms, min %d instance%s",
                  w.name.c_str(), std::string(plan::ToString(w.kind)).c_str(), w.throughput_rps,
                  w.latency_p99_ms, w.min_instances, w.min_instances == 1 ? "" : "s");
  } else {
    std::snprintf(text, sizeof text, "%s (%s, %d x %.1f GiB%s%s", w.name.c_str(),
                  std::string(plan::ToString(w.kind)).c_str(), w.replicas, w.peak_memory_gib,
                  w.measured ? " measured" : "", w.media.Any() ? ", a decoder" : "");
  }
  std::string out = text;
  for (size_t i = 0; i < w.gpu_models.size(); ++i) {
    out += (i == 0 ? ", on " : "|") + w.gpu_models[i];
  }
  return out + ")";
}

RunResult RunOne(const plan::WorkloadSet& workloads, const plan::Fleet& fleet,
                 const gpuslice::hw::Catalog& catalog, plan::SolveMode mode, double time_limit_s) {
  RunResult run;
  run.workloads = static_cast<int>(workloads.workloads.size());
  run.gpus = FleetGpus(fleet);
  run.mode = mode == plan::SolveMode::kExact ? "exact" : "fast";
  plan::PlanOptions options;
  options.mode = mode;
  options.time_limit_s = time_limit_s;
  auto start = std::chrono::steady_clock::now();
  auto result = plan::Plan(workloads, fleet, catalog, options);
  run.plan_s = Seconds(start);
  if (!result.ok()) {
    run.error = std::string(result.status().message());
    return run;
  }
  run.ok = true;
  run.solve_s = result->solve_seconds;
  run.solver = result->solver;
  run.gpus_used = result->gpus_used;
  run.cost = result->cost_per_hour;
  run.lower_bound = result->lower_bound_cost;
  // (Never below zero: a proven plan can sit a rounding error under its bound.)
  run.gap_pct = run.lower_bound > 0
                    ? std::max(0.0, 100.0 * (run.cost - run.lower_bound) / run.lower_bound)
                    : 0;
  run.proven = result->proven_optimal;
  run.unplaced = static_cast<int>(result->unplaced.size());
  for (const auto& [w, why] : result->unplaced) {
    const bool known = w >= 0 && static_cast<size_t>(w) < result->sizing.size();
    if (known && !result->sizing[static_cast<size_t>(w)].unsatisfiable.empty()) {
      ++run.unsatisfiable;
    }
  }
  std::vector<std::tuple<std::string, int, int>> by_type;  // name, used, total
  for (const auto& gpu : result->gpus) {
    const std::string name = (gpu.model != nullptr ? gpu.model->id : std::string("?")) +
                             (gpu.mig_allowed ? "" : "(whole)");
    auto it = std::find_if(by_type.begin(), by_type.end(),
                           [&](const auto& t) { return std::get<0>(t) == name; });
    if (it == by_type.end()) it = by_type.insert(by_type.end(), {name, 0, 0});
    std::get<1>(*it) += gpu.used ? 1 : 0;
    ++std::get<2>(*it);
  }
  for (const auto& [name, used, total] : by_type) {
    run.used_by_type += (run.used_by_type.empty() ? "" : ", ") + name + " " + std::to_string(used) +
                        "/" + std::to_string(total);
  }
  for (const auto& [w, why] : result->unplaced) {
    if (run.unplaced_why.size() >= 5) break;
    const bool known = w >= 0 && static_cast<size_t>(w) < workloads.workloads.size();
    run.unplaced_why.push_back(
        (known ? WorkloadText(workloads.workloads[static_cast<size_t>(w)]) : "?") + ": " + why);
  }
  run.notes = result->notes;
  start = std::chrono::steady_clock::now();
  run.problems = plan::CheckPlan(*result, workloads, fleet);
  run.check_s = Seconds(start);
  return run;
}

// "1000 workloads (200 throughput, 350 inference, ...; 2400 replicas, 150 restricted) on 1000 GPUs
// (H100-80GB 272, ...)".
std::string Describe(const plan::WorkloadSet& workloads, const plan::Fleet& fleet) {
  int throughput = 0;
  int by_kind[4] = {0, 0, 0, 0};
  int replicas = 0;
  int restricted = 0;
  for (const auto& w : workloads.workloads) {
    if (w.throughput_rps > 0) {
      ++throughput;
    } else {
      ++by_kind[static_cast<int>(w.kind)];
      replicas += w.replicas;
    }
    if (!w.gpu_models.empty()) ++restricted;
  }
  std::vector<std::pair<std::string, int>> models;
  for (const auto& node : fleet.nodes) {
    for (const auto& group : node.gpus) {
      const std::string name = group.model + (group.mig_allowed ? "" : "(whole)");
      auto it = std::find_if(models.begin(), models.end(),
                             [&](const auto& m) { return m.first == name; });
      if (it == models.end()) {
        models.emplace_back(name, group.count);
      } else {
        it->second += group.count;
      }
    }
  }
  char text[256];
  std::snprintf(text, sizeof text,
                "%zu workloads (%d throughput, %d inference, %d notebook, %d fine-tune, %d batch;"
                " %d replicas; %d restricted to some models) on %d GPUs (",
                workloads.workloads.size(), throughput, by_kind[0], by_kind[1], by_kind[3],
                by_kind[2], replicas, restricted, FleetGpus(fleet));
  std::string out = text;
  for (size_t i = 0; i < models.size(); ++i) {
    out += (i == 0 ? "" : ", ") + models[i].first + " " + std::to_string(models[i].second);
  }
  return out + ")";
}

struct Target {
  std::string name;
  bool applicable = false;
  bool met = true;
  std::string detail;
};

// Every size of `options` generated and planned in the modes asked; nullopt once the error is
// printed.
std::optional<std::vector<RunResult>> RunSizes(const Options& options,
                                               const gpuslice::hw::Catalog& catalog) {
  std::vector<RunResult> runs;
  for (const Size& size : options.sizes) {
    const auto start = std::chrono::steady_clock::now();
    std::mt19937_64 rng(options.seed + static_cast<std::uint64_t>(size.workloads));
    const plan::Fleet fleet = MakeFleet(size.gpus, options.uniform_cost);
    const auto fleet_models = FleetModels(fleet, catalog);
    std::string error;
    const auto families = MakeFamilies(rng, options.data_dir, &error);
    if (families.empty()) {
      std::cerr << "plan_scaling_bench: " << error << "\n";
      return std::nullopt;
    }
    const plan::WorkloadSet workloads =
        MakeWorkloads(size.workloads, families, fleet_models, catalog, rng);
    const double generate_s = Seconds(start);
    const int gpus = FleetGpus(fleet);
    if (options.fast) {
      runs.push_back(
          RunOne(workloads, fleet, catalog, plan::SolveMode::kFast, options.time_limit_s));
      runs.back().generate_s = generate_s;
    }
    if (options.exact && gpus <= kExactMaxGpus) {
      runs.push_back(
          RunOne(workloads, fleet, catalog, plan::SolveMode::kExact, options.time_limit_s));
      runs.back().generate_s = generate_s;
    }
    if (!options.json) {
      // What was generated, for a human; on stderr, as progress: one size can take a while.
      std::fprintf(stderr, "plan_scaling_bench: %s; done\n", Describe(workloads, fleet).c_str());
    }
  }
  return runs;
}

// The targets, judged on the runs they apply to: exact mode's, then fast mode's.
std::vector<Target> JudgeTargets(const std::vector<RunResult>& runs) {
  Target exact;
  exact.name = "exact mode proves optimality on fleets up to 1,000 GPUs within 2 s";
  Target fast;
  fast.name = "fast mode within 1% of the lower bound on 10,000 GPUs within 5 s";
  for (const auto& run : runs) {
    char detail[160];
    if (run.mode == "exact" && run.gpus <= kExactMaxGpus) {
      exact.applicable = true;
      const bool met =
          run.ok && run.proven && run.unplaced == run.unsatisfiable && run.plan_s <= kExactTargetS;
      exact.met = exact.met && met;
      std::snprintf(detail, sizeof detail, "%s%d GPUs: %s in %.2f s, %d unplaced for lack of room",
                    exact.detail.empty() ? "" : "; ", run.gpus,
                    run.proven ? "proven" : "not proven", run.plan_s,
                    run.unplaced - run.unsatisfiable);
      exact.detail += detail;
    }
    if (run.mode == "fast" && run.gpus >= kFastTargetGpus) {
      fast.applicable = true;
      const bool met = run.ok && run.unplaced == run.unsatisfiable && run.plan_s <= kFastTargetS &&
                       run.gap_pct <= kFastTargetGapPct;
      fast.met = fast.met && met;
      std::snprintf(detail, sizeof detail,
                    "%s%d GPUs: gap %.2f%% in %.2f s, %d unplaced for lack of room",
                    fast.detail.empty() ? "" : "; ", run.gpus, run.gap_pct, run.plan_s,
                    run.unplaced - run.unsatisfiable);
      fast.detail += detail;
    }
  }
  return {std::move(exact), std::move(fast)};
}

void PrintJson(const Options& options, const std::vector<RunResult>& runs,
               const std::vector<Target>& targets) {
  nlohmann::json out;
  out["seed"] = options.seed;
  out["perf"] = options.data_dir.empty() ? "synthetic" : options.data_dir;
  out["time_limit_s"] = options.time_limit_s;
  out["costs"] = options.uniform_cost ? "uniform" : "list prices";
  out["runs"] = nlohmann::json::array();
  for (const auto& run : runs) {
    nlohmann::json j;
    j["workloads"] = run.workloads;
    j["fleet_gpus"] = run.gpus;
    j["mode"] = run.mode;
    j["ok"] = run.ok;
    if (!run.ok) j["error"] = run.error;
    j["solver"] = run.solver;
    j["generate_s"] = run.generate_s;
    j["plan_s"] = run.plan_s;
    j["solve_s"] = run.solve_s;
    j["check_s"] = run.check_s;
    j["gpus_used"] = run.gpus_used;
    j["cost_per_hour"] = run.cost;
    j["lower_bound_cost"] = run.lower_bound;
    j["gap_pct"] = run.gap_pct;
    j["proven_optimal"] = run.proven;
    j["unplaced"] = run.unplaced;
    j["unsatisfiable"] = run.unsatisfiable;
    j["unplaced_first"] = run.unplaced_why;
    j["used_by_type"] = run.used_by_type;
    j["check_plan_problems"] = run.problems;
    j["notes"] = run.notes;
    out["runs"].push_back(std::move(j));
  }
  out["targets"] = nlohmann::json::array();
  for (const Target& target : targets) {
    if (!target.applicable) continue;
    out["targets"].push_back(
        {{"target", target.name}, {"met", target.met}, {"detail", target.detail}});
  }
  std::cout << out.dump(2) << "\n";
}

void PrintText(const Options& options, const std::vector<RunResult>& runs,
               const std::vector<Target>& targets) {
  std::printf(
      "planner scaling: synthetic fleets and workloads (seed %llu, perf tables: %s, costs: %s,"
      " time limit %g s)\n",
      static_cast<unsigned long long>(options.seed),
      options.data_dir.empty() ? "generated" : options.data_dir.c_str(),
      options.uniform_cost ? "uniform" : "list prices", options.time_limit_s);
  std::printf("%9s %6s %5s %7s %7s %7s %6s %11s %11s %7s %6s %8s %6s %7s %s\n", "workloads", "gpus",
              "mode", "plan_s", "solve_s", "check_s", "used", "cost/h", "bound/h", "gap%", "proven",
              "unplaced", "unsat", "check", "notes");
  for (const auto& run : runs) {
    if (!run.ok) {
      std::printf("%9d %6d %5s %7.2f  Plan failed: %s\n", run.workloads, run.gpus, run.mode.c_str(),
                  run.plan_s, run.error.c_str());
      continue;
    }
    std::string notes;
    for (const auto& note : run.notes) notes += (notes.empty() ? "" : "; ") + note;
    std::printf("%9d %6d %5s %7.2f %7.2f %7.2f %6d %11.2f %11.2f %7.2f %6s %8d %6d %7s %s\n",
                run.workloads, run.gpus, run.mode.c_str(), run.plan_s, run.solve_s, run.check_s,
                run.gpus_used, run.cost, run.lower_bound, run.gap_pct, run.proven ? "yes" : "no",
                run.unplaced, run.unsatisfiable, run.problems.empty() ? "ok" : "FAILED",
                notes.c_str());
  }
  for (const auto& run : runs) {
    if (run.ok) {
      std::printf("used GPUs (%d workloads, %s): %s\n", run.workloads, run.mode.c_str(),
                  run.used_by_type.c_str());
    }
  }
  for (const auto& run : runs) {
    for (const auto& why : run.unplaced_why) {
      std::printf("unplaced (%d workloads, %s): %s\n", run.workloads, run.mode.c_str(),
                  why.c_str());
    }
    for (size_t i = 0; i < run.problems.size() && i < 10; ++i) {
      std::printf("CheckPlan (%d workloads, %s): %s\n", run.workloads, run.mode.c_str(),
                  run.problems[i].c_str());
    }
    if (run.problems.size() > 10) {
      std::printf("CheckPlan (%d workloads, %s): ... %zu problems in all\n", run.workloads,
                  run.mode.c_str(), run.problems.size());
    }
  }
  std::printf(
      "unplaced: workloads left out of the plan; unsat: of those, the ones with no sizing option"
      " at all (the rest lacked room); gap: (cost - bound) / bound, where the bound is the"
      " planner's proven lower bound (PlanResult::lower_bound_cost)\n");
  for (const Target& target : targets) {
    if (!target.applicable) continue;
    std::printf("target: %s: %s (%s)\n", target.name.c_str(), target.met ? "MET" : "MISSED",
                target.detail.c_str());
  }
}

int Run(const Options& options) {
  const gpuslice::hw::Catalog& catalog = gpuslice::hw::Catalog::Builtin();
  for (const GpuType& type : kGpuTypes) {
    if (catalog.Find(type.model) == nullptr) {
      std::cerr << "plan_scaling_bench: the catalog has no " << type.model << "\n";
      return 2;
    }
  }
  const std::optional<std::vector<RunResult>> runs = RunSizes(options, catalog);
  if (!runs) return 2;
  const std::vector<Target> targets = JudgeTargets(*runs);
  bool all_ok = true;
  for (const auto& run : *runs) all_ok = all_ok && run.ok && run.problems.empty();
  if (options.json) {
    PrintJson(options, *runs, targets);
  } else {
    PrintText(options, *runs, targets);
  }
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int status = 0;
  const auto options = ParseArgs(argc, argv, &status);
  if (!options) return status;
  return Run(*options);
}
