// What pods and nodes ask of the scheduler extender (gpuslice/k8s/extender.h): ParseQuantity,
// ParsePod (a pod's GPU resources as the engine's requests) and ParseNodesYaml (the extender's
// nodes file). Pure; the decisions are in extender.cc, the verbs' wire JSON in extender_verbs.cc.
#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "extender_internal.h"
#include "gpuslice/geometry/layout_text.h"
#include "gpuslice/k8s/devices.h"
#include "gpuslice/k8s/extender.h"
#include "gpuslice/util/yaml_reader.h"

namespace gpuslice::k8s {

using nlohmann::json;

namespace internal {

std::string JsonString(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

}  // namespace internal

namespace {

using internal::JsonString;

const hw::Catalog& CatalogOr(const hw::Catalog* catalog) {
  return catalog != nullptr ? *catalog : hw::Catalog::Builtin();
}

// The catalog's profile name whose device-plugin resource is `resource`, or "".
std::string ProfileOfResource(const hw::Catalog& catalog, std::string_view resource) {
  for (const hw::GpuModel& model : catalog.models()) {
    if (!model.mig) continue;
    for (const hw::GiProfile& profile : model.mig->profiles) {
      if (MigResourceName(profile.name) == resource) return profile.name;
    }
  }
  return "";
}

bool IsGpuResource(std::string_view name) {
  return name == kWholeGpuResource || name == kShareResource ||
         (name.size() > kMigResourcePrefix.size() &&
          name.substr(0, kMigResourcePrefix.size()) == kMigResourcePrefix);
}

// The GPU resources one container asks for: name → amount.
absl::StatusOr<std::map<std::string, std::int64_t>> ContainerResources(const json& container,
                                                                       const std::string& where) {
  std::map<std::string, std::int64_t> out;
  if (!container.is_object()) return absl::InvalidArgumentError(where + ": not an object");
  auto resources = container.find("resources");
  if (resources == container.end() || resources->is_null()) return out;
  if (!resources->is_object()) {
    return absl::InvalidArgumentError(where + ".resources: not an object");
  }
  std::map<std::string, std::int64_t> requests;
  std::map<std::string, std::int64_t> limits;
  for (const char* field : {"requests", "limits"}) {
    auto list = resources->find(field);
    if (list == resources->end() || list->is_null()) continue;
    if (!list->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".resources.", field, ": not a map"));
    }
    for (const auto& [name, value] : list->items()) {
      if (!IsGpuResource(name)) continue;
      absl::StatusOr<std::int64_t> amount = ParseQuantity(value);
      if (!amount.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".resources.", field, "[", name, "]: ", amount.status().message()));
      }
      (std::string_view(field) == "requests" ? requests : limits)[name] = *amount;
    }
  }
  for (const auto& [name, amount] : limits) {
    auto it = requests.find(name);
    if (it != requests.end() && it->second != amount) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", name, " requests ", it->second,
                                                     " but limits ", amount,
                                                     "; extended resources must ask both equal"));
    }
    out[name] = amount;
  }
  for (const auto& [name, amount] : requests) out[name] = amount;
  int mig_kinds = 0;
  std::vector<std::string> migs;
  for (auto it = out.begin(); it != out.end();) {
    if (it->second == 0) {
      it = out.erase(it);
      continue;
    }
    if (it->first.starts_with(kMigResourcePrefix)) {
      ++mig_kinds;
      migs.push_back(it->first);
    }
    ++it;
  }
  if (mig_kinds > 1) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": asks for more than one MIG profile (",
                                                   absl::StrJoin(migs, ", "),
                                                   "); one container may use one MIG profile"));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::int64_t> ParseQuantity(const json& quantity) {
  if (quantity.is_number_integer()) {
    const std::int64_t value = quantity.get<std::int64_t>();
    if (value < 0) return absl::InvalidArgumentError(absl::StrCat(value, " is negative"));
    return value;
  }
  if (quantity.is_number_unsigned()) {
    const std::uint64_t value = quantity.get<std::uint64_t>();
    if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(value, " is too large"));
    }
    return static_cast<std::int64_t>(value);
  }
  if (quantity.is_string()) {
    const std::string text = quantity.get<std::string>();
    if (text.empty() || text.size() > 9 ||
        !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text, "' is not a whole number (extended resources are counted)"));
    }
    return std::stoll(text);
  }
  return absl::InvalidArgumentError(absl::StrCat("'", quantity.dump(), "' is not a quantity"));
}

std::string PodRequest::key() const {
  return uid.empty() ? absl::StrCat(namespace_, "/", name) : uid;
}

