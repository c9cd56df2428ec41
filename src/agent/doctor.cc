#include "gpuslice/agent/doctor.h"

#include <dlfcn.h>

#include <cstdlib>
#include <sstream>

#include "gpuslice/agent/reconciler.h"
#include "gpuslice/util/process_scan.h"

namespace gpuslice::agent {
namespace {

std::vector<long> VersionParts(const std::string& text) {
  std::vector<long> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, '.')) parts.push_back(std::strtol(part.c_str(), nullptr, 10));
  return parts;
}

std::string Quoted(const std::string& text) { return "'" + text + "'"; }

// The driver branch of a version ("580.65.06" -> 580); 0 if it does not start with a number.
int DriverBranch(const std::string& version) {
  return static_cast<int>(std::strtol(version.c_str(), nullptr, 10));
}

// Compares the GI profiles the driver reports for a GPU with the catalog's model: profiles the
// catalog lacks (WARN), catalog profiles the driver does not offer (WARN: layouts using them
// cannot be applied; INFO when the catalog says they need a newer driver branch than `driver`),
// and names or memory sizes that differ (INFO; drivers rename profiles and change memory sizes
// between versions, mig-facts §0.5).
void CompareProfiles(device::Backend& backend, const device::GpuInfo& info,
                     const hw::GpuModel& model, const std::string& driver, const std::string& gpu,
                     std::vector<Check>& checks) {
  absl::StatusOr<std::vector<device::GpuInstanceProfileInfo>> profiles =
      backend.ListGpuInstanceProfiles(info.index);
  if (!profiles.ok()) {
    checks.push_back({CheckLevel::kWarn, gpu,
                      "cannot list the driver's GPU instance profiles: " +
                          std::string(profiles.status().message()),
                      ""});
    return;
  }
  const hw::MigSpec& mig = *model.mig;
  size_t differences = 0;
  for (const device::GpuInstanceProfileInfo& profile : *profiles) {
    const std::string id = "profile ID " + std::to_string(profile.id);
    const hw::GiProfile* known = mig.FindProfileBySmiId(profile.id);
    if (known == nullptr) {
      ++differences;
      checks.push_back({CheckLevel::kWarn, gpu,
                        "driver reports " + id + " (" + profile.name + ") that the catalog for " +
                            model.id + " does not know",
                        "add it with --catalog FILE (docs/CATALOG.md)"});
      continue;
    }
    if (profile.name != known->name) {
      ++differences;
      const bool alias = mig.FindProfile(profile.name) == known;
      std::string what = "driver names " + id + " " + Quoted(profile.name) +
                         " (catalog: " + Quoted(known->name) + (alias ? ", alias ok" : "") + ")";
      if (profile.name_derived) what += "; the driver gives no names, this one is derived";
      checks.push_back({CheckLevel::kInfo, gpu, what, ""});
    }
    if (profile.memory_mib != known->memory_mib) {
      ++differences;
      std::string what = "driver gives " + id + " (" + known->name + ") " +
                         std::to_string(profile.memory_mib) +
                         " MiB (catalog: " + std::to_string(known->memory_mib) + " MiB";
      for (const hw::AlternateMemory& alternate : known->memory_alt) {
        if (alternate.mib == profile.memory_mib) {
          what += "; a known alternate" + (alternate.note.empty() ? "" : ": " + alternate.note);
          break;
        }
      }
      checks.push_back({CheckLevel::kInfo, gpu, what + ")", ""});
    }
  }
  const int branch = DriverBranch(driver);
  for (const hw::GiProfile& known : mig.profiles) {
    bool offered = false;
    for (const device::GpuInstanceProfileInfo& profile : *profiles) {
      offered = offered || profile.id == known.smi_id;
    }
    if (offered) continue;
    ++differences;
    const std::string what = "driver does not offer " + known.name + " (profile ID " +
                             std::to_string(known.smi_id) + ") that the catalog lists for " +
                             model.id;
    if (known.min_driver_branch > 0 && branch > 0 && branch < known.min_driver_branch) {
      checks.push_back(
          {CheckLevel::kInfo, gpu,
           what + ": it needs driver R" + std::to_string(known.min_driver_branch) + " or newer",
           ""});
    } else {
      checks.push_back({CheckLevel::kWarn, gpu, what + ": layouts that use it cannot be applied",
                        "compare `nvidia-smi mig -lgip` with the catalog and correct it with "
                        "--catalog FILE (docs/CATALOG.md)"});
    }
  }
  if (differences == 0) {
    checks.push_back({CheckLevel::kPass, gpu,
                      "the driver's " + std::to_string(profiles->size()) +
                          " GPU instance profiles match the catalog",
                      ""});
  }
}

}  // namespace

