// The frame of `gpuslice top` (src/cli/top_view.h): exact lines for small hand-made machines, "-"
// for every absent figure, cutting to the width, leases and idle times, colour only when asked,
// the JSON form, the idle clocks and the lease map.
#include "top_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"
#include "layout_drawing.h"

namespace gpuslice::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const hw::GpuModel& H100() {
  const hw::GpuModel* model = hw::Catalog::Builtin().Find("H100-80GB");
  EXPECT_NE(model, nullptr);
  return *model;
}

// GPU 0: an H100 with MIG and two instances (3g.40gb at 4, 1g.10gb at 0), nothing but memory and
// processes known.
metrics::GpuFigures MigGpu() {
  metrics::GpuFigures gpu;
  gpu.index = 0;
  gpu.uuid = "GPU-aaaa";
  gpu.name = "NVIDIA H100 80GB HBM3";
  gpu.mig = true;
  gpu.memory_used_mib = 10240;
  gpu.memory_total_mib = 81559;
  gpu.processes = 1;
  metrics::InstanceFigures big;
  big.gi = 2;
  big.profile = "3g.40gb";
  big.uuid = "MIG-big";
  big.memory_used_mib = 10240;
  big.memory_total_mib = 40448;
  big.processes = 1;
  big.process_memory_mib = 10240;
  big.process_list = {{4242, "python", 10240, 2, 0}};
  metrics::InstanceFigures small;
  small.gi = 9;
  small.profile = "1g.10gb";
  small.uuid = "MIG-small";
  small.memory_used_mib = 0;
  small.memory_total_mib = 9856;
  small.processes = 0;
  small.process_memory_mib = 0;
  gpu.instances = {big, small};
  return gpu;
}

GpuPlacements MigPlacements() {
  GpuPlacements placements;
  placements.model = &H100();
  placements.gis = {{0, 2, 9, 4, 4}, {0, 9, 19, 0, 1}};
  return placements;
}

// GPU 1: a whole GPU with every health figure.
metrics::GpuFigures WholeGpu() {
  metrics::GpuFigures gpu;
  gpu.index = 1;
  gpu.uuid = "GPU-bbbb";
  gpu.name = "NVIDIA H100 80GB HBM3";
  gpu.mig = false;
  gpu.memory_used_mib = 73728;
  gpu.memory_total_mib = 81559;
  gpu.processes = 2;
  gpu.process_list = {{100, "train", 40960, -1, -1}, {101, "eval", 32768, -1, -1}};
  gpu.telemetry.temperature_c = 71;
  gpu.telemetry.power_w = 652.4;
  gpu.telemetry.power_limit_w = 700;
  gpu.telemetry.utilization_pct = 98;
  gpu.telemetry.throttle_reasons = device::kThrottleSwPowerCap | device::kThrottleGpuIdle;
  gpu.activity = device::Activity{87.6, 50, 40, 1};
  return gpu;
}

TopInput Input() {
  TopInput input;
  input.machine.host = "node-1";
  input.machine.gpus = {MigGpu(), WholeGpu()};
  input.placements[0] = MigPlacements();
  input.leases["MIG-big"] = {{3, "team-a", "medium", "embeddings"}};
  input.leases["GPU-bbbb"] = {{7, "team-b", "full", "pretraining"}};
  input.idle["MIG-big"] = {0, false};
  input.idle["MIG-small"] = {307, true};
  input.idle["GPU-bbbb"] = {0, false};
  return input;
}

TopOptions Compact(std::size_t width = 200) {
  TopOptions options;
  options.width = width;
  options.drawing = false;
  return options;
}

TEST(TopViewTest, RendersMigAndWholeGpusWithLeasesAndIdleTimes) {
  TopInput input = Input();
  input.title = "gpuslice top · node-1";
  input.status = {"leases: 2 active"};
  EXPECT_THAT(
      RenderTop(input, Compact()),
      ElementsAre(
          "gpuslice top · node-1", "",
          "GPU 0  NVIDIA H100 80GB HBM3 · MIG · mem █░░░░░░░░░ 10.00/79.65 GiB · sm - · util - · "
          "temp - · power -",
          "  DEVICE  PROFILE  PLACEMENT  MEMORY                      SM  PROCS  IDLE    LEASE",
          "  GI 2    3g.40gb  ····████   ███░░░░░░░ 10.00/39.50 GiB  -   1      0s      #3 team-a "
          "medium: embeddings",
          "  GI 9    1g.10gb  █·······   ░░░░░░░░░░ 0.00/9.62 GiB    -   0      ≥5m07s  -", "",
          "GPU 1  NVIDIA H100 80GB HBM3 · whole · THROTTLED power-cap · mem █████████░ 72.00/79.65 "
          "GiB · sm 88% · util 98% · temp 71C · power 652/700 W",
          "  DEVICE  PROFILE  PLACEMENT  MEMORY                      SM   PROCS  IDLE  LEASE",
          "  GPU 1   whole    -          █████████░ 72.00/79.65 GiB  88%  2      0s    #7 team-b "
          "full: pretraining",
          "", "leases: 2 active"));
}

