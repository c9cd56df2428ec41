// gpuslice plan: size workloads, pack them onto the fleet, report what it costs and saves, and
// write the mig-parted configs that `gpuslice apply` deploys.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common.h"
#include "gpuslice/plan/inputs.h"
#include "gpuslice/plan/plan.h"
#include "gpuslice/plan/replan.h"
#include "gpuslice/plan/report.h"
#include "gpuslice/spec/mig_parted.h"
#include "gpuslice/util/yaml_writer.h"

namespace gpuslice::cli {
namespace {

struct PlanCliOptions {
  std::string workloads;
  std::string fleet;
  bool exact = false;
  bool fast = false;
  double time_limit_s = 10;
  bool json = false;
  bool yaml = false;
  std::string out_dir;
  std::string output;  // -o: text, json or yaml; any other value is a directory (-o DIR, as before)
  bool no_placements = false;
  bool brief = false;
  std::string current;  // re-planning from this assignment map
};

constexpr const char* kConfigFile = "mig-config.yaml";

// The commands that deploy the written config, one per node.
std::vector<std::string> ApplyCommands(const plan::Fleet& fleet, const std::string& dir) {
  std::vector<std::string> commands;
  const std::string path = (std::filesystem::path(dir) / kConfigFile).string();
  for (const plan::Node& node : fleet.nodes) {
    commands.push_back("on " + node.name + ": gpuslice apply -f " + path + " -c " +
                       plan::MigPartedConfigName(node));
  }
  return commands;
}

std::string ConfigHeader(const plan::Fleet& fleet, bool placements) {
  std::string text =
      "# Written by `gpuslice plan`: one config per node. Apply it on each node with\n"
      "#   gpuslice apply -f mig-config.yaml -c gpuslice-<node name>\n";
  if (placements) {
    text +=
        "# gpuslice-placements pins every GPU instance to the planned start; nvidia-mig-parted\n"
        "# rejects that key (write the file with `gpuslice plan --no-placements` for it).\n";
  }
  text += "# Nodes:";
  for (const plan::Node& node : fleet.nodes) text += " " + node.name;
  return text + "\n";
}

// Writes every file to a temporary name in `dir`, then renames them all; nothing is left behind
// when a write fails.
absl::Status WriteAll(const std::string& dir,
                      const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::PermissionDeniedError("cannot create " + dir + ": " + error.message());
  // Renaming cannot be undone, so everything that would stop a rename is checked first.
  for (const auto& [name, text] : files) {
    const std::filesystem::path final_path = std::filesystem::path(dir) / name;
    if (std::filesystem::exists(final_path, error) &&
        !std::filesystem::is_regular_file(final_path, error)) {
      return absl::FailedPreconditionError("cannot write " + final_path.string() +
                                           ": something other than a file is in the way");
    }
  }
  std::vector<std::pair<std::string, std::string>> written;  // temp, final
  auto cleanup = [&written] {
    for (const auto& [temp, final_path] : written) std::remove(temp.c_str());
  };
  for (const auto& [name, text] : files) {
    const std::string final_path = (std::filesystem::path(dir) / name).string();
    const std::string temp =
        (std::filesystem::path(dir) / ("." + name + ".tmp." + std::to_string(::getpid()))).string();
    written.emplace_back(temp, final_path);
    std::ofstream out(temp, std::ios::trunc | std::ios::binary);
    if (out) {
      out << text;
      out.flush();
    }
    if (!out) {
      const std::string reason = std::strerror(errno);
      cleanup();
      return absl::PermissionDeniedError("cannot write " + temp + ": " + reason);
    }
  }
  for (const auto& [temp, final_path] : written) {
    if (std::rename(temp.c_str(), final_path.c_str()) != 0) {
      const std::string reason = std::strerror(errno);
      cleanup();
      return absl::PermissionDeniedError("cannot write " + final_path + ": " + reason);
    }
  }
  return absl::OkStatus();
}

// What re-planning changes, as text (appended to the report) and JSON (under "replan").
std::string ReplanText(const plan::ReplanResult& replan, const std::string& from) {
  std::string text = "\nRe-plan from " + from + "\n";
  text += "  Keeps " + std::to_string(replan.kept_instances) + " running instances, stops " +
          std::to_string(replan.stopped_instances) + ", creates " +
          std::to_string(replan.created_instances) + "; " + std::to_string(replan.gpus_released) +
          " GPUs re-laid to make room.\n";
  if (replan.disrupted.empty()) {
    text += "  No workload that is still wanted has to stop.\n";
  } else {
    text += "  Disrupted workloads:\n";
    for (const auto& [workload, reason] : replan.disrupted)
      text += "    " + workload + ": " + reason + "\n";
  }
  if (replan.steps.empty()) {
    text += "  Nothing to change.\n";
    return text;
  }
  text += "  Steps, in order:\n";
  int n = 0;
  for (const plan::ReplanStep& step : replan.steps) {
    std::string line = "    " + std::to_string(++n) + ". " +
                       std::string(plan::ToString(step.kind)) + " " + step.node + " GPU " +
                       std::to_string(step.gpu);
    if (!step.profile.empty()) line += " " + step.profile + "@" + std::to_string(step.start);
    if (!step.workload.empty()) line += " " + step.workload;
    if (!step.reason.empty()) line += ": " + step.reason;
    text += line + "\n";
  }
  return text;
}

nlohmann::json ReplanJson(const plan::ReplanResult& replan, const std::string& from) {
  nlohmann::json steps = nlohmann::json::array();
  for (const plan::ReplanStep& step : replan.steps) {
    steps.push_back({{"kind", std::string(plan::ToString(step.kind))},
                     {"node", step.node},
                     {"gpu", step.gpu},
                     {"profile", step.profile},
                     {"start", step.start},
                     {"workload", step.workload},
                     {"reason", step.reason}});
  }
  nlohmann::json disrupted = nlohmann::json::array();
  for (const auto& [workload, reason] : replan.disrupted)
    disrupted.push_back({{"workload", workload}, {"reason", reason}});
  return {{"from", from},
          {"kept_instances", replan.kept_instances},
          {"stopped_instances", replan.stopped_instances},
          {"created_instances", replan.created_instances},
          {"gpus_released", replan.gpus_released},
          {"disrupted", disrupted},
          {"steps", steps}};
}

int Run(const GlobalOptions& global, const PlanCliOptions& options) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  absl::StatusOr<plan::WorkloadSet> workloads =
      plan::ReadWorkloadsFile(options.workloads, *catalog);
  if (!workloads.ok()) {
    PrintError(std::string(workloads.status().message()));
    return kExitBadInput;
  }
  absl::StatusOr<plan::Fleet> fleet = plan::ReadFleetFile(options.fleet, *catalog);
  if (!fleet.ok()) {
    PrintError(std::string(fleet.status().message()));
    return kExitBadInput;
  }
  plan::PlanOptions plan_options;
  plan_options.mode = options.exact  ? plan::SolveMode::kExact
                      : options.fast ? plan::SolveMode::kFast
                                     : plan::SolveMode::kAuto;
  plan_options.time_limit_s = options.time_limit_s;
  absl::StatusOr<plan::PlanResult> result;
  std::optional<plan::ReplanResult> replan;
  if (!options.current.empty()) {
    absl::StatusOr<plan::CurrentState> current = plan::ReadCurrentStateFile(options.current);
    if (!current.ok()) {
      PrintError(std::string(current.status().message()));
      return kExitBadInput;
    }
    absl::StatusOr<plan::ReplanResult> replanned =
        plan::Replan(*current, *workloads, *fleet, *catalog, plan_options);
    if (!replanned.ok()) {
      PrintError(std::string(replanned.status().message()));
      return kExitBadInput;
    }
    replan = *std::move(replanned);
    result = replan->plan;
  } else {
    result = plan::Plan(*workloads, *fleet, *catalog, plan_options);
  }
  if (!result.ok()) {
    PrintError(std::string(result.status().message()));
    return kExitBadInput;
  }
  // Never hand out a plan that breaks a rule: check it independently of how it was made.
  const std::vector<std::string> problems = plan::CheckPlan(*result, *workloads, *fleet);
  if (!problems.empty()) {
    PrintError("internal error: the plan fails its own check; nothing written:");
    for (const std::string& problem : problems) std::cerr << "  " << problem << "\n";
    return kExitCheckFailed;
  }

