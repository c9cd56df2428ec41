// Black-box tests of the `gpuslice` binary: exit codes, text and JSON output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "cli/run_gpuslice.h"
#include "gpuslice/hw/catalog.h"
#include "nlohmann/json.hpp"

#ifndef GPUSLICE_BINARY
#error "GPUSLICE_BINARY must name the built gpuslice executable"
#endif

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

using Result = gpuslice::cli::testing::CommandResult;

Result Gpuslice(const std::string& args, bool with_stderr = true) {
  return gpuslice::cli::testing::RunGpuslice(args, with_stderr);
}

nlohmann::json RunJson(const std::string& args, int expected_exit = 0) {
  const Result result = Gpuslice(args, /*with_stderr=*/false);
  EXPECT_EQ(result.exit_code, expected_exit) << args << "\n" << result.output;
  nlohmann::json json = nlohmann::json::parse(result.output, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(json.is_discarded()) << "not JSON: " << result.output;
  return json;
}

TEST(Cli, Help) {
  const Result help = Gpuslice("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, AllOf(HasSubstr("gpus"), HasSubstr("profiles"), HasSubstr("layouts"),
                                 HasSubstr("check")));
  EXPECT_EQ(Gpuslice("check --help").exit_code, 0);
  const Result version = Gpuslice("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_THAT(version.output, HasSubstr("0.1.0"));
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(Gpuslice("").exit_code, 2);
  EXPECT_EQ(Gpuslice("frobnicate").exit_code, 2);
  EXPECT_EQ(Gpuslice("check A100-40GB").exit_code, 2);
  EXPECT_EQ(Gpuslice("check A100-40GB 9,19,19 --driver banana").exit_code, 2);
}

TEST(CliCheck, ValidA100Layout) {
  const Result r = Gpuslice("check A100-40GB 9,19,19");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("VALID"));
  EXPECT_THAT(r.output, Not(HasSubstr("INVALID")));
  // Driver-default creation reproduces the layout (§6), and explicit placements 9:4,19:0,19:1.
  EXPECT_THAT(r.output, HasSubstr("9,19,19 -C"));
  EXPECT_THAT(r.output, HasSubstr("9:4,19:0,19:1"));
  EXPECT_THAT(r.output, HasSubstr("3g.20gb"));
  EXPECT_THAT(r.output, HasSubstr("0x20B010DE"));  // mig-parted device filter
}

TEST(CliCheck, ValidA100LayoutJson) {
  const nlohmann::json json = RunJson("check A100-40GB 9,19,19 --json");
  EXPECT_EQ(json["gpu"], "A100-40GB");
  EXPECT_EQ(json["valid"], true);
  EXPECT_EQ(json["placement_method"], "driver-default");
  const nlohmann::json& instances = json["instances"];
  ASSERT_EQ(instances.size(), 3u);
  EXPECT_EQ(instances[0]["profile"], "3g.20gb");
  EXPECT_EQ(instances[0]["start"], 4);
  EXPECT_EQ(instances[0]["gpu_instance_id"], 2);
  EXPECT_EQ(instances[1]["start"], 0);
  EXPECT_EQ(instances[1]["gpu_instance_id"], 7);
  EXPECT_EQ(instances[2]["start"], 1);
  EXPECT_EQ(instances[2]["gpu_instance_id"], 8);
  EXPECT_EQ(instances[0]["memory_mib"], 19968);
  bool found = false;
  for (const auto& line : json["nvidia_smi"]) {
    found = found || line.get<std::string>().find("-cgi 9,19,19 -C") != std::string::npos;
  }
  EXPECT_TRUE(found) << json["nvidia_smi"].dump();
  // After 3g@4 + 1g@0 + 1g@1: 1g slots 2 and 3 remain; 7g none.
  for (const auto& entry : json["capacity_left"]) {
    if (entry["profile"] == "1g.5gb") {
      EXPECT_EQ(entry["free"], 2);
    }
    if (entry["profile"] == "7g.40gb") {
      EXPECT_EQ(entry["free"], 0);
    }
  }
}

TEST(CliCheck, InstanceCapIsInvalid) {
  const Result r = Gpuslice("check H100-80GB 4g.40gb,4g.40gb");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("INVALID"), HasSubstr("instance cap"), HasSubstr("4g.40gb")));
  const nlohmann::json json = RunJson("check H100-80GB 4g.40gb,4g.40gb --json", 1);
  EXPECT_EQ(json["valid"], false);
  ASSERT_FALSE(json["reasons"].empty());
  EXPECT_THAT(json["reasons"][0].get<std::string>(), HasSubstr("instance cap"));
}

