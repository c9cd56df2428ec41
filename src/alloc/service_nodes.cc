#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "gpuslice/alloc/inventory.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/alloc/wire.h"
#include "gpuslice/device/uuid.h"
#include "gpuslice/util/utf8.h"
#include "service_internal.h"

// The allocation service's machines: agents' reports, their assignments, and fixed layouts.
namespace gpuslice::alloc {

using namespace internal;  // NOLINT(google-build-using-namespace): this library's own helpers

// ---- agents

absl::StatusOr<std::vector<device::GpuInfo>> Service::EffectiveGpus(const std::string& host) const {
  auto report = remotes_.find(host);
  if (report == remotes_.end()) {
    return absl::NotFoundError(absl::StrCat("no machine '", host, "' has reported"));
  }
  absl::StatusOr<std::vector<device::GpuInfo>> gpus = GpusOf(report->second);
  if (!gpus.ok()) return gpus.status();
  if (auto layout = layouts_.find(host); layout != layouts_.end()) {
    for (device::GpuInfo& gpu : *gpus) {
      for (const GpuLayout& wanted : layout->second.gpus) {
        if (wanted.index != gpu.index || wanted.model != gpu.model->id || !gpu.mig_capable) {
          continue;
        }
        gpu.mig_current = wanted.mig ? device::MigMode::kEnabled : device::MigMode::kDisabled;
        gpu.mig_pending = gpu.mig_current;
      }
    }
  }
  return gpus;
}

absl::StatusOr<place::Cluster> Service::InventoryWithRemotes() const {
  std::vector<place::NodeSpec> specs;
  for (int n = 0; n < inventory_.node_count(); ++n) {
    // A machine that reports itself through an agent replaces what the service saw of it.
    if (!remotes_.contains(HostOf(inventory_.spec(n).name))) specs.push_back(inventory_.spec(n));
  }
  for (const auto& [host, report] : remotes_) {
    absl::StatusOr<std::vector<device::GpuInfo>> gpus = EffectiveGpus(host);
    if (!gpus.ok()) return gpus.status();
    std::map<int, place::FixedLayout> fixed;
    if (auto layout = layouts_.find(host); layout != layouts_.end()) {
      for (const GpuLayout& gpu : layout->second.gpus) {
        if (gpu.mig) fixed[gpu.index] = place::FixedLayout{true, gpu.instances};
      }
    }
    absl::StatusOr<place::Cluster> machine =
        InventoryFromGpus(host, *gpus, report.cpu_milli, report.memory_mib, false, &fixed);
    if (!machine.ok()) return machine.status();
    for (int n = 0; n < machine->node_count(); ++n) specs.push_back(machine->spec(n));
  }
  return place::Cluster::Create(std::move(specs));
}

std::map<std::string, std::vector<std::string>> Service::GpuOrder(const std::string& host) const {
  std::map<std::string, std::vector<std::string>> order;
  absl::StatusOr<std::vector<device::GpuInfo>> gpus = EffectiveGpus(host);
  if (!gpus.ok()) return order;
  for (const device::GpuInfo& gpu : *gpus) {
    // GPUs reported without a UUID are known by their NVML index.
    order[NodeNameFor(host, gpu, false)].push_back(gpu.uuid.empty() ? absl::StrCat("#", gpu.index)
                                                                    : gpu.uuid);
  }
  return order;
}

std::vector<HeldDevice> Service::HeldOn(const std::string& host) const {
  std::vector<HeldDevice> held;
  absl::StatusOr<std::vector<device::GpuInfo>> gpus = EffectiveGpus(host);
  if (!gpus.ok()) return held;
  std::map<std::string, std::vector<int>> indexes;  // placement node -> NVML index per position
  for (const device::GpuInfo& gpu : *gpus) {
    indexes[NodeNameFor(host, gpu, false)].push_back(gpu.index);
  }
  auto add = [&](const Active& active) {
    if (HostOf(active.lease.node) != host) return;
    const std::vector<int>& at = indexes[active.lease.node];
    for (const place::GpuClaim& claim : active.allocation.gpus) {
      if (claim.gpu < 0 || static_cast<size_t>(claim.gpu) >= at.size()) continue;
      held.push_back(HeldDevice{active.lease.id, at[static_cast<size_t>(claim.gpu)],
                                claim.whole || claim.mig_profile < 0, claim.mig_profile,
                                claim.mig_start});
    }
  };
  for (const auto& [id, active] : active_) add(active);
  for (const auto& [id, active] : draining_) add(active);
  return held;
}

void Service::StageNode(const std::string& host) {
  Stage("DELETE FROM nodes WHERE host = ?", {host});
  auto report = remotes_.find(host);
  if (report == remotes_.end()) return;
  auto layout = layouts_.find(host);
  auto cleared = cleared_generation_.find(host);
  const std::string stored = layout != layouts_.end() ? LayoutToJson(layout->second).dump()
                             : cleared != cleared_generation_.end()
                                 ? json{{"cleared_generation", cleared->second}}.dump()
                                 : std::string();
  Stage("INSERT INTO nodes (host, report, seen_at, layout) VALUES (?, ?, ?, ?)",
        {host, ReportJson(report->second).dump(), report->second.seen_at, stored});
}

absl::Status Service::Replace(const std::string& host,
                              const std::map<std::string, std::vector<std::string>>& old_order) {
  absl::StatusOr<place::Cluster> cluster = InventoryWithRemotes();
  if (!cluster.ok()) return cluster.status();
  absl::StatusOr<std::unique_ptr<place::Policy>> policy =
      place::MakePolicy(options_.policy, place::PolicyOptions{});
  if (!policy.ok()) return policy.status();
  place::Engine engine(*std::move(cluster), *std::move(policy));
  std::map<std::string, int> node_index;
  for (int n = 0; n < engine.cluster().node_count(); ++n) {
    node_index[engine.cluster().spec(n).name] = n;
  }
  // A claim names its GPU by position on the node: follow each GPU of the re-reported machine by
  // its UUID to its new position, so that a lease stays on its physical GPU or is lost with it.
  std::map<std::string, std::vector<std::string>> new_order = GpuOrder(host);
  std::map<std::int64_t, Active> kept;
  std::vector<std::pair<Lease, std::string>> lost;
  for (auto& [id, active] : active_) {
    auto it = node_index.find(active.lease.node);
    if (it == node_index.end()) {
      lost.emplace_back(active.lease, "its node left the inventory");
      continue;
    }
    place::Allocation allocation = active.allocation;
    allocation.node = it->second;
    if (!old_order.empty() && HostOf(active.lease.node) == host) {
      auto old_node = old_order.find(active.lease.node);
      const std::vector<std::string> was =
          old_node == old_order.end() ? std::vector<std::string>{} : old_node->second;
      // A GPU that moved to another placement node of the machine (its MIG mode changed) is not
      // followed: the lease's claim means nothing there.
      auto new_node = new_order.find(active.lease.node);
      const std::vector<std::string> is =
          new_node == new_order.end() ? std::vector<std::string>{} : new_node->second;
      std::string gone;
      for (place::GpuClaim& claim : allocation.gpus) {
        const std::string uuid = claim.gpu >= 0 && static_cast<size_t>(claim.gpu) < was.size()
                                     ? was[static_cast<size_t>(claim.gpu)]
                                     : "";
        auto at = std::find(is.begin(), is.end(), uuid);
        if (uuid.empty() || at == is.end()) {
          gone = uuid;
          break;
        }
        claim.gpu = static_cast<int>(at - is.begin());
      }
      if (!gone.empty() || allocation.gpus.size() != active.allocation.gpus.size()) {
        lost.emplace_back(active.lease, absl::StrCat("its GPU ", gone, " left the machine"));
        continue;
      }
      if (ClaimsToJson(allocation.gpus) != ClaimsToJson(active.allocation.gpus)) {
        Stage("UPDATE leases SET claims = ? WHERE id = ?",
              {ClaimsToJson(allocation.gpus).dump(), id});
      }
    }
    absl::StatusOr<place::Allocation> taken = engine.Adopt(allocation);
    if (!taken.ok()) {
      lost.emplace_back(active.lease, std::string(taken.status().message()));
      continue;
    }
    Lease lease = active.lease;
    lease.claims = taken->gpus;
    kept[id] = Active{lease, *taken};
  }
  for (auto it = draining_.begin(); it != draining_.end();) {
    auto node = node_index.find(it->second.lease.node);
    place::Allocation allocation = it->second.allocation;
    if (node != node_index.end()) allocation.node = node->second;
    absl::StatusOr<place::Allocation> taken =
        node == node_index.end() ? absl::NotFoundError("gone") : engine.Adopt(allocation);
    if (!taken.ok()) {
      it = draining_.erase(it);
      continue;
    }
    it->second.allocation = *taken;
    ++it;
  }
  engine_ = std::move(engine);
  active_ = std::move(kept);
  // Device lines name a GPU by its position on its node, on the new engine's nodes.
  for (auto& [id, active] : active_) {
    active.lease.devices = DeviceLines(active.allocation.node, active.allocation.gpus);
  }
  const Caller system{"gpuslice", "", Role::kAdmin, ""};
  for (const auto& [lease, why] : lost) {
    Stage("UPDATE leases SET state = 'lost', ended_at = ? WHERE id = ?", {Now(), lease.id});
    Audited(system, lease.tenant, "lose", absl::StrCat("lease ", lease.id), lease.purpose,
            json{{"why", why}}.dump());
  }
  return absl::OkStatus();
}

absl::Status Service::CheckMachine(const Caller& caller, const std::string& host) {
  absl::Status allowed = NeedMachine(caller, host);
  if (allowed.ok() || caller.role != Role::kAgent) return allowed;
  // An agent reaching for another machine is worth an admin's attention: audited, durably.
  const absl::Status audited =
      Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::Status {
        Audited(caller, "", "agent.refuse", host, "",
                json{{"machine", caller.machine}, {"why", std::string(allowed.message())}}.dump());
        return absl::OkStatus();
      });
  return audited.ok() ? allowed : audited;
}

