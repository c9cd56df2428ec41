// The live screen of `gpuslice top` (src/cli/top_screen.h): keys from terminal bytes, scrolling
// clamped to the frame, sorting, the overview lines, the help screen, and every screen within the
// terminal's rows and columns.
#include "top_screen.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpuslice/hw/catalog.h"

namespace gpuslice::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// An 8-GPU H100 node: GPU i has a 3g.40gb at 4 (GI 2, i GiB used, one process on odd GPUs) and a
// 1g.10gb at 0 (GI 9, idle 100*i seconds).
TopInput EightGpus() {
  const hw::GpuModel* model = hw::Catalog::Builtin().Find("H100-80GB");
  EXPECT_NE(model, nullptr);
  TopInput input;
  input.title = "gpuslice top · test";
  for (int i = 0; i < 8; ++i) {
    metrics::GpuFigures gpu;
    gpu.index = i;
    gpu.uuid = "GPU-" + std::to_string(i);
    gpu.name = "NVIDIA H100 80GB HBM3";
    gpu.mig = true;
    gpu.memory_used_mib = 1024 * i;
    gpu.memory_total_mib = 81559;
    gpu.activity = device::Activity{static_cast<double>((i * 37) % 100)};
    metrics::InstanceFigures big;
    big.gi = 2;
    big.profile = "3g.40gb";
    big.uuid = "MIG-big-" + std::to_string(i);
    big.memory_used_mib = 1024 * i;
    big.memory_total_mib = 40448;
    big.processes = i % 2;
    metrics::InstanceFigures small;
    small.gi = 9;
    small.profile = "1g.10gb";
    small.uuid = "MIG-small-" + std::to_string(i);
    small.memory_used_mib = 0;
    small.memory_total_mib = 9856;
    small.processes = 0;
    gpu.instances = {big, small};
    input.machine.gpus.push_back(gpu);
    input.placements[i] = {model, {{i, 2, 9, 4, 4}, {i, 9, 19, 0, 1}}};
    input.idle["MIG-small-" + std::to_string(i)] = {100 * i, false};
  }
  return input;
}

std::size_t Columns(const std::string& line) {
  std::size_t columns = 0;
  for (char c : line) columns += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return columns;
}

TEST(TopKeys, PlainKeysAndTerminalSequences) {
  EXPECT_THAT(ParseTopKeys("qjk"), ElementsAre(TopKey::kQuit, TopKey::kDown, TopKey::kUp));
  EXPECT_THAT(ParseTopKeys("\x1b[A\x1b[B\x1bOA"),
              ElementsAre(TopKey::kUp, TopKey::kDown, TopKey::kUp));
  EXPECT_THAT(ParseTopKeys("\x1b[5~\x1b[6~\x1b[H\x1b[F\x1b[1~\x1b[4~"),
              ElementsAre(TopKey::kPageUp, TopKey::kPageDown, TopKey::kHome, TopKey::kEnd,
                          TopKey::kHome, TopKey::kEnd));
  EXPECT_THAT(ParseTopKeys("sS?dp"),
              ElementsAre(TopKey::kNextSort, TopKey::kPreviousSort, TopKey::kHelp, TopKey::kDrawing,
                          TopKey::kProcesses));
  // A lone ESC, an unknown sequence and an unknown key are each one kOther.
  EXPECT_THAT(ParseTopKeys("\x1b"), ElementsAre(TopKey::kOther));
  EXPECT_THAT(ParseTopKeys("\x1b[2~x"), ElementsAre(TopKey::kOther, TopKey::kOther));
}

TEST(TopScreen, AnEightGpuNodeFitsTwentyFourRowsWithEveryGpuOnItsOverviewLine) {
  TopScreen screen;
  const std::vector<std::string> lines = ComposeScreen(EightGpus(), {80}, screen, 24);
  ASSERT_EQ(lines.size(), 24u);
  EXPECT_EQ(lines[0], "gpuslice top · test");
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_THAT(lines[1 + i], StartsWith("GPU " + std::to_string(i)));
  }
  // GPU 1: the 1g.10gb at 0 idle (▒), three free units, the busy 3g.40gb at 4 (█).
  EXPECT_EQ(lines[2],
            "GPU 1 H100 80GB HBM3 MIG ▒···████ 2 inst, 0 leased, 1.00/79.65 GiB, sm 37%, -");
  EXPECT_THAT(lines[1], HasSubstr("MIG ▒···▒▒▒▒"));
  EXPECT_THAT(lines.back(), StartsWith("lines 1-13 of "));
  EXPECT_THAT(lines.back(), HasSubstr("sort index"));
  for (const std::string& line : lines) EXPECT_LE(Columns(line), 80u) << line;
}

