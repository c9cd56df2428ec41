// The ParvaGPU (SC'24) benchmark: plans the six SLO scenarios of ParvaGPU's A100-80GB data set and
// compares the GPU count with ParvaGPU's own deployments (2, 3, 5, 7, 13 and 16 GPUs).
//
//   parvagpu_bench DIR [--exact|--fast|--auto] [--time-limit S] [--gpus N] [--json]
//
// DIR holds one ParvaGPU profile CSV per model (`Mig instance,Batch size,Workload Number,
// Throughput,Latency`) and SLO_req_rate.csv / SLO_latency.csv (one row per scenario, one column per
// model in alphabetical order of the model files, "N/A" = absent, latency in milliseconds).
//
// Each plan is checked twice: by plan::CheckPlan, and by a check in this file that shares nothing
// with the planner: it re-reads the CSV rows itself, recomputes the throughput each instance gives
// at its compute slices and batch, applies ParvaGPU's latency criterion (2 x batch latency <= 0.9 x
// SLO) and validates every GPU's layout with the layout engine.
//
// Exit status: 0 every plan is feasible, 1 a plan is infeasible, 2 bad usage or input.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "gpuslice/geometry/enumerate.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/plan/inputs.h"
#include "gpuslice/plan/model.h"
#include "gpuslice/plan/plan.h"
#include "gpuslice/util/strings.h"
#include "nlohmann/json.hpp"

namespace {

namespace fs = std::filesystem;
namespace plan = gpuslice::plan;
namespace geometry = gpuslice::geometry;

constexpr const char* kGpuModel = "A100-80GB";
// ParvaGPU's own deployment maps for SLO1..SLO6 (shared/reference/planning-benchmarks.md).
constexpr int kParvaGpus[] = {2, 3, 5, 7, 13, 16};
// ParvaGPU's latency rule: a request may wait for a full batch and then be served.
constexpr double kWaitFactor = 2.0;
constexpr double kLatencyShare = 0.9;

struct Options {
  std::string dir;
  plan::SolveMode mode = plan::SolveMode::kExact;
  double time_limit_s = 10;
  int gpus = 64;
  bool json = false;
};

int Usage(const char* message) {
  if (message != nullptr) std::cerr << "parvagpu_bench: " << message << "\n";
  std::cerr << "usage: parvagpu_bench DIR [--exact|--fast|--auto] [--time-limit S] [--gpus N]"
               " [--json]\n"
               "  DIR: ParvaGPU's A100-80GB profiles and SLO files, e.g."
               " ../shared/data/parvagpu-a100-80gb\n";
  return 2;
}

std::optional<Options> ParseArgs(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) return std::nullopt;
      return std::string(argv[++i]);
    };
    if (arg == "--exact") {
      options.mode = plan::SolveMode::kExact;
    } else if (arg == "--fast") {
      options.mode = plan::SolveMode::kFast;
    } else if (arg == "--auto") {
      options.mode = plan::SolveMode::kAuto;
    } else if (arg == "--json") {
      options.json = true;
    } else if (arg == "--time-limit") {
      const auto text = value();
      if (!text) return std::nullopt;
      char* end = nullptr;
      options.time_limit_s = std::strtod(text->c_str(), &end);
      if (*end != '\0' || !(options.time_limit_s > 0)) return std::nullopt;
    } else if (arg == "--gpus") {
      const auto text = value();
      if (!text) return std::nullopt;
      char* end = nullptr;
      const long gpus = std::strtol(text->c_str(), &end, 10);
      if (*end != '\0' || gpus < 1 || gpus > 100000) return std::nullopt;
      options.gpus = static_cast<int>(gpus);
    } else if (arg == "-h" || arg == "--help") {
      return std::nullopt;
    } else if (!arg.empty() && arg[0] == '-') {
      return std::nullopt;
    } else if (options.dir.empty()) {
      options.dir = arg;
    } else {
      return std::nullopt;
    }
  }
  if (options.dir.empty()) return std::nullopt;
  return options;
}

std::vector<std::string> SplitCsvLine(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ',')) fields.push_back(gpuslice::util::Trim(field));
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

std::optional<double> ParseNumber(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (*end != '\0' || !std::isfinite(value)) return std::nullopt;
  return value;
}

