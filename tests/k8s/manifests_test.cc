// The deployment manifests under deploy/kubernetes: every YAML document parses and is a kind we
// use; every `--flag` a container passes to `gpuslice <subcommand>` is in that subcommand's
// `--help` of the built binary; hostPath volumes are mounted where the flags point; the
// scheduler configuration uses the field names of kubescheduler.config.k8s.io/v1 `Extender`
// (../shared/reference/kubernetes-apis.md §3.4) and points at the extender's Service.
// The DRA deployment (deploy/kubernetes/dra, its own kustomization): the RBAC of
// ../shared/reference/kubernetes-dra.md §6.5, kubelet's and CDI's paths mounted at the host's own
// (§1.1, §7.4), and deviceclasses.yaml equal to `gpuslice dra-driver --device-classes`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gpuslice/hw/catalog.h"

namespace {

namespace fs = std::filesystem;

const fs::path kDeployDir = fs::path(GPUSLICE_SOURCE_DIR) / "deploy" / "kubernetes";
constexpr const char* kNamespace = "gpuslice-system";

struct Document {
  std::string file;  // relative to deploy/kubernetes
  YAML::Node node;
};

std::vector<std::string> YamlFiles() {
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(kDeployDir)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".yaml" || ext == ".yml")) {
      files.push_back(fs::relative(entry.path(), kDeployDir).string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<Document> LoadAll() {
  std::vector<Document> documents;
  for (const std::string& file : YamlFiles()) {
    for (const YAML::Node& node : YAML::LoadAllFromFile((kDeployDir / file).string())) {
      if (!node.IsNull()) documents.push_back({file, node});
    }
  }
  return documents;
}

std::string Kind(const Document& d) { return d.node["kind"].as<std::string>(""); }
std::string Name(const Document& d) {
  const YAML::Node metadata = d.node["metadata"];
  return metadata ? metadata["name"].as<std::string>("") : "";
}

const Document* Find(const std::vector<Document>& documents, const std::string& kind,
                     const std::string& name) {
  for (const Document& d : documents) {
    if (Kind(d) == kind && Name(d) == name) return &d;
  }
  return nullptr;
}

// The pod specs: Deployments', DaemonSets' templates and bare Pods, with where they came from.
std::vector<std::pair<std::string, YAML::Node>> PodSpecs(const std::vector<Document>& documents) {
  std::vector<std::pair<std::string, YAML::Node>> specs;
  for (const Document& d : documents) {
    const std::string kind = Kind(d);
    const std::string where = d.file + ": " + kind + " " + Name(d);
    if (kind == "Deployment" || kind == "DaemonSet") {
      specs.emplace_back(where, d.node["spec"]["template"]["spec"]);
    } else if (kind == "Pod") {
      specs.emplace_back(where, d.node["spec"]);
    }
  }
  return specs;
}

std::vector<YAML::Node> Containers(const YAML::Node& spec) {
  std::vector<YAML::Node> out;
  for (const char* key : {"initContainers", "containers"}) {
    if (spec[key]) {
      for (const YAML::Node& c : spec[key]) out.push_back(c);
    }
  }
  return out;
}

std::vector<std::string> Argv(const YAML::Node& container) {
  std::vector<std::string> argv;
  for (const char* key : {"command", "args"}) {
    if (container[key]) {
      for (const YAML::Node& a : container[key]) argv.push_back(a.as<std::string>());
    }
  }
  return argv;
}

// "gpuslice <subcommand> ..." (any path to the binary): the subcommand, else "".
std::string GpusliceSubcommand(const std::vector<std::string>& argv) {
  if (argv.size() < 2 || fs::path(argv[0]).filename() != "gpuslice") return "";
  return argv[1];
}

// The value after `flag` in argv ("--flag value" or "--flag=value"), or "".
std::string FlagValue(const std::vector<std::string>& argv, const std::string& flag) {
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == flag && i + 1 < argv.size()) return argv[i + 1];
    if (argv[i].starts_with(flag + "=")) return argv[i].substr(flag.size() + 1);
  }
  return "";
}

struct Invocation {
  std::string where;
  std::string subcommand;
  std::vector<std::string> argv;
  YAML::Node container;
  YAML::Node spec;
};

