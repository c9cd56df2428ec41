#include "gpuslice/place/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/place/engine.h"
#include "gpuslice/place/go_rand.h"

namespace gpuslice::place {
namespace {

// A CSV file with a header; cells by column name.
class CsvTable {
 public:
  static absl::StatusOr<CsvTable> Read(const std::string& path) {
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
    CsvTable table;
    table.path_ = path;
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      std::vector<std::string> cells = absl::StrSplit(line, ',');
      if (table.header_.empty()) {
        for (size_t i = 0; i < cells.size(); ++i) table.columns_[cells[i]] = i;
        table.header_ = std::move(cells);
        continue;
      }
      if (cells.size() != table.header_.size()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ", cells.size(),
                                                       " cells, the header has ",
                                                       table.header_.size()));
      }
      table.rows_.push_back(std::move(cells));
      table.lines_.push_back(number);
    }
    if (table.header_.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": empty"));
    return table;
  }
  absl::Status Require(std::initializer_list<const char*> names) const {
    for (const char* name : names) {
      if (!columns_.contains(name)) {
        return absl::InvalidArgumentError(absl::StrCat(path_, ":1: missing column '", name, "'"));
      }
    }
    return absl::OkStatus();
  }
  bool Has(const std::string& column) const { return columns_.contains(column); }
  size_t size() const { return rows_.size(); }
  const std::string& Cell(size_t row, const std::string& column) const {
    return rows_[row][columns_.at(column)];
  }
  // A non-negative integer cell.
  absl::StatusOr<std::int64_t> Int(size_t row, const std::string& column) const {
    std::int64_t value = 0;
    const std::string& text = Cell(row, column);
    if (!absl::SimpleAtoi(text, &value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ":", lines_[row], ": ", column, ": '",
                                                     text, "' is not a non-negative integer"));
    }
    return value;
  }
  std::string Where(size_t row, const std::string& column) const {
    return absl::StrCat(path_, ":", lines_[row], ": ", column);
  }

 private:
  std::string path_;
  std::vector<std::string> header_;
  std::map<std::string, size_t> columns_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<int> lines_;
};

#define GPUSLICE_ASSIGN_INT(var, table, row, column) \
  std::int64_t var = 0;                              \
  {                                                  \
    auto value_or = (table).Int((row), (column));    \
    if (!value_or.ok()) return value_or.status();    \
    var = *value_or;                                 \
  }

double RoundHalfEven(double value) { return std::nearbyint(value); }

}  // namespace

absl::StatusOr<std::vector<NodeSpec>> ReadNodesCsv(const std::string& path) {
  absl::StatusOr<CsvTable> table = CsvTable::Read(path);
  if (!table.ok()) return table.status();
  if (absl::Status s = table->Require({"sn", "cpu_milli", "memory_mib", "gpu", "model"}); !s.ok()) {
    return s;
  }
  std::vector<NodeSpec> nodes;
  std::map<std::string, size_t> seen;
  for (size_t row = 0; row < table->size(); ++row) {
    NodeSpec node;
    node.name = table->Cell(row, "sn");
    if (node.name.empty()) return absl::InvalidArgumentError(table->Where(row, "sn") + ": empty");
    if (!seen.emplace(node.name, row).second) {
      return absl::InvalidArgumentError(absl::StrCat(table->Where(row, "sn"), ": node '", node.name,
                                                     "' appears twice (first at ",
                                                     table->Where(seen[node.name], "sn"), ")"));
    }
    GPUSLICE_ASSIGN_INT(cpu, *table, row, "cpu_milli");
    GPUSLICE_ASSIGN_INT(memory, *table, row, "memory_mib");
    GPUSLICE_ASSIGN_INT(gpus, *table, row, "gpu");
    if (gpus > 1024) {
      return absl::InvalidArgumentError(table->Where(row, "gpu") + ": more than 1024 GPUs");
    }
    node.cpu_milli = cpu;
    node.memory_mib = memory;
    node.gpus = static_cast<int>(gpus);
    node.model = table->Cell(row, "model");
    node.mode = GpuMode::kShared;
    nodes.push_back(std::move(node));
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const NodeSpec& a, const NodeSpec& b) { return a.name < b.name; });
  return nodes;
}