absl::StatusOr<PodRequest> ParsePod(const json& pod, int units_per_gpu,
                                    const hw::Catalog* catalog) {
  if (!pod.is_object()) return absl::InvalidArgumentError("Pod: not an object");
  PodRequest out;
  if (auto meta = pod.find("metadata"); meta != pod.end() && meta->is_object()) {
    out.uid = JsonString(*meta, "uid");
    out.name = JsonString(*meta, "name");
    out.namespace_ = JsonString(*meta, "namespace");
  }
  if (out.namespace_.empty()) out.namespace_ = "default";
  if (units_per_gpu < 2 || units_per_gpu > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("units per GPU ", units_per_gpu, " outside 2..1000"));
  }
  const json* spec = nullptr;
  if (auto it = pod.find("spec"); it != pod.end() && it->is_object()) spec = &*it;
  // Per resource: the sum over app containers and the max over init containers.
  std::map<std::string, std::int64_t> app_sum;
  std::map<std::string, std::int64_t> init_max;
  std::vector<std::int64_t> share_parts;  // app containers' share units, in order
  std::int64_t init_share_max = 0;
  for (const char* list_name : {"containers", "initContainers"}) {
    const bool init = std::string_view(list_name) == "initContainers";
    if (spec == nullptr) break;
    auto list = spec->find(list_name);
    if (list == spec->end() || list->is_null()) continue;
    if (!list->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.", list_name, ": not a list"));
    }
    for (size_t i = 0; i < list->size(); ++i) {
      const json& container = (*list)[i];
      std::string where = absl::StrCat("spec.", list_name, "[", i, "]");
      if (std::string name = JsonString(container, "name"); !name.empty()) {
        where = absl::StrCat(where, " (", name, ")");
      }
      absl::StatusOr<std::map<std::string, std::int64_t>> resources =
          ContainerResources(container, where);
      if (!resources.ok()) return resources.status();
      for (const auto& [name, amount] : *resources) {
        if (name == kShareResource) {
          if (amount > units_per_gpu) {
            return absl::InvalidArgumentError(
                absl::StrCat(where, ": ", name, " ", amount, " is more than one GPU (",
                             units_per_gpu, " units); a container's share is on one GPU"));
          }
          if (init) {
            init_share_max = std::max(init_share_max, amount);
          } else {
            share_parts.push_back(amount);
          }
          continue;
        }
        if (init) {
          init_max[name] = std::max(init_max[name], amount);
        } else {
          app_sum[name] += amount;
        }
      }
    }
  }
  std::int64_t share_sum = 0;
  for (std::int64_t units : share_parts) share_sum += units;
  if (init_share_max > 0) {
    if (share_parts.empty()) {
      share_parts.push_back(init_share_max);
    } else if (init_share_max > share_sum) {
      return absl::InvalidArgumentError(absl::StrCat(
          "an init container asks for ", init_share_max, " ", std::string(kShareResource),
          " units, more than the app containers together (", share_sum, "); not supported"));
    }
  }
  std::map<std::string, std::int64_t> total = app_sum;
  for (const auto& [name, amount] : init_max) total[name] = std::max(total[name], amount);
  for (const auto& [name, amount] : total) {
    if (amount == 0) continue;
    if (name == kWholeGpuResource) {
      if (amount > 1024) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": ", amount, " GPUs on one node"));
      }
      PodPart part;
      part.kind = PartKind::kWhole;
      part.resource = name;
      part.count = amount;
      part.request.num_gpu = static_cast<int>(amount);
      out.parts.push_back(std::move(part));
      continue;
    }
    // A MIG resource.
    const std::string profile = ProfileOfResource(CatalogOr(catalog), name);
    if (profile.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": no GPU model of the catalog has this MIG profile"));
    }
    if (amount > 1024) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", amount, " instances"));
    }
    for (std::int64_t k = 0; k < amount; ++k) {
      PodPart part;
      part.kind = PartKind::kMig;
      part.resource = name;
      part.count = 1;
      part.request.num_gpu = 1;
      part.request.mig_profile = profile;
      out.parts.push_back(std::move(part));
    }
  }
  for (std::int64_t units : share_parts) {
    PodPart part;
    part.kind = PartKind::kShare;
    part.resource = std::string(kShareResource);
    part.count = units;
    part.request.num_gpu = 1;
    part.request.gpu_milli = static_cast<int>((units * place::kMilliPerGpu + units_per_gpu - 1) /
                                              units_per_gpu);  // rounded up
    out.parts.push_back(std::move(part));
  }
  return out;
}

