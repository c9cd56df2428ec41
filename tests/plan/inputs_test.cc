// Tests of the planner's input files: the examples in examples/plan/, the real ParvaGPU profiles,
// and bad inputs, each of which must be refused with a message that names the file, the line and
// the field.
#include "gpuslice/plan/inputs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "gpuslice/hw/catalog.h"
#include "gpuslice/plan/model.h"
#include "gpuslice/util/yaml_reader.h"
#include "require.h"

namespace gpuslice::plan {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kExamples = GPUSLICE_SOURCE_DIR "/examples/plan";
const std::string kParva = GPUSLICE_SHARED_DIR "/data/parvagpu-a100-80gb";
// The project's own copies of two ParvaGPU profiles (identical data, checked below when the shared
// data is there), for tests that must run from a clone without ../shared.
const std::string kPerfCopies = GPUSLICE_SOURCE_DIR "/examples/plan/perf";

bool HaveSharedParva() { return std::filesystem::is_directory(kParva); }

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

// Checks that `status` is an error of `code` whose message contains every one of `parts`.
void ExpectError(const absl::Status& status, absl::StatusCode code,
                 std::initializer_list<std::string> parts) {
  ASSERT_FALSE(status.ok()) << "expected an error containing " << *parts.begin();
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& part : parts) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(part));
  }
}

absl::Status WorkloadsStatus(const std::string& yaml, const std::string& base_dir = "") {
  return ParseWorkloads(yaml, "w.yaml", base_dir, Catalog()).status();
}

void ExpectWorkloadsError(const std::string& yaml, std::initializer_list<std::string> parts) {
  SCOPED_TRACE(yaml);
  ExpectError(WorkloadsStatus(yaml), absl::StatusCode::kInvalidArgument, parts);
}

void ExpectFleetError(const std::string& yaml, std::initializer_list<std::string> parts) {
  SCOPED_TRACE(yaml);
  ExpectError(ParseFleet(yaml, "f.yaml", Catalog()).status(), absl::StatusCode::kInvalidArgument,
              parts);
}

void ExpectCsvError(const std::string& csv, std::initializer_list<std::string> parts) {
  SCOPED_TRACE(csv);
  ExpectError(ParsePerfCsv(csv, "p.csv", "A100-80GB").status(), absl::StatusCode::kInvalidArgument,
              parts);
}

const Workload* FindWorkload(const WorkloadSet& set, const std::string& name) {
  for (const Workload& workload : set.workloads) {
    if (workload.name == name) return &workload;
  }
  return nullptr;
}

const PerfPoint* FindPoint(const PerfTable& table, int slices, int batch, int processes) {
  for (const PerfPoint& point : table.points) {
    if (point.compute_slices == slices && point.batch == batch && point.processes == processes) {
      return &point;
    }
  }
  return nullptr;
}

// A fresh folder under the test temp dir.
std::string TempFolder(const std::string& name) {
  const std::filesystem::path folder = std::filesystem::path(testing::TempDir()) / name;
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  return folder.string();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
}

// ---------------------------------------------------------------------------------------------
// WorkloadKind

TEST(InputsKind, NamesRoundTrip) {
  for (WorkloadKind kind : {WorkloadKind::kInference, WorkloadKind::kNotebook, WorkloadKind::kBatch,
                            WorkloadKind::kFineTune}) {
    EXPECT_EQ(ParseWorkloadKind(ToString(kind)), kind);
  }
  EXPECT_EQ(ToString(WorkloadKind::kFineTune), "fine-tune");
  EXPECT_EQ(ParseWorkloadKind("finetune"), WorkloadKind::kFineTune);
  EXPECT_EQ(ParseWorkloadKind("fine_tune"), WorkloadKind::kFineTune);
  EXPECT_EQ(ParseWorkloadKind("Notebook"), WorkloadKind::kNotebook);
  EXPECT_EQ(ParseWorkloadKind("training"), std::nullopt);
  EXPECT_EQ(ParseWorkloadKind(""), std::nullopt);
}

// ---------------------------------------------------------------------------------------------
// The examples

TEST(InputsExamples, WorkloadsFile) {
  absl::StatusOr<WorkloadSet> set = ReadWorkloadsFile(kExamples + "/workloads.yaml", Catalog());
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->workloads.size(), 9u);
  EXPECT_DOUBLE_EQ(set->policy.memory_headroom, 0.15);
  EXPECT_EQ(set->policy.notebook_max_compute_slices, 2);
  EXPECT_FALSE(set->policy.allow_multi_process);

  const Workload* embeddings = FindWorkload(*set, "search-embeddings");
  ASSERT_NE(embeddings, nullptr);
  EXPECT_EQ(embeddings->kind, WorkloadKind::kInference);
  EXPECT_EQ(embeddings->tenant, "search");
  EXPECT_EQ(embeddings->replicas, 6);
  EXPECT_EQ(embeddings->throughput_rps, 0);
  EXPECT_DOUBLE_EQ(embeddings->peak_memory_gib, 7.5);
  EXPECT_TRUE(embeddings->measured);
  EXPECT_EQ(embeddings->min_instances, 3);
  EXPECT_TRUE(embeddings->spread);
  EXPECT_TRUE(embeddings->gpu_models.empty());
  EXPECT_THAT(embeddings->origin, HasSubstr("workloads.yaml:"));

  const Workload* classifier = FindWorkload(*set, "image-classifier");
  ASSERT_NE(classifier, nullptr);
  EXPECT_EQ(classifier->replicas, 0);
  EXPECT_DOUBLE_EQ(classifier->throughput_rps, 2400);
  EXPECT_DOUBLE_EQ(classifier->latency_p99_ms, 200);
  EXPECT_EQ(classifier->peak_memory_gib, 0);
  ASSERT_EQ(classifier->perf.size(), 1u);
  EXPECT_EQ(classifier->perf[0].gpu_model, "A100-80GB");
  EXPECT_THAT(classifier->perf[0].origin, HasSubstr("perf/resnet50.csv"));
  EXPECT_FALSE(classifier->perf[0].points.empty());
  EXPECT_THAT(classifier->gpu_models, ElementsAre("A100-80GB"));
  EXPECT_EQ(classifier->min_instances, 2);

  const Workload* triage = FindWorkload(*set, "ticket-triage");
  ASSERT_NE(triage, nullptr);
  EXPECT_EQ(triage->kind, WorkloadKind::kInference);  // the default
  ASSERT_EQ(triage->perf.size(), 1u);
  EXPECT_THAT(triage->perf[0].origin, HasSubstr("perf/bert.csv"));

  const Workload* video = FindWorkload(*set, "video-moderation");
  ASSERT_NE(video, nullptr);
  EXPECT_EQ(video->media.decoders, 1);
  EXPECT_EQ(video->media.jpeg, 1);
  EXPECT_EQ(video->media.ofa, 0);
  EXPECT_TRUE(video->media.Any());

  const Workload* notebook = FindWorkload(*set, "notebook-alice");
  ASSERT_NE(notebook, nullptr);
  EXPECT_EQ(notebook->kind, WorkloadKind::kNotebook);

  const Workload* lora = FindWorkload(*set, "support-llm-lora");
  ASSERT_NE(lora, nullptr);
  EXPECT_EQ(lora->kind, WorkloadKind::kFineTune);
  EXPECT_THAT(lora->gpu_models, ElementsAre("H100-80GB", "A100-80GB"));
  EXPECT_FALSE(lora->spread);

  const Workload* reindex = FindWorkload(*set, "nightly-reindex");
  ASSERT_NE(reindex, nullptr);
  EXPECT_EQ(reindex->kind, WorkloadKind::kBatch);
  EXPECT_EQ(reindex->replicas, 4);
}