absl::StatusOr<std::vector<TracePod>> ReadPodsCsv(const std::string& path) {
  absl::StatusOr<CsvTable> table = CsvTable::Read(path);
  if (!table.ok()) return table.status();
  if (absl::Status s = table->Require({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"});
      !s.ok()) {
    return s;
  }
  const bool has_spec = table->Has("gpu_spec");
  std::vector<TracePod> pods;
  for (size_t row = 0; row < table->size(); ++row) {
    TracePod pod;
    pod.name = table->Cell(row, "name");
    GPUSLICE_ASSIGN_INT(cpu, *table, row, "cpu_milli");
    GPUSLICE_ASSIGN_INT(memory, *table, row, "memory_mib");
    GPUSLICE_ASSIGN_INT(num_gpu, *table, row, "num_gpu");
    GPUSLICE_ASSIGN_INT(milli, *table, row, "gpu_milli");
    if (num_gpu > 64) {
      return absl::InvalidArgumentError(table->Where(row, "num_gpu") + ": more than 64 GPUs");
    }
    pod.request.cpu_milli = cpu;
    pod.request.memory_mib = memory;
    if (num_gpu > 0) {
      // As the artefact's converter: milli above 1000 means a whole GPU, 0 means none asked.
      pod.request.num_gpu = static_cast<int>(num_gpu);
      pod.request.gpu_milli = static_cast<int>(std::min<std::int64_t>(milli, kMilliPerGpu));
      if (pod.request.gpu_milli == 0) {
        return absl::InvalidArgumentError(table->Where(row, "gpu_milli") +
                                          ": 0 for a pod that asks for GPUs");
      }
      if (pod.request.gpu_milli < kMilliPerGpu && num_gpu > 1) {
        return absl::InvalidArgumentError(
            table->Where(row, "gpu_milli") +
            ": a partial GPU share over several GPUs cannot be placed");
      }
      if (has_spec) {
        for (absl::string_view token : absl::StrSplit(table->Cell(row, "gpu_spec"), '|')) {
          if (!token.empty()) pod.request.models.emplace_back(token);
        }
      }
    }
    pods.push_back(std::move(pod));
  }
  std::sort(pods.begin(), pods.end(),
            [](const TracePod& a, const TracePod& b) { return a.name < b.name; });
  return pods;
}

absl::Status ConvertToMig(std::vector<NodeSpec>& nodes, std::vector<TracePod>& pods) {
  const hw::Catalog& catalog = hw::Catalog::Builtin();
  const hw::GpuModel* h100 = catalog.Find("H100-80GB");
  const hw::GpuModel* a100 = catalog.Find("A100-80GB");
  if (h100 == nullptr || a100 == nullptr) {
    return absl::InternalError("the catalog lacks H100-80GB or A100-80GB");
  }
  for (NodeSpec& node : nodes) {
    if (node.gpus == 0) continue;
    node.mode = GpuMode::kMig;
    node.hardware = node.gpus == 8 ? h100 : a100;
    node.gpu_memory_mib = node.hardware->memory_mib;
  }
  // Both models have 7 compute slices with 1g, 2g, 3g, 4g and 7g profiles.
  static constexpr int kSlices[] = {1, 2, 3, 4, 7};
  for (TracePod& pod : pods) {
    Request& request = pod.request;
    if (!request.share()) continue;
    int slices = 7;
    for (int s : kSlices) {
      if (s * kMilliPerGpu >= request.milli() * 7) {
        slices = s;
        break;
      }
    }
    if (slices == 7) {
      request.gpu_milli = kMilliPerGpu;  // the whole GPU
    } else {
      request.mig_profile = absl::StrCat(slices, "g");
      request.gpu_milli = 0;
    }
  }
  return absl::OkStatus();
}

namespace {

// GPU demand of a request in milli: shares their milli, MIG profiles their slices of 7.
std::int64_t Demand(const Request& request) {
  if (request.cpu_only()) return 0;
  if (!request.mig_profile.empty()) {
    const int slices = std::atoi(request.mig_profile.c_str());
    return static_cast<std::int64_t>(slices) * kMilliPerGpu / 7;
  }
  return static_cast<std::int64_t>(request.milli()) * request.num_gpu;
}

std::int64_t PerGpuDemand(const Request& request) {
  return request.num_gpu == 0 ? 0 : Demand(request) / request.num_gpu;
}

}  // namespace

Arrivals MakeArrivals(const std::vector<TracePod>& trace, int node_count, int total_gpus,
                      std::uint64_t seed, double target_ratio) {
  // The artefact's order of draws from Go's global source (fgd-protocol.md §2.4): one Int()
  // discarded, the name-sorted pods shuffled, the tuning's draws, then the node ranks.
  GoRand rng(static_cast<std::int64_t>(seed));
  rng.Int();
  std::vector<const TracePod*> by_name;
  by_name.reserve(trace.size());
  for (const TracePod& pod : trace) by_name.push_back(&pod);
  std::stable_sort(by_name.begin(), by_name.end(),
                   [](const TracePod* a, const TracePod* b) { return a->name < b->name; });
  Arrivals arrivals;
  arrivals.pods = by_name;
  arrivals.pods.reserve(trace.size() * 3 / 2);
  rng.Shuffle(static_cast<std::int32_t>(arrivals.pods.size()), [&](int i, int j) {
    std::swap(arrivals.pods[static_cast<size_t>(i)], arrivals.pods[static_cast<size_t>(j)]);
  });
  std::int64_t demand = 0;
  for (const TracePod* pod : arrivals.pods) demand += Demand(pod->request);
  const auto target = static_cast<std::int64_t>(target_ratio * total_gpus * kMilliPerGpu);
  if (demand > 0 && demand < target) {
    // Clones of random pods of the name-sorted trace at the end, until the next would pass the
    // target by its per-GPU demand (that one is drawn and dropped).
    const auto pool = static_cast<std::int32_t>(by_name.size());
    for (;;) {
      const TracePod* candidate = by_name[static_cast<size_t>(rng.Intn(pool))];
      if (demand + PerGpuDemand(candidate->request) > target) break;
      arrivals.pods.push_back(candidate);
      demand += Demand(candidate->request);
    }
  } else {
    while (demand > target && !arrivals.pods.empty()) {
      const auto k = static_cast<size_t>(rng.Intn(static_cast<std::int32_t>(arrivals.pods.size())));
      demand -= Demand(arrivals.pods[k]->request);
      arrivals.pods.erase(arrivals.pods.begin() + static_cast<long>(k));
    }
  }
  arrivals.demand_milli = demand;
  // The scheduler's informers each draw a Float64 (their watch time-out) before the artefact
  // draws the node ranks; node i (in the order given, the artefact's name order) then gets
  // tie-break rank perm[i].
  for (int i = 0; i < kInformerDraws; ++i) rng.Float64();
  arrivals.node_rank = rng.Perm(node_count);
  return arrivals;
}

absl::StatusOr<ReplayResult> Replay(const std::vector<NodeSpec>& nodes,
                                    const std::vector<TracePod>& trace,
                                    const std::vector<TypicalRequest>& typical,
                                    const std::string& policy_name, std::uint64_t seed,
                                    const ReplayOptions& options) {
  absl::StatusOr<Cluster> cluster = Cluster::Create(nodes);
  if (!cluster.ok()) return cluster.status();
  PolicyOptions policy_options;
  if (!(options.learn && policy_name == "gpuslice")) policy_options.typical = typical;
  policy_options.seed = seed;
  absl::StatusOr<std::unique_ptr<Policy>> policy = MakePolicy(policy_name, policy_options);
  if (!policy.ok()) return policy.status();
  const int total_gpus = cluster->total_gpus();
  if (total_gpus == 0) return absl::InvalidArgumentError("the cluster has no GPUs");
  Arrivals arrivals =
      MakeArrivals(trace, cluster->node_count(), total_gpus, seed, options.target_ratio);
  Engine engine(*std::move(cluster), *std::move(policy), arrivals.node_rank);
  engine.set_explain_rejections(false);

  ReplayResult result;
  result.policy = policy_name;
  result.seed = seed;
  std::array<double, kCurvePoints> sum{};
  std::array<int, kCurvePoints> count{};
  // Events are (arrived %, allocated %); the artefact buckets the first and uses a ±1 fallback.
  std::vector<std::pair<int, double>> events;
  events.reserve(arrivals.pods.size());
  std::int64_t arrived = 0;
  const double capacity = static_cast<double>(total_gpus);
  const auto start = std::chrono::steady_clock::now();
  for (const TracePod* pod : arrivals.pods) {
    arrived += Demand(pod->request);
    absl::StatusOr<Allocation> allocation = engine.Place(pod->request);
    if (allocation.ok()) {
      result.placed += 1;
    } else if (absl::IsResourceExhausted(allocation.status()) ||
               absl::IsFailedPrecondition(allocation.status())) {
      result.failed += 1;
    } else {
      return allocation.status();
    }
    const double a = RoundHalfEven(static_cast<double>(arrived) / capacity / 10.0);
    const double u = std::round(static_cast<double>(engine.cluster().allocated_milli()) / capacity /
                                10.0 * 100.0) /
                     100.0;
    events.emplace_back(static_cast<int>(a), u);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.pods = static_cast<int>(arrivals.pods.size());
  for (const auto& [a, u] : events) {
    if (a >= 0 && a < kCurvePoints) {
      sum[static_cast<size_t>(a)] += u;
      count[static_cast<size_t>(a)] += 1;
    }
  }
  for (int x = 0; x < kCurvePoints; ++x) {
    const size_t i = static_cast<size_t>(x);
    if (count[i] > 0) {
      result.curve[i] = sum[i] / count[i];
      continue;
    }
    double s = 0;
    int c = 0;
    for (int y = std::max(0, x - 1); y <= std::min(kCurvePoints - 1, x + 1); ++y) {
      s += sum[static_cast<size_t>(y)];
      c += count[static_cast<size_t>(y)];
    }
    result.curve[i] = c > 0 ? s / c : std::numeric_limits<double>::quiet_NaN();
  }
  const int last =
      std::clamp(static_cast<int>(std::lround(options.target_ratio * 100)), 0, kCurvePoints - 1);
  result.alloc_ratio = result.curve[static_cast<size_t>(last)];
  result.final_alloc_ratio =
      100.0 * static_cast<double>(engine.cluster().allocated_milli()) / (capacity * 1000.0);
  if (std::isnan(result.alloc_ratio)) result.alloc_ratio = result.final_alloc_ratio;
  result.unallocated_gpus = capacity * (1.0 - result.alloc_ratio / 100.0);
  return result;
}

}  // namespace gpuslice::place
