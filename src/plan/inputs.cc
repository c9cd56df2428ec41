#include "gpuslice/plan/inputs.h"

#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "gpuslice/util/strings.h"
#include "gpuslice/util/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace gpuslice::plan {

namespace {

using util::ParseError;
using util::ThrowYamlError;
using util::YamlMap;

constexpr int kMaxReplicas = 100000;
constexpr double kMaxThroughputRps = 1e9;
constexpr double kMaxLatencyMs = 1e7;  // about 2.8 hours
constexpr double kMaxPeakMemoryGib = 10000;
constexpr int kMaxMediaEngines = 64;
constexpr int kMaxGpusPerGroup = 1024;
constexpr double kMaxCostPerGpuHour = 10000;
constexpr int kMaxComputeSlices = 8;
constexpr std::int64_t kMaxBatch = 1 << 20;
constexpr std::int64_t kMaxProcesses = 1024;

// "origin:line" of a node (just "origin" when the node has no position).
std::string Where(std::string_view origin, const YAML::Node& node) {
  std::string text(origin);
  if (node.IsDefined() && node.Mark().line >= 0) {
    text += ":" + std::to_string(node.Mark().line + 1);
  }
  return text;
}

int LineOf(const YAML::Node& node) { return node.Mark().line + 1; }

bool Present(const YAML::Node& node) { return node.IsDefined() && !node.IsNull(); }

std::string Index(std::string_view path, size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

// A mapping whose keys are text, distinct and among `known` (yaml-cpp keeps duplicate keys, and
// YamlMap would silently read the first one).
YamlMap OpenMap(const YAML::Node& node, std::string_view origin, const std::string& path,
                std::initializer_list<std::string_view> known) {
  if (!node.IsMap()) {
    ThrowYamlError(origin, node, path,
                   node.IsNull() ? "expected a mapping, got nothing" : "expected a mapping");
  }
  std::set<std::string, std::less<>> seen;
  const std::string prefix = path.empty() ? "" : path + ".";
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar()) ThrowYamlError(origin, it->first, path, "keys must be text");
    const std::string key = it->first.Scalar();
    bool is_known = false;
    for (std::string_view name : known) is_known = is_known || name == key;
    if (!is_known) {
      std::string expected;
      for (std::string_view name : known) {
        if (!expected.empty()) expected += ", ";
        expected += name;
      }
      ThrowYamlError(origin, it->first, prefix + key,
                     "unknown field (expected one of " + expected + ")");
    }
    if (!seen.insert(key).second) ThrowYamlError(origin, it->first, prefix + key, "duplicate key");
  }
  return YamlMap(node, origin, path);
}

// The list under `key` (when absent and not `required`, the absent node: check Present()).
YAML::Node List(YamlMap& map, std::string_view key, bool required) {
  YAML::Node node = required ? map.Node(key) : map.OptionalNode(key);
  if (Present(node) && !node.IsSequence()) map.Fail(node, key, "expected a list");
  return node;
}

// A number in (0, max], or 0 when the key is absent.
double OptionalPositive(YamlMap& map, std::string_view key, double max) {
  const YAML::Node node = map.OptionalNode(key);
  if (!Present(node)) return 0;
  const std::string path = map.PathOf(key);
  const double value =
      util::YamlDouble(node, map.origin(), path, std::numeric_limits<double>::lowest(),
                       std::numeric_limits<double>::max());
  if (value <= 0 || value > max) {
    std::array<char, 32> buffer{};
    const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), max);
    ThrowYamlError(map.origin(), node, path,
                   "value " + node.Scalar() + " is outside (0, " +
                       std::string(buffer.data(), result.ptr) + "]");
  }
  return value;
}

int IntField(YamlMap& map, std::string_view key, int min, int max, int fallback) {
  return static_cast<int>(map.Int(key, min, max, fallback));
}

bool IsValidName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string ReadName(YamlMap& map) {
  const std::string name = map.String("name");
  if (!IsValidName(name)) {
    map.Fail("name", "'" + name + "' is not a valid name (use letters, digits, '.', '_' and '-')");
  }
  return name;
}

