// `gpuslice device-plugin`: the Kubernetes device plugin of this node (gpuslice/k8s/plugin.h).
//
// It offers whole GPUs as nvidia.com/gpu, MIG devices as nvidia.com/mig-<profile> (NVIDIA's mixed
// strategy, so existing pod specs work) and GPUs chosen with --shared-gpus in units of
// gpuslice.io/gpu-share, enforced by the CUDA interposer. Layout changes made by the agent reach
// kubelet within a poll (200 ms) without a restart; a kubelet restart is followed by a new
// registration. With --nfd-features-file it keeps the node's GFD-style labels in Node Feature
// Discovery's local feature file; with --metrics-listen it answers GET /metrics with each device's
// resource, health and, from kubelet's pod-resources API, the pod that holds it.
//
// --once reads the node and prints what would be offered (resources, devices, labels; --json for
// scripts), and exits without talking to kubelet.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common.h"
#include "device_options.h"
#include "gpuslice/k8s/devices.h"
#include "gpuslice/k8s/labels.h"
#include "gpuslice/k8s/node_reader.h"
#include "gpuslice/k8s/plugin.h"
#include "gpuslice/k8s/pod_resources.h"
#include "gpuslice/metrics/exposition.h"
#include "gpuslice/server/metrics_listener.h"
#include "interposer_path.h"

namespace gpuslice::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnStop(int) { g_stop = true; }

struct DevicePluginOptions {
  DeviceOptions device;
  std::string plugin_dir = std::string(k8s::kDefaultPluginDir);
  std::string kubelet_socket = "kubelet.sock";
  std::string pod_resources_socket = std::string(k8s::kDefaultPodResourcesSocket);
  std::string shared_gpus;
  int share_units = 100;
  std::string interposer;
  std::string shm_dir = "/dev/shm/gpuslice";
  bool no_device_specs = false;
  std::string nfd_features_file;
  std::string metrics_listen;
  int poll_ms = 200;
  std::string policy = "gpuslice";
  bool once = false;
  bool json = false;
};

std::string Now() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

std::mutex g_log_mu;
void LogLine(const std::string& line) {
  std::lock_guard lock(g_log_mu);
  std::cerr << Now() << " device-plugin: " << line << "\n";
}

// The device plugin's own families: one series per device offered, with its pod when it is held.
std::vector<metrics::Family> PluginFamilies(const k8s::ResourceMap& resources,
                                            const std::vector<std::string>& registered,
                                            const absl::StatusOr<std::vector<k8s::PodDevice>>& pods,
                                            const std::string& host) {
  std::map<std::string, k8s::PodDevice> holder;
  if (pods.ok()) {
    for (const k8s::PodDevice& pod : *pods) holder[pod.device_id] = pod;
  }
  metrics::Family devices{"gpuslice_k8s_device_info",
                          "A device this node offers to Kubernetes: resource, device ID, health "
                          "and the pod holding it (empty when free), from kubelet's pod-resources "
                          "API",
                          metrics::MetricType::kGauge,
                          {}};
  metrics::Family allocated{"gpuslice_k8s_devices_allocated",
                            "Devices of the resource held by pods",
                            metrics::MetricType::kGauge,
                            {}};
  metrics::Family offered{"gpuslice_k8s_devices",
                          "Healthy devices of the resource offered",
                          metrics::MetricType::kGauge,
                          {}};
  metrics::Family registration{"gpuslice_k8s_registered",
                               "1 when the resource is registered with the current kubelet",
                               metrics::MetricType::kGauge,
                               {}};
  for (const auto& [resource, list] : resources) {
    int held = 0, healthy = 0;
    for (const k8s::PluginDevice& device : list) {
      const auto owner = holder.find(device.id);
      const bool taken = owner != holder.end();
      held += taken ? 1 : 0;
      healthy += device.healthy ? 1 : 0;
      devices.samples.push_back({{{"resource", resource},
                                  {"device", device.id},
                                  {"health", device.healthy ? "Healthy" : "Unhealthy"},
                                  {"namespace", taken ? owner->second.pod_namespace : ""},
                                  {"pod", taken ? owner->second.pod : ""},
                                  {"container", taken ? owner->second.container : ""},
                                  {"Hostname", host}},
                                 1});
    }
    allocated.samples.push_back({{{"resource", resource}, {"Hostname", host}}, double(held)});
    offered.samples.push_back({{{"resource", resource}, {"Hostname", host}}, double(healthy)});
    const bool is_registered =
        std::find(registered.begin(), registered.end(), resource) != registered.end();
    registration.samples.push_back(
        {{{"resource", resource}, {"Hostname", host}}, is_registered ? 1.0 : 0.0});
  }
  metrics::Family up{"gpuslice_k8s_pod_resources_up",
                     "1 when kubelet's pod-resources API answered this scrape",
                     metrics::MetricType::kGauge,
                     {{{{"Hostname", host}}, pods.ok() ? 1.0 : 0.0}}};
  return {devices, allocated, offered, registration, up};
}

