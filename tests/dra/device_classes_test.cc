// The DeviceClasses (gpuslice/dra/device_classes.h) and the example claims of
// deploy/kubernetes/dra/examples against the devices the driver publishes (DevicesOf, as the JSON
// the API server stores), with selectors evaluated by the CEL subset of dra/cel_subset.h:
//   * each class picks exactly the devices of its kind (gpu, mig, shared) or MIG profile, on
//     H100-80GB, A100-40GB and A30-24GB nodes with MIG on demand, whole, shared and fixed-layout
//     GPUs, and none of another driver's, even one that copies our attributes;
//   * no selector fails on any device (a CEL error aborts the scheduler's allocation);
//   * class names, extended resource names and selectors are within the API server's rules, and
//     there is one class per MIG profile of the catalog;
//   * every example claim matches at least one device and only devices of the kind it means; its
//     capacity requests fit the devices it matches and its opaque configuration parses; pods name
//     claims and extended resources that exist.
#include "gpuslice/dra/device_classes.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "dra/cel_subset.h"
#include "gpuslice/dra/claim.h"
#include "gpuslice/dra/gpu_devices.h"
#include "gpuslice/dra/resource_model.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::dra {
namespace {

namespace fs = std::filesystem;
namespace cel = testing_cel;

const fs::path kExamplesDir =
    fs::path(GPUSLICE_SOURCE_DIR) / "deploy" / "kubernetes" / "dra" / "examples";

const std::vector<std::string> kModels = {"H100-80GB", "A100-40GB", "A30-24GB"};

// One published device as a selector sees it.
struct Published {
  std::string driver;
  std::string name;
  nlohmann::json json;  // the spec.devices[] item
  cel::Device device;
};

std::string AttributeString(const Published& d, const std::string& name) {
  if (d.driver != kDriverName || !d.json.contains("attributes")) return "";
  const nlohmann::json& attributes = d.json["attributes"];
  if (!attributes.contains(name) || !attributes[name].contains("string")) return "";
  return attributes[name]["string"].get<std::string>();
}

Published Ours(const Device& device) {
  Published p{kDriverName, device.name, ToJson(device), {}};
  absl::StatusOr<cel::Device> d = cel::DeviceFromJson(kDriverName, p.json);
  EXPECT_TRUE(d.ok()) << d.status();
  if (d.ok()) p.device = *d;
  return p;
}

// The GPUs of one node of `model`: 0 MIG on demand (and whole), 1 whole, 2 shared, 3 a fixed
// layout of the model's first profile at its first start (MIG models only).
std::vector<GpuInfo> NodeOf(const hw::GpuModel* model) {
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < 4; ++i) {
    GpuInfo gpu;
    gpu.index = i;
    gpu.uuid = "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(i);
    gpu.model = model;
    gpu.driver_version = "550.54.15";
    gpu.mig_on_demand = i == 0;
    gpu.shared = i == 2;
    if (i == 3) {
      if (!model->mig_capable()) continue;
      const hw::GiProfile& p = model->mig->profiles.front();
      gpu.fixed = true;
      gpu.foreign.push_back({p.name, p.starts.front(), "MIG-00000000-0000-0000-0000-000000000003"});
    }
    gpus.push_back(gpu);
  }
  return gpus;
}

std::vector<Published> OurDevices(const hw::GpuModel* model) {
  std::vector<Published> out;
  for (const GpuInfo& gpu : NodeOf(model)) {
    for (const Device& device : DevicesOf(gpu).devices) out.push_back(Ours(device));
  }
  return out;
}

