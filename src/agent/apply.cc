#include "gpuslice/agent/apply.h"

#include <algorithm>
#include <cstdio>

#include "gpuslice/agent/hook_runner.h"
#include "gpuslice/agent/journal.h"
#include "gpuslice/geometry/compute_instances.h"

namespace gpuslice::agent {
namespace {

const hw::GpuModel* ModelOf(const hw::Catalog& catalog, const device::GpuInfo& info) {
  if (info.model != nullptr) return info.model;
  char pci[16];
  std::snprintf(pci, sizeof pci, "0x%04X", static_cast<unsigned>(info.pci_device_id));
  if (const hw::GpuModel* model = catalog.Find(pci)) return model;
  return catalog.Find(info.name);
}

std::string GpuLabel(const device::GpuInfo& info, const hw::GpuModel* model) {
  return "GPU " + std::to_string(info.index) + " (" + (model != nullptr ? model->id : info.name) +
         ")";
}

struct Target {
  device::GpuInfo info;
  const hw::GpuModel* model = nullptr;
  GpuTarget target;
};

// The targets of the selected config for this machine's GPUs (GPUs no entry selects are left
// alone).
absl::StatusOr<std::vector<Target>> TargetsFor(device::Backend& backend, const hw::Catalog& catalog,
                                               const spec::MigConfigFile& file,
                                               const std::string& config_name,
                                               const std::string& file_path,
                                               std::vector<std::string>* notes) {
  absl::StatusOr<const std::vector<spec::ConfigEntry>*> entries =
      spec::SelectConfig(file, config_name);
  if (!entries.ok()) return entries.status();
  absl::StatusOr<std::vector<device::GpuInfo>> gpus = backend.ListGpus();
  if (!gpus.ok()) return gpus.status();
  std::vector<Target> targets;
  for (const device::GpuInfo& info : *gpus) {
    absl::StatusOr<const spec::ConfigEntry*> entry =
        spec::EntryForGpu(**entries, info.index, info.pci_device_id);
    if (!entry.ok()) return entry.status();
    const hw::GpuModel* model = ModelOf(catalog, info);
    if (*entry == nullptr) {
      if (notes)
        notes->push_back(GpuLabel(info, model) + ": no entry of the config selects it; left alone");
      continue;
    }
    const spec::ConfigEntry& selected = **entry;
    if (selected.mig_enabled && !info.mig_capable && selected.devices.all) {
      if (notes)
        notes->push_back(GpuLabel(info, model) + ": not MIG-capable; skipped (devices: all)");
      continue;
    }
    Target target;
    target.info = info;
    target.model = model;
    target.target.gpu = info.index;
    target.target.mig_enabled = selected.mig_enabled;
    target.target.source = (file_path.empty() ? std::string("config") : file_path) + ":" +
                           std::to_string(selected.line);
    if (selected.mig_enabled && info.mig_capable) {
      if (model == nullptr) {
        return absl::NotFoundError(GpuLabel(info, model) +
                                   " is not in the GPU catalog; add it with --catalog FILE");
      }
      absl::StatusOr<std::vector<spec::DesiredGi>> gis = spec::ResolveEntry(selected, *model);
      if (!gis.ok()) return gis.status();
      target.target.gis = *std::move(gis);
    }
    targets.push_back(std::move(target));
  }
  return targets;
}

std::string BusyReport(const std::vector<GpuPlan>& plans) {
  std::string text;
  for (const GpuPlan& plan : plans) {
    for (const BusyInstance& busy : plan.busy) {
      text += "\n  GPU " + std::to_string(plan.gpu) + " " + busy.instance + ":";
      for (const device::ProcessInfo& p : busy.processes) {
        char memory[32];
        std::snprintf(memory, sizeof memory, "%.2f GiB",
                      static_cast<double>(p.used_memory_mib) / 1024.0);
        text += "\n    pid " + std::to_string(p.pid) + (p.name.empty() ? "" : " " + p.name) + ", " +
                memory;
        if (p.gi >= 0)
          text += ", GPU instance " + std::to_string(p.gi) + " compute instance " +
                  std::to_string(p.ci);
      }
    }
  }
  return text;
}

bool IsModeStep(const Step& step) {
  return step.kind == StepKind::kSetMigMode || step.kind == StepKind::kResetGpu;
}

}  // namespace

absl::StatusOr<ApplyResult> ApplyConfig(device::Backend& backend, const hw::Catalog& catalog,
                                        const ApplyRequest& request,
                                        const std::function<void(const std::string&)>& log) {
  std::vector<std::string> notes;
  absl::StatusOr<std::vector<Target>> targets =
      TargetsFor(backend, catalog, *request.file, request.config_name, request.file_path, &notes);
  if (!targets.ok()) return targets.status();
  for (const std::string& note : notes) log(note);

  ApplyResult result;
  PlanOptions plan_options;
  plan_options.force = request.force;
  for (const Target& target : *targets) {
    absl::StatusOr<GpuSnapshot> snapshot = TakeSnapshot(backend, target.info.index);
    if (!snapshot.ok()) return snapshot.status();
    absl::StatusOr<GpuPlan> plan = PlanGpu(target.model, *snapshot, target.target, plan_options);
    if (!plan.ok()) return plan.status();
    if (request.mode_only) {
      // Keep the mode change and, when disabling, the destruction it needs.
      const bool disabling = !target.target.mig_enabled;
      std::vector<Step> steps;
      for (const Step& step : plan->steps) {
        if (IsModeStep(step) || (disabling && plan->mode_change)) steps.push_back(step);
      }
      plan->steps = steps;
      if (!disabling) plan->busy.clear();
    }
    result.plans.push_back(*std::move(plan));
  }
  const std::string busy = BusyReport(result.plans);
  if (!busy.empty() && !request.force) {
    return absl::FailedPreconditionError(
        "refusing to destroy GPU instances that have processes (nothing was changed; use --force "
        "to terminate the processes first):" +
        busy);
  }

  if (request.dry_run) {
    for (const GpuPlan& plan : result.plans) {
      if (plan.empty()) {
        log("GPU " + std::to_string(plan.gpu) + " (" + plan.model + "): already as configured");
        continue;
      }
      log("GPU " + std::to_string(plan.gpu) + " (" + plan.model +
          "): " + std::to_string(plan.steps.size()) + " steps (keep " + std::to_string(plan.kept) +
          ", destroy " + std::to_string(plan.destroyed) + ", create " +
          std::to_string(plan.created) + " GPU instances)");
      for (size_t i = 0; i < plan.steps.size(); ++i) {
        log("  " + std::to_string(i + 1) + ". " + plan.steps[i].text);
      }
      for (const std::string& note : plan.notes) log("  note: " + note);
    }
    return result;
  }

  std::optional<Journal> journal;
  if (!request.journal_path.empty()) {
    absl::StatusOr<Journal> opened = Journal::Open(request.journal_path);
    if (!opened.ok()) return opened.status();
    journal = *std::move(opened);
    if (const auto& previous = journal->interrupted()) {
      log("Previous apply (" + previous->description + ", started " + previous->started +
          ") was interrupted after " + std::to_string(previous->steps_done) + " of " +
          std::to_string(previous->steps_total) + " steps" +
          (previous->last_step.empty() ? "" : " (last step begun: " + previous->last_step + ")") +
          "; converging from the GPUs' current state.");
    }
  }

  const std::vector<std::pair<std::string, std::string>> hook_env = {
      {"MIG_PARTED_CONFIG_FILE", request.file_path},
      {"MIG_PARTED_SELECTED_CONFIG", request.config_name},
      {"MIG_PARTED_SKIP_RESET", request.skip_reset ? "true" : "false"},
      {"MIG_PARTED_MODE_CHANGE_ONLY", request.mode_only ? "true" : "false"},
  };
  auto run_hook = [&](const char* name) -> absl::Status {
    if (request.hooks == nullptr) return absl::OkStatus();
    log("Running hook " + std::string(name));
    return RunHook(*request.hooks, name, hook_env);
  };
  if (absl::Status status = run_hook("apply-start"); !status.ok()) return status;

  int total_steps = 0;
  for (const GpuPlan& plan : result.plans) total_steps += static_cast<int>(plan.steps.size());
  const std::string description = "config '" + request.config_name + "' from " + request.file_path;
  int journal_index = 0;
  absl::Status outcome = absl::OkStatus();
  if (total_steps > 0 && journal) outcome = journal->Begin(description, total_steps);

  ExecuteOptions execute_options;
  execute_options.skip_reset = request.skip_reset;
  ExecuteHooks hooks;
  hooks.before = [&](const Step& step, size_t, size_t) {
    if (journal) (void)journal->StepStarted(journal_index, step.text);
    log("[" + std::to_string(journal_index + 1) + "/" + std::to_string(total_steps) + "] GPU " +
        std::to_string(step.gpu) + ": " + step.text);
  };
  hooks.after = [&](const Step& step, size_t, size_t, const absl::Status& status) {
    if (journal)
      (void)journal->StepDone(journal_index, step.text,
                              status.ok() ? "" : std::string(status.message()));
    ++journal_index;
    if (!status.ok()) log("  failed: " + std::string(status.message()));
  };
  // Phase 1: MIG modes (with the destruction a disable needs), phase 2: instances, as mig-parted.
  for (int phase = 0; phase < 2 && outcome.ok(); ++phase) {
    bool hook_ran = false;
    for (const GpuPlan& plan : result.plans) {
      GpuPlan part = plan;
      part.steps.clear();
      size_t last_mode = 0;
      bool has_mode = false;
      for (size_t i = 0; i < plan.steps.size(); ++i) {
        if (IsModeStep(plan.steps[i])) {
          last_mode = i;
          has_mode = true;
        }
      }
      for (size_t i = 0; i < plan.steps.size(); ++i) {
        const bool in_mode_phase = has_mode && i <= last_mode;
        if ((phase == 0) == in_mode_phase) part.steps.push_back(plan.steps[i]);
      }
      if (phase == 1 && has_mode) {
        // CreateComputeInstance steps refer to CreateGpuInstance steps by index: shift them.
        for (Step& step : part.steps) {
          if (step.gi_from_step >= 0) step.gi_from_step -= static_cast<int>(last_mode) + 1;
        }
      }
      if (part.steps.empty()) continue;
      if (!hook_ran) {
        outcome = run_hook(phase == 0 ? "pre-apply-mode" : "pre-apply-config");
        hook_ran = true;
        if (!outcome.ok()) break;
      }
      outcome = Execute(backend, part, execute_options, hooks);
      if (!outcome.ok()) break;
    }
  }
  // Verify what the driver now reports (mig-parted users have seen "applied successfully" with
  // nothing created).
  if (outcome.ok() && !request.mode_only) {
    absl::StatusOr<std::vector<std::string>> differences =
        AssertConfig(backend, catalog, *request.file, request.config_name, false);
    if (!differences.ok()) {
      outcome = differences.status();
    } else if (!differences->empty()) {
      std::string text = "the apply finished but the GPUs do not match the config:";
      for (const std::string& line : *differences) text += "\n  " + line;
      outcome = absl::InternalError(text);
    }
  }
  for (const GpuPlan& plan : result.plans) {
    if (plan.empty()) continue;
    result.changed = true;
    ++result.gpus_changed;
    result.kept += plan.kept;
    result.created += plan.created;
    result.destroyed += plan.destroyed;
  }
  if (total_steps > 0 && journal) {
    (void)journal->End(outcome.ok(), outcome.ok() ? "ok" : std::string(outcome.message()));
  }
  if (absl::Status exit_status = run_hook("apply-exit"); outcome.ok() && !exit_status.ok()) {
    outcome = exit_status;
  }
  if (!outcome.ok()) return outcome;
  for (const GpuPlan& plan : result.plans) {
    log("GPU " + std::to_string(plan.gpu) + " (" + plan.model + "): " +
        (plan.empty() ? std::string("already as configured")
                      : "kept " + std::to_string(plan.kept) + ", destroyed " +
                            std::to_string(plan.destroyed) + ", created " +
                            std::to_string(plan.created) + " GPU instances"));
  }
  log(result.changed ? "MIG configuration applied successfully"
                     : "MIG configuration already applied; nothing changed");
  return result;
}

absl::StatusOr<std::vector<std::string>> AssertConfig(device::Backend& backend,
                                                      const hw::Catalog& catalog,
                                                      const spec::MigConfigFile& file,
                                                      const std::string& config_name,
                                                      bool mode_only) {
  absl::StatusOr<std::vector<Target>> targets =
      TargetsFor(backend, catalog, file, config_name, "", nullptr);
  if (!targets.ok()) return targets.status();
  std::vector<std::string> differences;
  for (Target& target : *targets) {
    absl::StatusOr<GpuSnapshot> snapshot = TakeSnapshot(backend, target.info.index);
    if (!snapshot.ok()) return snapshot.status();
    if (mode_only) target.target.gis.clear();
    std::vector<std::string> gpu_differences = Differences(target.model, *snapshot, target.target);
    if (mode_only) {
      gpu_differences.erase(std::remove_if(gpu_differences.begin(), gpu_differences.end(),
                                           [](const std::string& line) {
                                             return line.find("MIG mode") == std::string::npos &&
                                                    line.find("MIG-capable") == std::string::npos;
                                           }),
                            gpu_differences.end());
    }
    differences.insert(differences.end(), gpu_differences.begin(), gpu_differences.end());
  }
  return differences;
}

absl::StatusOr<spec::MigConfigFile> ExportConfig(device::Backend& backend,
                                                 const hw::Catalog& catalog,
                                                 const std::string& label, bool placements) {
  absl::StatusOr<std::vector<device::GpuInfo>> gpus = backend.ListGpus();
  if (!gpus.ok()) return gpus.status();
  std::vector<spec::ConfigEntry> entries;
  for (const device::GpuInfo& info : *gpus) {
    absl::StatusOr<GpuSnapshot> snapshot = TakeSnapshot(backend, info.index);
    if (!snapshot.ok()) return snapshot.status();
    const hw::GpuModel* model = ModelOf(catalog, info);
    spec::ConfigEntry entry;
    entry.device_filter.push_back((static_cast<std::uint32_t>(info.pci_device_id) << 16) | 0x10DEU);
    entry.mig_enabled = info.mig_capable && info.mig_current == device::MigMode::kEnabled;
    if (entry.mig_enabled && model != nullptr) {
      const std::vector<spec::DesiredGi> gis = CurrentGis(*model, *snapshot);
      entry.mig_devices = spec::MigDevicesOf(*model, gis);
      if (placements) {
        for (const spec::DesiredGi& gi : gis) {
          entry.placements.push_back(model->mig->profiles[static_cast<size_t>(gi.profile)].name +
                                     "@" + std::to_string(gi.start.value_or(0)));
        }
      }
    }
    // GPUs with the same model and layout share one entry.
    auto same = std::find_if(entries.begin(), entries.end(), [&](const spec::ConfigEntry& other) {
      if (other.device_filter != entry.device_filter || other.mig_enabled != entry.mig_enabled ||
          other.placements != entry.placements ||
          other.mig_devices.size() != entry.mig_devices.size()) {
        return false;
      }
      for (size_t i = 0; i < entry.mig_devices.size(); ++i) {
        if (other.mig_devices[i].name != entry.mig_devices[i].name ||
            other.mig_devices[i].count != entry.mig_devices[i].count) {
          return false;
        }
      }
      return true;
    });
    if (same != entries.end()) {
      same->devices.indices.push_back(info.index);
    } else {
      entry.devices.indices.push_back(info.index);
      entries.push_back(std::move(entry));
    }
  }
  spec::MigConfigFile file;
  file.configs.emplace_back(label, std::move(entries));
  return file;
}

}  // namespace gpuslice::agent