// A GPU model name resolved through the catalog to its canonical id.
std::string ResolveModel(const hw::Catalog& catalog, const YAML::Node& node,
                         std::string_view origin, const std::string& path) {
  const std::string name = util::YamlString(node, origin, path);
  absl::StatusOr<const hw::GpuModel*> model = catalog.Resolve(name);
  if (!model.ok()) {
    ThrowYamlError(origin, node, path, std::string(model.status().message()),
                   model.status().code());
  }
  return (*model)->id;
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path, std::string_view what) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    return absl::InvalidArgumentError(path + ": is a directory, not a " + std::string(what));
  }
  errno = 0;
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    const int error = errno;
    return absl::NotFoundError(path + ": cannot read " + std::string(what) +
                               (error != 0 ? std::string(": ") + std::strerror(error) : ""));
  }
  std::stringstream text;
  text << file.rdbuf();
  if (file.bad()) return absl::InternalError(path + ": error while reading " + std::string(what));
  return text.str();
}

// ---------------------------------------------------------------------------------------------
// Workloads

SizingPolicy ReadPolicy(const YAML::Node& node, std::string_view origin) {
  YamlMap map = OpenMap(node, origin, "policy",
                        {"memory_headroom", "fine_tune_headroom", "fine_tune_min_compute_slices",
                         "notebook_max_compute_slices", "latency_wait_factor", "latency_margin",
                         "allow_multi_process"});
  SizingPolicy policy;
  policy.memory_headroom = map.Double("memory_headroom", 0, 10, policy.memory_headroom);
  policy.fine_tune_headroom = map.Double("fine_tune_headroom", 0, 10, policy.fine_tune_headroom);
  policy.fine_tune_min_compute_slices =
      IntField(map, "fine_tune_min_compute_slices", 1, kMaxComputeSlices,
               policy.fine_tune_min_compute_slices);
  policy.notebook_max_compute_slices = IntField(
      map, "notebook_max_compute_slices", 1, kMaxComputeSlices, policy.notebook_max_compute_slices);
  policy.latency_wait_factor =
      map.Double("latency_wait_factor", 1, 100, policy.latency_wait_factor);
  policy.latency_margin = map.Double("latency_margin", 0, 1, policy.latency_margin);
  if (policy.latency_margin >= 1) {
    map.Fail("latency_margin", "must be below 1 (it is the fraction of the SLO kept in reserve)");
  }
  policy.allow_multi_process = map.Bool("allow_multi_process", policy.allow_multi_process);
  map.Finish();
  return policy;
}

MediaNeed ReadMedia(const YAML::Node& node, std::string_view origin, const std::string& path) {
  YamlMap map = OpenMap(node, origin, path, {"decoders", "jpeg", "ofa", "encoders"});
  MediaNeed media;
  media.decoders = IntField(map, "decoders", 0, kMaxMediaEngines, 0);
  media.jpeg = IntField(map, "jpeg", 0, kMaxMediaEngines, 0);
  media.ofa = IntField(map, "ofa", 0, kMaxMediaEngines, 0);
  media.encoders = IntField(map, "encoders", 0, kMaxMediaEngines, 0);
  map.Finish();
  return media;
}

std::string ResolveCsvPath(const std::string& base_dir, const std::string& csv) {
  const std::filesystem::path file(csv);
  if (file.is_absolute() || base_dir.empty()) return csv;
  return (std::filesystem::path(base_dir) / file).lexically_normal().string();
}

std::vector<PerfTable> ReadPerfList(const YAML::Node& list, std::string_view origin,
                                    const std::string& path, const std::string& base_dir,
                                    const hw::Catalog& catalog) {
  std::vector<PerfTable> tables;
  std::map<std::string, size_t> first_index;  // model id -> index in the list
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string item_path = Index(path, i);
    YamlMap item = OpenMap(list[i], origin, item_path, {"gpu_model", "csv"});
    const std::string model =
        ResolveModel(catalog, item.Node("gpu_model"), origin, item.PathOf("gpu_model"));
    if (auto [it, inserted] = first_index.emplace(model, i); !inserted) {
      item.Fail("gpu_model", "a second perf table for " + model + " (the first is " +
                                 Index(path, it->second) + ")");
    }
    const YAML::Node csv_node = item.Node("csv");
    const std::string csv = util::YamlString(csv_node, origin, item.PathOf("csv"));
    if (csv.empty()) item.Fail("csv", "the path is empty");
    item.Finish();
    absl::StatusOr<PerfTable> table = ReadPerfCsv(ResolveCsvPath(base_dir, csv), model);
    if (!table.ok()) {
      ThrowYamlError(origin, csv_node, item.PathOf("csv"), std::string(table.status().message()),
                     table.status().code());
    }
    tables.push_back(*std::move(table));
  }
  return tables;
}

