// `gpuslice agent --server URL`: the agent of one machine (gpuslice/agent/node_agent.h does the
// work). This file reads the options, opens the machine's device backend (NVML, or a simulated
// machine), starts the metrics listener when asked (gpuslice/server/metrics_listener.h) and runs
// the agent until SIGINT or SIGTERM.
#include <atomic>
#include <csignal>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "client.h"
#include "common.h"
#include "gpuslice/agent/node_agent.h"
#include "gpuslice/device/open_machine.h"
#include "gpuslice/device/synchronized_backend.h"
#include "gpuslice/server/metrics_listener.h"

namespace gpuslice::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnStop(int) { g_stop = true; }

struct AgentOptions {
  ClientOptions c;
  agent::NodeAgentOptions node;
  std::string sim;  // a fleet spec or a state file; empty: NVML (gpuslice/device/open_machine.h)
  bool once = false;
  std::string metrics_listen;      // HOST:PORT for GET /metrics; empty: none
  std::string metrics_token_file;  // the bearer token scrapes must send
};

std::string Log() { return "gpuslice agent: "; }

int RunAgent(const GlobalOptions& global, const AgentOptions& o) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  absl::StatusOr<std::optional<server::ListenAddress>> metrics_option =
      server::ParseMetricsListenOption(o.metrics_listen);
  if (!metrics_option.ok()) {
    PrintError(std::string(metrics_option.status().message()));
    return kExitBadInput;
  }
  const std::optional<server::ListenAddress> metrics_address = *metrics_option;
  std::string metrics_token;
  if (!o.metrics_token_file.empty()) {
    std::ifstream in(o.metrics_token_file);
    std::getline(in, metrics_token);
    if (!in.good() && metrics_token.empty()) {
      PrintError("--metrics-token-file " + o.metrics_token_file + ": cannot read a token from it");
      return kExitBadInput;
    }
  }
  if (metrics_address.has_value() && metrics_token.empty() &&
      server::NeedsToken(*metrics_address)) {
    PrintError("--metrics-listen " + o.metrics_listen +
               " is not a loopback address: anyone who reaches it would read this machine's "
               "leases; give --metrics-token-file FILE (scrapes then send its token as Bearer), "
               "or listen on 127.0.0.1");
    return kExitBadInput;
  }
  // Seeded by the host name, so that simulated machines have distinct UUIDs.
  absl::StatusOr<std::unique_ptr<device::Backend>> opened =
      device::OpenMachine(o.sim, *catalog, std::hash<std::string>{}(o.node.host) | 1);
  if (!opened.ok()) {
    if (device::KindOf(o.sim) != device::MachineKind::kLocalGpus) {
      PrintError(std::string(opened.status().message()));
      return kExitBadInput;
    }
    PrintError(absl::StrCat("no NVIDIA driver: ", opened.status().message(),
                            " (for a simulated machine, give --sim FLEET or --sim STATE_FILE)"));
    return 1;
  }
  std::shared_ptr<device::Backend> backend = *std::move(opened);
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
  std::cerr << Log() << backend->Describe() << ", " << gpus.size() << " GPUs, host " << o.node.host
            << "\n";
  absl::StatusOr<api::ClientSettings> settings = ClientSettings(o.c);
  absl::StatusOr<api::Client> client =
      settings.ok() ? api::Client::Make(*std::move(settings)) : settings.status();
  if (!client.ok()) {
    PrintError(std::string(client.status().message()));
    return kExitBadInput;
  }
  agent::NodeAgentOptions node = o.node;
  node.cpu_milli = MachineCpuMilli();
  node.memory_mib = MachineMemoryMib();
  // The rounds (this thread) and the scrapes (the listener's threads) share the backend.
  agent::NodeAgent agent(node, *catalog, *std::move(client),
                         std::make_shared<device::SynchronizedBackend>(std::move(backend)), gpus);
  std::unique_ptr<server::MetricsListener> listener;  // stopped before the agent goes
  if (metrics_address.has_value()) {
    listener = std::make_unique<server::MetricsListener>([&agent] { return agent.Scrape(); });
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
  const absl::Status ran = agent::RunNodeAgent(agent, o.node.interval_s, o.once, g_stop);
  if (ran.ok()) return kExitOk;
  PrintError(std::string(ran.message()));
  // As the client commands: 3 for a refused token, 2 for a server that could not be reached.
  if (api::IsRefusedCredential(ran)) return kExitNotAllowed;
  return api::HttpStatusOf(ran) == 0 && absl::IsUnavailable(ran) ? kExitBadInput : 1;
}

}  // namespace

void AddAgentCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto o = std::make_shared<AgentOptions>();
  o->node.host = Hostname();
  CLI::App* cmd = app.add_subcommand(
      "agent",
      "Report this machine's GPUs to a gpuslice serve and set up the slices it grants here "
      "(MIG instances at their placements), tearing them down when the leases end");
  AddConnection(cmd, o->c);
  cmd->add_flag("--remove-foreign-instances", o->node.remove_foreign_instances,
                "Remove idle MIG instances that were on the GPUs when the agent started and that "
                "no lease holds (by default they are kept and named in the log)");
  cmd->add_option("--client-cert", o->c.client_cert,
                  "Mutual TLS: this machine's client certificate (PEM), when serve asks agents "
                  "for one (--tls-client-ca)");
  cmd->add_option("--client-key", o->c.client_key, "The client certificate's private key (PEM)");
  cmd->add_option("--host", o->node.host, "This machine's name in the service")
      ->capture_default_str();
  cmd->add_option("--sim", o->sim,
                  "A simulated machine instead of NVML: a fleet such as 2xH100-80GB (MIG on where "
                  "possible) or a state file made by `gpuslice sim create`");
  // The spellings before one --sim, kept for a release (hidden from --help).
  cmd->add_option("--sim-fleet", o->sim)->group("");
  cmd->add_option("--sim-state", o->sim)->group("");
  cmd->add_option("--interval", o->node.interval_s, "Time between rounds (2s, 1m; at most 10m)")
      ->capture_default_str()
      ->transform(Duration(600));
  cmd->add_flag("--once", o->once, "Report and do one round, then exit");
  cmd->add_option("--pod-resources-socket", o->node.pod_resources_socket,
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