TEST(CliCheck, UnknownProfileIdOnA30) {
  const Result r = Gpuslice("check A30 9");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("1g.6gb"), HasSubstr("4g.24gb"), HasSubstr("A30-24GB")));
  const nlohmann::json json = RunJson("check A30 9 --json", 1);
  EXPECT_EQ(json["error"], "unknown-profile");
}

TEST(CliCheck, UnknownGpuSuggests) {
  const Result r = Gpuslice("check H100-81GB 9");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("H100-80GB"));
}

TEST(CliCheck, MalformedLayout) {
  const Result r = Gpuslice("check A100-40GB 9@x");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("x"));
  EXPECT_EQ(Gpuslice("check A100-40GB '3g.20gb,,1g.5gb'").exit_code, 2);
}

TEST(CliCheck, NonMigGpu) {
  const Result r = Gpuslice("check RTX-4090 9");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("MIG"));
}

TEST(CliCheck, KnownIssueOrderUsesExactSearch) {
  const nlohmann::json json = RunJson("check A100-40GB 19,19,14,9 --json");
  EXPECT_EQ(json["valid"], true);
  EXPECT_EQ(json["placement_method"], "exact-search");
  EXPECT_THAT(json["driver_default_order"].get<std::string>(), HasSubstr("item 4"));
  const Result text = Gpuslice("check A100-40GB 19,19,14,9");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_THAT(text.output, HasSubstr("Insufficient Resources"));
}

TEST(CliCheck, DriverOption) {
  const Result old = Gpuslice("check A100-40GB 5,9 --driver R470");
  EXPECT_EQ(old.exit_code, 1) << old.output;
  EXPECT_THAT(old.output, HasSubstr("R510"));
  EXPECT_EQ(Gpuslice("check A100-40GB 5,9 --driver 510.47.03").exit_code, 0);
  EXPECT_EQ(Gpuslice("check A100-40GB 5,9").exit_code, 0);
}

TEST(CliCheck, ComputeInstanceSplit) {
  const nlohmann::json json = RunJson("check H100-80GB '3g.40gb[1c,2c]' --json");
  EXPECT_EQ(json["valid"], true);
  ASSERT_EQ(json["instances"].size(), 1u);
  const nlohmann::json& cis = json["instances"][0]["compute_instances"];
  ASSERT_EQ(cis.size(), 2u);
  std::set<std::string> names;
  for (const auto& ci : cis) names.insert(ci["device_name"].get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"1c.3g.40gb", "2c.3g.40gb"}));
}

TEST(CliLayouts, A100_80GBMaximalJson) {
  const nlohmann::json json = RunJson("layouts A100-80GB --maximal --json");
  EXPECT_EQ(json["gpu"], "A100-80GB");
  EXPECT_EQ(json["layout_count"], 239);  // mig-facts §3.2
  EXPECT_EQ(json["multiset_count"], 64);
  ASSERT_EQ(json["layouts"].size(), 239u);
  for (const auto& layout : json["layouts"]) {
    unsigned used = 0;
    for (const auto& instance : layout["instances"]) {
      const int start = instance["start"];
      const int size = instance["size"];
      ASSERT_GE(start, 0);
      ASSERT_LE(start + size, 8) << layout.dump();
      const unsigned mask = ((1u << size) - 1u) << start;
      EXPECT_EQ(used & mask, 0u) << "overlap in " << layout.dump();
      used |= mask;
    }
  }
}

TEST(CliLayouts, BaseCountsText) {
  const Result r = Gpuslice("layouts H100-80GB --maximal --base");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.output, AllOf(HasSubstr("19 maximal layouts"), HasSubstr("14 distinct")));
  const nlohmann::json a30 = RunJson("layouts A30 --maximal --base --json");
  EXPECT_EQ(a30["layout_count"], 5);
  EXPECT_EQ(a30["multiset_count"], 4);
  EXPECT_EQ(Gpuslice("layouts A100-40GB --profiles 3g.40gb").exit_code, 2);
}

