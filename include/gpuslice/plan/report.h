// gpuslice/plan/report.h
//
// What a plan means, for the people who decide whether to deploy it: GPUs and cost against two
// baselines (one workload per whole GPU, and mig-parted's uniform `all-balanced` layout),
// utilisation, capacity left stranded on the used GPUs, redundancy (what the loss of one GPU or one
// node costs), and a "does MIG pay off here" checklist answered from the data. Plus the files a
// plan turns into: a mig-parted config per node (for `gpuslice apply`) and the assignment map of
// workloads to instances.
//
// BuildReport computes everything into a plain value (Report) that no longer refers to the plan,
// the workloads or the fleet; RenderText and ToJson only format it (gpuslice/util/yaml_writer.h
// prints JSON as YAML). Everything here is pure and deterministic (no I/O, no clock), and safe to
// call from many threads.
//
// Conventions: memory in GiB, throughput in req/s, money in the fleet's currency. When the fleet
// gives no cost (Fleet::costs_given false) every GPU costs 1 per hour, so "cost" is a count of GPUs
// and "per month" a count of GPU-hours; the text says so and Report::costs_given carries it.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpuslice/plan/model.h"
#include "gpuslice/plan/plan.h"
#include "gpuslice/spec/mig_parted.h"
#include "nlohmann/json.hpp"

namespace gpuslice::plan {

// One instance of a planned GPU.
struct ReportInstance {
  std::string profile;  // "3g.40gb", or "whole GPU"
  int start = 0;        // placement start (0 for a whole GPU)
  int gi_id = -1;       // the GPU-instance id the driver assigns at that start; -1 for a whole GPU
  int compute_slices = 0;
  double memory_gib = 0;  // of the instance
  std::string workload;   // name
  std::string tenant;
  double capacity = 0;  // replicas (1) or req/s this instance covers
  int batch = 0;        // operating point of throughput workloads; 0 otherwise
  bool kept = false;    // re-planning: a running instance that stays as it is
};

// One GPU of the fleet as planned.
struct ReportGpu {
  std::string node;
  int index = 0;      // GPU index within the node
  std::string model;  // catalog id
  double cost_per_hour = 0;
  bool mig_allowed = true;
  bool used = false;
  bool mig_enabled = false;
  std::vector<ReportInstance> instances;  // by start
  std::string layout;                     // "3g.40gb@0,2g.20gb@4", "whole GPU", "" when unused
  // Utilisation of a used GPU. A whole GPU counts as all of its compute slices (1 on models
  // without MIG); memory "used" is what the workloads need (peak with headroom, or the instance
  // memory for throughput workloads).
  int compute_slices_used = 0;
  int compute_slices_total = 0;
  double memory_needed_gib = 0;
  double memory_total_gib = 0;
  // Stranded capacity of a used MIG GPU: free placement units, how many more instances of each
  // standard profile could still be created (only profiles with a positive count), and the free
  // units that no profile can use any more.
  std::vector<int> free_units;
  std::vector<std::pair<std::string, int>> free_profiles;
  std::vector<int> unusable_units;
};

// A workload, how it was sized and how it was placed.
struct ReportWorkload {
  std::string name;
  std::string tenant;
  std::string kind;  // "inference", "notebook", "batch", "fine-tune"
  bool by_throughput = false;
  double demand = 0;  // replicas or req/s
  int min_instances = 1;
  std::vector<std::string> explanation;  // WorkloadSizing::explanation, one line per model
  bool placed = false;
  std::string unplaced_reason;  // when !placed
  // What it got: "3 x 1g.10gb on H100-80GB", one entry per distinct (model, instance) kind.
  std::vector<std::string> placed_as;
  int instances = 0;
  double capacity = 0;  // total capacity placed (>= demand when placed)
  // Redundancy.
  int gpus = 0;                          // distinct GPUs its instances are on
  int nodes = 0;                         // distinct nodes
  bool single_point_of_failure = false;  // placed, and all its instances on one GPU
};

// A plan to compare with: how many GPUs and how much money the same (placed) workloads need.
struct Baseline {
  std::string name;         // "one-workload-per-GPU", "all-balanced"
  std::string description;  // one line: how it is counted
  int gpus = 0;
  std::vector<std::pair<std::string, int>> gpus_by_model;  // catalog id -> GPUs, by id
  double cost_per_hour = 0;
  double cost_per_month = 0;
  int gpus_saved = 0;         // baseline GPUs - plan GPUs (negative: the plan uses more)
  double saved_per_hour = 0;  // baseline cost - plan cost
  double saved_per_month = 0;
  bool exceeds_fleet = false;      // needs more GPUs of some model than the fleet has
  std::vector<std::string> notes;  // workloads counted differently, and why
};

// What losing one GPU (or one node) does to one workload.
struct LossImpact {
  std::string workload;
  double capacity_lost = 0;
  double capacity_left = 0;
  double demand = 0;
  bool below_demand = false;
};

struct Loss {
  std::string node;
  int gpu = -1;                     // GPU index in the node; -1 = the whole node
  std::vector<LossImpact> impacts;  // workloads that lose capacity, in input order
  int workloads_below_demand = 0;
};

// One question of the "does MIG pay off here" checklist.
struct ChecklistItem {
  std::string key;       // stable id: "small_workloads", "gpus_saved", ...
  std::string question;  // "Workloads that need less than half a GPU"
  std::string answer;    // from the data: "4 of 5 (embeddings, ...)"
  // Whether the answer argues for MIG (true), against it (false), or neither (nullopt).
  std::optional<bool> favours_mig;
};

struct Report {
  // Fleet and plan totals.
  std::string currency;
  double hours_per_month = 730;
  bool costs_given = true;
  int nodes = 0;
  int gpus_in_fleet = 0;
  int gpus_used = 0;
  int mig_gpus = 0;          // used GPUs with MIG enabled
  int whole_gpus = 0;        // used GPUs kept whole
  double cost_per_hour = 0;  // of the used GPUs
  double cost_per_month = 0;

