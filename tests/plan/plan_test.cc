#include "gpuslice/plan/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"
#include "planner.h"
#include "require.h"

namespace gpuslice::plan {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

Fleet OneNode(const std::string& model, int count, double cost = 1, bool mig_allowed = true) {
  Fleet fleet;
  Node node;
  node.name = "node-a";
  node.gpus.push_back(GpuGroup{model, count, cost, mig_allowed, "fleet.yaml:3"});
  fleet.nodes.push_back(node);
  return fleet;
}

Workload Replicas(const std::string& name, int replicas, double peak_gib,
                  WorkloadKind kind = WorkloadKind::kInference) {
  Workload workload;
  workload.name = name;
  workload.kind = kind;
  workload.replicas = replicas;
  workload.peak_memory_gib = peak_gib;
  workload.origin = "workloads.yaml:1";
  return workload;
}

std::string Names(const PlanResult& plan, const PlannedGpu& gpu) {
  (void)plan;
  std::string text;
  for (const PlannedInstance& instance : gpu.instances) {
    text += (instance.profile == kWholeGpu
                 ? std::string("whole")
                 : gpu.model->mig->profiles[static_cast<size_t>(instance.profile)].name) +
            "@" + std::to_string(instance.start) + " ";
  }
  return text;
}

PlanResult MustPlan(const WorkloadSet& set, const Fleet& fleet, SolveMode mode) {
  PlanOptions options;
  options.mode = mode;
  absl::StatusOr<PlanResult> plan = Plan(set, fleet, Catalog(), options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  EXPECT_THAT(CheckPlan(*plan, set, fleet), IsEmpty());
  return *std::move(plan);
}

TEST(Plan, SevenSmallReplicasFillOneA100) {
  WorkloadSet set;
  set.workloads.push_back(Replicas("embed", 4, 7.0));
  set.workloads.push_back(Replicas("rerank", 3, 8.0));
  for (SolveMode mode : {SolveMode::kFast, SolveMode::kExact}) {
    const PlanResult plan = MustPlan(set, OneNode("A100-80GB", 4), mode);
    EXPECT_EQ(plan.gpus_used, 1);
    EXPECT_EQ(plan.lower_bound_gpus, 1);
    EXPECT_TRUE(plan.proven_optimal);
    EXPECT_THAT(plan.unplaced, IsEmpty());
  }
}

TEST(Plan, ReplicasAreSpreadOverGpus) {
  WorkloadSet set;
  set.workloads.push_back(Replicas("a", 2, 30.0));  // 3g.40gb each
  set.workloads.push_back(Replicas("b", 2, 30.0));
  const PlanResult plan = MustPlan(set, OneNode("A100-80GB", 4), SolveMode::kExact);
  EXPECT_EQ(plan.gpus_used, 2);
  // Each workload has one instance on each of the two GPUs.
  for (int w = 0; w < 2; ++w) {
    std::set<int> gpus;
    for (size_t g = 0; g < plan.gpus.size(); ++g) {
      for (const PlannedInstance& instance : plan.gpus[g].instances) {
        if (instance.workload == w) gpus.insert(static_cast<int>(g));
      }
    }
    EXPECT_EQ(gpus.size(), 2u) << "workload " << w;
  }
}

TEST(Plan, UnsatisfiableWorkloadIsReportedNotDropped) {
  WorkloadSet set;
  set.workloads.push_back(Replicas("huge", 1, 200.0));
  set.workloads.push_back(Replicas("small", 1, 5.0));
  const PlanResult plan = MustPlan(set, OneNode("A100-80GB", 1), SolveMode::kAuto);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_EQ(plan.unplaced[0].first, 0);
  EXPECT_THAT(plan.unplaced[0].second, HasSubstr("more than the whole GPU"));
  EXPECT_EQ(plan.gpus_used, 1);
}

TEST(Plan, FleetTooSmallLeavesWorkloadsUnplaced) {
  WorkloadSet set;
  set.workloads.push_back(Replicas("big", 3, 60.0));  // one 7g each
  const PlanResult plan = MustPlan(set, OneNode("A100-80GB", 2), SolveMode::kExact);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_THAT(plan.unplaced[0].second, HasSubstr("too little room"));
  EXPECT_EQ(plan.gpus_used, 0);
}

TEST(Plan, WholeOnlyGpusTakeOnlyWholeGpuWork) {
  WorkloadSet set;
  set.workloads.push_back(Replicas("notebook", 2, 6.0, WorkloadKind::kNotebook));
  Fleet fleet = OneNode("A100-80GB", 2, 1, /*mig_allowed=*/false);
  const PlanResult plan = MustPlan(set, fleet, SolveMode::kAuto);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_THAT(plan.unplaced[0].second, HasSubstr("must stay whole"));
}

TEST(Plan, HeterogeneousFleetPrefersTheCheaperCard) {
  WorkloadSet set;
  set.workloads.push_back(Replicas("svc", 2, 18.0));
  Fleet fleet = OneNode("H100-80GB", 2, 4.0);
  fleet.nodes[0].gpus.push_back(GpuGroup{"A100-80GB", 2, 2.0, true, "fleet.yaml:5"});
  const PlanResult plan = MustPlan(set, fleet, SolveMode::kExact);
  EXPECT_DOUBLE_EQ(plan.cost_per_hour, 2.0);
  EXPECT_TRUE(plan.proven_optimal);
  for (const PlannedGpu& gpu : plan.gpus) {
    if (gpu.used) {
      EXPECT_EQ(gpu.model->id, "A100-80GB");
    }
  }
}

// List prices a few cents apart on four models, with the cheap cards too few: the fast plan's
// bound does not prove it, so exact mode branches on GPU counts per price, and its plan costs
// exactly what CBC proves optimal for the whole program.
TEST(Plan, ListPricesAreProvenOptimalByBranchAndPrice) {
  WorkloadSet set;
  const double peaks[] = {7.0, 18.0, 35.0, 9.0, 60.0, 14.0, 22.0, 40.0, 5.0, 70.0};
  for (int w = 0; w < 10; ++w) {
    set.workloads.push_back(Replicas("svc" + std::to_string(w), 1 + w % 3, peaks[w]));
  }
  Fleet fleet = OneNode("A100-80GB", 3, 1.79);
  fleet.nodes[0].gpus.push_back(GpuGroup{"H100-80GB", 6, 2.99, true, "fleet.yaml:5"});
  fleet.nodes[0].gpus.push_back(GpuGroup{"H200-141GB", 4, 3.79, true, "fleet.yaml:6"});
  fleet.nodes[0].gpus.push_back(GpuGroup{"A30-24GB", 2, 0.89, true, "fleet.yaml:7"});
  fleet.nodes[0].gpus.push_back(GpuGroup{"L4", 3, 0.80, false, "fleet.yaml:8"});
  const PlanResult plan = MustPlan(set, fleet, SolveMode::kExact);
  EXPECT_THAT(plan.unplaced, IsEmpty());
  EXPECT_EQ(plan.solver, "branch-and-price");
  EXPECT_TRUE(plan.proven_optimal);
  EXPECT_NEAR(plan.cost_per_hour, plan.lower_bound_cost, 1e-9);
  const absl::StatusOr<std::optional<double>> optimum =
      internal::WholeProgramOptimum(set, fleet, Catalog(), 60);
  ASSERT_TRUE(optimum.ok()) << optimum.status();
  ASSERT_TRUE(optimum->has_value());
  EXPECT_NEAR(plan.cost_per_hour, **optimum, 1e-9);
}

TEST(Plan, NotebooksStaySmallAndFineTunesBig) {
  WorkloadSet set;
  set.workloads.push_back(Replicas("nb", 1, 6.0, WorkloadKind::kNotebook));
  set.workloads.push_back(Replicas("ft", 1, 6.0, WorkloadKind::kFineTune));
  const PlanResult plan = MustPlan(set, OneNode("H100-80GB", 1), SolveMode::kExact);
  ASSERT_EQ(plan.gpus_used, 1);
  for (const PlannedInstance& instance : plan.gpus[0].instances) {
    const auto& profile = plan.gpus[0].model->mig->profiles[static_cast<size_t>(instance.profile)];
    if (instance.workload == 0) {
      EXPECT_LE(profile.compute_slices, 2) << profile.name;
    } else {
      EXPECT_GE(profile.compute_slices, 2) << profile.name;
    }
  }
}

// ParvaGPU's scenario 1 from the shared data, read with a minimal loader (the product's CSV
// reader has its own tests).
PerfTable LoadParva(const std::string& model) {
  PerfTable table;
  table.gpu_model = "A100-80GB";
  std::ifstream in(std::string(GPUSLICE_SHARED_DIR) + "/data/parvagpu-a100-80gb/" + model + ".csv");
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::stringstream row(line);
    PerfPoint point;
    char comma;
    double per_process = 0, latency_s = 0;
    row >> point.compute_slices >> comma >> point.batch >> comma >> point.processes >> comma >>
        per_process >> comma >> latency_s;
    point.throughput_rps = per_process * point.processes;
    point.latency_ms = latency_s * 1000;
    if (per_process > 0) table.points.push_back(point);
  }
  return table;
}

TEST(Plan, ParvaGpuScenarioOneFitsOnOneGpu) {
  if (!std::ifstream(std::string(GPUSLICE_SHARED_DIR) + "/data/parvagpu-a100-80gb/bert.csv")) {
    GPUSLICE_SKIP_OR_FAIL_IN_CI("../shared/data/parvagpu-a100-80gb is not there");
  }
  const std::map<std::string, std::pair<double, double>> scenario = {
      {"bert", {19, 6434}},        {"densenet121", {353, 183}}, {"inceptionv3", {460, 418.5}},
      {"mobilenetv2", {677, 167}}, {"resnet50", {829, 204.5}},  {"vgg19", {354, 396.5}}};
  WorkloadSet set;
  for (const auto& [model, slo] : scenario) {
    Workload workload;
    workload.name = model;
    workload.throughput_rps = slo.first;
    workload.latency_p99_ms = slo.second;
    workload.perf.push_back(LoadParva(model));
    ASSERT_FALSE(workload.perf.back().points.empty()) << model;
    set.workloads.push_back(workload);
  }
  for (SolveMode mode : {SolveMode::kFast, SolveMode::kExact}) {
    const PlanResult plan = MustPlan(set, OneNode("A100-80GB", 8), mode);
    EXPECT_THAT(plan.unplaced, IsEmpty());
    EXPECT_LE(plan.gpus_used, 2);  // ParvaGPU uses 2
    EXPECT_GE(plan.gpus_used, plan.lower_bound_gpus);
    std::string layouts;
    for (const PlannedGpu& gpu : plan.gpus) {
      if (gpu.used) layouts += Names(plan, gpu) + "| ";
    }
    RecordProperty("layouts", layouts);
    std::cout << "mode " << static_cast<int>(mode) << ": " << plan.gpus_used << " GPUs, bound "
              << plan.lower_bound_gpus << ", " << plan.solve_seconds << " s: " << layouts << "\n";
  }
}

}  // namespace
}  // namespace gpuslice::plan
