// Shared plumbing of the gpuslice command: the catalog in use, output helpers, exit codes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/util/this_machine.h"
#include "nlohmann/json.hpp"

namespace gpuslice::cli {

// Exit codes (docs/CLI.md): 0 success / valid; 1 a check failed (invalid layout) or the server
// refused; 2 bad input, usage, or the server unreachable; 3 not signed in or not allowed (a
// missing, wrong, expired or under-privileged token); 4 queued.
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitNotAllowed = 3;
// `acquire`: the request waits in the queue; no slice is granted yet.
inline constexpr int kExitQueued = 4;

// Options every subcommand shares.
struct GlobalOptions {
  std::vector<std::string> catalog_files;  // --catalog FILE (repeatable)
};

// A subcommand's action returns an exit code.
using Action = std::function<int()>;

// The built-in catalog plus the user's --catalog files. Prints the error and returns nullptr when
// a file cannot be read or is invalid.
const hw::Catalog* LoadCatalog(const GlobalOptions& options);

// A duration option's text in the one syntax of util/duration.h ("90", "45s", "30m", "1h30m",
// "7d"), turned into whole seconds for the option's integer: `->transform(Duration(max_s))`.
// With `zero_means_none`, "0" and "never" are accepted and give 0. Refused text is a usage error
// that shows the accepted forms.
CLI::Validator Duration(std::int64_t max_s, bool zero_means_none = false);

// Resolves a GPU name; prints the error (with suggestions) on failure.
const hw::GpuModel* ResolveGpu(const hw::Catalog& catalog, const std::string& name);

// Resolves a MIG-capable GPU; explains when the model has no MIG.
const hw::GpuModel* ResolveMigGpu(const hw::Catalog& catalog, const std::string& name);

// nvidia-smi's GiB column: mib / 1024 with two decimals ("9.62" for 9856).
std::string Gib(std::int64_t mib);

// A value with its confidence mark: "" confirmed, "~" partial, "?" unconfirmed.
std::string Mark(hw::Confidence confidence);
std::string WithMark(const std::string& value, hw::Confidence confidence);
// The legend line printed under tables that use marks.
std::string MarkLegend();

// "{0,1,2,3,4,5,6}:1" as -lgipp prints placements.
std::string PlacementsText(const hw::GiProfile& profile);
std::string HexId(std::uint16_t pci_id);

// Left-aligned text table with a header row. Cells are shown through util::ForTerminal (control
// characters and broken UTF-8 as \xNN): a table may hold what a server or another user sent.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void Add(std::vector<std::string> row);
  void RightAlign(size_t column);
  std::string Render(const std::string& indent = "") const;

 private:
  std::vector<std::vector<std::string>> rows_;
  std::vector<bool> right_;
};

// Display width of UTF-8 text (code points; the box-drawing characters are one column each).
size_t DisplayWidth(const std::string& text);

// JSON forms shared by several commands.
nlohmann::json ModelSummaryJson(const hw::GpuModel& model);
nlohmann::json ProfileJson(const hw::MigSpec& mig, const hw::GiProfile& profile);

void PrintJson(const nlohmann::json& value);
void PrintError(const std::string& message);

// This machine: its host name, memory (MiB) and CPUs (milli-cores).
using util::Hostname;
using util::MachineCpuMilli;
using util::MachineMemoryMib;

// Subcommand registration (one file each).
void AddGpusCommand(CLI::App& app, const GlobalOptions& global, Action* action);
void AddProfilesCommand(CLI::App& app, const GlobalOptions& global, Action* action);
void AddLayoutsCommand(CLI::App& app, const GlobalOptions& global, Action* action);
void AddCheckCommand(CLI::App& app, const GlobalOptions& global, Action* action);
void AddSimCommand(CLI::App& app, const GlobalOptions& global, Action* action);
void AddReplayCommand(CLI::App& app, const GlobalOptions& global, Action* action);
void AddServeCommand(CLI::App& app, const GlobalOptions& global, Action* action);
void AddClientCommands(CLI::App& app, const GlobalOptions& global, Action* action);
void AddRunCommands(CLI::App& app, const GlobalOptions& global, Action* action);
void AddAgentCommand(CLI::App& app, const GlobalOptions& global, Action* action);
void AddNodeCommands(CLI::App& app, const GlobalOptions& global, Action* action);
void AddApplyCommands(CLI::App& app, const GlobalOptions& global, Action* action);
void AddStatusCommand(CLI::App& app, const GlobalOptions& global, Action* action);
void AddDoctorCommand(CLI::App& app, const GlobalOptions& global, Action* action);
void AddPlanCommand(CLI::App& app, const GlobalOptions& global, Action* action);

}  // namespace gpuslice::cli