// Another driver's devices: NVIDIA's with look-alike attributes in its own domain, and impostors
// that copy our devices' attributes under our domain's name.
std::vector<Published> ForeignDevices(const std::vector<Published>& ours) {
  std::vector<Published> out;
  for (const std::string type : {"gpu", "mig"}) {
    cel::Device d;
    d.driver = "gpu.nvidia.com";
    d.attributes["gpu.nvidia.com"]["type"] = type;
    if (type == "mig") {
      d.attributes["gpu.nvidia.com"]["profile"] = std::string("1g.10gb");
    }
    out.push_back({d.driver, "nvidia-" + type, nullptr, d});
  }
  for (const Published& p : ours) {
    Published impostor = p;
    impostor.driver = "other.example.com";
    impostor.name = "impostor-" + p.name;
    impostor.device.driver = impostor.driver;
    out.push_back(impostor);
  }
  return out;
}

// Whether `selectors` pick the device, evaluated as the scheduler does: in order, stopping at the
// first that does not match. An evaluation error fails the test.
bool Picks(const std::vector<std::string>& selectors, const Published& d) {
  for (const std::string& text : selectors) {
    absl::StatusOr<cel::Expression> e = cel::Expression::Parse(text);
    EXPECT_TRUE(e.ok()) << text << ": " << e.status();
    if (!e.ok()) return false;
    absl::StatusOr<bool> match = e->Matches(d.device);
    EXPECT_TRUE(match.ok()) << text << " on " << d.driver << " " << d.name << ": "
                            << match.status();
    if (!match.ok() || !*match) return false;
  }
  return true;
}

std::vector<std::string> SelectorsOf(const nlohmann::json& spec) {
  std::vector<std::string> out;
  if (!spec.contains("selectors")) return out;
  for (const nlohmann::json& s : spec["selectors"]) {
    out.push_back(s.at("cel").at("expression").get<std::string>());
  }
  return out;
}

const nlohmann::json* FindClass(const std::vector<nlohmann::json>& classes,
                                const std::string& name) {
  for (const nlohmann::json& c : classes) {
    if (c["metadata"]["name"] == name) return &c;
  }
  return nullptr;
}

// "nvidia.com/mig-<profile>" with '+' written '.', as NVIDIA's device plugin names it.
std::string MigResource(std::string profile) {
  std::replace(profile.begin(), profile.end(), '+', '.');
  return "nvidia.com/mig-" + profile;
}

// The label of a MIG device's profile in its name "gpu-<i>-mig-<label>-<start>".
std::string LabelInName(const std::string& name) {
  static const std::regex kMig("gpu-[0-9]+-mig-(.+)-[0-9]+");
  std::smatch m;
  return std::regex_match(name, m, kMig) ? m[1].str() : "";
}

// What a class should pick, from its name: ours, of that type, of that profile label.
bool Intended(const std::string& class_name, const Published& d) {
  if (d.driver != kDriverName) return false;
  const std::string type = AttributeString(d, "type");
  if (class_name == kGpuClass) return type == "gpu";
  if (class_name == kMigClass) return type == "mig";
  if (class_name == kSharedClass) return type == "shared";
  return type == "mig" && "mig-" + LabelInName(d.name) + ".gpuslice.io" == class_name;
}

// --- names -------------------------------------------------------------------------------------

bool IsDnsSubdomain(const std::string& s) {
  static const std::regex kRe("[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*");
  if (s.empty() || s.size() > 253 || !std::regex_match(s, kRe)) return false;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t dot = std::min(s.find('.', start), s.size());
    if (dot - start > 63) return false;
    start = dot + 1;
  }
  return true;
}

// A Kubernetes qualified name: [prefix/]name, prefix a DNS subdomain, name ≤ 63 characters.
bool IsQualifiedName(const std::string& s) {
  static const std::regex kName("[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?");
  const size_t slash = s.find('/');
  const std::string name = slash == std::string::npos ? s : s.substr(slash + 1);
  if (slash != std::string::npos && !IsDnsSubdomain(s.substr(0, slash))) return false;
  return !name.empty() && name.size() <= 63 && std::regex_match(name, kName);
}

// An extended resource name: a qualified name with a prefix outside kubernetes.io, which also
// stays one after "requests." (the quota name).
bool IsExtendedResourceName(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos) return false;
  const std::string prefix = s.substr(0, slash);
  if (prefix == "kubernetes.io" || prefix.ends_with(".kubernetes.io")) return false;
  return IsQualifiedName(s) && IsQualifiedName("requests." + s);
}

