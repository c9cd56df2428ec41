// `gpuslice agent --server URL`: the agent of one machine. It reports the machine's GPUs to the
// allocation service, then, every --interval seconds, sets up the slices the service granted on
// this machine (MIG instances at their exact placements, through the device backend), reports
// their device UUIDs back, and tears down the instances of leases that ended (an instance with
// processes on it stays until they are gone).
//
// MIG layouts: when an admin has fixed the machine's layout (PUT /v1/nodes/{host}/layout), the
// agent carries it out with the reconciler (gpuslice/agent/apply.h: matching instances stay, busy
// ones are never destroyed) before it sets up leases, reports the outcome, and keeps the layout's
// instances when leases end. On GPUs without a fixed layout the agent removes the idle instances
// of ended leases; instances that were there when it started (someone's layout) are kept and
// named in its log, unless --remove-foreign-instances.
//
// Monitoring: with --metrics-listen HOST:PORT the agent answers GET /metrics (Prometheus text,
// metrics_listener.h) with the families serve gives for its own machine: this machine's GPUs and
// MIG instances (metrics::Collect, read under the backend's lock, so never in the middle of a
// round's device changes), the software slices of this machine (the interposer's accounting files
// in $GPUSLICE_SHM_DIR, else /dev/shm/gpuslice) and the leases it holds with their idle time as of
// its latest round.
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "alert_runner.h"
#include "client.h"
#include "common.h"
#include "gpuslice/alloc/binder.h"
#include "gpuslice/alloc/inventory.h"
#include "gpuslice/alloc/layout.h"
#include "gpuslice/alloc/usage.h"
#include "gpuslice/alloc/wire.h"
#include "gpuslice/device/nvml_backend.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/device/sim_machine.h"
#include "gpuslice/device/synchronized_backend.h"
#include "gpuslice/k8s/pod_resources.h"
#include "gpuslice/metrics/collector.h"
#include "gpuslice/shim/slices.h"
#include "layout_runner.h"
#include "metrics_listener.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

std::atomic<bool> g_stop{false};
void OnStop(int) { g_stop = true; }

struct AgentOptions {
  ClientOptions c;
  std::string host;
  std::string sim_fleet;
  std::string sim_state;
  int interval_s = 2;
  bool once = false;
  std::string metrics_listen;        // HOST:PORT for GET /metrics; empty: none
  std::string metrics_token_file;    // the bearer token scrapes must send
  std::string pod_resources_socket;  // kubelet's pod-resources API; empty: no pod labels
  // MIG instances that were on the GPUs when the agent started (someone's layout, an earlier
  // agent's leftovers) are kept unless this is set; then the idle ones are removed.
  bool remove_foreign_instances = false;
};

// The pods holding this machine's devices and slices, from kubelet's pod-resources API; nothing
// (and the reason on stderr once) when kubelet does not answer.
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

std::string Log() { return "gpuslice agent: "; }

class Agent {
 public:
  Agent(const AgentOptions& options, const hw::Catalog& catalog,
        std::shared_ptr<device::SynchronizedBackend> backend, std::vector<device::GpuInfo> gpus)
      : o_(options), catalog_(catalog), backend_(std::move(backend)), gpus_(std::move(gpus)) {}

  // Reports the GPUs (listed again: their MIG modes may have changed); builds the placement view
  // the service will have of this machine.
  int Report() {
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
    json body = {
        {"cpu_milli", MachineCpuMilli()}, {"memory_mib", MachineMemoryMib()}, {"gpus", gpus}};
    Reply reply;
    if (int rc = Call(o_.c, "PUT", "/v1/nodes/" + o_.host, &body, &reply); rc != 0) return rc;
    absl::StatusOr<place::Cluster> cluster = alloc::InventoryFromGpus(
        o_.host, gpus_, MachineCpuMilli(), MachineMemoryMib(), /*mig_if_capable=*/false);
    if (!cluster.ok()) {
      PrintError(std::string(cluster.status().message()));
      return 1;
    }
    cluster_ = std::make_unique<place::Cluster>(*std::move(cluster));
    binder_ = alloc::MakeBackendBinder(backend_, o_.host, gpus_, false);
    binder_->SetFixedGpus(fixed_);
    idle_.Rebind(binder_);
    std::cerr << Log() << "reported " << gpus_.size() << " GPUs of " << o_.host << " as "
              << reply.body["nodes"].dump() << "\n";
    return kExitOk;
  }

