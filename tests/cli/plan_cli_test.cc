// Black-box tests of `gpuslice plan`: the examples in examples/plan/, the output formats, the
// files written with -o (checked against each other, and applied to a simulated machine with
// `gpuslice apply`), bad input, unplaced workloads and re-planning with --current.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/run_gpuslice.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/spec/mig_parted.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

#ifndef GPUSLICE_BINARY
#error "GPUSLICE_BINARY must name the built gpuslice executable"
#endif
#ifndef GPUSLICE_SOURCE_DIR
#error "GPUSLICE_SOURCE_DIR must name the source tree"
#endif

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

namespace fs = std::filesystem;

using Outcome = gpuslice::cli::testing::CommandResult;

Outcome Gpuslice(const std::string& args, bool with_stderr = true) {
  return gpuslice::cli::testing::RunGpuslice(args, with_stderr);
}

std::string Example(const std::string& name) {
  return std::string(GPUSLICE_SOURCE_DIR) + "/examples/plan/" + name;
}

const std::string kExampleArgs =
    "plan -w '" + Example("workloads.yaml") + "' -f '" + Example("fleet.yaml") + "'";

// A fresh empty directory for one test.
std::string FreshDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("gpuslice_plan_cli_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

constexpr const char* kSmallFleet = R"(currency: USD
nodes:
  - name: n1
    gpus:
      - model: A100-80GB
        count: 2
        cost_per_gpu_hour: 2.0
)";

constexpr const char* kSmallWorkloads = R"(workloads:
  - name: embed
    tenant: search
    replicas: 3
    peak_memory_gib: 6
  - name: chat
    tenant: chat
    replicas: 1
    peak_memory_gib: 30
)";

TEST(PlanCli, HelpExplainsInputsModesAndOutputs) {
  const Outcome help = Gpuslice("plan --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output,
              AllOf(HasSubstr("-w,--workloads"), HasSubstr("-f,--fleet"), HasSubstr("--exact"),
                    HasSubstr("--fast"), HasSubstr("--time-limit"), HasSubstr("--json"),
                    HasSubstr("--yaml"), HasSubstr("-o,--output"), HasSubstr("--out-dir"),
                    HasSubstr("--current"), HasSubstr("Example:"),
                    HasSubstr("gpuslice apply -f out/mig-config.yaml -c gpuslice-gpu-h100-01")));
  EXPECT_THAT(Gpuslice("--help").output, HasSubstr("gpuslice plan -w workloads.yaml"));
}

TEST(PlanCli, ExampleTextReport) {
  const Outcome run = Gpuslice(kExampleArgs);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* section :
       {"\nSizing\n", "\nPlan\n", "\nCost (USD)\n", "\nUtilisation", "\nStranded capacity\n",
        "\nRedundancy\n", "\nDoes MIG pay off here?\n", "\nNotes\n"}) {
    EXPECT_THAT(run.output, HasSubstr(section));
  }
  EXPECT_THAT(run.output, AllOf(HasSubstr("one-workload-per-GPU"), HasSubstr("all-balanced"),
                                HasSubstr("Verdict:"), HasSubstr("search-embeddings")));
  EXPECT_THAT(run.output, Not(HasSubstr("\nUnplaced\n")));
}

TEST(PlanCli, JsonReportIsConsistent) {
  for (const char* mode : {"", " --fast", " --exact --time-limit 20"}) {
    const Outcome run = Gpuslice(kExampleArgs + mode + " --json", /*with_stderr=*/false);
    ASSERT_EQ(run.exit_code, 0) << mode << "\n" << run.output;
    const nlohmann::json json = nlohmann::json::parse(run.output);
    const int used = json["summary"]["gpus_used"].get<int>();
    EXPECT_GT(used, 0);
    int counted = 0;
    for (const nlohmann::json& gpu : json["gpus"]) counted += gpu["used"].get<bool>() ? 1 : 0;
    EXPECT_EQ(counted, used);
    ASSERT_EQ(json["baselines"].size(), 2u);
    EXPECT_EQ(json["baselines"][0]["name"], "one-workload-per-GPU");
    // The plan never needs more GPUs than one workload per GPU.
    EXPECT_GE(json["baselines"][0]["gpus"].get<int>(), used) << mode;
    EXPECT_TRUE(json["unplaced"].empty());
    EXPECT_FALSE(json["solver"]["name"].get<std::string>().empty());
    EXPECT_FALSE(json["mig_pays_off"]["verdict"].get<std::string>().empty());
  }
}

