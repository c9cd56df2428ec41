#include "gpuslice/plan/replan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpuslice/hw/catalog.h"
#include "gpuslice/plan/report.h"

namespace gpuslice::plan {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

Fleet Nodes(const std::string& model, int nodes, int per_node) {
  Fleet fleet;
  for (int n = 0; n < nodes; ++n) {
    Node node;
    node.name = "node-" + std::to_string(n);
    node.gpus.push_back(GpuGroup{model, per_node, 1.0, true, "fleet.yaml:1"});
    fleet.nodes.push_back(node);
  }
  return fleet;
}

Workload Replicas(const std::string& name, int replicas, double peak_gib) {
  Workload workload;
  workload.name = name;
  workload.replicas = replicas;
  workload.peak_memory_gib = peak_gib;
  workload.origin = "workloads.yaml:1";
  return workload;
}

// The current state as `plan -o` would have written it for `plan`.
CurrentState StateOf(const PlanResult& plan, const WorkloadSet& set, const Fleet& fleet) {
  const std::string text = AssignmentJson(plan, set, fleet).dump();
  absl::StatusOr<CurrentState> state = ParseCurrentState(text, "assignment.json");
  EXPECT_TRUE(state.ok()) << state.status();
  return state.ok() ? *state : CurrentState{};
}

PlanResult MustPlan(const WorkloadSet& set, const Fleet& fleet) {
  absl::StatusOr<PlanResult> plan = Plan(set, fleet, Catalog());
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : PlanResult{};
}

ReplanResult MustReplan(const CurrentState& state, const WorkloadSet& set, const Fleet& fleet) {
  absl::StatusOr<ReplanResult> result = Replan(state, set, fleet, Catalog());
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return {};
  EXPECT_THAT(CheckPlan(result->plan, set, fleet), IsEmpty());
  return *std::move(result);
}

int Count(const ReplanResult& result, StepKind kind) {
  return static_cast<int>(std::count_if(result.steps.begin(), result.steps.end(),
                                        [&](const ReplanStep& step) { return step.kind == kind; }));
}

TEST(Replan, SameDemandChangesNothing) {
  WorkloadSet set;
  set.workloads = {Replicas("a", 3, 8), Replicas("b", 2, 30)};
  const Fleet fleet = Nodes("A100-80GB", 2, 2);
  const PlanResult plan = MustPlan(set, fleet);
  const ReplanResult result = MustReplan(StateOf(plan, set, fleet), set, fleet);
  EXPECT_THAT(result.disrupted, IsEmpty());
  EXPECT_THAT(result.steps, IsEmpty());
  EXPECT_EQ(result.kept_instances, 5);
  EXPECT_EQ(result.plan.gpus_used, plan.gpus_used);
}

TEST(Replan, GrowthGoesIntoFreeRoomWithoutStoppingAnything) {
  WorkloadSet before;
  before.workloads = {Replicas("a", 2, 8)};
  const Fleet fleet = Nodes("A100-80GB", 1, 2);
  const PlanResult plan = MustPlan(before, fleet);
  WorkloadSet after;
  after.workloads = {Replicas("a", 4, 8), Replicas("c", 1, 8)};
  const ReplanResult result = MustReplan(StateOf(plan, before, fleet), after, fleet);
  EXPECT_THAT(result.disrupted, IsEmpty());
  EXPECT_EQ(result.kept_instances, 2);
  EXPECT_EQ(result.created_instances, 3);
  EXPECT_EQ(Count(result, StepKind::kDrain), 0);
  EXPECT_EQ(Count(result, StepKind::kStart), 3);
}

TEST(Replan, RemovedWorkloadsStopWithoutCountingAsDisrupted) {
  WorkloadSet before;
  before.workloads = {Replicas("a", 2, 8), Replicas("gone", 2, 8)};
  const Fleet fleet = Nodes("A100-80GB", 1, 2);
  const PlanResult plan = MustPlan(before, fleet);
  WorkloadSet after;
  after.workloads = {Replicas("a", 2, 8)};
  const ReplanResult result = MustReplan(StateOf(plan, before, fleet), after, fleet);
  EXPECT_THAT(result.disrupted, IsEmpty());
  EXPECT_EQ(Count(result, StepKind::kDrain), 2);
  EXPECT_EQ(Count(result, StepKind::kDestroy), 2);
  for (const ReplanStep& step : result.steps) {
    if (step.kind == StepKind::kDrain) {
      EXPECT_EQ(step.workload, "gone");
      EXPECT_THAT(step.reason, HasSubstr("no longer wanted"));
    }
  }
}

TEST(Replan, ScaleDownReleasesSurplusOnly) {
  WorkloadSet before;
  before.workloads = {Replicas("a", 4, 8)};
  const Fleet fleet = Nodes("A100-80GB", 1, 2);
  const PlanResult plan = MustPlan(before, fleet);
  WorkloadSet after;
  after.workloads = {Replicas("a", 2, 8)};
  const ReplanResult result = MustReplan(StateOf(plan, before, fleet), after, fleet);
  EXPECT_THAT(result.disrupted, IsEmpty());
  EXPECT_EQ(result.kept_instances, 2);
  EXPECT_EQ(Count(result, StepKind::kDrain), 2);
  for (const ReplanStep& step : result.steps) {
    if (step.kind == StepKind::kDrain) {
      EXPECT_THAT(step.reason, HasSubstr("scaled down"));
    }
  }
}

TEST(Replan, OutgrownInstanceIsADisruptionWithItsReason) {
  WorkloadSet before;
  before.workloads = {Replicas("a", 1, 8), Replicas("b", 1, 8)};
  const Fleet fleet = Nodes("A100-80GB", 1, 1);
  const PlanResult plan = MustPlan(before, fleet);
  WorkloadSet after;
  after.workloads = {Replicas("a", 1, 30), Replicas("b", 1, 8)};  // a now needs 3g.40gb
  const ReplanResult result = MustReplan(StateOf(plan, before, fleet), after, fleet);
  ASSERT_THAT(result.disrupted, SizeIs(1));
  EXPECT_EQ(result.disrupted[0].first, "a");
  EXPECT_THAT(result.disrupted[0].second, HasSubstr("no longer suits"));
  EXPECT_EQ(result.kept_instances, 1);  // b stays
}

// Two A100s full of 1g instances: GPU 0 holds seven replicas of "wide", GPU 1 one replica each
// of seven workloads s0..s6. `workloads` gets that demand, the result is what runs.
CurrentState TwoFullA100s(WorkloadSet* workloads) {
  workloads->workloads.push_back(Replicas("wide", 7, 8));
  workloads->workloads.back().spread = false;
  for (int i = 0; i < 7; ++i) {
    workloads->workloads.push_back(Replicas("s" + std::to_string(i), 1, 8));
  }
  CurrentState state;
  state.gpus.resize(2);
  for (int g = 0; g < 2; ++g) {
    state.gpus[static_cast<size_t>(g)] = CurrentGpu{"node-0", g, "A100-80GB", true, {}};
    for (int i = 0; i < 7; ++i) {
      state.gpus[static_cast<size_t>(g)].instances.push_back(
          CurrentInstance{"1g.10gb", i, g == 0 ? "wide" : "s" + std::to_string(i), 1, 0});
    }
  }
  return state;
}

TEST(Replan, FullFleetReleasesTheGpuThatStopsTheFewestWorkloads) {
  // A new 7g workload needs one whole GPU back.
  const Fleet fleet = Nodes("A100-80GB", 1, 2);
  WorkloadSet before;
  const CurrentState state = TwoFullA100s(&before);
  WorkloadSet after = before;
  after.workloads[0].peak_memory_gib = 60;  // "wide" becomes one 7g.80gb
  after.workloads[0].replicas = 1;
  const ReplanResult result = MustReplan(state, after, fleet);
  // Only "wide" is disrupted (its 1g no longer suits it); GPU 0 is re-laid, the seven others stay.
  ASSERT_THAT(result.disrupted, SizeIs(1));
  EXPECT_EQ(result.disrupted[0].first, "wide");
  EXPECT_EQ(result.kept_instances, 7);
  EXPECT_THAT(result.plan.unplaced, IsEmpty());
}

TEST(Replan, MakingRoomDisruptsTheCheapestGpu) {
  const Fleet fleet = Nodes("A100-80GB", 1, 2);
  WorkloadSet set;
  const CurrentState state = TwoFullA100s(&set);
  // "wide" shrinks to 4 replicas and a new 3g workload arrives: GPU 0 can host it once the
  // surplus is released, but only if the kept replicas leave a 3g start free.
  WorkloadSet after = set;
  after.workloads[0].replicas = 3;
  after.workloads.push_back(Replicas("new3g", 1, 30));
  const ReplanResult result = MustReplan(state, after, fleet);
  EXPECT_THAT(result.plan.unplaced, IsEmpty());
  // Stopping "wide" (one workload) is cheaper than stopping the seven on GPU 1.
  for (const auto& [name, reason] : result.disrupted) EXPECT_EQ(name, "wide") << reason;
  for (const PlannedInstance& instance : result.plan.gpus[1].instances) {
    EXPECT_TRUE(instance.kept);
  }
}

TEST(Replan, RejectsAStateThatDoesNotMatchTheFleet) {
  WorkloadSet set;
  set.workloads = {Replicas("a", 1, 8)};
  CurrentState state;
  state.gpus.push_back(CurrentGpu{"elsewhere", 0, "A100-80GB", true, {}});
  absl::StatusOr<ReplanResult> result = Replan(state, set, Nodes("A100-80GB", 1, 1), Catalog());
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("elsewhere/gpu0"));
  state.gpus[0] = CurrentGpu{"node-0", 0, "H100-80GB", true, {}};
  result = Replan(state, set, Nodes("A100-80GB", 1, 1), Catalog());
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("H100-80GB"));
}

TEST(Replan, StateParserNamesTheField) {
  absl::StatusOr<CurrentState> state =
      ParseCurrentState(R"({"gpus": [{"node": "a", "gpu": "x", "model": "A100-80GB"}]})", "s.json");
  ASSERT_FALSE(state.ok());
  EXPECT_THAT(std::string(state.status().message()), HasSubstr("s.json"));
  EXPECT_THAT(std::string(state.status().message()), HasSubstr("gpus[0].gpu"));
  state = ParseCurrentState("[1, 2]", "s.json");
  EXPECT_FALSE(state.ok());
  state = ParseCurrentState("{gpus: [", "s.json");
  EXPECT_FALSE(state.ok());
}

}  // namespace
}  // namespace gpuslice::plan
