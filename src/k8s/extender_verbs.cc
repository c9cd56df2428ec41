// The scheduler extender's verbs on kube-scheduler's wire JSON (gpuslice/k8s/extender.h): Filter,
// Prioritize, Bind, Release, Resync with the API server's pod list, and State. The decisions they
// ask are in extender.cc, the parsing of pods in extender_parse.cc.
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "extender_internal.h"
#include "gpuslice/k8s/extender.h"

namespace gpuslice::k8s {

using internal::JsonString;
using nlohmann::json;

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