TEST(PlanCli, YamlReportHasTheJsonStructure) {
  const Outcome json_run = Gpuslice(kExampleArgs + " --fast --json", false);
  const Outcome yaml_run = Gpuslice(kExampleArgs + " --fast --yaml", false);
  ASSERT_EQ(yaml_run.exit_code, 0) << yaml_run.output;
  const nlohmann::json json = nlohmann::json::parse(json_run.output);
  const YAML::Node yaml = YAML::Load(yaml_run.output);
  EXPECT_EQ(yaml["summary"]["gpus_used"].as<int>(), json["summary"]["gpus_used"].get<int>());
  EXPECT_EQ(yaml["workloads"].size(), json["workloads"].size());
  EXPECT_EQ(yaml["gpus"].size(), json["gpus"].size());
  EXPECT_EQ(yaml["baselines"][1]["name"].as<std::string>(), "all-balanced");
  EXPECT_EQ(Gpuslice(kExampleArgs + " --json --yaml").exit_code, 2);
  EXPECT_EQ(Gpuslice(kExampleArgs + " --exact --fast").exit_code, 2);
}

TEST(PlanCli, MixedFleetExample) {
  const Outcome run = Gpuslice("plan -w '" + Example("workloads.yaml") + "' -f '" +
                                   Example("fleet-mixed.yaml") + "' --fast --json",
                               false);
  // Exit 0, or 1 when a workload cannot be placed on this fleet; either way a full report.
  ASSERT_TRUE(run.exit_code == 0 || run.exit_code == 1) << run.output;
  const nlohmann::json json = nlohmann::json::parse(run.output);
  EXPECT_EQ(json["summary"]["currency"], "EUR");
  EXPECT_EQ(json["unplaced"].empty(), run.exit_code == 0);
}

// The GIs of every MIG GPU per (node, gpu), from assignment.json, as sorted "profile@start".
std::map<std::pair<std::string, int>, std::vector<std::string>> AssignedLayouts(
    const nlohmann::json& assignment) {
  std::map<std::pair<std::string, int>, std::vector<std::string>> layouts;
  for (const nlohmann::json& gpu : assignment["gpus"]) {
    std::vector<std::string>& gis =
        layouts[{gpu["node"].get<std::string>(), gpu["gpu"].get<int>()}];
    if (!gpu["mig_enabled"].get<bool>()) continue;
    for (const nlohmann::json& instance : gpu["instances"]) {
      gis.push_back(instance["profile"].get<std::string>() + "@" +
                    std::to_string(instance["start"].get<int>()));
    }
    std::sort(gis.begin(), gis.end());
  }
  return layouts;
}