// The bench's own reading of a profile CSV, independent of plan::ReadPerfCsv.
struct Row {
  double throughput_rps = 0;
  double latency_ms = 0;
};
using RowKey = std::tuple<int, int, int>;  // compute slices, batch, processes
using ProfileRows = std::map<RowKey, Row>;

std::optional<ProfileRows> ReadProfileRows(const fs::path& path, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot read " + path.string();
    return std::nullopt;
  }
  ProfileRows rows;
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (gpuslice::util::Trim(line).empty()) continue;
    if (line_number == 1) continue;  // header
    const auto fields = SplitCsvLine(line);
    std::optional<double> values[5];
    bool ok = fields.size() == 5;
    for (size_t i = 0; ok && i < 5; ++i) {
      values[i] = ParseNumber(fields[i]);
      ok = values[i].has_value();
    }
    if (!ok) {
      *error = path.string() + ":" + std::to_string(line_number) + ": malformed row";
      return std::nullopt;
    }
    const RowKey key{static_cast<int>(*values[0]), static_cast<int>(*values[1]),
                     static_cast<int>(*values[2])};
    rows[key] = Row{*values[3], *values[4] * 1000.0};
  }
  return rows;
}

// One SLO file: rows[scenario][model column], nullopt = "N/A".
std::optional<std::vector<std::vector<std::optional<double>>>> ReadSloFile(const fs::path& path,
                                                                           size_t columns,
                                                                           std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot read " + path.string();
    return std::nullopt;
  }
  std::vector<std::vector<std::optional<double>>> rows;
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (gpuslice::util::Trim(line).empty()) continue;
    const auto fields = SplitCsvLine(line);
    if (fields.size() != columns) {
      *error = path.string() + ":" + std::to_string(line_number) + ": " +
               std::to_string(fields.size()) + " columns, expected " + std::to_string(columns) +
               " (one per model file)";
      return std::nullopt;
    }
    std::vector<std::optional<double>> row;
    for (const auto& field : fields) {
      if (field == "N/A") {
        row.emplace_back();
        continue;
      }
      const auto value = ParseNumber(field);
      if (!value || *value <= 0) {
        *error = path.string() + ":" + std::to_string(line_number) + ": bad value '" + field + "'";
        return std::nullopt;
      }
      row.emplace_back(*value);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

struct ModelData {
  std::string name;  // file name without .csv
  fs::path path;
  ProfileRows rows;
  plan::PerfTable table;  // as the planner reads it
};

struct Scenario {
  int number = 0;           // 1-based
  std::vector<int> models;  // indices into the model list, in column order
  plan::WorkloadSet workloads;
};

plan::Fleet MakeFleet(int gpus) {
  plan::Fleet fleet;
  fleet.costs_given = false;  // every GPU costs 1: the objective is the GPU count
  for (int node = 0; node * 8 < gpus; ++node) {
    plan::GpuGroup group;
    group.model = kGpuModel;
    group.count = std::min(8, gpus - node * 8);
    group.cost_per_hour = 1.0;
    group.mig_allowed = true;
    group.origin = "parvagpu_bench";
    plan::Node n;
    n.name = "a100-node-" + std::to_string(node);
    n.gpus.push_back(group);
    n.origin = "parvagpu_bench";
    fleet.nodes.push_back(std::move(n));
  }
  return fleet;
}

// Instances of one workload, grouped for display: "2x3g(b32)".
struct InstanceGroup {
  std::string size;
  int batch = 0;
  int count = 0;
};

struct Outcome {
  int scenario = 0;
  int models = 0;
  int gpus_used = 0;
  int lower_bound = 0;
  int slice_bound = 0;  // ComputeSliceBound
  bool proven = false;
  double solve_s = 0;  // as the planner reports it
  double wall_s = 0;   // Plan() as timed here
  std::string solver;
  int compute_slices_used = 0;              // over the used GPUs
  std::vector<std::string> check_problems;  // plan::CheckPlan
  std::vector<std::string> own_problems;    // this file's check
  std::vector<std::string> notes;
  // Per workload: name, required rate, provided rate (own recomputation), instance groups.
  struct PerModel {
    std::string name;
    double rate = 0;
    double slo_ms = 0;
    double provided = 0;
    std::vector<InstanceGroup> groups;
  };
  std::vector<PerModel> per_model;
  bool feasible() const { return check_problems.empty() && own_problems.empty(); }
};

std::string Fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

std::string Where(const plan::Fleet& fleet, const plan::PlannedGpu& gpu) {
  const bool known = gpu.node >= 0 && static_cast<size_t>(gpu.node) < fleet.nodes.size();
  return (known ? fleet.nodes[static_cast<size_t>(gpu.node)].name : "node?") + " GPU " +
         std::to_string(gpu.index);
}

// The independent check: shares nothing with the planner but the plan itself. Fills
// outcome->own_problems, per_model and compute_slices_used.
void OwnCheck(const plan::PlanResult& result, const Scenario& scenario, const plan::Fleet& fleet,
              const std::vector<ModelData>& models, const geometry::Shape& shape,
              Outcome* outcome) {
  const auto& workloads = scenario.workloads.workloads;
  auto& problems = outcome->own_problems;
  std::vector<double> provided(workloads.size(), 0);
  std::vector<std::map<std::pair<std::string, int>, int>> groups(workloads.size());
  const int full_slices = shape.mig().compute_slices;
  int used = 0;
  for (const auto& gpu : result.gpus) {
    const std::string where = Where(fleet, gpu);
    if (gpu.model == nullptr || gpu.model->id != kGpuModel) {
      problems.push_back(where + ": not an " + std::string(kGpuModel));
      continue;
    }
    const bool hosts = std::any_of(gpu.instances.begin(), gpu.instances.end(),
                                   [](const plan::PlannedInstance& i) { return i.workload >= 0; });
    if (hosts != gpu.used) problems.push_back(where + ": 'used' does not match its instances");
    if (gpu.used) ++used;
    if (gpu.instances.empty()) continue;
    bool layout_ok = true;
    if (gpu.mig_enabled) {
      std::vector<geometry::Placed> layout;
      for (const auto& instance : gpu.instances) {
        if (instance.profile < 0 || instance.profile >= shape.profile_count() ||
            instance.start < 0 || instance.start >= shape.units()) {
          problems.push_back(where + ": instance with profile " + std::to_string(instance.profile) +
                             " at " + std::to_string(instance.start) + " on a MIG GPU");
          layout_ok = false;
          continue;
        }
        layout.push_back({static_cast<std::uint8_t>(instance.profile),
                          static_cast<std::uint8_t>(instance.start)});
      }
      const geometry::Violation violation = shape.Validate(layout);
      if (!violation.ok()) {
        problems.push_back(where +
                           ": invalid layout: " + geometry::Describe(shape, layout, violation));
      }
    } else if (gpu.instances.size() != 1 || gpu.instances[0].profile != plan::kWholeGpu) {
      problems.push_back(where + ": MIG disabled but not exactly one whole-GPU instance");
      layout_ok = false;
    }
    if (!layout_ok) continue;
    for (const auto& instance : gpu.instances) {
      if (instance.workload < 0) continue;  // a spare
      if (static_cast<size_t>(instance.workload) >= workloads.size()) {
        problems.push_back(where + ": instance of unknown workload " +
                           std::to_string(instance.workload));
        continue;
      }
      const auto w = static_cast<size_t>(instance.workload);
      const plan::Workload& workload = workloads[w];
      int slices = full_slices;
      std::string size = "whole";
      if (instance.profile != plan::kWholeGpu) {
        const auto& profile = shape.profile(instance.profile);
        if (!geometry::IsBaseProfile(profile)) {
          problems.push_back(where + ": " + workload.name + " on " + profile.name +
                             ", a profile ParvaGPU did not measure");
          continue;
        }
        slices = profile.compute_slices;
        size = std::to_string(slices) + "g";
      }
      outcome->compute_slices_used += slices;
      const ModelData& model = models[static_cast<size_t>(scenario.models[w])];
      const auto row = model.rows.find({slices, instance.batch, 1});
      if (row == model.rows.end() || row->second.throughput_rps <= 0) {
        problems.push_back(where + ": " + workload.name + " on " + size + " at batch " +
                           std::to_string(instance.batch) + ": no feasible 1-process measurement");
        continue;
      }
      const double worst_ms = kWaitFactor * row->second.latency_ms;
      const double limit_ms = kLatencyShare * workload.latency_p99_ms;
      if (worst_ms > limit_ms * (1 + 1e-9)) {
        problems.push_back(where + ": " + workload.name + " on " + size + " at batch " +
                           std::to_string(instance.batch) + ": 2 x " +
                           Fixed(row->second.latency_ms, 1) + " ms > 0.9 x " +
                           Fixed(workload.latency_p99_ms, 1) + " ms");
      }
      if (instance.capacity > row->second.throughput_rps * (1 + 1e-6)) {
        problems.push_back(where + ": " + workload.name + " instance credited with " +
                           Fixed(instance.capacity, 1) + " req/s, the CSV says " +
                           Fixed(row->second.throughput_rps, 1));
      }
      provided[w] += row->second.throughput_rps;
      ++groups[w][{size, instance.batch}];
    }
  }
  if (used != result.gpus_used) {
    problems.push_back("gpus_used is " + std::to_string(result.gpus_used) + " but " +
                       std::to_string(used) + " GPUs host instances");
  }
  for (const auto& [w, why] : result.unplaced) {
    const bool known = w >= 0 && static_cast<size_t>(w) < workloads.size();
    problems.push_back("unplaced " + (known ? workloads[static_cast<size_t>(w)].name : "?") + ": " +
                       why);
  }
  for (size_t w = 0; w < workloads.size(); ++w) {
    const plan::Workload& workload = workloads[w];
    if (provided[w] < workload.throughput_rps * (1 - 1e-9)) {
      problems.push_back(workload.name + ": instances give " + Fixed(provided[w], 1) + " of " +
                         Fixed(workload.throughput_rps, 1) + " req/s");
    }
    Outcome::PerModel per_model;
    per_model.name = workload.name;
    per_model.rate = workload.throughput_rps;
    per_model.slo_ms = workload.latency_p99_ms;
    per_model.provided = provided[w];
    for (const auto& [key, count] : groups[w]) {
      per_model.groups.push_back({key.first, key.second, count});
    }
    // Biggest instances first.
    std::stable_sort(per_model.groups.begin(), per_model.groups.end(),
                     [](const InstanceGroup& a, const InstanceGroup& b) {
                       const int sa = a.size == "whole" ? 8 : std::atoi(a.size.c_str());
                       const int sb = b.size == "whole" ? 8 : std::atoi(b.size.c_str());
                       return sa > sb;
                     });
    outcome->per_model.push_back(std::move(per_model));
  }
}

// An independent lower bound on the GPU count: every workload needs at least rate / (best
// req/s per compute slice over its admissible 1-process rows) compute slices, and an A100 has 7.
int ComputeSliceBound(const Scenario& scenario, const std::vector<ModelData>& models,
                      int full_slices) {
  double slices = 0;
  for (size_t w = 0; w < scenario.models.size(); ++w) {
    const plan::Workload& workload = scenario.workloads.workloads[w];
    double best = 0;
    for (const auto& [key, row] : models[static_cast<size_t>(scenario.models[w])].rows) {
      const auto& [size, batch, processes] = key;
      if (processes != 1 || size < 1 || row.throughput_rps <= 0) continue;
      if (kWaitFactor * row.latency_ms > kLatencyShare * workload.latency_p99_ms) continue;
      best = std::max(best, row.throughput_rps / size);
    }
    if (best <= 0) return 0;  // no admissible row: nothing to bound
    slices += workload.throughput_rps / best;
  }
  return static_cast<int>(std::ceil(slices / full_slices - 1e-9));
}

std::string GroupsText(const std::vector<InstanceGroup>& groups) {
  std::string text;
  for (const auto& group : groups) {
    if (!text.empty()) text += " + ";
    text +=
        std::to_string(group.count) + "x" + group.size + "(b" + std::to_string(group.batch) + ")";
  }
  return text.empty() ? "-" : text;
}

std::string_view ModeName(plan::SolveMode mode) {
  switch (mode) {
    case plan::SolveMode::kExact:
      return "exact";
    case plan::SolveMode::kFast:
      return "fast";
    case plan::SolveMode::kAuto:
      break;
  }
  return "auto";
}

// The model files in `dir`, in alphabetical order (the SLO files' column order), with their rows
// and perf tables; nullopt once the error is printed.
std::optional<std::vector<ModelData>> ReadModels(const std::string& dir) {
  std::vector<ModelData> models;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const fs::path& path = entry.path();
    if (path.extension() != ".csv" || path.filename().string().rfind("SLO_", 0) == 0) continue;
    models.push_back({path.stem().string(), path, {}, {}});
  }
  if (ec) {
    std::cerr << "parvagpu_bench: cannot list " << dir << ": " << ec.message() << "\n";
    return std::nullopt;
  }
  if (models.empty()) {
    std::cerr << "parvagpu_bench: no model CSV in " << dir << "\n";
    return std::nullopt;
  }
  std::sort(models.begin(), models.end(),
            [](const ModelData& a, const ModelData& b) { return a.name < b.name; });
  for (auto& model : models) {
    std::string error;
    auto rows = ReadProfileRows(model.path, &error);
    if (!rows) {
      std::cerr << "parvagpu_bench: " << error << "\n";
      return std::nullopt;
    }
    model.rows = std::move(*rows);
    auto table = plan::ReadPerfCsv(model.path.string(), kGpuModel);
    if (!table.ok()) {
      std::cerr << "parvagpu_bench: " << table.status().message() << "\n";
      return std::nullopt;
    }
    model.table = std::move(*table);
  }
  return models;
}

