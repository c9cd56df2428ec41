#include "gpuslice/agent/node_agent.h"

#include <algorithm>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gpuslice/agent/layout_runner.h"
#include "gpuslice/alloc/inventory.h"
#include "gpuslice/alloc/layout.h"
#include "gpuslice/alloc/wire.h"
#include "gpuslice/k8s/pod_resources.h"
#include "gpuslice/shim/slices.h"
#include "gpuslice/util/clock.h"

namespace gpuslice::agent {
namespace {

using nlohmann::json;

std::string Log() { return "gpuslice agent: "; }

// The pods holding this machine's devices and slices, from kubelet's pod-resources API; nothing
// (and the reason among the collection's errors) when kubelet does not answer.
void AddPodOwners(const std::string& socket, metrics::MachineFigures& machine) {
  if (socket.empty()) return;
  absl::StatusOr<std::vector<k8s::PodDevice>> pods =
      k8s::ListPodDevices(socket, std::chrono::milliseconds(1000));
  if (!pods.ok()) {
    machine.errors.push_back(absl::StrCat("pod labels: ", pods.status().message()));
    return;
  }
  const k8s::Attribution attribution = k8s::Attribute(*pods);
  for (const auto& [uuid, owner] : attribution.by_uuid) {
    machine.pods_by_uuid[uuid] = {owner.pod_namespace, owner.pod, owner.container};
  }
  for (const auto& [slice, owner] : attribution.by_slice) {
    machine.pods_by_slice[slice] = {owner.pod_namespace, owner.pod, owner.container};
  }
}

// One call to the service: a 2xx answer, or the error (logged; an error answer's status has its
// HTTP status attached).
absl::StatusOr<api::Response> Answered(const api::Client& client, const std::string& method,
                                       const std::string& path, const json* body) {
  absl::StatusOr<api::Response> response = client.Call(method, path, body);
  absl::Status failed = response.ok() ? response->Check() : response.status();
  if (failed.ok()) return response;
  std::cerr << Log() << method << " " << path << ": "
            << (response.ok() ? absl::StrCat(response->status, ": ") : "") << failed.message()
            << "\n";
  return failed;
}

// A lease's usage figures as POST /v1/nodes/{host}/usage takes them (activity only when known).
void AddUsageFigures(const alloc::UsageFigures& f, json& entry) {
  entry["memory_used_mib"] = f.memory_used_mib;
  entry["memory_total_mib"] = f.memory_total_mib;
  entry["processes"] = f.processes;
  if (f.sm_active_pct.has_value()) entry["sm_active_pct"] = *f.sm_active_pct;
}

}  // namespace

NodeAgent::NodeAgent(NodeAgentOptions options, const hw::Catalog& catalog, api::Client client,
                     std::shared_ptr<device::SynchronizedBackend> backend,
                     std::vector<device::GpuInfo> gpus)
    : o_(std::move(options)),
      catalog_(catalog),
      client_(std::move(client)),
      backend_(std::move(backend)),
      gpus_(std::move(gpus)),
      alerts_(o_.host) {}

std::string NodeAgent::NodePath(const std::string& rest) const {
  return absl::StrCat("/v1/nodes/", o_.host, rest);
}

absl::Status NodeAgent::Report() {
  if (absl::StatusOr<std::vector<device::GpuInfo>> listed = backend_->ListGpus(); listed.ok()) {
    std::vector<device::GpuInfo> known;
    for (const device::GpuInfo& g : *listed) {
      if (g.model != nullptr) known.push_back(g);
    }
    if (!known.empty()) gpus_ = std::move(known);
  }
  json gpus = json::array();
  for (const device::GpuInfo& g : gpus_) {
    gpus.push_back({{"index", g.index},
                    {"uuid", g.uuid},
                    {"model", g.model->id},
                    {"mig", g.mig_current == device::MigMode::kEnabled}});
  }
  const json body = {{"cpu_milli", o_.cpu_milli}, {"memory_mib", o_.memory_mib}, {"gpus", gpus}};
  absl::StatusOr<api::Response> reply = Answered(client_, "PUT", NodePath(""), &body);
  if (!reply.ok()) return reply.status();
  absl::StatusOr<place::Cluster> cluster = alloc::InventoryFromGpus(
      o_.host, gpus_, o_.cpu_milli, o_.memory_mib, /*mig_if_capable=*/false);
  if (!cluster.ok()) {
    std::cerr << Log() << cluster.status().message() << "\n";
    return absl::InternalError(cluster.status().message());
  }
  cluster_ = std::make_unique<place::Cluster>(*std::move(cluster));
  binder_ = alloc::MakeBackendBinder(backend_, o_.host, gpus_, false);
  binder_->SetFixedGpus(fixed_);
  idle_.Rebind(binder_);
  std::cerr << Log() << "reported " << gpus_.size() << " GPUs of " << o_.host << " as "
            << reply->body["nodes"].dump() << "\n";
  return absl::OkStatus();
}

absl::Status NodeAgent::Sync() {
  absl::StatusOr<api::Response> reply = Answered(client_, "GET", NodePath("/assignments"), nullptr);
  if (!reply.ok()) {
    return api::IsRefusedCredential(reply.status()) ? reply.status() : absl::OkStatus();
  }
  if (absl::Status s = CarryOutLayout(reply->body["layout"]); !s.ok()) return s;
  std::set<std::int64_t> assigned;
  BindAssigned(reply->body["assignments"], assigned);
  TearDownEnded(assigned);
  // One collection of the machine per round, for the usage history, the alerts and the
  // scrapes until the next round.
  metrics::MachineFigures machine;
  {
    std::unique_lock<std::recursive_mutex> hold = backend_->Lock();
    CollectIdle();
    machine = metrics::Collect(*backend_, o_.host);
    metrics::CollectXids(*backend_, machine);
  }
  metrics::CollectSlices(shim::SliceDirectory(), machine);
  const std::vector<metrics::Holder> holders = PublishHolders(machine);
  ReportUsage(machine);
  ReportAlerts(machine, holders);
  return absl::OkStatus();
}

// Sets up each assigned lease's devices (a lease bound before keeps them) and reports the new
// ones; `assigned` ends as the leases the service still counts on this machine.
void NodeAgent::BindAssigned(const json& assignments, std::set<std::int64_t>& assigned) {
  std::map<std::string, int> node_index;
  for (int n = 0; n < cluster_->node_count(); ++n) node_index[cluster_->spec(n).name] = n;
  json report = json::object();
  for (const json& a : assignments) {
    const std::int64_t lease = a["lease"].get<std::int64_t>();
    assigned.insert(lease);
    auto node = node_index.find(a["node"].get<std::string>());
    if (node == node_index.end()) {
      std::cerr << Log() << "lease " << lease << " is on " << a["node"].get<std::string>()
                << ", which this machine does not have; report again\n";
      continue;
    }
    const std::vector<place::GpuClaim> claims = alloc::ClaimsFromJson(a["claims"]);
    std::unique_lock<std::recursive_mutex> hold = backend_->Lock();
    absl::StatusOr<std::vector<alloc::BoundDevice>> bound =
        binder_->Bind(*cluster_, node->second, claims,
                      // A lease set up before (by this agent or an earlier one) may find its
                      // instance busy; a new one must not take over an instance in use.
                      held_.contains(lease) || !alloc::BoundFromJson(a["bound"]).empty());
    if (!bound.ok()) {
      std::cerr << Log() << "lease " << lease << ": " << bound.status().message() << "\n";
      continue;
    }
    hold.unlock();
    held_[lease] = *bound;
    owners_[lease] = {a.value("tenant", std::string()), a.value("class", std::string()),
                      a.value("idle_timeout_s", std::int64_t{0})};
    if (alloc::BoundFromJson(a["bound"]) != *bound) {
      report[std::to_string(lease)] = alloc::BoundToJson(*bound);
    }
  }
  if (report.empty()) return;
  const json body = {{"leases", report}};
  absl::StatusOr<api::Response> done = Answered(client_, "POST", NodePath("/bound"), &body);
  if (!done.ok()) return;
  std::cerr << Log() << "set up " << report.size() << " lease(s)\n";
  for (const json& id : done->body["ignored"]) assigned.erase(id.get<std::int64_t>());
}

// Leases that ended: their instances go (busy ones stay until their processes are gone).
void NodeAgent::TearDownEnded(const std::set<std::int64_t>& assigned) {
  for (auto it = held_.begin(); it != held_.end();) {
    if (assigned.contains(it->first)) {
      ++it;
      continue;
    }
    std::unique_lock<std::recursive_mutex> hold = backend_->Lock();
    if (absl::Status s = binder_->Unbind(it->second); !s.ok()) {
      std::cerr << Log() << "lease " << it->first << " ended: " << s.message() << "\n";
      ++it;
      continue;
    }
    std::cerr << Log() << "lease " << it->first << " ended: its devices are torn down\n";
    it = held_.erase(it);
  }
}

// The latest round's collection serves while it is at most one interval old (as dcgm-exporter
// serves its last collection); an older one is collected afresh.
absl::StatusOr<std::string> NodeAgent::Scrape() {
  metrics::MachineFigures machine;
  std::vector<metrics::Holder> holders;
  bool fresh = false;
  {
    std::lock_guard<std::mutex> lock(holders_mutex_);
    holders = holders_;
    fresh = collected_at_.has_value() &&
            std::chrono::steady_clock::now() - *collected_at_ <=
                std::chrono::seconds(o_.interval_s) + std::chrono::milliseconds(500);
    if (fresh) machine = machine_;
  }
  if (!fresh) {
    {
      std::unique_lock<std::recursive_mutex> hold = backend_->Lock();
      machine = metrics::Collect(*backend_, o_.host);
    }
    metrics::CollectSlices(shim::SliceDirectory(), machine);
  }
  AddPodOwners(o_.pod_resources_socket, machine);
  machine.xids.clear();  // counted by the alert loop's families
  std::vector<metrics::Family> families = metrics::Families(machine, holders);
  for (metrics::Family& family : alerts_.Families()) families.push_back(std::move(family));
  return metrics::Write(families);
}

// Tells the service how long each lease's devices have been idle (no process on them), for
// the idle reclaim of classes with an idle timeout (the figures hold for three rounds), and
// each lease's usage for the history (memory, SM activity, processes) from one collection of
// the machine per round. A service too old for the usage figures (400) gets the idle ones alone.
void NodeAgent::ReportUsage(const metrics::MachineFigures& machine) {
  if (held_.empty()) return;
  const std::int64_t now = util::EpochNow();
  const std::string node = cluster_ != nullptr && cluster_->node_count() > 0
                               ? cluster_->spec(0).name
                               : o_.host;  // a placement node the binder handles
  json leases = json::object();
  json idle_only = json::object();
  for (const auto& [lease, devices] : held_) {
    json entry = json::object();
    const std::int64_t idle = idle_.IdleSeconds(lease, node, devices, now);
    if (idle >= 0) {
      entry["idle_s"] = idle;
      idle_only[std::to_string(lease)] = entry;
    }
    if (std::optional<alloc::UsageFigures> f = alloc::UsageFromFigures(machine, devices)) {
      AddUsageFigures(*f, entry);
    }
    if (!entry.empty()) leases[std::to_string(lease)] = entry;
  }
  if (leases.empty()) return;
  const json body = {{"leases", leases}, {"valid_s", 3 * o_.interval_s + 5}};
  absl::StatusOr<api::Response> reply = Answered(client_, "POST", NodePath("/usage"), &body);
  if (!reply.ok() && api::HttpStatusOf(reply.status()) == 400 && !idle_only.empty() &&
      idle_only != leases) {
    const json old = {{"leases", idle_only}, {"valid_s", 3 * o_.interval_s + 5}};
    (void)Answered(client_, "POST", NodePath("/usage"), &old);
  }
}

// Makes the GPUs match the machine's fixed layout (null: none) and tells the service how it
// went when that changed. A MIG mode change is reported to the service as a new report.
absl::Status NodeAgent::CarryOutLayout(const json& wanted) {
  if (wanted.is_null()) {
    fixed_.clear();
    binder_->SetFixedGpus(fixed_);
    return absl::OkStatus();
  }
  absl::StatusOr<alloc::NodeLayout> layout = alloc::LayoutFromJson(o_.host, wanted);
  if (!layout.ok()) {
    std::cerr << Log()
              << "the service sent a layout this agent cannot read: " << layout.status().message()
              << "\n";
    return absl::OkStatus();
  }
  LayoutRun run;
  {
    // One reconciler round (snapshot, plan, steps) without a scrape in between.
    std::unique_lock<std::recursive_mutex> hold = backend_->Lock();
    run = agent::CarryOutLayout(*backend_, catalog_, *layout);
  }
  fixed_ = run.fixed;
  binder_->SetFixedGpus(fixed_);
  if (run.changed) {
    std::cerr << Log() << "layout " << layout->generation << " carried out: " << run.created
              << " instance(s) created, " << run.destroyed << " destroyed, " << run.kept
              << " kept\n";
  }
  if (run.modes_changed) {
    if (absl::Status s = Report(); api::IsRefusedCredential(s)) return s;
  }
  if (!LayoutReportDue(*layout, run)) return absl::OkStatus();
  if (!run.message.empty()) {
    std::cerr << Log() << "layout " << layout->generation << " not carried out: " << run.message
              << "\n";
  }
  const json body = {{"generation", layout->generation}, {"message", run.message}};
  absl::StatusOr<api::Response> done = Answered(client_, "POST", NodePath("/layout/status"), &body);
  return !done.ok() && api::IsRefusedCredential(done.status()) ? done.status() : absl::OkStatus();
}

// Sends what the round's collection fired and cleared (and what earlier rounds could not send).
void NodeAgent::ReportAlerts(const metrics::MachineFigures& machine,
                             const std::vector<metrics::Holder>& holders) {
  const metrics::AlertChanges found =
      alerts_.Round(machine, holders, util::EpochNow(), [&](const metrics::AlertChanges& changes) {
        json fired = json::array();
        json cleared = json::array();
        for (const metrics::Alert& a : changes.fired) fired.push_back(metrics::AlertToJson(a));
        for (const metrics::Alert& a : changes.cleared) cleared.push_back(metrics::AlertToJson(a));
        const json body = {{"fired", fired}, {"cleared", cleared}};
        if (!Answered(client_, "POST", NodePath("/alerts"), &body).ok()) {
          return absl::UnavailableError("the service did not take the alerts");
        }
        return absl::OkStatus();
      });
  for (const metrics::Alert& a : found.fired) {
    std::cerr << Log() << "alert (" << a.severity << "): " << a.message << "\n";
  }
}

// The leases held now, their devices, idle time and class threshold, for the scrapes and the
// alerts; also keeps the round's collection for the scrapes.
std::vector<metrics::Holder> NodeAgent::PublishHolders(const metrics::MachineFigures& machine) {
  const std::int64_t now = util::EpochNow();
  const std::string node =
      cluster_ != nullptr && cluster_->node_count() > 0 ? cluster_->spec(0).name : o_.host;
  std::vector<metrics::Holder> holders;
  for (auto it = owners_.begin(); it != owners_.end();) {
    it = held_.contains(it->first) ? std::next(it) : owners_.erase(it);
  }
  for (const auto& [lease, devices] : held_) {
    std::optional<std::int64_t> idle_s;
    if (const std::int64_t s = idle_.IdleSeconds(lease, node, devices, now); s >= 0) idle_s = s;
    const auto owner = owners_.find(lease);
    for (const alloc::BoundDevice& d : devices) {
      metrics::Holder holder{d.uuid, lease, "", "", idle_s, d.vram_mib};
      if (owner != owners_.end()) {
        holder.tenant = owner->second.tenant;
        holder.class_name = owner->second.class_name;
        holder.idle_threshold_s = owner->second.idle_timeout_s;
      }
      holders.push_back(std::move(holder));
    }
  }
  std::lock_guard<std::mutex> lock(holders_mutex_);
  holders_ = holders;
  machine_ = machine;
  collected_at_ = std::chrono::steady_clock::now();
  return holders;
}

// Instances found on the GPUs at the first round were not made by this agent: they are kept
// (said once, with what they are), unless --remove-foreign-instances.
void NodeAgent::NoteForeign() {
  if (foreign_noted_) return;
  foreign_noted_ = true;
  for (const device::GpuInfo& gpu : gpus_) {
    if (gpu.mig_current != device::MigMode::kEnabled || fixed_.contains(gpu.index)) continue;
    absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis =
        backend_->ListGpuInstances(gpu.index);
    if (!gis.ok()) continue;
    for (const device::GpuInstanceInfo& gi : *gis) {
      if (HeldBy(gpu.index, gi.id)) continue;
      foreign_.insert({gpu.index, gi.id});
      std::cerr << Log() << "GPU " << gpu.index << " has GPU instance " << gi.id << " (profile id "
                << gi.profile_id << " at " << gi.start << ") that no lease holds: "
                << (o_.remove_foreign_instances
                        ? "it is removed when idle (--remove-foreign-instances)"
                        : "kept; slices that need its place cannot be set up until it is "
                          "removed (--remove-foreign-instances, or a fixed layout with `gpuslice "
                          "node set-layout`)")
                << "\n";
    }
  }
}

bool NodeAgent::HeldBy(int gpu, int gi) const {
  for (const auto& [lease, devices] : held_) {
    for (const alloc::BoundDevice& d : devices) {
      if (d.gpu_index == gpu && d.gi == gi) return true;
    }
  }
  return false;
}

// Destroys idle MIG instances that no lease holds (left by an earlier agent or by hand), on
// GPUs without a fixed layout; those noted as foreign stay unless --remove-foreign-instances.
void NodeAgent::CollectIdle() {
  NoteForeign();
  for (const device::GpuInfo& gpu : gpus_) {
    if (gpu.mig_current != device::MigMode::kEnabled || fixed_.contains(gpu.index)) continue;
    absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis =
        backend_->ListGpuInstances(gpu.index);
    absl::StatusOr<std::vector<device::ProcessInfo>> processes = backend_->ListProcesses(gpu.index);
    if (!gis.ok() || !processes.ok()) continue;
    for (const device::GpuInstanceInfo& gi : *gis) {
      if (HeldBy(gpu.index, gi.id)) continue;
      if (foreign_.contains({gpu.index, gi.id}) && !o_.remove_foreign_instances) continue;
      const bool busy = std::any_of(processes->begin(), processes->end(),
                                    [&](const device::ProcessInfo& p) { return p.gi == gi.id; });
      if (busy) continue;
      absl::StatusOr<std::vector<device::ComputeInstanceInfo>> cis =
          backend_->ListComputeInstances(gpu.index, gi.id);
      if (!cis.ok()) continue;
      for (const device::ComputeInstanceInfo& ci : *cis) {
        (void)backend_->DestroyComputeInstance(gpu.index, gi.id, ci.id);
      }
      if (backend_->DestroyGpuInstance(gpu.index, gi.id).ok()) {
        std::cerr << Log() << "removed idle GPU instance " << gi.id << " on GPU " << gpu.index
                  << " that no lease holds\n";
      }
    }
  }
}

absl::Status RunNodeAgent(NodeAgent& agent, int interval_s, bool once,
                          const std::atomic<bool>& stop) {
  while (!stop) {  // until the service takes the report (it may not be up yet)
    const absl::Status reported = agent.Report();
    if (reported.ok()) break;
    if (once || api::IsRefusedCredential(reported)) return reported;
    std::this_thread::sleep_for(std::chrono::seconds(interval_s));
  }
  auto last_report = std::chrono::steady_clock::now();
  while (!stop) {
    if (absl::Status s = agent.Sync(); !s.ok()) return s;
    if (once) break;
    for (int i = 0; i < interval_s * 10 && !stop; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (std::chrono::steady_clock::now() - last_report > std::chrono::seconds(30)) {
      (void)agent.Report();  // the service may have restarted on a fresh store
      last_report = std::chrono::steady_clock::now();
    }
  }
  std::cerr << Log() << "stopped\n";
  return absl::OkStatus();
}

}  // namespace gpuslice::agent