absl::Status Service::ReportNode(const Caller& caller, const NodeReport& report) {
  if (absl::Status s = CheckMachine(caller, report.host); !s.ok()) return s;
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::Status {
    if (!ValidName(report.host)) {
      return absl::InvalidArgumentError("host: 1-64 letters, digits, '-', '_' or '.'");
    }
    if (report.gpus.empty() || report.gpus.size() > 64) {
      return absl::InvalidArgumentError("gpus: between 1 and 64 GPUs");
    }
    if (report.cpu_milli < 0 || report.cpu_milli > (1LL << 40) || report.memory_mib < 0 ||
        report.memory_mib > (1LL << 40)) {
      return absl::InvalidArgumentError("cpu_milli and memory_mib: 0 or more, within reason");
    }
    std::set<int> indexes;
    for (const NodeReport::Gpu& g : report.gpus) {
      if (g.index < 0 || !indexes.insert(g.index).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("gpus: index ", g.index, " is negative or given twice"));
      }
      if (!device::IsGpuUuid(g.uuid)) {
        return absl::InvalidArgumentError(
            absl::StrCat("gpus: index ", g.index,
                         ": uuid must be a GPU UUID as NVML gives it "
                         "(GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)"));
      }
    }
    if (absl::StatusOr<std::vector<device::GpuInfo>> gpus = GpusOf(report); !gpus.ok()) {
      return gpus.status();
    }
    std::optional<NodeReport> before;
    std::map<std::string, std::vector<std::string>> old_order;
    if (auto previous = remotes_.find(report.host); previous != remotes_.end()) {
      before = previous->second;
      old_order = GpuOrder(report.host);
    }
    NodeReport stored = report;
    stored.seen_at = Now();
    remotes_[report.host] = stored;
    if (absl::StatusOr<place::Cluster> cluster = InventoryWithRemotes(); !cluster.ok()) {
      if (before.has_value()) {
        remotes_[report.host] = *before;
      } else {
        remotes_.erase(report.host);
      }
      return cluster.status();
    }
    StageNode(report.host);
    // The inventory changes only when the GPUs do (an agent reports again at every start).
    if (!before.has_value() || ReportJson(*before) != ReportJson(report)) {
      Audited(caller, "", "node.report", report.host, "", ReportJson(report).dump());
      if (absl::Status s = Replace(report.host, old_order); !s.ok()) return s;
      return GrantQueued().status();
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<NodeReport>> Service::Nodes(const Caller& caller) {
  if (absl::Status s = NeedAdminOrAgent(caller); !s.ok()) return s;
  util::MutexLock lock(mutex_);
  std::vector<NodeReport> out;
  for (const auto& [host, report] : remotes_) {
    if (caller.role == Role::kAdmin || host == caller.machine) out.push_back(report);
  }
  return out;
}

absl::StatusOr<std::vector<Assignment>> Service::Assignments(const Caller& caller,
                                                             const std::string& host) {
  if (absl::Status s = CheckMachine(caller, host); !s.ok()) return s;
  util::MutexLock lock(mutex_);
  if (!remotes_.contains(host)) {
    return absl::NotFoundError(absl::StrCat("no machine '", host, "' has reported"));
  }
  std::vector<Assignment> out;
  for (const auto& [id, active] : active_) {
    if (HostOf(active.lease.node) != host) continue;
    Assignment a;
    a.lease = id;
    a.node = active.lease.node;
    a.claims = active.lease.claims;
    a.bound = active.lease.bound;
    a.tenant = active.lease.tenant;
    a.class_name = active.lease.class_name;
    if (auto klass = classes_.find(active.lease.class_name); klass != classes_.end()) {
      a.idle_timeout_s = klass->second.idle_timeout_s;
    }
    out.push_back(std::move(a));
  }
  return out;
}

absl::StatusOr<std::vector<std::int64_t>> Service::ReportBound(
    const Caller& caller, const std::string& host,
    const std::map<std::int64_t, std::vector<BoundDevice>>& bound) {
  if (absl::Status s = CheckMachine(caller, host); !s.ok()) return s;
  return Changing(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::StatusOr<std::vector<std::int64_t>> {
        if (!remotes_.contains(host)) {
          return absl::NotFoundError(absl::StrCat("no machine '", host, "' has reported"));
        }
        for (const auto& [id, devices] : bound) {
          for (const BoundDevice& d : devices) {
            if (!device::IsDeviceUuid(d.uuid) ||
                (!d.gpu_uuid.empty() && !device::IsGpuUuid(d.gpu_uuid))) {
              return absl::InvalidArgumentError(
                  absl::StrCat("lease ", id,
                               ": uuid and gpu_uuid must be device UUIDs as NVML gives "
                               "them (GPU-... or MIG-...)"));
            }
          }
        }
        std::vector<std::int64_t> ignored;
        for (const auto& [id, devices] : bound) {
          auto it = active_.find(id);
          if (it == active_.end() || HostOf(it->second.lease.node) != host ||
              devices.size() != it->second.lease.claims.size()) {
            ignored.push_back(id);
            continue;
          }
          Lease& lease = it->second.lease;
          if (lease.bound == devices) continue;
          lease.bound = devices;
          Stage("UPDATE leases SET bound = ? WHERE id = ?", {BoundToJson(devices).dump(), id});
        }
        return ignored;
      });
}

absl::StatusOr<std::vector<std::int64_t>> Service::ReportUsage(
    const Caller& caller, const std::string& host,
    const std::map<std::int64_t, std::int64_t>& idle_s, std::int64_t valid_s) {
  if (absl::Status s = CheckMachine(caller, host); !s.ok()) return s;
  if (valid_s < 1 || valid_s > 24 * 3600) {
    return absl::InvalidArgumentError("valid_s: between 1 and 86400 seconds");
  }
  for (const auto& [id, idle] : idle_s) {
    if (idle < 0 || idle > kMaxTtlSeconds) {
      return absl::InvalidArgumentError(absl::StrCat("leases.", id, ": idle seconds out of range"));
    }
  }
  util::MutexLock lock(mutex_);
  if (!remotes_.contains(host)) {
    return absl::NotFoundError(absl::StrCat("no machine '", host, "' has reported"));
  }
  std::vector<std::int64_t> ignored;
  const std::int64_t now = Now();
  for (const auto& [id, idle] : idle_s) {
    auto it = active_.find(id);
    if (it == active_.end() || HostOf(it->second.lease.node) != host) {
      ignored.push_back(id);
      continue;
    }
    remote_idle_[id] = RemoteIdle{idle, now + valid_s};
  }
  return ignored;
}

// ---- layouts

absl::StatusOr<LayoutOutcome> Service::SetLayout(const Caller& caller, const std::string& host,
                                                 const LayoutRequest& request) {
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::StatusOr<LayoutOutcome> {
    if (absl::Status s = NeedAdmin(caller); !s.ok()) return s;
    if (!remotes_.contains(host)) {
      return absl::NotFoundError(absl::StrCat("no machine '", host, "' has reported"));
    }
    const std::string origin = request.origin.empty() ? "layout" : request.origin;
    if (origin.size() > kMaxTextBytes || request.config_name.size() > kMaxTextBytes) {
      return absl::InvalidArgumentError("origin and config: at most 1024 characters");
    }
    absl::StatusOr<spec::MigConfigFile> file =
        spec::ParseMigPartedConfig(request.config_text, origin);
    if (!file.ok()) return file.status();
    const std::string config =
        request.config_name.empty() ? DefaultLayoutConfig(*file, host) : request.config_name;
    absl::StatusOr<std::vector<device::GpuInfo>> gpus = EffectiveGpus(host);
    if (!gpus.ok()) return gpus.status();
    absl::StatusOr<ResolvedLayout> resolved = ResolveLayout(*file, config, *gpus, HeldOn(host));
    if (!resolved.ok()) {
      // A layout that cannot exist on these GPUs is a fault of the request, not of the state.
      if (absl::IsFailedPrecondition(resolved.status())) {
        return absl::InvalidArgumentError(resolved.status().message());
      }
      return resolved.status();
    }
    LayoutOutcome outcome;
    const std::string source =
        absl::StrCat(origin, ", config ", config.empty() ? file->configs.front().first : config);
    if (!resolved->conflicts.empty()) {
      json blocking = json::array();
      for (const LayoutConflict& conflict : resolved->conflicts) {
        auto it = active_.find(conflict.lease);
        const bool draining = it == active_.end();
        if (draining) it = draining_.find(conflict.lease);
        if (it == draining_.end()) continue;
        BlockingLease b{
            it->second.lease, conflict.gpu_index,
            draining ? conflict.why + " (lease ended; processes still hold it)" : conflict.why};
        blocking.push_back({{"lease", b.lease.id}, {"gpu", b.gpu_index}, {"why", b.why}});
        outcome.blocking.push_back(std::move(b));
      }
      Audited(caller, "", "layout.refuse", host, "",
              json{{"source", source}, {"blocking", blocking}}.dump());
      return outcome;
    }
    const std::map<std::string, std::vector<std::string>> old_order = GpuOrder(host);
    NodeLayout layout;
    layout.host = host;
    if (auto cleared = cleared_generation_.find(host); cleared != cleared_generation_.end()) {
      layout.generation = cleared->second;
    }
    if (auto previous = layouts_.find(host); previous != layouts_.end()) {
      layout.generation = previous->second.generation;
      layout.applied_generation = previous->second.applied_generation;
      layout.reported_generation = previous->second.reported_generation;
      layout.reported_at = previous->second.reported_at;
    }
    layout.generation += 1;
    layout.source = source;
    layout.set_by = caller.user;
    layout.set_at = Now();
    layout.gpus = resolved->gpus;
    std::optional<NodeLayout> before;
    if (auto previous = layouts_.find(host); previous != layouts_.end()) before = previous->second;
    layouts_[host] = layout;
    if (absl::StatusOr<place::Cluster> cluster = InventoryWithRemotes(); !cluster.ok()) {
      if (before.has_value()) {
        layouts_[host] = *before;
      } else {
        layouts_.erase(host);
      }
      return cluster.status();
    }
    StageNode(host);
    json gpus_json = json::object();
    for (const GpuLayout& gpu : layout.gpus) {
      gpus_json[std::to_string(gpu.index)] = DescribeGpuLayout(gpu);
    }
    Audited(
        caller, "", "layout.set", host, "",
        json{{"source", source}, {"generation", layout.generation}, {"gpus", gpus_json}}.dump());
    if (absl::Status s = Replace(host, old_order); !s.ok()) return s;
    if (absl::Status s = GrantQueued().status(); !s.ok()) return s;
    outcome.accepted = true;
    outcome.layout = layout;
    return outcome;
  });
}

absl::StatusOr<LayoutOutcome> Service::ClearLayout(const Caller& caller, const std::string& host) {
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::StatusOr<LayoutOutcome> {
    if (absl::Status s = NeedAdmin(caller); !s.ok()) return s;
    auto current = layouts_.find(host);
    if (current == layouts_.end()) {
      return absl::NotFoundError(absl::StrCat("machine '", host, "' has no layout"));
    }
    absl::StatusOr<std::vector<device::GpuInfo>> with = EffectiveGpus(host);
    if (!with.ok()) return with.status();
    const std::map<std::string, std::vector<std::string>> old_order = GpuOrder(host);
    const std::vector<HeldDevice> held = HeldOn(host);
    const NodeLayout before = current->second;
    layouts_.erase(current);
    absl::StatusOr<std::vector<device::GpuInfo>> without = EffectiveGpus(host);
    LayoutOutcome outcome;
    if (!without.ok()) {
      layouts_[host] = before;
      return without.status();
    }
    // Without the layout, a GPU goes back to its reported MIG mode: leases on GPUs whose mode
    // would change stand in the way.
    for (size_t g = 0; g < with->size() && g < without->size(); ++g) {
      if ((*with)[g].mig_current == (*without)[g].mig_current) continue;
      for (const HeldDevice& h : held) {
        if (h.gpu_index != (*with)[g].index) continue;
        auto it = active_.find(h.lease);
        if (it == active_.end()) continue;
        outcome.blocking.push_back(
            {it->second.lease, h.gpu_index,
             "its GPU would go back to its reported MIG mode; the agent has not applied the "
             "layout's yet"});
      }
    }
    if (!outcome.blocking.empty()) {
      layouts_[host] = before;
      json blocking = json::array();
      for (const BlockingLease& b : outcome.blocking) {
        blocking.push_back({{"lease", b.lease.id}, {"gpu", b.gpu_index}, {"why", b.why}});
      }
      Audited(caller, "", "layout.refuse", host, "",
              json{{"clear", true}, {"blocking", blocking}}.dump());
      return outcome;
    }
    cleared_generation_[host] = before.generation;
    StageNode(host);
    Audited(caller, "", "layout.clear", host, "",
            json{{"generation", before.generation}, {"source", before.source}}.dump());
    if (absl::Status s = Replace(host, old_order); !s.ok()) return s;
    if (absl::Status s = GrantQueued().status(); !s.ok()) return s;
    outcome.accepted = true;
    return outcome;
  });
}

