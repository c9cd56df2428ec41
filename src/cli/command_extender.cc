// `gpuslice extender`: the Kubernetes scheduler extender (HTTP/JSON, kube-scheduler's
// `extenders:` configuration) backed by the placement engine: filter, prioritize and bind verbs
// under --prefix, bindings posted to the API server (src/k8s/extender_server.h,
// gpuslice/k8s/extender.h, gpuslice/k8s/kube_api.h).
//
// The cluster comes from --nodes: YAML (gpuslice/k8s/extender.h, ParseNodesYaml: name, gpus,
// mode, model per node) or the replay's CSV (sn,cpu_milli,memory_mib,gpu,model; every node in
// --csv-mode). The extender's view starts empty and follows the pods it binds; POST
// <prefix>/release tells it a pod is gone.
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common.h"
#include "extender_server.h"
#include "gpuslice/k8s/extender.h"
#include "gpuslice/k8s/kube_api.h"
#include "gpuslice/place/replay.h"
#include "gpuslice/server/metrics_listener.h"

namespace gpuslice::cli {
namespace {

struct ExtenderCliOptions {
  std::string listen = "127.0.0.1:8888";
  std::string prefix;
  std::string nodes;
  std::string csv_mode = "shared";
  std::string policy = "gpuslice";
  int units = k8s::kDefaultUnitsPerGpu;
  std::string kube_api;
  std::string token_file = std::string(k8s::kServiceAccountTokenFile);
  std::string ca_file;
  bool insecure = false;
  bool no_bind = false;
  int resync_s = 30;
};

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

absl::StatusOr<std::vector<place::NodeSpec>> ReadNodes(const ExtenderCliOptions& options,
                                                       const hw::Catalog& catalog) {
  const std::string& path = options.nodes;
  if (path.ends_with(".csv")) {
    absl::StatusOr<std::vector<place::NodeSpec>> nodes = place::ReadNodesCsv(path);
    if (!nodes.ok()) return nodes.status();
    for (place::NodeSpec& node : *nodes) {
      node.max_pods = 1 << 20;
      if (options.csv_mode == "whole") {
        node.mode = place::GpuMode::kWhole;
      } else if (options.csv_mode == "mig") {
        const hw::GpuModel* model = catalog.Find(node.model);
        if (model == nullptr || !model->mig_capable()) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": node ", node.name, ": model '",
                                                         node.model, "' is not a MIG GPU"));
        }
        node.mode = place::GpuMode::kMig;
        node.hardware = model;
        node.model = model->id;
      }
      if (const hw::GpuModel* model = catalog.Find(node.model)) {
        node.gpu_memory_mib = model->memory_mib;
      }
    }
    return nodes;
  }
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return k8s::ParseNodesYaml(text.str(), path, &catalog);
}