// The scenarios of SLO_req_rate.csv and SLO_latency.csv in `dir`, one workload per model with
// a rate; nullopt once the error is printed.
std::optional<std::vector<Scenario>> ReadScenarios(const std::string& dir,
                                                   const std::vector<ModelData>& models) {
  std::string error;
  const auto rates = ReadSloFile(fs::path(dir) / "SLO_req_rate.csv", models.size(), &error);
  const auto latencies =
      rates ? ReadSloFile(fs::path(dir) / "SLO_latency.csv", models.size(), &error) : std::nullopt;
  if (!rates || !latencies) {
    std::cerr << "parvagpu_bench: " << error << "\n";
    return std::nullopt;
  }
  if (rates->size() != latencies->size() || rates->empty()) {
    std::cerr << "parvagpu_bench: SLO_req_rate.csv has " << rates->size()
              << " scenarios, SLO_latency.csv " << latencies->size() << "\n";
    return std::nullopt;
  }
  std::vector<Scenario> scenarios;
  for (size_t s = 0; s < rates->size(); ++s) {
    Scenario scenario;
    scenario.number = static_cast<int>(s) + 1;
    for (size_t m = 0; m < models.size(); ++m) {
      const auto& rate = (*rates)[s][m];
      const auto& latency = (*latencies)[s][m];
      if (rate.has_value() != latency.has_value()) {
        std::cerr << "parvagpu_bench: SLO" << scenario.number << " " << models[m].name
                  << ": a rate without a latency or the reverse\n";
        return std::nullopt;
      }
      if (!rate) continue;
      plan::Workload workload;
      workload.name = models[m].name;
      workload.kind = plan::WorkloadKind::kInference;
      workload.tenant = "parvagpu";
      workload.throughput_rps = *rate;
      workload.latency_p99_ms = *latency;
      workload.perf.push_back(models[m].table);
      workload.origin = "SLO" + std::to_string(scenario.number) + ":" + models[m].name;
      scenario.workloads.workloads.push_back(std::move(workload));
      scenario.models.push_back(static_cast<int>(m));
    }
    // The default policy: 1-process rows only, 2 x batch latency <= 0.9 x SLO.
    scenario.workloads.policy = plan::SizingPolicy{};
    scenarios.push_back(std::move(scenario));
  }
  return scenarios;
}

