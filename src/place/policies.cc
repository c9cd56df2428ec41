// The placement policies (gpuslice/place/policy.h). Baselines and FGD follow
// ../shared/reference/fgd-protocol.md §3.5 and §4 to the integer.
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fragmentation.h"
#include "gpuslice/place/policy.h"
#include "waste.h"

namespace gpuslice::place {
namespace {

constexpr std::int64_t kMaxSpecCpu = 128000;
constexpr std::int64_t kMaxSpecGpu = 8000;

std::int64_t NodeGpuFree(const Cluster& cluster, int node) {
  std::int64_t free = 0;
  for (int g = 0; g < cluster.spec(node).gpus; ++g) free += cluster.FreeMilli(node, g);
  return free;
}

// GPU milli the request takes on `node` (a MIG profile: its share of the compute slices).
std::int64_t GpuDemand(const Cluster& cluster, int node, const Request& request) {
  if (request.mig()) {
    const int profile = cluster.MigProfileFor(node, request);
    return profile < 0 ? 0 : cluster.MigMilli(node, profile);
  }
  return static_cast<std::int64_t>(request.milli()) * request.num_gpu;
}

// The `count` lowest-index completely free GPUs.
std::vector<GpuClaim> LowestFreeGpus(const Cluster& cluster, int node, int count) {
  std::vector<GpuClaim> claims;
  for (int g = 0; g < cluster.spec(node).gpus && static_cast<int>(claims.size()) < count; ++g) {
    if (cluster.GpuFullyFree(node, g)) claims.push_back(Cluster::WholeClaim(g));
  }
  return claims;
}

// 100 · sigmoid(x / 1000), truncated (FGD's score of a fragmentation decrease x).
std::int64_t FgdPoints(double decrease) {
  return static_cast<std::int64_t>(100.0 / (1.0 + std::exp(-decrease / 1000.0)));
}

class RandomPolicy final : public Policy {
 public:
  explicit RandomPolicy(std::uint64_t seed) : rng_(seed) {}
  std::string_view name() const override { return "random"; }
  Score ScoreNode(const Cluster&, int, const Request&) const override { return {}; }
  bool picks_uniformly() const override { return true; }
  int Pick(int feasible_nodes) override {
    return std::uniform_int_distribution<int>(0, feasible_nodes - 1)(rng_);
  }
  std::vector<GpuClaim> ChooseGpus(const Cluster& cluster, int node,
                                   const Request& request) override {
    if (request.whole()) return LowestFreeGpus(cluster, node, request.num_gpu);
    std::vector<int> fitting;
    for (int g = 0; g < cluster.spec(node).gpus; ++g) {
      if (cluster.ShareFitsGpu(node, g, request)) fitting.push_back(g);
    }
    if (fitting.empty()) return {};
    const int pick = fitting[static_cast<size_t>(
        std::uniform_int_distribution<int>(0, static_cast<int>(fitting.size()) - 1)(rng_))];
    return {*cluster.ShareClaim(node, pick, request)};
  }

