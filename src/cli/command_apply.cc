// gpuslice apply / assert / export: NVIDIA mig-parted's config files, applied safely.
#include <fstream>
#include <iostream>
#include <sstream>

#include "common.h"
#include "device_options.h"
#include "gpuslice/agent/apply.h"

namespace gpuslice::cli {
namespace {

struct ApplyOptions {
  DeviceOptions device;
  std::string file;
  std::string config;
  std::string hooks_file;
  bool dry_run = false;
  bool force = false;
  bool skip_reset = false;
  bool mode_only = false;
  bool valid_config_only = false;
  std::string output = "yaml";
  std::string label = "current";
  bool placements = false;
};

std::optional<std::string> ReadInput(const std::string& path) {
  std::stringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
    return text.str();
  }
  std::ifstream file(path);
  if (!file) {
    PrintError("cannot read '" + path + "'");
    return std::nullopt;
  }
  text << file.rdbuf();
  return text.str();
}

std::optional<spec::MigConfigFile> ReadConfig(const std::string& path) {
  std::optional<std::string> text = ReadInput(path);
  if (!text) return std::nullopt;
  absl::StatusOr<spec::MigConfigFile> file =
      spec::ParseMigPartedConfig(*text, path == "-" ? "<stdin>" : path);
  if (!file.ok()) {
    PrintError(std::string(file.status().message()));
    return std::nullopt;
  }
  return *std::move(file);
}

int RunApply(const GlobalOptions& global, const ApplyOptions& options) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  std::optional<spec::MigConfigFile> file = ReadConfig(options.file);
  if (!file) return kExitBadInput;
  std::optional<spec::HooksFile> hooks;
  if (!options.hooks_file.empty()) {
    std::optional<std::string> text = ReadInput(options.hooks_file);
    if (!text) return kExitBadInput;
    absl::StatusOr<spec::HooksFile> parsed = spec::ParseHooksFile(*text, options.hooks_file);
    if (!parsed.ok()) {
      PrintError(std::string(parsed.status().message()));
      return kExitBadInput;
    }
    hooks = *std::move(parsed);
  }
  std::unique_ptr<device::Backend> backend = OpenBackend(options.device, *catalog);
  if (backend == nullptr) return kExitBadInput;
  agent::ApplyRequest request;
  request.file = &*file;
  request.file_path = options.file;
  request.config_name = options.config;
  request.dry_run = options.dry_run;
  request.force = options.force;
  request.skip_reset = options.skip_reset;
  request.mode_only = options.mode_only;
  request.hooks = hooks ? &*hooks : nullptr;
  request.journal_path = options.dry_run ? "" : JournalPath(options.device);
  std::cout << "Applying "
            << (options.config.empty() ? "the config" : "config '" + options.config + "'")
            << " from " << options.file << " on " << backend->Describe()
            << (options.dry_run ? " (dry run: nothing is changed)" : "") << "\n";
  absl::StatusOr<agent::ApplyResult> result = agent::ApplyConfig(
      *backend, *catalog, request, [](const std::string& line) { std::cout << line << "\n"; });
  std::cout.flush();
  if (!result.ok()) {
    PrintError(std::string(result.status().message()));
    return absl::IsFailedPrecondition(result.status()) || absl::IsNotFound(result.status()) ||
                   absl::IsInvalidArgument(result.status())
               ? kExitBadInput
               : kExitCheckFailed;
  }
  return kExitOk;
}

int RunAssert(const GlobalOptions& global, const ApplyOptions& options) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  std::optional<spec::MigConfigFile> file = ReadConfig(options.file);
  if (!file) return kExitBadInput;
  absl::StatusOr<const std::vector<spec::ConfigEntry>*> entries =
      spec::SelectConfig(*file, options.config);
  if (!entries.ok()) {
    PrintError(std::string(entries.status().message()));
    return kExitBadInput;
  }
  if (options.valid_config_only) {
    std::cout << "Selected MIG configuration is valid\n";
    return kExitOk;
  }
  std::unique_ptr<device::Backend> backend = OpenBackend(options.device, *catalog);
  if (backend == nullptr) return kExitBadInput;
  absl::StatusOr<std::vector<std::string>> differences =
      agent::AssertConfig(*backend, *catalog, *file, options.config, options.mode_only);
  if (!differences.ok()) {
    PrintError(std::string(differences.status().message()));
    return kExitBadInput;
  }
  if (differences->empty()) {
    std::cout << "Selected MIG configuration currently applied\n";
    return kExitOk;
  }
  std::cout << "Assertion failure: selected configuration not currently applied\n";
  for (const std::string& line : *differences) std::cout << "  " << line << "\n";
  return kExitCheckFailed;
}

