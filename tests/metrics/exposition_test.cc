// The Prometheus text exposition writer: the exact text for gauges and counters, escaping,
// value spelling, every validation rule, and (when promtool is installed) promtool's own check.
#include "gpuslice/metrics/exposition.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "require.h"

namespace gpuslice::metrics {
namespace {

using ::testing::HasSubstr;

Family FbUsed() {
  Family family;
  family.name = "DCGM_FI_DEV_FB_USED";
  family.help = "Framebuffer memory used (in MiB).";
  family.samples.push_back(
      {{{"gpu", "0"}, {"UUID", "GPU-1"}, {"GPU_I_ID", "1"}, {"GPU_I_PROFILE", "1g.10gb"}}, 4096});
  family.samples.push_back(
      {{{"gpu", "0"}, {"UUID", "GPU-1"}, {"GPU_I_ID", "2"}, {"GPU_I_PROFILE", "3g.40gb"}}, 0.5});
  return family;
}

TEST(ExpositionTest, WritesHelpTypeAndSamplesInOrder) {
  Family reclaims;
  reclaims.name = "gpuslice_leases_reclaimed_total";
  reclaims.help = "Leases reclaimed for being idle.";
  reclaims.type = MetricType::kCounter;
  reclaims.samples.push_back({{}, 3});
  absl::StatusOr<std::string> text = Write({FbUsed(), reclaims});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(
      *text,
      "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n"
      "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
      "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-1\",GPU_I_ID=\"1\",GPU_I_PROFILE=\"1g.10gb\"} "
      "4096\n"
      "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-1\",GPU_I_ID=\"2\",GPU_I_PROFILE=\"3g.40gb\"} "
      "0.5\n"
      "# HELP gpuslice_leases_reclaimed_total Leases reclaimed for being idle.\n"
      "# TYPE gpuslice_leases_reclaimed_total counter\n"
      "gpuslice_leases_reclaimed_total 3\n");
}

TEST(ExpositionTest, AFamilyWithoutSamplesIsOnlyDescribed) {
  Family family;
  family.name = "gpuslice_alerts";
  family.help = "Open alerts.";
  absl::StatusOr<std::string> text = Write({family});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "# HELP gpuslice_alerts Open alerts.\n# TYPE gpuslice_alerts gauge\n");
}

TEST(ExpositionTest, OnlyLabelledKeepsOneMachinesSamples) {
  Family gpus;
  gpus.name = "DCGM_FI_DEV_FB_USED";
  gpus.help = "Framebuffer memory used (in MiB).";
  gpus.samples.push_back({{{"gpu", "0"}, {"Hostname", "r1"}}, 1});
  gpus.samples.push_back({{{"gpu", "0"}, {"Hostname", "r2"}}, 2});
  gpus.samples.push_back({{{"gpu", "1"}, {"Hostname", "r1"}}, 3});
  Family fleet;
  fleet.name = "gpuslice_leases";
  fleet.help = "Active leases by class and tenant.";
  fleet.samples.push_back({{{"class", "small"}, {"tenant", "team-a"}}, 4});
  const std::vector<Family> kept = OnlyLabelled({gpus, fleet}, "Hostname", "r1");
  ASSERT_EQ(kept.size(), 2u);
  ASSERT_EQ(kept[0].samples.size(), 2u);
  EXPECT_EQ(kept[0].samples[0].value, 1);
  EXPECT_EQ(kept[0].samples[1].value, 3);
  EXPECT_TRUE(kept[1].samples.empty());  // no machine named: not this machine's
  absl::StatusOr<std::string> text = Write(kept);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("# TYPE gpuslice_leases gauge"));
  EXPECT_THAT(*text, ::testing::Not(HasSubstr("r2")));
  EXPECT_THAT(*text, ::testing::Not(HasSubstr("team-a")));
  // A value that names no machine keeps nothing (a label's value is matched whole).
  EXPECT_TRUE(OnlyLabelled({gpus}, "Hostname", "r")[0].samples.empty());
}

TEST(ExpositionTest, EscapesLabelValuesAndHelp) {
  Family family;
  family.name = "gpuslice_lease_info";
  family.help = "A lease\nwith a back\\slash";
  family.samples.push_back({{{"purpose", "say \"hi\"\\now\nnext"}}, 1});
  absl::StatusOr<std::string> text = Write({family});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("# HELP gpuslice_lease_info A lease\\nwith a back\\\\slash\n"));
  EXPECT_THAT(*text,
              HasSubstr("gpuslice_lease_info{purpose=\"say \\\"hi\\\"\\\\now\\nnext\"} 1\n"));
}