Workload ReadWorkload(const YAML::Node& node, std::string_view origin, const std::string& path,
                      const std::string& base_dir, const hw::Catalog& catalog) {
  YamlMap map = OpenMap(
      node, origin, path,
      {"name", "kind", "tenant", "replicas", "throughput_rps", "latency_p99_ms", "peak_memory_gib",
       "measured", "perf", "media", "gpu_models", "min_instances", "spread"});
  Workload workload;
  workload.origin = Where(origin, node);
  workload.name = ReadName(map);

  const std::string kind = map.String("kind", "inference");
  if (std::optional<WorkloadKind> parsed = ParseWorkloadKind(kind)) {
    workload.kind = *parsed;
  } else {
    map.Fail("kind",
             "unknown kind '" + kind + "' (expected inference, notebook, batch or fine-tune)");
  }
  workload.tenant = map.String("tenant", "");

  const bool by_replicas = Present(map.OptionalNode("replicas"));
  const bool by_throughput = Present(map.OptionalNode("throughput_rps"));
  if (by_replicas && by_throughput) {
    map.Fail("throughput_rps",
             "contradictory: replicas and throughput_rps are both given; a workload is sized "
             "either by replicas or by a throughput target");
  }
  if (!by_replicas && !by_throughput) {
    map.Fail(node, "", "one of replicas or throughput_rps is required");
  }
  if (by_replicas) workload.replicas = IntField(map, "replicas", 1, kMaxReplicas, 0);
  if (by_throughput) {
    workload.throughput_rps = OptionalPositive(map, "throughput_rps", kMaxThroughputRps);
  }

  workload.latency_p99_ms = OptionalPositive(map, "latency_p99_ms", kMaxLatencyMs);
  if (workload.latency_p99_ms > 0 && !by_throughput) {
    map.Fail("latency_p99_ms",
             "a latency SLO needs throughput_rps (replicas workloads have no latency model)");
  }
  workload.peak_memory_gib = OptionalPositive(map, "peak_memory_gib", kMaxPeakMemoryGib);
  if (by_replicas && workload.peak_memory_gib == 0) {
    map.Fail("peak_memory_gib", "replicas workloads need peak_memory_gib");
  }
  workload.measured = map.Bool("measured", false);
  if (workload.measured && workload.peak_memory_gib == 0) {
    map.Fail("measured", "measured: true needs peak_memory_gib (the measured peak)");
  }

  if (const YAML::Node perf = List(map, "perf", false); Present(perf)) {
    workload.perf = ReadPerfList(perf, origin, map.PathOf("perf"), base_dir, catalog);
  }
  if (by_throughput && workload.perf.empty()) {
    map.Fail("perf",
             "throughput workloads need at least one perf table ({gpu_model: ..., csv: ...})");
  }

  if (const YAML::Node media = map.OptionalNode("media"); Present(media)) {
    workload.media = ReadMedia(media, origin, map.PathOf("media"));
  }

  if (const YAML::Node models = List(map, "gpu_models", false); Present(models)) {
    for (size_t i = 0; i < models.size(); ++i) {
      const std::string item_path = Index(map.PathOf("gpu_models"), i);
      std::string id = ResolveModel(catalog, models[i], origin, item_path);
      for (const std::string& seen : workload.gpu_models) {
        if (seen == id) ThrowYamlError(origin, models[i], item_path, id + " is listed twice");
      }
      workload.gpu_models.push_back(std::move(id));
    }
  }

  workload.min_instances = IntField(map, "min_instances", 1, kMaxReplicas, 1);
  if (by_replicas && workload.min_instances > workload.replicas) {
    map.Fail("min_instances", "min_instances (" + std::to_string(workload.min_instances) +
                                  ") exceeds replicas (" + std::to_string(workload.replicas) + ")");
  }
  workload.spread = map.Bool("spread", true);
  map.Finish();
  return workload;
}

