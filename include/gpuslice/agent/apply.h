// gpuslice/agent/apply.h
//
// `apply`, `assert` and `export` of NVIDIA mig-parted config files on one machine, through a
// device::Backend. The file format is mig-parted's, unchanged (gpuslice/spec/mig_parted.h); so are
// the hooks (apply-start, pre-apply-mode, pre-apply-config, apply-exit) and their environment
// variables (MIG_PARTED_CONFIG_FILE, MIG_PARTED_SELECTED_CONFIG, MIG_PARTED_SKIP_RESET,
// MIG_PARTED_MODE_CHANGE_ONLY). Unlike mig-parted, instances are created at exact placements,
// matching instances are kept, busy instances are never destroyed without `force`, and every apply
// is journaled so that an interrupted one is detected and converged by the next run.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/agent/reconciler.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/spec/hooks.h"
#include "gpuslice/spec/mig_parted.h"

namespace gpuslice::agent {

struct ApplyRequest {
  const spec::MigConfigFile* file = nullptr;
  std::string file_path;    // for messages and hook variables
  std::string config_name;  // may be empty when the file has one config
  bool dry_run = false;     // print the exact steps, change nothing
  bool force = false;       // terminate processes on instances that must go
  bool skip_reset = false;  // never reset a GPU; a pending mode stays pending
  bool mode_only = false;   // only change MIG modes
  const spec::HooksFile* hooks = nullptr;
  std::string journal_path;  // empty: no journal
};

struct ApplyResult {
  bool changed = false;
  int gpus_changed = 0;
  int kept = 0;
  int created = 0;
  int destroyed = 0;
  std::vector<GpuPlan> plans;  // what was (or, with dry_run, would be) done
};

// Output lines (progress, summary) go to `log`. Fails without changing anything when a target is
// impossible or an instance to destroy is busy (without force); fails part-way when a device call
// fails (the journal records where; the next apply converges).
absl::StatusOr<ApplyResult> ApplyConfig(device::Backend& backend, const hw::Catalog& catalog,
                                        const ApplyRequest& request,
                                        const std::function<void(const std::string&)>& log);

// The differences between the machine and the selected config (empty: applied). With mode_only,
// only MIG modes are compared.
absl::StatusOr<std::vector<std::string>> AssertConfig(device::Backend& backend,
                                                      const hw::Catalog& catalog,
                                                      const spec::MigConfigFile& file,
                                                      const std::string& config_name,
                                                      bool mode_only);

// The machine's current layout as a mig-parted config named `label` (GPUs with identical layouts
// share an entry). With `placements`, adds gpuslice-placements so a re-apply keeps exact starts.
absl::StatusOr<spec::MigConfigFile> ExportConfig(device::Backend& backend,
                                                 const hw::Catalog& catalog,
                                                 const std::string& label, bool placements);

}  // namespace gpuslice::agent
