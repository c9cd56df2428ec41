#include "gpuslice/metrics/collector.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gpuslice/device/nvml_codes.h"

namespace gpuslice::metrics {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

// dcgm-exporter's pod, namespace and container labels when a pod holds `key`.
void AddPod(Labels& labels, const std::map<std::string, PodOwnerLabels>& pods,
            const std::string& key) {
  if (key.empty()) return;
  const auto owner = pods.find(key);
  if (owner == pods.end()) return;
  labels.emplace_back("pod", owner->second.pod);
  labels.emplace_back("namespace", owner->second.pod_namespace);
  labels.emplace_back("container", owner->second.container);
}

Labels GpuLabels(const MachineFigures& machine, const GpuFigures& gpu, bool with_pod = true) {
  Labels labels = {{"gpu", std::to_string(gpu.index)},
                   {"UUID", gpu.uuid},
                   {"device", absl::StrCat("nvidia", gpu.index)},
                   {"modelName", gpu.name},
                   {"Hostname", machine.host}};
  if (with_pod) AddPod(labels, machine.pods_by_uuid, gpu.uuid);
  return labels;
}

Labels InstanceLabels(const MachineFigures& machine, const GpuFigures& gpu,
                      const InstanceFigures& instance) {
  Labels labels = GpuLabels(machine, gpu, /*with_pod=*/false);
  labels.emplace_back("GPU_I_ID", std::to_string(instance.gi));
  labels.emplace_back("GPU_I_PROFILE", instance.profile);
  AddPod(labels, machine.pods_by_uuid, instance.uuid);
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

// A figure the backend does not give at all (no such query, not on this GPU or driver, or no
// second sample yet): absent without an error line.
bool NotGiven(const absl::Status& status) {
  return absl::IsUnimplemented(status) || absl::IsUnavailable(status) ||
         device::HasNvmlCode(status, device::kNvmlNotSupported);
}

bool Lost(const absl::Status& status) {
  return device::HasNvmlCode(status, device::kNvmlGpuIsLost);
}

Family Counter(std::string name, std::string help) {
  Family family = Gauge(std::move(name), std::move(help));
  family.type = MetricType::kCounter;
  return family;
}

// A slice's labels: slice, UUID (its GPU), Hostname, and lease for the slice of a lease
// ("lease-<id>", as `gpuslice run` names it through GPUSLICE_SLICE).
Labels SliceLabels(const MachineFigures& machine, const shim::SliceSnapshot& slice) {
  Labels labels = {{"slice", slice.id}, {"UUID", slice.gpu_uuid}, {"Hostname", machine.host}};
  AddPod(labels, machine.pods_by_slice, slice.id);
  const std::string lease = absl::StartsWith(slice.id, "lease-") ? slice.id.substr(6) : "";
  if (!lease.empty() && std::all_of(lease.begin(), lease.end(), absl::ascii_isdigit)) {
    labels.emplace_back("lease", lease);
  }
  return labels;
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
      if (Lost(memory.status())) {
        // Fallen off the bus: every other query would fail the same way.
        gpu.lost = true;
        machine.gpus.push_back(std::move(gpu));
        continue;
      }
    }
    absl::StatusOr<std::vector<device::ProcessInfo>> processes = backend.ListProcesses(info.index);
    if (processes.ok()) {
      gpu.processes = static_cast<int>(processes->size());
      gpu.process_memory_mib = 0;
      for (const device::ProcessInfo& p : *processes) *gpu.process_memory_mib += p.used_memory_mib;
      gpu.process_list = *processes;
    } else {
      machine.errors.push_back(absl::StrCat(where, "processes: ", processes.status().message()));
      gpu.lost = gpu.lost || Lost(processes.status());
    }
    if (absl::StatusOr<device::GpuTelemetry> health = backend.GetTelemetry(info.index);
        health.ok()) {
      gpu.telemetry = *health;
    } else if (!NotGiven(health.status())) {
      machine.errors.push_back(absl::StrCat(where, "health: ", health.status().message()));
      gpu.lost = gpu.lost || Lost(health.status());
    }
    if (absl::StatusOr<device::Activity> activity = backend.SampleActivity(info.index);
        activity.ok()) {
      gpu.activity = *activity;
    } else if (!NotGiven(activity.status())) {
      machine.errors.push_back(absl::StrCat(where, "activity: ", activity.status().message()));
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
              instance.process_list.push_back(p);
            }
          }
          absl::StatusOr<device::Activity> activity = backend.SampleActivity(info.index, gi.id);
          if (activity.ok()) {
            instance.activity = *activity;
          } else if (!NotGiven(activity.status())) {
            machine.errors.push_back(absl::StrCat(where, "GPU instance ", gi.id,
                                                  ": activity: ", activity.status().message()));
          }
          gpu.instances.push_back(std::move(instance));
        }
      }
    }
    machine.gpus.push_back(std::move(gpu));
  }
  return machine;
}

