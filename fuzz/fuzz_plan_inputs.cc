// The planner's input files (gpuslice/plan/inputs.h, `gpuslice plan`) on arbitrary text: the first
// byte chooses the workloads file, the fleet file or a perf CSV, the rest is its text. Relative csv
// paths of a workloads file resolve against examples/plan/, so its perf tables are read too.
// Beside the sanitizers: an error is InvalidArgument or NotFound and names the file; a file that
// parses holds only values inside the ranges examples/plan/README.md documents (names, unique
// ones, replicas or throughput but not both, perf tables with feasible rows, GPU models that are
// catalog ids, costs all given or all 1).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include "gpuslice/hw/catalog.h"
#include "gpuslice/plan/inputs.h"

namespace {

using gpuslice::plan::Fleet;
using gpuslice::plan::PerfTable;
using gpuslice::plan::WorkloadSet;

void Check(bool condition) {
  if (!condition) std::abort();
}

bool In(double value, double low, double high) { return value >= low && value <= high; }

bool IsName(const std::string& name) {
  if (name.empty()) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool IsCatalogId(const std::string& model) {
  const gpuslice::hw::GpuModel* found = gpuslice::hw::Catalog::Builtin().Find(model);
  return found != nullptr && found->id == model;
}

void CheckError(const absl::Status& status, std::string_view origin) {
  Check(absl::IsInvalidArgument(status) || absl::IsNotFound(status));
  Check(std::string(status.message()).rfind(origin, 0) == 0);
}

void CheckPerf(const PerfTable& table, const std::string& model) {
  Check(table.gpu_model == model);
  Check(!table.points.empty());
  std::set<std::tuple<int, std::string, int, int>> seen;
  for (const gpuslice::plan::PerfPoint& p : table.points) {
    Check(p.compute_slices >= 0 && p.compute_slices <= 8);
    Check(p.batch >= 1 && p.batch <= (1 << 20));
    Check(p.processes >= 1 && p.processes <= 1024);
    Check(p.throughput_rps > 0 && std::isfinite(p.throughput_rps));
    Check(p.latency_ms > 0 && std::isfinite(p.latency_ms));
    Check(seen.emplace(p.compute_slices, p.profile, p.batch, p.processes).second);
  }
}

void CheckWorkloads(const WorkloadSet& set) {
  const gpuslice::plan::SizingPolicy& policy = set.policy;
  Check(In(policy.memory_headroom, 0, 10) && In(policy.fine_tune_headroom, 0, 10));
  Check(policy.fine_tune_min_compute_slices >= 1 && policy.fine_tune_min_compute_slices <= 8);
  Check(policy.notebook_max_compute_slices >= 1 && policy.notebook_max_compute_slices <= 8);
  Check(In(policy.latency_wait_factor, 1, 100));
  Check(policy.latency_margin >= 0 && policy.latency_margin < 1);
  Check(!set.workloads.empty());
  std::set<std::string> names;
  for (const gpuslice::plan::Workload& w : set.workloads) {
    Check(IsName(w.name) && names.insert(w.name).second);
    const bool by_replicas = w.replicas > 0;
    Check(by_replicas != (w.throughput_rps > 0));
    if (by_replicas) {
      Check(w.replicas <= 100000 && w.peak_memory_gib > 0 && w.latency_p99_ms == 0);
      Check(w.min_instances <= w.replicas);
    } else {
      Check(In(w.throughput_rps, 0, 1e9) && !w.perf.empty());
    }
    Check(w.latency_p99_ms == 0 || In(w.latency_p99_ms, 0, 1e7));
    Check(w.peak_memory_gib == 0 || In(w.peak_memory_gib, 0, 10000));
    Check(!w.measured || w.peak_memory_gib > 0);
    Check(w.min_instances >= 1 && w.min_instances <= 100000);
    for (int n : {w.media.decoders, w.media.jpeg, w.media.ofa, w.media.encoders}) {
      Check(n >= 0 && n <= 64);
    }
    std::set<std::string> perf_models;
    for (const PerfTable& table : w.perf) {
      Check(IsCatalogId(table.gpu_model) && perf_models.insert(table.gpu_model).second);
      CheckPerf(table, table.gpu_model);
    }
    std::set<std::string> models;
    for (const std::string& model : w.gpu_models) {
      Check(IsCatalogId(model) && models.insert(model).second);
    }
  }
}

void CheckFleet(const Fleet& fleet) {
  Check(!fleet.currency.empty() && In(fleet.hours_per_month, 1, 744));
  Check(!fleet.nodes.empty());
  std::set<std::string> names;
  for (const gpuslice::plan::Node& node : fleet.nodes) {
    Check(IsName(node.name) && names.insert(node.name).second);
    Check(!node.gpus.empty());
    for (const gpuslice::plan::GpuGroup& group : node.gpus) {
      Check(IsCatalogId(group.model));
      Check(group.count >= 1 && group.count <= 1024);
      Check(fleet.costs_given ? In(group.cost_per_hour, 0, 10000) : group.cost_per_hour == 1.0);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > 64 * 1024) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  // A csv path may name any file: keep the fuzzer off devices and kernel files that never end.
  for (std::string_view special : {"/dev", "/proc", "/sys"}) {
    if (text.find(special) != std::string_view::npos) return 0;
  }
  const gpuslice::hw::Catalog& catalog = gpuslice::hw::Catalog::Builtin();
  switch (data[0] % 3) {
    case 0: {
      absl::StatusOr<WorkloadSet> set =
          gpuslice::plan::ParseWorkloads(text, "workloads.yaml", GPUSLICE_EXAMPLES_PLAN, catalog);
      if (set.ok()) {
        CheckWorkloads(*set);
      } else {
        CheckError(set.status(), "workloads.yaml");
      }
      break;
    }
    case 1: {
      absl::StatusOr<Fleet> fleet = gpuslice::plan::ParseFleet(text, "fleet.yaml", catalog);
      if (fleet.ok()) {
        CheckFleet(*fleet);
      } else {
        CheckError(fleet.status(), "fleet.yaml");
      }
      break;
    }
    default: {
      absl::StatusOr<PerfTable> table = gpuslice::plan::ParsePerfCsv(text, "perf.csv", "A100-80GB");
      if (table.ok()) {
        CheckPerf(*table, "A100-80GB");
      } else {
        CheckError(table.status(), "perf.csv");
      }
      break;
    }
  }
  return 0;
}