int RunExport(const GlobalOptions& global, const ApplyOptions& options) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  std::unique_ptr<device::Backend> backend = OpenBackend(options.device, *catalog);
  if (backend == nullptr) return kExitBadInput;
  absl::StatusOr<spec::MigConfigFile> file =
      agent::ExportConfig(*backend, *catalog, options.label, options.placements);
  if (!file.ok()) {
    PrintError(std::string(file.status().message()));
    return kExitBadInput;
  }
  std::string text = spec::WriteMigPartedConfig(
      *file, options.output == "json" ? spec::OutputFormat::kJson : spec::OutputFormat::kYaml);
  if (!text.empty() && text.back() != '\n') text += '\n';
  std::cout << text;
  return kExitOk;
}

void AddConfigOptions(CLI::App* command, ApplyOptions& options) {
  command->add_option("-f,--config-file", options.file, "mig-parted config file ('-' = stdin)")
      ->envname("MIG_PARTED_CONFIG_FILE")
      ->required();
  command
      ->add_option("-c,--selected-config", options.config,
                   "Config to use (optional when the file has exactly one)")
      ->envname("MIG_PARTED_SELECTED_CONFIG");
  command->add_flag("-m,--mode-only", options.mode_only, "Only MIG modes, not instances")
      ->envname("MIG_PARTED_MODE_CHANGE_ONLY");
}

}  // namespace

void AddApplyCommands(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto options = std::make_shared<ApplyOptions>();
  CLI::App* apply = app.add_subcommand(
      "apply",
      "Apply a MIG config from an NVIDIA mig-parted config file. Instances that already match "
      "stay, "
      "only conflicting ones are destroyed, new ones are created at exact placements; instances "
      "with processes are never destroyed without --force; an interrupted apply is converged by "
      "the next run. Exit status: 0 applied, 1 a device call failed, 2 bad input or refused.");
  AddConfigOptions(apply, *options);
  AddDeviceOptions(*apply, options->device);
  apply->add_option("-k,--hooks-file", options->hooks_file, "mig-parted hooks file")
      ->envname("MIG_PARTED_HOOKS_FILE");
  apply
      ->add_flag("-s,--skip-reset", options->skip_reset,
                 "Never reset a GPU (a mode change stays pending)")
      ->envname("MIG_PARTED_SKIP_RESET");
  apply->add_flag("--dry-run", options->dry_run, "Print the exact steps and change nothing");
  apply->add_flag("--force", options->force,
                  "Terminate the processes on instances that must be destroyed (SIGTERM, then "
                  "SIGKILL after 10 s)");
  apply->callback([&global, options, action] {
    *action = [&global, options] { return RunApply(global, *options); };
  });

  CLI::App* assert_command = app.add_subcommand(
      "assert", "Check that the GPUs match a MIG config (exit 0) or say how they differ (exit 1)");
  AddConfigOptions(assert_command, *options);
  AddDeviceOptions(*assert_command, options->device);
  assert_command->add_flag("-a,--valid-config", options->valid_config_only,
                           "Only check that the file and the selected config are valid");
  assert_command->callback([&global, options, action] {
    *action = [&global, options] { return RunAssert(global, *options); };
  });

  CLI::App* export_command = app.add_subcommand(
      "export",
      "Print the GPUs' current MIG layout as a mig-parted config (re-applying it changes nothing)");
  AddDeviceOptions(*export_command, options->device);
  export_command->add_option("-o,--output-format", options->output, "yaml (default) or json")
      ->check(CLI::IsMember({"yaml", "json"}));
  export_command->add_option("-l,--config-label", options->label, "Config name (default: current)");
  export_command->add_flag("--placements", options->placements,
                           "Add gpuslice-placements (exact starts; a gpuslice extension mig-parted "
                           "does not read)");
  export_command->callback([&global, options, action] {
    *action = [&global, options] { return RunExport(global, *options); };
  });
}

}  // namespace gpuslice::cli