TEST(DeviceClassNames, TheRulesThemselves) {
  EXPECT_TRUE(IsDnsSubdomain("mig-1g-10gb.gpuslice.io"));
  EXPECT_FALSE(IsDnsSubdomain("mig-1g.10gb+me.gpuslice.io"));
  EXPECT_FALSE(IsDnsSubdomain("Gpu.gpuslice.io"));
  EXPECT_FALSE(IsDnsSubdomain(std::string(64, 'a') + ".io"));
  EXPECT_TRUE(IsExtendedResourceName("nvidia.com/mig-1g.10gb.me"));
  EXPECT_FALSE(IsExtendedResourceName("nvidia.com/mig-1g.10gb+me"));
  EXPECT_FALSE(IsExtendedResourceName("gpu"));
  EXPECT_FALSE(IsExtendedResourceName("kubernetes.io/gpu"));
}

TEST(DeviceClasses, NamesSelectorsAndOneClassPerProfile) {
  const hw::Catalog& catalog = hw::Catalog::Builtin();
  const std::vector<nlohmann::json> classes = DeviceClasses(catalog);
  std::set<std::string> profiles;
  for (const hw::GpuModel& model : catalog.models()) {
    if (!model.mig.has_value()) continue;
    for (const hw::GiProfile& p : model.mig->profiles) profiles.insert(p.name);
  }
  ASSERT_EQ(classes.size(), 3 + profiles.size());
  std::set<std::string> names;
  std::set<std::string> resources;
  std::set<std::string> profile_resources;
  for (const nlohmann::json& c : classes) {
    SCOPED_TRACE(c.dump());
    EXPECT_EQ(c["apiVersion"], "resource.k8s.io/v1");
    EXPECT_EQ(c["kind"], "DeviceClass");
    const std::string name = c["metadata"]["name"].get<std::string>();
    EXPECT_TRUE(IsDnsSubdomain(name)) << name;
    EXPECT_TRUE(name.ends_with(".gpuslice.io")) << name;
    EXPECT_TRUE(names.insert(name).second) << name << " twice";
    const std::vector<std::string> selectors = SelectorsOf(c["spec"]);
    ASSERT_EQ(selectors.size(), 1u);
    EXPECT_LE(selectors[0].size(), 10u * 1024u);
    EXPECT_TRUE(cel::Expression::Parse(selectors[0]).ok()) << selectors[0];
    if (c["spec"].contains("extendedResourceName")) {
      const std::string resource = c["spec"]["extendedResourceName"].get<std::string>();
      EXPECT_TRUE(IsExtendedResourceName(resource)) << resource;
      EXPECT_TRUE(resources.insert(resource).second) << resource << " twice";
      if (resource != "nvidia.com/gpu") profile_resources.insert(resource);
    }
  }
  EXPECT_TRUE(names.contains("gpu.gpuslice.io"));
  EXPECT_TRUE(names.contains("mig.gpuslice.io"));
  EXPECT_TRUE(names.contains("shared.gpuslice.io"));
  EXPECT_TRUE(names.contains("mig-1g-10gb.gpuslice.io"));
  EXPECT_TRUE(names.contains("mig-1g-10gb-with-me.gpuslice.io"));
  EXPECT_EQ(FindClass(classes, "gpu.gpuslice.io")->at("spec").at("extendedResourceName"),
            "nvidia.com/gpu");
  EXPECT_FALSE(FindClass(classes, "mig.gpuslice.io")->at("spec").contains("extendedResourceName"));
  EXPECT_FALSE(
      FindClass(classes, "shared.gpuslice.io")->at("spec").contains("extendedResourceName"));
  // Every profile of the catalog has its class, reached by the device plugin's resource name.
  std::set<std::string> expected;
  for (const std::string& p : profiles) expected.insert(MigResource(p));
  EXPECT_EQ(profile_resources, expected);
}