// One scenario planned, timed and checked twice.
Outcome PlanScenario(const Scenario& scenario, const std::vector<ModelData>& models,
                     const plan::Fleet& fleet, const gpuslice::hw::Catalog& catalog,
                     const plan::PlanOptions& plan_options, const geometry::Shape& shape) {
  Outcome outcome;
  outcome.scenario = scenario.number;
  outcome.models = static_cast<int>(scenario.workloads.workloads.size());
  outcome.slice_bound = ComputeSliceBound(scenario, models, shape.mig().compute_slices);
  const auto start = std::chrono::steady_clock::now();
  auto result = plan::Plan(scenario.workloads, fleet, catalog, plan_options);
  outcome.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!result.ok()) {
    outcome.own_problems.push_back("Plan failed: " + std::string(result.status().message()));
    return outcome;
  }
  outcome.gpus_used = result->gpus_used;
  outcome.lower_bound = result->lower_bound_gpus;
  outcome.proven = result->proven_optimal;
  outcome.solve_s = result->solve_seconds;
  outcome.solver = result->solver;
  outcome.notes = result->notes;
  outcome.check_problems = plan::CheckPlan(*result, scenario.workloads, fleet);
  OwnCheck(*result, scenario, fleet, models, shape, &outcome);
  if (outcome.own_problems.empty() && outcome.gpus_used < outcome.slice_bound) {
    outcome.own_problems.push_back("uses " + std::to_string(outcome.gpus_used) +
                                   " GPUs, fewer than the compute-slice bound " +
                                   std::to_string(outcome.slice_bound));
  }
  if (outcome.lower_bound > outcome.gpus_used) {
    outcome.own_problems.push_back("lower bound " + std::to_string(outcome.lower_bound) +
                                   " above the GPUs used");
  }
  return outcome;
}