int RunDevicePlugin(const GlobalOptions& global, const DevicePluginOptions& o) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  k8s::PluginOptions options;
  options.plugin_dir = o.plugin_dir;
  options.kubelet_socket = o.kubelet_socket;
  options.poll = std::chrono::milliseconds(o.poll_ms);
  options.policy = o.policy;
  options.allocate.sharing.units = o.share_units;
  for (const std::string& part :
       std::vector<std::string>(absl::StrSplit(o.shared_gpus, ',', absl::SkipWhitespace()))) {
    if (part != "none") options.allocate.sharing.shared_gpus.emplace_back(part);
  }
  if (absl::Status sharing = k8s::ValidateSharing(options.allocate.sharing); !sharing.ok()) {
    PrintError(absl::StrCat("--share-units/--shared-gpus: ", sharing.message()));
    return kExitBadInput;
  }
  options.allocate.shm_host_dir = o.shm_dir;
  options.allocate.shm_container_dir = o.shm_dir;
  options.allocate.device_specs = !o.no_device_specs;
  if (!o.interposer.empty()) {
    options.allocate.interposer_host_path = o.interposer;
  } else if (absl::StatusOr<std::string> found = FindInterposer(); found.ok()) {
    options.allocate.interposer_host_path = *found;
  } else if (!options.allocate.sharing.shared_gpus.empty() && !o.once) {
    LogLine(absl::StrCat("warning: ", found.status().message(),
                         "; share units will be refused at allocation (--interposer PATH)"));
  }
  absl::StatusOr<std::optional<server::ListenAddress>> metrics_option =
      server::ParseMetricsListenOption(o.metrics_listen);
  if (!metrics_option.ok()) {
    PrintError(std::string(metrics_option.status().message()));
    return kExitBadInput;
  }
  const std::optional<server::ListenAddress> metrics_address = *metrics_option;

  std::unique_ptr<device::Backend> backend = OpenBackend(o.device, *catalog);
  if (backend == nullptr) return 1;
  k8s::NodeReader reader(*backend);

  if (o.once) {
    absl::StatusOr<k8s::NodeSnapshot> node = reader.Read();
    if (!node.ok()) {
      PrintError(absl::StrCat("reading the GPUs: ", node.status().message()));
      return 1;
    }
    const k8s::NodeResources resources = k8s::ResourcesOf(*node, options.allocate.sharing);
    const k8s::Labels labels = k8s::NodeLabels(*node, options.allocate.sharing, *catalog);
    if (o.json) {
      nlohmann::json out;
      out["resources"] = nlohmann::json::object();
      for (const auto& [resource, devices] : resources.resources) {
        nlohmann::json list = nlohmann::json::array();
        for (const k8s::PluginDevice& device : devices) {
          list.push_back({{"id", device.id},
                          {"health", device.healthy ? "Healthy" : "Unhealthy"},
                          {"numa_node", device.numa_node}});
        }
        out["resources"][resource] = list;
      }
      out["skipped"] = resources.skipped;
      out["labels"] = labels;
      std::vector<nlohmann::json> unhealthy;
      for (const k8s::NodeGpu& gpu : node->gpus) {
        if (!gpu.healthy)
          unhealthy.push_back({{"gpu", gpu.index}, {"reason", gpu.unhealthy_reason}});
      }
      out["unhealthy"] = unhealthy;
      PrintJson(out);
      return kExitOk;
    }
    std::cout << "Resources this node offers to Kubernetes (" << backend->Describe() << "):\n";
    if (resources.resources.empty()) std::cout << "  none\n";
    for (const auto& [resource, devices] : resources.resources) {
      int healthy = 0;
      for (const k8s::PluginDevice& device : devices) healthy += device.healthy ? 1 : 0;
      std::cout << "  " << resource << ": " << devices.size()
                << (devices.size() == 1 ? " device (" : " devices (") << healthy << " healthy)";
      if (resource == k8s::kShareResource) {
        std::cout << ", " << options.allocate.sharing.units << " units per GPU";
      } else {
        std::vector<std::string> ids;
        for (const k8s::PluginDevice& device : devices) ids.push_back(device.id);
        std::cout << ": " << absl::StrJoin(ids, " ");
      }
      std::cout << "\n";
    }
    for (const std::string& skipped : resources.skipped)
      std::cout << "  not offered: " << skipped << "\n";
    for (const k8s::NodeGpu& gpu : node->gpus) {
      if (!gpu.healthy)
        std::cout << "  GPU " << gpu.index << " unhealthy: " << gpu.unhealthy_reason << "\n";
    }
    std::cout << "Node labels:\n";
    for (const auto& [name, value] : labels) std::cout << "  " << name << "=" << value << "\n";
    return kExitOk;
  }

  options.log = LogLine;
  const std::string host = Hostname();
  if (!o.nfd_features_file.empty()) {
    options.on_change = [&](const k8s::NodeSnapshot& node) {
      const std::string text =
          k8s::NfdFeatureFile(k8s::NodeLabels(node, options.allocate.sharing, *catalog));
      if (absl::Status written = k8s::WriteFeatureFile(o.nfd_features_file, text); !written.ok()) {
        LogLine(absl::StrCat("node labels: ", written.message()));
      } else {
        LogLine(absl::StrCat("node labels written to ", o.nfd_features_file));
      }
    };
  }
  k8s::DevicePlugin plugin([&reader] { return reader.Read(); }, options);
  if (absl::Status started = plugin.Start(); !started.ok()) {
    PrintError(absl::StrCat("device plugin: ", started.message()));
    return started.code() == absl::StatusCode::kInvalidArgument ? kExitBadInput : 1;
  }
  std::unique_ptr<server::MetricsListener> listener;
  if (metrics_address) {
    listener = std::make_unique<server::MetricsListener>([&]() -> absl::StatusOr<std::string> {
      return metrics::Write(PluginFamilies(
          plugin.resources(), plugin.registered(),
          k8s::ListPodDevices(o.pod_resources_socket, std::chrono::milliseconds(1000)), host));
    });
    if (absl::Status s = listener->Start(*metrics_address); !s.ok()) {
      PrintError(absl::StrCat("--metrics-listen: ", s.message()));
      return 1;
    }
    LogLine(absl::StrCat("metrics on http://",
                         o.metrics_listen.substr(0, o.metrics_listen.rfind(':')), ":",
                         listener->port(), "/metrics"));
  }
  std::signal(SIGINT, OnStop);
  std::signal(SIGTERM, OnStop);
  plugin.Run(g_stop);
  if (listener) listener->Stop();
  plugin.Stop();
  // A plugin that is not running offers nothing: its labels go too (NFD drops them at its next
  // discovery); the next start writes them again.
  if (!o.nfd_features_file.empty() && std::remove(o.nfd_features_file.c_str()) == 0) {
    LogLine(absl::StrCat("node labels removed from ", o.nfd_features_file));
  }
  LogLine("stopped");
  return kExitOk;
}

}  // namespace

void AddDevicePluginCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto o = std::make_shared<DevicePluginOptions>();
  CLI::App* cmd = app.add_subcommand(
      "device-plugin",
      "Run the Kubernetes device plugin of this node: MIG devices as nvidia.com/mig-<profile>, "
      "whole GPUs as nvidia.com/gpu, shared GPUs in units of gpuslice.io/gpu-share (enforced by "
      "the CUDA interposer); follows layout changes and kubelet restarts live");
  AddDeviceOptions(*cmd, o->device);
  cmd->add_option("--plugin-dir", o->plugin_dir,
                  "kubelet's device-plugin directory (kubelet.sock and the plugin's sockets)")
      ->capture_default_str();
  cmd->add_option("--kubelet-socket", o->kubelet_socket,
                  "kubelet's registration socket, a file name in --plugin-dir")
      ->capture_default_str();
  cmd->add_option("--pod-resources-socket", o->pod_resources_socket,
                  "kubelet's pod-resources socket: which pod holds which device (metrics labels)")
      ->capture_default_str();
  cmd->add_option("--shared-gpus", o->shared_gpus,
                  "GPUs offered in shares instead of whole: comma-separated indices or UUIDs, or "
                  "'all' (MIG-disabled GPUs only), or 'none' (the default)");
  cmd->add_option("--share-units", o->share_units,
                  "Units of gpuslice.io/gpu-share per shared GPU (a divisor of 1000); one unit is "
                  "that fraction of the GPU's compute time and of its memory")
      ->capture_default_str();
  cmd->add_option("--interposer", o->interposer,
                  "The CUDA interposer libgpuslice-cuda.so on this host, mounted into containers "
                  "holding share units (default: found next to this binary or installed)");
  cmd->add_option("--shm-dir", o->shm_dir,
                  "Host directory of the slices' accounting files, mounted into share containers "
                  "so the agent sees them")
      ->capture_default_str();
  cmd->add_flag("--no-device-specs", o->no_device_specs,
                "Do not pass /dev/nvidia* nodes in Allocate (leave them to the NVIDIA container "
                "runtime, which reads NVIDIA_VISIBLE_DEVICES)");
  cmd->add_option("--nfd-features-file", o->nfd_features_file,
                  "Keep the node's GPU labels (GFD names) in this Node Feature Discovery local "
                  "feature file, e.g. /etc/kubernetes/node-feature-discovery/features.d/gpuslice");
  cmd->add_option("--metrics-listen", o->metrics_listen,
                  "Answer GET /metrics (Prometheus) on HOST:PORT: each device, its health and the "
                  "pod holding it");
  cmd->add_option("--poll-ms", o->poll_ms, "How often the GPUs are read, in milliseconds")
      ->check(CLI::Range(20, 60000))
      ->capture_default_str();
  cmd->add_option("--policy", o->policy,
                  "Placement policy for GetPreferredAllocation (gpuslice replay lists them)")
      ->capture_default_str();
  cmd->add_flag("--once", o->once,
                "Print the resources, devices and labels this node would offer, and exit");
  cmd->add_flag("--json", o->json, "With --once: as JSON");
  cmd->callback(
      [&global, o, action] { *action = [&global, o] { return RunDevicePlugin(global, *o); }; });
}

}  // namespace gpuslice::cli
