// The acceptance property of the scheduler extender: on random clusters under random sequences of
// pods (whole GPUs, MIG instances, share units) and deletions, for every deterministic policy,
//   * Filter passes exactly the nodes the engine's cluster says the request fits on;
//   * Prioritize gives 10 to one node only, and that node is what place::Engine::Place picks on
//     the same cluster state; the policy scores agree and the 0..10 numbers keep their order;
//   * Bind claims exactly the GPUs (and MIG placements) the engine's allocation holds;
//   * releases keep both states equal.
// Resource names tie GPU modes (nvidia.com/gpu → whole nodes, MIG resources → MIG nodes, shares →
// shared nodes) where the engine places any request on any mode; on mixed clusters the engine's
// request therefore carries a model restriction naming the nodes of the matching mode (their
// labels encode the mode), which the policies' scores do not depend on.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "gpuslice/hw/catalog.h"
#include "gpuslice/k8s/devices.h"
#include "gpuslice/k8s/extender.h"
#include "gpuslice/place/engine.h"

namespace gpuslice::k8s {
namespace {

using nlohmann::json;

template <typename T>
T Full(rc::Gen<T> gen) {
  return *rc::gen::resize(rc::kNominalSize, std::move(gen));
}
int Int(int low, int high) { return Full(rc::gen::inRange(low, high + 1)); }

const char* const kWholeLabel = "W";
const char* const kSharedLabel = "S";
const std::vector<std::string>& MigModels() {
  static const std::vector<std::string> models = {"A100-80GB", "H100-80GB"};
  return models;
}

place::NodeSpec RandomNode(int index, place::GpuMode mode) {
  place::NodeSpec spec;
  spec.name = "node-" + std::to_string(index);
  spec.cpu_milli = 1000 * Int(0, 64);
  spec.memory_mib = 1024 * Int(0, 256);
  spec.gpus = Int(0, 4);
  spec.mode = mode;
  switch (mode) {
    case place::GpuMode::kWhole:
      spec.model = kWholeLabel;
      break;
    case place::GpuMode::kShared:
      spec.model = kSharedLabel;
      spec.gpu_memory_mib = Int(0, 1) == 0 ? 0 : 16000;
      break;
    case place::GpuMode::kMig:
      spec.model = MigModels()[static_cast<size_t>(Int(0, 1))];
      spec.hardware = hw::Catalog::Builtin().Find(spec.model);
      break;
  }
  return spec;
}

// One pod: a resource and its amount.
struct PodAsk {
  std::string resource;
  int amount = 0;
};

PodAsk RandomAsk(place::GpuMode mode, int units_per_gpu) {
  switch (mode) {
    case place::GpuMode::kWhole:
      return {std::string(kWholeGpuResource), Int(1, 5)};
    case place::GpuMode::kShared:
      return {std::string(kShareResource), Int(1, units_per_gpu)};
    case place::GpuMode::kMig: {
      const hw::GpuModel* model =
          hw::Catalog::Builtin().Find(MigModels()[static_cast<size_t>(Int(0, 1))]);
      const std::vector<hw::GiProfile>& profiles = model->mig->profiles;
      const hw::GiProfile& profile =
          profiles[static_cast<size_t>(Int(0, static_cast<int>(profiles.size()) - 1))];
      return {MigResourceName(profile.name), 1};
    }
  }
  return {};
}

place::GpuMode ModeOf(const std::string& resource) {
  if (resource == kWholeGpuResource) return place::GpuMode::kWhole;
  if (resource == kShareResource) return place::GpuMode::kShared;
  return place::GpuMode::kMig;
}

json PodJson(const std::string& name, const PodAsk& ask) {
  // Quantities as Kubernetes serialises them (strings) or as plain integers.
  const json amount = ask.amount % 2 == 0 ? json(std::to_string(ask.amount)) : json(ask.amount);
  return {{"metadata", {{"name", name}, {"namespace", "default"}, {"uid", "uid-" + name}}},
          {"spec",
           {{"containers",
             {{{"name", "main"},
               {"resources",
                {{"requests", {{"cpu", "1"}, {ask.resource, amount}}},
                 {"limits", {{ask.resource, amount}}}}}}}}}},
          {"status", json::object()}};
}

bool SameClaims(const std::vector<place::GpuClaim>& a, const std::vector<place::GpuClaim>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].gpu != b[i].gpu || a[i].milli != b[i].milli || a[i].vram_mib != b[i].vram_mib ||
        a[i].mig_profile != b[i].mig_profile || a[i].mig_start != b[i].mig_start ||
        a[i].whole != b[i].whole) {
      return false;
    }
  }
  return true;
}

