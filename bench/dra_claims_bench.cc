// DRA placement against fragmentation: a trace of MIG claims arriving and leaving on one node's
// GPUs, allocated by a model of Kubernetes' scheduler (first fit over the published devices,
// tests/dra/standin_scheduler.h, which reads the slices as JSON), under two publishing orders:
//   by-name   every placement, each GPU's devices by name, GPU after GPU (NVIDIA's driver);
//   gpuslice  the preference order of gpuslice/dra/preference.h, republished after every change.
// Counts the claims that could not be placed, and among them those refused although the node
// had enough free compute slices (refused by fragmentation), and the GPUs left fragmented (free
// compute slices, but the largest base profile they would allow fits nowhere on the GPU), on
// average over the arrivals. Virtual time; deterministic per seed.
//
// Usage: dra_claims_bench [--model H100-80GB] [--gpus 8] [--claims 1000] [--load 0.75]
//                         [--seeds 1-5]
// Output: one line per seed and policy, then one per policy with the totals:
//   dra-claims seed=S policy=P claims=N unplaced=U fragmented=F fragmented_gpus=G
//   dra-claims-total policy=P seeds=K claims=N unplaced=U fragmented=F fragmented_gpus=G
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "dra/standin_scheduler.h"
#include "gpuslice/dra/pool.h"
#include "gpuslice/geometry/enumerate.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"
#include "nlohmann/json.hpp"