absl::StatusOr<std::optional<NodeLayout>> Service::GetLayout(const Caller& caller,
                                                             const std::string& host) {
  if (absl::Status s = CheckMachine(caller, host); !s.ok()) return s;
  util::MutexLock lock(mutex_);
  if (!remotes_.contains(host)) {
    return absl::NotFoundError(absl::StrCat("no machine '", host, "' has reported"));
  }
  auto it = layouts_.find(host);
  if (it == layouts_.end()) return std::optional<NodeLayout>();
  return std::optional<NodeLayout>(it->second);
}

absl::Status Service::ReportLayout(const Caller& caller, const std::string& host,
                                   std::int64_t generation, const std::string& message) {
  if (absl::Status s = CheckMachine(caller, host); !s.ok()) return s;
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::Status {
    auto it = layouts_.find(host);
    if (it == layouts_.end()) {
      return absl::NotFoundError(absl::StrCat("machine '", host, "' has no layout"));
    }
    NodeLayout& layout = it->second;
    if (generation != layout.generation) {
      return absl::FailedPreconditionError(absl::StrCat(
          "layout generation ", generation, " is not the current one (", layout.generation, ")"));
    }
    const std::string clipped = util::Utf8Prefix(message, kMaxTextBytes);
    const bool changed =
        layout.reported_generation != generation || layout.agent_message != clipped;
    layout.reported_at = Now();
    if (!changed) return absl::OkStatus();
    layout.reported_generation = generation;
    if (clipped.empty()) layout.applied_generation = generation;
    layout.agent_message = clipped;
    StageNode(host);
    Audited(caller, "", clipped.empty() ? "layout.applied" : "layout.failed", host, "",
            json{{"generation", generation}, {"message", clipped}}.dump());
    return absl::OkStatus();
  });
}

}  // namespace gpuslice::alloc