TEST(TopViewTest, AbsentFiguresShowAsDashNeverZero) {
  metrics::GpuFigures gpu;
  gpu.index = 3;
  gpu.uuid = "GPU-cccc";
  gpu.name = "NVIDIA L4";
  TopInput input;
  input.machine.gpus = {gpu};
  EXPECT_THAT(RenderTop(input, Compact()),
              ElementsAre("GPU 3  NVIDIA L4 · whole · mem - · sm - · util - · temp - · power -",
                          "  DEVICE  PROFILE  PLACEMENT  MEMORY  SM  PROCS  IDLE  LEASE",
                          "  GPU 3   whole    -          -       -   -      -     -"));

  // Known total, unknown use; a power limit without a reading.
  input.machine.gpus[0].memory_total_mib = 23034;
  input.machine.gpus[0].telemetry.power_limit_w = 72;
  const std::vector<std::string> lines = RenderTop(input, Compact());
  EXPECT_THAT(lines[0], HasSubstr("· power -/72 W"));
  EXPECT_THAT(lines[0], HasSubstr("· mem            -/22.49 GiB"));
  for (const std::string& line : lines) EXPECT_THAT(line, Not(HasSubstr(" 0%")));
}

TEST(TopViewTest, InstanceFiguresAbsentAndWithoutPlacements) {
  metrics::GpuFigures gpu = MigGpu();
  gpu.instances[0].memory_used_mib.reset();
  gpu.instances[0].processes.reset();
  gpu.instances[0].process_list.clear();
  gpu.instances[1].activity = device::Activity{12.4, 0, 0, 0};
  TopInput input;
  input.machine.gpus = {gpu};  // no placements: no placement column, no drawing
  EXPECT_THAT(
      RenderTop(input, TopOptions{}),
      ElementsAre(
          "GPU 0  NVIDIA H100 80GB HBM3 · MIG · mem █░░░░░░░░░ 10.00/79.65 GiB · sm - · util - · "
          "temp - · power -",
          "  DEVICE  PROFILE  PLACEMENT  MEMORY                    SM   PROCS  IDLE  LEASE",
          "  GI 2    3g.40gb  -                     -/39.50 GiB    -    -      -     -",
          "  GI 9    1g.10gb  -          ░░░░░░░░░░ 0.00/9.62 GiB  12%  0      -     -"));
}

TEST(TopViewTest, MigGpuWithoutInstancesAndLostGpu) {
  metrics::GpuFigures empty = MigGpu();
  empty.instances.clear();
  metrics::GpuFigures lost = WholeGpu();
  lost.lost = true;
  TopInput input;
  input.machine.gpus = {empty, lost};
  EXPECT_THAT(RenderTop(input, Compact()),
              ElementsAre("GPU 0  NVIDIA H100 80GB HBM3 · MIG · mem █░░░░░░░░░ 10.00/79.65 GiB · "
                          "sm - · util - · temp - · power -",
                          "  no GPU instances", "",
                          "GPU 1  NVIDIA H100 80GB HBM3 · LOST: the GPU fell off the bus"));
  EXPECT_THAT(RenderTop(TopInput{}, Compact()), ElementsAre("no GPUs"));
}

TEST(TopViewTest, DrawsTheMigLayoutUnderTheGpu) {
  TopInput input;
  input.machine.gpus = {MigGpu()};
  input.placements[0] = MigPlacements();
  TopOptions options;
  options.width = 200;
  const std::vector<std::string> lines = RenderTop(input, options);
  // The drawing of `gpuslice status` and `check`: 1g.10gb at 0, 3g.40gb at 4.
  const geometry::Shape shape(H100());
  const hw::MigSpec& mig = *H100().mig;
  const std::vector<geometry::Placed> layout = {
      {static_cast<std::uint8_t>(mig.IndexOf(*mig.FindProfileBySmiId(9))), 4},
      {static_cast<std::uint8_t>(mig.IndexOf(*mig.FindProfileBySmiId(19))), 0}};
  const std::string drawing = DrawLayout(shape, layout, {}, "  ");
  std::string drawn;
  for (std::size_t i = 1; i + 3 < lines.size(); ++i) drawn += lines[i] + "\n";
  EXPECT_EQ(drawn, drawing);
  EXPECT_THAT(drawing, HasSubstr("3g.40gb"));
  EXPECT_THAT(lines[lines.size() - 3], HasSubstr("DEVICE"));
}