TEST(ExpositionTest, SpellsValuesAsPrometheusReadsThem) {
  Family family;
  family.name = "v";
  const std::vector<std::pair<double, std::string>> cases = {
      {0, "0"},
      {-2, "-2"},
      {1e21, "1e+21"},
      {0.1, "0.1"},
      {1.0 / 3.0, "0.3333333333333333"},
      {std::numeric_limits<double>::infinity(), "+Inf"},
      {-std::numeric_limits<double>::infinity(), "-Inf"},
      {std::nan(""), "NaN"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    family.samples.push_back({{{"i", std::to_string(i)}}, cases[i].first});
  }
  absl::StatusOr<std::string> text = Write({family});
  ASSERT_TRUE(text.ok()) << text.status();
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_THAT(*text, HasSubstr("v{i=\"" + std::to_string(i) + "\"} " + cases[i].second + "\n"));
  }
  // The shortest form reads back exactly.
  EXPECT_EQ(std::strtod("0.3333333333333333", nullptr), 1.0 / 3.0);
}

TEST(ExpositionTest, RefusesWhatPrometheusWouldNotRead) {
  struct Case {
    const char* what;
    Family family;
  };
  std::vector<Case> cases;
  auto with = [](auto change) {
    Family family = FbUsed();
    change(family);
    return family;
  };
  cases.push_back({"empty name", with([](Family& f) { f.name = ""; })});
  cases.push_back({"name starting with a digit", with([](Family& f) { f.name = "1gpu"; })});
  cases.push_back({"name with a dash", with([](Family& f) { f.name = "gpu-used"; })});
  cases.push_back(
      {"label with a dot", with([](Family& f) { f.samples[0].labels[0].first = "gpu.id"; })});
  cases.push_back(
      {"reserved label", with([](Family& f) { f.samples[0].labels[0].first = "__name__"; })});
  cases.push_back({"label twice", with([](Family& f) {
                     f.samples[0].labels.push_back({"gpu", "1"});
                   })});
  cases.push_back(
      {"same labels twice", with([](Family& f) { f.samples[1].labels = f.samples[0].labels; })});
  cases.push_back(
      {"counter without _total", with([](Family& f) { f.type = MetricType::kCounter; })});
  cases.push_back({"negative counter", with([](Family& f) {
                     f.name = "gpuslice_x_total";
                     f.type = MetricType::kCounter;
                     f.samples[0].value = -1;
                   })});
  for (const Case& c : cases) {
    absl::Status status = Validate({c.family});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_FALSE(Write({c.family}).ok()) << c.what;
  }
  absl::Status twice = Validate({FbUsed(), FbUsed()});
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(twice.message(), HasSubstr("twice"));
  EXPECT_TRUE(Validate({FbUsed()}).ok());
}

// promtool (Debian's prometheus package) reads the output as Prometheus does, and lints it.
TEST(ExpositionTest, PromtoolAcceptsTheOutput) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GPUSLICE_SKIP_OR_FAIL_IN_CI("promtool is not installed (Debian package prometheus)");
  }
  Family reclaims;
  reclaims.name = "gpuslice_leases_reclaimed_total";
  reclaims.help = "Leases reclaimed for being idle.";
  reclaims.type = MetricType::kCounter;
  reclaims.samples.push_back({{{"class", "small"}}, 3});
  Family escaped;
  escaped.name = "gpuslice_lease_info";
  escaped.help = "Lease \"purpose\"\nand more";
  escaped.samples.push_back({{{"purpose", "quote \" back \\ line\n"}}, 1});
  absl::StatusOr<std::string> text = Write({FbUsed(), reclaims, escaped});
  ASSERT_TRUE(text.ok()) << text.status();
  const std::string path =
      (std::filesystem::temp_directory_path() / ("exposition_" + std::to_string(::getpid())))
          .string();
  std::ofstream(path) << *text;
  const int rc = std::system(("promtool check metrics < " + path + " 2>&1").c_str());
  std::filesystem::remove(path);
  EXPECT_EQ(rc, 0) << *text;
}

}  // namespace
}  // namespace gpuslice::metrics