void CollectXids(device::Backend& backend, MachineFigures& machine) {
  if (absl::StatusOr<std::vector<device::XidEvent>> xids = backend.TakeXidEvents(); xids.ok()) {
    machine.xids.insert(machine.xids.end(), xids->begin(), xids->end());
  } else if (!NotGiven(xids.status())) {
    machine.errors.push_back(absl::StrCat("Xid events: ", xids.status().message()));
  }
}

void CollectSlices(const std::string& directory, MachineFigures& machine) {
  shim::SliceList list = shim::ListSlices(directory);
  for (std::string& error : list.errors) {
    machine.errors.push_back(absl::StrCat("software slices: ", error));
  }
  machine.slices = std::move(list.slices);
}

const std::vector<std::pair<std::uint64_t, std::string>>& ThrottleReasonNames() {
  static const std::vector<std::pair<std::uint64_t, std::string>> kNames = {
      {device::kThrottleGpuIdle, "gpu_idle"},
      {device::kThrottleApplicationsClocks, "applications_clocks"},
      {device::kThrottleSwPowerCap, "sw_power_cap"},
      {device::kThrottleHwSlowdown, "hw_slowdown"},
      {device::kThrottleSyncBoost, "sync_boost"},
      {device::kThrottleSwThermal, "sw_thermal"},
      {device::kThrottleHwThermal, "hw_thermal"},
      {device::kThrottleHwPowerBrake, "hw_power_brake"}};
  return kNames;
}