// --- selection on a node of each model ---------------------------------------------------------

class DeviceClassSelection : public testing::TestWithParam<std::string> {};

TEST_P(DeviceClassSelection, EachClassPicksExactlyItsDevices) {
  const hw::GpuModel* model = hw::Catalog::Builtin().Find(GetParam());
  ASSERT_NE(model, nullptr) << GetParam();
  ASSERT_TRUE(model->mig_capable());
  const std::vector<Published> ours = OurDevices(model);
  std::vector<Published> all = ours;
  for (Published& p : ForeignDevices(ours)) all.push_back(std::move(p));
  const std::vector<nlohmann::json> classes = DeviceClasses(hw::Catalog::Builtin());

  std::map<std::string, int> picked_per_class;
  for (const nlohmann::json& c : classes) {
    const std::string name = c["metadata"]["name"].get<std::string>();
    const std::vector<std::string> selectors = SelectorsOf(c["spec"]);
    for (const Published& d : all) {
      const bool picks = Picks(selectors, d);
      EXPECT_EQ(picks, Intended(name, d)) << name << " on " << d.driver << " " << d.name;
      if (picks) ++picked_per_class[name];
    }
    // A profile class picks exactly the devices whose profile attribute it names, and its
    // extended resource is that profile's.
    if (name.starts_with("mig-")) {
      for (const Published& d : ours) {
        if (!Picks(selectors, d)) continue;
        EXPECT_EQ(c["spec"]["extendedResourceName"], MigResource(AttributeString(d, "profile")))
            << name << " " << d.name;
      }
    }
  }
  // Every kind is there on this node, and every profile of the model has devices in its class.
  EXPECT_EQ(picked_per_class[kGpuClass], 2);  // the on-demand GPU's whole device and GPU 1
  EXPECT_EQ(picked_per_class[kSharedClass], 1);
  int mig = 0;
  for (const Published& d : ours) mig += AttributeString(d, "type") == "mig" ? 1 : 0;
  EXPECT_EQ(picked_per_class[kMigClass], mig);
  EXPECT_GT(mig, 0);
  for (const hw::GiProfile& p : model->mig->profiles) {
    int of_profile = 0;
    for (const Published& d : ours) of_profile += AttributeString(d, "profile") == p.name ? 1 : 0;
    const std::string label = LabelInName(MigDeviceName(0, p.name, 0));
    EXPECT_EQ(picked_per_class["mig-" + label + ".gpuslice.io"], of_profile) << p.name;
    EXPECT_GE(of_profile, static_cast<int>(p.starts.size())) << p.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, DeviceClassSelection, testing::ValuesIn(kModels),
                         [](const testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Every class over every model of the catalog: the right devices, and no evaluation error.
TEST(DeviceClassesOnCatalog, EveryModel) {
  const std::vector<nlohmann::json> classes = DeviceClasses(hw::Catalog::Builtin());
  std::set<std::string> classes_used;
  for (const hw::GpuModel& model : hw::Catalog::Builtin().models()) {
    SCOPED_TRACE(model.id);
    for (const Published& d : OurDevices(&model)) {
      for (const nlohmann::json& c : classes) {
        const std::string name = c["metadata"]["name"].get<std::string>();
        const bool picks = Picks(SelectorsOf(c["spec"]), d);
        EXPECT_EQ(picks, Intended(name, d)) << name << " on " << d.name;
        if (picks) classes_used.insert(name);
      }
    }
  }
  EXPECT_EQ(classes_used.size(), classes.size()) << "a class picks no device of any model";
}

// --- the examples -----------------------------------------------------------------------------

// A YAML value as JSON: quoted scalars are strings; plain ones ints or bools when they read so.
nlohmann::json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json out = nlohmann::json::array();
      for (const YAML::Node& item : node) out.push_back(YamlToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string text = node.as<std::string>();
      if (node.Tag() != "!") {
        if (std::regex_match(text, std::regex("-?[0-9]+"))) return std::stoll(text);
        if (text == "true" || text == "false") return text == "true";
      }
      return text;
    }
    default:
      return nullptr;
  }
}

std::vector<nlohmann::json> Examples() {
  std::vector<nlohmann::json> documents;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(kExamplesDir)) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    for (const YAML::Node& node : YAML::LoadAllFromFile(file.string())) {
      if (!node.IsNull()) documents.push_back(YamlToJson(node));
    }
  }
  return documents;
}

