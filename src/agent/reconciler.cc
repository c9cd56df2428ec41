#include "gpuslice/agent/reconciler.h"

#include <algorithm>
#include <map>

#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/geometry/compute_instances.h"
#include "gpuslice/geometry/shape.h"

namespace gpuslice::agent {
namespace {

using device::MigMode;

std::string Gib(std::int64_t mib) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f GiB", static_cast<double>(mib) / 1024.0);
  return buffer;
}

int GiProfileIndex(const hw::MigSpec& mig, int smi_id) {
  const hw::GiProfile* profile = mig.FindProfileBySmiId(smi_id);
  return profile == nullptr ? -1 : mig.IndexOf(*profile);
}

int CiIndexById(const std::vector<hw::CiProfile>& profiles, int id) {
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (profiles[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

// The CI profile indices a desired GI asks for (the default CI when none is named).
std::vector<int> WantedCis(const hw::MigSpec& mig, const spec::DesiredGi& gi) {
  if (!gi.cis.empty()) return gi.cis;
  const hw::GiProfile& profile = mig.profiles[static_cast<size_t>(gi.profile)];
  const geometry::CiShape shape(mig, profile);
  return {shape.DefaultIndex()};
}

std::string GiName(const hw::MigSpec& mig, int profile_index, int start, int gi_id) {
  std::string text =
      mig.profiles[static_cast<size_t>(profile_index)].name + "@" + std::to_string(start);
  if (gi_id >= 0) text += " (GI " + std::to_string(gi_id) + ")";
  return text;
}

std::string ProcessList(const std::vector<device::ProcessInfo>& processes) {
  std::string text;
  for (const device::ProcessInfo& p : processes) {
    if (!text.empty()) text += "; ";
    text += "pid " + std::to_string(p.pid);
    if (!p.name.empty()) text += " (" + p.name + ")";
    text += ", " + Gib(p.used_memory_mib);
    if (p.gi >= 0) text += ", GI " + std::to_string(p.gi) + " CI " + std::to_string(p.ci);
  }
  return text;
}

// Places the CIs `missing` beside `existing` in one GI, largest first at the lowest start that
// keeps the GI valid. Returns false if one does not fit.
bool PlaceMissingCis(const geometry::CiShape& shape, std::vector<geometry::CiPlaced> existing,
                     std::vector<int> missing, std::vector<geometry::CiPlaced>* placed) {
  std::sort(missing.begin(), missing.end(), [&](int a, int b) {
    return shape.profiles()[static_cast<size_t>(a)].slices >
           shape.profiles()[static_cast<size_t>(b)].slices;
  });
  placed->clear();
  for (int ci : missing) {
    bool done = false;
    for (int start : shape.profiles()[static_cast<size_t>(ci)].starts) {
      existing.push_back({static_cast<std::uint8_t>(ci), static_cast<std::uint8_t>(start)});
      if (!shape.Validate(existing)) {
        placed->push_back(existing.back());
        done = true;
        break;
      }
      existing.pop_back();
    }
    if (!done) return false;
  }
  return true;
}

struct CurrentGi {
  int index = 0;  // into snapshot.gis
  int id = 0;
  int profile = -1;
  int start = 0;
  std::vector<geometry::CiPlaced> cis;  // CI profile index + start
  std::vector<int> ci_ids;
  bool busy = false;
};

// How a kept current GI is completed to match a desired GI: the CIs to add (empty if complete).
bool Completes(const hw::MigSpec& mig, const CurrentGi& current, const spec::DesiredGi& desired,
               std::vector<geometry::CiPlaced>* to_add) {
  if (current.profile != desired.profile) return false;
  if (desired.start && *desired.start != current.start) return false;
  const geometry::CiShape shape(mig, mig.profiles[static_cast<size_t>(current.profile)]);
  std::vector<int> missing = WantedCis(mig, desired);
  for (const geometry::CiPlaced& ci : current.cis) {
    auto it = std::find(missing.begin(), missing.end(), ci.ci);
    if (it == missing.end()) return false;  // a CI the target does not want
    missing.erase(it);
  }
  return PlaceMissingCis(shape, current.cis, missing, to_add);
}

// Bipartite matching of kept current GIs to desired GIs (small sets: simple augmenting paths).
bool MatchAll(const std::vector<std::vector<bool>>& compatible, const std::vector<int>& kept,
              size_t desired_count, std::vector<int>* match_of_desired) {
  match_of_desired->assign(desired_count, -1);
  for (int current : kept) {
    std::vector<bool> seen(desired_count, false);
    auto augment = [&](auto&& self, int c) -> bool {
      for (size_t d = 0; d < desired_count; ++d) {
        if (!compatible[static_cast<size_t>(c)][d] || seen[d]) continue;
        seen[d] = true;
        if ((*match_of_desired)[d] < 0 || self(self, (*match_of_desired)[d])) {
          (*match_of_desired)[d] = c;
          return true;
        }
      }
      return false;
    };
    if (!augment(augment, current)) return false;
  }
  return true;
}

// Placements for the desired GIs that are not kept, around the kept ones. Returns false if none.
bool PlaceNew(const geometry::Shape& shape, const std::vector<CurrentGi>& current,
              const std::vector<int>& kept, const std::vector<spec::DesiredGi>& desired,
              const std::vector<int>& match_of_desired, std::vector<int>* starts) {
  geometry::Occupancy occupancy;
  for (int c : kept)
    shape.Add(occupancy, current[static_cast<size_t>(c)].profile,
              current[static_cast<size_t>(c)].start);
  starts->assign(desired.size(), -1);
  geometry::Counts free_counts{};
  for (size_t d = 0; d < desired.size(); ++d) {
    if (match_of_desired[d] >= 0) continue;
    if (desired[d].start) {
      if (!shape.CanAdd(occupancy, desired[d].profile, *desired[d].start, {}).ok()) return false;
      shape.Add(occupancy, desired[d].profile, *desired[d].start);
      (*starts)[d] = *desired[d].start;
    } else {
      ++free_counts[static_cast<size_t>(desired[d].profile)];
    }
  }
  std::vector<geometry::Placed> placed;
  if (!shape.Place(occupancy, free_counts, {}, &placed)) return false;
  for (size_t d = 0; d < desired.size(); ++d) {
    if (match_of_desired[d] >= 0 || desired[d].start) continue;
    for (geometry::Placed& p : placed) {
      if (p.profile == desired[d].profile && p.start != 0xFF) {
        (*starts)[d] = p.start;
        p.start = 0xFF;  // used
        break;
      }
    }
  }
  return true;
}

std::vector<CurrentGi> ReadCurrent(const hw::MigSpec& mig, const GpuSnapshot& now) {
  std::vector<CurrentGi> out;
  for (size_t i = 0; i < now.gis.size(); ++i) {
    const device::GpuInstanceInfo& gi = now.gis[i];
    CurrentGi c;
    c.index = static_cast<int>(i);
    c.id = gi.id;
    c.profile = GiProfileIndex(mig, gi.profile_id);
    c.start = gi.start;
    if (c.profile >= 0) {
      const auto& ci_profiles =
          mig.CiProfilesFor(mig.profiles[static_cast<size_t>(c.profile)].compute_slices);
      for (const device::ComputeInstanceInfo& ci : now.cis[i]) {
        const int index = CiIndexById(ci_profiles, ci.profile_id);
        c.cis.push_back(
            {static_cast<std::uint8_t>(std::max(index, 0)), static_cast<std::uint8_t>(ci.start)});
        c.ci_ids.push_back(ci.id);
      }
    }
    c.busy = std::any_of(now.processes.begin(), now.processes.end(),
                         [&](const device::ProcessInfo& p) { return p.gi == gi.id; });
    out.push_back(std::move(c));
  }
  return out;
}

void AddDestroyAll(const hw::MigSpec& mig, const GpuSnapshot& now, const CurrentGi& gi,
                   const PlanOptions& options, GpuPlan* plan) {
  std::vector<device::ProcessInfo> on_gi;
  for (const device::ProcessInfo& p : now.processes) {
    if (p.gi == gi.id) on_gi.push_back(p);
  }
  const std::string name =
      gi.profile >= 0 ? GiName(mig, gi.profile, gi.start, gi.id) : "GI " + std::to_string(gi.id);
  if (!on_gi.empty()) {
    plan->busy.push_back({gi.id, -1, name, on_gi});
    if (options.force) {
      for (const device::ProcessInfo& p : on_gi) {
        Step step;
        step.kind = StepKind::kTerminateProcess;
        step.gpu = now.info.index;
        step.pid = p.pid;
        step.gi = gi.id;
        step.text = "terminate pid " + std::to_string(p.pid) +
                    (p.name.empty() ? "" : " (" + p.name + ")") + " on " + name + " (--force)";
        plan->steps.push_back(step);
      }
    }
  }
  for (int ci_id : gi.ci_ids) {
    Step step;
    step.kind = StepKind::kDestroyComputeInstance;
    step.gpu = now.info.index;
    step.gi = gi.id;
    step.ci = ci_id;
    step.text = "destroy compute instance " + std::to_string(ci_id) + " of " + name;
    plan->steps.push_back(step);
  }
  Step step;
  step.kind = StepKind::kDestroyGpuInstance;
  step.gpu = now.info.index;
  step.gi = gi.id;
  step.text = "destroy GPU instance " + name;
  plan->steps.push_back(step);
  ++plan->destroyed;
}

void AddCreateCis(const hw::MigSpec& mig, int gpu, int profile, int gi_id, int gi_step,
                  const std::vector<geometry::CiPlaced>& cis, const std::string& gi_name,
                  GpuPlan* plan) {
  const geometry::CiShape shape(mig, mig.profiles[static_cast<size_t>(profile)]);
  for (const geometry::CiPlaced& ci : cis) {
    Step step;
    step.kind = StepKind::kCreateComputeInstance;
    step.gpu = gpu;
    step.gi = gi_id;
    step.gi_from_step = gi_step;
    step.profile_id = shape.profiles()[ci.ci].id;
    step.start = ci.start;
    step.text = "create compute instance " + shape.DeviceName(ci.ci) + " at slice " +
                std::to_string(ci.start) + " in " + gi_name;
    plan->steps.push_back(step);
  }
}

}  // namespace

absl::StatusOr<GpuSnapshot> TakeSnapshot(device::Backend& backend, int gpu) {
  GpuSnapshot snapshot;
  absl::StatusOr<std::vector<device::GpuInfo>> gpus = backend.ListGpus();
  if (!gpus.ok()) return gpus.status();
  if (gpu < 0 || static_cast<size_t>(gpu) >= gpus->size()) {
    return absl::NotFoundError("no GPU " + std::to_string(gpu) + " (this machine has " +
                               std::to_string(gpus->size()) + ")");
  }
  snapshot.info = (*gpus)[static_cast<size_t>(gpu)];
  if (snapshot.info.mig_capable && snapshot.info.mig_current == MigMode::kEnabled) {
    absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis = backend.ListGpuInstances(gpu);
    if (!gis.ok()) return gis.status();
    snapshot.gis = *gis;
    for (const device::GpuInstanceInfo& gi : snapshot.gis) {
      absl::StatusOr<std::vector<device::ComputeInstanceInfo>> cis =
          backend.ListComputeInstances(gpu, gi.id);
      if (!cis.ok()) return cis.status();
      snapshot.cis.push_back(*cis);
    }
  }
  absl::StatusOr<std::vector<device::ProcessInfo>> processes = backend.ListProcesses(gpu);
  if (!processes.ok()) return processes.status();
  snapshot.processes = *processes;
  absl::StatusOr<std::vector<std::string>> holders = backend.ListGpuHolders(gpu);
  if (!holders.ok()) return holders.status();
  snapshot.holders = *holders;
  return snapshot;
}

absl::StatusOr<GpuPlan> PlanGpu(const hw::GpuModel* model, const GpuSnapshot& now,
                                const GpuTarget& target, const PlanOptions& options) {
  GpuPlan plan;
  plan.gpu = now.info.index;
  plan.model = model != nullptr ? model->id : now.info.name;
  const int gpu = now.info.index;
  if (!target.mig_enabled) {
    if (!now.info.mig_capable) return plan;
    if (model == nullptr || !model->mig) {
      return absl::NotFoundError("GPU " + std::to_string(gpu) + " (" + now.info.name +
                                 ") is not in the catalog; add it with --catalog");
    }
    const std::vector<CurrentGi> current = ReadCurrent(*model->mig, now);
    for (const CurrentGi& gi : current) AddDestroyAll(*model->mig, now, gi, options, &plan);
    plan.instance_change = !current.empty();
    if (now.info.mig_current != MigMode::kDisabled || now.info.mig_pending != MigMode::kDisabled) {
      Step step;
      step.kind = StepKind::kSetMigMode;
      step.gpu = gpu;
      step.mode = MigMode::kDisabled;
      step.text = "disable MIG mode";
      plan.steps.push_back(step);
      plan.mode_change = true;
    }
    return plan;
  }
  if (!now.info.mig_capable) {
    return absl::FailedPreconditionError("GPU " + std::to_string(gpu) + " (" + now.info.name +
                                         ") cannot enable MIG: it is not MIG-capable (" +
                                         target.source + ")");
  }
  if (model == nullptr || !model->mig) {
    return absl::NotFoundError("GPU " + std::to_string(gpu) + " (" + now.info.name +
                               ") is not in the catalog; add it with --catalog");
  }
  const hw::MigSpec& mig = *model->mig;
  const geometry::Shape shape(*model);
  if (now.info.mig_current != MigMode::kEnabled || now.info.mig_pending != MigMode::kEnabled) {
    Step step;
    step.kind = StepKind::kSetMigMode;
    step.gpu = gpu;
    step.mode = MigMode::kEnabled;
    step.text = "enable MIG mode";
    plan.steps.push_back(step);
    plan.mode_change = true;
  }
  const std::vector<CurrentGi> current =
      now.info.mig_current == MigMode::kEnabled ? ReadCurrent(mig, now) : std::vector<CurrentGi>{};
  const std::vector<spec::DesiredGi>& desired = target.gis;

  // Which current GIs can complete which desired GIs.
  std::vector<std::vector<bool>> compatible(current.size(),
                                            std::vector<bool>(desired.size(), false));
  for (size_t c = 0; c < current.size(); ++c) {
    for (size_t d = 0; d < desired.size(); ++d) {
      std::vector<geometry::CiPlaced> unused;
      compatible[c][d] = current[c].profile >= 0 && Completes(mig, current[c], desired[d], &unused);
    }
  }
  // The best set of GIs to keep: busy ones first, then as many as possible.
  const size_t n = current.size();
  if (n > 20) return absl::InternalError("too many GPU instances on GPU " + std::to_string(gpu));
  long best_score = -1;
  std::vector<int> best_kept;
  std::vector<int> best_match;
  std::vector<int> best_starts;
  for (std::uint32_t mask = 0; mask < (1U << n); ++mask) {
    std::vector<int> kept;
    long score = 0;
    for (size_t c = 0; c < n; ++c) {
      if ((mask >> c) & 1U) {
        kept.push_back(static_cast<int>(c));
        score += current[c].busy ? 1000 : 1;
      }
    }
    if (score <= best_score) continue;
    std::vector<int> match;
    if (!MatchAll(compatible, kept, desired.size(), &match)) continue;
    std::vector<int> starts;
    if (!PlaceNew(shape, current, kept, desired, match, &starts)) continue;
    best_score = score;
    best_kept = kept;
    best_match = match;
    best_starts = starts;
  }
  if (best_score < 0) {
    return absl::FailedPreconditionError("the target layout does not fit on GPU " +
                                         std::to_string(gpu) + " (" + model->id +
                                         "): " + target.source);
  }
  // Remove what is not kept.
  for (size_t c = 0; c < n; ++c) {
    if (std::find(best_kept.begin(), best_kept.end(), static_cast<int>(c)) == best_kept.end()) {
      AddDestroyAll(mig, now, current[c], options, &plan);
    }
  }
  plan.kept = static_cast<int>(best_kept.size());
  // Complete kept GIs, create the new ones.
  for (size_t d = 0; d < desired.size(); ++d) {
    const int c = best_match[d];
    if (c >= 0) {
      std::vector<geometry::CiPlaced> to_add;
      Completes(mig, current[static_cast<size_t>(c)], desired[d], &to_add);
      const CurrentGi& gi = current[static_cast<size_t>(c)];
      if (!to_add.empty()) {
        AddCreateCis(mig, gpu, gi.profile, gi.id, -1, to_add,
                     GiName(mig, gi.profile, gi.start, gi.id), &plan);
        plan.notes.push_back(GiName(mig, gi.profile, gi.start, gi.id) +
                             " is kept and gets its missing compute instances");
      }
      continue;
    }
    const int profile = desired[d].profile;
    const int start = best_starts[d];
    Step create;
    create.kind = StepKind::kCreateGpuInstance;
    create.gpu = gpu;
    create.profile_id = mig.profiles[static_cast<size_t>(profile)].smi_id;
    create.start = start;
    const std::string name = GiName(mig, profile, start, shape.GpuInstanceId(profile, start));
    create.text = "create GPU instance " + mig.profiles[static_cast<size_t>(profile)].name +
                  " (profile " + std::to_string(create.profile_id) + ") at placement " +
                  std::to_string(start) + ":" +
                  std::to_string(mig.profiles[static_cast<size_t>(profile)].placement_size);
    plan.steps.push_back(create);
    const int create_step = static_cast<int>(plan.steps.size()) - 1;
    ++plan.created;
    const geometry::CiShape ci_shape(mig, mig.profiles[static_cast<size_t>(profile)]);
    std::vector<std::uint8_t> wanted;
    for (int ci : WantedCis(mig, desired[d])) wanted.push_back(static_cast<std::uint8_t>(ci));
    std::optional<std::vector<geometry::CiPlaced>> cis = ci_shape.Place(wanted);
    if (!cis) {
      return absl::FailedPreconditionError("the compute instances asked for do not fit in one " +
                                           mig.profiles[static_cast<size_t>(profile)].name + " (" +
                                           target.source + ")");
    }
    AddCreateCis(mig, gpu, profile, -1, create_step, *cis, name, &plan);
  }
  plan.instance_change = plan.created > 0 || plan.destroyed > 0 ||
                         std::any_of(plan.steps.begin(), plan.steps.end(), [](const Step& s) {
                           return s.kind == StepKind::kCreateComputeInstance;
                         });
  return plan;
}

absl::Status Execute(device::Backend& backend, const GpuPlan& plan, const ExecuteOptions& options,
                     const ExecuteHooks& hooks) {
  std::map<int, int> created_gi;  // step index -> GI id
  const size_t total = plan.steps.size();
  for (size_t i = 0; i < total; ++i) {
    const Step& step = plan.steps[i];
    if (hooks.before) hooks.before(step, i, total);
    absl::Status status;
    switch (step.kind) {
      case StepKind::kSetMigMode: {
        absl::StatusOr<device::MigModeChange> change = backend.SetMigMode(step.gpu, step.mode);
        if (!change.ok()) {
          status = change.status();
          break;
        }
        if (change->applied) break;
        if (!options.skip_reset) {
          status = backend.ResetGpu(step.gpu);
          if (status.ok()) break;
        }
        std::string held;
        if (absl::StatusOr<std::vector<std::string>> holders = backend.ListGpuHolders(step.gpu);
            holders.ok()) {
          for (const std::string& holder : *holders) held += (held.empty() ? "" : ", ") + holder;
        }
        if (absl::StatusOr<std::vector<device::ProcessInfo>> processes =
                backend.ListProcesses(step.gpu);
            processes.ok() && !processes->empty()) {
          held += (held.empty() ? "" : "; ") + ProcessList(*processes);
        }
        std::string message = "MIG mode of GPU " + std::to_string(step.gpu) + " is pending (" +
                              device::NvmlCodeName(change->activation_code) + "): ";
        if (options.skip_reset) {
          message += "the GPU reset was skipped (--skip-reset); reset it or reboot to apply";
        } else {
          message += "the GPU reset failed (" + std::string(status.message()) + ")";
        }
        if (!held.empty())
          message += ". Held by: " + held + ". Stop them and apply again, or reboot";
        status = absl::FailedPreconditionError(message);
        break;
      }
      case StepKind::kResetGpu:
        status = backend.ResetGpu(step.gpu);
        break;
      case StepKind::kTerminateProcess:
        status = backend.TerminateProcess(step.pid, 10);
        if (absl::IsNotFound(status)) status = absl::OkStatus();  // already gone
        break;
      case StepKind::kDestroyComputeInstance:
        status = backend.DestroyComputeInstance(step.gpu, step.gi, step.ci);
        break;
      case StepKind::kDestroyGpuInstance:
        status = backend.DestroyGpuInstance(step.gpu, step.gi);
        break;
      case StepKind::kCreateGpuInstance: {
        absl::StatusOr<device::GpuInstanceInfo> gi =
            backend.CreateGpuInstance(step.gpu, step.profile_id, step.start);
        if (gi.ok()) {
          created_gi[static_cast<int>(i)] = gi->id;
        } else {
          status = gi.status();
        }
        break;
      }
      case StepKind::kCreateComputeInstance: {
        int gi = step.gi;
        if (step.gi_from_step >= 0) gi = created_gi.at(step.gi_from_step);
        absl::StatusOr<device::ComputeInstanceInfo> ci =
            backend.CreateComputeInstance(step.gpu, gi, step.profile_id, step.start);
        if (!ci.ok()) status = ci.status();
        break;
      }
    }
    if (hooks.after) hooks.after(step, i, total, status);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

std::vector<spec::DesiredGi> CurrentGis(const hw::GpuModel& model, const GpuSnapshot& now) {
  std::vector<spec::DesiredGi> out;
  if (!model.mig) return out;
  for (const CurrentGi& gi : ReadCurrent(*model.mig, now)) {
    if (gi.profile < 0) continue;
    spec::DesiredGi desired;
    desired.profile = gi.profile;
    desired.start = gi.start;
    const geometry::CiShape shape(*model.mig, model.mig->profiles[static_cast<size_t>(gi.profile)]);
    const bool only_default = gi.cis.size() == 1 && gi.cis[0].ci == shape.DefaultIndex();
    if (!only_default) {
      for (const geometry::CiPlaced& ci : gi.cis) desired.cis.push_back(ci.ci);
    }
    out.push_back(std::move(desired));
  }
  return out;
}

std::vector<std::string> Differences(const hw::GpuModel* model, const GpuSnapshot& now,
                                     const GpuTarget& target) {
  std::vector<std::string> out;
  const std::string gpu = "GPU " + std::to_string(now.info.index);
  auto mode_text = [](MigMode mode) { return mode == MigMode::kEnabled ? "enabled" : "disabled"; };
  if (!target.mig_enabled) {
    if (now.info.mig_capable && (now.info.mig_current != MigMode::kDisabled ||
                                 now.info.mig_pending != MigMode::kDisabled)) {
      out.push_back(gpu + ": MIG mode is " + mode_text(now.info.mig_current) + " (pending " +
                    mode_text(now.info.mig_pending) + "), the target disables it");
    }
    return out;
  }
  if (!now.info.mig_capable) {
    out.push_back(gpu + ": not MIG-capable, the target enables MIG");
    return out;
  }
  if (now.info.mig_current != MigMode::kEnabled || now.info.mig_pending != MigMode::kEnabled) {
    out.push_back(gpu + ": MIG mode is " + std::string(mode_text(now.info.mig_current)) +
                  " (pending " + mode_text(now.info.mig_pending) + "), the target enables it");
    return out;
  }
  if (model == nullptr || !model->mig) {
    out.push_back(gpu + ": model not in the catalog");
    return out;
  }
  const hw::MigSpec& mig = *model->mig;
  std::vector<CurrentGi> current = ReadCurrent(mig, now);
  std::vector<bool> used(current.size(), false);
  for (const spec::DesiredGi& desired : target.gis) {
    std::vector<int> wanted = WantedCis(mig, desired);
    std::sort(wanted.begin(), wanted.end());
    bool found = false;
    for (size_t c = 0; c < current.size() && !found; ++c) {
      if (used[c] || current[c].profile != desired.profile) continue;
      if (desired.start && *desired.start != current[c].start) continue;
      std::vector<int> have;
      for (const geometry::CiPlaced& ci : current[c].cis) have.push_back(ci.ci);
      std::sort(have.begin(), have.end());
      if (have != wanted) continue;
      used[c] = true;
      found = true;
    }
    if (!found) {
      std::string text =
          gpu + ": missing " + mig.profiles[static_cast<size_t>(desired.profile)].name;
      if (desired.start) text += " at placement " + std::to_string(*desired.start);
      if (!desired.cis.empty()) {
        const geometry::CiShape shape(mig, mig.profiles[static_cast<size_t>(desired.profile)]);
        text += " split into";
        for (int ci : desired.cis) text += " " + shape.profiles()[static_cast<size_t>(ci)].name;
      }
      out.push_back(text);
    }
  }
  for (size_t c = 0; c < current.size(); ++c) {
    if (used[c]) continue;
    const CurrentGi& gi = current[c];
    std::string text = gpu + ": unexpected " +
                       (gi.profile >= 0 ? GiName(mig, gi.profile, gi.start, gi.id)
                                        : "GI " + std::to_string(gi.id));
    if (gi.cis.empty()) text += " without compute instances";
    out.push_back(text);
  }
  return out;
}

}  // namespace gpuslice::agent