namespace {

// The per-GPU and per-MIG-instance series.
struct GpuFamilies {
  Family used = Gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).");
  Family free = Gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).");
  Family total = Gauge("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB).");
  Family mig = Gauge("gpuslice_gpu_mig_mode", "1 when the GPU's MIG mode is on.");
  Family processes =
      Gauge("gpuslice_processes", "Compute processes on the GPU or the MIG instance.");
  Family process_memory = Gauge("gpuslice_process_memory_mib",
                                "Memory used by the compute processes of the GPU or instance.");
  Family temperature = Gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).");
  Family power = Gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).");
  Family power_limit = Gauge("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Enforced power limit (in W).");
  Family sm_clock = Gauge("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).");
  Family mem_clock = Gauge("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).");
  Family utilization = Gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).");
  Family copy_utilization = Gauge("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).");
  Family throttle_bits =
      Gauge("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock throttle reasons (bitmask).");
  Family throttled =
      Gauge("gpuslice_gpu_throttled", "1 while the GPU's clocks are held back for this reason.");
  Family ecc_sbe = Gauge("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                         "Corrected (single-bit) ECC errors since the driver loaded.");
  Family ecc_dbe = Gauge("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                         "Uncorrected (double-bit) ECC errors since the driver loaded.");
  Family rows_correctable =
      Gauge("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Rows remapped for correctable errors.");
  Family rows_uncorrectable =
      Gauge("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Rows remapped for uncorrectable errors.");
  Family remap_failure =
      Gauge("DCGM_FI_DEV_ROW_REMAP_FAILURE", "1 when a row remap failed (the GPU needs service).");
  Family remap_pending =
      Gauge("gpuslice_gpu_row_remap_pending", "1 when a row remap waits for a GPU reset.");
  Family sm_active = Gauge("DCGM_FI_PROF_SM_ACTIVE",
                           "Ratio of cycles an SM has at least one warp assigned (GPM), per GPU "
                           "and per MIG instance.");
  Family sm_occupancy =
      Gauge("DCGM_FI_PROF_SM_OCCUPANCY", "Ratio of warps resident on an SM to its maximum (GPM).");
  Family dram_active = Gauge("DCGM_FI_PROF_DRAM_ACTIVE",
                             "Ratio of cycles the device memory interface is busy (GPM).");
  Family lost = Gauge("gpuslice_gpu_lost", "1 when the GPU fell off the bus (GPU_IS_LOST).");

  void AddActivity(const Labels& labels, const std::optional<device::Activity>& a) {
    if (!a.has_value()) return;
    sm_active.samples.push_back({labels, a->sm_active_pct / 100});
    sm_occupancy.samples.push_back({labels, a->sm_occupancy_pct / 100});
    dram_active.samples.push_back({labels, a->dram_bandwidth_pct / 100});
  }
  void AddMemory(const Labels& labels, const std::optional<std::int64_t>& u,
                 const std::optional<std::int64_t>& t) {
    AddIf(used, labels, u);
    AddIf(total, labels, t);
    if (u.has_value() && t.has_value())
      free.samples.push_back({labels, static_cast<double>(*t - *u)});
  }
  void AddTelemetry(const Labels& labels, const device::GpuTelemetry& t) {
    AddIf(temperature, labels, t.temperature_c);
    AddIf(power, labels, t.power_w);
    AddIf(power_limit, labels, t.power_limit_w);
    AddIf(sm_clock, labels, t.sm_clock_mhz);
    AddIf(mem_clock, labels, t.memory_clock_mhz);
    AddIf(utilization, labels, t.utilization_pct);
    AddIf(copy_utilization, labels, t.memory_utilization_pct);
    AddIf(throttle_bits, labels, t.throttle_reasons);
    if (t.throttle_reasons.has_value()) {
      for (const auto& [bit, reason] : ThrottleReasonNames()) {
        Labels with = labels;
        with.emplace_back("reason", reason);
        throttled.samples.push_back({with, (*t.throttle_reasons & bit) != 0 ? 1.0 : 0.0});
      }
    }
    AddIf(ecc_sbe, labels, t.ecc_corrected);
    AddIf(ecc_dbe, labels, t.ecc_uncorrected);
    AddIf(rows_correctable, labels, t.remapped_rows_correctable);
    AddIf(rows_uncorrectable, labels, t.remapped_rows_uncorrectable);
    AddIf(remap_failure, labels, t.remap_failure);
    AddIf(remap_pending, labels, t.remap_pending);
  }
  // Adds every GPU and instance of the machine; returns which device UUID is where, for the
  // leases' series.
  std::map<std::string, Labels> Add(const MachineFigures& machine) {
    std::map<std::string, Labels> where;
    for (const GpuFigures& gpu : machine.gpus) {
      const Labels labels = GpuLabels(machine, gpu);
      where[gpu.uuid] = labels;
      AddMemory(labels, gpu.memory_used_mib, gpu.memory_total_mib);
      mig.samples.push_back({labels, gpu.mig ? 1.0 : 0.0});
      AddIf(processes, labels, gpu.processes);
      AddIf(process_memory, labels, gpu.process_memory_mib);
      lost.samples.push_back({labels, gpu.lost ? 1.0 : 0.0});
      AddTelemetry(labels, gpu.telemetry);
      AddActivity(labels, gpu.activity);
      for (const InstanceFigures& instance : gpu.instances) {
        const Labels at = InstanceLabels(machine, gpu, instance);
        if (!instance.uuid.empty()) where[instance.uuid] = at;
        AddMemory(at, instance.memory_used_mib, instance.memory_total_mib);
        AddIf(processes, at, instance.processes);
        AddIf(process_memory, at, instance.process_memory_mib);
        AddActivity(at, instance.activity);
      }
    }
    return where;
  }
  void MoveInto(std::vector<Family>& out) {
    for (Family* family : {&used,
                           &free,
                           &total,
                           &mig,
                           &processes,
                           &process_memory,
                           &lost,
                           &temperature,
                           &power,
                           &power_limit,
                           &sm_clock,
                           &mem_clock,
                           &utilization,
                           &copy_utilization,
                           &throttle_bits,
                           &throttled,
                           &ecc_sbe,
                           &ecc_dbe,
                           &rows_correctable,
                           &rows_uncorrectable,
                           &remap_failure,
                           &remap_pending,
                           &sm_active,
                           &sm_occupancy,
                           &dram_active}) {
      out.push_back(std::move(*family));
    }
  }
};

// The series of the leases, on the labels of the device each holds.
struct LeaseFamilies {
  Family info = Gauge("gpuslice_lease_info",
                      "1 for each device a lease holds, with its lease, tenant and class.");
  Family idle = Gauge("gpuslice_lease_idle_seconds",
                      "Seconds the lease's devices have had no process (absent when unknown).");
  Family limit = Gauge("gpuslice_lease_vram_limit_mib", "The VRAM cap of a fractional share, MiB.");

  void Add(const std::vector<Holder>& holders, const std::map<std::string, Labels>& where) {
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
  }
  void MoveInto(std::vector<Family>& out) {
    for (Family* family : {&info, &idle, &limit}) {
      out.push_back(std::move(*family));
    }
  }
};

// The series of the software slices.
struct SliceFamilies {
  Family slice_used = Gauge("gpuslice_slice_vram_used_bytes",
                            "Device memory held by the live processes of a software slice.");
  Family slice_cap = Gauge("gpuslice_slice_vram_cap_bytes", "The VRAM cap of a software slice.");
  Family slice_peak =
      Gauge("gpuslice_slice_vram_peak_bytes", "The most device memory a software slice ever held.");
  Family slice_share =
      Gauge("gpuslice_slice_compute_share", "The compute share of a software slice (ratio 0-1).");
  Family slice_processes = Gauge("gpuslice_slice_processes", "Live processes of a software slice.");
  Family slice_kernel =
      Counter("gpuslice_slice_kernel_seconds_total", "GPU time of a software slice's kernels.");
  Family slice_throttled =
      Counter("gpuslice_slice_throttled_seconds_total",
              "Time a software slice's launches were held back for its compute share.");
  Family slice_launches =
      Counter("gpuslice_slice_launches_total", "Kernel and graph launches of a software slice.");
  Family slice_refused = Counter("gpuslice_slice_refused_allocations_total",
                                 "Device memory allocations refused at a software slice's cap.");
  Family slice_reclaimed = Counter(
      "gpuslice_slice_reclaimed_processes_total",
      "Dead processes of a software slice whose device memory was given back to the slice.");

  void Add(const MachineFigures& machine) {
    for (const shim::SliceSnapshot& slice : machine.slices) {
      const Labels labels = SliceLabels(machine, slice);
      slice_used.samples.push_back({labels, static_cast<double>(slice.used_bytes)});
      if (slice.cap_bytes > 0) {
        slice_cap.samples.push_back({labels, static_cast<double>(slice.cap_bytes)});
      }
      slice_peak.samples.push_back({labels, static_cast<double>(slice.peak_bytes)});
      if (slice.share_milli > 0) {
        slice_share.samples.push_back({labels, slice.share_milli / 1000.0});
      }
      const auto live = std::count_if(slice.processes.begin(), slice.processes.end(),
                                      [](const shim::SliceProcess& p) { return p.alive; });
      slice_processes.samples.push_back({labels, static_cast<double>(live)});
      slice_kernel.samples.push_back({labels, static_cast<double>(slice.kernel_ns) / 1e9});
      slice_throttled.samples.push_back({labels, static_cast<double>(slice.throttled_ns) / 1e9});
      slice_launches.samples.push_back({labels, static_cast<double>(slice.launches)});
      slice_refused.samples.push_back({labels, static_cast<double>(slice.refused)});
      slice_reclaimed.samples.push_back({labels, static_cast<double>(slice.reclaimed_processes)});
    }
  }
  void MoveInto(std::vector<Family>& out) {
    for (Family* family :
         {&slice_used, &slice_cap, &slice_peak, &slice_share, &slice_processes, &slice_kernel,
          &slice_throttled, &slice_launches, &slice_refused, &slice_reclaimed}) {
      out.push_back(std::move(*family));
    }
  }
};

}  // namespace

std::vector<Family> Families(const MachineFigures& machine, const std::vector<Holder>& holders) {
  GpuFamilies gpus;
  const std::map<std::string, Labels> where = gpus.Add(machine);
  LeaseFamilies leases;
  leases.Add(holders, where);
  SliceFamilies slices;
  slices.Add(machine);
  Family errors = Gauge("gpuslice_collect_errors",
                        "Device queries that failed in the last collection (their figures are "
                        "absent).");
  errors.samples.push_back(
      {{{"Hostname", machine.host}}, static_cast<double>(machine.errors.size())});
  // Moved, not copied: an initializer list would copy every sample.
  std::vector<Family> out;
  out.reserve(39);
  gpus.MoveInto(out);
  leases.MoveInto(out);
  slices.MoveInto(out);
  out.push_back(std::move(errors));
  return out;
}

}  // namespace gpuslice::metrics