// ParvaGPU's own GPU count for SLO`scenario` (0 for another scenario).
int ParvaGpus(int scenario) {
  return scenario >= 1 && scenario <= 6 ? kParvaGpus[scenario - 1] : 0;
}

// The percentage of the used GPUs' compute slices in use.
double GpcShare(const Outcome& outcome, const geometry::Shape& shape) {
  const int total = outcome.gpus_used * shape.mig().compute_slices;
  return total > 0 ? 100.0 * outcome.compute_slices_used / total : 0.0;
}

void PrintJson(const Options& options, const std::vector<Outcome>& outcomes,
               const geometry::Shape& shape) {
  nlohmann::json out;
  out["gpu_model"] = kGpuModel;
  out["data"] = options.dir;
  out["fleet_gpus"] = options.gpus;
  out["mode"] = ModeName(options.mode);
  out["time_limit_s"] = options.time_limit_s;
  out["scenarios"] = nlohmann::json::array();
  for (const auto& outcome : outcomes) {
    nlohmann::json s;
    s["scenario"] = "SLO" + std::to_string(outcome.scenario);
    s["models"] = outcome.models;
    s["gpus"] = outcome.gpus_used;
    s["lower_bound"] = outcome.lower_bound;
    s["slice_bound"] = outcome.slice_bound;
    s["proven_optimal"] = outcome.proven;
    s["solver"] = outcome.solver;
    s["solve_s"] = outcome.solve_s;
    s["wall_s"] = outcome.wall_s;
    s["gpc_allocated_pct"] = GpcShare(outcome, shape);
    s["parvagpu_gpus"] = ParvaGpus(outcome.scenario);
    s["feasible"] = outcome.feasible();
    s["check_plan_problems"] = outcome.check_problems;
    s["own_check_problems"] = outcome.own_problems;
    s["notes"] = outcome.notes;
    s["instances"] = nlohmann::json::array();
    for (const auto& m : outcome.per_model) {
      nlohmann::json j;
      j["model"] = m.name;
      j["rate_rps"] = m.rate;
      j["latency_slo_ms"] = m.slo_ms;
      j["provided_rps"] = m.provided;
      j["instances"] = GroupsText(m.groups);
      s["instances"].push_back(std::move(j));
    }
    out["scenarios"].push_back(std::move(s));
  }
  std::cout << out.dump(2) << "\n";
}