std::vector<Invocation> GpusliceInvocations(const std::vector<Document>& documents) {
  std::vector<Invocation> out;
  for (const auto& [where, spec] : PodSpecs(documents)) {
    for (const YAML::Node& c : Containers(spec)) {
      const std::vector<std::string> argv = Argv(c);
      const std::string sub = GpusliceSubcommand(argv);
      if (!sub.empty()) {
        out.push_back({where + " container " + c["name"].as<std::string>(), sub, argv, c, spec});
      }
    }
  }
  return out;
}

// Runs a command; its stdout and stderr together, and its exit status.
std::pair<std::string, int> RunCommand(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {"popen failed", -1};
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  return {output, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

// Whether `flag` appears in help text as a whole option name ("--host" is not in "--hosts").
bool HelpHasFlag(const std::string& help, const std::string& flag) {
  for (size_t at = help.find(flag); at != std::string::npos; at = help.find(flag, at + 1)) {
    const size_t end = at + flag.size();
    const bool starts = at == 0 || help[at - 1] == ' ' || help[at - 1] == ',' ||
                        help[at - 1] == '\n' || help[at - 1] == '[';
    const bool ends = end == help.size() || !(std::isalnum(static_cast<unsigned char>(help[end])) ||
                                              help[end] == '-' || help[end] == '_');
    if (starts && ends) return true;
  }
  return false;
}

// Host path → mount path of `container`'s hostPath mounts.
std::map<std::string, std::string> HostMounts(const YAML::Node& spec, const YAML::Node& container) {
  std::map<std::string, std::string> host_path_of_volume;
  for (const YAML::Node& v : spec["volumes"]) {
    if (v["hostPath"]) {
      host_path_of_volume[v["name"].as<std::string>()] = v["hostPath"]["path"].as<std::string>();
    }
  }
  std::map<std::string, std::string> mounts;
  if (!container["volumeMounts"]) return mounts;
  for (const YAML::Node& m : container["volumeMounts"]) {
    auto host = host_path_of_volume.find(m["name"].as<std::string>());
    if (host != host_path_of_volume.end()) mounts[host->second] = m["mountPath"].as<std::string>();
  }
  return mounts;
}

// Whether `path` (in the container) lies on a hostPath mount of the same host path.
bool OnSameHostPath(const std::map<std::string, std::string>& mounts, const std::string& path) {
  for (const auto& [host, mount] : mounts) {
    if (host != mount) continue;
    if (path == mount || path.starts_with(mount + "/")) return true;
  }
  return false;
}

TEST(K8sManifests, EveryDocumentParsesAndIsAKindWeUse) {
  const std::set<std::pair<std::string, std::string>> known = {
      {"v1", "Namespace"},
      {"v1", "ServiceAccount"},
      {"v1", "ConfigMap"},
      {"v1", "Service"},
      {"v1", "PersistentVolumeClaim"},
      {"v1", "Pod"},
      {"rbac.authorization.k8s.io/v1", "ClusterRole"},
      {"rbac.authorization.k8s.io/v1", "ClusterRoleBinding"},
      {"apps/v1", "Deployment"},
      {"apps/v1", "DaemonSet"},
      {"kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration"},
      {"kustomize.config.k8s.io/v1beta1", "Kustomization"},
      {"resource.k8s.io/v1", "DeviceClass"},
      {"resource.k8s.io/v1", "ResourceClaimTemplate"}};
  const std::set<std::string> cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding",
                                                "DeviceClass"};
  const std::vector<Document> documents = LoadAll();
  ASSERT_GE(documents.size(), 15u);
  std::set<std::string> kinds;
  for (const Document& d : documents) {
    SCOPED_TRACE(d.file);
    const std::string api = d.node["apiVersion"].as<std::string>("");
    const std::string kind = Kind(d);
    EXPECT_TRUE(known.contains({api, kind})) << api << " " << kind;
    kinds.insert(kind);
    if (kind == "KubeSchedulerConfiguration" || kind == "Kustomization") continue;
    EXPECT_FALSE(Name(d).empty()) << kind;
    if (kind == "Pod" || kind == "ResourceClaimTemplate") continue;  // examples: user's namespace
    if (cluster_scoped.contains(kind)) {
      EXPECT_FALSE(d.node["metadata"]["namespace"]) << kind << " " << Name(d);
    } else {
      EXPECT_EQ(d.node["metadata"]["namespace"].as<std::string>(""), kNamespace)
          << kind << " " << Name(d);
    }
  }
  for (const auto& [api, kind] : known) EXPECT_TRUE(kinds.contains(kind)) << kind << " unused";
  ASSERT_NE(Find(documents, "Namespace", kNamespace), nullptr);
}

// The kustomization of `dir` ("" or "dra/", relative to deploy/kubernetes) lists every YAML file
// of that folder except itself, examples/ and `not_objects`; a folder with its own kustomization
// (dra/) belongs to that one.
void ExpectKustomizationListsEveryFile(const std::string& dir,
                                       const std::set<std::string>& not_objects) {
  SCOPED_TRACE(dir + "kustomization.yaml");
  const YAML::Node kustomization =
      YAML::LoadFile((kDeployDir / dir / "kustomization.yaml").string());
  std::set<std::string> listed;
  for (const YAML::Node& r : kustomization["resources"]) {
    const std::string file = r.as<std::string>();
    EXPECT_TRUE(fs::exists(kDeployDir / dir / file)) << file;
    EXPECT_EQ(file.find(".."), std::string::npos) << file << ": kustomize loads nothing above";
    listed.insert(file);
  }
  for (const std::string& path : YamlFiles()) {
    if (!path.starts_with(dir)) continue;
    const std::string file = path.substr(dir.size());
    if (dir.empty() && file.starts_with("dra/")) continue;
    if (file == "kustomization.yaml" || not_objects.contains(file) ||
        file.starts_with("examples/")) {
      EXPECT_FALSE(listed.contains(file)) << file;
    } else {
      EXPECT_TRUE(listed.contains(file)) << file << " is not in kustomization.yaml";
    }
  }
}

TEST(K8sManifests, KustomizationListsEveryObjectFile) {
  ExpectKustomizationListsEveryFile("", {"scheduler-config.yaml"});
}

TEST(K8sManifests, DraKustomizationListsEveryObjectFile) {
  ExpectKustomizationListsEveryFile("dra/", {});
  // Its namespace is the same object as the device plugin deployment's.
  const YAML::Node dra = YAML::LoadFile((kDeployDir / "dra" / "namespace.yaml").string());
  const YAML::Node base = YAML::LoadFile((kDeployDir / "namespace.yaml").string());
  EXPECT_EQ(YAML::Dump(dra), YAML::Dump(base));
}

TEST(K8sManifests, ServiceAccountsAndRbac) {
  const std::vector<Document> documents = LoadAll();
  for (const auto& [where, spec] : PodSpecs(documents)) {
    if (!spec["serviceAccountName"]) continue;
    EXPECT_NE(Find(documents, "ServiceAccount", spec["serviceAccountName"].as<std::string>()),
              nullptr)
        << where;
  }
  // rules[resource] = verbs, per ClusterRole.
  auto rules = [&](const std::string& role) {
    std::map<std::string, std::set<std::string>> out;
    const Document* d = Find(documents, "ClusterRole", role);
    if (d == nullptr) return out;
    for (const YAML::Node& rule : d->node["rules"]) {
      for (const YAML::Node& resource : rule["resources"]) {
        for (const YAML::Node& verb : rule["verbs"]) {
          out[resource.as<std::string>()].insert(verb.as<std::string>());
        }
      }
    }
    return out;
  };
  const auto extender = rules("gpuslice-extender");
  EXPECT_EQ(extender.at("pods"), (std::set<std::string>{"get", "list", "watch"}));
  EXPECT_EQ(extender.at("pods/binding"), (std::set<std::string>{"create"}));
  EXPECT_EQ(extender.at("nodes"), (std::set<std::string>{"get", "list"}));
  const auto plugin = rules("gpuslice-device-plugin");
  EXPECT_EQ(plugin.at("nodes"), (std::set<std::string>{"get"}));
  // The DRA driver: exactly the rights of kubernetes-dra.md §6.5, each in its API group.
  std::map<std::string, std::set<std::string>> dra;
  const Document* dra_role = Find(documents, "ClusterRole", "gpuslice-dra-driver");
  ASSERT_NE(dra_role, nullptr);
  for (const YAML::Node& rule : dra_role->node["rules"]) {
    for (const YAML::Node& group : rule["apiGroups"]) {
      for (const YAML::Node& resource : rule["resources"]) {
        for (const YAML::Node& verb : rule["verbs"]) {
          dra[group.as<std::string>() + "/" + resource.as<std::string>()].insert(
              verb.as<std::string>());
        }
      }
    }
  }
  const std::map<std::string, std::set<std::string>> dra_expected = {
      {"resource.k8s.io/resourceslices",
       {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}},
      {"resource.k8s.io/resourceclaims", {"get", "list", "watch"}},
      {"/nodes", {"get"}}};
  EXPECT_EQ(dra, dra_expected);
  for (const auto& [role, account] : std::vector<std::pair<std::string, std::string>>{
           {"gpuslice-extender", "gpuslice-extender"},
           {"gpuslice-device-plugin", "gpuslice-node"},
           {"gpuslice-dra-driver", "gpuslice-dra-driver"}}) {
    const Document* binding = Find(documents, "ClusterRoleBinding", role);
    ASSERT_NE(binding, nullptr) << role;
    EXPECT_EQ(binding->node["roleRef"]["name"].as<std::string>(), role);
    EXPECT_EQ(binding->node["subjects"][0]["name"].as<std::string>(), account);
    EXPECT_EQ(binding->node["subjects"][0]["namespace"].as<std::string>(), kNamespace);
  }
}

TEST(K8sManifests, EnvironmentReferencesAreDefined) {
  const std::vector<Document> documents = LoadAll();
  for (const Invocation& call : GpusliceInvocations(documents)) {
    SCOPED_TRACE(call.where);
    std::set<std::string> env;
    if (call.container["env"]) {
      for (const YAML::Node& e : call.container["env"]) env.insert(e["name"].as<std::string>());
    }
    for (const std::string& arg : call.argv) {
      for (size_t at = arg.find("$("); at != std::string::npos; at = arg.find("$(", at + 2)) {
        const size_t end = arg.find(')', at);
        ASSERT_NE(end, std::string::npos) << arg;
        EXPECT_TRUE(env.contains(arg.substr(at + 2, end - at - 2))) << arg;
      }
    }
    // ConfigMaps and Secrets named by env exist (the agent token Secret is made by hand).
    if (!call.container["env"]) continue;
    for (const YAML::Node& e : call.container["env"]) {
      if (e["valueFrom"] && e["valueFrom"]["configMapKeyRef"]) {
        const YAML::Node ref = e["valueFrom"]["configMapKeyRef"];
        const Document* map = Find(documents, "ConfigMap", ref["name"].as<std::string>());
        ASSERT_NE(map, nullptr) << ref["name"].as<std::string>();
        EXPECT_TRUE(map->node["data"][ref["key"].as<std::string>()]) << ref["key"];
      }
    }
  }
}

// Every gpuslice subcommand the manifests run, and only these.
TEST(K8sManifests, TheSubcommandsRun) {
  std::set<std::string> subcommands;
  for (const Invocation& call : GpusliceInvocations(LoadAll())) subcommands.insert(call.subcommand);
  EXPECT_EQ(subcommands,
            (std::set<std::string>{"agent", "device-plugin", "dra-driver", "extender", "serve"}));
}

class K8sManifestFlags : public testing::TestWithParam<std::string> {};

TEST_P(K8sManifestFlags, EveryFlagIsInTheSubcommandsHelp) {
  const std::string subcommand = GetParam();
  const auto [help, status] =
      RunCommand(std::string(GPUSLICE_BINARY) + " " + subcommand + " --help");
  ASSERT_EQ(status, 0) << "gpuslice " << subcommand << " --help failed:\n" << help;
  int checked = 0;
  for (const Invocation& call : GpusliceInvocations(LoadAll())) {
    if (call.subcommand != subcommand) continue;
    SCOPED_TRACE(call.where);
    for (const std::string& arg : call.argv) {
      if (!arg.starts_with("--")) continue;
      const std::string flag = arg.substr(0, arg.find('='));
      EXPECT_TRUE(HelpHasFlag(help, flag))
          << flag << " is not an option of gpuslice " << subcommand << ":\n"
          << help;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Subcommands, K8sManifestFlags,
                         testing::Values("serve", "agent", "device-plugin", "extender",
                                         "dra-driver"),
                         [](const testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(K8sManifests, HelpHasFlagMatchesWholeNames) {
  const std::string help = "  --host TEXT  x\n  --hosts,--many INT\n  --tick=5\n";
  EXPECT_TRUE(HelpHasFlag(help, "--host"));
  EXPECT_TRUE(HelpHasFlag(help, "--many"));
  EXPECT_TRUE(HelpHasFlag(help, "--tick"));
  EXPECT_FALSE(HelpHasFlag(help, "--hos"));
  EXPECT_FALSE(HelpHasFlag(help, "--ticks"));
  EXPECT_FALSE(HelpHasFlag(help, "--any"));
}

TEST(K8sManifests, VolumesAreDefinedAndMounted) {
  int host_paths = 0;
  for (const auto& [where, spec] : PodSpecs(LoadAll())) {
    SCOPED_TRACE(where);
    std::set<std::string> volumes, mounted;
    if (spec["volumes"]) {
      for (const YAML::Node& v : spec["volumes"]) {
        volumes.insert(v["name"].as<std::string>());
        if (v["hostPath"]) {
          ++host_paths;
          const std::string path = v["hostPath"]["path"].as<std::string>();
          EXPECT_TRUE(path.starts_with("/")) << path;
        }
      }
    }
    for (const YAML::Node& c : Containers(spec)) {
      if (!c["volumeMounts"]) continue;
      for (const YAML::Node& m : c["volumeMounts"]) {
        const std::string name = m["name"].as<std::string>();
        EXPECT_TRUE(volumes.contains(name)) << "mount of undefined volume " << name;
        mounted.insert(name);
      }
    }
    for (const std::string& v : volumes) EXPECT_TRUE(mounted.contains(v)) << v << " unmounted";
  }
  EXPECT_GE(host_paths, 6);
}

TEST(K8sManifests, NodeDaemonSetReachesTheHost) {
  const std::vector<Document> documents = LoadAll();
  const Document* ds = Find(documents, "DaemonSet", "gpuslice-node");
  ASSERT_NE(ds, nullptr);
  const YAML::Node spec = ds->node["spec"]["template"]["spec"];
  // Scheduling: GPU nodes (nvidia.com/gpu.present or gpuslice's own label), tainted ones too.
  const YAML::Node terms =
      spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
          ["nodeSelectorTerms"];
  std::set<std::string> keys;
  for (const YAML::Node& term : terms) {
    for (const YAML::Node& e : term["matchExpressions"]) keys.insert(e["key"].as<std::string>());
  }
  EXPECT_TRUE(keys.contains("nvidia.com/gpu.present"));
  bool tolerates_gpu = false;
  for (const YAML::Node& t : spec["tolerations"]) {
    tolerates_gpu = tolerates_gpu || t["key"].as<std::string>("") == "nvidia.com/gpu";
  }
  EXPECT_TRUE(tolerates_gpu);
  // Both gpuslice containers see /dev and run privileged (NVML, MIG changes).
  std::map<std::string, std::vector<std::string>> argv_of;
  for (const Invocation& call : GpusliceInvocations(documents)) {
    if (call.where.find("DaemonSet gpuslice-node") == std::string::npos) continue;
    SCOPED_TRACE(call.where);
    argv_of[call.subcommand] = call.argv;
    EXPECT_TRUE(call.container["securityContext"]["privileged"].as<bool>(false));
    EXPECT_TRUE(OnSameHostPath(HostMounts(spec, call.container), "/dev"));
  }
  ASSERT_TRUE(argv_of.contains("device-plugin"));
  ASSERT_TRUE(argv_of.contains("agent"));
  // The device plugin's paths are the host's, mounted at the same place.
  const std::vector<std::string>& plugin = argv_of["device-plugin"];
  YAML::Node plugin_container;
  for (const YAML::Node& c : spec["containers"]) {
    if (GpusliceSubcommand(Argv(c)) == "device-plugin") plugin_container = c;
  }
  const auto mounts = HostMounts(spec, plugin_container);
  const std::map<std::string, std::string> expected = {
      {"--plugin-dir", "/var/lib/kubelet/device-plugins"},
      {"--pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock"},
      {"--share-units", "100"},
      {"--interposer", "/usr/lib/gpuslice/libgpuslice-cuda.so"},
      {"--shm-dir", "/dev/shm/gpuslice"},
      {"--nfd-features-file", "/etc/kubernetes/node-feature-discovery/features.d/gpuslice"},
      {"--metrics-listen", "0.0.0.0:9402"}};
  for (const auto& [flag, value] : expected) {
    EXPECT_EQ(FlagValue(plugin, flag), value) << flag;
    if (value.starts_with("/")) {
      EXPECT_TRUE(OnSameHostPath(mounts, value)) << flag << " " << value;
    }
  }
  EXPECT_FALSE(FlagValue(plugin, "--shared-gpus").empty());
  // The agent reports to the allocation service's Service, under the node's name.
  const std::vector<std::string>& agent = argv_of["agent"];
  EXPECT_EQ(FlagValue(agent, "--server"), "http://gpuslice.gpuslice-system.svc:8470");
  EXPECT_EQ(FlagValue(agent, "--host"), "$(NODE_NAME)");
  EXPECT_NE(Find(documents, "Service", "gpuslice"), nullptr);
}

TEST(K8sManifests, DraDaemonSetReachesTheHost) {
  const std::vector<Document> documents = LoadAll();
  const Document* ds = Find(documents, "DaemonSet", "gpuslice-dra-driver");
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->file, "dra/daemonset.yaml");
  const YAML::Node spec = ds->node["spec"]["template"]["spec"];
  EXPECT_EQ(spec["serviceAccountName"].as<std::string>(""), "gpuslice-dra-driver");
  YAML::Node driver;
  bool found = false;
  for (const YAML::Node& c : spec["containers"]) {
    if (GpusliceSubcommand(Argv(c)) != "dra-driver") continue;
    driver = c;
    found = true;
  }
  ASSERT_TRUE(found) << "no container runs gpuslice dra-driver";
  const std::vector<std::string> argv = Argv(driver);
  // Privileged (MIG instances are created here) and sees the host's /dev.
  EXPECT_TRUE(driver["securityContext"]["privileged"].as<bool>(false));
  const auto mounts = HostMounts(spec, driver);
  EXPECT_TRUE(OnSameHostPath(mounts, "/dev"));
  // kubelet is told the sockets' host paths and the runtime reads the CDI specs on the host, so
  // these are mounted where they are on the host (kubernetes-dra.md §1.1, §7.4).
  for (const std::string host : {"/var/lib/kubelet/plugins_registry",
                                 "/var/lib/kubelet/plugins/gpu.gpuslice.io", "/var/run/cdi"}) {
    ASSERT_TRUE(mounts.contains(host)) << host << " is not mounted";
    EXPECT_EQ(mounts.at(host), host);
  }
  for (const auto& [host, mount] : mounts) {
    if (host.starts_with("/var/lib/kubelet") || host.starts_with("/var/run/cdi")) {
      EXPECT_EQ(mount, host);
    }
  }
  // The paths the flags name lie on those mounts.
  const std::map<std::string, std::string> expected = {
      {"--node-name", "$(NODE_NAME)"},
      {"--registry-dir", "/var/lib/kubelet/plugins_registry"},
      {"--plugin-dir", "/var/lib/kubelet/plugins/gpu.gpuslice.io"},
      {"--cdi-dir", "/var/run/cdi"},
      {"--state-dir", "/var/lib/gpuslice/dra"},
      {"--interposer", "/usr/lib/gpuslice/libgpuslice-cuda.so"},
      {"--shm-dir", "/dev/shm/gpuslice"}};
  for (const auto& [flag, value] : expected) {
    EXPECT_EQ(FlagValue(argv, flag), value) << flag;
    if (value.starts_with("/")) {
      EXPECT_TRUE(OnSameHostPath(mounts, value)) << flag << " " << value;
    }
  }
  EXPECT_FALSE(FlagValue(argv, "--shared-gpus").empty());
  EXPECT_FALSE(FlagValue(argv, "--fixed-gpus").empty());
  // NODE_NAME from the downward API.
  bool node_name = false;
  for (const YAML::Node& e : driver["env"]) {
    if (e["name"].as<std::string>() != "NODE_NAME") continue;
    node_name = e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>("") == "spec.nodeName";
  }
  EXPECT_TRUE(node_name);
  // An init container puts the interposer into the host folder the driver mounts it from.
  bool installs = false;
  for (const YAML::Node& c : spec["initContainers"]) {
    for (const auto& [host, mount] : HostMounts(spec, c)) {
      installs = installs || host == "/usr/lib/gpuslice";
    }
  }
  EXPECT_TRUE(installs);
  EXPECT_TRUE(mounts.contains("/usr/lib/gpuslice"));
}

// deploy/kubernetes/dra/deviceclasses.yaml is what the built binary prints.
TEST(K8sManifests, DraDeviceClassesAreCurrent) {
  const auto [printed, status] =
      RunCommand("(" + std::string(GPUSLICE_BINARY) + " dra-driver --device-classes 2>/dev/null)");
  ASSERT_EQ(status, 0) << printed;
  std::ifstream in(kDeployDir / "dra" / "deviceclasses.yaml");
  ASSERT_TRUE(in) << "deploy/kubernetes/dra/deviceclasses.yaml is missing";
  std::stringstream file;
  file << in.rdbuf();
  EXPECT_EQ(file.str(), printed)
      << "deploy/kubernetes/dra/deviceclasses.yaml is stale; regenerate it with\n"
      << "  gpuslice dra-driver --device-classes > deploy/kubernetes/dra/deviceclasses.yaml";
  std::set<std::string> classes;
  for (const YAML::Node& node : YAML::LoadAll(printed)) {
    if (node.IsNull()) continue;
    EXPECT_EQ(node["kind"].as<std::string>(), "DeviceClass");
    classes.insert(node["metadata"]["name"].as<std::string>());
  }
  EXPECT_TRUE(classes.contains("gpu.gpuslice.io"));
  EXPECT_TRUE(classes.contains("mig.gpuslice.io"));
  EXPECT_TRUE(classes.contains("shared.gpuslice.io"));
  EXPECT_TRUE(classes.contains("mig-1g-10gb.gpuslice.io"));
}

// Field names of kubescheduler.config.k8s.io/v1 Extender (reference §3.4).
TEST(K8sManifests, SchedulerConfigUsesTheReferenceFieldNames) {
  const std::vector<Document> documents = LoadAll();
  const Document* config = nullptr;
  for (const Document& d : documents) {
    if (Kind(d) == "KubeSchedulerConfiguration") config = &d;
  }
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(config->file, "scheduler-config.yaml");
  EXPECT_EQ(config->node["apiVersion"].as<std::string>(), "kubescheduler.config.k8s.io/v1");
  const std::set<std::string> fields = {"urlPrefix",        "filterVerb",       "preemptVerb",
                                        "prioritizeVerb",   "weight",           "bindVerb",
                                        "enableHTTPS",      "tlsConfig",        "httpTimeout",
                                        "nodeCacheCapable", "managedResources", "ignorable"};
  const YAML::Node extenders = config->node["extenders"];
  ASSERT_TRUE(extenders.IsSequence());
  ASSERT_EQ(extenders.size(), 1u);
  const YAML::Node e = extenders[0];
  for (const auto& field : e) {
    EXPECT_TRUE(fields.contains(field.first.as<std::string>())) << field.first.as<std::string>();
  }
  EXPECT_EQ(e["filterVerb"].as<std::string>(), "filter");
  EXPECT_EQ(e["prioritizeVerb"].as<std::string>(), "prioritize");
  EXPECT_EQ(e["bindVerb"].as<std::string>(), "bind");
  EXPECT_GE(e["weight"].as<int>(), 1);
  EXPECT_TRUE(e["nodeCacheCapable"].as<bool>());
  EXPECT_FALSE(e["ignorable"].as<bool>());

  // managedResources: {name, ignoredByScheduler}, unique, ours, MIG ones from the catalog.
  std::set<std::string> catalog_mig;
  for (const auto& model : gpuslice::hw::Catalog::Builtin().models()) {
    if (!model.mig.has_value()) continue;
    for (const auto& profile : model.mig->profiles) {
      std::string name = "nvidia.com/mig-" + profile.name;
      std::replace(name.begin(), name.end(), '+', '.');
      catalog_mig.insert(name);
    }
  }
  std::set<std::string> managed;
  for (const YAML::Node& r : e["managedResources"]) {
    for (const auto& field : r) {
      const std::string key = field.first.as<std::string>();
      EXPECT_TRUE(key == "name" || key == "ignoredByScheduler") << key;
    }
    const std::string name = r["name"].as<std::string>();
    EXPECT_TRUE(managed.insert(name).second) << name << " twice";
    if (name.starts_with("nvidia.com/mig-")) {
      EXPECT_TRUE(catalog_mig.contains(name)) << name << " is no catalog MIG profile";
    } else {
      EXPECT_TRUE(name == "nvidia.com/gpu" || name == "gpuslice.io/gpu-share") << name;
    }
  }
  EXPECT_TRUE(managed.contains("gpuslice.io/gpu-share"));
  EXPECT_TRUE(managed.contains("nvidia.com/gpu"));
  EXPECT_TRUE(managed.contains("nvidia.com/mig-1g.10gb"));
  EXPECT_TRUE(managed.contains("nvidia.com/mig-1g.10gb.me"));
  EXPECT_TRUE(managed.contains("nvidia.com/mig-3g.40gb"));

  // urlPrefix → the extender's Service → the extender container's --listen port.
  const std::string url = e["urlPrefix"].as<std::string>();
  ASSERT_TRUE(url.starts_with("http://")) << url;
  const std::string host_port = url.substr(7, url.find('/', 7) - 7);
  const std::string host = host_port.substr(0, host_port.find(':'));
  const int port = std::stoi(host_port.substr(host_port.find(':') + 1));
  EXPECT_EQ(host, std::string("gpuslice-extender.") + kNamespace + ".svc");
  const Document* service = Find(documents, "Service", "gpuslice-extender");
  ASSERT_NE(service, nullptr);
  EXPECT_EQ(service->node["spec"]["ports"][0]["port"].as<int>(), port);
  bool listens = false;
  for (const Invocation& call : GpusliceInvocations(documents)) {
    if (call.subcommand != "extender") continue;
    listens = FlagValue(call.argv, "--listen") == "0.0.0.0:" + std::to_string(port);
    // The nodes file is the mounted ConfigMap's.
    const std::string nodes = FlagValue(call.argv, "--nodes");
    const Document* map = Find(documents, "ConfigMap", "gpuslice-extender-nodes");
    ASSERT_NE(map, nullptr);
    ASSERT_TRUE(map->node["data"][fs::path(nodes).filename().string()]) << nodes;
    const YAML::Node file =
        YAML::Load(map->node["data"][fs::path(nodes).filename().string()].as<std::string>());
    ASSERT_TRUE(file["nodes"].IsSequence());
    for (const YAML::Node& node : file["nodes"]) {
      const std::string mode = node["mode"].as<std::string>();
      EXPECT_TRUE(mode == "whole" || mode == "shared" || mode == "mig") << mode;
      EXPECT_GT(node["gpus"].as<int>(), 0);
      const auto* model = gpuslice::hw::Catalog::Builtin().Find(node["model"].as<std::string>(""));
      if (mode == "mig") {
        EXPECT_TRUE(model != nullptr && model->mig.has_value()) << node["name"];
      }
    }
  }
  EXPECT_TRUE(listens);

  // The example pods ask only for managed resources: one MIG slice, and 25 share units.
  std::map<std::string, int> asked;
  for (const auto& [where, spec] : PodSpecs(documents)) {
    if (where.find("examples/") != 0) continue;
    for (const YAML::Node& c : Containers(spec)) {
      for (const auto& r : c["resources"]["limits"]) {
        const std::string name = r.first.as<std::string>();
        EXPECT_TRUE(managed.contains(name)) << where << ": " << name;
        asked[name] += r.second.as<int>();
      }
    }
  }
  EXPECT_EQ(asked["gpuslice.io/gpu-share"], 25);
  EXPECT_EQ(asked["nvidia.com/mig-1g.10gb"], 1);
}

}  // namespace
