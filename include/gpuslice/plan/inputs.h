// gpuslice/plan/inputs.h
//
// Reading the planner's input files, strictly (unknown keys, wrong types, negative or absurd
// numbers and contradictions are errors naming the file, the line and the field):
//
//   workloads.yaml                          fleet.yaml
//   ----------------------------------      ----------------------------------
//   policy:            # optional            currency: USD        # optional
//     memory_headroom: 0.15                  hours_per_month: 730 # optional
//   workloads:                               nodes:
//     - name: embeddings                       - name: node-a
//       kind: inference                          gpus:
//       tenant: search                             - model: H100-80GB
//       replicas: 3                                  count: 8
//       peak_memory_gib: 14.2                        cost_per_gpu_hour: 2.49
//       gpu_models: [H100-80GB, A100-80GB]           mig: allowed   # or disabled (whole)
//     - name: resnet50
//       throughput_rps: 829
//       latency_p99_ms: 204.5
//       perf: [{gpu_model: A100-80GB, csv: resnet50.csv}]
//
// See examples/plan/ for complete files. Perf CSVs use ParvaGPU's columns:
//   Mig instance,Batch size,Workload Number,Throughput,Latency
// (instance size in compute slices, 7 = full; throughput in req/s per process; latency in
// seconds; 0 = infeasible). Relative csv paths are resolved against the YAML file's directory.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/plan/model.h"

namespace gpuslice::plan {

// Parses a workloads file. GPU model names are resolved through `catalog` (aliases, NVML names) to
// catalog ids. `base_dir` resolves relative CSV paths. Errors are InvalidArgument (NotFound for a
// missing CSV or unknown model) with "origin:line: field: message".
absl::StatusOr<WorkloadSet> ParseWorkloads(std::string_view text, std::string_view origin,
                                           const std::string& base_dir, const hw::Catalog& catalog);
absl::StatusOr<WorkloadSet> ReadWorkloadsFile(const std::string& path, const hw::Catalog& catalog);

// Parses a fleet file.
absl::StatusOr<Fleet> ParseFleet(std::string_view text, std::string_view origin,
                                 const hw::Catalog& catalog);
absl::StatusOr<Fleet> ReadFleetFile(const std::string& path, const hw::Catalog& catalog);

// Parses a ParvaGPU-format performance CSV measured on `gpu_model` (a catalog id). Header required;
// rows with a non-numeric field, a size that is not a positive integer, or negative values are
// errors naming the line and column.
absl::StatusOr<PerfTable> ParsePerfCsv(std::string_view text, std::string_view origin,
                                       const std::string& gpu_model);
absl::StatusOr<PerfTable> ReadPerfCsv(const std::string& path, const std::string& gpu_model);

}  // namespace gpuslice::plan