  const plan::Report report = plan::BuildReport(*result, *workloads, *fleet);
  plan::TextOptions text_options;
  text_options.explanations = !options.brief;
  std::string text = plan::RenderText(report, text_options);
  std::string full_text = plan::RenderText(report, {});
  nlohmann::json json = plan::ToJson(report);
  if (replan) {
    text += ReplanText(*replan, options.current);
    full_text += ReplanText(*replan, options.current);
    json["replan"] = ReplanJson(*replan, options.current);
  }

  std::vector<std::string> follow_up;
  if (!options.out_dir.empty()) {
    const bool placements = !options.no_placements;
    const spec::MigConfigFile config = plan::ToMigPartedConfig(*result, *fleet, placements);
    const std::string config_text = ConfigHeader(*fleet, placements) +
                                    spec::WriteMigPartedConfig(config, spec::OutputFormat::kYaml);
    const std::vector<std::pair<std::string, std::string>> files = {
        {kConfigFile, config_text},
        {"assignment.json", plan::AssignmentJson(*result, *workloads, *fleet).dump(2) + "\n"},
        {"report.txt", full_text},
        {"report.json", json.dump(2) + "\n"},
    };
    if (absl::Status status = WriteAll(options.out_dir, files); !status.ok()) {
      PrintError(std::string(status.message()));
      return kExitBadInput;
    }
    follow_up.push_back("Wrote " + options.out_dir + "/{" + kConfigFile +
                        ",assignment.json,report.txt,report.json}. Deploy with:");
    for (const std::string& command : ApplyCommands(*fleet, options.out_dir))
      follow_up.push_back("  " + command);
  }

