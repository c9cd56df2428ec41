// `gpuslice dra-driver`: the Kubernetes DRA driver of this node (gpuslice/dra/driver.h). This file
// parses options and prints; the driver's logic lives in src/dra.
//
// --once reads the node and prints the ResourceSlices the driver would publish, exactly as it
// would send them (--json: the objects; else a summary), and exits: no kubelet, no change to the
// GPUs or the checkpoint. The slice layout follows --kubernetes-version (1.34: counters beside the
// devices; 1.35 and later: in slices of their own), or the API server's version with --kube-api.
//
// --device-classes prints the DeviceClass objects that go with the driver
// (gpuslice/dra/device_classes.h) for the catalog, as YAML documents (--json: a JSON array), and
// exits; deploy/kubernetes/dra/deviceclasses.yaml is this output.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common.h"
#include "device_options.h"
#include "gpuslice/device/open_machine.h"
#include "gpuslice/dra/device_classes.h"
#include "gpuslice/dra/driver.h"
#include "gpuslice/dra/gpu_devices.h"
#include "gpuslice/dra/node_driver.h"
#include "gpuslice/dra/pool.h"
#include "gpuslice/plan/report.h"
#include "gpuslice/spec/mig_parted.h"
#include "gpuslice/util/yaml_writer.h"
#include "interposer_path.h"

namespace gpuslice::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnStop(int) { g_stop = true; }

struct DraDriverOptions {
  DeviceOptions device;
  std::string node_name;
  std::string kube_api;
  std::string kube_token_file = std::string(k8s::kServiceAccountTokenFile);
  std::string kube_ca;
  bool insecure_skip_tls_verify = false;
  std::string registry_dir = dra::kDefaultRegistryDir;
  std::string plugin_dir;
  std::string cdi_dir = "/var/run/cdi";
  std::string state_dir;
  std::string shared_gpus;
  std::string fixed_gpus;
  std::string fixed_layout;
  std::string fixed_layout_config;
  std::string interposer;
  std::string shm_dir = "/dev/shm/gpuslice";
  bool no_device_specs = false;
  std::string kubernetes_version = "1.35";
  bool once = false;
  bool json = false;
  bool device_classes = false;
};

std::mutex g_log_mu;
void LogLine(const std::string& line) {
  std::lock_guard lock(g_log_mu);
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::cerr << text << " dra-driver: " << line << "\n";
}

std::vector<std::string> ListOption(const std::string& text) {
  std::vector<std::string> out;
  for (const std::string& part :
       std::vector<std::string>(absl::StrSplit(text, ',', absl::SkipWhitespace()))) {
    if (part != "none") out.push_back(part);
  }
  return out;
}

std::string NodeName(const DraDriverOptions& o) {
  if (!o.node_name.empty()) return o.node_name;
  if (const char* env = std::getenv("NODE_NAME"); env != nullptr && *env != '\0') return env;
  return Hostname();
}

dra::NodeDriverOptions NodeOptions(const DraDriverOptions& o) {
  dra::NodeDriverOptions node;
  node.node_name = NodeName(o);
  const std::string sim = SimPath(o.device);
  const std::string state_dir = !o.state_dir.empty() ? o.state_dir
                                : !sim.empty()       ? sim + ".dra"
                                                     : "/var/lib/gpuslice/dra";
  node.checkpoint_path = state_dir + "/checkpoint.json";
  node.cdi_dir = o.cdi_dir;
  node.shared_gpus = ListOption(o.shared_gpus);
  node.fixed_gpus = ListOption(o.fixed_gpus);
  node.fixed_layout_name = o.fixed_layout_config;
  node.allocate.shm_host_dir = o.shm_dir;
  node.allocate.shm_container_dir = o.shm_dir;
  node.allocate.device_specs = !o.no_device_specs;
  if (!o.interposer.empty()) {
    node.allocate.interposer_host_path = o.interposer;
  } else if (absl::StatusOr<std::string> found = FindInterposer(); found.ok()) {
    node.allocate.interposer_host_path = *found;
  }
  node.log = LogLine;
  return node;
}

void PrintSummary(const std::vector<dra::ResourceSlice>& slices, const std::string& describe) {
  std::cout << "ResourceSlices this node would publish (" << describe << "), pool "
            << (slices.empty() ? "" : slices[0].node_name) << ", " << slices.size()
            << (slices.size() == 1 ? " slice" : " slices") << ":\n";
  for (const dra::ResourceSlice& slice : slices) {
    std::map<std::string, int> kinds;
    for (const dra::Device& d : slice.devices) {
      const std::string type = std::get<std::string>(d.attributes.at("type"));
      ++kinds[type];
    }
    std::cout << "  slice " << slice.index << ": " << slice.shared_counters.size()
              << " counter sets, " << slice.devices.size() << " devices";
    for (const auto& [type, n] : kinds) std::cout << " (" << n << " " << type << ")";
    std::cout << "\n";
  }
}