TEST(InputsExamples, FleetFile) {
  absl::StatusOr<Fleet> fleet = ReadFleetFile(kExamples + "/fleet.yaml", Catalog());
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  EXPECT_EQ(fleet->currency, "USD");
  EXPECT_DOUBLE_EQ(fleet->hours_per_month, 730);
  EXPECT_TRUE(fleet->costs_given);
  ASSERT_EQ(fleet->nodes.size(), 2u);
  const Node& h100 = fleet->nodes[0];
  EXPECT_EQ(h100.name, "gpu-h100-01");
  ASSERT_EQ(h100.gpus.size(), 1u);
  EXPECT_EQ(h100.gpus[0].model, "H100-80GB");
  EXPECT_EQ(h100.gpus[0].count, 8);
  EXPECT_DOUBLE_EQ(h100.gpus[0].cost_per_hour, 2.49);
  EXPECT_TRUE(h100.gpus[0].mig_allowed);
  EXPECT_THAT(h100.origin, HasSubstr("fleet.yaml:"));
  EXPECT_THAT(h100.gpus[0].origin, HasSubstr("fleet.yaml:"));

  const Node& a100 = fleet->nodes[1];
  ASSERT_EQ(a100.gpus.size(), 2u);
  int count = 0;
  for (const GpuGroup& group : a100.gpus) {
    EXPECT_EQ(group.model, "A100-80GB");
    count += group.count;
  }
  EXPECT_EQ(count, 4);
  EXPECT_TRUE(a100.gpus[0].mig_allowed);
  EXPECT_FALSE(a100.gpus[1].mig_allowed);
}

TEST(InputsExamples, MixedFleetResolvesNames) {
  absl::StatusOr<Fleet> fleet = ReadFleetFile(kExamples + "/fleet-mixed.yaml", Catalog());
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  EXPECT_EQ(fleet->currency, "EUR");
  EXPECT_DOUBLE_EQ(fleet->hours_per_month, 720);
  std::vector<std::string> models;
  bool some_disabled = false;
  for (const Node& node : fleet->nodes) {
    for (const GpuGroup& group : node.gpus) {
      models.push_back(group.model);
      some_disabled = some_disabled || !group.mig_allowed;
      EXPECT_GT(group.cost_per_hour, 0);
    }
  }
  EXPECT_THAT(models, ElementsAre("H200-141GB", "H100-80GB", "A100-80GB", "A100-80GB", "A30-24GB",
                                  "RTX-PRO-6000-Blackwell", "L4", "L40S"));
  EXPECT_TRUE(some_disabled);
  // A model without MIG with the default `mig: allowed` is accepted.
  EXPECT_TRUE(fleet->nodes.back().gpus[0].mig_allowed);
}

