#include "gpuslice/agent/layout_runner.h"

#include <algorithm>
#include <vector>

#include "gpuslice/agent/apply.h"

namespace gpuslice::agent {

LayoutRun CarryOutLayout(device::Backend& backend, const hw::Catalog& catalog,
                         const alloc::NodeLayout& layout) {
  LayoutRun run;
  for (const alloc::GpuLayout& gpu : layout.gpus) {
    if (gpu.mig) run.fixed.insert(gpu.index);
  }
  const spec::MigConfigFile file = alloc::LayoutAsMigParted(layout);
  agent::ApplyRequest request;
  request.file = &file;
  request.file_path = "layout " + std::to_string(layout.generation);
  request.config_name = layout.host;
  absl::StatusOr<agent::ApplyResult> applied =
      agent::ApplyConfig(backend, catalog, request, [](const std::string&) {});
  if (!applied.ok()) {
    run.message = std::string(applied.status().message());
    return run;
  }
  run.changed = applied->changed;
  run.created = applied->created;
  run.destroyed = applied->destroyed;
  run.kept = applied->kept;
  run.modes_changed = std::any_of(applied->plans.begin(), applied->plans.end(),
                                  [](const agent::GpuPlan& plan) { return plan.mode_change; });
  return run;
}

bool LayoutReportDue(const alloc::NodeLayout& layout, const LayoutRun& run) {
  return layout.reported_generation != layout.generation || layout.agent_message != run.message;
}

}  // namespace gpuslice::agent
