// gpuslice/plan/replan.h
//
// Re-planning: from what runs now (layouts and which workload uses each instance) to a plan for a
// new demand that first stops as few workloads as possible, then costs as little as possible, and
// the ordered steps that get there.
//
// The current state is the assignment map `gpuslice plan -o DIR` writes (assignment.json; JSON
// or YAML): its "gpus" list, each {node, gpu, model, mig_enabled, instances: [{profile, start,
// workload, capacity, batch}]} (workload null or absent = an idle instance).
//
// Method (docs/PLANNING.md):
//   1. every running instance whose workload is still wanted, and whose instance still suits the
//      workload's new sizing, is kept where it is (surplus instances of a shrunk workload are
//      released, not counted as disruption);
//   2. the rest of the demand is planned around the kept instances (exact or fast, as `plan`),
//      where adding to a GPU that is already in use costs nothing;
//   3. while some workload does not fit, the GPU whose re-layout stops the fewest workloads (then
//      frees the most room) is released and step 2 repeats. This choice is greedy: the number of
//      disrupted workloads is minimal in the common cases but not proven minimal.
// Pure apart from ReadCurrentStateFile; deterministic.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/plan/model.h"
#include "gpuslice/plan/plan.h"

namespace gpuslice::plan {

struct CurrentInstance {
  std::string profile;  // GI profile name, or "whole GPU"
  int start = 0;
  std::string workload;  // empty = idle
  double capacity = 0;   // 0 = unknown (recomputed from the workload's sizing)
  int batch = 0;
};

struct CurrentGpu {
  std::string node;
  int gpu = 0;  // index within the node
  std::string model;
  bool mig_enabled = false;
  std::vector<CurrentInstance> instances;
};

struct CurrentState {
  std::vector<CurrentGpu> gpus;
};

// Parses an assignment map. Errors name the origin and the field ("assignment.json: gpus[2].
// instances[0].start: expected an integer").
absl::StatusOr<CurrentState> ParseCurrentState(std::string_view text, std::string_view origin);
absl::StatusOr<CurrentState> ReadCurrentStateFile(const std::string& path);

enum class StepKind {
  kDrain,       // stop a workload's instance (it is disrupted, or released)
  kDestroy,     // destroy a GPU instance (and its compute instances)
  kDisableMig,  // turn MIG off on a GPU (all its instances are gone)
  kEnableMig,   // turn MIG on
  kCreate,      // create a GPU instance at a start
  kStart,       // start (or restart) a workload on an instance
};
std::string_view ToString(StepKind kind);

struct ReplanStep {
  StepKind kind = StepKind::kCreate;
  std::string node;
  int gpu = 0;
  std::string profile;  // for instance steps
  int start = 0;
  std::string workload;  // for drain/start
  std::string reason;    // why this step is needed
};

struct ReplanResult {
  PlanResult plan;                // the target; instances with kept = true do not move
  std::vector<ReplanStep> steps;  // in order: drains, destroys, MIG off, MIG on, creates, starts
  // Workloads still wanted that must stop at least one running instance, with the reason.
  std::vector<std::pair<std::string, std::string>> disrupted;
  int kept_instances = 0;
  int stopped_instances = 0;  // incl. released and removed workloads
  int created_instances = 0;
  int gpus_released = 0;  // GPUs re-laid to make room (step 3)
};

// Re-plans `workloads` on `fleet` from `current`. Errors: a current GPU that the fleet does not
// have or whose model differs, an unknown profile or workload field (InvalidArgument).
absl::StatusOr<ReplanResult> Replan(const CurrentState& current, const WorkloadSet& workloads,
                                    const Fleet& fleet, const hw::Catalog& catalog,
                                    const PlanOptions& options = {});

}  // namespace gpuslice::plan