namespace {

using gpuslice::dra::BuildPool;
using gpuslice::dra::GpuInfo;
using gpuslice::dra::GpuUse;
using gpuslice::dra::PoolOptions;
using gpuslice::dra::ResourceSlice;
using gpuslice::dra::testing_standin::StandinScheduler;

struct Options {
  std::string model = "H100-80GB";
  int gpus = 8;
  int claims = 1000;
  double load = 0.75;
  int seed_first = 1;
  int seed_last = 5;
};

struct Result {
  int claims = 0;
  int unplaced = 0;
  int fragmented = 0;
  double fragmented_gpus = 0;  // summed over arrivals; the mean is this / claims
};

// Whether a GPU is fragmented: it has free compute slices, but the largest base profile those
// slices would allow fits at none of its placements.
bool Fragmented(const gpuslice::geometry::Shape& shape,
                const std::vector<gpuslice::geometry::Placed>& layout) {
  const gpuslice::geometry::Occupancy occupancy = shape.OccupancyOf(layout);
  int used = 0;
  for (const auto& p : layout) used += shape.compute_slices(p.profile);
  const int free = shape.mig().compute_slices - used;
  if (free <= 0) return false;
  int largest = -1;
  const gpuslice::geometry::ProfileSet base = gpuslice::geometry::BaseProfiles(shape);
  for (int p = 0; p < shape.profile_count(); ++p) {
    if (!base[static_cast<size_t>(p)] || shape.compute_slices(p) > free) continue;
    if (largest < 0 || shape.compute_slices(p) > shape.compute_slices(largest) ||
        (shape.compute_slices(p) == shape.compute_slices(largest) &&
         shape.placement_size(p) < shape.placement_size(largest))) {
      largest = p;
    }
  }
  if (largest < 0) return false;
  for (int start : shape.profile(largest).starts) {
    if (shape.CanAdd(occupancy, largest, start, {}).ok()) return false;
  }
  return true;
}

// The claim mix: base profiles by name and weight.
const std::vector<std::pair<std::string, double>>& Mix(const std::string& model) {
  static const std::map<std::string, std::vector<std::pair<std::string, double>>> mixes = {
      {"H100-80GB",
       {{"1g.10gb", 0.35},
        {"1g.20gb", 0.10},
        {"2g.20gb", 0.20},
        {"3g.40gb", 0.15},
        {"4g.40gb", 0.10},
        {"7g.80gb", 0.10}}},
      {"A100-80GB",
       {{"1g.10gb", 0.35},
        {"1g.20gb", 0.10},
        {"2g.20gb", 0.20},
        {"3g.40gb", 0.15},
        {"4g.40gb", 0.10},
        {"7g.80gb", 0.10}}}};
  return mixes.at(model);
}

StandinScheduler Publish(const std::vector<GpuInfo>& gpus, const std::vector<GpuUse>* use,
                         const std::vector<std::string>& allocated) {
  PoolOptions options;
  options.node_name = "node-a";
  options.use = use;
  auto pool = BuildPool(gpus, options);
  if (!pool.ok()) {
    std::fprintf(stderr, "dra_claims_bench: %s\n", std::string(pool.status().message()).c_str());
    std::exit(1);
  }
  std::vector<nlohmann::json> slices;
  for (const ResourceSlice& slice : *pool) slices.push_back(gpuslice::dra::ToJson(slice));
  StandinScheduler scheduler;
  if (!scheduler.Load(slices).ok()) std::exit(1);
  for (const std::string& name : allocated) scheduler.Allocate(name);
  return scheduler;
}

struct Live {
  double ends = 0;
  std::string device;
  int gpu = 0;
  gpuslice::geometry::Placed placed;
  bool operator>(const Live& other) const { return ends > other.ends; }
};

Result Run(const Options& o, const std::vector<GpuInfo>& gpus, int seed, bool preference) {
  const gpuslice::hw::MigSpec& mig = *gpus[0].model->mig;
  const gpuslice::geometry::Shape shape(*gpus[0].model);
  const auto& mix = Mix(o.model);
  std::vector<double> weights;
  double mean_slices = 0;
  for (const auto& [name, weight] : mix) {
    weights.push_back(weight);
    mean_slices += weight * mig.FindProfile(name)->compute_slices;
  }
  // Arrivals per unit of time so that the offered compute slices are `load` of the node's.
  const double rate = o.load * o.gpus * mig.compute_slices / mean_slices;
  std::mt19937_64 rng(static_cast<std::uint64_t>(seed));
  std::exponential_distribution<double> gap(rate);
  std::exponential_distribution<double> life(1.0);
  std::discrete_distribution<size_t> pick(weights.begin(), weights.end());

  std::vector<GpuUse> use(gpus.size());
  std::priority_queue<Live, std::vector<Live>, std::greater<>> live;
  std::vector<std::string> allocated;
  int free_slices = o.gpus * mig.compute_slices;
  double now = 0;
  Result result;
  for (int c = 0; c < o.claims; ++c) {
    now += gap(rng);
    const std::string& wanted = mix[pick(rng)].first;
    const double lifetime = life(rng);
    while (!live.empty() && live.top().ends <= now) {
      const Live done = live.top();
      live.pop();
      std::erase(allocated, done.device);
      auto& instances = use[static_cast<size_t>(done.gpu)].instances;
      instances.erase(std::find(instances.begin(), instances.end(), done.placed));
      free_slices += mig.profiles[done.placed.profile].compute_slices;
    }
    for (const GpuUse& gpu : use)
      result.fragmented_gpus += Fragmented(shape, gpu.instances) ? 1 : 0;
    StandinScheduler scheduler = Publish(gpus, preference ? &use : nullptr, allocated);
    const std::string device = scheduler.FirstFit([&](const nlohmann::json& d) {
      const nlohmann::json& a = d["attributes"];
      return a["type"]["string"] == "mig" && a["profile"]["string"] == wanted;
    });
    const int slices = mig.FindProfile(wanted)->compute_slices;
    ++result.claims;
    if (device.empty()) {
      ++result.unplaced;
      if (free_slices >= slices) ++result.fragmented;
      continue;
    }
    const nlohmann::json& a = scheduler.device(device)["attributes"];
    Live entry;
    entry.ends = now + lifetime;
    entry.device = device;
    entry.gpu = a["index"]["int"].get<int>();
    entry.placed = {static_cast<std::uint8_t>(mig.IndexOf(*mig.FindProfile(wanted))),
                    static_cast<std::uint8_t>(a["placementStart"]["int"].get<int>())};
    use[static_cast<size_t>(entry.gpu)].instances.push_back(entry.placed);
    allocated.push_back(device);
    free_slices -= slices;
    live.push(entry);
  }
  return result;
}

bool ParseArgs(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return false;
    const std::string value = argv[++i];
    if (arg == "--model") {
      o.model = value;
    } else if (arg == "--gpus") {
      o.gpus = std::atoi(value.c_str());
    } else if (arg == "--claims") {
      o.claims = std::atoi(value.c_str());
    } else if (arg == "--load") {
      o.load = std::atof(value.c_str());
    } else if (arg == "--seeds") {
      const size_t dash = value.find('-');
      o.seed_first = std::atoi(value.substr(0, dash).c_str());
      o.seed_last =
          dash == std::string::npos ? o.seed_first : std::atoi(value.substr(dash + 1).c_str());
    } else {
      return false;
    }
  }
  return o.gpus > 0 && o.claims > 0 && o.load > 0 && o.seed_first <= o.seed_last;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: dra_claims_bench [--model H100-80GB|A100-80GB] [--gpus N] [--claims N] "
                 "[--load X] [--seeds A-B]\n");
    return 2;
  }
  const gpuslice::hw::GpuModel* model = gpuslice::hw::Catalog::Builtin().Find(o.model);
  if (model == nullptr || !model->mig_capable()) {
    std::fprintf(stderr, "dra_claims_bench: no MIG model %s\n", o.model.c_str());
    return 2;
  }
  std::vector<GpuInfo> gpus(static_cast<size_t>(o.gpus));
  for (int g = 0; g < o.gpus; ++g) {
    gpus[static_cast<size_t>(g)].index = g;
    gpus[static_cast<size_t>(g)].model = model;
    gpus[static_cast<size_t>(g)].whole = false;  // the trace asks for MIG devices only
  }
  std::map<std::string, Result> totals;
  for (int seed = o.seed_first; seed <= o.seed_last; ++seed) {
    for (bool preference : {false, true}) {
      const char* policy = preference ? "gpuslice" : "by-name";
      const Result r = Run(o, gpus, seed, preference);
      std::printf(
          "dra-claims seed=%d policy=%s claims=%d unplaced=%d fragmented=%d "
          "fragmented_gpus=%.2f\n",
          seed, policy, r.claims, r.unplaced, r.fragmented, r.fragmented_gpus / r.claims);
      Result& t = totals[policy];
      t.claims += r.claims;
      t.unplaced += r.unplaced;
      t.fragmented += r.fragmented;
      t.fragmented_gpus += r.fragmented_gpus;
    }
  }
  for (const char* policy : {"by-name", "gpuslice"}) {
    const Result& t = totals[policy];
    std::printf(
        "dra-claims-total policy=%s seeds=%d-%d claims=%d unplaced=%d fragmented=%d "
        "fragmented_gpus=%.2f\n",
        policy, o.seed_first, o.seed_last, t.claims, t.unplaced, t.fragmented,
        t.fragmented_gpus / t.claims);
  }
  return 0;
}
