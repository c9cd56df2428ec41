// The gpuslice command: one subcommand per user job. Only parses arguments and wires the libraries.
#include <csignal>
#include <iostream>

#include "common.h"
#include "gpuslice/util/suggest.h"

namespace gpuslice::cli {
// gpuslice top (command_top.cc).
void AddTopCommand(CLI::App& app, const GlobalOptions& global, Action* action);
// gpuslice report usage (command_report.cc).
void AddReportCommand(CLI::App& app, const GlobalOptions& global, Action* action);
// gpuslice measure (command_measure.cc).
void AddMeasureCommand(CLI::App& app, const GlobalOptions& global, Action* action);
// gpuslice extender (command_extender.cc).
void AddExtenderCommand(CLI::App& app, const GlobalOptions& global, Action* action);
// gpuslice device-plugin (command_device_plugin.cc).
void AddDevicePluginCommand(CLI::App& app, const GlobalOptions& global, Action* action);
// gpuslice dra-driver (command_dra_driver.cc).
void AddDraDriverCommand(CLI::App& app, const GlobalOptions& global, Action* action);

namespace {

// The command the parse reached ("gpuslice admin tenant") and its App.
CLI::App* Deepest(CLI::App& app, std::string* path) {
  CLI::App* deepest = &app;
  *path = app.get_name();
  for (std::vector<CLI::App*> parsed = app.get_subcommands(); !parsed.empty();
       parsed = deepest->get_subcommands()) {
    deepest = parsed.front();
    *path += " " + deepest->get_name();
  }
  return deepest;
}

// After a failed parse, for the first word left over: when the command reached has subcommands
// and the word is none of them, "unknown command 'relase' for 'gpuslice'; did you mean
// 'release'?"; for an unknown --option, the same with its options. Empty otherwise (CLI11's own
// message is then the right one).
std::string UnknownWord(CLI::App& app) {
  std::string path;
  CLI::App* deepest = Deepest(app, &path);
  std::vector<std::string> commands;
  for (const CLI::App* sub : deepest->get_subcommands({})) {
    if (!sub->get_group().empty()) commands.push_back(sub->get_name());
  }
  std::vector<std::string> options;
  for (const CLI::Option* option : deepest->get_options()) {
    for (const std::string& name : option->get_lnames()) options.push_back("--" + name);
  }
  for (const std::string& word : deepest->remaining()) {
    const bool is_option = word.rfind("--", 0) == 0;
    if (word.empty() || (!is_option && (word.front() == '-' || commands.empty()))) continue;
    const std::string name = is_option ? word.substr(0, word.find('=')) : word;
    std::string message = std::string(is_option ? "unknown option '" : "unknown command '") + name +
                          "' for '" + path + "'";
    const std::string hint =
        gpuslice::util::DidYouMean(gpuslice::util::Closest(name, is_option ? options : commands));
    if (!hint.empty()) message += "; " + hint;
    return message + "\nRun '" + path + " --help' for its " +
           (is_option ? "options." : "commands.");
  }
  return "";
}

}  // namespace
}  // namespace gpuslice::cli

int main(int argc, char** argv) {
  using namespace gpuslice::cli;
  // A server that closes a connection early (an error answered before the body was read) must
  // not kill the client: writes then fail with EPIPE and the reply or the error is reported.
  // (`gpuslice run` gives its command the default disposition back.)
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app(
      "gpuslice — slice NVIDIA GPUs into isolated, right-sized pieces.\n\n"
      "Explore the MIG hardware model:\n"
      "  gpuslice gpus                        GPU models known, with and without MIG\n"
      "  gpuslice profiles H100-80GB          a model's MIG profiles and placements\n"
      "  gpuslice layouts A100-80GB --maximal every layout nothing more fits into\n"
      "  gpuslice check A100-40GB 9,19,19     is a layout valid, where does each instance go\n\n"
      "Apply layouts (local GPUs through NVML, or a simulated machine with --sim FILE):\n"
      "  gpuslice sim create m.json 2xH100-80GB   make a simulated machine\n"
      "  gpuslice apply -f mig.yaml -c NAME   apply a mig-parted config (exact placements, safe)\n"
      "  gpuslice assert -f mig.yaml -c NAME  check it is applied\n"
      "  gpuslice export                      the current layout as a mig-parted config\n"
      "  gpuslice status                      instances, UUIDs, memory and processes per GPU\n"
      "  gpuslice top                         watch the GPUs and slices live (q quits)\n"
      "  gpuslice doctor                      pre-deployment checklist for this node\n\n"
      "Plan a fleet:\n"
      "  gpuslice plan -w workloads.yaml -f fleet.yaml -o out   layouts, cost, savings, configs\n\n"
      "Hand out slices (the allocation service):\n"
      "  gpuslice serve                       start it (local GPUs, or a simulated fleet)\n"
      "  gpuslice acquire --class small --purpose \"...\"   get a slice; leases, renew, release\n"
      "  gpuslice admin tenant|user|class ...  administer; gpuslice audit  who took what, why\n"
      "  gpuslice report usage --since 7d     peak/typical use per workload, what to re-size\n"
      "  gpuslice measure -- CMD              a CUDA command's peak VRAM and smallest slice\n\n"
      "Kubernetes:\n"
      "  gpuslice device-plugin               offer MIG, whole and shared GPUs to kubelet\n"
      "  gpuslice extender --nodes F          kube-scheduler extender on the placement engine\n\n"
      "Choose a placement policy:\n"
      "  gpuslice replay --nodes nodes.csv --pods pods.csv   replay a trace under every policy\n",
      "gpuslice");
  app.require_subcommand(1);
  app.set_version_flag("--version", "gpuslice 0.1.0");
  GlobalOptions global;
  app.add_option("--catalog", global.catalog_files,
                 "Extra GPU catalog file(s) in the built-in format (docs/CATALOG.md); models with "
                 "an existing id replace the built-in entry")
      ->check(CLI::ExistingFile);
  Action action;
  AddGpusCommand(app, global, &action);
  AddProfilesCommand(app, global, &action);
  AddLayoutsCommand(app, global, &action);
  AddCheckCommand(app, global, &action);
  AddSimCommand(app, global, &action);
  AddApplyCommands(app, global, &action);
  AddStatusCommand(app, global, &action);
  AddTopCommand(app, global, &action);
  AddDoctorCommand(app, global, &action);
  AddPlanCommand(app, global, &action);
  AddReplayCommand(app, global, &action);
  AddServeCommand(app, global, &action);
  AddClientCommands(app, global, &action);
  AddRunCommands(app, global, &action);
  AddAgentCommand(app, global, &action);
  AddNodeCommands(app, global, &action);
  AddReportCommand(app, global, &action);
  AddMeasureCommand(app, global, &action);
  AddExtenderCommand(app, global, &action);
  AddDevicePluginCommand(app, global, &action);
  AddDraDriverCommand(app, global, &action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (const std::string unknown = UnknownWord(app); !unknown.empty()) {
      PrintError(unknown);
      return kExitBadInput;
    }
    const int code = app.exit(error);
    return code == 0 ? kExitOk : kExitBadInput;
  }
  return action ? action() : kExitBadInput;
}