RC_GTEST_PROP(ExtenderProperty, ChoiceEqualsEnginePlaceOnTheSameState, ()) {
  static const std::vector<std::string> kPolicies = {"dotprod", "gpuclustering", "gpupacking",
                                                     "bestfit", "fgd",           "gpuslice"};
  const std::string policy = kPolicies[static_cast<size_t>(Int(0, 5))];
  // gpuslice without typical requests learns from the stream: the extender learns from bound
  // pods only, the engine from every decision, so the run stops at the first rejection.
  const bool learning = policy == "gpuslice" && Int(0, 1) == 0;
  const bool mixed = !learning && Int(0, 1) == 0;
  static const std::vector<int> kUnits = {100, 10, 3, 7, 1000};
  const int units_per_gpu = kUnits[static_cast<size_t>(Int(0, 4))];
  const place::GpuMode single = static_cast<place::GpuMode>(Int(0, 2));

  std::vector<place::NodeSpec> nodes;
  const int node_count = Int(1, 7);
  for (int i = 0; i < node_count; ++i) {
    nodes.push_back(RandomNode(i, mixed ? static_cast<place::GpuMode>(Int(0, 2)) : single));
  }
  // The sequence: pods (with their mode) and deletions of a random bound pod.
  struct Step {
    bool release = false;
    PodAsk ask;
  };
  std::vector<Step> steps;
  const int step_count = Int(1, 40);
  for (int i = 0; i < step_count; ++i) {
    Step step;
    step.release = Int(0, 3) == 0;
    step.ask = RandomAsk(mixed ? static_cast<place::GpuMode>(Int(0, 2)) : single, units_per_gpu);
    steps.push_back(step);
  }
  // The requests as the extender builds them, for the typical mix of fgd / gpuslice.
  std::vector<place::Request> requests;
  for (size_t i = 0; i < steps.size(); ++i) {
    absl::StatusOr<PodRequest> pod =
        ParsePod(PodJson("p" + std::to_string(i), steps[i].ask), units_per_gpu);
    RC_ASSERT(pod.ok());
    RC_ASSERT(pod->parts.size() == 1u);
    requests.push_back(pod->parts[0].request);
  }
  place::PolicyOptions policy_options;
  if (!learning) policy_options.typical = place::TypicalRequests(requests);

  ExtenderOptions options;
  options.policy = policy;
  options.policy_options = policy_options;
  options.units_per_gpu = units_per_gpu;
  absl::StatusOr<Extender> extender = Extender::Create(nodes, options);
  RC_ASSERT(extender.ok());
  absl::StatusOr<place::Cluster> cluster = place::Cluster::Create(nodes);
  RC_ASSERT(cluster.ok());
  absl::StatusOr<std::unique_ptr<place::Policy>> engine_policy =
      place::MakePolicy(policy, policy_options);
  RC_ASSERT(engine_policy.ok());
  place::Engine engine(*std::move(cluster), *std::move(engine_policy));

  std::vector<std::string> names;
  for (const place::NodeSpec& spec : nodes) names.push_back(spec.name);
  std::map<std::string, place::Allocation> live;  // pod key → the engine's allocation
  const Binder accept = [](const BindingTarget&) { return absl::OkStatus(); };

  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].release) {
      if (live.empty()) continue;
      auto it = live.begin();
      std::advance(it, Int(0, static_cast<int>(live.size()) - 1));
      RC_ASSERT(extender->Release(it->first).ok());
      RC_ASSERT(engine.Release(it->second).ok());
      live.erase(it);
      continue;
    }
    const std::string name = "p" + std::to_string(i);
    const json pod = PodJson(name, steps[i].ask);
    place::Request request = requests[i];
    if (mixed) {
      switch (ModeOf(steps[i].ask.resource)) {
        case place::GpuMode::kWhole:
          request.models = {kWholeLabel};
          break;
        case place::GpuMode::kShared:
          request.models = {kSharedLabel};
          break;
        case place::GpuMode::kMig:
          request.models = MigModels();
          break;
      }
    }
    std::vector<std::string> candidates = names;
    // kube-scheduler's order is its own; the extender's choice must not depend on it.
    for (size_t k = candidates.size(); k > 1; --k) {
      std::swap(candidates[k - 1],
                candidates[static_cast<size_t>(Int(0, static_cast<int>(k) - 1))]);
    }
    const json args = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", candidates}};

    // Filter: exactly the nodes the engine's cluster fits.
    const json filtered = extender->Filter(args);
    RC_ASSERT(filtered["Error"] == "");
    std::vector<std::string> passed = filtered["NodeNames"].get<std::vector<std::string>>();
    std::vector<std::string> fits;
    for (const std::string& candidate : candidates) {
      const int node = extender->NodeIndex(candidate);
      if (engine.cluster().Fits(node, request)) fits.push_back(candidate);
      // The policies agree on every feasible node.
      if (engine.cluster().Fits(node, request)) {
        absl::StatusOr<PodRequest> parsed = ParsePod(pod, units_per_gpu);
        RC_ASSERT(extender->ScoreNode(*parsed, node) ==
                  engine.policy().ScoreNode(engine.cluster(), node, request));
      }
    }
    RC_ASSERT(passed == fits);
    RC_ASSERT(filtered["FailedNodes"].size() + filtered["FailedAndUnresolvableNodes"].size() +
                  passed.size() ==
              candidates.size());

    // Prioritize over the survivors: one 10, order kept.
    const json survivors = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", passed}};
    absl::StatusOr<json> scores = extender->Prioritize(survivors);
    RC_ASSERT(scores.ok());
    RC_ASSERT(scores->size() == passed.size());
    std::string chosen;
    int tens = 0;
    for (const json& host : *scores) {
      const int score = host["Score"].get<int>();
      RC_ASSERT(score >= 0 && score <= 10);
      if (score == 10) {
        ++tens;
        chosen = host["Host"].get<std::string>();
      }
    }
    for (const json& a : *scores) {
      for (const json& b : *scores) {
        const int na = extender->NodeIndex(a["Host"].get<std::string>());
        const int nb = extender->NodeIndex(b["Host"].get<std::string>());
        if (engine.policy().ScoreNode(engine.cluster(), na, request) >
            engine.policy().ScoreNode(engine.cluster(), nb, request)) {
          RC_ASSERT(a["Score"].get<int>() >= b["Score"].get<int>());
        }
      }
    }

    absl::StatusOr<place::Allocation> placed = engine.Place(request);
    if (!placed.ok()) {
      RC_ASSERT(passed.empty());
      RC_ASSERT(tens == 0);
      if (learning) break;  // the engine's policy observed a rejection the extender did not
      continue;
    }
    RC_ASSERT(tens == 1);
    RC_ASSERT(chosen == engine.cluster().spec(placed->node).name);

    // Bind: the same GPUs as the engine.
    const json bound = extender->Bind({{"PodName", name},
                                       {"PodNamespace", "default"},
                                       {"PodUID", "uid-" + name},
                                       {"Node", chosen}},
                                      accept);
    RC_ASSERT(bound["Error"] == "");
    const PodPlacement* placement = extender->Find("uid-" + name);
    RC_ASSERT(placement != nullptr);
    RC_ASSERT(placement->allocations.size() == 1u);
    RC_ASSERT(SameClaims(placement->allocations[0].gpus, placed->gpus));
    live.emplace("uid-" + name, *placed);
  }
  // Same state at the end, GPU by GPU.
  for (int node = 0; node < engine.cluster().node_count(); ++node) {
    RC_ASSERT(extender->cluster().pods(node) == engine.cluster().pods(node));
    for (int g = 0; g < engine.cluster().spec(node).gpus; ++g) {
      RC_ASSERT(extender->cluster().FreeMilli(node, g) == engine.cluster().FreeMilli(node, g));
      const place::GpuState& a = extender->cluster().gpus(node)[static_cast<size_t>(g)];
      const place::GpuState& b = engine.cluster().gpus(node)[static_cast<size_t>(g)];
      RC_ASSERT(a.occupancy.used == b.occupancy.used);
      RC_ASSERT(a.occupancy.instances == b.occupancy.instances);
      RC_ASSERT(a.holders == b.holders);
      RC_ASSERT(a.taken_whole == b.taken_whole);
    }
  }
}

}  // namespace
}  // namespace gpuslice::k8s