  // One round: set up what is assigned, report it, tear down what ended. Returns an exit code
  // only for errors that end the agent (a refused token); others are logged and retried.
  int Sync() {
    Reply reply;
    if (int rc = Call(o_.c, "GET", "/v1/nodes/" + o_.host + "/assignments", nullptr, &reply);
        rc != 0) {
      return rc == 3 ? rc : kExitOk;
    }
    if (int rc = CarryOutLayout(reply.body["layout"]); rc != kExitOk) return rc;
    std::map<std::string, int> node_index;
    for (int n = 0; n < cluster_->node_count(); ++n) node_index[cluster_->spec(n).name] = n;
    json report = json::object();
    std::set<std::int64_t> assigned;
    for (const json& a : reply.body["assignments"]) {
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
      if (alloc::BoundFromJson(a["bound"]) != *bound)
        report[std::to_string(lease)] = alloc::BoundToJson(*bound);
    }
    if (!report.empty()) {
      json body = {{"leases", report}};
      Reply done;
      if (Call(o_.c, "POST", "/v1/nodes/" + o_.host + "/bound", &body, &done) == 0) {
        std::cerr << Log() << "set up " << report.size() << " lease(s)\n";
        for (const json& id : done.body["ignored"]) assigned.erase(id.get<std::int64_t>());
      }
    }
    // Leases that ended: their instances go (busy ones stay until their processes are gone).
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
    return kExitOk;
  }