void PrintText(const Options& options, size_t model_count, const std::vector<Outcome>& outcomes,
               const geometry::Shape& shape) {
  std::printf("ParvaGPU SLO scenarios on %s: %zu models from %s\n", kGpuModel, model_count,
              options.dir.c_str());
  std::printf("fleet: %d x %s in nodes of 8, all the same cost; mode %s, time limit %g s\n\n",
              options.gpus, kGpuModel, std::string(ModeName(options.mode)).c_str(),
              options.time_limit_s);
  std::printf("%-8s %6s %5s %11s %11s %6s %12s %8s %8s %9s %8s %5s\n", "scenario", "models", "gpus",
              "lower_bound", "slice_bound", "proven", "solver", "solve_s", "wall_s", "gpc_used",
              "parvagpu", "diff");
  int total = 0;
  int total_parva = 0;
  for (const auto& outcome : outcomes) {
    const int theirs = ParvaGpus(outcome.scenario);
    total += outcome.gpus_used;
    total_parva += theirs;
    std::printf("SLO%-5d %6d %5d %11d %11d %6s %12s %8.3f %8.3f %8.0f%% %8d %+5d\n",
                outcome.scenario, outcome.models, outcome.gpus_used, outcome.lower_bound,
                outcome.slice_bound, outcome.proven ? "yes" : "no", outcome.solver.c_str(),
                outcome.solve_s, outcome.wall_s, GpcShare(outcome, shape), theirs,
                outcome.gpus_used - theirs);
  }
  std::printf("%-8s %6s %5d %11s %11s %6s %12s %8s %8s %9s %8d %+5d\n", "total", "", total, "", "",
              "", "", "", "", "", total_parva, total - total_parva);
  std::printf(
      "lower_bound: the planner's proven bound; slice_bound: this benchmark's own bound (req/s over"
      " the best req/s per compute slice, 7 per GPU); gpc_used: compute slices in use on the used"
      " GPUs\n\n");

  for (const auto& outcome : outcomes) {
    std::printf("SLO%d: %d GPUs\n", outcome.scenario, outcome.gpus_used);
    for (const auto& m : outcome.per_model) {
      std::printf("  %-12s %6.0f req/s <= %7.1f ms: %-40s gives %7.1f req/s\n", m.name.c_str(),
                  m.rate, m.slo_ms, GroupsText(m.groups).c_str(), m.provided);
    }
    for (const auto& note : outcome.notes) std::printf("  note: %s\n", note.c_str());
    for (const auto& problem : outcome.check_problems) {
      std::printf("  CheckPlan: %s\n", problem.c_str());
    }
    for (const auto& problem : outcome.own_problems) {
      std::printf("  own check: %s\n", problem.c_str());
    }
  }
  std::printf("\n");
  for (const auto& outcome : outcomes) {
    std::printf("parvagpu SLO%d gpus=%d lower_bound=%d feasible=%s\n", outcome.scenario,
                outcome.gpus_used, outcome.lower_bound, outcome.feasible() ? "yes" : "no");
  }
}

