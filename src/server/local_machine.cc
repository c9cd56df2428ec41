#include "gpuslice/server/local_machine.h"

#include <iostream>
#include <map>
#include <optional>

#include "gpuslice/agent/layout_runner.h"
#include "gpuslice/metrics/collector.h"
#include "gpuslice/shim/slices.h"
#include "gpuslice/util/clock.h"
#include "gpuslice/util/this_machine.h"

namespace gpuslice::server {
namespace {

// serve itself, when it acts for its machine.
const alloc::Caller kSystem{"gpuslice", "", alloc::Role::kAdmin, ""};

// The GPUs of the catalog, as the backend lists them now.
absl::StatusOr<std::vector<device::GpuInfo>> KnownGpus(device::Backend& backend) {
  absl::StatusOr<std::vector<device::GpuInfo>> listed = backend.ListGpus();
  if (!listed.ok()) return listed.status();
  std::vector<device::GpuInfo> known;
  for (const device::GpuInfo& gpu : *listed) {
    if (gpu.model != nullptr) known.push_back(gpu);
  }
  return known;
}

// gpuslice_alerts{kind,severity,Hostname} of every machine the service knows (this one too).
metrics::Family FleetAlerts(alloc::Service& service, const alloc::Service::AlertList& active,
                            const std::string& host) {
  std::map<std::string, std::map<std::string, int>> by_host;  // host -> kind -> count
  by_host[host];
  if (absl::StatusOr<std::vector<alloc::NodeReport>> nodes = service.Nodes(kSystem); nodes.ok()) {
    for (const alloc::NodeReport& node : *nodes) by_host[node.host];
  }
  for (const metrics::Alert& alert : active.active) by_host[alert.host][alert.kind] += 1;
  metrics::Family fleet;
  fleet.name = "gpuslice_alerts";
  fleet.help = "Active alerts, by machine, kind and severity.";
  for (const auto& [machine, counts] : by_host) {
    for (const auto& [kind, severity] : metrics::AlertKinds()) {
      const auto it = counts.find(kind);
      fleet.samples.push_back({{{"kind", kind}, {"severity", severity}, {"Hostname", machine}},
                               static_cast<double>(it == counts.end() ? 0 : it->second)});
    }
  }
  return fleet;
}

// gpuslice_leases{class,tenant} and gpuslice_queue_length{class}.
std::vector<metrics::Family> ServiceFamilies(const std::vector<alloc::Lease>& leases,
                                             const std::vector<alloc::QueueEntry>& queue) {
  std::map<std::pair<std::string, std::string>, int> by_class;  // (class, tenant) -> leases
  for (const alloc::Lease& lease : leases) by_class[{lease.class_name, lease.tenant}] += 1;
  metrics::Family active_leases;
  active_leases.name = "gpuslice_leases";
  active_leases.help = "Active leases by class and tenant.";
  for (const auto& [key, count] : by_class) {
    active_leases.samples.push_back(
        {{{"class", key.first}, {"tenant", key.second}}, static_cast<double>(count)});
  }
  std::map<std::string, int> waiting;
  for (const alloc::QueueEntry& entry : queue) waiting[entry.class_name] += 1;
  metrics::Family queued;
  queued.name = "gpuslice_queue_length";
  queued.help = "Requests waiting for capacity, by class.";
  for (const auto& [klass, count] : waiting) {
    queued.samples.push_back({{{"class", klass}}, static_cast<double>(count)});
  }
  return {std::move(active_leases), std::move(queued)};
}

}  // namespace

alloc::NodeReport LocalReport(const std::vector<device::GpuInfo>& gpus) {
  alloc::NodeReport report;
  report.host = util::Hostname();
  report.cpu_milli = util::MachineCpuMilli();
  report.memory_mib = util::MachineMemoryMib();
  for (const device::GpuInfo& gpu : gpus) {
    if (gpu.model == nullptr) continue;
    report.gpus.push_back(alloc::NodeReport::Gpu{gpu.index, gpu.uuid, gpu.model->id,
                                                 gpu.mig_current == device::MigMode::kEnabled});
  }
  return report;
}

LocalMachine::LocalMachine(alloc::Service& service,
                           std::shared_ptr<device::SynchronizedBackend> backend,
                           const hw::Catalog& catalog, std::shared_ptr<alloc::DeviceBinder> binder)
    : service_(service),
      backend_(std::move(backend)),
      catalog_(catalog),
      binder_(binder),
      host_(util::Hostname()),
      idle_(std::move(binder)),
      alerts_(host_) {}

absl::Status LocalMachine::Join(const std::vector<device::GpuInfo>& gpus) {
  const absl::Status reported = service_.ReportNode(kSystem, LocalReport(gpus));
  CarryOutLayout();
  return reported;
}

void LocalMachine::Tick() {
  CarryOutLayout();
  const std::int64_t now = util::EpochNow();
  absl::StatusOr<int> ended = service_.Tick([&](const alloc::Lease& lease) {
    std::lock_guard<std::mutex> lock(idle_mutex_);
    return idle_.IdleSeconds(lease.id, lease.node, lease.bound, now);
  });
  if (!ended.ok()) std::cerr << "gpuslice serve: tick: " << ended.status().message() << "\n";
  RecordUsage();
  RoundOfAlerts();
}

// The in-process agent's round for the machine's layout: carries it out, reports the machine
// again when MIG modes changed, and tells the service how it went.
void LocalMachine::CarryOutLayout() {
  absl::StatusOr<std::optional<alloc::NodeLayout>> layout = service_.GetLayout(kSystem, host_);
  if (!layout.ok() || !layout->has_value()) {
    binder_->SetFixedGpus({});
    return;
  }
  agent::LayoutRun run;
  {
    // One reconciler round (snapshot, plan, steps) without the binder's calls in between.
    std::unique_lock<std::recursive_mutex> hold = backend_->Lock();
    run = agent::CarryOutLayout(*backend_, catalog_, **layout);
  }
  binder_->SetFixedGpus(run.fixed);
  if (run.changed) {
    std::cerr << "gpuslice serve: layout " << (*layout)->generation
              << " carried out: " << run.created << " instance(s) created, " << run.destroyed
              << " destroyed, " << run.kept << " kept\n";
  }
  if (run.modes_changed) {
    if (absl::StatusOr<std::vector<device::GpuInfo>> gpus = KnownGpus(*backend_); gpus.ok()) {
      binder_->SetGpus(host_, *gpus, false);
      if (absl::Status s = service_.ReportNode(kSystem, LocalReport(*gpus)); !s.ok()) {
        std::cerr << "gpuslice serve: reporting this machine: " << s.message() << "\n";
      }
    }
  }
  if (!agent::LayoutReportDue(**layout, run)) return;
  if (!run.message.empty()) {
    std::cerr << "gpuslice serve: layout " << (*layout)->generation
              << " not carried out: " << run.message << "\n";
  }
  (void)service_.ReportLayout(kSystem, host_, (*layout)->generation, run.message);
}

// The leases on this machine's devices, for /metrics and the alerts: lease, tenant, class, idle
// seconds (when known) and the class's idle threshold. `leases` are all active leases.
std::vector<metrics::Holder> LocalMachine::Holders(const std::vector<alloc::Lease>& leases,
                                                   std::int64_t now) {
  std::map<std::string, std::int64_t> idle_threshold;
  for (const alloc::ClassSpec& spec : service_.Classes()) {
    idle_threshold[spec.name] = spec.idle_timeout_s;
  }
  std::vector<metrics::Holder> holders;
  for (const alloc::Lease& lease : leases) {
    if (lease.node.substr(0, lease.node.find('/')) != host_) continue;
    std::optional<std::int64_t> idle_s;
    {
      std::lock_guard<std::mutex> lock(idle_mutex_);
      if (const std::int64_t s = idle_.IdleSeconds(lease.id, lease.node, lease.bound, now);
          s >= 0) {
        idle_s = s;
      }
    }
    for (const alloc::BoundDevice& device : lease.bound) {
      metrics::Holder holder{device.uuid,      lease.id, lease.tenant,
                             lease.class_name, idle_s,   device.vram_mib};
      holder.idle_threshold_s = idle_threshold[lease.class_name];
      holders.push_back(std::move(holder));
    }
  }
  return holders;
}

absl::StatusOr<std::vector<metrics::Family>> LocalMachine::Families() {
  metrics::MachineFigures machine = metrics::Collect(*backend_, host_);
  metrics::CollectSlices(shim::SliceDirectory(), machine);
  absl::StatusOr<std::vector<alloc::Lease>> leases = service_.Leases(kSystem);
  if (!leases.ok()) return leases.status();
  absl::StatusOr<std::vector<alloc::QueueEntry>> queue = service_.Queue(kSystem);
  if (!queue.ok()) return queue.status();
  std::vector<metrics::Family> families =
      metrics::Families(machine, Holders(*leases, util::EpochNow()));
  // This machine's counters (fired alerts, Xid errors); the active alerts of every machine
  // come from the service, this one's included.
  for (metrics::Family& family : alerts_.Families()) {
    if (family.name != "gpuslice_alerts") families.push_back(std::move(family));
  }
  absl::StatusOr<alloc::Service::AlertList> active = service_.Alerts(kSystem);
  if (!active.ok()) return active.status();
  families.push_back(FleetAlerts(service_, *active, host_));
  for (metrics::Family& family : ServiceFamilies(*leases, *queue)) {
    families.push_back(std::move(family));
  }
  return families;
}

// One round of this machine's alerts: its collector's changes go to the service in-process.
void LocalMachine::RoundOfAlerts() {
  absl::StatusOr<std::vector<alloc::Lease>> leases = service_.Leases(kSystem);
  if (!leases.ok()) return;
  const std::int64_t now = util::EpochNow();
  const std::vector<metrics::Holder> holders = Holders(*leases, now);
  metrics::MachineFigures machine;
  {
    std::unique_lock<std::recursive_mutex> hold = backend_->Lock();
    machine = metrics::Collect(*backend_, host_);
    metrics::CollectXids(*backend_, machine);
  }
  alerts_.Round(machine, holders, now, [&](const metrics::AlertChanges& changes) {
    absl::Status status = service_.ReportAlerts(kSystem, host_, changes);
    // NotFound: this machine could not be reported (serve said so when it started).
    if (!status.ok() && !absl::IsNotFound(status)) {
      std::cerr << "gpuslice serve: alerts: " << status.message() << "\n";
    }
    return status;
  });
}

// One round of the usage history for this machine's leases: one collection, one RecordUsage.
void LocalMachine::RecordUsage() {
  absl::StatusOr<std::vector<alloc::Lease>> leases = service_.Leases(kSystem);
  if (!leases.ok()) return;
  std::optional<metrics::MachineFigures> machine;
  std::map<std::int64_t, alloc::UsageFigures> samples;
  for (const alloc::Lease& lease : *leases) {
    if (lease.bound.empty() || lease.node.substr(0, lease.node.find('/')) != host_) continue;
    if (!machine.has_value()) {
      std::unique_lock<std::recursive_mutex> hold = backend_->Lock();
      machine = metrics::Collect(*backend_, host_);
    }
    if (std::optional<alloc::UsageFigures> f = alloc::UsageFromFigures(*machine, lease.bound)) {
      samples[lease.id] = *f;
    }
  }
  if (samples.empty()) return;
  // NotFound: this machine could not be reported (serve said so when it started).
  absl::StatusOr<std::vector<std::int64_t>> ignored = service_.RecordUsage(kSystem, host_, samples);
  if (!ignored.ok() && !absl::IsNotFound(ignored.status())) {
    std::cerr << "gpuslice serve: usage history: " << ignored.status().message() << "\n";
  }
}

}  // namespace gpuslice::server