TEST(TopViewTest, CutsEveryLineToTheWidthNeverWraps) {
  TopInput input = Input();
  input.status = {"leases: cannot reach http://127.0.0.1:8470 (Connection refused)"};
  TopOptions options;
  options.width = 40;
  options.processes = true;
  const std::vector<std::string> lines = RenderTop(input, options);
  const std::vector<std::string> wide = RenderTop(
      input, TopOptions{.width = 1000, .color = false, .processes = true, .drawing = true});
  ASSERT_EQ(lines.size(), wide.size());  // cut, never wrapped onto more lines
  for (const std::string& line : lines) {
    std::size_t columns = 0;
    for (char c : line) columns += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1u : 0u;
    EXPECT_LE(columns, 40u) << line;
  }
  EXPECT_EQ(lines[0], "GPU 0  NVIDIA H100 80GB HBM3 · MIG · me…");
  EXPECT_EQ(lines.back(), "leases: cannot reach http://127.0.0.1:8…");
  EXPECT_EQ(wide.back(), "leases: cannot reach http://127.0.0.1:8470 (Connection refused)");
}

TEST(TopViewTest, ProcessLinesUnderTheirDevice) {
  TopOptions options = Compact();
  options.processes = true;
  const std::vector<std::string> lines = RenderTop(Input(), options);
  EXPECT_THAT(lines, ::testing::Contains("      pid 4242 python 10.00 GiB (CI 0)"));
  EXPECT_THAT(lines, ::testing::Contains("      pid 100 train 40.00 GiB"));
  EXPECT_THAT(lines, ::testing::Contains("      pid 101 eval 32.00 GiB"));
  // The process comes right after its instance's line.
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    if (lines[i].starts_with("  GI 2 ")) {
      EXPECT_EQ(lines[i + 1], "      pid 4242 python 10.00 GiB (CI 0)");
    }
  }
  for (const std::string& line : RenderTop(Input(), Compact())) {
    EXPECT_THAT(line, Not(HasSubstr("pid ")));
  }
}

TEST(TopViewTest, ColourOnlyWhenAskedAndNotCountedInTheWidth) {
  for (const std::string& line : RenderTop(Input(), Compact(60))) {
    EXPECT_EQ(line.find('\x1b'), std::string::npos) << line;
  }
  TopOptions options = Compact(60);
  options.color = true;
  const std::vector<std::string> lines = RenderTop(Input(), options);
  EXPECT_THAT(lines[0], HasSubstr("\x1b[1mGPU 0\x1b[0m"));
  bool red_throttle = false;
  for (const std::string& line : RenderTop(Input(), TopOptions{.width = 300, .color = true})) {
    red_throttle |= line.find("\x1b[31mTHROTTLED power-cap\x1b[0m") != std::string::npos;
  }
  EXPECT_TRUE(red_throttle);
  // Without the escape sequences, a coloured line reads exactly as the plain one.
  const std::vector<std::string> plain = RenderTop(Input(), Compact(60));
  ASSERT_EQ(lines.size(), plain.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string stripped;
    for (std::size_t k = 0; k < lines[i].size(); ++k) {
      if (lines[i][k] == '\x1b') {
        while (k < lines[i].size() && lines[i][k] != 'm') ++k;
        continue;
      }
      stripped += lines[i][k];
    }
    EXPECT_EQ(stripped, plain[i]);
  }
}

TEST(TopViewTest, IdleTimeText) {
  EXPECT_EQ(IdleText({0, false}), "0s");
  EXPECT_EQ(IdleText({59, false}), "59s");
  EXPECT_EQ(IdleText({60, false}), "1m00s");
  EXPECT_EQ(IdleText({307, true}), "≥5m07s");
  EXPECT_EQ(IdleText({3599, false}), "59m59s");
  EXPECT_EQ(IdleText({3600, false}), "1h00m");
  EXPECT_EQ(IdleText({3600 * 23 + 60 * 5 + 9, false}), "23h05m");
  EXPECT_EQ(IdleText({86400 + 4 * 3600 + 120, true}), "≥1d04h");
  EXPECT_EQ(IdleText({86400 * 12, false}), "12d00h");
}

