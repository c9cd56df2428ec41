#include "gpuslice/k8s/extender.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpuslice/geometry/layout_text.h"
#include "gpuslice/k8s/devices.h"
#include "gpuslice/util/yaml_reader.h"

namespace gpuslice::k8s {

using nlohmann::json;

namespace {

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

std::string JsonString(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

std::string ModeResource(place::GpuMode mode) {
  switch (mode) {
    case place::GpuMode::kWhole:
      return std::string(kWholeGpuResource);
    case place::GpuMode::kShared:
      return std::string(kShareResource);
    case place::GpuMode::kMig:
      return "nvidia.com/mig-* resources";
  }
  return "";
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

// ---------------------------------------------------------------------------------------------

Extender::Extender(place::Cluster cluster, std::unique_ptr<place::Policy> policy,
                   ExtenderOptions options)
    : cluster_(std::move(cluster)), policy_(std::move(policy)), options_(std::move(options)) {
  for (int node = 0; node < cluster_.node_count(); ++node) index_[cluster_.spec(node).name] = node;
}

absl::StatusOr<Extender> Extender::Create(std::vector<place::NodeSpec> nodes,
                                          ExtenderOptions options) {
  if (options.units_per_gpu < 2 || options.units_per_gpu > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("units per GPU: ", options.units_per_gpu, " is outside 2..1000"));
  }
  if (options.policy == "random") {
    return absl::InvalidArgumentError(
        "policy 'random' is not offered by the extender (kube-scheduler already breaks ties at "
        "random)");
  }
  absl::StatusOr<place::Cluster> cluster = place::Cluster::Create(std::move(nodes));
  if (!cluster.ok()) return cluster.status();
  absl::StatusOr<std::unique_ptr<place::Policy>> policy =
      place::MakePolicy(options.policy, options.policy_options);
  if (!policy.ok()) return policy.status();
  return Extender(*std::move(cluster), *std::move(policy), std::move(options));
}

int Extender::NodeIndex(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

std::string Extender::Unresolvable(const PodPart& part, int node) const {
  const place::NodeSpec& spec = cluster_.spec(node);
  const place::GpuMode want = part.kind == PartKind::kWhole   ? place::GpuMode::kWhole
                              : part.kind == PartKind::kShare ? place::GpuMode::kShared
                                                              : place::GpuMode::kMig;
  if (spec.gpus == 0) return absl::StrCat(part.resource, ": the node has no GPUs");
  if (spec.mode != want) {
    return absl::StrCat(part.resource, ": the node's GPUs are ",
                        std::string(place::ToString(spec.mode)), " (offered as ",
                        ModeResource(spec.mode), ")");
  }
  if (part.kind == PartKind::kWhole && spec.gpus < part.request.num_gpu) {
    return absl::StrCat(part.resource, ": ", part.request.num_gpu, " asked, the node has ",
                        spec.gpus);
  }
  if (part.kind == PartKind::kMig && cluster_.MigProfileFor(node, part.request) < 0) {
    return absl::StrCat(part.resource, ": GPU model ", spec.model, " has no MIG profile ",
                        part.request.mig_profile);
  }
  return "";
}

std::optional<std::vector<place::Allocation>> Extender::Claim(const PodRequest& pod, int node,
                                                              std::string* why) {
  std::vector<place::Allocation> done;
  for (const PodPart& part : pod.parts) {
    std::string reason;
    if (!cluster_.Fits(node, part.request)) {
      reason = cluster_.WhyNot(node, part.request);
      if (reason.empty()) reason = "does not fit";
    } else {
      place::Allocation allocation;
      allocation.node = node;
      allocation.request = part.request;
      allocation.gpus = policy_->ChooseGpus(cluster_, node, part.request);
      if (absl::Status status = cluster_.Apply(allocation); status.ok()) {
        allocation.id = next_id_++;
        done.push_back(std::move(allocation));
        continue;
      } else {
        reason = absl::StrCat("policy ", std::string(policy_->name()),
                              " chose an invalid placement: ", std::string(status.message()));
      }
    }
    Unclaim(done);
    *why = pod.parts.size() > 1 ? absl::StrCat(part.resource, ": ", reason) : reason;
    return std::nullopt;
  }
  return done;
}

void Extender::Unclaim(const std::vector<place::Allocation>& allocations) {
  for (auto it = allocations.rbegin(); it != allocations.rend(); ++it) {
    // Releasing what was just applied cannot fail.
    (void)cluster_.Release(*it);
  }
}

std::string Extender::WhyNot(const PodRequest& pod, int node, bool* unresolvable) {
  *unresolvable = false;
  if (pod.parts.empty()) return "";
  if (node < 0 || node >= cluster_.node_count()) {
    *unresolvable = true;
    return "the node is not among gpuslice's nodes";
  }
  for (const PodPart& part : pod.parts) {
    if (std::string why = Unresolvable(part, node); !why.empty()) {
      *unresolvable = true;
      return why;
    }
  }
  if (pod.parts.size() == 1) {
    if (cluster_.Fits(node, pod.parts[0].request)) return "";
    std::string why = cluster_.WhyNot(node, pod.parts[0].request);
    return why.empty() ? "does not fit" : why;
  }
  std::string why;
  std::optional<std::vector<place::Allocation>> claimed = Claim(pod, node, &why);
  if (!claimed) return why;
  Unclaim(*claimed);
  return "";
}

place::Score Extender::ScoreNode(const PodRequest& pod, int node) {
  place::Score total;
  std::vector<place::Allocation> done;
  for (const PodPart& part : pod.parts) {
    if (!cluster_.Fits(node, part.request)) break;  // REQUIRES says it does
    const place::Score score = policy_->ScoreNode(cluster_, node, part.request);
    total.primary += score.primary;
    total.secondary += score.secondary;
    if (&part == &pod.parts.back()) break;
    place::Allocation allocation;
    allocation.node = node;
    allocation.request = part.request;
    allocation.gpus = policy_->ChooseGpus(cluster_, node, part.request);
    if (!cluster_.Apply(allocation).ok()) break;
    done.push_back(std::move(allocation));
  }
  Unclaim(done);
  return total;
}

std::vector<int> Extender::ExtenderScores(const PodRequest& pod, const std::vector<int>& nodes) {
  std::vector<int> out(nodes.size(), 0);
  if (pod.parts.empty()) return out;
  // Feasible candidates with their policy scores.
  std::vector<std::pair<place::Score, int>> feasible;  // (score, position in `nodes`)
  for (size_t i = 0; i < nodes.size(); ++i) {
    bool unresolvable = false;
    if (nodes[i] < 0 || !WhyNot(pod, nodes[i], &unresolvable).empty()) continue;
    feasible.emplace_back(ScoreNode(pod, nodes[i]), static_cast<int>(i));
  }
  if (feasible.empty()) return out;
  // The engine's choice: best score, ties to the lowest node index.
  size_t best = 0;
  for (size_t k = 1; k < feasible.size(); ++k) {
    const auto& [score, i] = feasible[k];
    const auto& [best_score, b] = feasible[best];
    if (score > best_score ||
        (score == best_score && nodes[static_cast<size_t>(i)] < nodes[static_cast<size_t>(b)])) {
      best = k;
    }
  }
  out[static_cast<size_t>(feasible[best].second)] = kMaxExtenderScore;
  // The others: distinct scores, best first, spread over 9..0 (order kept).
  std::vector<place::Score> distinct;
  for (size_t k = 0; k < feasible.size(); ++k) {
    if (k != best) distinct.push_back(feasible[k].first);
  }
  std::sort(distinct.begin(), distinct.end(), std::greater<>());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const size_t buckets = std::max<size_t>(distinct.size(), kMaxExtenderScore);
  for (size_t k = 0; k < feasible.size(); ++k) {
    if (k == best) continue;
    const size_t rank = static_cast<size_t>(
        std::lower_bound(distinct.begin(), distinct.end(), feasible[k].first, std::greater<>()) -
        distinct.begin());
    out[static_cast<size_t>(feasible[k].second)] =
        kMaxExtenderScore - 1 - static_cast<int>(rank * kMaxExtenderScore / buckets);
  }
  return out;
}

void Extender::Remember(const PodRequest& pod) {
  const std::string key = pod.key();
  if (bound_.contains(key)) return;
  auto [it, inserted] = pending_.insert_or_assign(key, pod);
  (void)it;
  if (inserted) pending_order_.push_back(key);
  while (pending_.size() > options_.max_pending && !pending_order_.empty()) {
    pending_.erase(pending_order_.front());
    pending_order_.pop_front();
  }
  // Keep the order list from growing with keys already bound or forgotten.
  if (pending_order_.size() > 2 * options_.max_pending + 16) {
    std::deque<std::string> kept;
    for (const std::string& k : pending_order_) {
      if (pending_.contains(k)) kept.push_back(k);
    }
    pending_order_ = std::move(kept);
  }
}

namespace {

// The candidate node names of ExtenderArgs and whether they came as NodeNames.
struct Candidates {
  bool names_form = true;
  std::vector<std::string> names;
  std::vector<const json*> items;  // Nodes form: the node objects
};

absl::StatusOr<Candidates> ReadCandidates(const json& args) {
  Candidates out;
  auto names = args.find("NodeNames");
  if (names != args.end() && !names->is_null()) {
    if (!names->is_array()) return absl::InvalidArgumentError("NodeNames: not a list");
    for (const json& name : *names) {
      if (!name.is_string()) return absl::InvalidArgumentError("NodeNames: a name is not a string");
      out.names.push_back(name.get<std::string>());
    }
    return out;
  }
  auto nodes = args.find("Nodes");
  if (nodes != args.end() && !nodes->is_null()) {
    out.names_form = false;
    if (!nodes->is_object()) return absl::InvalidArgumentError("Nodes: not a NodeList");
    auto items = nodes->find("items");
    if (items == nodes->end() || items->is_null()) return out;
    if (!items->is_array()) return absl::InvalidArgumentError("Nodes.items: not a list");
    for (const json& item : *items) {
      std::string name;
      if (item.is_object()) {
        if (auto meta = item.find("metadata"); meta != item.end()) name = JsonString(*meta, "name");
      }
      if (name.empty()) return absl::InvalidArgumentError("Nodes.items: a node without a name");
      out.names.push_back(std::move(name));
      out.items.push_back(&item);
    }
    return out;
  }
  return out;  // neither: no candidates
}

absl::StatusOr<const json*> ReadPod(const json& args) {
  if (!args.is_object()) return absl::InvalidArgumentError("arguments: not a JSON object");
  auto pod = args.find("Pod");
  if (pod == args.end() || !pod->is_object()) {
    return absl::InvalidArgumentError("Pod: missing or not an object");
  }
  return &*pod;
}

json FilterError(std::string_view message) {
  return json{{"Nodes", nullptr},
              {"NodeNames", nullptr},
              {"FailedNodes", json::object()},
              {"FailedAndUnresolvableNodes", json::object()},
              {"Error", std::string(message)}};
}

}  // namespace

json Extender::Filter(const json& args) {
  absl::StatusOr<const json*> pod_json = ReadPod(args);
  if (!pod_json.ok()) return FilterError(std::string(pod_json.status().message()));
  absl::StatusOr<Candidates> candidates = ReadCandidates(args);
  if (!candidates.ok()) return FilterError(std::string(candidates.status().message()));
  absl::StatusOr<PodRequest> pod = ParsePod(**pod_json, options_.units_per_gpu, options_.catalog);

  json passed = json::array();
  json failed = json::object();
  json unresolvable_nodes = json::object();
  for (size_t i = 0; i < candidates->names.size(); ++i) {
    const std::string& name = candidates->names[i];
    std::string why;
    bool unresolvable = false;
    if (!pod.ok()) {
      why = absl::StrCat("gpuslice cannot place the pod: ", std::string(pod.status().message()));
      unresolvable = true;
    } else {
      why = WhyNot(*pod, NodeIndex(name), &unresolvable);
    }
    if (why.empty()) {
      passed.push_back(candidates->names_form ? json(name) : *candidates->items[i]);
    } else {
      (unresolvable ? unresolvable_nodes : failed)[name] = why;
    }
  }
  if (pod.ok()) Remember(*pod);
  json reply = {{"Nodes", nullptr},
                {"NodeNames", nullptr},
                {"FailedNodes", std::move(failed)},
                {"FailedAndUnresolvableNodes", std::move(unresolvable_nodes)},
                {"Error", ""}};
  if (candidates->names_form) {
    reply["NodeNames"] = std::move(passed);
  } else {
    reply["Nodes"] = json{{"metadata", json::object()}, {"items", std::move(passed)}};
  }
  return reply;
}

absl::StatusOr<json> Extender::Prioritize(const json& args) {
  absl::StatusOr<const json*> pod_json = ReadPod(args);
  if (!pod_json.ok()) return pod_json.status();
  absl::StatusOr<Candidates> candidates = ReadCandidates(args);
  if (!candidates.ok()) return candidates.status();
  absl::StatusOr<PodRequest> pod = ParsePod(**pod_json, options_.units_per_gpu, options_.catalog);
  if (!pod.ok()) return pod.status();
  Remember(*pod);
  std::vector<int> nodes;
  for (const std::string& name : candidates->names) nodes.push_back(NodeIndex(name));
  const std::vector<int> scores = ExtenderScores(*pod, nodes);
  json list = json::array();
  for (size_t i = 0; i < nodes.size(); ++i) {
    list.push_back({{"Host", candidates->names[i]}, {"Score", scores[i]}});
  }
  return list;
}

json Extender::Bind(const json& args, const Binder& binder) {
  auto error = [](std::string message) { return json{{"Error", std::move(message)}}; };
  if (!args.is_object()) return error("arguments: not a JSON object");
  BindingTarget target;
  target.pod_name = JsonString(args, "PodName");
  target.pod_namespace = JsonString(args, "PodNamespace");
  target.pod_uid = JsonString(args, "PodUID");
  target.node = JsonString(args, "Node");
  if (target.pod_name.empty() || target.node.empty()) {
    return error("PodName and Node are required");
  }
  if (target.pod_namespace.empty()) target.pod_namespace = "default";
  PodRequest probe;
  probe.uid = target.pod_uid;
  probe.name = target.pod_name;
  probe.namespace_ = target.pod_namespace;
  const std::string key = probe.key();
  const std::string who = absl::StrCat("pod ", target.pod_namespace, "/", target.pod_name);
  if (const PodPlacement* placed = Find(key)) {
    if (placed->node == target.node) return error("");  // already bound there
    return error(absl::StrCat(who, " is already bound to node ", placed->node));
  }
  auto pending = pending_.find(key);
  if (pending == pending_.end()) {
    return error(absl::StrCat(who,
                              " was not seen by the extender's filter (restarted?); "
                              "it will be retried"));
  }
  const PodRequest pod = pending->second;
  const int node = NodeIndex(target.node);
  if (node < 0 && !pod.parts.empty()) {
    return error(absl::StrCat("node ", target.node, " is not among gpuslice's nodes"));
  }
  std::vector<place::Allocation> allocations;
  if (!pod.parts.empty()) {
    bool unresolvable = false;
    if (std::string why = WhyNot(pod, node, &unresolvable); !why.empty()) {
      return error(absl::StrCat(who, " does not fit on node ", target.node, ": ", why));
    }
    std::string why;
    std::optional<std::vector<place::Allocation>> claimed = Claim(pod, node, &why);
    if (!claimed) return error(absl::StrCat(who, " does not fit on node ", target.node, ": ", why));
    allocations = *std::move(claimed);
  }
  if (absl::Status status = binder(target); !status.ok()) {
    Unclaim(allocations);
    return error(absl::StrCat("binding ", who, " to node ", target.node, ": ",
                              std::string(status.message())));
  }
  for (const PodPart& part : pod.parts) policy_->Observe(part.request, true);
  PodPlacement placement;
  placement.key = key;
  placement.name = pod.name;
  placement.namespace_ = pod.namespace_;
  placement.node = target.node;
  placement.node_index = node;
  placement.allocations = std::move(allocations);
  placement.parts = pod.parts;
  bound_.emplace(key, std::move(placement));
  pending_.erase(key);
  return error("");
}

absl::Status Extender::Release(std::string_view key) {
  auto it = bound_.find(key);
  if (it == bound_.end()) {
    return absl::NotFoundError(absl::StrCat("pod ", std::string(key), " is not bound"));
  }
  Unclaim(it->second.allocations);
  bound_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<ResyncResult> Extender::Resync(const json& pod_list) {
  if (!pod_list.is_object() || !pod_list.contains("items") || !pod_list["items"].is_array()) {
    return absl::InvalidArgumentError("the pod list has no `items` array; nothing changed");
  }
  // The pods that hold their devices (bound to a node, not finished), under both keys a pod may
  // be filed by.
  std::set<std::string> running;
  std::vector<std::pair<PodRequest, std::string>> bound_elsewhere;  // (pod, node) to adopt
  for (const json& item : pod_list["items"]) {
    if (!item.is_object()) continue;
    const json metadata = item.value("metadata", json::object());
    const json status = item.value("status", json::object());
    const json spec = item.value("spec", json::object());
    // A field of another type reads as absent (json's value() would throw).
    const std::string phase = JsonString(status, "phase");
    if (phase == "Succeeded" || phase == "Failed") continue;  // devices given back by kubelet
    if (!metadata.is_object()) continue;
    const std::string uid = JsonString(metadata, "uid");
    const std::string by_name =
        absl::StrCat(JsonString(metadata, "namespace"), "/", JsonString(metadata, "name"));
    if (!uid.empty()) running.insert(uid);
    running.insert(by_name);
    const std::string node = JsonString(spec, "nodeName");
    if (node.empty()) continue;  // not bound yet: the scheduler will ask
    absl::StatusOr<PodRequest> pod = ParsePod(item, options_.units_per_gpu, options_.catalog);
    if (!pod.ok() || pod->parts.empty()) continue;
    if (bound_.contains(pod->key())) continue;
    bound_elsewhere.emplace_back(*std::move(pod), node);
  }
  ResyncResult result;
  for (const auto& [key, placement] : bound_) {
    if (!running.contains(key)) result.released.push_back(key);
  }
  for (const std::string& key : result.released) {
    if (absl::Status released = Release(key); !released.ok()) return released;
  }
  // Pods bound while the extender was away (restarted) or by another scheduler: their GPUs are
  // taken, so they are claimed where they run.
  for (const auto& [pod, node_name] : bound_elsewhere) {
    const int node = NodeIndex(node_name);
    if (node < 0) continue;  // not one of gpuslice's nodes
    std::string why;
    std::optional<std::vector<place::Allocation>> claimed = Claim(pod, node, &why);
    if (!claimed) {
      result.conflicts.push_back(
          absl::StrCat(pod.namespace_, "/", pod.name, " on ", node_name, ": ", why));
      continue;
    }
    PodPlacement placement;
    placement.key = pod.key();
    placement.name = pod.name;
    placement.namespace_ = pod.namespace_;
    placement.node = node_name;
    placement.node_index = node;
    placement.allocations = *std::move(claimed);
    placement.parts = pod.parts;
    bound_.emplace(pod.key(), std::move(placement));
    pending_.erase(pod.key());
    result.adopted.push_back(pod.key());
  }
  return result;
}

const PodPlacement* Extender::Find(std::string_view key) const {
  auto it = bound_.find(key);
  return it == bound_.end() ? nullptr : &it->second;
}

json Extender::State() const {
  json nodes = json::array();
  for (int node = 0; node < cluster_.node_count(); ++node) {
    const place::NodeSpec& spec = cluster_.spec(node);
    json gpus = json::array();
    for (int g = 0; g < spec.gpus; ++g) gpus.push_back(cluster_.FreeMilli(node, g));
    nodes.push_back({{"name", spec.name},
                     {"mode", std::string(place::ToString(spec.mode))},
                     {"model", spec.model},
                     {"gpu_free_milli", std::move(gpus)}});
  }
  json pods = json::array();
  for (const auto& [key, placement] : bound_) {
    json claims = json::array();
    const place::NodeSpec* spec =
        placement.node_index >= 0 ? &cluster_.spec(placement.node_index) : nullptr;
    for (size_t i = 0; i < placement.allocations.size(); ++i) {
      for (const place::GpuClaim& claim : placement.allocations[i].gpus) {
        json c = {{"resource", placement.parts[i].resource},
                  {"gpu", claim.gpu},
                  {"milli", claim.milli},
                  {"whole", claim.whole}};
        if (claim.mig_profile >= 0 && spec != nullptr) {
          c["mig_profile"] = cluster_.shape(placement.node_index)->profile(claim.mig_profile).name;
          c["mig_start"] = claim.mig_start;
        }
        if (placement.parts[i].kind == PartKind::kShare && spec != nullptr) {
          c["vram_mib"] = spec->gpu_memory_mib * claim.milli / place::kMilliPerGpu;
        }
        claims.push_back(std::move(c));
      }
    }
    pods.push_back({{"key", key},
                    {"pod", absl::StrCat(placement.namespace_, "/", placement.name)},
                    {"node", placement.node},
                    {"gpus", std::move(claims)}});
  }
  return {{"policy", std::string(policy_->name())},
          {"units_per_gpu", options_.units_per_gpu},
          {"nodes", std::move(nodes)},
          {"pods", std::move(pods)},
          {"pending", pending_.size()}};
}

}  // namespace gpuslice::k8s