// What each example claim means, by template name: the type of its devices and, for MIG, the
// profile. A new example must be added here.
struct Meaning {
  std::string type;
  std::string profile;
};
const std::map<std::string, Meaning> kMeanings = {
    {"mig-1g-10gb", {"mig", "1g.10gb"}},
    {"whole-gpu", {"gpu", ""}},
    {"fractional-gpu", {"shared", ""}},
};

std::vector<Published> AllDevices() {
  std::vector<Published> all;
  for (const std::string& name : kModels) {
    for (Published& p : OurDevices(hw::Catalog::Builtin().Find(name))) all.push_back(std::move(p));
  }
  std::vector<Published> foreign = ForeignDevices(all);
  for (Published& p : foreign) all.push_back(std::move(p));
  return all;
}

// Whether the capacity `requests` fit the device's consumable capacities.
bool CapacityFits(const nlohmann::json& requests, const Published& d) {
  for (const auto& [key, quantity] : requests.items()) {
    if (!d.json.contains("capacity") || !d.json["capacity"].contains(key)) return false;
    const nlohmann::json& capacity = d.json["capacity"][key];
    if (!capacity.contains("requestPolicy")) return false;
    absl::StatusOr<std::int64_t> asked = ParseQuantityMilli(quantity.get<std::string>());
    absl::StatusOr<std::int64_t> value = ParseQuantityMilli(capacity["value"].get<std::string>());
    absl::StatusOr<std::int64_t> max = ParseQuantityMilli(
        capacity.at("requestPolicy").at("validRange").at("max").get<std::string>());
    EXPECT_TRUE(asked.ok() && value.ok() && max.ok()) << key << " " << quantity;
    if (!asked.ok() || !value.ok() || !max.ok() || *asked > *value || *asked > *max) return false;
  }
  return true;
}

TEST(DraExamples, ClaimsMatchOnlyWhatTheyMean) {
  const std::vector<nlohmann::json> classes = DeviceClasses(hw::Catalog::Builtin());
  const std::vector<Published> devices = AllDevices();
  std::set<std::string> templates;
  for (const nlohmann::json& doc : Examples()) {
    if (doc.value("kind", "") != "ResourceClaimTemplate") continue;
    const std::string name = doc.at("metadata").at("name").get<std::string>();
    SCOPED_TRACE(name);
    templates.insert(name);
    EXPECT_EQ(doc["apiVersion"], "resource.k8s.io/v1");
    ASSERT_TRUE(kMeanings.contains(name)) << "an example claim this test does not know";
    const Meaning& meaning = kMeanings.at(name);
    const nlohmann::json& spec = doc.at("spec").at("spec").at("devices");
    std::set<std::string> request_names;
    for (const nlohmann::json& request : spec.at("requests")) {
      request_names.insert(request["name"].get<std::string>());
      ASSERT_TRUE(request.contains("exactly")) << "only `exactly` requests are checked";
      const nlohmann::json& exactly = request["exactly"];
      const nlohmann::json* c =
          FindClass(classes, exactly.at("deviceClassName").get<std::string>());
      ASSERT_NE(c, nullptr) << exactly["deviceClassName"];
      std::vector<std::string> selectors = SelectorsOf((*c)["spec"]);
      for (const std::string& s : SelectorsOf(exactly)) selectors.push_back(s);
      int matched = 0;
      int fit = 0;
      for (const Published& d : devices) {
        if (!Picks(selectors, d)) continue;
        ++matched;
        EXPECT_EQ(d.driver, kDriverName) << d.name;
        EXPECT_EQ(AttributeString(d, "type"), meaning.type) << d.name;
        if (!meaning.profile.empty()) {
          EXPECT_EQ(AttributeString(d, "profile"), meaning.profile);
        }
        if (exactly.contains("capacity")) {
          EXPECT_TRUE(CapacityFits(exactly.at("capacity").at("requests"), d)) << d.name;
          ++fit;
        }
      }
      EXPECT_GT(matched, 0);
      if (exactly.contains("capacity")) {
        EXPECT_GT(fit, 0);
      }
    }
    // Opaque configuration for our driver is a SliceConfig and names requests of the claim.
    if (spec.contains("config")) {
      for (const nlohmann::json& config : spec["config"]) {
        EXPECT_EQ(config.at("opaque").at("driver"), kDriverName);
        absl::StatusOr<SliceConfig> parsed = ParseSliceConfig(config.at("opaque").at("parameters"));
        EXPECT_TRUE(parsed.ok()) << parsed.status();
        for (const nlohmann::json& r : config.value("requests", nlohmann::json::array())) {
          EXPECT_TRUE(request_names.contains(r.get<std::string>())) << r;
        }
      }
    }
  }
  for (const auto& [name, meaning] : kMeanings) EXPECT_TRUE(templates.contains(name)) << name;
}