TEST(PlanCli, OutputDirFilesAgree) {
  const std::string dir = FreshDir("out");
  const Outcome run = Gpuslice(kExampleArgs + " -o '" + dir + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output,
              HasSubstr("gpuslice apply -f " + dir + "/mig-config.yaml -c gpuslice-gpu-h100-01"));
  for (const char* name : {"mig-config.yaml", "assignment.json", "report.txt", "report.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(dir) / name)) << name;
  }
  // No temporary file is left behind.
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_THAT(entry.path().filename().string(), Not(HasSubstr(".tmp.")));
  }
  const nlohmann::json report = nlohmann::json::parse(ReadFile(dir + "/report.json"));
  const nlohmann::json assignment = nlohmann::json::parse(ReadFile(dir + "/assignment.json"));
  EXPECT_THAT(ReadFile(dir + "/report.txt"), HasSubstr("Does MIG pay off here?"));
  EXPECT_EQ(report["gpus"].size(), assignment["gpus"].size());

  // Every workload's instances in the map add up to its demand.
  for (const nlohmann::json& workload : assignment["workloads"]) {
    double capacity = 0;
    for (const nlohmann::json& i : workload["instances"]) capacity += i["capacity"].get<double>();
    EXPECT_GE(capacity + 1e-6, workload["demand"].get<double>()) << workload["name"];
  }

  // The mig-parted config resolves, GPU by GPU, to the GIs of the assignment map.
  absl::StatusOr<gpuslice::spec::MigConfigFile> config =
      gpuslice::spec::ParseMigPartedConfig(ReadFile(dir + "/mig-config.yaml"), "mig-config.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  const auto layouts = AssignedLayouts(assignment);
  const gpuslice::hw::Catalog& catalog = gpuslice::hw::Catalog::Builtin();
  for (const nlohmann::json& gpu : assignment["gpus"]) {
    const std::string node = gpu["node"].get<std::string>();
    const int index = gpu["gpu"].get<int>();
    const gpuslice::hw::GpuModel* model = catalog.Find(gpu["model"].get<std::string>());
    ASSERT_NE(model, nullptr);
    auto entries = gpuslice::spec::SelectConfig(*config, "gpuslice-" + node);
    ASSERT_TRUE(entries.ok()) << entries.status();
    auto entry = gpuslice::spec::EntryForGpu(**entries, index, model->pci_device_ids.front());
    ASSERT_TRUE(entry.ok() && *entry != nullptr) << node << " GPU " << index;
    EXPECT_EQ((*entry)->mig_enabled, gpu["mig_enabled"].get<bool>());
    auto gis = gpuslice::spec::ResolveEntry(**entry, *model);
    ASSERT_TRUE(gis.ok()) << gis.status();
    std::vector<std::string> resolved;
    for (const auto& gi : *gis) {
      resolved.push_back(model->mig->profiles[static_cast<size_t>(gi.profile)].name + "@" +
                         std::to_string(gi.start.value_or(-1)));
    }
    std::sort(resolved.begin(), resolved.end());
    EXPECT_EQ(resolved, layouts.at({node, index})) << node << " GPU " << index;
  }
}

TEST(PlanCli, WrittenConfigAppliesOnASimulatedNode) {
  const std::string dir = FreshDir("apply");
  ASSERT_EQ(Gpuslice(kExampleArgs + " --fast -o '" + dir + "'").exit_code, 0);
  // examples/plan/fleet.yaml: gpu-h100-01 has 8 x H100-80GB, gpu-a100-01 4 x A100-80GB.
  for (const auto& [node, gpus] : std::vector<std::pair<std::string, std::string>>{
           {"gpu-h100-01", "8xH100-80GB"}, {"gpu-a100-01", "4xA100-80GB"}}) {
    const std::string machine = dir + "/" + node + ".json";
    const Outcome create = Gpuslice("sim create '" + machine + "' " + gpus);
    ASSERT_EQ(create.exit_code, 0) << create.output;
    const std::string config = "-f '" + dir + "/mig-config.yaml' -c gpuslice-" + node;
    const Outcome apply = Gpuslice("apply --sim '" + machine + "' " + config);
    EXPECT_EQ(apply.exit_code, 0) << node << "\n" << apply.output;
    const Outcome check = Gpuslice("assert --sim '" + machine + "' " + config);
    EXPECT_EQ(check.exit_code, 0) << node << "\n" << check.output;
  }
  // Without placements the file is plain mig-parted, and still valid for gpuslice.
  const std::string plain = FreshDir("plain");
  ASSERT_EQ(Gpuslice(kExampleArgs + " --fast --no-placements -o '" + plain + "'").exit_code, 0);
  const std::string text = ReadFile(plain + "/mig-config.yaml");
  EXPECT_THAT(text, Not(HasSubstr("gpuslice-placements:")));
  EXPECT_EQ(
      Gpuslice("assert -a -f '" + plain + "/mig-config.yaml' -c gpuslice-gpu-a100-01 --sim '" +
               dir + "/gpu-a100-01.json'")
          .exit_code,
      0);
}

TEST(PlanCli, BadInputNamesFileLineAndFieldAndExitsTwo) {
  const std::string dir = FreshDir("bad");
  WriteFile(dir + "/fleet.yaml", kSmallFleet);
  WriteFile(dir + "/workloads.yaml", std::string(kSmallWorkloads) + "    colour: blue\n");
  const Outcome run = Gpuslice("plan -w '" + dir + "/workloads.yaml' -f '" + dir + "/fleet.yaml'");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, AllOf(HasSubstr("workloads.yaml:10: workloads[1].colour")));

  WriteFile(dir + "/workloads.yaml", kSmallWorkloads);
  WriteFile(dir + "/fleet.yaml", std::string(kSmallFleet) + "      - model: A100-80G\n" +
                                     "        count: 1\n        cost_per_gpu_hour: 2.0\n");
  const Outcome model =
      Gpuslice("plan -w '" + dir + "/workloads.yaml' -f '" + dir + "/fleet.yaml'");
  EXPECT_EQ(model.exit_code, 2) << model.output;
  EXPECT_THAT(model.output, AllOf(HasSubstr("fleet.yaml:8"), HasSubstr("A100-80G")));

  EXPECT_EQ(Gpuslice("plan -w /nonexistent/workloads.yaml -f '" + dir + "/fleet.yaml'").exit_code,
            2);
  EXPECT_EQ(Gpuslice("plan -f '" + dir + "/fleet.yaml'").exit_code, 2);  // -w is required
}

