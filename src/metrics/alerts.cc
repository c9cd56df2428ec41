#include "gpuslice/metrics/alerts.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpuslice/util/parse_error.h"

namespace gpuslice::metrics {
namespace {

using json = nlohmann::json;
using Labels = std::vector<std::pair<std::string, std::string>>;

}  // namespace

const std::vector<std::pair<std::string, std::string>>& AlertKinds() {
  static const std::vector<std::pair<std::string, std::string>> kKinds = {
      {"idle", "warning"},           {"memory_high", "warning"},
      {"out_of_memory", "critical"}, {"process_exited", "warning"},
      {"xid", "critical"},           {"throttled", "warning"},
      {"memory_errors", "critical"}, {"row_remap_failure", "critical"},
      {"gpu_lost", "critical"}};
  return kKinds;
}

namespace {

std::string SeverityOf(const std::string& kind) {
  for (const auto& [name, severity] : AlertKinds()) {
    if (name == kind) return severity;
  }
  return "warning";
}

std::string Percent(double ratio) { return absl::StrCat(static_cast<int>(ratio * 100 + 0.5), "%"); }

std::string DeviceText(int gpu, const std::optional<int>& gi) {
  return gi ? absl::StrCat("GPU ", gpu, " GI ", *gi) : absl::StrCat("GPU ", gpu);
}

// A device on the machine: a whole GPU or a MIG instance, with its memory.
struct Device {
  std::string uuid;
  int gpu = -1;
  std::optional<int> gi;
  std::optional<std::int64_t> used;
  std::optional<std::int64_t> total;
};

std::vector<Device> DevicesOf(const MachineFigures& machine) {
  std::vector<Device> out;
  for (const GpuFigures& gpu : machine.gpus) {
    if (!gpu.mig) {
      out.push_back({gpu.uuid, gpu.index, std::nullopt, gpu.memory_used_mib, gpu.memory_total_mib});
      continue;
    }
    for (const InstanceFigures& instance : gpu.instances) {
      if (instance.uuid.empty()) continue;
      out.push_back({instance.uuid, gpu.index, instance.gi, instance.memory_used_mib,
                     instance.memory_total_mib});
    }
  }
  return out;
}

}  // namespace

json AlertToJson(const Alert& a) {
  json out = {{"key", a.key},         {"kind", a.kind},     {"severity", a.severity},
              {"host", a.host},       {"gpu", a.gpu},       {"device", a.device_uuid},
              {"lease", a.lease},     {"tenant", a.tenant}, {"class", a.class_name},
              {"message", a.message}, {"since", a.since},   {"cleared", a.cleared}};
  out["gi"] = a.gi ? json(*a.gi) : json(nullptr);
  return out;
}

absl::StatusOr<Alert> AlertFromJson(const json& in) {
  if (!in.is_object()) return absl::InvalidArgumentError("an alert must be an object");
  Alert a;
  try {
    auto text = [&](const char* key, std::string* out, bool required) {
      if (!in.contains(key)) {
        if (required) throw util::ParseError(absl::StrCat("missing '", key, "'"));
        return;
      }
      *out = in.at(key).get<std::string>();
    };
    text("key", &a.key, true);
    text("kind", &a.kind, true);
    text("severity", &a.severity, false);
    text("host", &a.host, false);
    text("device", &a.device_uuid, false);
    text("tenant", &a.tenant, false);
    text("class", &a.class_name, false);
    text("message", &a.message, true);
    if (in.contains("gpu")) a.gpu = in.at("gpu").get<int>();
    if (in.contains("gi") && !in.at("gi").is_null()) a.gi = in.at("gi").get<int>();
    if (in.contains("lease")) a.lease = in.at("lease").get<std::int64_t>();
    if (in.contains("since")) a.since = in.at("since").get<std::int64_t>();
    if (in.contains("cleared")) a.cleared = in.at("cleared").get<std::int64_t>();
  } catch (const std::exception& error) {
    return absl::InvalidArgumentError(absl::StrCat("bad alert: ", error.what()));
  }
  if (a.key.empty() || a.kind.empty() || a.message.empty()) {
    return absl::InvalidArgumentError("an alert needs a key, a kind and a message");
  }
  if (a.severity.empty()) a.severity = SeverityOf(a.kind);
  if (a.severity != "warning" && a.severity != "critical") {
    return absl::InvalidArgumentError("an alert's severity is warning or critical");
  }
  return a;
}

AlertChanges AlertTracker::Update(const MachineFigures& machine, const std::vector<Holder>& holders,
                                  std::int64_t now_s) {
  std::map<std::string, const Holder*> holder_of;
  for (const Holder& holder : holders) holder_of[holder.device_uuid] = &holder;
  // The conditions that hold now, by key.
  std::map<std::string, Alert> now;
  auto raise = [&](const std::string& kind, const std::string& key_suffix, int gpu,
                   std::optional<int> gi, const std::string& uuid, std::string message) {
    Alert a;
    a.kind = kind;
    a.key = absl::StrCat(kind, "/", key_suffix);
    a.severity = SeverityOf(kind);
    a.host = machine.host;
    a.gpu = gpu;
    a.gi = gi;
    a.device_uuid = uuid;
    if (auto it = holder_of.find(uuid); it != holder_of.end()) {
      a.lease = it->second->lease;
      a.tenant = it->second->tenant;
      a.class_name = it->second->class_name;
      message += absl::StrCat(" (lease ", a.lease, ", tenant ", a.tenant, ")");
    }
    a.message = std::move(message);
    a.since = now_s;
    now.emplace(a.key, std::move(a));
  };

  // GPUs: lost, throttled, memory errors, Xid.
  std::set<std::string> listed;
  for (const GpuFigures& gpu : machine.gpus) {
    listed.insert(gpu.uuid);
    gpu_index_[gpu.uuid] = gpu.index;
    if (gpu.lost) {
      raise("gpu_lost", gpu.uuid, gpu.index, std::nullopt, gpu.uuid,
            absl::StrCat("GPU ", gpu.index, " (", gpu.uuid,
                         ") answers GPU_IS_LOST: it fell off "
                         "the bus; its workloads are gone until it is reset or the machine "
                         "reboots"));
      continue;
    }
    const device::GpuTelemetry& t = gpu.telemetry;
    if (t.throttle_reasons && (*t.throttle_reasons & device::kThrottleThermalOrPower) != 0) {
      std::vector<std::string> reasons;
      for (const auto& [bit, name] : ThrottleReasonNames()) {
        if ((*t.throttle_reasons & bit & device::kThrottleThermalOrPower) != 0) {
          reasons.push_back(name);
        }
      }
      std::string detail;
      if (t.temperature_c) absl::StrAppend(&detail, ", ", *t.temperature_c, " C");
      if (t.power_w && t.power_limit_w) {
        absl::StrAppend(&detail, ", ", static_cast<int>(*t.power_w), " of ",
                        static_cast<int>(*t.power_limit_w), " W");
      }
      raise("throttled", gpu.uuid, gpu.index, std::nullopt, gpu.uuid,
            absl::StrCat("GPU ", gpu.index, " clocks held back: ", absl::StrJoin(reasons, ", "),
                         detail));
    }
    const auto before = ecc_uncorrected_.find(gpu.uuid);
    if (t.ecc_uncorrected && before != ecc_uncorrected_.end() &&
        *t.ecc_uncorrected > before->second) {
      raise("memory_errors", absl::StrCat(gpu.uuid, "/", *t.ecc_uncorrected), gpu.index,
            std::nullopt, gpu.uuid,
            absl::StrCat("GPU ", gpu.index, " uncorrected ECC errors grew from ", before->second,
                         " to ", *t.ecc_uncorrected));
    }
    if (t.ecc_uncorrected) ecc_uncorrected_[gpu.uuid] = *t.ecc_uncorrected;
    if (t.remap_failure.value_or(false)) {
      raise("row_remap_failure", gpu.uuid, gpu.index, std::nullopt, gpu.uuid,
            absl::StrCat("GPU ", gpu.index, " failed to remap a memory row: it needs service"));
    }
  }
  for (const auto& [uuid, seen] : gpus_) {
    if (listed.contains(uuid)) continue;
    raise("gpu_lost", uuid, seen.index, std::nullopt, uuid,
          absl::StrCat("GPU ", seen.index, " (", uuid, ", ", seen.name,
                       ") is no longer listed by the driver"));
  }
  for (const device::XidEvent& x : machine.xids) {
    std::string uuid;
    for (const GpuFigures& gpu : machine.gpus) {
      if (gpu.index == x.gpu) uuid = gpu.uuid;
    }
    // A MIG instance's Xid is charged to the lease holding that instance.
    std::string device_uuid = uuid;
    for (const GpuFigures& gpu : machine.gpus) {
      if (gpu.index != x.gpu || !x.gi) continue;
      for (const InstanceFigures& instance : gpu.instances) {
        if (instance.gi == *x.gi && !instance.uuid.empty()) device_uuid = instance.uuid;
      }
    }
    ++xid_total_[{uuid, x.xid}];
    last_xid_[uuid] = x.xid;
    raise("xid", absl::StrCat(device_uuid, "/", x.xid, "/", now_s), x.gpu, x.gi, device_uuid,
          absl::StrCat("Xid ", x.xid, " on ", DeviceText(x.gpu, x.gi)));
  }

  // Devices: memory high; processes that ended.
  const std::vector<Device> devices = DevicesOf(machine);
  std::map<std::string, DeviceMemory> memory_now;
  for (const Device& d : devices) {
    if (!d.used || !d.total || *d.total <= 0) continue;
    memory_now[d.uuid] = {*d.used, *d.total};
    const double ratio = static_cast<double>(*d.used) / static_cast<double>(*d.total);
    if (ratio >= policy_.memory_high_ratio) {
      raise("memory_high", d.uuid, d.gpu, d.gi, d.uuid,
            absl::StrCat(DeviceText(d.gpu, d.gi), " memory at ", Percent(ratio), " (", *d.used,
                         " of ", *d.total, " MiB)"));
    }
  }
  std::map<std::uint32_t, SeenProcess> processes_now;
  for (const GpuFigures& gpu : machine.gpus) {
    if (gpu.lost || !gpu.processes) continue;  // unknown: no process is taken for gone
    for (const device::ProcessInfo& p : gpu.process_list) {
      SeenProcess seen{p.name, gpu.uuid, gpu.index, std::nullopt};
      if (gpu.mig && p.gi >= 0) {
        seen.gi = p.gi;
        for (const InstanceFigures& instance : gpu.instances) {
          if (instance.gi == p.gi && !instance.uuid.empty()) seen.device_uuid = instance.uuid;
        }
      }
      processes_now[p.pid] = seen;
    }
  }
  std::set<std::string> known_gpus;  // GPUs whose process list was read now
  for (const GpuFigures& gpu : machine.gpus) {
    if (!gpu.lost && gpu.processes) known_gpus.insert(gpu.uuid);
  }
  for (const auto& [pid, seen] : processes_) {
    if (processes_now.contains(pid)) continue;
    std::string gpu_uuid;
    for (const auto& [uuid, index] : gpu_index_) {
      if (index == seen.gpu) gpu_uuid = uuid;
    }
    if (!known_gpus.contains(gpu_uuid)) continue;
    const auto before = memory_.find(seen.device_uuid);
    const double ratio =
        before != memory_.end() && before->second.total > 0
            ? static_cast<double>(before->second.used) / static_cast<double>(before->second.total)
            : 0;
    const std::string who =
        absl::StrCat("process ", pid, " (", seen.name, ") on ", DeviceText(seen.gpu, seen.gi));
    if (ratio >= policy_.oom_ratio) {
      raise("out_of_memory", absl::StrCat(seen.device_uuid, "/", pid), seen.gpu, seen.gi,
            seen.device_uuid,
            absl::StrCat(who, " ended with the device's memory at ", Percent(ratio),
                         ": most likely out of memory"));
    } else if (holder_of.contains(seen.device_uuid)) {
      raise("process_exited", absl::StrCat(seen.device_uuid, "/", pid), seen.gpu, seen.gi,
            seen.device_uuid, absl::StrCat(who, " ended"));
    }
  }

  // Leases idle beyond their class's threshold.
  for (const Holder& holder : holders) {
    if (holder.idle_threshold_s <= 0 || !holder.idle_s || *holder.idle_s < holder.idle_threshold_s)
      continue;
    int gpu = -1;
    std::optional<int> gi;
    for (const Device& d : devices) {
      if (d.uuid == holder.device_uuid) {
        gpu = d.gpu;
        gi = d.gi;
      }
    }
    raise("idle", absl::StrCat(holder.device_uuid, "/", holder.lease), gpu, gi, holder.device_uuid,
          absl::StrCat(gpu >= 0 ? DeviceText(gpu, gi) : holder.device_uuid, " idle for ",
                       *holder.idle_s, " s, beyond its class's ", holder.idle_threshold_s, " s"));
  }

  // What changed.
  AlertChanges changes;
  for (auto& [key, alert] : now) {
    if (active_.contains(key)) continue;
    ++fired_total_[alert.kind];
    changes.fired.push_back(alert);
    active_.emplace(key, alert);
  }
  for (auto it = active_.begin(); it != active_.end();) {
    const Alert& alert = it->second;
    const bool event = alert.kind == "xid" || alert.kind == "out_of_memory" ||
                       alert.kind == "process_exited" || alert.kind == "memory_errors";
    const bool holds = event ? now_s < alert.since + policy_.event_hold_s : now.contains(it->first);
    if (holds) {
      ++it;
      continue;
    }
    Alert done = alert;
    done.cleared = now_s;
    changes.cleared.push_back(std::move(done));
    it = active_.erase(it);
  }

  // Remember this collection.
  for (const GpuFigures& gpu : machine.gpus) gpus_[gpu.uuid] = {gpu.index, gpu.name};
  // A GPU missing from the list stays remembered (its alert holds until it is back).
  for (const auto& [pid, seen] : processes_now) processes_[pid] = seen;
  for (auto it = processes_.begin(); it != processes_.end();) {
    std::string gpu_uuid;
    for (const auto& [uuid, index] : gpu_index_) {
      if (index == it->second.gpu) gpu_uuid = uuid;
    }
    // Forget processes that ended (on GPUs read now); keep those of GPUs not read this time.
    if (!processes_now.contains(it->first) && known_gpus.contains(gpu_uuid)) {
      it = processes_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [uuid, m] : memory_now) memory_[uuid] = m;
  return changes;
}

std::vector<Family> AlertTracker::Families(const std::string& host) const {
  Family active;
  active.name = "gpuslice_alerts";
  active.help = "Active alerts on this machine, by kind and severity.";
  for (const auto& [kind, severity] : AlertKinds()) {
    const auto count =
        std::count_if(active_.begin(), active_.end(),
                      [&k = kind](const auto& entry) { return entry.second.kind == k; });
    active.samples.push_back(
        {{{"kind", kind}, {"severity", severity}, {"Hostname", host}}, static_cast<double>(count)});
  }
  Family fired;
  fired.name = "gpuslice_alerts_fired_total";
  fired.help = "Alerts fired on this machine since the collector started, by kind.";
  fired.type = MetricType::kCounter;
  for (const auto& [kind, severity] : AlertKinds()) {
    const auto it = fired_total_.find(kind);
    fired.samples.push_back({{{"kind", kind}, {"Hostname", host}},
                             static_cast<double>(it == fired_total_.end() ? 0 : it->second)});
  }
  Family xids;
  xids.name = "gpuslice_xid_errors_total";
  xids.help = "Critical Xid errors the driver reported since the collector started.";
  xids.type = MetricType::kCounter;
  Family last;
  last.name = "DCGM_FI_DEV_XID_ERRORS";
  last.help = "Value of the last XID error encountered.";
  for (const auto& [where, count] : xid_total_) {
    const auto index = gpu_index_.find(where.first);
    xids.samples.push_back(
        {{{"gpu", index != gpu_index_.end() ? std::to_string(index->second) : ""},
          {"UUID", where.first},
          {"Hostname", host},
          {"xid", std::to_string(where.second)}},
         static_cast<double>(count)});
  }
  for (const auto& [uuid, xid] : last_xid_) {
    const auto index = gpu_index_.find(uuid);
    last.samples.push_back(
        {{{"gpu", index != gpu_index_.end() ? std::to_string(index->second) : ""},
          {"UUID", uuid},
          {"Hostname", host}},
         static_cast<double>(xid)});
  }
  return {active, fired, xids, last};
}

}  // namespace gpuslice::metrics