WorkloadSet ReadWorkloadSet(std::string_view text, std::string_view origin,
                            const std::string& base_dir, const hw::Catalog& catalog) {
  const YAML::Node root = YAML::Load(std::string(text));
  if (!Present(root)) {
    ThrowYamlError(origin, root, "",
                   "the file is empty (expected `workloads:` and optionally `policy:`)");
  }
  YamlMap top = OpenMap(root, origin, "", {"policy", "workloads"});
  WorkloadSet set;
  if (const YAML::Node policy = top.OptionalNode("policy"); Present(policy)) {
    set.policy = ReadPolicy(policy, origin);
  }
  const YAML::Node list = List(top, "workloads", true);
  if (list.size() == 0) top.Fail("workloads", "at least one workload is required");
  std::map<std::string, int> first_line;
  for (size_t i = 0; i < list.size(); ++i) {
    Workload workload = ReadWorkload(list[i], origin, Index("workloads", i), base_dir, catalog);
    if (auto [it, inserted] = first_line.emplace(workload.name, LineOf(list[i])); !inserted) {
      ThrowYamlError(origin, list[i]["name"], Index("workloads", i) + ".name",
                     "duplicate workload name '" + workload.name + "' (first at line " +
                         std::to_string(it->second) + ")");
    }
    set.workloads.push_back(std::move(workload));
  }
  top.Finish();
  return set;
}

// ---------------------------------------------------------------------------------------------
// Fleet

struct GroupSeen {
  YAML::Node node;
  std::string where;  // "node X gpus[i]"
  std::string path;   // "nodes[n].gpus[i]"
};

Fleet ReadFleetYaml(std::string_view text, std::string_view origin, const hw::Catalog& catalog) {
  const YAML::Node root = YAML::Load(std::string(text));
  if (!Present(root)) ThrowYamlError(origin, root, "", "the file is empty (expected `nodes:`)");
  YamlMap top = OpenMap(root, origin, "", {"currency", "hours_per_month", "nodes"});
  Fleet fleet;
  fleet.currency = util::Trim(top.String("currency", fleet.currency));
  if (fleet.currency.empty()) top.Fail("currency", "the currency is empty");
  fleet.hours_per_month = top.Double("hours_per_month", 1, 744, fleet.hours_per_month);
  const YAML::Node nodes = List(top, "nodes", true);
  if (nodes.size() == 0) top.Fail("nodes", "at least one node is required");

  std::map<std::string, int> first_line;
  std::vector<GroupSeen> with_cost;
  std::vector<GroupSeen> without_cost;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const std::string node_path = Index("nodes", n);
    YamlMap node_map = OpenMap(nodes[n], origin, node_path, {"name", "gpus"});
    Node node;
    node.origin = Where(origin, nodes[n]);
    node.name = ReadName(node_map);
    if (auto [it, inserted] = first_line.emplace(node.name, LineOf(nodes[n])); !inserted) {
      node_map.Fail("name", "duplicate node name '" + node.name + "' (first at line " +
                                std::to_string(it->second) + ")");
    }
    const YAML::Node gpus = List(node_map, "gpus", true);
    if (gpus.size() == 0) node_map.Fail("gpus", "at least one GPU group is required");
    for (size_t g = 0; g < gpus.size(); ++g) {
      const std::string group_path = Index(node_map.PathOf("gpus"), g);
      YamlMap group_map =
          OpenMap(gpus[g], origin, group_path, {"model", "count", "cost_per_gpu_hour", "mig"});
      GpuGroup group;
      group.origin = Where(origin, gpus[g]);
      group.model =
          ResolveModel(catalog, group_map.Node("model"), origin, group_map.PathOf("model"));
      group.count = static_cast<int>(group_map.Int("count", 1, kMaxGpusPerGroup));
      GroupSeen seen{gpus[g], "node " + node.name + " gpus[" + std::to_string(g) + "]", group_path};
      if (Present(group_map.OptionalNode("cost_per_gpu_hour"))) {
        group.cost_per_hour = group_map.Double("cost_per_gpu_hour", 0, kMaxCostPerGpuHour);
        with_cost.push_back(std::move(seen));
      } else {
        without_cost.push_back(std::move(seen));
      }
      const std::string mig = group_map.String("mig", "allowed");
      if (mig == "allowed") {
        group.mig_allowed = true;
      } else if (mig == "disabled") {
        group.mig_allowed = false;
      } else {
        group_map.Fail("mig", "expected allowed or disabled, got '" + mig + "'");
      }
      group_map.Finish();
      node.gpus.push_back(std::move(group));
    }
    node_map.Finish();
    fleet.nodes.push_back(std::move(node));
  }
  top.Finish();

  if (!with_cost.empty() && !without_cost.empty()) {
    const GroupSeen& missing = without_cost.front();
    ThrowYamlError(origin, missing.node, missing.path + ".cost_per_gpu_hour",
                   "cost_per_gpu_hour is given for some GPU groups (" + with_cost.front().where +
                       ") but not for " + missing.where);
  }
  if (with_cost.empty()) {
    fleet.costs_given = false;
    for (Node& node : fleet.nodes) {
      for (GpuGroup& group : node.gpus) group.cost_per_hour = 1.0;
    }
  }
  return fleet;
}