TEST(TopScreen, ScrollingStaysWithinTheFrame) {
  TopScreen screen;
  const TopInput input = EightGpus();
  const std::size_t total = RenderTop(
                                [&] {
                                  TopInput copy = input;
                                  copy.title.clear();
                                  return copy;
                                }(),
                                {80})
                                .size();
  ComposeScreen(input, {80}, screen, 24);
  const std::size_t page = screen.page;
  EXPECT_EQ(page, 13u);  // 24 rows: title, 8 overview lines, a blank line, the footer
  ASSERT_TRUE(ApplyTopKey(TopKey::kPageDown, screen));
  std::vector<std::string> lines = ComposeScreen(input, {80}, screen, 24);
  EXPECT_EQ(screen.scroll, page);
  EXPECT_THAT(lines.back(), StartsWith("lines 14-26 of " + std::to_string(total)));
  ASSERT_TRUE(ApplyTopKey(TopKey::kEnd, screen));
  lines = ComposeScreen(input, {80}, screen, 24);
  EXPECT_EQ(screen.scroll, total - page);
  for (int i = 0; i < 5; ++i) ApplyTopKey(TopKey::kDown, screen);
  ComposeScreen(input, {80}, screen, 24);
  EXPECT_EQ(screen.scroll, total - page);  // clamped: never past the end
  ApplyTopKey(TopKey::kHome, screen);
  ApplyTopKey(TopKey::kUp, screen);
  ComposeScreen(input, {80}, screen, 24);
  EXPECT_EQ(screen.scroll, 0u);
  EXPECT_FALSE(ApplyTopKey(TopKey::kQuit, screen));
}

TEST(TopScreen, SortKeysCycleAndOrderTheGpus) {
  TopScreen screen;
  ASSERT_TRUE(ApplyTopKey(TopKey::kNextSort, screen));
  EXPECT_EQ(screen.sort, TopSort::kMemory);
  std::vector<std::string> lines = ComposeScreen(EightGpus(), {100}, screen, 24);
  EXPECT_THAT(lines[1], StartsWith("GPU 7"));  // 7 GiB used: most first
  EXPECT_THAT(lines[8], StartsWith("GPU 0"));
  EXPECT_THAT(lines.back(), HasSubstr("sort memory"));
  ApplyTopKey(TopKey::kNextSort, screen);  // sm: (i * 37) % 100 is largest for GPU 5 (85)
  lines = ComposeScreen(EightGpus(), {100}, screen, 24);
  EXPECT_THAT(lines[1], StartsWith("GPU 5"));
  ApplyTopKey(TopKey::kNextSort, screen);  // idle: GPU 7's 1g.10gb, 700 s
  lines = ComposeScreen(EightGpus(), {100}, screen, 24);
  EXPECT_THAT(lines[1], StartsWith("GPU 7"));
  ApplyTopKey(TopKey::kNextSort, screen);
  EXPECT_EQ(screen.sort, TopSort::kIndex);
  ApplyTopKey(TopKey::kPreviousSort, screen);
  EXPECT_EQ(screen.sort, TopSort::kIdle);
}

TEST(TopScreen, UnknownFiguresSortLast) {
  TopInput input = EightGpus();
  input.machine.gpus[3].memory_used_mib.reset();
  SortGpus(TopSort::kMemory, input);
  ASSERT_EQ(input.machine.gpus.size(), 8u);
  EXPECT_EQ(input.machine.gpus.back().index, 3);
  EXPECT_EQ(input.machine.gpus.front().index, 7);
}

TEST(TopScreen, HelpScreenShowsTheKeysAndAnyKeyLeavesIt) {
  TopScreen screen;
  ASSERT_TRUE(ApplyTopKey(TopKey::kHelp, screen));
  std::vector<std::string> lines = ComposeScreen(EightGpus(), {80}, screen, 24);
  EXPECT_EQ(lines, TopHelp());
  ASSERT_TRUE(ApplyTopKey(TopKey::kDown, screen));  // leaves the help, does not scroll
  EXPECT_FALSE(screen.help);
  EXPECT_EQ(screen.scroll, 0u);
  lines = ComposeScreen(EightGpus(), {80}, screen, 24);
  EXPECT_EQ(lines[0], "gpuslice top · test");
}

TEST(TopScreen, DrawingAndProcessKeysChangeTheDetails) {
  TopScreen screen;
  const std::size_t with_drawings = [&] {
    ComposeScreen(EightGpus(), {80}, screen, 1000);
    return screen.page;
  }();
  ApplyTopKey(TopKey::kDrawing, screen);
  const std::vector<std::string> lines = ComposeScreen(EightGpus(), {80}, screen, 1000);
  EXPECT_THAT(lines.back(), StartsWith("lines 1-"));
  EXPECT_LT(lines.size(), with_drawings);
  for (const std::string& line : lines) EXPECT_THAT(line, ::testing::Not(HasSubstr("┌")));
}

TEST(TopScreen, TinyTerminalsKeepTheFooter) {
  for (std::size_t rows = 1; rows < 12; ++rows) {
    TopScreen screen;
    const std::vector<std::string> lines = ComposeScreen(EightGpus(), {30}, screen, rows);
    ASSERT_EQ(lines.size(), rows);
    EXPECT_THAT(lines.back(), HasSubstr("of ")) << rows;
    for (const std::string& line : lines) EXPECT_LE(Columns(line), 30u) << line;
  }
  TopScreen screen;
  EXPECT_TRUE(ComposeScreen(EightGpus(), {30}, screen, 0).empty());
}

}  // namespace
}  // namespace gpuslice::cli
