// gpuslice serve: the allocation service. Hands out slices of this machine's GPUs (through NVML),
// or of a simulated fleet when no driver is present (gpuslice/server/serve_setup.h), over the
// HTTP API (gpuslice/api/server.h). Its own machine is reported to the service in-process, as an
// agent reports its machine, so it takes fixed layouts too (gpuslice/server/local_machine.h: each
// tick carries out the machine's layout, the service's sweeps, the usage history and the alerts).
// This file reads the options, puts the pieces together, prints the banner and ticks until
// SIGINT or SIGTERM.
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common.h"
#include "gpuslice/alloc/binder.h"
#include "gpuslice/alloc/inventory.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/api/server.h"
#include "gpuslice/device/synchronized_backend.h"
#include "gpuslice/server/alert_webhook.h"
#include "gpuslice/server/local_machine.h"
#include "gpuslice/server/serve_setup.h"
#include "gpuslice/store/database.h"
#include "gpuslice/util/private_file.h"

namespace gpuslice::cli {
namespace {

struct ServeOptions {
  std::string db = "gpuslice.db";
  std::string listen = "127.0.0.1:8470";
  std::string sim;  // --sim: a fleet spec or a state file
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
  // Failed authentications: this many from one source within the window lock it out.
  int auth_max_failures = 10;
  int auth_window_s = 60;
  int auth_lockout_s = 60;
};

// The directory beside the admin token, where serve keeps its simulated fleet and its pair.
std::string TokenDir(const ServeOptions& options) {
  const std::string dir = std::filesystem::path(options.token_file).parent_path().string();
  return dir.empty() ? "." : dir;
}

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

// What the first start, or any start, prints: where the GPUs come from, the store, the URL, TLS
// and how to trust it, the admin token, and what to try next.
void PrintBanner(const std::string& source, const alloc::Service& service, const std::string& where,
                 const std::string& url, const server::ServerTls& tls, bool admin_made,
                 const std::string& token_file) {
  std::cout << "gpuslice serve: handing out " << service.inventory().total_gpus() << " GPUs of "
            << source << "\n"
            << "  store:  " << service.store_kind() << " " << where << "\n"
            << "  listen: " << url << "   (health: " << url << "/v1/health)\n";
  if (tls.context != nullptr) {
    std::cout << "  TLS:    " << tls.how << " " << tls.cert_file << "\n"
              << "          SHA-256 fingerprint " << tls.context->fingerprint() << "\n"
              << "          clients trust it with --ca " << tls.cert_file
              << " (or GPUSLICE_CA; ./gpuslice-tls.crt is read when present)\n";
  } else {
    std::cout << "  WARNING: --insecure: plain HTTP, API tokens cross the network in clear\n";
  }
  std::cout << "  admin token: "
            << (admin_made ? std::filesystem::absolute(token_file).string()
                           : std::string("(an admin exists already; token file from the "
                                         "first start)"))
            << "\n\nTry next, in another terminal:\n"
            << "  export GPUSLICE_SERVER=" << url << " GPUSLICE_TOKEN=$(cat " << token_file << ")"
            << (tls.context != nullptr ? " GPUSLICE_CA=" + tls.cert_file : std::string()) << "\n"
            << "  gpuslice admin tenant team-a --quota small=4 && gpuslice admin user ann --tenant "
               "team-a\n"
            << "  GPUSLICE_TOKEN=<ann's token> gpuslice acquire --class small --purpose "
               "\"notebook\"\n"
            << "  gpuslice leases --all; gpuslice audit\n"
            << std::flush;
}

// The service over its store and the fleet's inventory, with the fleet's binder.
absl::StatusOr<std::unique_ptr<alloc::Service>> OpenService(
    const ServeOptions& options, const server::Fleet& fleet,
    std::shared_ptr<alloc::DeviceBinder> binder, std::string* where) {
  absl::StatusOr<place::Cluster> inventory = alloc::InventoryFromGpus(
      Hostname(), fleet.gpus, MachineCpuMilli(), MachineMemoryMib(), false);
  if (!inventory.ok()) return inventory.status();
  absl::StatusOr<std::unique_ptr<store::Database>> db = store::OpenDatabase(options.db);
  if (!db.ok()) return db.status();
  *where = (*db)->where();
  alloc::ServiceOptions service_options;
  service_options.policy = options.policy;
  service_options.binder = std::move(binder);
  return alloc::Service::Open(*std::move(db), *std::move(inventory), service_options);
}

api::ServerOptions ApiOptions(const ServeOptions& options, const std::string& host, int port,
                              const server::ServerTls& tls) {
  api::ServerOptions server_options;
  server_options.host = host;
  server_options.port = port;
  server_options.tls = tls.context != nullptr ? tls.context->get() : nullptr;
  server_options.agents_need_client_certificates = !options.tls_client_ca.empty();
  server_options.auth_max_failures = options.auth_max_failures;
  server_options.auth_window_s = options.auth_window_s;
  server_options.auth_lockout_s = options.auth_lockout_s;
  return server_options;
}

int Fail(const absl::Status& status) {
  PrintError(std::string(status.message()));
  return absl::IsInvalidArgument(status) ? kExitBadInput : 1;
}

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
  absl::StatusOr<server::Fleet> fleet = server::OpenFleet(*catalog, options.sim, TokenDir(options));
  if (!fleet.ok()) return Fail(fleet.status());
  // API threads (the binder), the tick (layouts) and the metrics all use the machine's backend.
  auto shared = std::make_shared<device::SynchronizedBackend>(fleet->backend);
  std::shared_ptr<alloc::DeviceBinder> binder =
      alloc::MakeBackendBinder(shared, Hostname(), fleet->gpus, false);
  std::string where;
  absl::StatusOr<std::unique_ptr<alloc::Service>> service =
      OpenService(options, *fleet, binder, &where);
  if (!service.ok()) return Fail(absl::InternalError(service.status().message()));
  alloc::Service& served = **service;
  server::LocalMachine local(served, shared, *catalog, binder);
  // This machine joins like an agent's (kept in the store, with its layout if an admin set one).
  // Without it (a host name the API cannot carry, say) serve still hands out its GPUs, only
  // without fixed layouts for this machine.
  if (absl::Status s = local.Join(fleet->gpus); !s.ok()) {
    std::cerr << "gpuslice serve: this machine is not in `gpuslice node list` (" << s.message()
              << "); its GPUs are handed out, but it cannot take a fixed layout\n";
  }
  absl::StatusOr<std::optional<std::string>> admin = served.BootstrapAdmin("admin");
  if (!admin.ok()) return Fail(absl::InternalError(admin.status().message()));
  if (admin->has_value()) {
    if (absl::Status st = util::WritePrivateFile(options.token_file, **admin + "\n"); !st.ok()) {
      return Fail(absl::InternalError(st.message()));
    }
  }
  absl::StatusOr<server::ServerTls> tls = server::OpenServerTls(
      {options.insecure, options.tls_cert, options.tls_key,
       options.tls_dir.empty() ? TokenDir(options) : options.tls_dir, options.tls_client_ca});
  if (!tls.ok()) return Fail(absl::InvalidArgumentError(tls.status().message()));
  api::ServerOptions server_options =
      ApiOptions(options, options.listen.substr(0, colon), port, *tls);
  std::unique_ptr<server::AlertWebhook> webhook;
  if (!options.alert_webhook.empty()) {
    absl::StatusOr<std::unique_ptr<server::AlertWebhook>> started =
        server::AlertWebhook::Start(options.alert_webhook);
    if (!started.ok()) return Fail(absl::InvalidArgumentError(started.status().message()));
    webhook = *std::move(started);
    served.SetAlertListener([hook = webhook.get()](const metrics::Alert& alert, bool fired) {
      hook->Send(alert, fired);
    });
  }
  server_options.metrics = [&local] { return local.Families(); };
  api::ApiServer server(served, server_options);
  if (absl::Status status = server.Start(); !status.ok()) {
    return Fail(absl::InternalError(status.message()));
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  const std::string host_in_url = server_options.host.find(':') != std::string::npos
                                      ? absl::StrCat("[", server_options.host, "]")
                                      : server_options.host;
  const std::string url = absl::StrCat(tls->context != nullptr ? "https://" : "http://",
                                       host_in_url, ":", server.port());
  PrintBanner(fleet->source, served, where, url, *tls, admin->has_value(), options.token_file);
  auto last_tick = std::chrono::steady_clock::now();
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (std::chrono::steady_clock::now() - last_tick >= std::chrono::seconds(options.tick_s)) {
      last_tick = std::chrono::steady_clock::now();
      local.Tick();
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
  cmd->add_option("--sim", options->sim,
                  "Hand out a simulated machine instead of local GPUs: a fleet such as "
                  "4xH100-80GB,4xA100-80GB (kept beside the admin token) or a state file made by "
                  "`gpuslice sim create`");
  // The spelling before one --sim, kept for a release (hidden from --help).
  cmd->add_option("--sim-fleet", options->sim)->group("");
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
  cmd->add_option("--tick", options->tick_s,
                  "Time between expiry/idle/queue sweeps (5s, 1m; at most 1h)")
      ->capture_default_str()
      ->transform(Duration(3600));
  cmd->add_option("--alert-webhook", options->alert_webhook,
                  "POST every alert that fires or clears, as JSON, to this http:// URL");
  cmd->add_option("--auth-max-failures", options->auth_max_failures,
                  "Failed authentications (unknown or expired tokens) from one source (an IPv4 "
                  "address or an IPv6 /64) within --auth-window that lock it out")
      ->capture_default_str()
      ->check(CLI::Range(1, 1'000'000));
  cmd->add_option("--auth-window", options->auth_window_s,
                  "Time over which failed authentications are counted (60s, 5m; at most 1d)")
      ->capture_default_str()
      ->transform(Duration(86'400));
  cmd->add_option("--auth-lockout", options->auth_lockout_s,
                  "How long a locked-out source is answered 429 (Retry-After), its tokens unread "
                  "(60s, 10m; at most 1d)")
      ->capture_default_str()
      ->transform(Duration(86'400));
  cmd->callback([options, action, &global] {
    *action = [options, &global] { return RunServe(global, *options); };
  });
}

}  // namespace gpuslice::cli