int RunExtender(const ExtenderCliOptions& options, const GlobalOptions& global) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  absl::StatusOr<std::vector<place::NodeSpec>> nodes = ReadNodes(options, *catalog);
  if (!nodes.ok()) {
    std::cerr << "gpuslice extender: " << nodes.status().message() << "\n";
    return kExitBadInput;
  }
  k8s::ExtenderOptions extender_options;
  extender_options.policy = options.policy;
  extender_options.units_per_gpu = options.units;
  extender_options.catalog = catalog;
  absl::StatusOr<k8s::Extender> extender = k8s::Extender::Create(*nodes, extender_options);
  if (!extender.ok()) {
    std::cerr << "gpuslice extender: " << extender.status().message() << "\n";
    return kExitBadInput;
  }
  k8s::Binder binder;
  std::string bind_note;
  std::optional<k8s::KubeApiClient> api_client;
  if (options.no_bind) {
    binder = [](const k8s::BindingTarget&) { return absl::OkStatus(); };
    bind_note = "bind: GPUs claimed, no Binding posted (--no-bind)";
  } else {
    k8s::KubeApiOptions api;
    api.server = options.kube_api;
    api.token_file = options.token_file;
    api.ca_file = options.ca_file;
    api.insecure_skip_tls_verify = options.insecure;
    absl::StatusOr<k8s::KubeApiOptions> resolved = k8s::InClusterOptions(api);
    if (!resolved.ok()) {
      std::cerr << "gpuslice extender: " << resolved.status().message()
                << " (--kube-api URL, or --no-bind)\n";
      return kExitBadInput;
    }
    absl::StatusOr<k8s::KubeApiClient> client = k8s::KubeApiClient::Create(*resolved);
    if (!client.ok()) {
      std::cerr << "gpuslice extender: " << client.status().message() << "\n";
      return kExitBadInput;
    }
    binder = client->AsBinder();
    bind_note = absl::StrCat("bind: Bindings posted to ", resolved->server);
    if (options.resync_s > 0) {
      api_client = *client;
      absl::StrAppend(&bind_note, "; pods gone from it released every ", options.resync_s, " s");
    }
  }
  absl::StatusOr<server::ListenAddress> address = server::ParseListenAddress(options.listen);
  if (!address.ok()) {
    std::cerr << "gpuslice extender: --listen: " << address.status().message() << "\n";
    return kExitBadInput;
  }
  k8s::ExtenderService service(&*extender, binder, options.prefix);
  httplib::Server server;
  service.Register(server);
  int port = address->port;
  if (port == 0) {
    port = server.bind_to_any_port(address->host);
  } else if (!server.bind_to_port(address->host, port)) {
    port = -1;
  }
  if (port < 0) {
    std::cerr << "gpuslice extender: cannot listen on " << options.listen << "\n";
    return kExitCheckFailed;
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::thread thread([&server] { server.listen_after_bind(); });
  std::string prefix = options.prefix;
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (!prefix.empty() && prefix.front() != '/') prefix.insert(prefix.begin(), '/');
  const bool v6 = address->host.find(':') != std::string::npos;
  std::cout << "gpuslice extender: " << nodes->size() << " node(s), policy " << options.policy
            << ", listening on http://" << (v6 ? "[" : "") << address->host << (v6 ? "]" : "")
            << ":" << port << prefix << " (filter, prioritize, bind, release, state); " << bind_note
            << "\n"
            << std::flush;
  // Resync: pods deleted or finished give their GPUs back (the API server's pod list is the truth).
  auto next_resync = std::chrono::steady_clock::now() + std::chrono::seconds(options.resync_s);
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!api_client || std::chrono::steady_clock::now() < next_resync) continue;
    next_resync = std::chrono::steady_clock::now() + std::chrono::seconds(options.resync_s);
    absl::StatusOr<nlohmann::json> pods = api_client->ListPods();
    if (!pods.ok()) {
      std::cerr << "gpuslice extender: resync: " << pods.status().message() << "\n";
      continue;
    }
    absl::StatusOr<k8s::ResyncResult> synced = service.Resync(*pods);
    if (!synced.ok()) {
      std::cerr << "gpuslice extender: resync: " << synced.status().message() << "\n";
      continue;
    }
    if (!synced->released.empty()) {
      std::cout << "gpuslice extender: released " << absl::StrJoin(synced->released, ", ")
                << " (gone from the API server)\n";
    }
    if (!synced->adopted.empty()) {
      std::cout << "gpuslice extender: took in " << absl::StrJoin(synced->adopted, ", ")
                << " (bound without the extender)\n";
    }
    for (const std::string& conflict : synced->conflicts) {
      std::cerr << "gpuslice extender: resync: does not fit where it runs: " << conflict << "\n";
    }
    std::cout << std::flush;
  }
  server.stop();
  thread.join();
  std::cout << "gpuslice extender: stopped\n";
  return kExitOk;
}

}  // namespace

void AddExtenderCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto options = std::make_shared<ExtenderCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "extender",
      "Kubernetes scheduler extender backed by gpuslice's placement engine: filter, prioritize "
      "and bind for pods asking for nvidia.com/gpu, nvidia.com/mig-* or gpuslice.io/gpu-share");
  cmd->add_option("--listen", options->listen, "HOST:PORT to serve on (PORT 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--prefix", options->prefix,
                  "URL path before the verbs (kube-scheduler's urlPrefix path), e.g. /extender");
  cmd->add_option("--nodes", options->nodes,
                  "Nodes file: YAML (nodes: [{name, gpus, mode: whole|shared|mig, model}]) or "
                  "CSV sn,cpu_milli,memory_mib,gpu,model")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--csv-mode", options->csv_mode, "GPU mode of every node of a CSV nodes file")
      ->check(CLI::IsMember({"whole", "shared", "mig"}))
      ->capture_default_str();
  cmd->add_option("--policy", options->policy,
                  "Placement policy (dotprod, gpuclustering, gpupacking, bestfit, fgd, gpuslice)")
      ->capture_default_str();
  cmd->add_option("--units", options->units,
                  "gpuslice.io/gpu-share units per GPU (as the device plugin's)")
      ->check(CLI::Range(2, 1000))
      ->capture_default_str();
  cmd->add_option("--kube-api", options->kube_api,
                  "API server, http(s)://host:port (default in a pod: "
                  "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)");
  cmd->add_option("--token-file", options->token_file, "Bearer token file ('' = none)")
      ->capture_default_str();
  cmd->add_option("--ca-file", options->ca_file,
                  "CA certificates for an https API server (in a pod: the service account's)");
  cmd->add_flag("--insecure-skip-tls-verify", options->insecure,
                "Do not verify the API server's certificate");
  cmd->add_option("--resync-seconds", options->resync_s,
                  "List the API server's pods this often: release the GPUs of pods that are gone "
                  "or finished, take in pods bound without the extender (0: never; with --no-bind "
                  "there is no API server to ask)")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();
  cmd->add_flag("--no-bind", options->no_bind,
                "Bind claims the GPUs but posts no Binding (trials without an API server)");
  cmd->callback([options, action, &global] {
    *action = [options, &global] { return RunExtender(*options, global); };
  });
}

}  // namespace gpuslice::cli