TEST(TopViewTest, ThrottleNamesAreHeatAndPowerOnly) {
  EXPECT_THAT(ThrottleNames(device::kThrottleGpuIdle | device::kThrottleApplicationsClocks |
                            device::kThrottleSyncBoost),
              ::testing::IsEmpty());
  EXPECT_THAT(ThrottleNames(device::kThrottleThermalOrPower),
              ElementsAre("power-cap", "hw-slowdown", "sw-thermal", "hw-thermal", "power-brake"));
}

TEST(TopViewTest, IdleClocksStartWhenADeviceHasNoProcess) {
  metrics::MachineFigures machine;
  machine.gpus = {MigGpu(), WholeGpu()};  // GI 2 busy, GI 9 idle, GPU 1 busy
  machine.gpus[1].processes.reset();      // unknown: no idle time
  IdleTracker tracker;
  tracker.Observe(machine, 10.0);
  EXPECT_EQ(tracker.idle().at("MIG-big").seconds, 0);
  EXPECT_EQ(tracker.idle().at("MIG-small").seconds, 0);
  EXPECT_TRUE(tracker.idle().at("MIG-small").at_least);  // idle before watching began
  EXPECT_FALSE(tracker.idle().contains("GPU-bbbb"));
  EXPECT_FALSE(tracker.idle().contains("GPU-aaaa"));  // a MIG GPU's idle time is its instances'

  tracker.Observe(machine, 75.5);
  EXPECT_EQ(tracker.idle().at("MIG-small").seconds, 65);
  EXPECT_TRUE(tracker.idle().at("MIG-small").at_least);

  // GI 2's process ends: its clock starts now and is exact; GI 9 gets a process: idle 0.
  machine.gpus[0].instances[0].processes = 0;
  machine.gpus[0].instances[1].processes = 1;
  tracker.Observe(machine, 80.0);
  EXPECT_EQ(tracker.idle().at("MIG-big").seconds, 0);
  EXPECT_FALSE(tracker.idle().at("MIG-big").at_least);
  EXPECT_EQ(tracker.idle().at("MIG-small").seconds, 0);
  tracker.Observe(machine, 200.0);
  EXPECT_EQ(tracker.idle().at("MIG-big").seconds, 120);
  EXPECT_EQ(IdleText(tracker.idle().at("MIG-big")), "2m00s");

  // GI 9 idle again: a new clock, not the old one.
  machine.gpus[0].instances[1].processes = 0;
  tracker.Observe(machine, 230.0);
  EXPECT_EQ(tracker.idle().at("MIG-small").seconds, 0);
  EXPECT_FALSE(tracker.idle().at("MIG-small").at_least);

  // A lost GPU has no idle time.
  machine.gpus[0].lost = true;
  tracker.Observe(machine, 240.0);
  EXPECT_TRUE(tracker.idle().empty());
}

TEST(TopViewTest, LeasesByDeviceFromTheApi) {
  const nlohmann::json reply = nlohmann::json::parse(R"({"leases": [
    {"id": 3, "tenant": "team-a", "class": "small", "purpose": "notebook", "state": "active",
     "bound": [{"uuid": "MIG-1", "gpu_uuid": "GPU-a", "gpu_index": 0, "gi": 7, "ci": 0}]},
    {"id": 4, "tenant": "team-b", "class": "share", "purpose": "batch", "state": "active",
     "bound": [{"uuid": "GPU-b", "gpu_uuid": "GPU-b", "gpu_index": 1, "share_milli": 500}]},
    {"id": 5, "tenant": "team-c", "class": "share", "purpose": "serving", "state": "active",
     "bound": [{"uuid": "GPU-b", "gpu_uuid": "GPU-b", "gpu_index": 1, "share_milli": 250}]},
    {"id": 6, "tenant": "team-d", "class": "small", "purpose": "old", "state": "released",
     "bound": [{"uuid": "MIG-2"}]},
    {"id": 7, "tenant": "team-e", "class": "small", "purpose": "unbound", "state": "active",
     "bound": []},
    "garbage"
  ]})");
  const std::map<std::string, std::vector<DeviceLease>> leases = LeasesByDevice(reply);
  ASSERT_EQ(leases.size(), 2u);
  ASSERT_EQ(leases.at("MIG-1").size(), 1u);
  EXPECT_EQ(leases.at("MIG-1")[0].lease, 3);
  EXPECT_EQ(leases.at("MIG-1")[0].tenant, "team-a");
  EXPECT_EQ(leases.at("MIG-1")[0].class_name, "small");
  EXPECT_EQ(leases.at("MIG-1")[0].purpose, "notebook");
  ASSERT_EQ(leases.at("GPU-b").size(), 2u);
  EXPECT_EQ(leases.at("GPU-b")[1].tenant, "team-c");
  EXPECT_TRUE(LeasesByDevice(nlohmann::json::parse(R"({"error": "nope"})")).empty());

  // Two shares of one GPU show side by side.
  metrics::GpuFigures gpu = WholeGpu();
  gpu.uuid = "GPU-b";
  TopInput input;
  input.machine.gpus = {gpu};
  input.leases = leases;
  EXPECT_THAT(RenderTop(input, Compact(300))[2],
              HasSubstr("#4 team-b share: batch; #5 team-c share: serving"));
}

