// Property tests (rapidcheck) of the placement engine on random small clusters (shared, whole and
// MIG nodes mixed) under random sequences of placements and releases, for every policy: nothing is
// ever overcommitted, the accounting matches the live allocations, rejections are justified, and
// releasing everything restores the initial state exactly.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "gpuslice/place/engine.h"
#include "gpuslice/place/policy.h"
#include "place/place_test_util.h"

namespace gpuslice::place {
namespace {

// Every case runs eight engines over a few dozen steps with full checks after each, so fewer
// cases than rapidcheck's default 100 (RC_PARAMS, when set, wins). Runs before main, hence before
// rapidcheck reads its configuration.
[[maybe_unused]] const bool kFewerCases = [] {
  return setenv("RC_PARAMS", "max_success=200", 0) == 0;
}();

template <typename T>
T Full(rc::Gen<T> gen) {
  return *rc::gen::resize(rc::kNominalSize, std::move(gen));
}
int Int(int low, int high) { return Full(rc::gen::inRange(low, high + 1)); }

const std::vector<std::string>& Labels() {
  static const std::vector<std::string> labels = {"G1", "G2", ""};
  return labels;
}

NodeSpec RandomNode(int index) {
  NodeSpec spec;
  spec.name = "node-" + std::to_string(index);
  spec.cpu_milli = 1000 * Int(0, 24);
  spec.memory_mib = 1024 * Int(0, 32);
  spec.max_pods = Int(1, 8);
  spec.gpus = Int(0, 4);
  spec.model = Labels()[static_cast<size_t>(Int(0, 2))];
  switch (Int(0, 2)) {
    case 0:
      spec.mode = GpuMode::kShared;
      spec.gpu_memory_mib = Int(0, 1) == 0 ? 0 : 16000;
      break;
    case 1:
      spec.mode = GpuMode::kWhole;
      break;
    default:
      spec.mode = GpuMode::kMig;
      spec.hardware = testing::CatalogModel(Int(0, 1) == 0 ? "A100-80GB" : "H100-80GB");
  }
  return spec;
}

Request RandomRequest() {
  Request request;
  request.cpu_milli = 500 * Int(0, 12);
  request.memory_mib = 512 * Int(0, 16);
  switch (Int(0, 9)) {
    case 0:
    case 1:
      break;  // CPU only
    case 2:
    case 3:
      request.num_gpu = Int(1, 3);
      request.gpu_milli = Int(0, 1) == 0 ? 0 : 1000;
      break;
    case 4:
    case 5: {
      static const std::vector<std::string> profiles = {"1g", "2g", "3g", "4g", "7g", "1g.20gb"};
      request.num_gpu = 1;
      request.mig_profile = profiles[static_cast<size_t>(Int(0, 5))];
      break;
    }
    case 6:
      request.num_gpu = 1;
      request.gpu_milli = 10 * Int(1, 100);
      request.vram_mib = 1000 * Int(0, 20);
      break;
    case 7:
      // Occasionally contradictory: a share over two GPUs.
      request.num_gpu = Int(1, 2);
      request.gpu_milli = 50 * Int(1, 20);
      break;
    default:
      request.num_gpu = 1;
      request.gpu_milli = 10 * Int(1, 100);
  }
  if (request.num_gpu > 0 && Int(0, 3) == 0) {
    request.models = {Labels()[static_cast<size_t>(Int(0, 1))]};
  }
  return request;
}

struct Step {
  bool release = false;
  int pick = 0;  // which live allocation to release (modulo their count)
  Request request;
};

// The GPU milli an allocation holds, computed from its request and the node's model: shares their
// milli, whole GPUs 1000, MIG instances their compute slices of the model's.
std::int64_t ExpectedMilli(const Cluster& cluster, const Allocation& allocation) {
  std::int64_t milli = 0;
  for (const GpuClaim& claim : allocation.gpus) {
    if (claim.whole) {
      milli += kMilliPerGpu;
    } else if (cluster.spec(allocation.node).mode == GpuMode::kMig) {
      const geometry::Shape& shape = *cluster.shape(allocation.node);
      milli += shape.compute_slices(claim.mig_profile) * kMilliPerGpu / shape.mig().compute_slices;
    } else {
      milli += allocation.request.milli();
    }
  }
  return milli;
}

// Checks the cluster against the live allocations, field by field.
void CheckState(const Cluster& cluster, const std::vector<Allocation>& live) {
  std::int64_t allocated = 0;
  for (int n = 0; n < cluster.node_count(); ++n) {
    const NodeSpec& spec = cluster.spec(n);
    std::int64_t cpu = 0;
    std::int64_t memory = 0;
    int pods = 0;
    std::map<int, int> tags;
    // Per GPU: the claims on it with their requests.
    std::vector<std::vector<std::pair<GpuClaim, Request>>> claims(static_cast<size_t>(spec.gpus));
    for (const Allocation& allocation : live) {
      if (allocation.node != n) continue;
      cpu += allocation.request.cpu_milli;
      memory += allocation.request.memory_mib;
      pods += 1;
      if (!allocation.request.cpu_only()) {
        tags[allocation.request.whole() ? allocation.request.num_gpu : 0] += 1;
        RC_ASSERT(cluster.ModelAllowed(n, allocation.request));
      }
      RC_ASSERT(static_cast<int>(allocation.gpus.size()) == allocation.request.num_gpu);
      for (const GpuClaim& claim : allocation.gpus) {
        RC_ASSERT(claim.gpu >= 0 && claim.gpu < spec.gpus);
        claims[static_cast<size_t>(claim.gpu)].emplace_back(claim, allocation.request);
      }
      allocated += ExpectedMilli(cluster, allocation);
    }
    RC_ASSERT(cluster.cpu_free(n) == spec.cpu_milli - cpu);
    RC_ASSERT(cluster.cpu_free(n) >= 0);
    RC_ASSERT(cluster.memory_free(n) == spec.memory_mib - memory);
    RC_ASSERT(cluster.memory_free(n) >= 0);
    RC_ASSERT(cluster.pods(n) == pods);
    RC_ASSERT(pods <= spec.max_pods);
    const std::vector<std::pair<int, int>> expected_tags(tags.begin(), tags.end());
    RC_ASSERT(cluster.gpu_request_tags(n) == expected_tags);

    for (int g = 0; g < spec.gpus; ++g) {
      const GpuState& state = cluster.gpus(n)[static_cast<size_t>(g)];
      const auto& on_gpu = claims[static_cast<size_t>(g)];
      RC_ASSERT(state.holders == static_cast<int>(on_gpu.size()));
      int whole = 0;
      int share_milli = 0;
      std::int64_t vram = 0;
      std::vector<geometry::Placed> layout;
      for (const auto& [claim, request] : on_gpu) {
        if (claim.whole) {
          whole += 1;
          RC_ASSERT(request.whole());
          continue;
        }
        RC_ASSERT(request.share());
        RC_ASSERT(spec.mode != GpuMode::kWhole);
        if (spec.mode == GpuMode::kShared) {
          RC_ASSERT(claim.milli == request.milli());
          RC_ASSERT(claim.vram_mib == request.vram_mib);
          share_milli += claim.milli;
          vram += claim.vram_mib;
        } else {
          RC_ASSERT(claim.mig_profile == cluster.MigProfileFor(n, request));
          RC_ASSERT(claim.milli == cluster.MigMilli(n, claim.mig_profile));
          layout.push_back(geometry::Placed{static_cast<std::uint8_t>(claim.mig_profile),
                                            static_cast<std::uint8_t>(claim.mig_start)});
        }
      }
      // Never both taken whole and shared.
      RC_ASSERT(whole <= 1);
      RC_ASSERT(state.taken_whole == (whole == 1));
      if (whole == 1) {
        RC_ASSERT(on_gpu.size() == 1u);
      }
      RC_ASSERT(state.milli_free >= 0);
      RC_ASSERT(state.milli_free <= kMilliPerGpu);
      RC_ASSERT(cluster.FreeMilli(n, g) >= 0);
      RC_ASSERT(cluster.FreeMilli(n, g) <= kMilliPerGpu);
      RC_ASSERT(cluster.GpuFullyFree(n, g) == on_gpu.empty());
      switch (spec.mode) {
        case GpuMode::kShared:
          RC_ASSERT(state.milli_free == kMilliPerGpu - share_milli);
          RC_ASSERT(state.vram_free_mib == spec.gpu_memory_mib - vram);
          if (spec.gpu_memory_mib > 0) {
            RC_ASSERT(state.vram_free_mib >= 0);
          }
          break;
        case GpuMode::kWhole:
          RC_ASSERT(state.milli_free == kMilliPerGpu);
          break;
        case GpuMode::kMig: {
          const geometry::Shape& shape = *cluster.shape(n);
          RC_ASSERT(shape.Validate(layout).ok());
          RC_ASSERT(testing::SameOccupancy(state.occupancy, shape.OccupancyOf(layout)));
          if (whole == 1) {
            RC_ASSERT(layout.empty());
          }
          break;
        }
      }
    }
  }
  RC_ASSERT(cluster.allocated_milli() == allocated);
}

// What a run did, to classify the cases.
struct Outcomes {
  int placed = 0;
  int mig_placed = 0;
  int whole_placed = 0;
  int exhausted = 0;
  int never = 0;
  int released = 0;
};

void RunSteps(const std::vector<NodeSpec>& specs, const std::vector<Step>& steps,
              const std::string& policy, bool learn, Outcomes& outcomes) {
  absl::StatusOr<Cluster> created = Cluster::Create(specs);
  RC_ASSERT(created.ok());
  const Cluster initial = *created;
  std::vector<Request> requests;
  for (const Step& step : steps) {
    if (!step.release && ValidateRequest(step.request).ok()) requests.push_back(step.request);
  }
  PolicyOptions options;
  if (!learn) options.typical = TypicalRequests(requests);
  options.seed = 5;
  absl::StatusOr<std::unique_ptr<Policy>> made = MakePolicy(policy, options);
  RC_ASSERT(made.ok());
  Engine engine(initial, *std::move(made));
  std::vector<Allocation> live;
  for (const Step& step : steps) {
    if (step.release) {
      if (live.empty()) continue;
      const size_t k = static_cast<size_t>(step.pick) % live.size();
      RC_ASSERT(engine.Release(live[k]).ok());
      live.erase(live.begin() + static_cast<long>(k));
      outcomes.released += 1;
      CheckState(engine.cluster(), live);
      continue;
    }
    const Request& request = step.request;
    const Cluster before = engine.cluster();
    int fitting = 0;
    for (int n = 0; n < before.node_count(); ++n) fitting += before.Fits(n, request) ? 1 : 0;
    const bool valid = ValidateRequest(request).ok();
    bool ever = false;  // fits the empty cluster
    for (int n = 0; n < initial.node_count(); ++n) ever = ever || initial.Fits(n, request);
    RC_ASSERT(engine.FeasibleNodes(request) == (valid ? fitting : 0));
    absl::StatusOr<Allocation> allocation = engine.Place(request);
    if (allocation.ok()) {
      RC_ASSERT(valid);
      RC_ASSERT(before.Fits(allocation->node, request));
      outcomes.placed += 1;
      for (const GpuClaim& claim : allocation->gpus) {
        outcomes.mig_placed += claim.mig_profile >= 0 ? 1 : 0;
        outcomes.whole_placed += claim.whole ? 1 : 0;
      }
      live.push_back(*allocation);
    } else {
      RC_ASSERT(testing::StateDiff(engine.cluster(), before) == "");
      switch (allocation.status().code()) {
        case absl::StatusCode::kInvalidArgument:
          RC_ASSERT(!valid);
          break;
        case absl::StatusCode::kResourceExhausted:
          RC_ASSERT(valid);
          RC_ASSERT(fitting == 0);
          RC_ASSERT(ever);
          outcomes.exhausted += 1;
          break;
        case absl::StatusCode::kFailedPrecondition:
          // Not even the empty cluster could hold it.
          RC_ASSERT(valid);
          RC_ASSERT(fitting == 0);
          RC_ASSERT(!ever);
          outcomes.never += 1;
          break;
        default:
          RC_FAIL(policy + ": unexpected " + allocation.status().ToString());
      }
    }
    CheckState(engine.cluster(), live);
  }
  // Release everything, alternating from both ends: the initial state, exactly.
  while (!live.empty()) {
    const size_t k = live.size() % 2 == 0 ? 0 : live.size() - 1;
    RC_ASSERT(engine.Release(live[k]).ok());
    live.erase(live.begin() + static_cast<long>(k));
  }
  RC_ASSERT(testing::StateDiff(engine.cluster(), initial) == "");
  RC_ASSERT(engine.cluster().allocated_milli() == 0);
}

RC_GTEST_PROP(PlaceProperty, NoOvercommitExactAccountingAndFullRelease, ()) {
  std::vector<NodeSpec> specs;
  const int nodes = Int(1, 5);
  for (int i = 0; i < nodes; ++i) specs.push_back(RandomNode(i));
  std::vector<Step> steps(static_cast<size_t>(Int(1, 40)));
  for (Step& step : steps) {
    step.release = Int(0, 3) == 0;
    if (step.release) {
      step.pick = Int(0, 100);
    } else {
      step.request = RandomRequest();
    }
  }
  Outcomes outcomes;
  for (const std::string& policy : PolicyNames()) RunSteps(specs, steps, policy, false, outcomes);
  RunSteps(specs, steps, "gpuslice", /*learn=*/true, outcomes);
  RC_CLASSIFY(outcomes.mig_placed > 0, "MIG instances placed");
  RC_CLASSIFY(outcomes.whole_placed > 0, "whole GPUs placed");
  RC_CLASSIFY(outcomes.exhausted > 0, "rejected for lack of room");
  RC_CLASSIFY(outcomes.never > 0, "rejected as never possible");
  RC_CLASSIFY(outcomes.released > 0, "released along the way");
}

}  // namespace
}  // namespace gpuslice::place