TEST(InputsExamples, PerfCopiesMatchTheSharedData) {
  if (!HaveSharedParva()) GPUSLICE_SKIP_OR_FAIL_IN_CI(kParva << " is not there");
  for (const char* name : {"resnet50.csv", "bert.csv"}) {
    absl::StatusOr<PerfTable> copy = ReadPerfCsv(kExamples + "/perf/" + name, "A100-80GB");
    absl::StatusOr<PerfTable> original = ReadPerfCsv(kParva + "/" + name, "A100-80GB");
    ASSERT_TRUE(copy.ok()) << copy.status();
    ASSERT_TRUE(original.ok()) << original.status();
    ASSERT_EQ(copy->points.size(), original->points.size()) << name;
    for (size_t i = 0; i < copy->points.size(); ++i) {
      EXPECT_EQ(copy->points[i].throughput_rps, original->points[i].throughput_rps);
      EXPECT_EQ(copy->points[i].latency_ms, original->points[i].latency_ms);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// ParvaGPU's measured profiles

TEST(InputsParva, Resnet50) {
  absl::StatusOr<PerfTable> table = ReadPerfCsv(kPerfCopies + "/resnet50.csv", "A100-80GB");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->gpu_model, "A100-80GB");
  EXPECT_THAT(table->origin, HasSubstr("resnet50.csv"));

  const PerfPoint* point = FindPoint(*table, 1, 32, 1);  // "1,32,1,412.097,0.078"
  ASSERT_NE(point, nullptr);
  EXPECT_DOUBLE_EQ(point->throughput_rps, 412.097);
  EXPECT_NEAR(point->latency_ms, 78, 1e-9);
  EXPECT_TRUE(point->profile.empty());

  // Throughput is per process: the instance total is value x processes. "1,1,2,125.968,0.008".
  const PerfPoint* two = FindPoint(*table, 1, 1, 2);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->processes, 2);
  EXPECT_DOUBLE_EQ(two->throughput_rps, 2 * 125.968);
  EXPECT_NEAR(two->latency_ms, 8, 1e-9);

  // "1,32,2,0,0" is infeasible (out of memory): kept out.
  EXPECT_EQ(FindPoint(*table, 1, 32, 2), nullptr);

  const PerfPoint* full = FindPoint(*table, 7, 1, 1);
  ASSERT_NE(full, nullptr);
  EXPECT_GT(full->throughput_rps, 0);
}

TEST(InputsParva, EveryProfileParses) {
  if (!HaveSharedParva()) GPUSLICE_SKIP_OR_FAIL_IN_CI(kParva << " is not there");
  int tables = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kParva)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".csv" || name.rfind("SLO_", 0) == 0) continue;
    SCOPED_TRACE(name);
    absl::StatusOr<PerfTable> table = ReadPerfCsv(entry.path().string(), "A100-80GB");
    ASSERT_TRUE(table.ok()) << table.status();
    ++tables;
    // Count the feasible rows independently of the parser.
    std::ifstream file(entry.path());
    std::string line;
    std::getline(file, line);  // header
    size_t feasible = 0;
    while (std::getline(file, line)) {
      if (line.empty()) continue;
      const std::string throughput = line.substr(0, line.rfind(','));
      const std::string latency = line.substr(line.rfind(',') + 1);
      const std::string tp = throughput.substr(throughput.rfind(',') + 1);
      if (std::stod(tp) > 0 && std::stod(latency) > 0) ++feasible;
    }
    EXPECT_EQ(table->points.size(), feasible);
    for (const PerfPoint& point : table->points) {
      EXPECT_THAT(point.compute_slices, testing::AnyOf(1, 2, 3, 4, 7));
      EXPECT_GE(point.batch, 1);
      EXPECT_GE(point.processes, 1);
      EXPECT_GT(point.throughput_rps, 0);
      EXPECT_GT(point.latency_ms, 0);
    }
  }
  EXPECT_EQ(tables, 11);
}

// ---------------------------------------------------------------------------------------------
// Perf CSV format

TEST(InputsCsv, ToleratesCaseSpacesCrlfAndBlankLines) {
  const std::string csv =
      "\xEF\xBB\xBF mig INSTANCE , batch size,Workload number , THROUGHPUT,latency \r\n"
      "\r\n"
      "1, 4, 1, 100.5, 0.010\r\n"
      "  \r\n"
      "# a comment\r\n"
      "2,4,3,50,0.02\r\n";
  absl::StatusOr<PerfTable> table = ParsePerfCsv(csv, "p.csv", "H100-80GB");
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->points.size(), 2u);
  EXPECT_EQ(table->gpu_model, "H100-80GB");
  EXPECT_EQ(table->origin, "p.csv");
  EXPECT_EQ(table->points[0].compute_slices, 1);
  EXPECT_EQ(table->points[0].batch, 4);
  EXPECT_DOUBLE_EQ(table->points[0].throughput_rps, 100.5);
  EXPECT_NEAR(table->points[0].latency_ms, 10, 1e-9);
  EXPECT_EQ(table->points[1].processes, 3);
  EXPECT_DOUBLE_EQ(table->points[1].throughput_rps, 150);
}

TEST(InputsCsv, ColumnsInAnyOrder) {
  absl::StatusOr<PerfTable> table =
      ParsePerfCsv("Latency,Throughput,Mig instance,Workload Number,Batch size\n0.5,20,3,2,8\n",
                   "p.csv", "A100-80GB");
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->points.size(), 1u);
  EXPECT_EQ(table->points[0].compute_slices, 3);
  EXPECT_EQ(table->points[0].batch, 8);
  EXPECT_EQ(table->points[0].processes, 2);
  EXPECT_DOUBLE_EQ(table->points[0].throughput_rps, 40);
  EXPECT_DOUBLE_EQ(table->points[0].latency_ms, 500);
}

TEST(InputsCsv, ProfileNamesAndWholeGpu) {
  absl::StatusOr<PerfTable> table = ParsePerfCsv(
      "Mig instance,Batch size,Workload Number,Throughput,Latency\n"
      "1g.20gb,8,1,300,0.02\n"
      "1g.10gb+me,8,1,280,0.02\n"
      "full,8,1,2000,0.01\n"
      "0,16,1,2500,0.015\n"
      "7,8,1,1900,0.01\n",
      "p.csv", "A100-80GB");
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->points.size(), 5u);
  EXPECT_EQ(table->points[0].compute_slices, 1);
  EXPECT_EQ(table->points[0].profile, "1g.20gb");
  EXPECT_EQ(table->points[1].profile, "1g.10gb+me");
  EXPECT_EQ(table->points[2].compute_slices, 0);
  EXPECT_TRUE(table->points[2].profile.empty());
  EXPECT_EQ(table->points[3].compute_slices, 0);
  EXPECT_EQ(table->points[4].compute_slices, 7);
  EXPECT_TRUE(table->points[4].profile.empty());
}

