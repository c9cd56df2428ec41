#include "gpuslice/plan/sizing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpuslice/hw/catalog.h"

namespace gpuslice::plan {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

const hw::GpuModel* Model(const std::string& id) {
  const hw::GpuModel* model = hw::Catalog::Builtin().Find(id);
  EXPECT_NE(model, nullptr) << id;
  return model;
}

Workload MemoryWorkload(double peak_gib, WorkloadKind kind = WorkloadKind::kInference) {
  Workload workload;
  workload.name = "w";
  workload.kind = kind;
  workload.replicas = 1;
  workload.peak_memory_gib = peak_gib;
  return workload;
}

// The cheapest option's instance name on `model`.
std::string Cheapest(const WorkloadSizing& sizing, const std::string& model) {
  for (const SizedOption& option : sizing.options) {
    if (option.model->id == model) return InstanceName(option);
  }
  return "";
}

TEST(Sizing, PeakPlusHeadroomPicksTheSmallestProfilePerModel) {
  const WorkloadSizing sizing = SizeWorkload(
      MemoryWorkload(13.0), {Model("H200"), Model("H100-80GB"), Model("A100-80GB")}, {});
  EXPECT_TRUE(sizing.unsatisfiable.empty());
  // 13 x 1.15 = 14.95 GiB: more than 1g.10gb, fits H200's 1g.18gb (16 GiB) and the 1g.20gb.
  EXPECT_EQ(Cheapest(sizing, "H200-141GB"), "1g.18gb");
  EXPECT_EQ(Cheapest(sizing, "H100-80GB"), "1g.20gb");
  EXPECT_EQ(Cheapest(sizing, "A100-80GB"), "1g.20gb");
  ASSERT_EQ(sizing.explanation.size(), 3u);
  EXPECT_EQ(sizing.explanation[0], "13 GiB peak + 15% = 14.95 GiB -> 1g.18gb on H200-141GB");
  // 14.2 GiB + 15% = 16.3 GiB no longer fits 1g.18gb (16 GiB).
  EXPECT_EQ(Cheapest(SizeWorkload(MemoryWorkload(14.2), {Model("H200")}, {}), "H200-141GB"),
            "1g.35gb");
}

TEST(Sizing, HeadroomIsAPolicy) {
  SizingPolicy policy;
  policy.memory_headroom = 0;
  const WorkloadSizing sizing = SizeWorkload(MemoryWorkload(9.0), {Model("A100-80GB")}, policy);
  EXPECT_EQ(Cheapest(sizing, "A100-80GB"), "1g.10gb");
  policy.memory_headroom = 0.5;
  EXPECT_EQ(Cheapest(SizeWorkload(MemoryWorkload(9.0), {Model("A100-80GB")}, policy), "A100-80GB"),
            "1g.20gb");
}

TEST(Sizing, OptionsNeverProposeExoticVariantsWithoutMediaNeeds) {
  const WorkloadSizing sizing = SizeWorkload(MemoryWorkload(5), {Model("H100-80GB")}, {});
  for (const SizedOption& option : sizing.options) {
    EXPECT_THAT(InstanceName(option), Not(HasSubstr("+me"))) << InstanceName(option);
    EXPECT_THAT(InstanceName(option), Not(HasSubstr("-me"))) << InstanceName(option);
  }
}

TEST(Sizing, MediaNeedsPickProfilesWithEngines) {
  Workload workload = MemoryWorkload(5);
  workload.media.ofa = 1;  // only the "+me" profile (or the whole GPU) has the OFA on A100
  const WorkloadSizing sizing = SizeWorkload(workload, {Model("A100-80GB")}, {});
  ASSERT_FALSE(sizing.options.empty());
  for (const SizedOption& option : sizing.options) {
    if (option.profile == kWholeGpu) continue;
    EXPECT_GE(option.model->mig->profiles[static_cast<size_t>(option.profile)].engines.ofa, 1)
        << InstanceName(option);
  }
}

TEST(Sizing, NotebooksStayInSmallClasses) {
  const WorkloadSizing small =
      SizeWorkload(MemoryWorkload(6, WorkloadKind::kNotebook), {Model("H100-80GB")}, {});
  for (const SizedOption& option : small.options) {
    EXPECT_LE(option.compute_slices, 2) << InstanceName(option);
    EXPECT_NE(option.profile, kWholeGpu);
  }
  const WorkloadSizing big =
      SizeWorkload(MemoryWorkload(50, WorkloadKind::kNotebook), {Model("H100-80GB")}, {});
  EXPECT_THAT(big.unsatisfiable, HasSubstr("notebooks go to small classes"));
  // A GPU without MIG is the smallest unit it has: a notebook may take it whole.
  const WorkloadSizing l4 =
      SizeWorkload(MemoryWorkload(6, WorkloadKind::kNotebook), {Model("L4")}, {});
  EXPECT_EQ(Cheapest(l4, "L4"), "whole GPU");
}

TEST(Sizing, FineTuneHasAMinimumUnlessMeasured) {
  Workload workload = MemoryWorkload(6, WorkloadKind::kFineTune);
  const WorkloadSizing guessed = SizeWorkload(workload, {Model("A100-80GB")}, {});
  EXPECT_EQ(Cheapest(guessed, "A100-80GB"), "2g.20gb");
  EXPECT_THAT(guessed.explanation[0], HasSubstr("fine-tune: at least 2 compute slices"));
  EXPECT_THAT(guessed.explanation[0], HasSubstr("+ 30%"));
  workload.measured = true;
  EXPECT_EQ(Cheapest(SizeWorkload(workload, {Model("A100-80GB")}, {}), "A100-80GB"), "1g.10gb");
}

TEST(Sizing, TooBigForTheWholeGpuIsExplained) {
  const WorkloadSizing sizing = SizeWorkload(MemoryWorkload(100), {Model("A100-80GB")}, {});
  EXPECT_TRUE(sizing.options.empty());
  EXPECT_THAT(sizing.unsatisfiable, HasSubstr("A100-80GB"));
  EXPECT_THAT(sizing.unsatisfiable, HasSubstr("more than the whole GPU"));
}

TEST(Sizing, AllowedModelsRestrictTheOptions) {
  Workload workload = MemoryWorkload(5);
  workload.gpu_models = {"H100-80GB"};
  const WorkloadSizing sizing =
      SizeWorkload(workload, {Model("A100-80GB"), Model("H100-80GB")}, {});
  for (const SizedOption& option : sizing.options) EXPECT_EQ(option.model->id, "H100-80GB");
  workload.gpu_models = {"H200"};
  EXPECT_THAT(SizeWorkload(workload, {Model("A100-80GB")}, {}).unsatisfiable,
              HasSubstr("none of its allowed GPU models"));
}

PerfTable Table(std::vector<PerfPoint> points) {
  PerfTable table;
  table.gpu_model = "A100-80GB";
  table.points = std::move(points);
  return table;
}

TEST(Sizing, ThroughputUsesTheBestPointWithinTheLatencyBudget) {
  Workload workload;
  workload.name = "svc";
  workload.throughput_rps = 1000;
  workload.latency_p99_ms = 100;  // budget: 2 x latency <= 90 ms
  workload.perf.push_back(Table({
      {1, "", 8, 1, 300, 40},    // 2 x 40 = 80 <= 90: allowed
      {1, "", 16, 1, 400, 50},   // 2 x 50 = 100 > 90: too slow
      {1, "", 32, 2, 900, 20},   // two processes: not used by default
      {3, "", 32, 1, 1300, 44},  // allowed
      {7, "", 64, 1, 2600, 60},  // too slow
      {7, "", 32, 1, 2400, 30},  // allowed
  }));
  const WorkloadSizing sizing = SizeWorkload(workload, {Model("A100-80GB")}, {});
  ASSERT_TRUE(sizing.by_throughput);
  EXPECT_DOUBLE_EQ(sizing.demand, 1000);
  std::map<std::string, std::pair<double, int>> got;
  for (const SizedOption& option : sizing.options) {
    got[InstanceName(option)] = {option.capacity, option.batch};
  }
  EXPECT_EQ(got["1g.10gb"], std::make_pair(300.0, 8));
  EXPECT_EQ(got["3g.40gb"], std::make_pair(1300.0, 32));
  EXPECT_EQ(got["7g.80gb"], std::make_pair(2400.0, 32));
  EXPECT_EQ(got["whole GPU"], std::make_pair(2400.0, 32));  // credited with the 7g row
  EXPECT_EQ(got.count("2g.20gb"), 0u);                      // not measured
  EXPECT_EQ(got.count("1g.20gb"), 0u);                      // not measured either

  SizingPolicy mps;
  mps.allow_multi_process = true;
  for (const SizedOption& option : SizeWorkload(workload, {Model("A100-80GB")}, mps).options) {
    if (InstanceName(option) == "1g.10gb") {
      EXPECT_DOUBLE_EQ(option.capacity, 900);
      EXPECT_EQ(option.processes, 2);
    }
  }
}

TEST(Sizing, ThroughputWithoutAFittingPointIsUnsatisfiable) {
  Workload workload;
  workload.name = "svc";
  workload.throughput_rps = 10;
  workload.latency_p99_ms = 10;
  workload.perf.push_back(Table({{1, "", 1, 1, 100, 20}}));
  const WorkloadSizing sizing =
      SizeWorkload(workload, {Model("A100-80GB"), Model("H100-80GB")}, {});
  EXPECT_TRUE(sizing.options.empty());
  EXPECT_THAT(sizing.unsatisfiable, HasSubstr("A100-80GB: no measured point meets p99 <= 10 ms"));
  EXPECT_THAT(sizing.unsatisfiable, HasSubstr("H100-80GB: no measurements on this model"));
}

}  // namespace
}  // namespace gpuslice::plan