 private:
  std::mt19937_64 rng_;
};

class DotProductPolicy final : public Policy {
 public:
  std::string_view name() const override { return "dotprod"; }
  Score ScoreNode(const Cluster& cluster, int node, const Request& request) const override {
    const double node_cpu = static_cast<double>(cluster.cpu_free(node)) / kMaxSpecCpu;
    const double node_gpu = static_cast<double>(NodeGpuFree(cluster, node)) / kMaxSpecGpu;
    const double pod_cpu = static_cast<double>(request.cpu_milli) / kMaxSpecCpu;
    const double pod_gpu = static_cast<double>(GpuDemand(cluster, node, request)) / kMaxSpecGpu;
    const double d = (node_cpu * pod_cpu + node_gpu * pod_gpu) / 2;
    return {static_cast<std::int64_t>(100 * (1 - d)), 0};
  }
};

class GpuClusteringPolicy final : public Policy {
 public:
  std::string_view name() const override { return "gpuclustering"; }
  Score ScoreNode(const Cluster& cluster, int node, const Request& request) const override {
    if (request.cpu_only()) return {};
    const std::int64_t base = 25 * (kMaxSpecGpu - NodeGpuFree(cluster, node)) / kMaxSpecGpu;
    const int tag = request.whole() ? request.num_gpu : 0;
    bool same = false;
    bool other = false;
    for (const auto& [node_tag, count] : cluster.gpu_request_tags(node)) {
      (node_tag == tag ? same : other) = true;
    }
    if (same && !other) return {base + 75, 0};
    if (same) return {base + 50, 0};
    if (!other) return {base + 25, 0};
    return {base, 0};
  }
};

class GpuPackingPolicy final : public Policy {
 public:
  std::string_view name() const override { return "gpupacking"; }
  Score ScoreNode(const Cluster& cluster, int node, const Request& request) const override {
    if (request.cpu_only()) return {};
    const int gpus = cluster.spec(node).gpus;
    int fully_free = 0;
    std::vector<std::pair<int, int>> by_free;  // (free milli, index)
    for (int g = 0; g < gpus; ++g) {
      fully_free += cluster.GpuFullyFree(node, g) ? 1 : 0;
      by_free.emplace_back(cluster.FreeMilli(node, g), g);
    }
    if (fully_free == gpus) return {std::max(33 - fully_free, fully_free), 0};
    std::stable_sort(by_free.begin(), by_free.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    int taken = 0;
    int taken_fully_free = 0;
    std::int64_t free_points = 0;
    for (const auto& [free, g] : by_free) {
      if (taken == request.num_gpu) break;
      const bool fits =
          request.whole() ? cluster.GpuFullyFree(node, g) : cluster.ShareFitsGpu(node, g, request);
      if (!fits) continue;
      taken += 1;
      taken_fully_free += cluster.GpuFullyFree(node, g) ? 1 : 0;
      free_points += free * 100 / kMilliPerGpu;
    }
    if (taken_fully_free > 0) return {std::max(50 - taken_fully_free, 33), 0};
    return {std::max<std::int64_t>(100 - free_points / 10, 50), 0};
  }
};

class BestFitPolicy final : public Policy {
 public:
  std::string_view name() const override { return "bestfit"; }
  Score ScoreNode(const Cluster& cluster, int node, const Request& request) const override {
    const double s =
        0.5 * static_cast<double>(cluster.cpu_free(node) - request.cpu_milli) / kMaxSpecCpu +
        0.5 * static_cast<double>(NodeGpuFree(cluster, node) - GpuDemand(cluster, node, request)) /
            kMaxSpecGpu;
    return {static_cast<std::int64_t>((1 - s) * 100), 0};
  }
};

// Every way of placing `request` on `node` that the fragmentation-aware policies compare: for
// whole GPUs the lowest-index free ones; for a share each fitting GPU, skipping shared GPUs whose
// free capacity equals one already offered (they would score the same).
template <typename Visit>
void ForEachCandidate(const Cluster& cluster, int node, const Request& request, Visit&& visit) {
  if (!request.share()) {
    visit(LowestFreeGpus(cluster, node, request.num_gpu));
    return;
  }
  const bool shared = cluster.spec(node).mode == GpuMode::kShared;
  std::vector<int> seen_free;
  for (int g = 0; g < cluster.spec(node).gpus; ++g) {
    std::optional<GpuClaim> claim = cluster.ShareClaim(node, g, request);
    if (!claim) continue;
    if (shared) {
      const int free = cluster.FreeMilli(node, g);
      if (std::find(seen_free.begin(), seen_free.end(), free) != seen_free.end()) continue;
      seen_free.push_back(free);
    }
    visit(std::vector<GpuClaim>{*claim});
  }
}

// FGD's fragmentation after placing `claims` on `node`.
double FragmentationAfter(const Cluster& cluster, int node, const Request& request,
                          const std::vector<GpuClaim>& claims,
                          const internal::Fragmentation& frag) {
  absl::InlinedVector<internal::GpuAfter, 8> afters;
  for (const GpuClaim& claim : claims) {
    afters.push_back(internal::Fragmentation::Apply(cluster, node, claim));
  }
  return frag.After(cluster, node, request.cpu_milli, afters);
}

class FgdPolicy final : public Policy {
 public:
  explicit FgdPolicy(std::vector<TypicalRequest> typical) { frag_.SetTypical(std::move(typical)); }
  std::string_view name() const override { return "fgd"; }
  Score ScoreNode(const Cluster& cluster, int node, const Request& request) const override {
    std::vector<GpuClaim> unused;
    return {Best(cluster, node, request, &unused), 0};
  }
  std::vector<GpuClaim> ChooseGpus(const Cluster& cluster, int node,
                                   const Request& request) override {
    std::vector<GpuClaim> claims;
    Best(cluster, node, request, &claims);
    return claims;
  }

