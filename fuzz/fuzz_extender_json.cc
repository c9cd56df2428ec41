// The Kubernetes scheduler extender's arguments (gpuslice/k8s/extender.h) on arbitrary bytes: up
// to six calls split at NUL bytes, on a fresh extender per input. Each call's first byte chooses
// the verb (filter, prioritize, bind with a binder that accepts or fails, resync, or, first only,
// a nodes file for ParseNodesYaml to build the extender from); the rest is its JSON (or YAML).
// Beside the sanitizers and no exception escaping: a filter answer without Error lists every
// candidate exactly once, as passing (a node of the extender) or failed with a reason, and binding
// the pod to the first node that passed then succeeds; prioritize scores every candidate, in
// order, from 0 to 10; a failed Binding changes no GPU; a resync's released pods are no longer
// bound; no GPU is ever claimed past its capacity.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "fuzz_util.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/k8s/extender.h"
#include "gpuslice/place/cluster.h"
#include "nlohmann/json.hpp"

namespace {

using gpuslice::fuzz::Check;
using gpuslice::fuzz::Node;

using gpuslice::k8s::Extender;
using nlohmann::json;

std::vector<gpuslice::place::NodeSpec> DefaultNodes() {
  using gpuslice::place::GpuMode;
  return {Node("whole-a", GpuMode::kWhole, 2, "A100-80GB", 46068),
          Node("share-a", GpuMode::kShared, 2, "L40S", 46068),
          Node("mig-a", GpuMode::kMig, 2, "A100-80GB", 46068),
          Node("mig-h", GpuMode::kMig, 1, "H100-80GB", 46068)};
}

// No GPU of the cluster is claimed past what it has.
void CheckCluster(const Extender& extender) {
  const gpuslice::place::Cluster& cluster = extender.cluster();
  for (int n = 0; n < cluster.node_count(); ++n) {
    for (const gpuslice::place::GpuState& gpu : cluster.gpus(n)) {
      Check(gpu.milli_free >= 0 && gpu.milli_free <= gpuslice::place::kMilliPerGpu);
      Check(gpu.holders >= 0);
      Check(cluster.FreeMilli(n, static_cast<int>(&gpu - cluster.gpus(n).data())) >= 0);
    }
  }
}

std::string Text(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

gpuslice::k8s::Binder Binder(bool accept) {
  return [accept](const gpuslice::k8s::BindingTarget&) {
    return accept ? absl::OkStatus() : absl::UnavailableError("the API server is away");
  };
}

void Filter(Extender& extender, const json& args) {
  const json reply = extender.Filter(args);
  Check(reply.is_object() && reply.contains("Error") && reply["Error"].is_string());
  if (!reply["Error"].get<std::string>().empty()) return;
  const json& failed = reply["FailedNodes"];
  const json& unresolvable = reply["FailedAndUnresolvableNodes"];
  Check(failed.is_object() && unresolvable.is_object());
  // The candidates, as the arguments name them (ReadCandidates accepted them).
  std::vector<std::string> candidates;
  std::set<std::string> passed;
  if (const auto names = args.find("NodeNames"); names != args.end() && !names->is_null()) {
    for (const json& name : *names) candidates.push_back(name.get<std::string>());
    Check(reply["NodeNames"].is_array());
    for (const json& name : reply["NodeNames"]) passed.insert(name.get<std::string>());
  } else if (const auto nodes = args.find("Nodes"); nodes != args.end() && !nodes->is_null()) {
    if (const auto items = nodes->find("items"); items != nodes->end() && !items->is_null()) {
      for (const json& item : *items) candidates.push_back(Text(item["metadata"], "name"));
    }
    Check(reply["Nodes"].is_object() && reply["Nodes"]["items"].is_array());
    for (const json& item : reply["Nodes"]["items"]) passed.insert(Text(item["metadata"], "name"));
  }
  absl::StatusOr<gpuslice::k8s::PodRequest> pod = gpuslice::k8s::ParsePod(args["Pod"]);
  for (const std::string& name : candidates) {
    const int verdicts = (passed.contains(name) ? 1 : 0) + (failed.contains(name) ? 1 : 0) +
                         (unresolvable.contains(name) ? 1 : 0);
    Check(verdicts == 1);
    // A pod without GPU resources passes everywhere; one with them only on the extender's nodes.
    if (passed.contains(name))
      Check(pod.ok() && (pod->parts.empty() || extender.NodeIndex(name) >= 0));
  }
  for (const json* reasons : {&failed, &unresolvable}) {
    for (const auto& [name, why] : reasons->items()) Check(why.is_string() && !why.empty());
  }
  // The pod fits the first node that passed: binding it there now succeeds.
  passed.erase("");  // Bind needs a node name
  if (passed.empty() || pod->name.empty()) return;
  if (extender.Find(pod->key()) != nullptr) return;  // bound before: Bind answers for that
  const std::string& node = *passed.begin();
  const json bound = extender.Bind(json{{"PodName", pod->name},
                                        {"PodNamespace", pod->namespace_},
                                        {"PodUID", pod->uid},
                                        {"Node", node}},
                                   Binder(true));
  Check(bound.is_object() && bound.value("Error", "?").empty());
  const gpuslice::k8s::PodPlacement* placed = extender.Find(pod->key());
  Check(placed != nullptr && placed->node == node);
}

void Prioritize(Extender& extender, const json& args) {
  absl::StatusOr<json> reply = extender.Prioritize(args);
  if (!reply.ok()) return;
  Check(reply->is_array());
  const json& names = args.contains("NodeNames") && args["NodeNames"].is_array() ? args["NodeNames"]
                                                                                 : json::array();
  if (!names.empty()) Check(reply->size() == names.size());
  for (std::size_t i = 0; i < reply->size(); ++i) {
    const json& entry = (*reply)[i];
    Check(entry["Host"].is_string() && entry["Score"].is_number_integer());
    if (!names.empty()) Check(entry["Host"] == names[i]);
    const int score = entry["Score"].get<int>();
    Check(score >= 0 && score <= gpuslice::k8s::kMaxExtenderScore);
  }
}

void Bind(Extender& extender, const json& args, bool accept) {
  const json before = extender.State();
  const json reply = extender.Bind(args, Binder(accept));
  Check(reply.is_object() && reply.contains("Error") && reply["Error"].is_string());
  if (!reply["Error"].get<std::string>().empty()) {
    Check(extender.State() == before);
    return;
  }
  gpuslice::k8s::PodRequest probe;
  probe.name = Text(args, "PodName");
  probe.uid = Text(args, "PodUID");
  probe.namespace_ = Text(args, "PodNamespace").empty() ? "default" : Text(args, "PodNamespace");
  const gpuslice::k8s::PodPlacement* placed = extender.Find(probe.key());
  if (placed != nullptr) Check(placed->node == Text(args, "Node"));
}

void Resync(Extender& extender, const json& args) {
  absl::StatusOr<gpuslice::k8s::ResyncResult> result = extender.Resync(args);
  if (!result.ok()) {
    Check(absl::IsInvalidArgument(result.status()));
    return;
  }
  for (const std::string& key : result->released) Check(extender.Find(key) == nullptr);
  for (const std::string& key : result->adopted) Check(extender.Find(key) != nullptr);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> calls;
  for (std::size_t at = 0; at < input.size() && calls.size() < 6;) {
    std::size_t end = input.find('\0', at);
    if (end == std::string_view::npos) end = input.size();
    if (end > at) calls.push_back(input.substr(at, end - at));
    at = end + 1;
  }
  if (calls.empty()) return 0;
  std::vector<gpuslice::place::NodeSpec> nodes = DefaultNodes();
  std::size_t first = 0;
  if (static_cast<std::uint8_t>(calls[0][0]) % 6 == 5) {
    absl::StatusOr<std::vector<gpuslice::place::NodeSpec>> parsed =
        gpuslice::k8s::ParseNodesYaml(calls[0].substr(1), "nodes.yaml");
    if (!parsed.ok()) {
      Check(parsed.status().message().rfind("nodes.yaml", 0) == 0);
      return 0;
    }
    int gpus = 0;
    for (const gpuslice::place::NodeSpec& node : *parsed) gpus += node.gpus;
    if (parsed->size() > 8 || gpus > 32) return 0;
    nodes = *std::move(parsed);
    first = 1;
  }
  absl::StatusOr<Extender> extender = Extender::Create(std::move(nodes));
  if (!extender.ok()) return 0;  // e.g. two nodes of one name in the file
  for (std::size_t i = first; i < calls.size(); ++i) {
    const json args = json::parse(calls[i].substr(1), nullptr, /*allow_exceptions=*/false);
    if (args.is_discarded()) continue;
    switch (static_cast<std::uint8_t>(calls[i][0]) % 6) {
      case 0:
        Filter(*extender, args);
        break;
      case 1:
        Prioritize(*extender, args);
        break;
      case 2:
      case 3:
        Bind(*extender, args, calls[i][0] % 6 == 2);
        break;
      case 4:
        Resync(*extender, args);
        break;
      default:
        break;
    }
    CheckCluster(*extender);
  }
  return 0;
}
