// Carrying out a machine's fixed MIG layout (gpuslice/alloc/layout.h) on its GPUs, shared by
// `gpuslice agent` (for its machine) and `gpuslice serve` (for its own): the layout becomes a
// mig-parted config with exact placements and goes through the reconciler (agent::ApplyConfig),
// so matching instances stay and busy ones are never destroyed.
#pragma once

#include <set>
#include <string>

#include "gpuslice/alloc/layout.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::agent {

struct LayoutRun {
  std::string message;         // why it could not be carried out; empty when the GPUs match it now
  bool changed = false;        // instances or modes were changed
  bool modes_changed = false;  // MIG modes changed: the machine must be reported again
  int created = 0;
  int destroyed = 0;
  int kept = 0;
  std::set<int> fixed;  // the GPUs (NVML indexes) with MIG on in the layout
};

LayoutRun CarryOutLayout(device::Backend& backend, const hw::Catalog& catalog,
                         const alloc::NodeLayout& layout);

// Whether the service should hear of `run` (its last report on `layout` said something else).
bool LayoutReportDue(const alloc::NodeLayout& layout, const LayoutRun& run);

}  // namespace gpuslice::agent
