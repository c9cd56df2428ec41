#include "gpuslice/dra/device_classes.h"

#include <cctype>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpuslice/dra/gpu_devices.h"
#include "gpuslice/dra/resource_model.h"
#include "gpuslice/k8s/devices.h"

namespace gpuslice::dra {
namespace {

constexpr size_t kMaxSubdomain = 253;
constexpr size_t kMaxQualifiedNamePart = 63;

bool IsDnsSubdomain(const std::string& name) {
  if (name.empty() || name.size() > kMaxSubdomain) return false;
  for (const std::string& label : std::vector<std::string>(absl::StrSplit(name, '.'))) {
    if (!IsDnsLabel(label)) return false;
  }
  return true;
}

// The name part of a qualified name: ≤ 63, [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?.
bool IsQualifiedNamePart(const std::string& name) {
  if (name.empty() || name.size() > kMaxQualifiedNamePart) return false;
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (char c : name) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

// "nvidia.com/<name>" with a valid name part (the prefix is a fixed, valid subdomain).
bool IsExtendedResourceName(const std::string& name) {
  const size_t slash = name.find('/');
  return slash != std::string::npos && IsDnsSubdomain(name.substr(0, slash)) &&
         IsQualifiedNamePart(name.substr(slash + 1));
}

// The profile's label as the devices' names spell it: MigDeviceName(0, p, 0) is
// "gpu-0-mig-<label>-0".
std::string ProfileLabelOf(const std::string& profile) {
  const std::string name = MigDeviceName(0, profile, 0);
  const std::string prefix = "gpu-0-mig-";
  const std::string suffix = "-0";
  if (name.size() <= prefix.size() + suffix.size()) return "";
  return name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
}

std::string DriverCheck() { return absl::StrCat("device.driver == '", kDriverName, "'"); }

std::string Attribute(const std::string& name) {
  return absl::StrCat("device.attributes['", kDriverName, "'].", name);
}

std::string TypeSelector(const std::string& type) {
  return absl::StrCat(DriverCheck(), " && ", Attribute("type"), " == '", type, "'");
}

nlohmann::json Class(const std::string& name, const std::string& expression,
                     const std::string& extended_resource) {
  nlohmann::json spec = {
      {"selectors", nlohmann::json::array({{{"cel", {{"expression", expression}}}}})}};
  if (!extended_resource.empty()) spec["extendedResourceName"] = extended_resource;
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "DeviceClass"},
          {"metadata", {{"name", name}, {"labels", {{"app.kubernetes.io/name", "gpuslice"}}}}},
          {"spec", spec}};
}

}  // namespace

std::vector<nlohmann::json> DeviceClasses(const hw::Catalog& catalog) {
  std::vector<nlohmann::json> classes = {
      Class(kGpuClass, TypeSelector("gpu"), std::string(k8s::kWholeGpuResource)),
      Class(kMigClass, TypeSelector("mig"), ""),
      Class(kSharedClass, TypeSelector("shared"), ""),
  };
  std::set<std::string> profiles;
  for (const hw::GpuModel& model : catalog.models()) {
    if (!model.mig.has_value()) continue;
    for (const hw::GiProfile& profile : model.mig->profiles) profiles.insert(profile.name);
  }
  // Class name → (profile, resource), first profile wins; resources stay unique too.
  std::map<std::string, std::pair<std::string, std::string>> by_class;
  std::set<std::string> resources = {std::string(k8s::kWholeGpuResource)};
  for (const std::string& profile : profiles) {
    const std::string label = ProfileLabelOf(profile);
    const std::string name = absl::StrCat("mig-", label, ".gpuslice.io");
    const std::string resource = k8s::MigResourceName(profile);
    // The profile is put in a single-quoted CEL string: it may not hold a quote or backslash.
    const bool quotable = profile.find_first_of("'\\") == std::string::npos;
    if (label.empty() || !IsDnsSubdomain(name) || !IsExtendedResourceName(resource) || !quotable ||
        by_class.contains(name) || resources.contains(resource)) {
      continue;
    }
    resources.insert(resource);
    by_class[name] = {profile, resource};
  }
  for (const auto& [name, profile_resource] : by_class) {
    const auto& [profile, resource] = profile_resource;
    classes.push_back(Class(
        name,
        absl::StrCat(TypeSelector("mig"), " && ", Attribute("profile"), " == '", profile, "'"),
        resource));
  }
  return classes;
}

}  // namespace gpuslice::dra
