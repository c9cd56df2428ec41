// Tests of the plan report on hand-built plans over real catalog models: baselines and savings,
// utilisation, stranded capacity, redundancy, the checklist, the mig-parted config (round trip
// through the parser and ResolveEntry) and the assignment map, and the text/JSON/YAML forms.
#include "gpuslice/plan/report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "gpuslice/spec/mig_parted.h"
#include "gpuslice/util/yaml_writer.h"
#include "test_util.h"
#include "yaml-cpp/yaml.h"

namespace gpuslice::plan {
namespace {

using gpuslice::testing::Model;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

int P(const hw::GpuModel& model, const std::string& name) {
  const hw::GiProfile* profile = model.mig->FindProfile(name);
  EXPECT_NE(profile, nullptr) << name;
  return profile == nullptr ? 0 : model.mig->IndexOf(*profile);
}

SizedOption Option(const hw::GpuModel& model, const std::string& profile, double capacity) {
  SizedOption option;
  option.model = &model;
  option.profile = profile.empty() ? kWholeGpu : P(model, profile);
  option.capacity = capacity;
  return option;
}

Workload Replicas(const std::string& name, const std::string& tenant, int replicas,
                  double peak_gib) {
  Workload w;
  w.name = name;
  w.tenant = tenant;
  w.replicas = replicas;
  w.peak_memory_gib = peak_gib;
  return w;
}

WorkloadSizing ReplicaSizing(int replicas, std::vector<SizedOption> options) {
  WorkloadSizing sizing;
  sizing.demand = replicas;
  sizing.options = std::move(options);
  sizing.explanation = {"sized by hand"};
  return sizing;
}

PlannedGpu Gpu(int node, int index, const hw::GpuModel& model, double cost) {
  PlannedGpu gpu;
  gpu.node = node;
  gpu.index = index;
  gpu.model = &model;
  gpu.cost_per_hour = cost;
  return gpu;
}

void Put(PlannedGpu& gpu, int profile, int start, int workload, double capacity) {
  PlannedInstance instance;
  instance.profile = profile;
  instance.start = start;
  instance.workload = workload;
  instance.capacity = capacity;
  gpu.instances.push_back(instance);
  gpu.used = true;
  gpu.mig_enabled = profile != kWholeGpu;
  std::sort(gpu.instances.begin(), gpu.instances.end(),
            [](const PlannedInstance& a, const PlannedInstance& b) { return a.start < b.start; });
}

// One node named `name` with the given GPU groups.
Fleet OneNode(std::vector<GpuGroup> groups, const std::string& name = "n") {
  Fleet fleet;
  Node node;
  node.name = name;
  node.gpus = std::move(groups);
  fleet.nodes.push_back(node);
  return fleet;
}

Fleet TwoNodesOfA100(bool costs_given = true) {
  Fleet fleet;
  for (const char* name : {"node-a", "node-b"}) {
    Node node;
    node.name = name;
    GpuGroup group;
    group.model = "A100-80GB";
    group.count = 2;
    group.cost_per_hour = costs_given ? 3.0 : 1.0;
    node.gpus.push_back(group);
    fleet.nodes.push_back(node);
  }
  fleet.costs_given = costs_given;
  return fleet;
}

// Three workloads on two nodes of two A100-80GB each:
//   0 embed  (search): 3 replicas of 8 GiB     options 1g.10gb, whole
//   1 chat   (chat):   1 replica of 30 GiB     options 3g.40gb, whole
//   2 resnet (vision): 900 req/s               options 2g.20gb 300, 3g.40gb 450, whole 1000
// node-a GPU 0: 3g@0 chat, 2g@4 resnet 300, 1g@6 embed       node-a GPU 1: unused
// node-b GPU 0: 3g@0 resnet 450, 2g@4 resnet 300, 1g@6 embed   node-b GPU 1: 1g@0 embed
struct Scenario {
  WorkloadSet workloads;
  Fleet fleet;
  PlanResult plan;
};

Scenario MixedScenario(bool costs_given = true) {
  const hw::GpuModel& a100 = Model("A100-80GB");
  Scenario s;
  s.fleet = TwoNodesOfA100(costs_given);
  s.workloads.workloads.push_back(Replicas("embed", "search", 3, 8));
  s.workloads.workloads.push_back(Replicas("chat", "chat", 1, 30));
  Workload resnet;
  resnet.name = "resnet";
  resnet.tenant = "vision";
  resnet.throughput_rps = 900;
  s.workloads.workloads.push_back(resnet);

  s.plan.sizing.push_back(ReplicaSizing(3, {Option(a100, "1g.10gb", 1), Option(a100, "", 1)}));
  s.plan.sizing.push_back(ReplicaSizing(1, {Option(a100, "3g.40gb", 1), Option(a100, "", 1)}));
  WorkloadSizing throughput;
  throughput.by_throughput = true;
  throughput.demand = 900;
  throughput.options = {Option(a100, "2g.20gb", 300), Option(a100, "3g.40gb", 450),
                        Option(a100, "", 1000)};
  s.plan.sizing.push_back(throughput);

  const double cost = costs_given ? 3.0 : 1.0;
  PlannedGpu a0 = Gpu(0, 0, a100, cost);
  Put(a0, P(a100, "3g.40gb"), 0, 1, 1);
  Put(a0, P(a100, "2g.20gb"), 4, 2, 300);
  Put(a0, P(a100, "1g.10gb"), 6, 0, 1);
  PlannedGpu a1 = Gpu(0, 1, a100, cost);
  PlannedGpu b0 = Gpu(1, 0, a100, cost);
  Put(b0, P(a100, "3g.40gb"), 0, 2, 450);
  Put(b0, P(a100, "2g.20gb"), 4, 2, 300);
  Put(b0, P(a100, "1g.10gb"), 6, 0, 1);
  PlannedGpu b1 = Gpu(1, 1, a100, cost);
  Put(b1, P(a100, "1g.10gb"), 0, 0, 1);
  s.plan.gpus = {a0, a1, b0, b1};
  s.plan.gpus_used = 3;
  s.plan.cost_per_hour = 3 * cost;
  s.plan.solver = "cbc";
  s.plan.proven_optimal = true;
  s.plan.lower_bound_cost = 3 * cost;
  return s;
}

const Baseline& FindBaseline(const Report& report, const std::string& name) {
  for (const Baseline& baseline : report.baselines) {
    if (baseline.name == name) return baseline;
  }
  ADD_FAILURE() << "no baseline " << name;
  return report.baselines.front();
}

const ChecklistItem* FindItem(const Report& report, const std::string& key) {
  for (const ChecklistItem& item : report.checklist) {
    if (item.key == key) return &item;
  }
  return nullptr;
}

TEST(Report, TotalsAndCost) {
  const Scenario s = MixedScenario();
  const Report report = BuildReport(s.plan, s.workloads, s.fleet);
  EXPECT_EQ(report.gpus_in_fleet, 4);
  EXPECT_EQ(report.gpus_used, 3);
  EXPECT_EQ(report.mig_gpus, 3);
  EXPECT_EQ(report.whole_gpus, 0);
  EXPECT_DOUBLE_EQ(report.cost_per_hour, 9.0);
  EXPECT_DOUBLE_EQ(report.cost_per_month, 9.0 * 730);
  ASSERT_EQ(report.workloads.size(), 3u);
  EXPECT_TRUE(report.workloads[0].placed);
  EXPECT_THAT(report.workloads[0].placed_as, ElementsAre("3 x 1g.10gb on A100-80GB"));
  EXPECT_THAT(report.workloads[2].placed_as,
              ElementsAre("2 x 2g.20gb on A100-80GB", "1 x 3g.40gb on A100-80GB"));
  EXPECT_DOUBLE_EQ(report.workloads[2].capacity, 1050);
  EXPECT_THAT(report.workloads[0].explanation, ElementsAre("sized by hand"));
  EXPECT_EQ(report.gpus[0].layout, "3g.40gb@0,2g.20gb@4,1g.10gb@6");
  EXPECT_EQ(report.gpus[1].layout, "");
  EXPECT_TRUE(report.unplaced.empty());
}

TEST(Report, OneWorkloadPerGpuBaseline) {
  const Scenario s = MixedScenario();
  const Report report = BuildReport(s.plan, s.workloads, s.fleet);
  const Baseline& one = FindBaseline(report, "one-workload-per-GPU");
  // embed 3 replicas -> 3 GPUs, chat 1, resnet ceil(900 / 1000) = 1.
  EXPECT_EQ(one.gpus, 5);
  EXPECT_THAT(one.gpus_by_model, ElementsAre(Pair("A100-80GB", 5)));
  EXPECT_DOUBLE_EQ(one.cost_per_hour, 15.0);
  EXPECT_DOUBLE_EQ(one.cost_per_month, 15.0 * 730);
  EXPECT_EQ(one.gpus_saved, 2);
  EXPECT_DOUBLE_EQ(one.saved_per_hour, 6.0);
  EXPECT_DOUBLE_EQ(one.saved_per_month, 6.0 * 730);
  EXPECT_TRUE(one.exceeds_fleet);  // 5 A100s, the fleet has 4
}

TEST(Report, AllBalancedBaseline) {
  const Scenario s = MixedScenario();
  const Report report = BuildReport(s.plan, s.workloads, s.fleet);
  const Baseline& balanced = FindBaseline(report, "all-balanced");
  // A100-80GB all-balanced = 1g.10gb x2, 2g.20gb, 3g.40gb. embed: 3 x 1g (2 GPUs' worth), chat:
  // 1 x 3g, resnet: 3g is the best throughput per GPU share (450 per 1) -> 2 x 3g. 3g: 3 -> 3 GPUs.
  EXPECT_EQ(balanced.gpus, 3);
  EXPECT_DOUBLE_EQ(balanced.cost_per_hour, 9.0);
  EXPECT_EQ(balanced.gpus_saved, 0);
  EXPECT_FALSE(balanced.exceeds_fleet);
}

TEST(Report, AllBalancedLosesOnManySmallInstances) {
  // Seven 1-replica-sized instances fill one A100 with 7 x 1g.10gb; all-balanced has two 1g per
  // GPU, so it needs 4 GPUs; one per GPU needs 7.
  const hw::GpuModel& a100 = Model("A100-80GB");
  WorkloadSet workloads;
  workloads.workloads.push_back(Replicas("tiny", "t", 7, 4));
  const Fleet fleet = OneNode({GpuGroup{"A100-80GB", 8, 2.5, true, ""}});
  PlanResult plan;
  plan.sizing.push_back(ReplicaSizing(7, {Option(a100, "1g.10gb", 1), Option(a100, "", 1)}));
  PlannedGpu gpu = Gpu(0, 0, a100, 2.5);
  for (int start = 0; start < 7; ++start) Put(gpu, P(a100, "1g.10gb"), start, 0, 1);
  plan.gpus.push_back(gpu);
  for (int i = 1; i < 8; ++i) plan.gpus.push_back(Gpu(0, i, a100, 2.5));
  const Report report = BuildReport(plan, workloads, fleet);
  EXPECT_EQ(FindBaseline(report, "one-workload-per-GPU").gpus, 7);
  EXPECT_EQ(FindBaseline(report, "all-balanced").gpus, 4);
  EXPECT_EQ(FindBaseline(report, "all-balanced").gpus_saved, 3);
  EXPECT_DOUBLE_EQ(FindBaseline(report, "all-balanced").saved_per_hour, 3 * 2.5);
  EXPECT_EQ(report.compute_slices_used, 7);
  EXPECT_DOUBLE_EQ(report.compute_utilisation, 1.0);
  // Unit 7 stays free and no profile can use it (1g.10gb starts end at 6).
  EXPECT_THAT(report.gpus[0].free_units, ElementsAre(7));
  EXPECT_THAT(report.gpus[0].unusable_units, ElementsAre(7));
  EXPECT_TRUE(report.gpus[0].free_profiles.empty());
  EXPECT_THAT(report.verdict, HasSubstr("MIG pays off"));
  // Single point of failure: every replica is on one GPU.
  EXPECT_THAT(report.single_points_of_failure, ElementsAre("tiny"));
}

TEST(Report, BalancedFallsBackToWholeGpusForWorkloadsItCannotHold) {
  // A 60 GiB workload fits only 7g.80gb or a whole GPU: all-balanced has neither, so it is
  // counted on a whole GPU with a note.
  const hw::GpuModel& a100 = Model("A100-80GB");
  WorkloadSet workloads;
  workloads.workloads.push_back(Replicas("big", "t", 1, 60));
  const Fleet fleet = OneNode({GpuGroup{"A100-80GB", 2, 2.0, true, ""}});
  PlanResult plan;
  plan.sizing.push_back(ReplicaSizing(1, {Option(a100, "7g.80gb", 1), Option(a100, "", 1)}));
  PlannedGpu gpu = Gpu(0, 0, a100, 2.0);
  Put(gpu, kWholeGpu, 0, 0, 1);
  plan.gpus = {gpu, Gpu(0, 1, a100, 2.0)};
  const Report report = BuildReport(plan, workloads, fleet);
  const Baseline& balanced = FindBaseline(report, "all-balanced");
  EXPECT_EQ(balanced.gpus, 1);
  ASSERT_EQ(balanced.notes.size(), 1u);
  EXPECT_THAT(balanced.notes[0], HasSubstr("big"));
  EXPECT_EQ(report.whole_gpus, 1);
  EXPECT_EQ(report.mig_gpus, 0);
  EXPECT_EQ(report.gpus[0].layout, "whole GPU");
  EXPECT_EQ(report.gpus[0].instances[0].gi_id, -1);
  EXPECT_THAT(report.verdict, HasSubstr("does not pay off"));
  const ChecklistItem* full = FindItem(report, "full_gpu_workloads");
  ASSERT_NE(full, nullptr);
  EXPECT_THAT(full->answer, HasSubstr("big"));
  EXPECT_EQ(full->favours_mig, false);
}

TEST(Report, BaselinesUseTheFleetTheyHave) {
  // The L4 is the cheapest whole GPU, but the fleet has one: one per GPU puts the three replicas
  // on A100s, and all-balanced on two A100s (two 1g.10gb each).
  const hw::GpuModel& a100 = Model("A100-80GB");
  const hw::GpuModel& l4 = Model("L4");
  WorkloadSet workloads;
  workloads.workloads.push_back(Replicas("small", "t", 3, 8));
  Fleet fleet =
      OneNode({GpuGroup{"L4", 1, 0.5, true, ""}, GpuGroup{"A100-80GB", 4, 2.0, true, ""}});
  PlanResult plan;
  plan.sizing.push_back(
      ReplicaSizing(3, {Option(a100, "1g.10gb", 1), Option(a100, "", 1), Option(l4, "", 1)}));
  PlannedGpu gpu = Gpu(0, 1, a100, 2.0);
  for (int start = 0; start < 3; ++start) Put(gpu, P(a100, "1g.10gb"), start, 0, 1);
  plan.gpus = {Gpu(0, 0, l4, 0.5), gpu, Gpu(0, 2, a100, 2.0), Gpu(0, 3, a100, 2.0),
               Gpu(0, 4, a100, 2.0)};
  const Report report = BuildReport(plan, workloads, fleet);
  const Baseline& one = FindBaseline(report, "one-workload-per-GPU");
  EXPECT_THAT(one.gpus_by_model, ElementsAre(Pair("A100-80GB", 3)));
  EXPECT_DOUBLE_EQ(one.cost_per_hour, 6.0);
  EXPECT_FALSE(one.exceeds_fleet);
  const Baseline& balanced = FindBaseline(report, "all-balanced");
  EXPECT_THAT(balanced.gpus_by_model, ElementsAre(Pair("A100-80GB", 2)));
  EXPECT_DOUBLE_EQ(balanced.cost_per_hour, 4.0);
  EXPECT_EQ(balanced.gpus_saved, 1);
  // With enough L4s, both baselines take them (0.5 per replica beats an A100 share of 1.0).
  fleet.nodes[0].gpus[0].count = 3;
  const Report more = BuildReport(plan, workloads, fleet);
  EXPECT_THAT(FindBaseline(more, "one-workload-per-GPU").gpus_by_model, ElementsAre(Pair("L4", 3)));
  EXPECT_THAT(FindBaseline(more, "all-balanced").gpus_by_model, ElementsAre(Pair("L4", 3)));
}

TEST(Report, Utilisation) {
  const Scenario s = MixedScenario();
  const Report report = BuildReport(s.plan, s.workloads, s.fleet);
  // Compute: 6 + 6 + 1 of 3 x 7 slices.
  EXPECT_EQ(report.compute_slices_used, 13);
  EXPECT_EQ(report.compute_slices_total, 21);
  EXPECT_NEAR(report.compute_utilisation, 13.0 / 21.0, 1e-12);
  // Memory: embed 3 x 8 x 1.15, chat 30 x 1.15, resnet the instances (2 x 2g.20gb + 3g.40gb).
  const hw::GpuModel& a100 = Model("A100-80GB");
  const double g2 = static_cast<double>(a100.mig->FindProfile("2g.20gb")->memory_mib) / 1024.0;
  const double g3 = static_cast<double>(a100.mig->FindProfile("3g.40gb")->memory_mib) / 1024.0;
  const double needed = 3 * 8 * 1.15 + 30 * 1.15 + 2 * g2 + g3;
  EXPECT_NEAR(report.memory_needed_gib, needed, 1e-9);
  EXPECT_DOUBLE_EQ(report.memory_total_gib, 3 * 80.0);
  EXPECT_NEAR(report.memory_utilisation, needed / 240.0, 1e-12);
}

TEST(Report, StrandedCapacityA100ThreeGPlusTwoG) {
  // 3g.40gb@0 + 2g.20gb@4 leaves units 6 and 7: one 1g.10gb (at 6) or one 1g.20gb (6-7).
  const hw::GpuModel& a100 = Model("A100-80GB");
  WorkloadSet workloads;
  workloads.workloads.push_back(Replicas("a", "t1", 1, 30));
  workloads.workloads.push_back(Replicas("b", "t2", 1, 15));
  const Fleet fleet = OneNode({GpuGroup{"A100-80GB", 1, 2.0, true, ""}});
  PlanResult plan;
  plan.sizing.push_back(ReplicaSizing(1, {Option(a100, "3g.40gb", 1)}));
  plan.sizing.push_back(ReplicaSizing(1, {Option(a100, "2g.20gb", 1)}));
  PlannedGpu gpu = Gpu(0, 0, a100, 2.0);
  Put(gpu, P(a100, "3g.40gb"), 0, 0, 1);
  Put(gpu, P(a100, "2g.20gb"), 4, 1, 1);
  plan.gpus = {gpu};
  const Report report = BuildReport(plan, workloads, fleet);
  const ReportGpu& out = report.gpus[0];
  EXPECT_THAT(out.free_units, ElementsAre(6, 7));
  EXPECT_THAT(out.free_profiles, ElementsAre(Pair("1g.10gb", 1), Pair("1g.20gb", 1)));
  EXPECT_TRUE(out.unusable_units.empty());
  EXPECT_EQ(report.gpus_with_free_capacity, 1);
  EXPECT_EQ(report.gpus_with_unusable_units, 0);
  const std::string text = RenderText(report);
  EXPECT_THAT(text,
              HasSubstr("n GPU 0 (A100-80GB): units 6-7 free; still fits (each alone) 1 x 1g.10gb, "
                        "1 x 1g.20gb"));
}

TEST(Report, StrandedUnitBehindTheLastOneG) {
  const Scenario s = MixedScenario();
  const Report report = BuildReport(s.plan, s.workloads, s.fleet);
  // 3g@0 + 2g@4 + 1g@6: unit 7 is free and unusable.
  EXPECT_THAT(report.gpus[0].unusable_units, ElementsAre(7));
  EXPECT_TRUE(report.gpus[0].free_profiles.empty());
  // node-b GPU 1 holds one 1g.10gb at 0: plenty of room.
  EXPECT_FALSE(report.gpus[3].free_profiles.empty());
  EXPECT_EQ(report.gpus_with_unusable_units, 2);
  EXPECT_EQ(report.gpus_with_free_capacity, 1);
}

TEST(Report, RedundancyAndLosses) {
  const Scenario s = MixedScenario();
  const Report report = BuildReport(s.plan, s.workloads, s.fleet);
  const ReportWorkload& embed = report.workloads[0];
  EXPECT_EQ(embed.instances, 3);
  EXPECT_EQ(embed.gpus, 3);
  EXPECT_EQ(embed.nodes, 2);
  EXPECT_FALSE(embed.single_point_of_failure);
  EXPECT_TRUE(report.workloads[1].single_point_of_failure);  // chat: one instance
  EXPECT_EQ(report.workloads[2].gpus, 2);
  EXPECT_THAT(report.single_points_of_failure, ElementsAre("chat"));

  ASSERT_EQ(report.gpu_losses.size(), 3u);
  // Losing node-a GPU 0 takes chat (1 -> 0), one embed replica (3 -> 2) and 300 req/s of resnet
  // (1050 -> 750 < 900): all three drop below demand.
  ASSERT_TRUE(report.worst_gpu_loss.has_value());
  EXPECT_EQ(report.worst_gpu_loss->node, "node-a");
  EXPECT_EQ(report.worst_gpu_loss->gpu, 0);
  EXPECT_EQ(report.worst_gpu_loss->workloads_below_demand, 3);
  const Loss& b0 = report.gpu_losses[1];
  EXPECT_EQ(b0.node, "node-b");
  EXPECT_EQ(b0.workloads_below_demand, 2);
  ASSERT_EQ(b0.impacts.size(), 2u);
  EXPECT_EQ(b0.impacts[1].workload, "resnet");
  EXPECT_DOUBLE_EQ(b0.impacts[1].capacity_lost, 750);
  EXPECT_DOUBLE_EQ(b0.impacts[1].capacity_left, 300);
  EXPECT_TRUE(b0.impacts[1].below_demand);
  // Losing node-b GPU 1 only costs one embed replica.
  EXPECT_EQ(report.gpu_losses[2].workloads_below_demand, 1);

  ASSERT_EQ(report.node_losses.size(), 2u);
  EXPECT_EQ(report.worst_node_loss->node, "node-a");
  EXPECT_EQ(report.worst_node_loss->gpu, -1);
}

TEST(Report, SurplusCapacitySurvivesALoss) {
  // Two 1g instances for a 1-replica workload with min_instances 2 on two GPUs: losing one keeps
  // the demand.
  const hw::GpuModel& h100 = Model("H100-80GB");
  WorkloadSet workloads;
  Workload w = Replicas("svc", "t", 1, 5);
  w.min_instances = 2;
  workloads.workloads.push_back(w);
  const Fleet fleet = OneNode({GpuGroup{"H100-80GB", 2, 4.0, true, ""}});
  PlanResult plan;
  WorkloadSizing sizing = ReplicaSizing(1, {Option(h100, "1g.10gb", 1), Option(h100, "", 1)});
  sizing.min_instances = 2;
  plan.sizing.push_back(sizing);
  PlannedGpu g0 = Gpu(0, 0, h100, 4.0);
  PlannedGpu g1 = Gpu(0, 1, h100, 4.0);
  Put(g0, P(h100, "1g.10gb"), 0, 0, 1);
  Put(g1, P(h100, "1g.10gb"), 0, 0, 1);
  plan.gpus = {g0, g1};
  const Report report = BuildReport(plan, workloads, fleet);
  EXPECT_TRUE(report.single_points_of_failure.empty());
  ASSERT_TRUE(report.worst_gpu_loss.has_value());
  EXPECT_EQ(report.worst_gpu_loss->workloads_below_demand, 0);
  // one per GPU honours min_instances: 2 GPUs, like the plan.
  EXPECT_EQ(FindBaseline(report, "one-workload-per-GPU").gpus, 2);
  EXPECT_EQ(FindBaseline(report, "one-workload-per-GPU").gpus_saved, 0);
  EXPECT_THAT(report.verdict, HasSubstr("does not pay off"));
}

TEST(Report, Checklist) {
  const Scenario s = MixedScenario();
  const Report report = BuildReport(s.plan, s.workloads, s.fleet);
  const ChecklistItem* small = FindItem(report, "small_workloads");
  ASSERT_NE(small, nullptr);
  // embed (1g) and chat (3g of 7) fit in less than half; resnet's demand needs more than 3g.
  EXPECT_THAT(small->answer, HasSubstr("2 of 3 (embed, chat)"));
  EXPECT_EQ(small->favours_mig, true);
  const ChecklistItem* saved = FindItem(report, "gpus_saved");
  ASSERT_NE(saved, nullptr);
  EXPECT_THAT(saved->answer, HasSubstr("2 GPUs fewer (5 -> 3)"));
  EXPECT_EQ(saved->favours_mig, true);
  const ChecklistItem* full = FindItem(report, "full_gpu_workloads");
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(full->answer, "none");
  const ChecklistItem* isolation = FindItem(report, "isolation");
  ASSERT_NE(isolation, nullptr);
  EXPECT_THAT(isolation->answer, HasSubstr("yes: 2 GPUs host several tenants"));
  EXPECT_EQ(isolation->favours_mig, true);
  const ChecklistItem* binding = FindItem(report, "memory_or_compute");
  ASSERT_NE(binding, nullptr);
  EXPECT_THAT(binding->answer, HasSubstr("2 workloads sized by memory, 1 by throughput"));
  ASSERT_NE(FindItem(report, "must_stay_whole"), nullptr);
  ASSERT_NE(FindItem(report, "vs_all_balanced"), nullptr);
  ASSERT_NE(FindItem(report, "stranded_capacity"), nullptr);
  EXPECT_THAT(report.verdict, HasSubstr("MIG pays off: 2 GPUs fewer"));
  EXPECT_THAT(report.verdict, HasSubstr("4380.00 USD per month (40%)"));
}

TEST(Report, UnplacedWorkloadsAreReportedAndLeftOutOfBaselines) {
  Scenario s = MixedScenario();
  Workload huge = Replicas("huge", "t", 4, 200);
  s.workloads.workloads.push_back(huge);
  WorkloadSizing none;
  none.demand = 4;
  none.unsatisfiable = "200 GiB peak fits no GPU of the fleet";
  s.plan.sizing.push_back(none);
  s.plan.unplaced.push_back({3, "200 GiB peak fits no GPU of the fleet"});
  const Report report = BuildReport(s.plan, s.workloads, s.fleet);
  ASSERT_EQ(report.unplaced.size(), 1u);
  EXPECT_EQ(report.unplaced[0].first, "huge");
  EXPECT_FALSE(report.workloads[3].placed);
  EXPECT_EQ(FindBaseline(report, "one-workload-per-GPU").gpus, 5);  // unchanged
  const std::string text = RenderText(report);
  EXPECT_THAT(text, HasSubstr("\nUnplaced\n  huge: 200 GiB peak fits no GPU of the fleet"));
  EXPECT_THAT(text, HasSubstr("NOT PLACED"));
}

TEST(Report, WithoutCostsSpeaksOfGpus) {
  const Scenario s = MixedScenario(/*costs_given=*/false);
  const Report report = BuildReport(s.plan, s.workloads, s.fleet);
  EXPECT_FALSE(report.costs_given);
  EXPECT_DOUBLE_EQ(report.cost_per_hour, 3.0);
  EXPECT_DOUBLE_EQ(FindBaseline(report, "one-workload-per-GPU").saved_per_hour, 2.0);
  const std::string text = RenderText(report);
  EXPECT_THAT(text, HasSubstr("GPU-hours per month"));
  EXPECT_THAT(text, Not(HasSubstr("USD")));
  EXPECT_THAT(report.verdict, Not(HasSubstr("USD")));
}

TEST(Report, TextHasEverySection) {
  Scenario s = MixedScenario();
  s.plan.proven_optimal = false;
  s.plan.solver = "lp-rounding";
  s.plan.lower_bound_cost = 8.0;
  s.plan.notes.push_back("time limit reached");
  const Report report = BuildReport(s.plan, s.workloads, s.fleet);
  EXPECT_NEAR(report.gap, 1.0 / 9.0, 1e-12);
  const std::string text = RenderText(report);
  for (const char* section :
       {"\nSizing\n", "\nPlan\n", "\nCost (USD)\n", "\nUtilisation (of the used GPUs)\n",
        "\nStranded capacity\n", "\nRedundancy\n", "\nDoes MIG pay off here?\n", "\nNotes\n"}) {
    EXPECT_THAT(text, HasSubstr(section));
  }
  EXPECT_THAT(text, Not(HasSubstr("\nUnplaced\n")));
  EXPECT_THAT(text, HasSubstr("lp-rounding"));
  EXPECT_THAT(text, HasSubstr("gap 11.1%"));
  EXPECT_THAT(text, HasSubstr("time limit reached"));
  EXPECT_THAT(text, HasSubstr("sized by hand"));
  EXPECT_THAT(text, HasSubstr("Worst single GPU loss: node-a GPU 0 (3 workloads below demand)"));
  EXPECT_THAT(text, HasSubstr("1 GPU is not used"));
  EXPECT_THAT(RenderText(report, {.explanations = false}), Not(HasSubstr("sized by hand")));
}

TEST(Report, ReplannedInstancesAreMarked) {
  Scenario s = MixedScenario();
  EXPECT_THAT(RenderText(BuildReport(s.plan, s.workloads, s.fleet)), Not(HasSubstr("RE-PLAN")));
  s.plan.gpus[0].instances[0].kept = true;
  const Report report = BuildReport(s.plan, s.workloads, s.fleet);
  EXPECT_TRUE(report.gpus[0].instances[0].kept);
  EXPECT_FALSE(report.gpus[0].instances[1].kept);
  const std::string text = RenderText(report);
  EXPECT_THAT(text, HasSubstr("RE-PLAN"));
  EXPECT_THAT(text, HasSubstr("chat            1  kept"));
  EXPECT_EQ(ToJson(report)["gpus"][0]["instances"][0]["kept"], true);
}

TEST(Report, JsonAndYaml) {
  const Scenario s = MixedScenario();
  const Report report = BuildReport(s.plan, s.workloads, s.fleet);
  const nlohmann::json json = ToJson(report);
  EXPECT_EQ(json["summary"]["gpus_used"], 3);
  EXPECT_EQ(json["summary"]["cost_per_month"], 6570.0);
  EXPECT_EQ(json["baselines"][0]["name"], "one-workload-per-GPU");
  EXPECT_EQ(json["baselines"][0]["saved_per_month"], 4380.0);
  EXPECT_EQ(json["utilisation"]["compute_slices_used"], 13);
  EXPECT_EQ(json["gpus"][0]["unusable_units"], nlohmann::json::array({7}));
  EXPECT_EQ(json["gpus"][0]["instances"][0]["workload"], "chat");
  EXPECT_EQ(json["redundancy"]["single_points_of_failure"], nlohmann::json::array({"chat"}));
  EXPECT_EQ(json["redundancy"]["worst_gpu_loss"]["gpu"], 0);
  EXPECT_TRUE(json["mig_pays_off"]["checklist"].is_array());
  EXPECT_TRUE(json["solver"]["proven_optimal"].get<bool>());

  const YAML::Node yaml = YAML::Load(util::JsonToYaml(json));
  EXPECT_EQ(yaml["summary"]["gpus_used"].as<int>(), 3);
  EXPECT_DOUBLE_EQ(yaml["summary"]["cost_per_month"].as<double>(), 6570.0);
  EXPECT_EQ(yaml["workloads"][0]["name"].as<std::string>(), "embed");
  EXPECT_TRUE(yaml["workloads"][0]["placed"].as<bool>());
  EXPECT_TRUE(yaml["redundancy"]["worst_node_loss"]["gpu"].IsNull());
  EXPECT_EQ(yaml["gpus"][1]["instances"].size(), 0u);
}

TEST(Report, YamlQuotesStringsThatLookLikeOtherTypes) {
  const nlohmann::json json = {{"a", "yes"},  {"b", "123"},       {"c", ""},
                               {"d", "null"}, {"e", "1.5"},       {"f", 1.5},
                               {"g", true},   {"h", "node-a: x"}, {"i", "3g.40gb"},
                               {"j", "1:30"}, {"k", "0x1F"},      {"l", nlohmann::json::object()}};
  const YAML::Node yaml = YAML::Load(util::JsonToYaml(json));
  EXPECT_EQ(yaml["a"].Tag(), "!");  // quoted scalars are tagged "!" (non-plain)
  EXPECT_EQ(yaml["a"].as<std::string>(), "yes");
  EXPECT_EQ(yaml["b"].Tag(), "!");
  EXPECT_EQ(yaml["c"].as<std::string>(), "");
  EXPECT_FALSE(yaml["d"].IsNull());
  EXPECT_EQ(yaml["e"].Tag(), "!");
  EXPECT_EQ(yaml["f"].Tag(), "?");
  EXPECT_DOUBLE_EQ(yaml["f"].as<double>(), 1.5);
  EXPECT_TRUE(yaml["g"].as<bool>());
  EXPECT_EQ(yaml["h"].as<std::string>(), "node-a: x");
  EXPECT_EQ(yaml["i"].Tag(), "?");  // a profile name stays plain
  EXPECT_EQ(yaml["i"].as<std::string>(), "3g.40gb");
  EXPECT_EQ(yaml["j"].Tag(), "!");
  EXPECT_EQ(yaml["k"].Tag(), "!");
  EXPECT_TRUE(yaml["l"].IsMap());
}

// The GIs an entry of `file` resolves to for one GPU, as sorted (profile, start) pairs.
std::vector<std::pair<int, int>> Resolved(const spec::MigConfigFile& file,
                                          const std::string& config, int index,
                                          const hw::GpuModel& model, bool* mig_enabled) {
  absl::StatusOr<const std::vector<spec::ConfigEntry>*> entries = spec::SelectConfig(file, config);
  EXPECT_TRUE(entries.ok()) << entries.status();
  if (!entries.ok()) return {};
  absl::StatusOr<const spec::ConfigEntry*> entry =
      spec::EntryForGpu(**entries, index, model.pci_device_ids.back());
  EXPECT_TRUE(entry.ok()) << entry.status();
  if (!entry.ok() || *entry == nullptr) {
    ADD_FAILURE() << "no entry for GPU " << index << " in " << config;
    return {};
  }
  *mig_enabled = (*entry)->mig_enabled;
  absl::StatusOr<std::vector<spec::DesiredGi>> gis = spec::ResolveEntry(**entry, model);
  EXPECT_TRUE(gis.ok()) << gis.status();
  if (!gis.ok()) return {};
  std::vector<std::pair<int, int>> out;
  for (const spec::DesiredGi& gi : *gis) out.emplace_back(gi.profile, gi.start.value_or(-1));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::pair<int, int>> Planned(const PlannedGpu& gpu, bool starts) {
  std::vector<std::pair<int, int>> out;
  for (const PlannedInstance& i : gpu.instances) out.emplace_back(i.profile, starts ? i.start : -1);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Report, MigPartedConfigRoundTrip) {
  Scenario s = MixedScenario();
  // A whole GPU in node-a (GPU 1), to get a disabled entry next to the unused one... node-a GPU 1
  // stays unused; make node-b GPU 1 the same layout as node-b GPU 0 to test grouping.
  const hw::GpuModel& a100 = Model("A100-80GB");
  s.plan.gpus[3] = s.plan.gpus[2];
  s.plan.gpus[3].index = 1;
  for (bool with_placements : {true, false}) {
    const spec::MigConfigFile file = ToMigPartedConfig(s.plan, s.fleet, with_placements);
    ASSERT_EQ(file.configs.size(), 2u);
    EXPECT_EQ(file.configs[0].first, "gpuslice-node-a");
    EXPECT_EQ(file.configs[1].first, "gpuslice-node-b");
    const std::vector<spec::ConfigEntry>& b = file.configs[1].second;
    ASSERT_EQ(b.size(), 1u);  // identical layouts share one entry
    EXPECT_THAT(b[0].devices.indices, ElementsAre(0, 1));
    EXPECT_EQ(b[0].device_filter.size(), a100.pci_device_ids.size());
    EXPECT_EQ(b[0].device_filter[0], spec::FullDeviceId(a100.pci_device_ids[0]));
    EXPECT_EQ(b[0].placements.empty(), !with_placements);
    const std::vector<spec::ConfigEntry>& a = file.configs[0].second;
    ASSERT_EQ(a.size(), 2u);
    EXPECT_TRUE(a[0].mig_enabled);
    EXPECT_FALSE(a[1].mig_enabled);  // the unused GPU
    EXPECT_THAT(a[1].devices.indices, ElementsAre(1));

    for (spec::OutputFormat format : {spec::OutputFormat::kYaml, spec::OutputFormat::kJson}) {
      const std::string text = spec::WriteMigPartedConfig(file, format);
      absl::StatusOr<spec::MigConfigFile> parsed = spec::ParseMigPartedConfig(text, "plan.yaml");
      ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
      for (const PlannedGpu& gpu : s.plan.gpus) {
        const std::string config = gpu.node == 0 ? "gpuslice-node-a" : "gpuslice-node-b";
        bool mig = false;
        const auto gis = Resolved(*parsed, config, gpu.index, a100, &mig);
        EXPECT_EQ(mig, gpu.mig_enabled);
        EXPECT_EQ(gis, Planned(gpu, with_placements)) << config << " GPU " << gpu.index;
      }
    }
  }
}

TEST(Report, MigPartedConfigWholeGpuIsDisabled) {
  const hw::GpuModel& h100 = Model("H100-80GB");
  WorkloadSet workloads;
  workloads.workloads.push_back(Replicas("big", "t", 1, 70));
  const Fleet fleet = OneNode({GpuGroup{"H100-80GB", 1, 4.0, false, ""}}, "solo");
  PlanResult plan;
  plan.sizing.push_back(ReplicaSizing(1, {Option(h100, "", 1)}));
  PlannedGpu gpu = Gpu(0, 0, h100, 4.0);
  gpu.mig_allowed = false;
  Put(gpu, kWholeGpu, 0, 0, 1);
  plan.gpus = {gpu};
  const spec::MigConfigFile file = ToMigPartedConfig(plan, fleet, true);
  ASSERT_EQ(file.configs.size(), 1u);
  ASSERT_EQ(file.configs[0].second.size(), 1u);
  EXPECT_FALSE(file.configs[0].second[0].mig_enabled);
  EXPECT_TRUE(file.configs[0].second[0].mig_devices.empty());
  bool mig = true;
  EXPECT_TRUE(Resolved(file, "gpuslice-solo", 0, h100, &mig).empty());
  EXPECT_FALSE(mig);
  const Report report = BuildReport(plan, workloads, fleet);
  const ChecklistItem* whole = FindItem(report, "must_stay_whole");
  ASSERT_NE(whole, nullptr);
  EXPECT_THAT(whole->answer, HasSubstr("1 of 1 GPUs must stay whole"));
  EXPECT_EQ(whole->favours_mig, false);
}

TEST(Report, AssignmentMap) {
  const Scenario s = MixedScenario();
  const nlohmann::json map = AssignmentJson(s.plan, s.workloads, s.fleet);
  ASSERT_EQ(map["workloads"].size(), 3u);
  const nlohmann::json& chat = map["workloads"][1];
  EXPECT_EQ(chat["name"], "chat");
  ASSERT_EQ(chat["instances"].size(), 1u);
  EXPECT_EQ(chat["instances"][0]["node"], "node-a");
  EXPECT_EQ(chat["instances"][0]["gpu"], 0);
  EXPECT_EQ(chat["instances"][0]["profile"], "3g.40gb");
  EXPECT_EQ(chat["instances"][0]["start"], 0);
  const nlohmann::json& resnet = map["workloads"][2];
  EXPECT_TRUE(resnet["by_throughput"].get<bool>());
  ASSERT_EQ(resnet["instances"].size(), 3u);
  double capacity = 0;
  for (const nlohmann::json& i : resnet["instances"]) capacity += i["capacity"].get<double>();
  EXPECT_DOUBLE_EQ(capacity, 1050);
  ASSERT_EQ(map["gpus"].size(), 4u);
  EXPECT_EQ(map["gpus"][1]["used"], false);
  EXPECT_TRUE(map["gpus"][1]["instances"].empty());
  // 3g.40gb at 4 is GPU instance 2 (the second half of the buddy tree); at 0 it is 1.
  EXPECT_EQ(map["gpus"][2]["instances"][0]["gi_id"], 1);
  EXPECT_EQ(map["gpus"][2]["instances"][0]["workload"], "resnet");
}

}  // namespace
}  // namespace gpuslice::plan