TEST(InputsCsv, BadFilesNameTheLineAndColumn) {
  const std::string header = "Mig instance,Batch size,Workload Number,Throughput,Latency\n";
  ExpectCsvError("", {"p.csv", "empty file", "Mig instance,Batch size"});
  ExpectCsvError("\n\n", {"p.csv", "empty file"});
  ExpectCsvError(header, {"p.csv", "no data rows"});
  ExpectCsvError(header + "1,1,1,0,0\n2,1,1,5,0\n", {"p.csv", "no feasible measurement"});
  ExpectCsvError("Mig instance,Batch size,Workload Number,Throughput\n1,1,1,5\n",
                 {"p.csv:1:", "column Latency", "missing"});
  ExpectCsvError("Mig instance,Batch size,Workload Number,Throughput,Latency,GPU\n",
                 {"p.csv:1:", "column GPU", "unknown column"});
  ExpectCsvError("Mig instance,Batch size,Batch size,Workload Number,Throughput,Latency\n",
                 {"p.csv:1:", "column Batch size", "twice"});
  ExpectCsvError(header + "1,1,1,5,0.01\n1,2,1,n/a,0.01\n",
                 {"p.csv:3:", "column Throughput", "expected a number", "n/a"});
  ExpectCsvError(header + "1,1,1,nan,0.01\n", {"p.csv:2:", "column Throughput"});
  ExpectCsvError(header + "1,1,1,inf,0.01\n", {"p.csv:2:", "column Throughput"});
  ExpectCsvError(header + "1,1,1,5,-0.01\n", {"p.csv:2:", "column Latency", "negative"});
  ExpectCsvError(header + "1,1,1,-5,0.01\n", {"p.csv:2:", "column Throughput", "negative"});
  ExpectCsvError(header + "1,0,1,5,0.01\n", {"p.csv:2:", "column Batch size", "outside"});
  ExpectCsvError(header + "1,1.5,1,5,0.01\n", {"p.csv:2:", "column Batch size", "integer"});
  ExpectCsvError(header + "1,1,0,5,0.01\n", {"p.csv:2:", "column Workload Number", "outside"});
  ExpectCsvError(header + "9,1,1,5,0.01\n", {"p.csv:2:", "column Mig instance", "outside"});
  ExpectCsvError(header + "-1,1,1,5,0.01\n", {"p.csv:2:", "column Mig instance"});
  ExpectCsvError(header + "big,1,1,5,0.01\n", {"p.csv:2:", "column Mig instance", "'big'"});
  ExpectCsvError(header + "9g.90gb,1,1,5,0.01\n", {"p.csv:2:", "column Mig instance"});
  ExpectCsvError(header + "1g.,1,1,5,0.01\n", {"p.csv:2:", "column Mig instance"});
  ExpectCsvError(header + "1,1,1,5\n", {"p.csv:2:", "expected 5 comma-separated fields, got 4"});
  ExpectCsvError(header + "1,1,1,5,0.1,3\n", {"p.csv:2:", "got 6"});
  ExpectCsvError(header + "1,1,1,5,0.1\n2,1,1,5,0.1\n1,1,1,6,0.1\n",
                 {"p.csv:4:", "second row", "line 2"});
}

TEST(InputsCsv, MissingFileIsNotFound) {
  absl::StatusOr<PerfTable> table = ReadPerfCsv(kExamples + "/perf/missing.csv", "A100-80GB");
  ExpectError(table.status(), absl::StatusCode::kNotFound, {"missing.csv"});
}

// ---------------------------------------------------------------------------------------------
// Workloads

TEST(InputsWorkloads, MinimalAndDefaults) {
  absl::StatusOr<WorkloadSet> set = ParseWorkloads(
      "workloads:\n"
      "  - name: a\n"
      "    replicas: 2\n"
      "    peak_memory_gib: 10\n"
      "  - name: b.c_d-1\n"
      "    kind: finetune\n"
      "    replicas: 1\n"
      "    peak_memory_gib: 40\n"
      "    gpu_models: [h100, NVIDIA A100-SXM4-80GB]\n",
      "w.yaml", "", Catalog());
  ASSERT_TRUE(set.ok()) << set.status();
  const SizingPolicy defaults;
  EXPECT_EQ(set->policy.memory_headroom, defaults.memory_headroom);
  EXPECT_EQ(set->policy.latency_wait_factor, defaults.latency_wait_factor);
  ASSERT_EQ(set->workloads.size(), 2u);
  const Workload& a = set->workloads[0];
  EXPECT_EQ(a.kind, WorkloadKind::kInference);
  EXPECT_EQ(a.tenant, "");
  EXPECT_EQ(a.min_instances, 1);
  EXPECT_TRUE(a.spread);
  EXPECT_FALSE(a.measured);
  EXPECT_FALSE(a.media.Any());
  EXPECT_EQ(a.origin, "w.yaml:2");
  const Workload& b = set->workloads[1];
  EXPECT_EQ(b.kind, WorkloadKind::kFineTune);
  EXPECT_EQ(b.origin, "w.yaml:5");
  EXPECT_THAT(b.gpu_models, ElementsAre("H100-80GB", "A100-80GB"));
}

TEST(InputsWorkloads, PolicyIsRead) {
  absl::StatusOr<WorkloadSet> set = ParseWorkloads(
      "policy:\n"
      "  memory_headroom: 0.2\n"
      "  fine_tune_headroom: 0.5\n"
      "  fine_tune_min_compute_slices: 3\n"
      "  notebook_max_compute_slices: 1\n"
      "  latency_wait_factor: 1.5\n"
      "  latency_margin: 0\n"
      "  allow_multi_process: true\n"
      "workloads: [{name: a, replicas: 1, peak_memory_gib: 1}]\n",
      "w.yaml", "", Catalog());
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_DOUBLE_EQ(set->policy.memory_headroom, 0.2);
  EXPECT_DOUBLE_EQ(set->policy.fine_tune_headroom, 0.5);
  EXPECT_EQ(set->policy.fine_tune_min_compute_slices, 3);
  EXPECT_EQ(set->policy.notebook_max_compute_slices, 1);
  EXPECT_DOUBLE_EQ(set->policy.latency_wait_factor, 1.5);
  EXPECT_DOUBLE_EQ(set->policy.latency_margin, 0);
  EXPECT_TRUE(set->policy.allow_multi_process);
}

