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
// See examples/plan/ for complete files and examples/plan/README.md for every field (units,
// defaults, ranges). Exactly one of replicas and throughput_rps is required; replicas needs
// peak_memory_gib, throughput_rps needs at least one perf table. Either every GPU group gives
// cost_per_gpu_hour or none does (then Fleet::costs_given is false and every GPU costs 1).
//
// Perf CSVs use ParvaGPU's columns (header required, matched ignoring case and spaces):
//   Mig instance,Batch size,Workload Number,Throughput,Latency
// Mig instance: compute slices (1-8; 7 = A100/H100's full-size 7g instance), a GI profile name
// ("1g.20gb", sets PerfPoint::profile) or full/0 (the whole GPU, MIG disabled). Throughput is in
// req/s per process (PerfPoint::throughput_rps is the instance total, value x processes); latency
// is in seconds (stored in ms); a row with throughput or latency 0 is infeasible and skipped.
// Relative csv paths are resolved against the YAML file's directory.
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
// errors naming the line and column ("origin:line: column Throughput: ..."), and so is a table
// without any feasible row. Blank lines, '#' comment lines, CRLF and a UTF-8 BOM are accepted.
// ReadPerfCsv: NotFound when the file cannot be read.
absl::StatusOr<PerfTable> ParsePerfCsv(std::string_view text, std::string_view origin,
                                       const std::string& gpu_model);
absl::StatusOr<PerfTable> ReadPerfCsv(const std::string& path, const std::string& gpu_model);

}  // namespace gpuslice::plan
