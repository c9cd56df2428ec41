// The scheduler extender's decisions over the placement engine (gpuslice/k8s/extender.h): its
// cluster and policy, why a pod does not fit a node, claiming and scoring a pod's parts, the pods
// filed by Filter until Bind. The verbs' wire JSON is in extender_verbs.cc, parsing in
// extender_parse.cc.
#include "gpuslice/k8s/extender.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpuslice/k8s/devices.h"

namespace gpuslice::k8s {

namespace {

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

const PodPlacement* Extender::Find(std::string_view key) const {
  auto it = bound_.find(key);
  return it == bound_.end() ? nullptr : &it->second;
}

}  // namespace gpuslice::k8s