int RunOnce(const DraDriverOptions& o, device::Backend& backend, const hw::Catalog& catalog) {
  dra::NodeDriverOptions node = NodeOptions(o);
  node.recover = false;  // only look
  absl::StatusOr<std::unique_ptr<dra::NodeDriver>> driver =
      dra::NodeDriver::Create(backend, catalog, nullptr, node);
  if (!driver.ok()) {
    PrintError(std::string(driver.status().message()));
    return driver.status().code() == absl::StatusCode::kInvalidArgument ? kExitBadInput : 1;
  }
  // With --kube-api: the API server's version picks the layout and the Node's uid owns the slices.
  std::string version = o.kubernetes_version;
  std::string node_uid;
  if (!o.kube_api.empty()) {
    absl::StatusOr<k8s::KubeApiClient> client = k8s::KubeApiClient::Create(
        {o.kube_api, o.kube_token_file, o.kube_ca, o.insecure_skip_tls_verify});
    if (!client.ok()) {
      PrintError(absl::StrCat("--kube-api: ", client.status().message()));
      return kExitBadInput;
    }
    const dra::DraApi api(std::move(*client));
    absl::StatusOr<std::string> git_version = api.GitVersion();
    absl::StatusOr<std::string> uid =
        git_version.ok() ? api.NodeUid(node.node_name) : git_version.status();
    if (!uid.ok()) {
      PrintError(absl::StrCat("asking the API server: ", uid.status().message()));
      return 1;
    }
    version = *git_version;
    node_uid = *uid;
  }
  absl::StatusOr<std::vector<dra::ResourceSlice>> slices =
      (*driver)->Slices(dra::LayoutFor(version));
  if (!slices.ok()) {
    PrintError(absl::StrCat("reading the node: ", slices.status().message()));
    return 1;
  }
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const dra::ResourceSlice& slice : *slices) out.push_back(dra::ToJson(slice, node_uid));
    PrintJson(out);
    return kExitOk;
  }
  PrintSummary(*slices, backend.Describe());
  return kExitOk;
}

int PrintDeviceClasses(const hw::Catalog& catalog, bool json) {
  const std::vector<nlohmann::json> classes = dra::DeviceClasses(catalog);
  if (json) {
    PrintJson(nlohmann::json(classes));
    return kExitOk;
  }
  std::cout << "# The " << dra::kDriverName
            << " DeviceClasses, as `gpuslice dra-driver --device-classes` prints them.\n";
  for (size_t i = 0; i < classes.size(); ++i) {
    if (i > 0) std::cout << "---\n";
    std::cout << util::JsonToYaml(classes[i]);
  }
  return kExitOk;
}

int RunDraDriver(const GlobalOptions& global, const DraDriverOptions& o) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  if (o.device_classes) return PrintDeviceClasses(*catalog, o.json);
  std::unique_ptr<device::Backend> backend = OpenBackend(o.device, *catalog);
  if (backend == nullptr) return 1;
  if (o.once) return RunOnce(o, *backend, *catalog);
  if (device::KindOf(SimPath(o.device)) == device::MachineKind::kFleet) {
    PrintError("--sim " + SimPath(o.device) +
               ": a fleet is a new machine each run, which the driver's checkpoint would not "
               "match; make a state file with `gpuslice sim create FILE SPEC` and pass --sim FILE");
    return kExitBadInput;
  }

  dra::DriverOptions options;
  options.node = NodeOptions(o);
  if (!o.fixed_layout.empty()) {
    std::ifstream in(o.fixed_layout);
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<spec::MigConfigFile> layout =
        in ? spec::ParseMigPartedConfig(text.str(), o.fixed_layout)
           : absl::StatusOr<spec::MigConfigFile>(
                 absl::NotFoundError(absl::StrCat("cannot read '", o.fixed_layout, "'")));
    absl::Status selected =
        layout.ok() ? spec::SelectConfig(*layout, o.fixed_layout_config).status() : layout.status();
    if (!selected.ok()) {
      PrintError(absl::StrCat("--fixed-layout: ", selected.message()));
      return kExitBadInput;
    }
    options.node.fixed_layout = *layout;
  }
  options.kubelet.registry_dir = o.registry_dir;
  options.kubelet.plugin_dir = o.plugin_dir;
  options.api.server = o.kube_api;
  options.api.token_file = o.kube_token_file;
  options.api.ca_file = o.kube_ca;
  options.api.insecure_skip_tls_verify = o.insecure_skip_tls_verify;
  options.log = LogLine;
  dra::Driver driver(*backend, *catalog, options);
  if (absl::Status s = driver.Start(); !s.ok()) {
    PrintError(absl::StrCat("dra-driver: ", s.message()));
    return s.code() == absl::StatusCode::kInvalidArgument ? kExitBadInput : 1;
  }
  LogLine(absl::StrCat("serving node ", options.node.node_name, " as ", dra::kDriverName, " (",
                       backend->Describe(), ")"));
  std::signal(SIGINT, OnStop);
  std::signal(SIGTERM, OnStop);
  driver.Run(g_stop);
  driver.Stop();
  LogLine("stopped");
  return kExitOk;
}

}  // namespace

void AddDraDriverCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto o = std::make_shared<DraDriverOptions>();
  CLI::App* cmd = app.add_subcommand(
      "dra-driver",
      "Run the Kubernetes DRA driver of this node (resource.k8s.io/v1, driver gpu.gpuslice.io): "
      "MIG slices cut on demand for each claim at the placement the scheduler chose, whole GPUs, "
      "and shared GPUs as consumable capacity enforced by the CUDA interposer");
  AddDeviceOptions(*cmd, o->device);
  cmd->add_option("--node-name", o->node_name,
                  "This node's name, also the pool's (default: $NODE_NAME, else the host name)");
  cmd->add_option("--kube-api", o->kube_api,
                  "API server URL, http(s)://HOST:PORT (default: in-cluster, from "
                  "$KUBERNETES_SERVICE_HOST and the service account)");
  cmd->add_option("--kube-token-file", o->kube_token_file,
                  "Bearer token file, re-read on every call (empty: no token)")
      ->capture_default_str();
  cmd->add_option("--kube-ca", o->kube_ca, "CA file that signed the API server's certificate");
  cmd->add_flag("--insecure-skip-tls-verify", o->insecure_skip_tls_verify,
                "Do not verify the API server's certificate (tests only)");
  cmd->add_option("--registry-dir", o->registry_dir,
                  "kubelet's plugin registration directory (the registration socket goes here)")
      ->capture_default_str();
  cmd->add_option("--plugin-dir", o->plugin_dir,
                  "Directory of the driver's DRA socket (default: "
                  "/var/lib/kubelet/plugins/gpu.gpuslice.io)");
  cmd->add_option("--cdi-dir", o->cdi_dir, "Where the claims' CDI specs are written")
      ->capture_default_str();
  cmd->add_option("--state-dir", o->state_dir,
                  "The driver's checkpoint directory (default: /var/lib/gpuslice/dra, or next to "
                  "the --sim state file)");
  cmd->add_option("--shared-gpus", o->shared_gpus,
                  "MIG-disabled GPUs offered as one shared device with consumable compute and "
                  "memory instead of whole: comma-separated indices or UUIDs, 'all' or 'none'");
  cmd->add_option("--fixed-gpus", o->fixed_gpus,
                  "MIG-enabled GPUs whose existing instances are offered as they are (an "
                  "admin-fixed layout) instead of cut on demand: indices, UUIDs, 'all' or 'none'");
  cmd->add_option("--fixed-layout", o->fixed_layout,
                  "mig-parted config file with the layout of the --fixed-gpus: a drained fixed GPU "
                  "(annotation gpu.gpuslice.io/drain) that no claim uses is re-laid to it");
  cmd->add_option("--fixed-layout-config", o->fixed_layout_config,
                  "The config of --fixed-layout to use (may be left out when it has one)");
  cmd->add_option("--interposer", o->interposer,
                  "The CUDA interposer libgpuslice-cuda.so on this host (default: found next to "
                  "this binary or installed); shared devices are refused without it");
  cmd->add_option("--shm-dir", o->shm_dir, "Host directory of the slices' accounting files")
      ->capture_default_str();
  cmd->add_flag("--no-device-specs", o->no_device_specs,
                "Leave /dev/nvidia* nodes out of the CDI specs (the NVIDIA runtime adds them)");
  cmd->add_option("--kubernetes-version", o->kubernetes_version,
                  "With --once: the slice layout of this Kubernetes version (1.34: counters "
                  "beside devices; 1.35+: apart); with --kube-api the API server's own version")
      ->capture_default_str();
  cmd->add_flag("--once", o->once,
                "Print the ResourceSlices this node would publish and exit (changes nothing)");
  cmd->add_flag("--device-classes", o->device_classes,
                "Print the DeviceClasses that select this driver's devices (gpu, mig, shared, one "
                "per MIG profile of the catalog) as YAML documents, and exit");
  cmd->add_flag("--json", o->json,
                "With --once: the slice objects as JSON, as they would be sent; with "
                "--device-classes: a JSON array");
  cmd->callback(
      [&global, o, action] { *action = [&global, o] { return RunDraDriver(global, *o); }; });
}

}  // namespace gpuslice::cli