TEST(PlanCli, NoPartialOutputOnError) {
  const std::string dir = FreshDir("partial");
  WriteFile(dir + "/fleet.yaml", kSmallFleet);
  WriteFile(dir + "/workloads.yaml", kSmallWorkloads);
  // report.json cannot be written (a directory stands in its way): nothing else may appear.
  const std::string out = dir + "/out";
  fs::create_directories(out + "/report.json");
  const Outcome run =
      Gpuslice("plan -w '" + dir + "/workloads.yaml' -f '" + dir + "/fleet.yaml' -o '" + out + "'");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("report.json"));
  std::set<std::string> left;
  for (const auto& entry : fs::directory_iterator(out)) left.insert(entry.path().filename());
  EXPECT_EQ(left, std::set<std::string>{"report.json"});
  // An output path under a regular file cannot be created either.
  const Outcome under_file = Gpuslice("plan -w '" + dir + "/workloads.yaml' -f '" + dir +
                                      "/fleet.yaml' -o '" + dir + "/fleet.yaml/out'");
  EXPECT_EQ(under_file.exit_code, 2) << under_file.output;
}

TEST(PlanCli, UnplacedWorkloadsExitOne) {
  const std::string dir = FreshDir("unplaced");
  WriteFile(dir + "/fleet.yaml", kSmallFleet);
  WriteFile(dir + "/workloads.yaml", std::string(kSmallWorkloads) +
                                         "  - name: huge\n    replicas: 1\n"
                                         "    peak_memory_gib: 500\n");
  const Outcome run = Gpuslice("plan -w '" + dir + "/workloads.yaml' -f '" + dir + "/fleet.yaml'");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, AllOf(HasSubstr("\nUnplaced\n  huge: "), HasSubstr("NOT PLACED")));
}

TEST(PlanCli, WithoutCostsCountsGpus) {
  const std::string dir = FreshDir("nocost");
  WriteFile(dir + "/fleet.yaml",
            "nodes:\n  - name: n1\n    gpus:\n      - model: H100-80GB\n"
            "        count: 2\n");
  WriteFile(dir + "/workloads.yaml", kSmallWorkloads);
  const Outcome run = Gpuslice("plan -w '" + dir + "/workloads.yaml' -f '" + dir + "/fleet.yaml'");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, AllOf(HasSubstr("GPU-hours per month"), Not(HasSubstr("USD"))));
}

TEST(PlanCli, ReplanFromTheWrittenAssignment) {
  const std::string dir = FreshDir("replan");
  WriteFile(dir + "/fleet.yaml", kSmallFleet);
  WriteFile(dir + "/workloads.yaml", kSmallWorkloads);
  const std::string args = "plan -w '" + dir + "/workloads.yaml' -f '" + dir + "/fleet.yaml'";
  ASSERT_EQ(Gpuslice(args + " -o '" + dir + "/v1'").exit_code, 0);
  // Same demand: nothing moves.
  const Outcome same = Gpuslice(args + " --current '" + dir + "/v1/assignment.json'");
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_THAT(same.output, AllOf(HasSubstr("\nRe-plan from "),
                                 HasSubstr("No workload that is still wanted has to stop.")));
  // One more embed replica: the JSON carries the steps.
  WriteFile(dir + "/workloads.yaml",
            std::string(kSmallWorkloads)
                .replace(std::string(kSmallWorkloads).find("replicas: 3"), 11, "replicas: 4"));
  const Outcome more = Gpuslice(args + " --json --current '" + dir + "/v1/assignment.json'", false);
  ASSERT_EQ(more.exit_code, 0) << more.output;
  const nlohmann::json json = nlohmann::json::parse(more.output);
  ASSERT_TRUE(json.contains("replan"));
  EXPECT_GE(json["replan"]["created_instances"].get<int>(), 1);
  EXPECT_FALSE(json["replan"]["steps"].empty());
  // A broken state file is bad input.
  WriteFile(dir + "/broken.json", "{\"gpus\": [{\"node\": 3}]}");
  EXPECT_EQ(Gpuslice(args + " --current '" + dir + "/broken.json'").exit_code, 2);
}

}  // namespace
