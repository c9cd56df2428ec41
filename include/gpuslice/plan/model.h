// gpuslice/plan/model.h
//
// The planner's inputs as plain values: workloads (what must run), the fleet (what GPUs exist and
// what they cost) and the sizing policy (how much room to leave). They are read from YAML by
// gpuslice/plan/inputs.h and are immutable afterwards. Nothing here does I/O.
//
// Units: memory in GiB (2^30 bytes), throughput in requests per second, latency in milliseconds,
// cost in the fleet's currency per GPU-hour.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::plan {

enum class WorkloadKind { kInference, kNotebook, kBatch, kFineTune };
std::string_view ToString(WorkloadKind kind);  // "inference", "notebook", "batch", "fine-tune"
std::optional<WorkloadKind> ParseWorkloadKind(std::string_view text);

// One measured operating point of a workload on one instance size.
struct PerfPoint {
  // The "g" of the instance (1, 2, 3, 4, 7 on A100/H100); 0 = the whole GPU with MIG disabled.
  int compute_slices = 0;
  // An exact GI profile name ("1g.20gb") when the measurement was not on the model's base profile
  // of that size; empty = the base profile with `compute_slices` (geometry::IsBaseProfile).
  std::string profile;
  int batch = 1;
  int processes = 1;          // processes sharing the instance (MPS); throughput is their total
  double throughput_rps = 0;  // total requests/s of the instance; 0 = infeasible (e.g. OOM)
  double latency_ms = 0;      // time to serve one batch
};

// Measurements of one workload on one GPU model.
struct PerfTable {
  std::string gpu_model;  // catalog id of the GPU the table was measured on ("A100-80GB")
  std::vector<PerfPoint> points;
  std::string origin;  // the file it came from, for messages
};

// Media engines an instance must have (NVDEC, NVJPG, OFA, NVENC counts of the GI profile).
struct MediaNeed {
  int decoders = 0;
  int jpeg = 0;
  int ofa = 0;
  int encoders = 0;
  bool Any() const { return decoders > 0 || jpeg > 0 || ofa > 0 || encoders > 0; }
};

// One workload. Exactly one of `replicas` and `throughput_rps` is positive:
//   * replicas: that many instances, each holding `peak_memory_gib` (with headroom);
//   * throughput: instances whose measured throughputs (at a batch that meets the latency SLO)
//     add up to the target; instances of different sizes may be mixed.
struct Workload {
  std::string name;  // unique
  WorkloadKind kind = WorkloadKind::kInference;
  std::string tenant;
  int replicas = 0;
  double throughput_rps = 0;
  double latency_p99_ms = 0;   // 0 = no latency SLO
  double peak_memory_gib = 0;  // 0 = unknown (a perf table is then required)
  bool measured = false;       // peak memory was measured (relaxes the fine-tune minimum)
  std::vector<PerfTable> perf;
  MediaNeed media;
  std::vector<std::string> gpu_models;  // allowed catalog ids (resolved); empty = any
  int min_instances = 1;                // at least this many instances (redundancy)
  bool spread = true;                   // spread instances over GPUs and nodes
  std::string origin;                   // file and line, for messages ("workloads.yaml:12")
};

// GPUs of one model in one node.
struct GpuGroup {
  std::string model;  // catalog id (resolved)
  int count = 0;
  double cost_per_hour = 0;  // per GPU
  bool mig_allowed = true;   // false: the GPUs must stay whole (MIG disabled)
  std::string origin;
};

struct Node {
  std::string name;            // unique
  std::vector<GpuGroup> gpus;  // GPU indices within the node follow this order
  std::string origin;
};

struct Fleet {
  std::vector<Node> nodes;
  std::string currency = "USD";
  double hours_per_month = 730;
  bool costs_given = true;  // false: no cost was given anywhere; every GPU costs 1 (GPU count)
};

// How workloads are sized. Every field can be set under `policy:` in the workloads file.
struct SizingPolicy {
  double memory_headroom = 0.15;         // peak memory x (1 + headroom) must fit the instance
  double fine_tune_headroom = 0.30;      // fine-tuning has memory peaks (optimizer, checkpoints)
  int fine_tune_min_compute_slices = 2;  // unless the peak was measured
  int notebook_max_compute_slices = 2;   // notebooks go to small classes
  // A request may wait for its batch to fill and then be served: worst case is
  // latency_wait_factor x the batch latency, which must stay under (1 - latency_margin) x SLO.
  double latency_wait_factor = 2.0;
  double latency_margin = 0.10;
  bool allow_multi_process = false;  // use perf rows with processes > 1 (needs MPS in the slice)
};

struct WorkloadSet {
  std::vector<Workload> workloads;
  SizingPolicy policy;
};

}  // namespace gpuslice::plan