 private:
  std::int64_t Best(const Cluster& cluster, int node, const Request& request,
                    std::vector<GpuClaim>* claims) const {
    const double before = frag_.Of(cluster, node).total;
    std::int64_t best = -1;
    ForEachCandidate(cluster, node, request, [&](const std::vector<GpuClaim>& candidate) {
      const double after = FragmentationAfter(cluster, node, request, candidate, frag_);
      const std::int64_t points = FgdPoints(before - after);
      if (points > best) {
        best = points;
        *claims = candidate;
      }
    });
    return best;
  }
  internal::Fragmentation frag_;
};

// gpuslice's policy (docs/PLACEMENT.md): the node and GPU that add the least expected waste
// (waste.h), compared in steps of kWasteStep milli so that near-equal choices fall to the node
// rank and nodes fill in a steady order; learns the request mix from the stream when no typical
// requests are given.
class GpuslicePolicy final : public Policy {
 public:
  static constexpr double kWasteStep = 100;
  static constexpr size_t kWindow = 20000;  // requests the learned mix is estimated from
  static constexpr size_t kFirstEstimate = 16;

  explicit GpuslicePolicy(std::vector<TypicalRequest> typical) : learning_(typical.empty()) {
    waste_.Build(typical);
  }
  std::string_view name() const override { return "gpuslice"; }
  std::uint64_t epoch() const override { return epoch_; }

  void Observe(const Request& request, bool placed) override {
    (void)placed;
    if (!learning_) return;
    window_.push_back(request);
    if (window_.size() > kWindow) window_.pop_front();
    if (++observed_ == next_estimate_) {
      const std::vector<Request> recent(window_.begin(), window_.end());
      waste_.Build(TypicalRequests(recent));
      next_estimate_ *= 2;
      ++epoch_;
    }
  }

  Score ScoreNode(const Cluster& cluster, int node, const Request& request) const override {
    std::vector<GpuClaim> unused;
    return {Best(cluster, node, request, &unused), 0};
  }
  std::vector<GpuClaim> ChooseGpus(const Cluster& cluster, int node,
                                   const Request& request) override {
    std::vector<GpuClaim> claims;
    Best(cluster, node, request, &claims);
    return claims;
  }

 private:
  // Expected waste of the node's GPUs, with `claims` applied and `cpu` milli-CPU taken.
  double NodeWaste(const Cluster& cluster, int node, std::int64_t cpu,
                   const std::vector<GpuClaim>& claims) const {
    const std::int64_t cpu_free = cluster.cpu_free(node) - cpu;
    const NodeSpec& spec = cluster.spec(node);
    double waste = 0;
    for (int g = 0; g < spec.gpus; ++g) {
      const GpuClaim* claim = nullptr;
      for (const GpuClaim& c : claims) {
        if (c.gpu == g) claim = &c;
      }
      const GpuState& state = cluster.gpus(node)[static_cast<size_t>(g)];
      if (state.taken_whole || (claim != nullptr && claim->whole)) continue;
      switch (spec.mode) {
        case GpuMode::kShared:
          waste += waste_.Shared(state.milli_free - (claim ? claim->milli : 0), cpu_free);
          break;
        case GpuMode::kWhole:
          waste += waste_.Whole(cluster.GpuFullyFree(node, g), cpu_free);
          break;
        case GpuMode::kMig: {
          geometry::Occupancy occupancy = state.occupancy;
          if (claim != nullptr) {
            cluster.shape(node)->Add(occupancy, claim->mig_profile, claim->mig_start);
          }
          waste += waste_.Mig(*cluster.shape(node), occupancy, cpu_free);
          break;
        }
      }
    }
    return waste;
  }