int Run(const Options& options) {
  const gpuslice::hw::Catalog& catalog = gpuslice::hw::Catalog::Builtin();
  const gpuslice::hw::GpuModel* gpu_model = catalog.Find(kGpuModel);
  if (gpu_model == nullptr || !gpu_model->mig_capable()) {
    std::cerr << "parvagpu_bench: the catalog has no MIG " << kGpuModel << "\n";
    return 2;
  }
  const geometry::Shape shape(*gpu_model);
  const std::optional<std::vector<ModelData>> models = ReadModels(options.dir);
  if (!models) return 2;
  const std::optional<std::vector<Scenario>> scenarios = ReadScenarios(options.dir, *models);
  if (!scenarios) return 2;

  const plan::Fleet fleet = MakeFleet(options.gpus);
  plan::PlanOptions plan_options;
  plan_options.mode = options.mode;
  plan_options.time_limit_s = options.time_limit_s;
  std::vector<Outcome> outcomes;
  for (const auto& scenario : *scenarios) {
    outcomes.push_back(PlanScenario(scenario, *models, fleet, catalog, plan_options, shape));
  }
  bool all_feasible = true;
  for (const auto& outcome : outcomes) all_feasible = all_feasible && outcome.feasible();

  if (options.json) {
    PrintJson(options, outcomes, shape);
  } else {
    PrintText(options, models->size(), outcomes, shape);
  }
  return all_feasible ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const auto options = ParseArgs(argc, argv);
  if (!options) return Usage(nullptr);
  return Run(*options);
}