// ---------------------------------------------------------------------------------------------
// Perf CSV

enum Column { kInstance, kBatch, kProcesses, kThroughput, kLatency, kColumnCount };
constexpr std::array<std::string_view, kColumnCount> kColumnNames = {
    "Mig instance", "Batch size", "Workload Number", "Throughput", "Latency"};

std::string ExpectedHeader() {
  std::string text;
  for (std::string_view name : kColumnNames) {
    if (!text.empty()) text += ",";
    text += name;
  }
  return text;
}

std::vector<std::string> SplitFields(std::string_view line) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    std::string field = util::Trim(line.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (field.size() >= 2 && field.front() == '"' && field.back() == '"') {
      field = util::Trim(std::string_view(field).substr(1, field.size() - 2));
    }
    fields.push_back(std::move(field));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return fields;
}

class CsvReader {
 public:
  CsvReader(std::string_view origin, const std::string& gpu_model) : origin_(origin) {
    table_.gpu_model = gpu_model;
    table_.origin = std::string(origin);
  }

  PerfTable Read(std::string_view text) {
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 byte order mark
    bool have_header = false;
    int rows = 0;
    int line_number = 0;
    size_t start = 0;
    while (start < text.size()) {
      const size_t end = text.find('\n', start);
      std::string_view line =
          text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
      start = end == std::string_view::npos ? text.size() : end + 1;
      ++line_number;
      line_ = line_number;
      const std::string trimmed = util::Trim(line);
      if (trimmed.empty() || trimmed.front() == '#') continue;
      if (!have_header) {
        ReadHeader(trimmed);
        have_header = true;
        continue;
      }
      ReadRow(trimmed);
      ++rows;
    }
    line_ = 0;
    if (!have_header) Fail("", "empty file; expected the header " + ExpectedHeader());
    if (rows == 0) Fail("", "no data rows after the header");
    if (table_.points.empty()) {
      Fail("", "no feasible measurement (every row has throughput or latency 0)");
    }
    return std::move(table_);
  }

 private:
  [[noreturn]] void Fail(std::string_view column, std::string_view message) const {
    std::string text = origin_;
    if (line_ > 0) text += ":" + std::to_string(line_);
    text += ": ";
    if (!column.empty()) text += "column " + std::string(column) + ": ";
    text += message;
    throw ParseError(text);
  }