  std::int64_t Best(const Cluster& cluster, int node, const Request& request,
                    std::vector<GpuClaim>* claims) const {
    const double before = NodeWaste(cluster, node, 0, {});
    std::int64_t best = std::numeric_limits<std::int64_t>::min();
    ForEachCandidate(cluster, node, request, [&](const std::vector<GpuClaim>& candidate) {
      const double added = NodeWaste(cluster, node, request.cpu_milli, candidate) - before;
      const auto score = static_cast<std::int64_t>(std::floor(-added / kWasteStep));
      if (score > best) {
        best = score;
        *claims = candidate;
      }
    });
    return best;
  }

  internal::WasteModel waste_;
  bool learning_ = false;
  std::deque<Request> window_;
  size_t observed_ = 0;
  size_t next_estimate_ = kFirstEstimate;
  std::uint64_t epoch_ = 0;
};

}  // namespace

std::vector<GpuClaim> BestFitGpus(const Cluster& cluster, int node, const Request& request) {
  if (request.whole()) return LowestFreeGpus(cluster, node, request.num_gpu);
  if (request.cpu_only()) return {};
  int best = -1;
  int best_free = 0;
  for (int g = 0; g < cluster.spec(node).gpus; ++g) {
    if (!cluster.ShareFitsGpu(node, g, request)) continue;
    const int free = cluster.FreeMilli(node, g);
    if (best < 0 || free < best_free) {
      best = g;
      best_free = free;
    }
  }
  if (best < 0) return {};
  return {*cluster.ShareClaim(node, best, request)};
}

std::vector<GpuClaim> Policy::ChooseGpus(const Cluster& cluster, int node, const Request& request) {
  return BestFitGpus(cluster, node, request);
}

std::vector<TypicalRequest> TypicalRequests(std::span<const Request> requests, double coverage) {
  // FGD's key (cpu, milli per GPU, GPU count, models), plus the MIG profile and VRAM that FGD's
  // traces do not have.
  using Key =
      std::tuple<std::int64_t, int, int, std::string, std::string, std::string, std::int64_t>;
  std::map<Key, std::pair<int, const Request*>> counts;
  for (const Request& request : requests) {
    Key key{request.cpu_milli,   request.num_gpu == 0 || request.mig() ? 0 : request.milli(),
            request.num_gpu,     absl::StrJoin(request.models, "|"),
            request.mig_profile, absl::StrJoin(request.mig_class, ",", absl::PairFormatter("=")),
            request.vram_mib};
    auto& entry = counts[key];
    entry.first += 1;
    if (entry.second == nullptr) entry.second = &request;
  }
  std::vector<std::pair<Key, std::pair<int, const Request*>>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    if (a.second.first != b.second.first) return a.second.first > b.second.first;
    return a.first > b.first;
  });
  std::vector<TypicalRequest> typical;
  const double needed = coverage * static_cast<double>(requests.size());
  double covered = 0;
  for (const auto& [key, entry] : sorted) {
    if (covered >= needed && !typical.empty()) break;
    TypicalRequest t;
    t.request = *entry.second;
    t.request.memory_mib = 0;
    t.weight = entry.first;
    covered += entry.first;
    typical.push_back(std::move(t));
  }
  for (TypicalRequest& t : typical) t.weight /= covered;
  return typical;
}

const std::vector<std::string>& PolicyNames() {
  static const std::vector<std::string> names = {
      "random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd", "gpuslice"};
  return names;
}

absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name,
                                                   const PolicyOptions& options) {
  if (name == "random") return std::make_unique<RandomPolicy>(options.seed);
  if (name == "dotprod") return std::make_unique<DotProductPolicy>();
  if (name == "gpuclustering") return std::make_unique<GpuClusteringPolicy>();
  if (name == "gpupacking") return std::make_unique<GpuPackingPolicy>();
  if (name == "bestfit") return std::make_unique<BestFitPolicy>();
  if (name == "fgd") return std::make_unique<FgdPolicy>(options.typical);
  if (name == "gpuslice") return std::make_unique<GpuslicePolicy>(options.typical);
  return absl::NotFoundError(absl::StrCat("unknown policy '", std::string(name),
                                          "'; known: ", absl::StrJoin(PolicyNames(), ", ")));
}

}  // namespace gpuslice::place