  // One scrape of GET /metrics (called on the listener's threads): the machine as it is between
  // two device changes, and the leases held as of the latest round.
  // The latest round's collection serves while it is at most one interval old (as
  // dcgm-exporter serves its last collection); an older one is collected afresh.
  absl::StatusOr<std::string> Scrape() {
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

 private:
  // Tells the service how long each lease's devices have been idle (no process on them), for
  // the idle reclaim of classes with an idle timeout (the figures hold for three rounds), and
  // each lease's usage for the history (memory, SM activity, processes) from one collection of
  // the machine per round. A service too old for the usage figures (400) gets the idle ones alone.
  void ReportUsage(const metrics::MachineFigures& machine) {
    if (held_.empty()) return;
    const std::int64_t now = EpochNow();
    json leases = json::object();
    json idle_only = json::object();
    for (const auto& [lease, devices] : held_) {
      json entry = json::object();
      const std::int64_t idle = idle_.IdleSeconds(lease, DeviceNode(devices), devices, now);
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
    json body = {{"leases", leases}, {"valid_s", 3 * o_.interval_s + 5}};
    Reply reply;
    const int rc = Call(o_.c, "POST", "/v1/nodes/" + o_.host + "/usage", &body, &reply);
    if (rc != 0 && reply.status == 400 && !idle_only.empty() && idle_only != leases) {
      json old = {{"leases", idle_only}, {"valid_s", 3 * o_.interval_s + 5}};
      (void)Call(o_.c, "POST", "/v1/nodes/" + o_.host + "/usage", &old, &reply);
    }
  }

  // A lease's usage figures as POST /v1/nodes/{host}/usage takes them (activity only when known).
  static void AddUsageFigures(const alloc::UsageFigures& f, json& entry) {
    entry["memory_used_mib"] = f.memory_used_mib;
    entry["memory_total_mib"] = f.memory_total_mib;
    entry["processes"] = f.processes;
    if (f.sm_active_pct.has_value()) entry["sm_active_pct"] = *f.sm_active_pct;
  }

  // A placement node of this machine that the binder handles (the tracker asks it).
  std::string DeviceNode(const std::vector<alloc::BoundDevice>&) const {
    return cluster_ != nullptr && cluster_->node_count() > 0 ? cluster_->spec(0).name : o_.host;
  }

  // Makes the GPUs match the machine's fixed layout (null: none) and tells the service how it
  // went when that changed. A MIG mode change is reported to the service as a new report.
  int CarryOutLayout(const json& wanted) {
    if (wanted.is_null()) {
      fixed_.clear();
      binder_->SetFixedGpus(fixed_);
      return kExitOk;
    }
    absl::StatusOr<alloc::NodeLayout> layout = alloc::LayoutFromJson(o_.host, wanted);
    if (!layout.ok()) {
      std::cerr << Log()
                << "the service sent a layout this agent cannot read: " << layout.status().message()
                << "\n";
      return kExitOk;
    }
    LayoutRun run;
    {
      // One reconciler round (snapshot, plan, steps) without a scrape in between.
      std::unique_lock<std::recursive_mutex> hold = backend_->Lock();
      run = cli::CarryOutLayout(*backend_, catalog_, *layout);
    }
    fixed_ = run.fixed;
    binder_->SetFixedGpus(fixed_);
    if (run.changed) {
      std::cerr << Log() << "layout " << layout->generation << " carried out: " << run.created
                << " instance(s) created, " << run.destroyed << " destroyed, " << run.kept
                << " kept\n";
    }
    if (run.modes_changed) {
      if (int rc = Report(); rc == 3) return rc;
    }
    if (!LayoutReportDue(*layout, run)) return kExitOk;
    if (!run.message.empty()) {
      std::cerr << Log() << "layout " << layout->generation << " not carried out: " << run.message
                << "\n";
    }
    json body = {{"generation", layout->generation}, {"message", run.message}};
    Reply done;
    const int rc = Call(o_.c, "POST", "/v1/nodes/" + o_.host + "/layout/status", &body, &done);
    return rc == 3 ? rc : kExitOk;
  }

  // Sends what the round's collection fired and cleared (and what earlier rounds could not send).
  void ReportAlerts(const metrics::MachineFigures& machine,
                    const std::vector<metrics::Holder>& holders) {
    const metrics::AlertChanges found =
        alerts_.Round(machine, holders, EpochNow(), [&](const metrics::AlertChanges& changes) {
          json fired = json::array();
          json cleared = json::array();
          for (const metrics::Alert& a : changes.fired) fired.push_back(metrics::AlertToJson(a));
          for (const metrics::Alert& a : changes.cleared) {
            cleared.push_back(metrics::AlertToJson(a));
          }
          json body = {{"fired", fired}, {"cleared", cleared}};
          Reply reply;
          if (Call(o_.c, "POST", "/v1/nodes/" + o_.host + "/alerts", &body, &reply) != 0) {
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
  std::vector<metrics::Holder> PublishHolders(const metrics::MachineFigures& machine) {
    const std::int64_t now = EpochNow();
    std::vector<metrics::Holder> holders;
    for (auto it = owners_.begin(); it != owners_.end();) {
      it = held_.contains(it->first) ? std::next(it) : owners_.erase(it);
    }
    for (const auto& [lease, devices] : held_) {
      std::optional<std::int64_t> idle_s;
      if (const std::int64_t s = idle_.IdleSeconds(lease, DeviceNode(devices), devices, now);
          s >= 0) {
        idle_s = s;
      }
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

  // Destroys idle MIG instances that no lease holds (left by an earlier agent or by hand), on
  // GPUs without a fixed layout.
  // Instances found on the GPUs at the first round were not made by this agent: they are kept
  // (said once, with what they are), unless --remove-foreign-instances.
  void NoteForeign() {
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
        std::cerr << Log() << "GPU " << gpu.index << " has GPU instance " << gi.id
                  << " (profile id " << gi.profile_id << " at " << gi.start
                  << ") that no lease holds: "
                  << (o_.remove_foreign_instances
                          ? "it is removed when idle (--remove-foreign-instances)"
                          : "kept; slices that need its place cannot be set up until it is "
                            "removed (--remove-foreign-instances, or a fixed layout with `gpuslice "
                            "node set-layout`)")
                  << "\n";
      }
    }
  }

  bool HeldBy(int gpu, int gi) const {
    for (const auto& [lease, devices] : held_) {
      for (const alloc::BoundDevice& d : devices) {
        if (d.gpu_index == gpu && d.gi == gi) return true;
      }
    }
    return false;
  }

  void CollectIdle() {
    NoteForeign();
    for (const device::GpuInfo& gpu : gpus_) {
      if (gpu.mig_current != device::MigMode::kEnabled || fixed_.contains(gpu.index)) continue;
      absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis =
          backend_->ListGpuInstances(gpu.index);
      absl::StatusOr<std::vector<device::ProcessInfo>> processes =
          backend_->ListProcesses(gpu.index);
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

  const AgentOptions& o_;
  const hw::Catalog& catalog_;
  std::shared_ptr<device::SynchronizedBackend> backend_;
  std::vector<device::GpuInfo> gpus_;
  std::unique_ptr<place::Cluster> cluster_;
  std::shared_ptr<alloc::DeviceBinder> binder_;
  alloc::IdleTracker idle_{nullptr};
  std::map<std::int64_t, std::vector<alloc::BoundDevice>> held_;
  std::set<int> fixed_;                    // GPUs (NVML indexes) with a fixed layout
  std::set<std::pair<int, int>> foreign_;  // (gpu, gi) found at the first round, no lease's
  bool foreign_noted_ = false;
  struct Owner {
    std::string tenant;
    std::string class_name;
    std::int64_t idle_timeout_s = 0;
  };
  std::map<std::int64_t, Owner> owners_;  // by lease, from the assignments
  AlertRunner alerts_{o_.host};
  std::mutex holders_mutex_;  // guards the three below (the scrapes read them)
  std::vector<metrics::Holder> holders_;
  metrics::MachineFigures machine_;  // the latest round's collection
  std::optional<std::chrono::steady_clock::time_point> collected_at_;
};

int RunAgent(const GlobalOptions& global, const AgentOptions& o) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  if (!o.sim_fleet.empty() && !o.sim_state.empty()) {
    PrintError("give --sim-fleet or --sim-state, not both");
    return kExitBadInput;
  }
  absl::StatusOr<std::optional<ListenAddress>> metrics_option =
      ParseMetricsListenOption(o.metrics_listen);
  if (!metrics_option.ok()) {
    PrintError(std::string(metrics_option.status().message()));
    return kExitBadInput;
  }
  const std::optional<ListenAddress> metrics_address = *metrics_option;
  std::string metrics_token;
  if (!o.metrics_token_file.empty()) {
    std::ifstream in(o.metrics_token_file);
    std::getline(in, metrics_token);
    if (!in.good() && metrics_token.empty()) {
      PrintError("--metrics-token-file " + o.metrics_token_file + ": cannot read a token from it");
      return kExitBadInput;
    }
  }
  if (metrics_address.has_value() && metrics_token.empty() && NeedsToken(*metrics_address)) {
    PrintError("--metrics-listen " + o.metrics_listen +
               " is not a loopback address: anyone who reaches it would read this machine's "
               "leases; give --metrics-token-file FILE (scrapes then send its token as Bearer), "
               "or listen on 127.0.0.1");
    return kExitBadInput;
  }
  std::shared_ptr<device::Backend> backend;
  if (!o.sim_state.empty()) {
    absl::StatusOr<std::unique_ptr<device::SimBackend>> sim =
        device::SimBackend::OpenFile(o.sim_state, *catalog);
    if (!sim.ok()) {
      PrintError(absl::StrCat("--sim-state: ", sim.status().message()));
      return kExitBadInput;
    }
    backend = *std::move(sim);
  } else if (!o.sim_fleet.empty()) {
    // Seeded by the host name, so that simulated machines have distinct UUIDs.
    absl::StatusOr<device::sim::SimState> state =
        device::sim::NewMachine(*catalog, o.sim_fleet, std::hash<std::string>{}(o.host) | 1);
    if (!state.ok()) {
      PrintError(absl::StrCat("--sim-fleet: ", state.status().message()));
      return kExitBadInput;
    }
    for (device::sim::SimGpu& gpu : state->gpus) {
      if (gpu.mig_capable) {
        gpu.mig_current = device::MigMode::kEnabled;
        gpu.mig_pending = device::MigMode::kEnabled;
      }
    }
    backend = std::make_shared<device::SimBackend>(*std::move(state), *catalog);
  } else {
    absl::StatusOr<std::unique_ptr<device::NvmlBackend>> nvml = device::NvmlBackend::Load(*catalog);
    if (!nvml.ok()) {
      PrintError(absl::StrCat("no NVIDIA driver: ", nvml.status().message(),
                              " (for a simulated machine, give --sim-fleet or --sim-state)"));
      return 1;
    }
    backend = *std::move(nvml);
  }
  absl::StatusOr<std::vector<device::GpuInfo>> listed = backend->ListGpus();
  if (!listed.ok()) {
    PrintError(std::string(listed.status().message()));
    return 1;
  }
  std::vector<device::GpuInfo> gpus;
  for (const device::GpuInfo& g : *listed) {
    if (g.model == nullptr) {
      std::cerr << Log() << "GPU " << g.index << " (" << g.name
                << ") is not in the catalog; not reported\n";
      continue;
    }
    gpus.push_back(g);
  }
  if (gpus.empty()) {
    PrintError("no GPUs to report");
    return 1;
  }
  std::cerr << Log() << backend->Describe() << ", " << gpus.size() << " GPUs, host " << o.host
            << "\n";
  // The rounds (this thread) and the scrapes (the listener's threads) share the backend.
  Agent agent(o, *catalog, std::make_shared<device::SynchronizedBackend>(std::move(backend)), gpus);
  std::unique_ptr<MetricsListener> listener;  // stopped before the agent goes
  if (metrics_address.has_value()) {
    listener = std::make_unique<MetricsListener>([&agent] { return agent.Scrape(); });
    listener->RequireToken(metrics_token);
    if (absl::Status s = listener->Start(*metrics_address); !s.ok()) {
      PrintError(absl::StrCat("--metrics-listen: ", s.message()));
      return 1;
    }
    std::cerr << Log() << "metrics on http://"
              << o.metrics_listen.substr(0, o.metrics_listen.rfind(':')) << ":" << listener->port()
              << "/metrics\n";
  }
  std::signal(SIGINT, OnStop);
  std::signal(SIGTERM, OnStop);
  while (!g_stop) {  // until the service takes the report (it may not be up yet)
    const int rc = agent.Report();
    if (rc == kExitOk) break;
    if (rc == 3 || o.once) return rc;
    std::this_thread::sleep_for(std::chrono::seconds(o.interval_s));
  }
  auto last_report = std::chrono::steady_clock::now();
  while (!g_stop) {
    if (int rc = agent.Sync(); rc != 0) return rc;
    if (o.once) break;
    for (int i = 0; i < o.interval_s * 10 && !g_stop; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (std::chrono::steady_clock::now() - last_report > std::chrono::seconds(30)) {
      (void)agent.Report();  // the service may have restarted on a fresh store
      last_report = std::chrono::steady_clock::now();
    }
  }
  std::cerr << Log() << "stopped\n";
  return kExitOk;
}

}  // namespace

void AddAgentCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto o = std::make_shared<AgentOptions>();
  o->host = Hostname();
  CLI::App* cmd = app.add_subcommand(
      "agent",
      "Report this machine's GPUs to a gpuslice serve and set up the slices it grants here "
      "(MIG instances at their placements), tearing them down when the leases end");
  AddConnection(cmd, o->c);
  cmd->add_flag("--remove-foreign-instances", o->remove_foreign_instances,
                "Remove idle MIG instances that were on the GPUs when the agent started and that "
                "no lease holds (by default they are kept and named in the log)");
  cmd->add_option("--client-cert", o->c.client_cert,
                  "Mutual TLS: this machine's client certificate (PEM), when serve asks agents "
                  "for one (--tls-client-ca)");
  cmd->add_option("--client-key", o->c.client_key, "The client certificate's private key (PEM)");
  cmd->add_option("--host", o->host, "This machine's name in the service")->capture_default_str();
  cmd->add_option("--sim-fleet", o->sim_fleet,
                  "A simulated machine instead of NVML, e.g. 2xH100-80GB (MIG on where possible)");
  cmd->add_option("--sim-state", o->sim_state,
                  "A simulated machine kept in a state file (see gpuslice sim)");
  cmd->add_option("--interval", o->interval_s, "Seconds between rounds")
      ->capture_default_str()
      ->check(CLI::Range(1, 600));
  cmd->add_flag("--once", o->once, "Report and do one round, then exit");
  cmd->add_option("--pod-resources-socket", o->pod_resources_socket,
                  "On a Kubernetes node: kubelet's pod-resources socket (e.g. "
                  "/var/lib/kubelet/pod-resources/kubelet.sock), so that /metrics carries the pod, "
                  "namespace and container holding each GPU, MIG device and share, as "
                  "dcgm-exporter does");
  cmd->add_option("--metrics-token-file", o->metrics_token_file,
                  "A file whose first line is the token scrapes of --metrics-listen must send "
                  "(Authorization: Bearer); required when it is not a loopback address");
  cmd->add_option("--metrics-listen", o->metrics_listen,
                  "Answer GET /metrics (Prometheus) on HOST:PORT, e.g. 127.0.0.1:9401; no "
                  "authentication, so bind it where only Prometheus reaches (off by default)");
  cmd->callback([o, action, &global] { *action = [o, &global] { return RunAgent(global, *o); }; });
}

}  // namespace gpuslice::cli