int CompareVersions(const std::string& a, const std::string& b) {
  const std::vector<long> x = VersionParts(a);
  const std::vector<long> y = VersionParts(b);
  for (size_t i = 0; i < std::max(x.size(), y.size()); ++i) {
    const long p = i < x.size() ? x[i] : 0;
    const long q = i < y.size() ? y[i] : 0;
    if (p != q) return p < q ? -1 : 1;
  }
  return 0;
}

std::string ToString(CheckLevel level) {
  switch (level) {
    case CheckLevel::kPass:
      return "PASS";
    case CheckLevel::kInfo:
      return "INFO";
    case CheckLevel::kWarn:
      return "WARN";
    case CheckLevel::kFail:
      return "FAIL";
  }
  return "FAIL";
}

std::vector<Check> RunDoctor(device::Backend& backend, const hw::Catalog& catalog,
                             const DoctorOptions& options) {
  std::vector<Check> checks;
  absl::StatusOr<std::string> driver = backend.DriverVersion();
  if (!driver.ok()) {
    checks.push_back({CheckLevel::kFail, "node",
                      "cannot read the driver version: " + std::string(driver.status().message()),
                      "install the NVIDIA driver, or use --sim for a simulated machine"});
    return checks;
  }
  checks.push_back(
      {CheckLevel::kPass, "node", backend.Describe() + " answers (driver " + *driver + ")", ""});
  if (options.simulated) {
    checks.push_back(
        {CheckLevel::kInfo, "node", "simulated machine: CUDA and host-process checks skipped", ""});
  } else {
    if (void* cuda = ::dlopen(options.cuda_library.c_str(), RTLD_NOW | RTLD_LOCAL);
        cuda != nullptr) {
      ::dlclose(cuda);
      checks.push_back(
          {CheckLevel::kPass, "node", options.cuda_library + " loads (CUDA programs can run)", ""});
    } else {
      checks.push_back({CheckLevel::kWarn, "node", options.cuda_library + " cannot be loaded",
                        "install the CUDA driver library (part of the NVIDIA driver); software "
                        "slicing and CUDA workloads need it"});
    }
    const std::vector<util::FoundProcess> k8s =
        util::FindProcesses(options.proc_root, {{"nvidia-device-p", "nvidia-device-plugin"},
                                                {"gpu-feature-dis", "gpu-feature-discovery"},
                                                {"dcgm-exporter", "dcgm-exporter"},
                                                {"nv-hostengine", "nv-hostengine (DCGM)"},
                                                {"k8s-device-plug", "k8s-device-plugin"}});
    if (k8s.empty()) {
      checks.push_back({CheckLevel::kInfo, "node",
                        "no Kubernetes device plugin or GPU monitoring agent runs here", ""});
    }
    for (const util::FoundProcess& process : k8s) {
      checks.push_back({CheckLevel::kWarn, "node",
                        process.name + " runs (pid " + std::to_string(process.pid) +
                            "): it holds GPUs and lists their instances",
                        "stop it before changing MIG modes and restart it after (an apply hooks "
                        "file can do this, as mig-parted's does)"});
    }
  }
  absl::StatusOr<std::vector<device::GpuInfo>> gpus = backend.ListGpus();
  if (!gpus.ok()) {
    checks.push_back({CheckLevel::kFail, "node",
                      "cannot list GPUs: " + std::string(gpus.status().message()), ""});
    return checks;
  }
  if (gpus->empty())
    checks.push_back({CheckLevel::kWarn, "node", "no GPU found", "check `nvidia-smi -L`"});
  for (const device::GpuInfo& info : *gpus) {
    const std::string gpu = "GPU " + std::to_string(info.index);
    const hw::GpuModel* model = info.model != nullptr ? info.model : catalog.Find(info.name);
    if (model == nullptr) {
      checks.push_back({CheckLevel::kWarn, gpu, info.name + " is not in the GPU catalog",
                        "describe it in a catalog file and pass --catalog FILE (docs/CATALOG.md)"});
    }
    if (!info.mig_capable) {
      checks.push_back({CheckLevel::kInfo, gpu,
                        info.name + " has no MIG: share it by software slicing (fractional GPUs)",
                        ""});
      continue;
    }
    checks.push_back({CheckLevel::kPass, gpu, info.name + " is MIG-capable", ""});
    if (model != nullptr && model->mig) {
      if (CompareVersions(*driver, model->mig->min_driver) < 0) {
        checks.push_back({CheckLevel::kFail, gpu,
                          "driver " + *driver + " is older than MIG on " + model->id + " needs (" +
                              model->mig->min_driver + ")",
                          "upgrade the driver to " + model->mig->min_driver + " or newer"});
      } else {
        checks.push_back({CheckLevel::kPass, gpu,
                          "driver " + *driver + " supports MIG on " + model->id + " (needs " +
                              model->mig->min_driver + ")",
                          ""});
      }
    }
    const char* current = info.mig_current == device::MigMode::kEnabled ? "enabled" : "disabled";
    if (info.mig_current != info.mig_pending) {
      checks.push_back(
          {CheckLevel::kWarn, gpu,
           std::string("MIG mode is ") + current + " with a change to " +
               (info.mig_pending == device::MigMode::kEnabled ? "enabled" : "disabled") +
               " pending",
           "reset the GPU (nothing may hold it) or reboot; `gpuslice apply` does the "
           "reset and names what blocks it"});
    } else {
      checks.push_back({CheckLevel::kInfo, gpu, std::string("MIG mode is ") + current, ""});
    }
    absl::StatusOr<GpuSnapshot> snapshot = TakeSnapshot(backend, info.index);
    if (!snapshot.ok()) {
      checks.push_back({CheckLevel::kFail, gpu,
                        "cannot read its state: " + std::string(snapshot.status().message()), ""});
      continue;
    }
    for (const std::string& holder : snapshot->holders) {
      checks.push_back(
          {CheckLevel::kWarn, gpu, holder + " holds the GPU: a MIG mode change would stay pending",
           "stop it before changing the MIG mode (e.g. systemctl stop nvidia-persistenced; "
           "unload nvidia_drm when no display needs it)"});
    }
    if (!snapshot->processes.empty()) {
      checks.push_back({CheckLevel::kInfo, gpu,
                        std::to_string(snapshot->processes.size()) +
                            " GPU process(es) run: instances they use will not be destroyed "
                            "without --force",
                        ""});
    }
    if (model != nullptr && model->mig) {
      if (info.mig_current == device::MigMode::kEnabled) {
        CompareProfiles(backend, info, *model, *driver, gpu, checks);
      } else {
        checks.push_back({CheckLevel::kInfo, gpu,
                          "GPU instance profiles not compared with the catalog: the driver lists "
                          "them only while MIG is enabled",
                          ""});
      }
    }
    if (info.mig_current == device::MigMode::kEnabled) {
      size_t without_ci = 0;
      for (const auto& cis : snapshot->cis) without_ci += cis.empty() ? 1U : 0U;
      if (without_ci > 0) {
        checks.push_back(
            {CheckLevel::kWarn, gpu,
             std::to_string(without_ci) +
                 " GPU instance(s) without a compute instance: unusable by CUDA",
             "re-run `gpuslice apply` (it completes them) or create their compute instances"});
      } else {
        checks.push_back(
            {CheckLevel::kInfo, gpu,
             std::to_string(snapshot->gis.size()) + " GPU instance(s), all with compute instances",
             ""});
      }
    }
  }
  return checks;
}

}  // namespace gpuslice::agent
