// The alert loop shared by the agent and serve (gpuslice/metrics/alert_runner.h): changes reach
// `report`; when the service does not take them they are kept and sent first with the next round;
// the families carry the machine's counters.
#include "gpuslice/metrics/alert_runner.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace gpuslice::metrics {
namespace {

metrics::MachineFigures Machine(std::int64_t used) {
  metrics::MachineFigures m;
  m.host = "node-a";
  metrics::GpuFigures gpu;
  gpu.index = 0;
  gpu.uuid = "GPU-0";
  gpu.name = "NVIDIA H100 80GB HBM3";
  gpu.memory_used_mib = used;
  gpu.memory_total_mib = 1000;
  gpu.processes = 0;
  m.gpus.push_back(gpu);
  return m;
}

TEST(AlertRunnerTest, ChangesTheServiceDidNotTakeAreSentAgainFirst) {
  AlertRunner runner("node-a");
  std::vector<metrics::AlertChanges> sent;
  bool up = false;
  auto report = [&](const metrics::AlertChanges& changes) {
    sent.push_back(changes);
    return up ? absl::OkStatus() : absl::UnavailableError("service away");
  };
  metrics::AlertChanges found = runner.Round(Machine(950), {}, 100, report);
  ASSERT_EQ(found.fired.size(), 1u);
  EXPECT_EQ(runner.unreported(), 1u);
  // The condition ends while the service is still away: both ways are kept.
  found = runner.Round(Machine(10), {}, 101, report);
  ASSERT_EQ(found.cleared.size(), 1u);
  EXPECT_TRUE(found.fired.empty()) << "the round's own changes only";
  EXPECT_EQ(runner.unreported(), 2u);
  up = true;
  found = runner.Round(Machine(10), {}, 102, report);
  EXPECT_TRUE(found.empty());
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[2].fired.size(), 1u);
  EXPECT_EQ(sent[2].cleared.size(), 1u);
  EXPECT_EQ(sent[2].fired[0].kind, "memory_high");
  EXPECT_EQ(runner.unreported(), 0u);
  // Nothing to say: report is not called.
  runner.Round(Machine(10), {}, 103, report);
  EXPECT_EQ(sent.size(), 3u);
}

TEST(AlertRunnerTest, FamiliesCountWhatFired) {
  AlertRunner runner("node-a");
  runner.Round(Machine(950), {}, 100,
               [](const metrics::AlertChanges&) { return absl::OkStatus(); });
  bool found = false;
  for (const metrics::Family& family : runner.Families()) {
    if (family.name != "gpuslice_alerts_fired_total") continue;
    for (const metrics::Sample& s : family.samples) {
      if (s.labels[0].second == "memory_high") {
        EXPECT_EQ(s.value, 1);
        found = true;
      }
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace gpuslice::metrics