TEST(DraExamples, PodsNameClaimsAndResourcesThatExist) {
  const std::vector<nlohmann::json> classes = DeviceClasses(hw::Catalog::Builtin());
  const std::vector<Published> devices = AllDevices();
  const std::vector<nlohmann::json> examples = Examples();
  std::set<std::string> templates;
  for (const nlohmann::json& doc : examples) {
    if (doc.value("kind", "") == "ResourceClaimTemplate") {
      templates.insert(doc.at("metadata").at("name").get<std::string>());
    }
  }
  int pods = 0;
  int extended = 0;
  for (const nlohmann::json& doc : examples) {
    if (doc.value("kind", "") != "Pod") continue;
    ++pods;
    SCOPED_TRACE(doc.at("metadata").at("name").get<std::string>());
    std::set<std::string> claims;
    if (doc["spec"].contains("resourceClaims")) {
      for (const nlohmann::json& c : doc["spec"]["resourceClaims"]) {
        claims.insert(c["name"].get<std::string>());
        EXPECT_TRUE(templates.contains(c["resourceClaimTemplateName"].get<std::string>()));
      }
    }
    for (const nlohmann::json& container : doc.at("spec").at("containers")) {
      const nlohmann::json resources = container.value("resources", nlohmann::json::object());
      const nlohmann::json claimed = resources.value("claims", nlohmann::json::array());
      for (const nlohmann::json& c : claimed) {
        EXPECT_TRUE(claims.contains(c["name"].get<std::string>())) << c;
      }
      // An extended resource is served by the class that names it, which picks only devices of
      // that resource: whole GPUs for nvidia.com/gpu, MIG devices of the profile otherwise.
      const nlohmann::json limits = resources.value("limits", nlohmann::json::object());
      for (const auto& [resource, count] : limits.items()) {
        if (resource == "cpu" || resource == "memory") continue;
        ++extended;
        const nlohmann::json* c = nullptr;
        for (const nlohmann::json& k : classes) {
          if (k["spec"].value("extendedResourceName", "") == resource) c = &k;
        }
        ASSERT_NE(c, nullptr) << resource << " is no class's extendedResourceName";
        int matched = 0;
        for (const Published& d : devices) {
          if (!Picks(SelectorsOf((*c)["spec"]), d)) continue;
          ++matched;
          const std::string type = AttributeString(d, "type");
          if (resource == "nvidia.com/gpu") {
            EXPECT_EQ(type, "gpu") << d.name;
          } else {
            EXPECT_EQ(type, "mig") << d.name;
            EXPECT_EQ(MigResource(AttributeString(d, "profile")), resource) << d.name;
          }
        }
        EXPECT_GT(matched, 0) << resource;
      }
    }
  }
  EXPECT_GE(pods, 4);
  EXPECT_GE(extended, 1);
}