TEST(TopViewTest, JsonHasEveryFigureAndNullForAbsentOnes) {
  TopInput input = Input();
  input.machine.gpus[0].instances[1].memory_used_mib.reset();
  input.machine.xids = {{1, 79, std::nullopt, std::nullopt}};
  input.machine.errors = {"GPU 0: temperature: NOT_SUPPORTED"};
  input.status = {"leases: 2 active"};
  const nlohmann::json json = TopJson(input);
  EXPECT_EQ(json["host"], "node-1");
  ASSERT_EQ(json["gpus"].size(), 2u);
  const nlohmann::json& mig = json["gpus"][0];
  EXPECT_EQ(mig["mig"], true);
  EXPECT_TRUE(mig["temperature_c"].is_null());
  EXPECT_TRUE(mig["power_w"].is_null());
  EXPECT_TRUE(mig["sm_active_pct"].is_null());
  EXPECT_TRUE(mig["idle_s"].is_null());
  ASSERT_EQ(mig["instances"].size(), 2u);
  const nlohmann::json& big = mig["instances"][0];
  EXPECT_EQ(big["gi"], 2);
  EXPECT_EQ(big["profile"], "3g.40gb");
  EXPECT_EQ(big["uuid"], "MIG-big");
  EXPECT_EQ(big["placement"], nlohmann::json({{"start", 4}, {"size", 4}}));
  EXPECT_EQ(big["memory_used_mib"], 10240);
  EXPECT_EQ(big["memory_total_mib"], 40448);
  EXPECT_EQ(big["processes"], 1);
  EXPECT_EQ(big["process_list"][0]["pid"], 4242);
  EXPECT_EQ(big["process_list"][0]["name"], "python");
  EXPECT_EQ(big["leases"][0]["tenant"], "team-a");
  EXPECT_EQ(big["leases"][0]["lease"], 3);
  EXPECT_EQ(big["idle_s"], 0);
  const nlohmann::json& small = mig["instances"][1];
  EXPECT_TRUE(small["memory_used_mib"].is_null());
  EXPECT_EQ(small["idle_s"], 307);
  EXPECT_EQ(small["idle_at_least"], true);
  EXPECT_TRUE(small["leases"].empty());
  const nlohmann::json& whole = json["gpus"][1];
  EXPECT_EQ(whole["temperature_c"], 71);
  EXPECT_EQ(whole["power_limit_w"], 700.0);
  EXPECT_EQ(whole["throttle"], nlohmann::json({"power-cap"}));
  EXPECT_EQ(whole["process_list"].size(), 2u);
  EXPECT_EQ(whole["leases"][0]["class"], "full");
  EXPECT_EQ(json["xids"][0]["xid"], 79);
  EXPECT_EQ(json["errors"][0], "GPU 0: temperature: NOT_SUPPORTED");
  EXPECT_EQ(json["status"][0], "leases: 2 active");
}

TEST(TopViewTest, DeviceKeys) {
  metrics::GpuFigures gpu = MigGpu();
  EXPECT_EQ(DeviceKey(gpu), "GPU-aaaa");
  EXPECT_EQ(DeviceKey(gpu, gpu.instances[0]), "MIG-big");
  gpu.instances[0].uuid.clear();  // no compute instance
  EXPECT_EQ(DeviceKey(gpu, gpu.instances[0]), "GPU-aaaa/gi2");
}

}  // namespace
}  // namespace gpuslice::cli
