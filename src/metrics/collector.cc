#include "gpuslice/metrics/collector.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpuslice::metrics {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

Labels GpuLabels(const std::string& host, const GpuFigures& gpu) {
  return {{"gpu", std::to_string(gpu.index)},
          {"UUID", gpu.uuid},
          {"device", absl::StrCat("nvidia", gpu.index)},
          {"modelName", gpu.name},
          {"Hostname", host}};
}

Labels InstanceLabels(const std::string& host, const GpuFigures& gpu,
                      const InstanceFigures& instance) {
  Labels labels = GpuLabels(host, gpu);
  labels.emplace_back("GPU_I_ID", std::to_string(instance.gi));
  labels.emplace_back("GPU_I_PROFILE", instance.profile);
  return labels;
}

Family Gauge(std::string name, std::string help) {
  Family family;
  family.name = std::move(name);
  family.help = std::move(help);
  return family;
}

template <typename T>
void AddIf(Family& family, const Labels& labels, const std::optional<T>& value) {
  if (value.has_value()) family.samples.push_back({labels, static_cast<double>(*value)});
}

}  // namespace

MachineFigures Collect(device::Backend& backend, const std::string& host) {
  MachineFigures machine;
  machine.host = host;
  absl::StatusOr<std::vector<device::GpuInfo>> gpus = backend.ListGpus();
  if (!gpus.ok()) {
    machine.errors.push_back(absl::StrCat("listing GPUs: ", gpus.status().message()));
    return machine;
  }
  for (const device::GpuInfo& info : *gpus) {
    GpuFigures gpu;
    gpu.index = info.index;
    gpu.uuid = info.uuid;
    gpu.name = info.name;
    gpu.mig = info.mig_current == device::MigMode::kEnabled;
    const std::string where = absl::StrCat("GPU ", info.index, ": ");
    if (absl::StatusOr<device::MemoryInfo> memory = backend.GetMemory(info.index); memory.ok()) {
      gpu.memory_used_mib = memory->used_mib;
      gpu.memory_total_mib = memory->total_mib;
    } else {
      machine.errors.push_back(absl::StrCat(where, "memory: ", memory.status().message()));
    }
    absl::StatusOr<std::vector<device::ProcessInfo>> processes = backend.ListProcesses(info.index);
    if (processes.ok()) {
      gpu.processes = static_cast<int>(processes->size());
      gpu.process_memory_mib = 0;
      for (const device::ProcessInfo& p : *processes) *gpu.process_memory_mib += p.used_memory_mib;
    } else {
      machine.errors.push_back(absl::StrCat(where, "processes: ", processes.status().message()));
    }
    if (gpu.mig) {
      absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis =
          backend.ListGpuInstances(info.index);
      if (!gis.ok()) {
        machine.errors.push_back(absl::StrCat(where, "GPU instances: ", gis.status().message()));
      } else {
        for (const device::GpuInstanceInfo& gi : *gis) {
          InstanceFigures instance;
          instance.gi = gi.id;
          const hw::GiProfile* profile = info.model != nullptr && info.model->mig
                                             ? info.model->mig->FindProfileBySmiId(gi.profile_id)
                                             : nullptr;
          instance.profile =
              profile != nullptr ? profile->name : absl::StrCat("profile-", gi.profile_id);
          absl::StatusOr<std::vector<device::ComputeInstanceInfo>> cis =
              backend.ListComputeInstances(info.index, gi.id);
          if (!cis.ok()) {
            machine.errors.push_back(absl::StrCat(where, "GPU instance ", gi.id,
                                                  ": compute instances: ", cis.status().message()));
          } else if (!cis->empty()) {
            instance.uuid = cis->front().uuid;
            absl::StatusOr<device::MemoryInfo> memory =
                backend.GetMemory(info.index, gi.id, cis->front().id);
            if (memory.ok()) {
              instance.memory_used_mib = memory->used_mib;
              instance.memory_total_mib = memory->total_mib;
            } else {
              machine.errors.push_back(absl::StrCat(where, "GPU instance ", gi.id,
                                                    ": memory: ", memory.status().message()));
            }
          }
          if (processes.ok()) {
            instance.processes = 0;
            instance.process_memory_mib = 0;
            for (const device::ProcessInfo& p : *processes) {
              if (p.gi != gi.id) continue;
              *instance.processes += 1;
              *instance.process_memory_mib += p.used_memory_mib;
            }
          }
          gpu.instances.push_back(std::move(instance));
        }
      }
    }
    machine.gpus.push_back(std::move(gpu));
  }
  return machine;
}