  if (options.json) {
    PrintJson(json);
  } else if (options.yaml) {
    std::cout << util::JsonToYaml(json);
  } else {
    std::cout << text;
  }
  // Structured output stays parseable: the follow-up goes to stderr then.
  std::ostream& follow = options.json || options.yaml ? std::cerr : std::cout;
  if (!follow_up.empty()) {
    follow << (options.json || options.yaml ? "" : "\n");
    for (const std::string& line : follow_up) follow << line << "\n";
  }
  return report.unplaced.empty() ? kExitOk : kExitCheckFailed;
}

}  // namespace

void AddPlanCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto options = std::make_shared<PlanCliOptions>();
  CLI::App* command = app.add_subcommand(
      "plan",
      "Plan a fleet: size each workload to MIG instances (memory with headroom, or measured "
      "throughput within a latency SLO), choose a layout for every GPU and an instance for every "
      "replica at the lowest cost, and report GPUs and money against one workload per GPU and "
      "against all-balanced, utilisation, stranded capacity, redundancy and whether MIG pays off. "
      "Exit status: 0 everything placed, 1 some workloads could not be placed (the rest of the "
      "plan is still printed and written), 2 bad input.");
  command
      ->add_option("-w,--workloads", options->workloads,
                   "Workloads file (YAML): what must run, with replicas and peak memory or a "
                   "throughput target and perf CSVs (examples/plan/README.md)")
      ->required()
      ->check(CLI::ExistingFile);
  command
      ->add_option("-f,--fleet", options->fleet,
                   "Fleet file (YAML): nodes, GPU models and counts, cost per GPU-hour, and "
                   "whether each group may use MIG")
      ->required()
      ->check(CLI::ExistingFile);
  CLI::Option* exact = command->add_flag(
      "--exact", options->exact,
      "Search until the plan is proven optimal or the time limit passes: branch and price on "
      "the number of GPUs of each price (column generation over integer covers, CBC for whole "
      "plans); the default does this for at most 3 s on fleets up to 2,000 GPUs, after the "
      "fast plan");
  CLI::Option* fast = command->add_flag(
      "--fast", options->fast,
      "Only the fast plan: LP relaxation, rounding and a few seconds of CBC over integer covers; "
      "with a proven lower bound and the gap to it");
  exact->excludes(fast);
  command
      ->add_option("--time-limit", options->time_limit_s,
                   "Seconds the planner may run before it reports its best plan and the gap "
                   "(default 10)")
      ->check(CLI::PositiveNumber);
  CLI::Option* json = command->add_flag("--json", options->json, "Print the report as JSON");
  CLI::Option* yaml = command->add_flag("--yaml", options->yaml, "Print the report as YAML");
  json->excludes(yaml);
  CLI::Option* output =
      command->add_option("-o,--output", options->output,
                          "Report format: text (default), json or yaml, as --json/--yaml");
  output->excludes(json)->excludes(yaml);
  command->add_option("--out-dir", options->out_dir,
                      "Also write DIR/mig-config.yaml (one mig-parted config per node, "
                      "gpuslice-<node>), DIR/assignment.json (which instance serves which "
                      "workload) and DIR/report.{txt,json}; all or nothing");
  // --output-dir, the spelling from before -o meant a format in every command, is kept for a
  // release (hidden from --help); so is `-o DIR`: a value that is not a format is the directory.
  command->add_option("--output-dir", options->out_dir)->group("");
  command->add_flag("--no-placements", options->no_placements,
                    "Leave gpuslice-placements out of mig-config.yaml, for nvidia-mig-parted "
                    "(which then chooses the starts itself)");
  command
      ->add_option(
          "--current", options->current,
          "Re-plan from what runs now: an assignment map (DIR/assignment.json of an "
          "earlier `plan --out-dir DIR`, edited to match reality). Running instances that still "
          "fit are kept; the report ends with the disrupted workloads and the ordered "
          "steps")
      ->check(CLI::ExistingFile);
  command->add_flag("--brief", options->brief,
                    "Leave the per-model sizing explanations out of the printed report");
  command->footer(
      "\nInputs: workloads.yaml lists what must run (name, tenant, kind, replicas + "
      "peak_memory_gib, or throughput_rps + latency_p99_ms + perf CSVs, gpu_models, "
      "min_instances); fleet.yaml lists nodes with GPU groups (model, count, cost_per_gpu_hour, "
      "mig: allowed|disabled). Errors name the file, the line and the field.\n"
      "\nModes: every plan comes with a proven lower bound. --fast stops after the fast plan\n"
      "(within 1% of the bound on 10,000 GPUs in about 2 s); --exact searches until the plan is\n"
      "proven optimal or --time-limit passes; the default searches for at most 3 s on fleets up\n"
      "to 2,000 GPUs.\n"
      "\nOutputs: the report (text, -o json or -o yaml) on stdout; with --out-dir DIR the files "
      "to\n"
      "deploy.\n"
      "\nExample:\n"
      "  gpuslice plan -w examples/plan/workloads.yaml -f examples/plan/fleet.yaml --out-dir out\n"
      "  # then on each node, e.g. gpu-h100-01:\n"
      "  gpuslice apply -f out/mig-config.yaml -c gpuslice-gpu-h100-01 --dry-run\n"
      "  gpuslice apply -f out/mig-config.yaml -c gpuslice-gpu-h100-01\n"
      "  # later, when the demand changes: keep what runs, move as little as possible\n"
      "  gpuslice plan -w workloads.yaml -f fleet.yaml --current out/assignment.json --out-dir "
      "out2\n");
  command->callback([&global, options, action] {
    *action = [&global, options] {
      if (options->output == "json") {
        options->json = true;
      } else if (options->output == "yaml") {
        options->yaml = true;
      } else if (options->output != "text" && !options->output.empty()) {
        if (!options->out_dir.empty()) {
          PrintError("-o " + options->output +
                     ": a format (text, json or yaml); the files go to --out-dir");
          return kExitBadInput;
        }
        options->out_dir = options->output;
      }
      return Run(global, *options);
    };
  });
}

}  // namespace gpuslice::cli