  std::vector<ReportWorkload> workloads;  // input order
  std::vector<ReportGpu> gpus;            // every GPU of the fleet, node by node
  std::vector<Baseline> baselines;        // one-workload-per-GPU, then all-balanced

  // Utilisation of the used GPUs (fractions are 0 when nothing is used).
  int compute_slices_used = 0;
  int compute_slices_total = 0;
  double compute_utilisation = 0;
  double memory_needed_gib = 0;
  double memory_total_gib = 0;
  double memory_utilisation = 0;

  // Stranded capacity: used MIG GPUs with room for more instances, and those with free units no
  // profile can use.
  int gpus_with_free_capacity = 0;
  int gpus_with_unusable_units = 0;

  // Redundancy: per used GPU and per node with a used GPU, what its loss costs; the worst of each
  // (most workloads below demand, then most capacity lost relative to demand).
  std::vector<Loss> gpu_losses;
  std::vector<Loss> node_losses;
  std::optional<Loss> worst_gpu_loss;
  std::optional<Loss> worst_node_loss;
  std::vector<std::string> single_points_of_failure;  // workload names

  std::vector<ChecklistItem> checklist;
  std::string verdict;  // one line

  std::vector<std::pair<std::string, std::string>> unplaced;  // workload name, reason

  // How the plan was found.
  std::string solver;
  double solve_seconds = 0;
  bool proven_optimal = false;
  double lower_bound_cost = 0;
  int lower_bound_gpus = 0;
  double gap = 0;                  // (cost - lower bound) / cost; 0 when proven or nothing is used
  std::vector<std::string> notes;  // PlanResult::notes, then the report's own
};

// Builds the report. `plan` must come from Plan() (or be built the same way) for `workloads` and
// `fleet`: PlannedGpu::node/index refer to `fleet`, PlannedInstance::workload to `workloads`, and
// PlannedGpu::model is set. Baselines count only the workloads the plan placed.
Report BuildReport(const PlanResult& plan, const WorkloadSet& workloads, const Fleet& fleet);

struct TextOptions {
  bool explanations = true;  // the per-model sizing explanation lines
  bool unused_gpus = false;  // list unused GPUs one by one in the Plan section (else one line)
};

// The report as text for a terminal: sections Sizing, Plan, Cost, Utilisation, Stranded capacity,
// Redundancy, Does MIG pay off, Unplaced (when any) and Notes.
std::string RenderText(const Report& report, const TextOptions& options = {});

// The report as JSON. Field names are snake_case and stable; money is rounded to cents and
// fractions to 4 decimals.
nlohmann::json ToJson(const Report& report);

// The mig-parted config name of a node's entries: "gpuslice-<node name>".
std::string MigPartedConfigName(const Node& node);

// The plan as a mig-parted config: one named config per node (MigPartedConfigName), whose entries
// group the node's GPUs with identical layouts (`devices: [indices]`, filtered by every PCI id of
// the model when the catalog knows one). MIG GPUs get `mig-enabled: true` with their mig-devices
// and, with `with_placements`, gpuslice-placements "<profile>@<start>" (exactly the plan's starts;
// without them mig-parted chooses starts itself, so only the multiset is kept). Whole and unused
// GPUs get `mig-enabled: false`. Every entry resolves (spec::ResolveEntry) to the plan's GIs.
spec::MigConfigFile ToMigPartedConfig(const PlanResult& plan, const Fleet& fleet,
                                      bool with_placements);

// Which instance serves which workload, as JSON:
//   {"workloads": [{"name", "tenant", "demand", "by_throughput", "instances": [{"node", "gpu",
//     "model", "profile", "start", "gi_id", "capacity", "batch"}]}],
//    "gpus": [{"node", "gpu", "model", "mig_enabled", "used", "instances": [{"profile", "start",
//     "gi_id", "workload", "capacity", "batch"}]}]}
// gi_id is the GPU-instance id the driver assigns at that start (null for a whole GPU).
nlohmann::json AssignmentJson(const PlanResult& plan, const WorkloadSet& workloads,
                              const Fleet& fleet);

}  // namespace gpuslice::plan