TEST(InputsWorkloads, ThroughputWithPerfRelativeToBaseDir) {
  absl::StatusOr<WorkloadSet> set = ParseWorkloads(
      "workloads:\n"
      "  - name: bert\n"
      "    throughput_rps: 120.5\n"
      "    latency_p99_ms: 100\n"
      "    peak_memory_gib: 6\n"
      "    perf:\n"
      "      - {gpu_model: a100-sxm4-80gb, csv: perf/bert.csv}\n"
      "      - {gpu_model: H100-80GB, csv: perf/resnet50.csv}\n",
      "w.yaml", kExamples, Catalog());
  ASSERT_TRUE(set.ok()) << set.status();
  const Workload& bert = set->workloads[0];
  EXPECT_DOUBLE_EQ(bert.throughput_rps, 120.5);
  EXPECT_DOUBLE_EQ(bert.latency_p99_ms, 100);
  EXPECT_DOUBLE_EQ(bert.peak_memory_gib, 6);
  ASSERT_EQ(bert.perf.size(), 2u);
  EXPECT_EQ(bert.perf[0].gpu_model, "A100-80GB");
  EXPECT_EQ(bert.perf[1].gpu_model, "H100-80GB");
  EXPECT_EQ(bert.perf[0].origin, kExamples + "/perf/bert.csv");
}

TEST(InputsWorkloads, AbsoluteCsvPathIgnoresBaseDir) {
  const std::string yaml =
      "workloads:\n  - name: r\n    throughput_rps: 10\n    perf: [{gpu_model: "
      "A100-80GB, csv: " +
      kPerfCopies + "/resnet50.csv}]\n";
  absl::StatusOr<WorkloadSet> set = ParseWorkloads(yaml, "w.yaml", "/nonexistent", Catalog());
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->workloads[0].perf[0].origin, kPerfCopies + "/resnet50.csv");
}

TEST(InputsWorkloads, FileErrorsNameBothFiles) {
  const std::string dir = TempFolder("inputs_bad_csv");
  WriteFile(dir + "/bad.csv",
            "Mig instance,Batch size,Workload Number,Throughput,Latency\n1,1,1,fast,0.1\n");
  WriteFile(dir + "/w.yaml",
            "workloads:\n"
            "  - name: m\n"
            "    throughput_rps: 10\n"
            "    perf:\n"
            "      - gpu_model: A100-80GB\n"
            "        csv: bad.csv\n");
  absl::StatusOr<WorkloadSet> set = ReadWorkloadsFile(dir + "/w.yaml", Catalog());
  ExpectError(set.status(), absl::StatusCode::kInvalidArgument,
              {dir + "/w.yaml:6:", "workloads[0].perf[0].csv",
               dir + "/bad.csv:2:", "column Throughput", "'fast'"});

  WriteFile(dir + "/w2.yaml",
            "workloads:\n"
            "  - name: m\n"
            "    throughput_rps: 10\n"
            "    perf: [{gpu_model: A100-80GB, csv: nowhere.csv}]\n");
  set = ReadWorkloadsFile(dir + "/w2.yaml", Catalog());
  ExpectError(set.status(), absl::StatusCode::kNotFound,
              {dir + "/w2.yaml:4:", "workloads[0].perf[0].csv", "nowhere.csv"});

  set = ReadWorkloadsFile(dir + "/absent.yaml", Catalog());
  ExpectError(set.status(), absl::StatusCode::kNotFound, {"absent.yaml"});
}

TEST(InputsWorkloads, UnknownGpuModelIsNotFoundWithSuggestion) {
  ExpectError(WorkloadsStatus("workloads:\n"
                              "  - name: a\n"
                              "    replicas: 1\n"
                              "    peak_memory_gib: 3\n"
                              "    gpu_models: [H100-80GB, A100-80G]\n"),
              absl::StatusCode::kNotFound,
              {"w.yaml:5:", "workloads[0].gpu_models[1]", "A100-80G", "did you mean", "A100-80GB"});
  ExpectError(WorkloadsStatus("workloads:\n"
                              "  - name: a\n"
                              "    throughput_rps: 10\n"
                              "    perf:\n"
                              "      - gpu_model: Z9000\n"
                              "        csv: perf/bert.csv\n",
                              kExamples),
              absl::StatusCode::kNotFound,
              {"w.yaml:5:", "workloads[0].perf[0].gpu_model", "Z9000"});
}