// --- the evaluator itself ----------------------------------------------------------------------

cel::Device Sample() {
  cel::Device d;
  d.driver = "gpu.gpuslice.io";
  d.attributes["gpu.gpuslice.io"] = {{"type", std::string("mig")},
                                     {"profile", std::string("1g.10gb")},
                                     {"placementStart", std::int64_t{4}},
                                     {"driverVersion", cel::Version{"550.54.15"}}};
  return d;
}

absl::StatusOr<bool> Eval(const std::string& text) {
  absl::StatusOr<cel::Expression> e = cel::Expression::Parse(text);
  if (!e.ok()) return e.status();
  return e->Matches(Sample());
}

TEST(CelSubset, Evaluates) {
  const std::string a = "device.attributes['gpu.gpuslice.io'].";
  EXPECT_EQ(*Eval("device.driver == 'gpu.gpuslice.io'"), true);
  EXPECT_EQ(*Eval(a + "profile == \"1g.10gb\""), true);
  EXPECT_EQ(*Eval(a + "placementStart == 4 && " + a + "placementStart >= 4"), true);
  EXPECT_EQ(*Eval(a + "placementStart < 4 || " + a + "type != 'mig'"), false);
  EXPECT_EQ(*Eval("(" + a + "type == 'gpu' || " + a + "type == 'mig') && true"), true);
  EXPECT_EQ(*Eval("'a' < 'b' && false <= true"), true);
  // An unknown domain is an empty map: reading from it is an error, which false absorbs in &&
  // and true in ||, from either side.
  EXPECT_FALSE(Eval("device.attributes['x.io'].type == 'mig'").ok());
  EXPECT_FALSE(Eval(a + "missing == 1").ok());
  EXPECT_EQ(*Eval(a + "missing == 1 && " + a + "type == 'gpu'"), false);
  EXPECT_EQ(*Eval(a + "type == 'gpu' && " + a + "missing == 1"), false);
  EXPECT_EQ(*Eval(a + "missing == 1 || " + a + "type == 'mig'"), true);
  EXPECT_FALSE(Eval(a + "missing == 1 && " + a + "type == 'mig'").ok());
  EXPECT_FALSE(Eval(a + "missing == 1 || " + a + "type == 'gpu'").ok());
  // Types must agree; versions cannot be compared here; the result must be a bool.
  EXPECT_FALSE(Eval(a + "placementStart == '4'").ok());
  EXPECT_FALSE(Eval(a + "driverVersion == '550.54.15'").ok());
  EXPECT_FALSE(Eval(a + "profile").ok());
  EXPECT_FALSE(Eval("1 && true").ok());
}

TEST(CelSubset, RefusesEverythingElse) {
  for (const std::string text : {
           "",
           "device.driver == 'a' && ",
           "device.capacity['gpu.gpuslice.io'].memory == 1",
           "device.attributes['gpu.gpuslice.io']['type'] == 'mig'",
           "device.attributes[\"gpu.gpuslice.io\"].type.size() == 3",
           "device.attributes['gpu.gpuslice.io'].profile.startsWith('1g')",
           "!(device.driver == 'a')",
           "device.driver in ['a']",
           "size(device.driver) == 1",
           "device.driver == 'a\\'b'",
           "1 == 1 == true",
           "-1 < 0",
           "1u == 1u",
           "0x10 == 16",
           "1.5 < 2",
           "device.driver == '''a'''",
           "cel.bind(x, device.driver, x == 'a')",
           "device.driver == 'a' ? true : false",
           "(device.driver == 'a'",
           "device.driver == 'unterminated",
       }) {
    EXPECT_FALSE(cel::Expression::Parse(text).ok()) << text;
  }
}

}  // namespace
}  // namespace gpuslice::dra