absl::StatusOr<std::vector<place::NodeSpec>> ParseNodesYaml(std::string_view text,
                                                            std::string_view origin,
                                                            const hw::Catalog* catalog) {
  const hw::Catalog& models = CatalogOr(catalog);
  std::vector<place::NodeSpec> nodes;
  try {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& error) {
      return util::StatusOfYaml(error, origin);
    }
    util::YamlMap top(root, origin, "");
    YAML::Node list = top.Node("nodes");
    top.Finish();
    if (!list.IsSequence()) top.Fail(list, "nodes", "expected a list");
    std::set<std::string> seen;
    for (size_t i = 0; i < list.size(); ++i) {
      util::YamlMap entry(list[i], origin, absl::StrCat("nodes[", i, "]"));
      place::NodeSpec node;
      node.name = entry.String("name");
      if (node.name.empty()) entry.Fail("name", "empty");
      if (!seen.insert(node.name).second) {
        entry.Fail("name", absl::StrCat("node '", node.name, "' appears twice"));
      }
      node.gpus = static_cast<int>(entry.Int("gpus", 0, 1024));
      const std::string mode = entry.String("mode");
      node.model = entry.String("model", "");
      const hw::GpuModel* model = node.model.empty() ? nullptr : models.Find(node.model);
      if (mode == "whole") {
        node.mode = place::GpuMode::kWhole;
      } else if (mode == "shared") {
        node.mode = place::GpuMode::kShared;
      } else if (mode == "mig") {
        node.mode = place::GpuMode::kMig;
        if (model == nullptr) {
          entry.Fail("model", absl::StrCat("'", node.model, "' is not a GPU model of the catalog"));
        }
        if (!model->mig_capable()) {
          entry.Fail("model", absl::StrCat("'", node.model, "' has no MIG"));
        }
        node.hardware = model;
        node.model = model->id;
      } else {
        entry.Fail("mode", absl::StrCat("'", mode, "': expected whole, shared or mig"));
      }
      // The MIG layout the node's GPUs have (fixed by an admin or `gpuslice apply`): one for every
      // GPU, or one per GPU, in the layout text of `gpuslice check`.
      const std::vector<std::string> layouts = entry.StringList("layouts");
      if (!layouts.empty()) {
        if (node.mode != place::GpuMode::kMig) {
          entry.Fail("layouts", "only MIG nodes (mode: mig) have layouts");
        }
        if (layouts.size() != 1 && static_cast<int>(layouts.size()) != node.gpus) {
          entry.Fail("layouts", absl::StrCat(layouts.size(), " layouts for ", node.gpus,
                                             " GPUs: give one for all, or one per GPU"));
        }
        const geometry::Shape shape(*model);
        for (int gpu = 0; gpu < node.gpus; ++gpu) {
          const std::string& layout = layouts[layouts.size() == 1 ? 0 : static_cast<size_t>(gpu)];
          absl::StatusOr<geometry::ParsedLayout> parsed = geometry::ParseLayout(shape, layout);
          if (!parsed.ok()) {
            entry.Fail("layouts", absl::StrCat("GPU ", gpu, ": ", parsed.status().message()));
          }
          const geometry::ResolvedLayout resolved = geometry::ResolveLayout(shape, *parsed);
          if (!resolved.valid()) {
            entry.Fail("layouts",
                       absl::StrCat("GPU ", gpu, ": '", layout, "' is not a valid layout: ",
                                    resolved.violations.empty()
                                        ? resolved.ci_problems.front()
                                        : geometry::Describe(shape, resolved.instances,
                                                             resolved.violations.front())));
          }
          place::FixedLayout fixed{true, {}};
          for (const geometry::Placed& instance : resolved.instances) {
            fixed.instances.push_back({instance.profile, instance.start});
          }
          node.fixed.push_back(std::move(fixed));
        }
      }
      node.gpu_memory_mib = entry.Int("gpu_memory_mib", 0, std::int64_t{1} << 30,
                                      model != nullptr ? model->memory_mib : 0);
      node.cpu_milli = entry.Int("cpu_milli", 0, std::int64_t{1} << 40, 1000000);
      node.memory_mib = entry.Int("memory_mib", 0, std::int64_t{1} << 40, std::int64_t{1} << 30);
      node.max_pods = 1 << 20;
      entry.Finish();
      nodes.push_back(std::move(node));
    }
  } catch (const util::ParseError& error) {
    return util::StatusOf(error);
  }
  return nodes;
}

}  // namespace gpuslice::k8s