TEST(InputsWorkloads, BadFilesNameTheLineAndField) {
  // The file as a whole.
  ExpectWorkloadsError("", {"w.yaml", "empty"});
  ExpectWorkloadsError("- a\n- b\n", {"w.yaml:1:", "expected a mapping"});
  ExpectWorkloadsError("workloads: [\n", {"w.yaml:"});  // YAML syntax error
  ExpectWorkloadsError("policy: {}\n", {"w.yaml:1:", "workloads", "required"});
  ExpectWorkloadsError("workloads: []\n", {"w.yaml:1:", "workloads", "at least one"});
  ExpectWorkloadsError("workloads: {a: 1}\n", {"w.yaml:1:", "workloads", "expected a list"});
  ExpectWorkloadsError("workload:\n  - name: a\n", {"w.yaml:1:", "workload", "unknown field"});
  ExpectWorkloadsError(
      "workloads:\n  - name: a\n    replicas: 1\n    peak_memory_gib: 1\n"
      "workloads: []\n",
      {"w.yaml:5:", "workloads", "duplicate key"});
  ExpectWorkloadsError("workloads:\n  - just-a-name\n", {"w.yaml:2:", "workloads[0]", "mapping"});

  const std::string start = "workloads:\n  - name: a\n";
  // Identity.
  ExpectWorkloadsError("workloads:\n  - replicas: 1\n    peak_memory_gib: 1\n",
                       {"w.yaml:2:", "workloads[0].name", "required"});
  ExpectWorkloadsError("workloads:\n  - name: my model\n    replicas: 1\n    peak_memory_gib: 1\n",
                       {"w.yaml:2:", "workloads[0].name", "not a valid name"});
  ExpectWorkloadsError(
      start + "    replicas: 1\n    peak_memory_gib: 1\n" +
          "  - name: a\n    replicas: 2\n    peak_memory_gib: 1\n",
      {"w.yaml:5:", "workloads[1].name", "duplicate workload name 'a'", "first at line 2"});
  ExpectWorkloadsError(start + "    kind: training\n    replicas: 1\n    peak_memory_gib: 1\n",
                       {"w.yaml:3:", "workloads[0].kind", "training", "fine-tune"});
  ExpectWorkloadsError(start + "    replica: 1\n    peak_memory_gib: 1\n",
                       {"w.yaml:3:", "workloads[0].replica", "unknown field"});
  ExpectWorkloadsError(start + "    replicas: 1\n    replicas: 2\n    peak_memory_gib: 1\n",
                       {"w.yaml:4:", "workloads[0].replicas", "duplicate key"});
  ExpectWorkloadsError(start + "    tenant: [a, b]\n    replicas: 1\n    peak_memory_gib: 1\n",
                       {"w.yaml:3:", "workloads[0].tenant", "text"});

  // Sizing by replicas or by throughput.
  ExpectWorkloadsError(start + "    replicas: 2\n    throughput_rps: 10\n    peak_memory_gib: 1\n",
                       {"w.yaml:4:", "workloads[0].throughput_rps", "contradictory"});
  ExpectWorkloadsError(start + "    peak_memory_gib: 1\n",
                       {"w.yaml:2:", "workloads[0]", "replicas or throughput_rps is required"});
  ExpectWorkloadsError(start + "    replicas: 2\n", {"w.yaml:2:", "workloads[0].peak_memory_gib",
                                                     "replicas workloads need peak_memory_gib"});
  ExpectWorkloadsError(start + "    replicas: 0\n    peak_memory_gib: 1\n",
                       {"w.yaml:3:", "workloads[0].replicas", "outside [1, 100000]"});
  ExpectWorkloadsError(start + "    replicas: 100001\n    peak_memory_gib: 1\n",
                       {"w.yaml:3:", "workloads[0].replicas", "outside"});
  ExpectWorkloadsError(start + "    replicas: three\n    peak_memory_gib: 1\n",
                       {"w.yaml:3:", "workloads[0].replicas", "expected an integer, got 'three'"});
  ExpectWorkloadsError(start + "    replicas: 2.5\n    peak_memory_gib: 1\n",
                       {"w.yaml:3:", "workloads[0].replicas", "integer"});
  ExpectWorkloadsError(start + "    throughput_rps: 0\n",
                       {"w.yaml:3:", "workloads[0].throughput_rps", "outside (0, 1e+09]"});
  ExpectWorkloadsError(start + "    throughput_rps: -5\n",
                       {"w.yaml:3:", "workloads[0].throughput_rps", "outside"});
  ExpectWorkloadsError(start + "    throughput_rps: 2e9\n",
                       {"w.yaml:3:", "workloads[0].throughput_rps", "outside"});
  ExpectWorkloadsError(start + "    throughput_rps: .inf\n",
                       {"w.yaml:3:", "workloads[0].throughput_rps", "expected a number"});
  ExpectWorkloadsError(
      start + "    throughput_rps: lots\n",
      {"w.yaml:3:", "workloads[0].throughput_rps", "expected a number, got 'lots'"});
  ExpectWorkloadsError(start + "    throughput_rps: 10\n",
                       {"w.yaml:2:", "workloads[0].perf", "at least one perf table"});
  ExpectWorkloadsError(start + "    throughput_rps: 10\n    perf: []\n",
                       {"w.yaml:", "workloads[0].perf", "at least one perf table"});
  ExpectWorkloadsError(start + "    replicas: 1\n    peak_memory_gib: 1\n    latency_p99_ms: 50\n",
                       {"w.yaml:5:", "workloads[0].latency_p99_ms", "needs throughput_rps"});
  ExpectWorkloadsError(start + "    replicas: 1\n    peak_memory_gib: 0\n",
                       {"w.yaml:4:", "workloads[0].peak_memory_gib", "outside (0, 10000]"});
  ExpectWorkloadsError(start + "    replicas: 1\n    peak_memory_gib: 20000\n",
                       {"w.yaml:4:", "workloads[0].peak_memory_gib", "outside"});
  ExpectWorkloadsError(start + "    replicas: 2\n    peak_memory_gib: 1\n    min_instances: 3\n",
                       {"w.yaml:5:", "workloads[0].min_instances", "exceeds replicas (2)"});
  ExpectWorkloadsError(start + "    replicas: 2\n    peak_memory_gib: 1\n    min_instances: 0\n",
                       {"w.yaml:5:", "workloads[0].min_instances", "outside"});

  // Flags.
  ExpectWorkloadsError(start + "    replicas: 1\n    peak_memory_gib: 1\n    spread: yes\n",
                       {"w.yaml:5:", "workloads[0].spread", "true or false"});
  ExpectWorkloadsError(start + "    replicas: 1\n    measured: true\n",
                       {"w.yaml:", "workloads[0]", "peak_memory_gib"});
  ExpectWorkloadsError(
      "workloads:\n  - name: a\n    throughput_rps: 10\n    measured: true\n"
      "    perf: [{gpu_model: A100-80GB, csv: " +
          kPerfCopies + "/bert.csv}]\n",
      {"w.yaml:4:", "workloads[0].measured", "needs peak_memory_gib"});

  // Media.
  ExpectWorkloadsError(start + "    replicas: 1\n    peak_memory_gib: 1\n    media: {nvdec: 1}\n",
                       {"w.yaml:5:", "workloads[0].media.nvdec", "unknown field", "decoders"});
  ExpectWorkloadsError(start +
                           "    replicas: 1\n    peak_memory_gib: 1\n    media:\n"
                           "      decoders: 65\n",
                       {"w.yaml:6:", "workloads[0].media.decoders", "outside [0, 64]"});
  ExpectWorkloadsError(start + "    replicas: 1\n    peak_memory_gib: 1\n    media: 2\n",
                       {"w.yaml:5:", "workloads[0].media", "mapping"});

  // Models.
  ExpectWorkloadsError(
      start + "    replicas: 1\n    peak_memory_gib: 1\n    gpu_models: [H100-80GB, h100]\n",
      {"w.yaml:5:", "workloads[0].gpu_models[1]", "H100-80GB is listed twice"});
  ExpectWorkloadsError(start + "    replicas: 1\n    peak_memory_gib: 1\n    gpu_models: H100\n",
                       {"w.yaml:5:", "workloads[0].gpu_models", "expected a list"});
}