TEST(CliGpus, JsonListsEveryModel) {
  const nlohmann::json json = RunJson("gpus --json");
  std::set<std::string> listed;
  for (const auto& gpu : json["gpus"]) listed.insert(gpu["id"].get<std::string>());
  std::set<std::string> catalog;
  for (const auto& model : gpuslice::hw::Catalog::Builtin().models()) catalog.insert(model.id);
  EXPECT_EQ(listed, catalog);
  EXPECT_EQ(json["gpus"].size(), catalog.size());
  for (const auto& gpu : json["gpus"]) {
    const auto* model = gpuslice::hw::Catalog::Builtin().Find(gpu["id"].get<std::string>());
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(gpu["mig_capable"], model->mig_capable()) << model->id;
    EXPECT_EQ(gpu["memory_mib"], model->memory_mib) << model->id;
  }
  const Result text = Gpuslice("gpus");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_THAT(text.output, AllOf(HasSubstr("H100-80GB"), HasSubstr("RTX-4090"), HasSubstr("T4")));
}

TEST(CliProfiles, H100Json) {
  const nlohmann::json json = RunJson("profiles h100 --json");
  EXPECT_EQ(json["gpu"]["id"], "H100-80GB");
  ASSERT_EQ(json["profiles"].size(), 7u);
  std::set<int> ids;
  for (const auto& profile : json["profiles"]) ids.insert(profile["id"].get<int>());
  EXPECT_EQ(ids, (std::set<int>{19, 20, 15, 14, 9, 5, 0}));
  for (const auto& profile : json["profiles"]) {
    if (profile["name"] != "3g.40gb") continue;
    EXPECT_EQ(profile["memory_mib"], 40448);
    EXPECT_EQ(profile["memory_gib"], "39.50");  // §0.10 %.2f rule
    ASSERT_EQ(profile["placements"].size(), 2u);
    EXPECT_EQ(profile["placements"][0]["start"], 0);
    EXPECT_EQ(profile["placements"][1]["start"], 4);
    EXPECT_EQ(profile["placements"][1]["size"], 4);
  }
  const Result text = Gpuslice("profiles A100-40GB");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_THAT(text.output, AllOf(HasSubstr("{0,1,2,3,4,5,6}:1"), HasSubstr("4.75")));
  EXPECT_EQ(Gpuslice("profiles RTX-4090").exit_code, 2);
}

TEST(CliCatalogOption, UserFileAddsAndRejects) {
  const std::string good = ::testing::TempDir() + "gpuslice_cli_user.yaml";
  {
    std::ofstream file(good);
    file << R"(version: 1
gpus:
- id: CLI-TEST-GPU
  display_name: "CLI Test GPU"
  pci_device_ids: ["0xABE0"]
  architecture: Testarch
  chip: T1
  compute_capability: "9.0"
  memory_mib: 16384
  sms: 100
  confidence: unconfirmed
  mig:
    compute_slices: 2
    placement_units: 2
    sms: 100
    min_driver: "R525"
    default_placement: {confidence: unconfirmed}
    profiles:
    - {name: 1g.8gb, smi_id: 19, nvml_const: 1_SLICE, compute_slices: 1, placement_size: 1, memory_mib: 8128, sms: 50,
       engines: {ce: 1, dec: 0, enc: 0, jpeg: 0, ofa: 0}, max_instances: 2, starts: [0, 1], confidence: unconfirmed}
    - {name: 2g.16gb, smi_id: 0, nvml_const: 2_SLICE, compute_slices: 2, placement_size: 2, memory_mib: 16256, sms: 100,
       engines: {ce: 2, dec: 1, enc: 0, jpeg: 1, ofa: 1}, max_instances: 1, starts: [0], confidence: unconfirmed}
)";
  }
  const nlohmann::json json = RunJson("--catalog '" + good + "' profiles CLI-TEST-GPU --json");
  EXPECT_EQ(json["profiles"].size(), 2u);
  EXPECT_EQ(Gpuslice("--catalog '" + good + "' check CLI-TEST-GPU 19,19").exit_code, 0);
  EXPECT_EQ(Gpuslice("--catalog '" + good + "' check CLI-TEST-GPU 0,19").exit_code, 1);
  EXPECT_EQ(Gpuslice("check CLI-TEST-GPU 19").exit_code, 2);  // not in the built-in catalog

  const std::string bad = ::testing::TempDir() + "gpuslice_cli_bad.yaml";
  {
    std::ofstream file(bad);
    file << "version: 1\ngpus:\n- id: X\n  colour: red\n";
  }
  const Result r = Gpuslice("--catalog '" + bad + "' gpus");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("gpuslice_cli_bad.yaml:"));
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

}  // namespace
