// gpuslice/k8s/extender.h: the Kubernetes scheduler extender's decisions, backed by the placement
// engine's cluster state and policies (gpuslice/place/).
//
// kube-scheduler calls the extender over HTTP/JSON (../shared/reference/kubernetes-apis.md §3;
// the server is src/k8s/extender_server.h). This file is the pure part: JSON in, JSON out, no I/O,
// deterministic (same calls in the same order, same answers).
//
// What a pod asks for (ParsePod). Only the device-plugin resources of gpuslice/k8s/devices.h count:
//   * `nvidia.com/gpu: n`            → n whole GPUs on one node (a Request with num_gpu = n);
//   * `nvidia.com/mig-<profile>: n`  → n MIG instances of that profile, each its own Request
//                                      (num_gpu 1, mig_profile = the catalog's name: the
//                                      resource's '.' goes back to '+' where the catalog has one);
//   * `gpuslice.io/gpu-share: u`     → per container, a share of ONE GPU: gpu_milli =
//                                      ceil(u · 1000 / units_per_gpu), vram_mib = 0. A unit is
//                                      1/units_per_gpu of the compute time AND of the VRAM, so the
//                                      compute share accounts both; VRAM in MiB would need a
//                                      per-node request (GPU memories differ) and only add
//                                      rounding loss. The VRAM cap the pod gets on a node is
//                                      gpu_milli/1000 of that GPU's memory (PodPlacement).
//                                      When units_per_gpu does not divide 1000, rounding up loses
//                                      a little capacity but never overcommits.
// Per resource, a container's amount is requests[r], else limits[r] (extended resources cannot be
// overcommitted, so Kubernetes requires both equal when both are set). Whole GPUs and MIG
// instances follow Kubernetes' pod rule: max(sum over app containers, max over init containers)
// (init containers' devices are reused by the app containers). A pod's parts are placed together
// on one node. CPU and memory are NOT asked of the engine: kube-scheduler checks them itself, and
// the extender only sees the pods with GPU resources, so its CPU/memory view would be wrong.
// Errors (the pod then fails on every node as unresolvable, with the message): a quantity that is
// not a whole number, requests ≠ limits, two different MIG profiles in one container, a MIG
// profile no catalog model has, more share units in one container than one GPU has, init
// containers asking more share units than the app containers together.
// A pod with no gpuslice/nvidia resources has no parts: every node passes, every node scores 0,
// Bind only posts the Binding (with `managedResources` set, kube-scheduler does not send such
// pods at all).
//
// GPU modes match resource names, as the device plugin offers them: `nvidia.com/gpu` only on
// nodes in GpuMode::kWhole, MIG resources only on kMig nodes, shares only on kShared nodes.
//
// The state: the extender's own Cluster, built from the nodes it is given, with nothing allocated;
// it changes through Bind (a pod's GPUs are claimed), Release (the pod is gone) and Resync with the
// API server's pod list (`gpuslice extender` lists the pods every --resync-seconds: pods gone or
// finished are released, pods bound without the extender are claimed where they run).
//
// The verbs (every reply uses the PascalCase keys kube-scheduler sends and reads):
//   * Filter(ExtenderArgs) → ExtenderFilterResult. Candidates come from `NodeNames` (then the reply
//     carries `NodeNames`) or else `Nodes.items[].metadata.name` (the reply carries `Nodes` with
//     the passing items, unchanged). A node passes when every part of the pod fits now, placed in
//     order with the policy's GPU choice; otherwise it is in `FailedNodes` with the reason, or in
//     `FailedAndUnresolvableNodes` when it could never hold the pod (not in the extender's nodes,
//     GPUs in another mode, too few GPUs, model without the MIG profile) or the pod cannot be
//     expressed. Malformed arguments → `Error`.
//   * Prioritize(ExtenderArgs) → HostPriorityList over the candidates, in their order. The score
//     of a node is the policy's ScoreNode (summed over the pod's parts, each scored after the
//     earlier ones are placed); nodes that do not fit get 0. The node the engine would choose
//     (best score, ties to the lowest node index) alone gets 10; the others get 0..9, order kept
//     (a higher policy score never gets a lower number). So for a one-part pod, the filtered node
//     with the unique top score is exactly what place::Engine::Place picks on the same state.
//     Malformed arguments → InvalidArgument (the server answers a non-200, which kube-scheduler
//     ignores for prioritize).
//   * Bind(ExtenderBindingArgs, binder) → ExtenderBindingResult. The pod's parts must have been
//     seen by Filter or Prioritize (Bind's arguments do not carry the pod); each part's GPUs are
//     chosen with the policy (ChooseGpus) and claimed on the named node; then `binder` posts the
//     Binding. If it fails, the claims are released and `Error` says why. A pod already bound to
//     that node gets success again without a second post; to another node, an error.
// Pods are keyed by metadata.uid (PodUID in Bind), or "namespace/name" when the UID is empty.
//
// The policy learns (Policy::Observe) once per part of each newly bound pod, never on filter calls
// (kube-scheduler retries those). The "random" policy is refused: kube-scheduler already breaks
// ties at random.
//
// Not thread-safe: the server serialises calls.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/place/policy.h"
#include "nlohmann/json.hpp"