  void ReadHeader(std::string_view line) {
    const std::vector<std::string> names = SplitFields(line);
    order_.assign(names.size(), kColumnCount);
    std::array<bool, kColumnCount> found{};
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string key = util::Lower(names[i]);
      size_t column = kColumnCount;
      for (size_t c = 0; c < kColumnCount; ++c) {
        if (util::Lower(kColumnNames[c]) == key) column = c;
      }
      if (column == kColumnCount) {
        Fail(names[i].empty() ? "#" + std::to_string(i + 1) : names[i],
             "unknown column in the header (expected " + ExpectedHeader() + ")");
      }
      if (found[column]) Fail(names[i], "appears twice in the header");
      found[column] = true;
      order_[i] = static_cast<Column>(column);
    }
    for (size_t c = 0; c < kColumnCount; ++c) {
      if (!found[c]) {
        Fail(kColumnNames[c], "missing from the header (expected " + ExpectedHeader() + ")");
      }
    }
  }

  std::int64_t Integer(Column column, const std::string& text, std::int64_t min,
                       std::int64_t max) const {
    std::int64_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
      Fail(kColumnNames[column], "expected an integer, got '" + text + "'");
    }
    if (value < min || value > max) {
      Fail(kColumnNames[column], "value " + text + " is outside [" + std::to_string(min) + ", " +
                                     std::to_string(max) + "]");
    }
    return value;
  }

  double Number(Column column, const std::string& text) const {
    double value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size() ||
        !std::isfinite(value)) {
      Fail(kColumnNames[column], "expected a number, got '" + text + "'");
    }
    if (value < 0) Fail(kColumnNames[column], "must not be negative, got '" + text + "'");
    return value;
  }

  // "1", "7": compute slices; "0" or "full": the whole GPU; "1g.20gb": an exact GI profile.
  void Instance(const std::string& text, PerfPoint* point) const {
    const std::string key = util::Lower(text);
    if (key == "full" || key == "0") {
      point->compute_slices = 0;
      return;
    }
    if (key.size() >= 3 && key[0] >= '1' && key[0] <= '9' && key[1] == 'g' && key[2] == '.') {
      const int slices = key[0] - '0';
      bool valid = slices <= kMaxComputeSlices && key.size() > 3;
      for (size_t i = 3; i < key.size() && valid; ++i) {
        const char c = key[i];
        valid =
            (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '+' || c == '-';
      }
      if (valid) {
        point->compute_slices = slices;
        point->profile = text;
        return;
      }
    } else if (!key.empty() && key.find_first_not_of("0123456789") == std::string::npos) {
      point->compute_slices = static_cast<int>(Integer(kInstance, text, 0, kMaxComputeSlices));
      return;
    }
    Fail(
        kColumnNames[kInstance],
        "expected compute slices (1-" + std::to_string(kMaxComputeSlices) +
            "), a GPU-instance profile name such as 1g.20gb, or full (0) for the whole GPU; got '" +
            text + "'");
  }

  void ReadRow(std::string_view line) {
    const std::vector<std::string> fields = SplitFields(line);
    if (fields.size() != order_.size()) {
      Fail("", "expected " + std::to_string(order_.size()) + " comma-separated fields, got " +
                   std::to_string(fields.size()));
    }
    std::array<const std::string*, kColumnCount> value{};
    for (size_t i = 0; i < fields.size(); ++i) value[order_[i]] = &fields[i];

    PerfPoint point;
    Instance(*value[kInstance], &point);
    point.batch = static_cast<int>(Integer(kBatch, *value[kBatch], 1, kMaxBatch));
    point.processes = static_cast<int>(Integer(kProcesses, *value[kProcesses], 1, kMaxProcesses));
    const double per_process = Number(kThroughput, *value[kThroughput]);
    const double latency_s = Number(kLatency, *value[kLatency]);

    const auto key = std::make_tuple(point.compute_slices, util::Lower(point.profile), point.batch,
                                     point.processes);
    if (auto [it, inserted] = first_line_.emplace(key, line_); !inserted) {
      Fail("",
           "a second row for the same instance, batch size and workload number (the first is "
           "line " +
               std::to_string(it->second) + ")");
    }
    if (per_process == 0 || latency_s == 0) return;  // infeasible (typically out of memory)
    point.throughput_rps = per_process * point.processes;
    point.latency_ms = latency_s * 1000.0;
    table_.points.push_back(std::move(point));
  }

  std::string origin_;
  int line_ = 0;
  std::vector<Column> order_;  // column of each field
  std::map<std::tuple<int, std::string, int, int>, int> first_line_;
  PerfTable table_;
};

}  // namespace

absl::StatusOr<WorkloadSet> ParseWorkloads(std::string_view text, std::string_view origin,
                                           const std::string& base_dir,
                                           const hw::Catalog& catalog) {
  return util::GuardParse<WorkloadSet>(
      origin, [&] { return ReadWorkloadSet(text, origin, base_dir, catalog); });
}

absl::StatusOr<WorkloadSet> ReadWorkloadsFile(const std::string& path, const hw::Catalog& catalog) {
  absl::StatusOr<std::string> text = ReadTextFile(path, "workloads file");
  if (!text.ok()) return text.status();
  return ParseWorkloads(*text, path, std::filesystem::path(path).parent_path().string(), catalog);
}

absl::StatusOr<Fleet> ParseFleet(std::string_view text, std::string_view origin,
                                 const hw::Catalog& catalog) {
  return util::GuardParse<Fleet>(origin, [&] { return ReadFleetYaml(text, origin, catalog); });
}

absl::StatusOr<Fleet> ReadFleetFile(const std::string& path, const hw::Catalog& catalog) {
  absl::StatusOr<std::string> text = ReadTextFile(path, "fleet file");
  if (!text.ok()) return text.status();
  return ParseFleet(*text, path, catalog);
}

absl::StatusOr<PerfTable> ParsePerfCsv(std::string_view text, std::string_view origin,
                                       const std::string& gpu_model) {
  return util::GuardParse<PerfTable>(origin,
                                     [&] { return CsvReader(origin, gpu_model).Read(text); });
}

absl::StatusOr<PerfTable> ReadPerfCsv(const std::string& path, const std::string& gpu_model) {
  absl::StatusOr<std::string> text = ReadTextFile(path, "perf CSV");
  if (!text.ok()) return text.status();
  return ParsePerfCsv(*text, path, gpu_model);
}

}  // namespace gpuslice::plan
