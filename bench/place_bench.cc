// Placement engine benchmark: the cost of one decision (place + release) on a 10,000-GPU cluster
// kept about 85% full, for the incremental engine and, side by side, for a full scan that scores
// every node with the same policy (what a scheduler without the engine's per-class caches does).
//
//   build/bench/place_bench [--benchmark_filter=...]
//
// The cluster: 1,250 nodes of 8 shared GPUs (96 cores, 768 GiB), 12 request classes drawn with
// fixed weights (shares of 250-810 milli, whole GPUs, 2/4/8-GPU requests, CPU-only), a fixed seed.
// Each iteration releases one random live allocation and places one new request, so the cluster
// stays at the same fill; the reported time is per iteration (one release + one decision).
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "gpuslice/place/cluster.h"
#include "gpuslice/place/engine.h"
#include "gpuslice/place/policy.h"

namespace {

using namespace gpuslice::place;

constexpr int kNodes = 1250;  // × 8 GPUs = 10,000 GPUs

std::vector<NodeSpec> Nodes() {
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < kNodes; ++i) {
    NodeSpec node;
    node.name = "node-" + std::to_string(10000 + i);
    node.model = i % 5 == 0 ? "A100" : "H100";
    node.cpu_milli = 96000;
    node.memory_mib = 786432;
    node.gpus = 8;
    nodes.push_back(node);
  }
  return nodes;
}

struct Mix {
  std::vector<Request> classes;
  std::vector<double> weights;
};

Mix RequestMix() {
  Mix mix;
  auto add = [&](std::int64_t cpu, int num_gpu, int milli, double weight) {
    Request request;
    request.cpu_milli = cpu;
    request.memory_mib = 16384;
    request.num_gpu = num_gpu;
    request.gpu_milli = milli;
    mix.classes.push_back(request);
    mix.weights.push_back(weight);
  };
  add(3000, 1, 810, 14);
  add(6000, 1, 470, 10);
  add(4000, 1, 320, 5);
  add(3000, 1, 250, 3);
  add(8000, 1, 650, 4);
  add(11000, 1, 1000, 25);
  add(12000, 1, 1000, 10);
  add(24000, 2, 1000, 3);
  add(48000, 4, 1000, 2);
  add(90000, 8, 1000, 1);
  add(12000, 0, 0, 5);
  add(4000, 0, 0, 3);
  return mix;
}

std::vector<TypicalRequest> Typical(const Mix& mix) {
  std::vector<TypicalRequest> typical;
  double total = 0;
  for (double w : mix.weights) total += w;
  for (size_t i = 0; i < mix.classes.size(); ++i) {
    typical.push_back({mix.classes[i], mix.weights[i] / total});
  }
  return typical;
}

// A scheduler without the engine: scores every feasible node for every request.
class FullScan {
 public:
  FullScan(Cluster cluster, std::unique_ptr<Policy> policy)
      : cluster_(std::move(cluster)), policy_(std::move(policy)) {}
  bool Place(const Request& request, Allocation* out) {
    int best = -1;
    Score best_score;
    for (int node = 0; node < cluster_.node_count(); ++node) {
      if (!cluster_.Fits(node, request)) continue;
      const Score score = policy_->ScoreNode(cluster_, node, request);
      if (best < 0 || score > best_score) {
        best = node;
        best_score = score;
      }
    }
    if (best < 0) return false;
    out->node = best;
    out->request = request;
    out->gpus =
        request.cpu_only() ? std::vector<GpuClaim>{} : policy_->ChooseGpus(cluster_, best, request);
    return cluster_.Apply(*out).ok();
  }
  void Release(const Allocation& allocation) { (void)cluster_.Release(allocation); }

 private:
  Cluster cluster_;
  std::unique_ptr<Policy> policy_;
};

template <typename Scheduler>
void Steady(benchmark::State& state, Scheduler& scheduler, const Mix& mix) {
  std::mt19937_64 rng(7);
  std::discrete_distribution<size_t> pick(mix.weights.begin(), mix.weights.end());
  std::vector<Allocation> live;
  // Fill to about 85% of the GPUs.
  std::int64_t placed_milli = 0;
  while (placed_milli < 85 * kNodes * 8 * 10) {
    const Request& request = mix.classes[pick(rng)];
    Allocation allocation;
    if (!scheduler.Place(request, &allocation)) break;
    placed_milli += static_cast<std::int64_t>(request.milli()) * request.num_gpu;
    live.push_back(allocation);
  }
  for (auto _ : state) {
    std::uniform_int_distribution<size_t> victim(0, live.size() - 1);
    const size_t v = victim(rng);
    scheduler.Release(live[v]);
    live[v] = live.back();
    live.pop_back();
    Allocation allocation;
    if (scheduler.Place(mix.classes[pick(rng)], &allocation)) live.push_back(allocation);
  }
  state.counters["live"] = static_cast<double>(live.size());
}

struct EngineScheduler {
  Engine engine;
  bool Place(const Request& request, Allocation* out) {
    absl::StatusOr<Allocation> allocation = engine.Place(request);
    if (!allocation.ok()) return false;
    *out = *allocation;
    return true;
  }
  void Release(const Allocation& allocation) { (void)engine.Release(allocation); }
};

std::unique_ptr<Policy> MakeNamed(const std::string& name, const Mix& mix) {
  PolicyOptions options;
  options.typical = Typical(mix);
  return *MakePolicy(name, options);
}

void BM_Engine(benchmark::State& state, const std::string& policy) {
  const Mix mix = RequestMix();
  EngineScheduler scheduler{Engine(*Cluster::Create(Nodes()), MakeNamed(policy, mix))};
  scheduler.engine.set_explain_rejections(false);
  Steady(state, scheduler, mix);
}

void BM_FullScan(benchmark::State& state, const std::string& policy) {
  const Mix mix = RequestMix();
  FullScan scheduler(*Cluster::Create(Nodes()), MakeNamed(policy, mix));
  Steady(state, scheduler, mix);
}

BENCHMARK_CAPTURE(BM_Engine, bestfit, std::string("bestfit"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_FullScan, bestfit, std::string("bestfit"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Engine, fgd, std::string("fgd"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_FullScan, fgd, std::string("fgd"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Engine, gpuslice, std::string("gpuslice"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_FullScan, gpuslice, std::string("gpuslice"))->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