namespace gpuslice::k8s {

inline constexpr int kDefaultUnitsPerGpu = 100;
inline constexpr int kMaxExtenderScore = 10;

// A Kubernetes quantity of an extended resource: a JSON integer or a string of decimal digits
// ("2"); anything else (fractions, "1k", negative) is InvalidArgument.
absl::StatusOr<std::int64_t> ParseQuantity(const nlohmann::json& quantity);

enum class PartKind : std::uint8_t { kWhole, kMig, kShare };

// One placeable piece of a pod's GPU request.
struct PodPart {
  PartKind kind = PartKind::kWhole;
  std::string resource;    // the resource name it came from
  std::int64_t count = 0;  // GPUs (whole), 1 (MIG) or share units
  place::Request request;  // what the engine is asked (CPU and memory 0)
};

struct PodRequest {
  std::string uid;  // metadata.uid
  std::string name;
  std::string namespace_;
  std::vector<PodPart> parts;  // empty: no GPU resource asked
  // The key the extender files the pod under: uid, or "namespace/name" when the uid is empty.
  std::string key() const;
};

// Parses a v1.Pod (JSON). InvalidArgument when the pod is not an object or asks for something the
// engine cannot express (see the header comment); the message says what and where. `catalog`
// names MIG profiles (null = the built-in catalog).
absl::StatusOr<PodRequest> ParsePod(const nlohmann::json& pod, int units_per_gpu = 100,
                                    const hw::Catalog* catalog = nullptr);

// The extender's nodes file (YAML), pure: the text and the name it came from for errors:
//   nodes:
//   - name: node-a          # the Kubernetes node name
//     gpus: 8
//     mode: mig             # whole | shared | mig
//     model: A100-80GB      # a catalog model (REQUIRED for mig; else any label)
//     layouts: ["3g.40gb,2g.20gb,1g.10gb,1g.10gb"]  # mig only, optional: the fixed MIG layout of
//                           # every GPU (one entry) or of each GPU (one per GPU), in the layout
//                           # text of `gpuslice check`; then only those instances are handed out.
//                           # Without it a MIG GPU is partitioned on demand.
//     gpu_memory_mib: 81920 # optional; default the catalog model's memory, else 0
//     cpu_milli: 96000      # optional, default 1000000 (not used for decisions)
//     memory_mib: 786432    # optional, default 1 << 30 MiB (not used for decisions)
// Errors name the file, line and field.
absl::StatusOr<std::vector<place::NodeSpec>> ParseNodesYaml(std::string_view text,
                                                            std::string_view origin,
                                                            const hw::Catalog* catalog = nullptr);

// What Bind asks the API server to do.
struct BindingTarget {
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;
  std::string node;
};
// Posts the Binding; an error leaves the pod unbound.
using Binder = std::function<absl::Status(const BindingTarget&)>;

// What a bound pod holds.
struct PodPlacement {
  std::string key;
  std::string name;
  std::string namespace_;
  std::string node;
  int node_index = -1;
  std::vector<place::Allocation> allocations;  // one per part, in the pod's part order
  std::vector<PodPart> parts;
};

// What Extender::Resync changed (pod keys; conflicts with the reason).
struct ResyncResult {
  std::vector<std::string> released;
  std::vector<std::string> adopted;
  std::vector<std::string> conflicts;
};

struct ExtenderOptions {
  std::string policy = "gpuslice";
  place::PolicyOptions policy_options;
  int units_per_gpu = kDefaultUnitsPerGpu;  // gpuslice.io/gpu-share units per GPU, 2..1000
  const hw::Catalog* catalog = nullptr;     // null = built-in
  // Pods seen by Filter/Prioritize and not yet bound are remembered for Bind, oldest forgotten
  // first beyond this many.
  std::size_t max_pending = 10000;
};

class Extender {
 public:
  // Fails on a bad cluster (place::Cluster::Create), an unknown or random policy, or units out of
  // range.
  static absl::StatusOr<Extender> Create(std::vector<place::NodeSpec> nodes,
                                         ExtenderOptions options = {});