TEST(InputsWorkloads, BadPerfEntries) {
  const std::string start = "workloads:\n  - name: a\n    throughput_rps: 10\n    perf:\n";
  auto expect = [](const std::string& yaml, std::initializer_list<std::string> parts) {
    SCOPED_TRACE(yaml);
    ExpectError(WorkloadsStatus(yaml, kExamples), absl::StatusCode::kInvalidArgument, parts);
  };
  expect(start + "      - {gpu_model: A100-80GB}\n",
         {"w.yaml:5:", "workloads[0].perf[0].csv", "required"});
  expect(start + "      - {csv: perf/bert.csv}\n",
         {"w.yaml:5:", "workloads[0].perf[0].gpu_model", "required"});
  expect(start + "      - {gpu_model: A100-80GB, csv: perf/bert.csv, model: x}\n",
         {"w.yaml:5:", "workloads[0].perf[0].model", "unknown field"});
  expect(start +
             "      - {gpu_model: A100-80GB, csv: perf/bert.csv}\n"
             "      - {gpu_model: a100-80gb-pcie, csv: perf/resnet50.csv}\n",
         {"w.yaml:6:", "workloads[0].perf[1].gpu_model", "second perf table for A100-80GB"});
  expect(start + "      - perf/bert.csv\n", {"w.yaml:5:", "workloads[0].perf[0]", "mapping"});
}

TEST(InputsWorkloads, BadPolicy) {
  const std::string end = "workloads: [{name: a, replicas: 1, peak_memory_gib: 1}]\n";
  ExpectWorkloadsError("policy:\n  memory_headroom: 11\n" + end,
                       {"w.yaml:2:", "policy.memory_headroom", "outside [0, 10]"});
  ExpectWorkloadsError("policy:\n  fine_tune_headroom: -0.1\n" + end,
                       {"w.yaml:2:", "policy.fine_tune_headroom", "outside"});
  ExpectWorkloadsError("policy:\n  fine_tune_min_compute_slices: 9\n" + end,
                       {"w.yaml:2:", "policy.fine_tune_min_compute_slices", "outside [1, 8]"});
  ExpectWorkloadsError("policy:\n  notebook_max_compute_slices: 0\n" + end,
                       {"w.yaml:2:", "policy.notebook_max_compute_slices", "outside"});
  ExpectWorkloadsError("policy:\n  latency_wait_factor: 0.5\n" + end,
                       {"w.yaml:2:", "policy.latency_wait_factor", "outside [1, 100]"});
  ExpectWorkloadsError("policy:\n  latency_margin: 1\n" + end,
                       {"w.yaml:2:", "policy.latency_margin", "below 1"});
  ExpectWorkloadsError("policy:\n  latency_margin: 1.5\n" + end,
                       {"w.yaml:2:", "policy.latency_margin", "outside"});
  ExpectWorkloadsError("policy:\n  allow_multi_process: maybe\n" + end,
                       {"w.yaml:2:", "policy.allow_multi_process", "true or false"});
  ExpectWorkloadsError("policy:\n  headroom: 0.2\n" + end,
                       {"w.yaml:2:", "policy.headroom", "unknown field", "memory_headroom"});
  ExpectWorkloadsError("policy: 3\n" + end, {"w.yaml:1:", "policy", "mapping"});
}

// ---------------------------------------------------------------------------------------------
// Fleet

TEST(InputsFleet, NoCostsMeansCountGpus) {
  absl::StatusOr<Fleet> fleet = ParseFleet(
      "nodes:\n"
      "  - name: a\n"
      "    gpus: [{model: H100-80GB, count: 2}, {model: L4, count: 1, mig: disabled}]\n"
      "  - name: b\n"
      "    gpus: [{model: A30, count: 4}]\n",
      "f.yaml", Catalog());
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  EXPECT_FALSE(fleet->costs_given);
  EXPECT_EQ(fleet->currency, "USD");
  EXPECT_DOUBLE_EQ(fleet->hours_per_month, 730);
  for (const Node& node : fleet->nodes) {
    for (const GpuGroup& group : node.gpus) EXPECT_EQ(group.cost_per_hour, 1.0);
  }
  EXPECT_EQ(fleet->nodes[0].origin, "f.yaml:2");
  EXPECT_EQ(fleet->nodes[0].gpus[1].model, "L4");
  EXPECT_FALSE(fleet->nodes[0].gpus[1].mig_allowed);
  EXPECT_EQ(fleet->nodes[1].gpus[0].model, "A30-24GB");
}

TEST(InputsFleet, ZeroCostIsACost) {
  absl::StatusOr<Fleet> fleet = ParseFleet(
      "currency: GBP\nhours_per_month: 744\nnodes:\n"
      "  - name: a\n"
      "    gpus: [{model: H100-80GB, count: 2, cost_per_gpu_hour: 0}]\n",
      "f.yaml", Catalog());
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  EXPECT_TRUE(fleet->costs_given);
  EXPECT_EQ(fleet->nodes[0].gpus[0].cost_per_hour, 0);
  EXPECT_EQ(fleet->currency, "GBP");
  EXPECT_DOUBLE_EQ(fleet->hours_per_month, 744);
}

