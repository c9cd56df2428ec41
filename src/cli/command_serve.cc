// gpuslice serve: the allocation service. Hands out slices of this machine's GPUs (through NVML),
// or of a simulated fleet when no driver is present, over the HTTP API (gpuslice/api/server.h).
// Its own machine is reported to the service in-process, as an agent reports its machine, so it
// takes fixed layouts too: each tick carries out the machine's layout with the reconciler.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "alert_runner.h"
#include "alert_webhook.h"
#include "client.h"
#include "common.h"
#include "gpuslice/alloc/binder.h"
#include "gpuslice/alloc/inventory.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/alloc/usage.h"
#include "gpuslice/api/server.h"
#include "gpuslice/api/tls.h"
#include "gpuslice/device/nvml_backend.h"
#include "gpuslice/device/presence.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/device/sim_machine.h"
#include "gpuslice/device/sim_store.h"
#include "gpuslice/device/synchronized_backend.h"
#include "gpuslice/metrics/collector.h"
#include "gpuslice/shim/slices.h"
#include "gpuslice/store/database.h"
#include "gpuslice/util/private_file.h"
#include "layout_runner.h"

namespace gpuslice::cli {
namespace {

// The machine's GPUs as an agent reports them.
alloc::NodeReport LocalReport(const std::vector<device::GpuInfo>& gpus) {
  alloc::NodeReport report;
  report.host = Hostname();
  report.cpu_milli = MachineCpuMilli();
  report.memory_mib = MachineMemoryMib();
  for (const device::GpuInfo& gpu : gpus) {
    if (gpu.model == nullptr) continue;
    report.gpus.push_back(alloc::NodeReport::Gpu{gpu.index, gpu.uuid, gpu.model->id,
                                                 gpu.mig_current == device::MigMode::kEnabled});
  }
  return report;
}

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

// The in-process agent's round for the machine's layout: carries it out, reports the machine
// again when MIG modes changed, and tells the service how it went.
void CarryOutLocalLayout(alloc::Service& service, device::SynchronizedBackend& backend,
                         const hw::Catalog& catalog, alloc::DeviceBinder& binder) {
  const alloc::Caller system{"gpuslice", "", alloc::Role::kAdmin, ""};
  absl::StatusOr<std::optional<alloc::NodeLayout>> layout = service.GetLayout(system, Hostname());
  if (!layout.ok() || !layout->has_value()) {
    binder.SetFixedGpus({});
    return;
  }
  LayoutRun run;
  {
    // One reconciler round (snapshot, plan, steps) without the binder's calls in between.
    std::unique_lock<std::recursive_mutex> hold = backend.Lock();
    run = CarryOutLayout(backend, catalog, **layout);
  }
  binder.SetFixedGpus(run.fixed);
  if (run.changed) {
    std::cerr << "gpuslice serve: layout " << (*layout)->generation
              << " carried out: " << run.created << " instance(s) created, " << run.destroyed
              << " destroyed, " << run.kept << " kept\n";
  }
  if (run.modes_changed) {
    if (absl::StatusOr<std::vector<device::GpuInfo>> gpus = KnownGpus(backend); gpus.ok()) {
      binder.SetGpus(Hostname(), *gpus, false);
      if (absl::Status s = service.ReportNode(system, LocalReport(*gpus)); !s.ok()) {
        std::cerr << "gpuslice serve: reporting this machine: " << s.message() << "\n";
      }
    }
  }
  if (!LayoutReportDue(**layout, run)) return;
  if (!run.message.empty()) {
    std::cerr << "gpuslice serve: layout " << (*layout)->generation
              << " not carried out: " << run.message << "\n";
  }
  (void)service.ReportLayout(system, Hostname(), (*layout)->generation, run.message);
}

// The leases on this machine's devices, for /metrics and the alerts: lease, tenant, class, idle
// seconds (when known) and the class's idle threshold. `leases` are all active leases.
std::vector<metrics::Holder> LocalHolders(alloc::Service& service,
                                          const std::vector<alloc::Lease>& leases,
                                          std::mutex& idle_mutex, alloc::IdleTracker& idle,
                                          std::int64_t now) {
  std::map<std::string, std::int64_t> idle_threshold;
  for (const alloc::ClassSpec& spec : service.Classes()) {
    idle_threshold[spec.name] = spec.idle_timeout_s;
  }
  std::vector<metrics::Holder> holders;
  for (const alloc::Lease& lease : leases) {
    if (lease.node.substr(0, lease.node.find('/')) != Hostname()) continue;
    std::optional<std::int64_t> idle_s;
    {
      std::lock_guard<std::mutex> lock(idle_mutex);
      if (const std::int64_t s = idle.IdleSeconds(lease.id, lease.node, lease.bound, now); s >= 0) {
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

// One scrape of GET /metrics: this machine's GPUs and MIG instances (through the backend), its
// software slices (the interposer's accounting files), the leases on them, this machine's alert
// counters, the fleet's active alerts by machine and kind, and the service's leases and queue by
// class.
absl::StatusOr<std::string> Scrape(alloc::Service& service, device::Backend& backend,
                                   std::mutex& idle_mutex, alloc::IdleTracker& idle,
                                   const AlertRunner& alerts) {
  const alloc::Caller system{"gpuslice", "", alloc::Role::kAdmin, ""};
  metrics::MachineFigures machine = metrics::Collect(backend, Hostname());
  metrics::CollectSlices(shim::SliceDirectory(), machine);
  absl::StatusOr<std::vector<alloc::Lease>> leases = service.Leases(system);
  if (!leases.ok()) return leases.status();
  absl::StatusOr<std::vector<alloc::QueueEntry>> queue = service.Queue(system);
  if (!queue.ok()) return queue.status();
  const std::vector<metrics::Holder> holders =
      LocalHolders(service, *leases, idle_mutex, idle, EpochNow());
  std::map<std::pair<std::string, std::string>, int> by_class;  // (class, tenant) -> leases
  for (const alloc::Lease& lease : *leases) by_class[{lease.class_name, lease.tenant}] += 1;
  std::vector<metrics::Family> families = metrics::Families(machine, holders);
  // This machine's counters (fired alerts, Xid errors); the active alerts of every machine
  // come from the service, this one's included.
  for (metrics::Family& family : alerts.Families()) {
    if (family.name != "gpuslice_alerts") families.push_back(std::move(family));
  }
  absl::StatusOr<alloc::Service::AlertList> active = service.Alerts(system);
  if (!active.ok()) return active.status();
  std::map<std::string, std::map<std::string, int>> by_host;  // host -> kind -> count
  by_host[Hostname()];
  if (absl::StatusOr<std::vector<alloc::NodeReport>> nodes = service.Nodes(system); nodes.ok()) {
    for (const alloc::NodeReport& node : *nodes) by_host[node.host];
  }
  for (const metrics::Alert& alert : active->active) by_host[alert.host][alert.kind] += 1;
  metrics::Family fleet;
  fleet.name = "gpuslice_alerts";
  fleet.help = "Active alerts, by machine, kind and severity.";
  for (const auto& [host, counts] : by_host) {
    for (const auto& [kind, severity] : metrics::AlertKinds()) {
      const auto it = counts.find(kind);
      fleet.samples.push_back({{{"kind", kind}, {"severity", severity}, {"Hostname", host}},
                               static_cast<double>(it == counts.end() ? 0 : it->second)});
    }
  }
  families.push_back(std::move(fleet));
  metrics::Family active_leases;
  active_leases.name = "gpuslice_leases";
  active_leases.help = "Active leases by class and tenant.";
  for (const auto& [key, count] : by_class) {
    active_leases.samples.push_back(
        {{{"class", key.first}, {"tenant", key.second}}, static_cast<double>(count)});
  }
  std::map<std::string, int> waiting;
  for (const alloc::QueueEntry& entry : *queue) waiting[entry.class_name] += 1;
  metrics::Family queued;
  queued.name = "gpuslice_queue_length";
  queued.help = "Requests waiting for capacity, by class.";
  for (const auto& [klass, count] : waiting) {
    queued.samples.push_back({{{"class", klass}}, static_cast<double>(count)});
  }
  families.push_back(std::move(active_leases));
  families.push_back(std::move(queued));
  return metrics::Write(families);
}

// One round of this machine's alerts: its collector's changes go to the service in-process.
void LocalAlerts(alloc::Service& service, device::SynchronizedBackend& backend,
                 std::mutex& idle_mutex, alloc::IdleTracker& idle, AlertRunner& alerts) {
  const alloc::Caller system{"gpuslice", "", alloc::Role::kAdmin, ""};
  absl::StatusOr<std::vector<alloc::Lease>> leases = service.Leases(system);
  if (!leases.ok()) return;
  const std::int64_t now = EpochNow();
  const std::vector<metrics::Holder> holders =
      LocalHolders(service, *leases, idle_mutex, idle, now);
  metrics::MachineFigures machine;
  {
    std::unique_lock<std::recursive_mutex> hold = backend.Lock();
    machine = metrics::Collect(backend, Hostname());
    metrics::CollectXids(backend, machine);
  }
  alerts.Round(machine, holders, now, [&](const metrics::AlertChanges& changes) {
    absl::Status status = service.ReportAlerts(system, Hostname(), changes);
    // NotFound: this machine could not be reported (serve said so when it started).
    if (!status.ok() && !absl::IsNotFound(status)) {
      std::cerr << "gpuslice serve: alerts: " << status.message() << "\n";
    }
    return status;
  });
}

// One round of the usage history for this machine's leases: one collection, one RecordUsage.
void RecordLocalUsage(alloc::Service& service, device::SynchronizedBackend& backend) {
  const alloc::Caller system{"gpuslice", "", alloc::Role::kAdmin, ""};
  absl::StatusOr<std::vector<alloc::Lease>> leases = service.Leases(system);
  if (!leases.ok()) return;
  std::optional<metrics::MachineFigures> machine;
  std::map<std::int64_t, alloc::UsageFigures> samples;
  for (const alloc::Lease& lease : *leases) {
    if (lease.bound.empty() || lease.node.substr(0, lease.node.find('/')) != Hostname()) continue;
    if (!machine.has_value()) {
      std::unique_lock<std::recursive_mutex> hold = backend.Lock();
      machine = metrics::Collect(backend, Hostname());
    }
    if (std::optional<alloc::UsageFigures> f = alloc::UsageFromFigures(*machine, lease.bound)) {
      samples[lease.id] = *f;
    }
  }
  if (samples.empty()) return;
  // NotFound: this machine could not be reported (serve said so when it started).
  absl::StatusOr<std::vector<std::int64_t>> ignored =
      service.RecordUsage(system, Hostname(), samples);
  if (!ignored.ok() && !absl::IsNotFound(ignored.status())) {
    std::cerr << "gpuslice serve: usage history: " << ignored.status().message() << "\n";
  }
}

struct ServeOptions {
  std::string db = "gpuslice.db";
  std::string listen = "127.0.0.1:8470";
  std::string sim_fleet;
  std::string token_file = "gpuslice-admin.token";
  std::string policy = "gpuslice";
  int tick_s = 5;
  std::string alert_webhook;
  std::string tls_cert;  // with tls_key: the operator's pair
  std::string tls_key;
  std::string
      tls_client_ca;    // agents must present a certificate this CA signed, named for their machine
  std::string tls_dir;  // where the self-signed pair lives (default: beside the admin token)
  bool insecure = false;  // plain HTTP
};

// The simulated fleet, kept in a state file beside the admin token (gpuslice-sim.json), so
// that a restart, even after kill -9, finds the MIG instances its leases hold with their UUIDs,
// as a real GPU keeps them. A file of another fleet (other models) is replaced, and said so.
absl::StatusOr<std::shared_ptr<device::Backend>> KeptSimulatedFleet(
    const ServeOptions& options, const device::sim::SimState& fresh, const hw::Catalog& catalog) {
  std::string dir = std::filesystem::path(options.token_file).parent_path().string();
  if (dir.empty()) dir = ".";
  const std::string file = dir + "/gpuslice-sim.json";
  absl::StatusOr<std::unique_ptr<device::SimBackend>> kept =
      device::SimBackend::OpenFile(file, catalog);
  if (kept.ok()) {
    absl::StatusOr<std::vector<device::GpuInfo>> gpus = (*kept)->ListGpus();
    bool same = gpus.ok() && gpus->size() == fresh.gpus.size();
    for (std::size_t i = 0; same && i < fresh.gpus.size(); ++i) {
      same = (*gpus)[i].model != nullptr && (*gpus)[i].model->id == fresh.gpus[i].model_id;
    }
    if (same) return std::shared_ptr<device::Backend>(*std::move(kept));
    std::cerr << "gpuslice serve: " << file
              << " holds another simulated fleet; starting it afresh\n";
  }
  if (absl::Status st = device::sim::SimStore::Create(file, fresh, /*overwrite=*/true); !st.ok()) {
    return st;
  }
  absl::StatusOr<std::unique_ptr<device::SimBackend>> made =
      device::SimBackend::OpenFile(file, catalog);
  if (!made.ok()) return made.status();
  return std::shared_ptr<device::Backend>(*std::move(made));
}

// The TLS context serve listens with: the operator's pair, or the self-signed pair of an earlier
// start, or a new one. Null with --insecure. `*how` says which, for the banner.
absl::StatusOr<std::unique_ptr<api::TlsServerContext>> ServerTls(const ServeOptions& options,
                                                                 std::string* cert_file,
                                                                 std::string* how) {
  if (options.insecure) return std::unique_ptr<api::TlsServerContext>();
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  std::string cert = options.tls_cert;
  std::string key = options.tls_key;
  *how = "the given certificate";
  if (cert.empty()) {
    std::string dir = options.tls_dir;
    if (dir.empty()) dir = std::filesystem::path(options.token_file).parent_path().string();
    if (dir.empty()) dir = ".";
    cert = dir + "/gpuslice-tls.crt";
    key = dir + "/gpuslice-tls.key";
    *how = "the self-signed certificate of an earlier start";
    if (!std::filesystem::exists(cert) || !std::filesystem::exists(key)) {
      if (absl::Status st = api::MakeSelfSignedCertificate(
              cert, key, {"localhost", Hostname(), "127.0.0.1", "::1"});
          !st.ok()) {
        return st;
      }
      *how = "a NEW self-signed certificate";
    }
  }
  *cert_file = std::filesystem::absolute(cert).lexically_normal().string();
  return api::TlsServerContext::Load(cert, key, options.tls_client_ca);
}

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

int RunServe(const GlobalOptions& global, const ServeOptions& options) {
  // Everything serve writes (the store and its journal, the admin token, TLS keys) is its
  // owner's alone: the store holds token hashes and every tenant's leases.
  ::umask(077);
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  const size_t colon = options.listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(options.listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    PrintError("--listen: HOST:PORT, e.g. 127.0.0.1:8470");
    return kExitBadInput;
  }
  // The GPUs: NVML when a driver is there, a simulated fleet only where the machine shows no
  // sign of NVIDIA hardware or driver (or with --sim-fleet); say which, loudly.
  std::vector<device::GpuInfo> gpus;
  std::string source;
  bool simulated = true;
  std::shared_ptr<device::Backend> backend;  // the in-process agent's
  if (options.sim_fleet.empty()) {
    absl::StatusOr<std::vector<device::GpuInfo>> listed;
    absl::StatusOr<std::unique_ptr<device::NvmlBackend>> nvml = device::NvmlBackend::Load(*catalog);
    if (nvml.ok()) listed = (*nvml)->ListGpus();
    const bool no_library = !nvml.ok() && !device::NvmlBackend::LibraryLoadable();
    const std::vector<std::string> traces = device::NvidiaTraces();
    if (nvml.ok() && listed.ok() && !listed->empty()) {
      gpus = *listed;
      simulated = false;
      source = absl::StrCat("local GPUs through NVML (", (*nvml)->Describe(), ")");
      backend = *std::move(nvml);
    } else if (!no_library || !traces.empty()) {
      const std::string why = !nvml.ok()     ? std::string(nvml.status().message())
                              : !listed.ok() ? std::string(listed.status().message())
                                             : "NVML lists no GPU";
      PrintError(absl::StrCat(
          "this machine has NVIDIA ", no_library ? "devices" : "driver library",
          traces.empty() ? "" : absl::StrCat(" (", absl::StrJoin(traces, "; "), ")"),
          " but its GPUs cannot be used: ", why,
          ". Refusing to hand out a simulated fleet on a GPU host; fix the driver (see `gpuslice "
          "doctor`), or pass --sim-fleet SPEC to serve a simulated fleet on purpose"));
      return 1;
    }
  }
  const std::string fleet =
      options.sim_fleet.empty() ? "4xH100-80GB,4xA100-80GB" : options.sim_fleet;
  if (simulated) {
    // Seeded by the host name, so that simulated machines have distinct UUIDs.
    absl::StatusOr<device::sim::SimState> state =
        device::sim::NewMachine(*catalog, fleet, std::hash<std::string>{}(Hostname()) | 1);
    if (!state.ok()) {
      PrintError(absl::StrCat("--sim-fleet: ", std::string(state.status().message())));
      return kExitBadInput;
    }
    // The simulated GPUs that have MIG are in MIG mode, so slices become real instances.
    for (device::sim::SimGpu& gpu : state->gpus) {
      if (gpu.mig_capable) {
        gpu.mig_current = device::MigMode::kEnabled;
        gpu.mig_pending = device::MigMode::kEnabled;
      }
    }
    absl::StatusOr<std::shared_ptr<device::Backend>> kept =
        KeptSimulatedFleet(options, *state, *catalog);
    if (!kept.ok()) {
      PrintError(std::string(kept.status().message()));
      return 1;
    }
    backend = *std::move(kept);
    absl::StatusOr<std::vector<device::GpuInfo>> listed = backend->ListGpus();
    if (!listed.ok()) {
      PrintError(std::string(listed.status().message()));
      return 1;
    }
    gpus = *listed;
    source = absl::StrCat("a SIMULATED fleet (", fleet, ")",
                          options.sim_fleet.empty() ? ": no NVIDIA driver found" : "");
  }
  // (The simulated GPUs with MIG are in MIG mode: from here on both kinds go by the real modes.)
  // API threads (the binder), the tick (layouts) and the metrics all use the machine's backend.
  auto shared = std::make_shared<device::SynchronizedBackend>(std::move(backend));
  absl::StatusOr<place::Cluster> inventory =
      alloc::InventoryFromGpus(Hostname(), gpus, MachineCpuMilli(), MachineMemoryMib(), false);
  if (!inventory.ok()) {
    PrintError(std::string(inventory.status().message()));
    return 1;
  }
  absl::StatusOr<std::unique_ptr<store::Database>> db = store::OpenDatabase(options.db);
  if (!db.ok()) {
    PrintError(std::string(db.status().message()));
    return 1;
  }
  const std::string where = (*db)->where();
  alloc::ServiceOptions service_options;
  service_options.policy = options.policy;
  service_options.binder = alloc::MakeBackendBinder(shared, Hostname(), gpus, false);
  // Idle reclaim: a lease with no process on its devices for its class's idle timeout. The tick
  // and /metrics both ask the tracker.
  alloc::IdleTracker idle(service_options.binder);
  std::mutex idle_mutex;
  absl::StatusOr<std::unique_ptr<alloc::Service>> service =
      alloc::Service::Open(*std::move(db), *std::move(inventory), service_options);
  if (!service.ok()) {
    PrintError(std::string(service.status().message()));
    return 1;
  }
  // This machine joins like an agent's (kept in the store, with its layout if an admin set one).
  // Without it (a host name the API cannot carry, say) serve still hands out its GPUs, only
  // without fixed layouts for this machine.
  if (absl::Status s = (*service)->ReportNode(
          alloc::Caller{"gpuslice", "", alloc::Role::kAdmin, ""}, LocalReport(gpus));
      !s.ok()) {
    std::cerr << "gpuslice serve: this machine is not in `gpuslice node list` (" << s.message()
              << "); its GPUs are handed out, but it cannot take a fixed layout\n";
  }
  CarryOutLocalLayout(**service, *shared, *catalog, *service_options.binder);
  absl::StatusOr<std::optional<std::string>> admin = (*service)->BootstrapAdmin("admin");
  if (!admin.ok()) {
    PrintError(std::string(admin.status().message()));
    return 1;
  }
  if (admin->has_value()) {
    if (absl::Status st = util::WritePrivateFile(options.token_file, **admin + "\n"); !st.ok()) {
      PrintError(std::string(st.message()));
      return 1;
    }
  }
  std::string cert_file;
  std::string tls_how;
  absl::StatusOr<std::unique_ptr<api::TlsServerContext>> tls =
      ServerTls(options, &cert_file, &tls_how);
  if (!tls.ok()) {
    PrintError(std::string(tls.status().message()));
    return kExitBadInput;
  }
  api::ServerOptions server_options;
  server_options.host = options.listen.substr(0, colon);
  server_options.port = port;
  server_options.tls = *tls != nullptr ? (*tls)->get() : nullptr;
  server_options.agents_need_client_certificates = !options.tls_client_ca.empty();
  alloc::Service& served = **service;
  AlertRunner alerts(Hostname());
  std::unique_ptr<AlertWebhook> webhook;
  if (!options.alert_webhook.empty()) {
    absl::StatusOr<std::unique_ptr<AlertWebhook>> started =
        AlertWebhook::Start(options.alert_webhook);
    if (!started.ok()) {
      PrintError(std::string(started.status().message()));
      return kExitBadInput;
    }
    webhook = *std::move(started);
    served.SetAlertListener([hook = webhook.get()](const metrics::Alert& alert, bool fired) {
      hook->Send(alert, fired);
    });
  }
  server_options.metrics = [&served, &shared, &idle_mutex, &idle, &alerts] {
    return Scrape(served, *shared, idle_mutex, idle, alerts);
  };
  api::ApiServer server(**service, server_options);
  if (absl::Status status = server.Start(); !status.ok()) {
    PrintError(std::string(status.message()));
    return 1;
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  const std::string host_in_url = server_options.host.find(':') != std::string::npos
                                      ? absl::StrCat("[", server_options.host, "]")
                                      : server_options.host;
  const std::string url =
      absl::StrCat(*tls != nullptr ? "https://" : "http://", host_in_url, ":", server.port());
  std::cout << "gpuslice serve: handing out " << (*service)->inventory().total_gpus() << " GPUs of "
            << source << "\n"
            << "  store:  " << (*service)->store_kind() << " " << where << "\n"
            << "  listen: " << url << "   (health: " << url << "/v1/health)\n";
  if (*tls != nullptr) {
    std::cout << "  TLS:    " << tls_how << " " << cert_file << "\n"
              << "          SHA-256 fingerprint " << (*tls)->fingerprint() << "\n"
              << "          clients trust it with --ca " << cert_file
              << " (or GPUSLICE_CA; ./gpuslice-tls.crt is read when present)\n";
  } else {
    std::cout << "  WARNING: --insecure: plain HTTP, API tokens cross the network in clear\n";
  }
  std::cout << "  admin token: "
            << (admin->has_value() ? std::filesystem::absolute(options.token_file).string()
                                   : std::string("(an admin exists already; token file from the "
                                                 "first start)"))
            << "\n\nTry next, in another terminal:\n"
            << "  export GPUSLICE_SERVER=" << url << " GPUSLICE_TOKEN=$(cat " << options.token_file
            << ")" << (*tls != nullptr ? " GPUSLICE_CA=" + cert_file : std::string()) << "\n"
            << "  gpuslice admin tenant team-a --quota small=4 && gpuslice admin user ann --tenant "
               "team-a\n"
            << "  GPUSLICE_TOKEN=<ann's token> gpuslice acquire --class small --purpose "
               "\"notebook\"\n"
            << "  gpuslice leases --all; gpuslice audit\n"
            << std::flush;
  auto last_tick = std::chrono::steady_clock::now();
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (std::chrono::steady_clock::now() - last_tick >= std::chrono::seconds(options.tick_s)) {
      last_tick = std::chrono::steady_clock::now();
      CarryOutLocalLayout(**service, *shared, *catalog, *service_options.binder);
      const std::int64_t now = EpochNow();
      absl::StatusOr<int> ended = (*service)->Tick([&](const alloc::Lease& lease) {
        std::lock_guard<std::mutex> lock(idle_mutex);
        return idle.IdleSeconds(lease.id, lease.node, lease.bound, now);
      });
      if (!ended.ok()) {
        std::cerr << "gpuslice serve: tick: " << ended.status().message() << "\n";
      }
      RecordLocalUsage(**service, *shared);
      LocalAlerts(**service, *shared, idle_mutex, idle, alerts);
    }
  }
  std::cout << "gpuslice serve: stopping (finishing requests in flight)\n" << std::flush;
  server.Stop();
  served.SetAlertListener(nullptr);
  return kExitOk;
}

}  // namespace

void AddServeCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Run the allocation service: tenants, classes, quotas, queues and leases over an HTTP API. "
      "Uses this machine's GPUs through NVML, or a simulated fleet when no driver is present");
  cmd->add_option("--db", options->db, "The store: an SQLite file, or postgres://user@host:port/db")
      ->capture_default_str();
  cmd->add_option("--listen", options->listen, "HOST:PORT to listen on (loopback by default)")
      ->capture_default_str();
  cmd->add_option("--sim-fleet", options->sim_fleet,
                  "Hand out a simulated fleet instead of local GPUs, e.g. 4xH100-80GB,4xA100-80GB");
  cmd->add_option("--admin-token-file", options->token_file,
                  "Where the first start writes the admin's API token (mode 0600)")
      ->capture_default_str();
  cmd->add_option(
      "--tls-cert", options->tls_cert,
      "The server's certificate chain (PEM), with --tls-key. Without them serve makes a "
      "self-signed pair in --tls-dir on its first start and prints its fingerprint");
  cmd->add_option("--tls-key", options->tls_key, "The certificate's private key (PEM)");
  cmd->add_option("--tls-dir", options->tls_dir,
                  "Where the self-signed pair is kept (gpuslice-tls.crt, gpuslice-tls.key; "
                  "default: the admin token file's directory)");
  cmd->add_option("--tls-client-ca", options->tls_client_ca,
                  "Mutual TLS for agents: a CA (PEM); an agent's token is then accepted only over "
                  "a connection whose client certificate this CA signed for the agent's machine "
                  "(common name or DNS name = the machine)");
  cmd->add_flag("--insecure", options->insecure,
                "Plain HTTP, no TLS: tokens cross the network in clear. Only behind a TLS proxy "
                "or on a trusted loopback");
  cmd->add_option("--policy", options->policy, "Placement policy (see gpuslice replay)")
      ->capture_default_str();
  cmd->add_option("--tick", options->tick_s, "Seconds between expiry/idle/queue sweeps")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--alert-webhook", options->alert_webhook,
                  "POST every alert that fires or clears, as JSON, to this http:// URL");
  cmd->callback([options, action, &global] {
    *action = [options, &global] { return RunServe(global, *options); };
  });
}

}  // namespace gpuslice::cli