  nlohmann::json Filter(const nlohmann::json& args);
  absl::StatusOr<nlohmann::json> Prioritize(const nlohmann::json& args);
  nlohmann::json Bind(const nlohmann::json& args, const Binder& binder);
  // Releases a bound pod's GPUs (the pod was deleted or finished). NotFound if it is not bound.
  absl::Status Release(std::string_view key);
  // Brings the state in line with the API server's pod list (a v1.PodList: `items[]` with
  // metadata, spec.nodeName, the containers' resources and status.phase): releases every bound
  // pod the list no longer has, or has as Succeeded or Failed (kubelet has given their devices
  // back); and claims the GPUs of pods bound to one of its nodes that it does not know (bound
  // while it was restarting, or by another scheduler), with the policy's GPU choice, listing
  // those that no longer fit as conflicts. InvalidArgument, and nothing changed, when the list has
  // no `items` array.
  absl::StatusOr<ResyncResult> Resync(const nlohmann::json& pod_list);
  // The bound pod, or null.
  const PodPlacement* Find(std::string_view key) const;
  // Nodes with their GPUs' free capacity and the bound pods, for debugging.
  nlohmann::json State() const;

  const place::Cluster& cluster() const { return cluster_; }
  const place::Policy& policy() const { return *policy_; }
  int units_per_gpu() const { return options_.units_per_gpu; }
  // Node index by name; -1 if unknown.
  int NodeIndex(std::string_view name) const;

  // The typed core of the verbs. Why the pod does not fit on `node` now ("" = it fits);
  // *unresolvable set when it never could.
  std::string WhyNot(const PodRequest& pod, int node, bool* unresolvable);
  // The node's policy score for the pod. REQUIRES: WhyNot(pod, node) == "".
  place::Score ScoreNode(const PodRequest& pod, int node);
  // The 0..10 extender scores of `nodes` (indices; -1 = unknown) for the pod, in that order.
  std::vector<int> ExtenderScores(const PodRequest& pod, const std::vector<int>& nodes);

 private:
  Extender(place::Cluster cluster, std::unique_ptr<place::Policy> policy, ExtenderOptions options);
  // Places the parts in order on the node (the policy's GPU choice); nullopt + *why on failure,
  // with nothing changed.
  std::optional<std::vector<place::Allocation>> Claim(const PodRequest& pod, int node,
                                                      std::string* why);
  void Unclaim(const std::vector<place::Allocation>& allocations);
  std::string Unresolvable(const PodPart& part, int node) const;
  void Remember(const PodRequest& pod);

  place::Cluster cluster_;
  std::unique_ptr<place::Policy> policy_;
  ExtenderOptions options_;
  std::map<std::string, int, std::less<>> index_;
  std::map<std::string, PodPlacement, std::less<>> bound_;
  std::map<std::string, PodRequest, std::less<>> pending_;
  std::deque<std::string> pending_order_;
  std::uint64_t next_id_ = 1;
};

}  // namespace gpuslice::k8s