TEST(InputsFleet, BadFilesNameTheLineAndField) {
  ExpectFleetError("", {"f.yaml", "empty"});
  ExpectFleetError("nodes: []\n", {"f.yaml:1:", "nodes", "at least one node"});
  ExpectFleetError("currency: USD\n", {"f.yaml:1:", "nodes", "required"});
  ExpectFleetError("region: eu\nnodes: []\n", {"f.yaml:1:", "region", "unknown field"});
  ExpectFleetError("hours_per_month: 800\nnodes: []\n",
                   {"f.yaml:1:", "hours_per_month", "outside [1, 744]"});
  ExpectFleetError("currency: ''\nnodes: []\n", {"f.yaml:1:", "currency", "empty"});

  const std::string start = "nodes:\n  - name: a\n";
  ExpectFleetError(start + "    gpus: []\n", {"f.yaml:3:", "nodes[0].gpus", "at least one"});
  ExpectFleetError(start, {"f.yaml:2:", "nodes[0].gpus", "required"});
  ExpectFleetError("nodes:\n  - gpus: [{model: L4, count: 1}]\n",
                   {"f.yaml:2:", "nodes[0].name", "required"});
  ExpectFleetError(start + "    gpus: [{model: L4, count: 1}]\n" +
                       "  - name: a\n    gpus: [{model: L4, count: 1}]\n",
                   {"f.yaml:4:", "nodes[1].name", "duplicate node name 'a'", "first at line 2"});
  ExpectFleetError(start + "    gpus: [{model: L4, count: 1}]\n    labels: {}\n",
                   {"f.yaml:4:", "nodes[0].labels", "unknown field"});
  ExpectFleetError(start + "    gpus: [{model: L4, count: 0}]\n",
                   {"f.yaml:3:", "nodes[0].gpus[0].count", "outside [1, 1024]"});
  ExpectFleetError(start + "    gpus: [{model: L4, count: 2000}]\n",
                   {"f.yaml:3:", "nodes[0].gpus[0].count", "outside"});
  ExpectFleetError(start + "    gpus: [{model: L4}]\n",
                   {"f.yaml:3:", "nodes[0].gpus[0].count", "required"});
  ExpectFleetError(start + "    gpus:\n      - model: L4\n        count: 1\n        mig: maybe\n",
                   {"f.yaml:6:", "nodes[0].gpus[0].mig", "allowed or disabled", "maybe"});
  ExpectFleetError(start +
                       "    gpus:\n      - model: L4\n        count: 1\n"
                       "        cost_per_gpu_hour: -1\n",
                   {"f.yaml:6:", "nodes[0].gpus[0].cost_per_gpu_hour", "outside [0, 10000]"});
  ExpectFleetError(start +
                       "    gpus:\n      - model: L4\n        count: 1\n"
                       "        cost_per_gpu_hour: cheap\n",
                   {"f.yaml:6:", "nodes[0].gpus[0].cost_per_gpu_hour", "expected a number"});
  ExpectFleetError(start + "    gpus:\n      - model: L4\n        count: 1\n        gpu_count: 2\n",
                   {"f.yaml:6:", "nodes[0].gpus[0].gpu_count", "unknown field"});

  ExpectError(ParseFleet(start + "    gpus:\n      - model: H100-80G\n        count: 1\n", "f.yaml",
                         Catalog())
                  .status(),
              absl::StatusCode::kNotFound,
              {"f.yaml:4:", "nodes[0].gpus[0].model", "H100-80G", "did you mean"});
}

TEST(InputsFleet, CostsForSomeGroupsOnly) {
  ExpectFleetError(
      "nodes:\n"
      "  - name: a\n"
      "    gpus:\n"
      "      - {model: H100-80GB, count: 8, cost_per_gpu_hour: 2.5}\n"
      "  - name: b\n"
      "    gpus:\n"
      "      - {model: A100-80GB, count: 2, cost_per_gpu_hour: 1.2}\n"
      "      - {model: A100-80GB, count: 2}\n",
      {"f.yaml:8:", "nodes[1].gpus[1].cost_per_gpu_hour",
       "cost_per_gpu_hour is given for some GPU groups", "not for node b gpus[1]"});
}

TEST(InputsFleet, ReadFleetFileMissing) {
  ExpectError(ReadFleetFile(kExamples + "/no-such-fleet.yaml", Catalog()).status(),
              absl::StatusCode::kNotFound, {"no-such-fleet.yaml"});
}

// ---------------------------------------------------------------------------------------------
// The YAML number reader added for these files.

TEST(InputsYamlDouble, ParsesAndChecksRanges) {
  const YAML::Node root = YAML::Load("a: 1.5\nb: 3\nc: 1e3\nd: .nan\ne: x\nf: ~\n");
  util::YamlMap map(root, "y.yaml", "top");
  EXPECT_EQ(map.Double("a", 0, 2), 1.5);
  EXPECT_EQ(map.Double("b", 0, 10), 3);
  EXPECT_EQ(map.Double("c", 0, 1e4), 1000);
  EXPECT_EQ(map.Double("f", 0, 1, 0.25), 0.25);
  EXPECT_EQ(map.Double("absent", 0, 1, 0.5), 0.5);
  try {
    map.Double("d", 0, 1);
    ADD_FAILURE() << "NaN accepted";
  } catch (const util::ParseError& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("y.yaml:4:"), HasSubstr("top.d")));
  }
  try {
    map.Double("a", 0, 1);
    ADD_FAILURE() << "out of range accepted";
  } catch (const util::ParseError& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("y.yaml:1:"), HasSubstr("outside [0, 1]")));
  }
  EXPECT_THROW(map.Double("e", 0, 1), util::ParseError);
  EXPECT_THROW(map.Double("missing", 0, 1), util::ParseError);
  EXPECT_EQ(util::YamlDouble(root["c"], "y.yaml", "c", 0, 1e9), 1000);
}

}  // namespace
}  // namespace gpuslice::plan