std::vector<Family> Families(const MachineFigures& machine, const std::vector<Holder>& holders) {
  Family used = Gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).");
  Family free = Gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).");
  Family total = Gauge("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB).");
  Family mig = Gauge("gpuslice_gpu_mig_mode", "1 when the GPU's MIG mode is on.");
  Family processes =
      Gauge("gpuslice_processes", "Compute processes on the GPU or the MIG instance.");
  Family process_memory = Gauge("gpuslice_process_memory_mib",
                                "Memory used by the compute processes of the GPU or instance.");
  auto memory = [&](const Labels& labels, const std::optional<std::int64_t>& u,
                    const std::optional<std::int64_t>& t) {
    AddIf(used, labels, u);
    AddIf(total, labels, t);
    if (u.has_value() && t.has_value())
      free.samples.push_back({labels, static_cast<double>(*t - *u)});
  };
  // Which device UUID is where, for the leases' series.
  std::map<std::string, Labels> where;
  for (const GpuFigures& gpu : machine.gpus) {
    const Labels labels = GpuLabels(machine.host, gpu);
    where[gpu.uuid] = labels;
    memory(labels, gpu.memory_used_mib, gpu.memory_total_mib);
    mig.samples.push_back({labels, gpu.mig ? 1.0 : 0.0});
    AddIf(processes, labels, gpu.processes);
    AddIf(process_memory, labels, gpu.process_memory_mib);
    for (const InstanceFigures& instance : gpu.instances) {
      const Labels at = InstanceLabels(machine.host, gpu, instance);
      if (!instance.uuid.empty()) where[instance.uuid] = at;
      memory(at, instance.memory_used_mib, instance.memory_total_mib);
      AddIf(processes, at, instance.processes);
      AddIf(process_memory, at, instance.process_memory_mib);
    }
  }
  Family info = Gauge("gpuslice_lease_info",
                      "1 for each device a lease holds, with its lease, tenant and class.");
  Family idle = Gauge("gpuslice_lease_idle_seconds",
                      "Seconds the lease's devices have had no process (absent when unknown).");
  Family limit = Gauge("gpuslice_lease_vram_limit_mib", "The VRAM cap of a fractional share, MiB.");
  for (const Holder& holder : holders) {
    auto at = where.find(holder.device_uuid);
    Labels labels = at != where.end() ? at->second : Labels{{"UUID", holder.device_uuid}};
    if (at != where.end()) {
      // The device's own UUID: an instance's series carry the MIG device's.
      for (auto& [name, value] : labels) {
        if (name == "UUID") value = holder.device_uuid;
      }
    }
    labels.emplace_back("lease", std::to_string(holder.lease));
    labels.emplace_back("tenant", holder.tenant);
    labels.emplace_back("class", holder.class_name);
    info.samples.push_back({labels, 1});
    AddIf(idle, labels, holder.idle_s);
    if (holder.vram_limit_mib > 0) {
      limit.samples.push_back({labels, static_cast<double>(holder.vram_limit_mib)});
    }
  }
  Family errors = Gauge("gpuslice_collect_errors",
                        "Device queries that failed in the last collection (their figures are "
                        "absent).");
  errors.samples.push_back(
      {{{"Hostname", machine.host}}, static_cast<double>(machine.errors.size())});
  return {used, free, total, mig, processes, process_memory, info, idle, limit, errors};
}

}  // namespace gpuslice::metrics
