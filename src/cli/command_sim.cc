// gpuslice sim …: make and control simulated machines, so that every device command can be tried
// and tested without a GPU (`--sim STATE_FILE` or GPUSLICE_SIM on apply, assert, export, status).
#include <algorithm>
#include <iostream>
#include <optional>

#include "common.h"
#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/device/sim_store.h"

namespace gpuslice::cli {
namespace {

using device::sim::SimMachine;
using device::sim::SimState;
using device::sim::SimStore;

struct SimOptions {
  std::string state;
  std::string spec;
  bool force = false;
  std::uint64_t seed = 1;
  std::string driver = "580.65.06";
  // process / holder / fault / passthrough
  int gpu = 0;
  int gi = -1;
  int ci = -1;
  std::uint32_t pid = 0;
  std::int64_t memory_mib = 0;
  std::string name;
  std::int64_t at_call = 0;
  std::string match;
  std::string code = "UNKNOWN";
  bool abort_process = false;
  int times = 1;
  std::string on_off;
  double activity_pct = 60;
  // telemetry
  std::optional<int> temperature_c;
  std::optional<double> power_w;
  std::optional<int> utilization_pct;
  std::string throttle;
  std::optional<std::uint64_t> ecc_corrected;
  std::optional<std::uint64_t> ecc_uncorrected;
  std::optional<int> remapped_correctable;
  std::optional<int> remapped_uncorrectable;
  std::optional<std::string> remap_pending;
  std::optional<std::string> remap_failure;
  std::optional<std::string> unsupported;
  bool clear = false;
  std::uint64_t xid = 0;
};

// "sw-thermal,hw-slowdown" or a number → kThrottle* bits; "" for an unknown name.
std::optional<std::uint64_t> ParseThrottle(const std::string& text, std::string* error) {
  static const std::pair<const char*, std::uint64_t> kNames[] = {
      {"idle", device::kThrottleGpuIdle},
      {"app-clocks", device::kThrottleApplicationsClocks},
      {"sw-power-cap", device::kThrottleSwPowerCap},
      {"hw-slowdown", device::kThrottleHwSlowdown},
      {"sync-boost", device::kThrottleSyncBoost},
      {"sw-thermal", device::kThrottleSwThermal},
      {"hw-thermal", device::kThrottleHwThermal},
      {"hw-power-brake", device::kThrottleHwPowerBrake}};
  std::uint64_t bits = 0;
  if (text == "none") return bits;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string name = text.substr(begin, end - begin);
    bool known = false;
    for (const auto& [candidate, bit] : kNames) {
      if (name == candidate) {
        bits |= bit;
        known = true;
      }
    }
    if (!known) {
      *error = "unknown throttle reason '" + name +
               "' (none, idle, app-clocks, sw-power-cap, hw-slowdown, sync-boost, sw-thermal, "
               "hw-thermal, hw-power-brake)";
      return std::nullopt;
    }
    begin = end + 1;
  }
  return bits;
}

// Runs `fn` on the state under the store's lock; `fn` returns an NVML code or a message.
// A simulated machine's state file, named as every command names its machine: STATE_FILE, or
// --sim FILE, else $GPUSLICE_SIM (see StateFileOf).
void AddStateFile(CLI::App& command, std::string& state) {
  command.add_option("STATE_FILE", state, "State file (or --sim FILE, or $GPUSLICE_SIM)");
  command.add_option("--sim", state, "State file, as device commands take it");
}

// The state file given, else $GPUSLICE_SIM; "" (with the error printed) when neither is.
std::string StateFileOf(const std::string& given) {
  if (!given.empty()) return given;
  const char* env = std::getenv("GPUSLICE_SIM");
  if (env != nullptr && *env != '\0') return env;
  PrintError(
      "no simulated machine: give its state file (STATE_FILE or --sim FILE) or set "
      "GPUSLICE_SIM");
  return "";
}

int Mutate(const GlobalOptions& global, const std::string& given, const std::string& what,
           const std::function<std::string(SimState&, SimMachine&)>& fn) {
  const std::string path = StateFileOf(given);
  if (path.empty()) return kExitBadInput;
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  absl::StatusOr<std::unique_ptr<SimStore>> store = SimStore::Open(path);
  if (!store.ok()) {
    PrintError(std::string(store.status().message()));
    return kExitBadInput;
  }
  std::string error;
  absl::Status status = (*store)->Update([&](SimState& state, const std::function<void()>&) {
    SimMachine machine(state, *catalog);
    error = fn(state, machine);
    return error.empty();
  });
  if (!status.ok()) error = std::string(status.message());
  if (!error.empty()) {
    PrintError(what + ": " + error);
    return kExitBadInput;
  }
  return kExitOk;
}

std::string CodeText(int code) {
  return code == device::kNvmlSuccess
             ? ""
             : device::NvmlCodeName(code) + " — " + device::NvmlCodeMessage(code);
}

int Create(const GlobalOptions& global, const SimOptions& options) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  absl::StatusOr<SimState> state = device::sim::NewMachine(*catalog, options.spec, options.seed);
  if (!state.ok()) {
    PrintError(std::string(state.status().message()));
    return kExitBadInput;
  }
  state->driver_version = options.driver;
  if (absl::Status status = SimStore::Create(options.state, *state, options.force); !status.ok()) {
    PrintError(std::string(status.message()));
    return kExitBadInput;
  }
  std::cout << "Simulated machine " << options.state << " (driver " << state->driver_version
            << "):\n";
  for (const device::sim::SimGpu& gpu : state->gpus) {
    std::cout << "  GPU " << gpu.index << ": " << gpu.name << " (" << gpu.model_id << "), "
              << gpu.uuid << ", " << (gpu.mig_capable ? "MIG-capable, MIG disabled" : "no MIG")
              << "\n";
  }
  std::cout << "\nUse it with --sim " << options.state
            << " or export GPUSLICE_SIM=" << options.state << ", e.g.\n  gpuslice status --sim "
            << options.state << "\n  gpuslice apply --sim " << options.state
            << " -f mig-config.yaml -c all-balanced\n";
  return kExitOk;
}

}  // namespace

void AddSimCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto options = std::make_shared<SimOptions>();
  CLI::App* sim = app.add_subcommand(
      "sim",
      "Make and control simulated GPU machines (for trying gpuslice and for tests without "
      "a GPU). Device commands use one with --sim STATE_FILE or GPUSLICE_SIM, or a fleet that "
      "lives for one command with --sim 2xH100-80GB.");
  sim->require_subcommand(1);

  CLI::App* create = sim->add_subcommand("create", "Make a simulated machine from a fleet spec");
  create->add_option("STATE_FILE", options->state, "State file to write")->required();
  create
      ->add_option("SPEC", options->spec,
                   "GPUs, e.g. 2xH100-80GB,1xA100-40GB (models as `gpuslice gpus` lists them)")
      ->required();
  create->add_flag("--force", options->force, "Replace an existing state file");
  create->add_option("--seed", options->seed, "Seed for UUIDs (default 1)");
  create->add_option("--driver", options->driver, "Driver version to report (default 580.65.06)");
  create->callback([&global, options, action] {
    *action = [&global, options] { return Create(global, *options); };
  });

  CLI::App* show = sim->add_subcommand("show", "Print a simulated machine's state file (JSON)");
  AddStateFile(*show, options->state);
  show->callback([&global, options, action] {
    *action = [&global, options] {
      const std::string path = StateFileOf(options->state);
      if (path.empty()) return kExitBadInput;
      absl::StatusOr<std::unique_ptr<SimStore>> store = SimStore::Open(path);
      if (!store.ok()) {
        PrintError(std::string(store.status().message()));
        return kExitBadInput;
      }
      absl::StatusOr<SimState> state = (*store)->Read();
      if (!state.ok()) {
        PrintError(std::string(state.status().message()));
        return kExitBadInput;
      }
      (void)global;
      std::cout << device::sim::ToJson(*state);
      return kExitOk;
    };
  });

  CLI::App* process = sim->add_subcommand("process", "Attach or detach a simulated GPU process");
  process->require_subcommand(1);
  CLI::App* add_process = process->add_subcommand(
      "add",
      "Attach a process to a GPU (MIG off) or to a compute instance (MIG on: --gi and --ci)");
  AddStateFile(*add_process, options->state);
  add_process->add_option("--gpu", options->gpu, "GPU index")->required();
  add_process->add_option("--gi", options->gi, "GPU instance id (MIG on)");
  add_process->add_option("--ci", options->ci, "Compute instance id (MIG on)");
  add_process->add_option("--pid", options->pid, "Process id")->required();
  add_process->add_option("--memory", options->memory_mib, "GPU memory used, MiB")->required();
  add_process->add_option("--name", options->name, "Process name (default python)");
  add_process
      ->add_option("--activity", options->activity_pct,
                   "How busy it keeps the SMs of its GPU or instance, 0-100 (default 60)")
      ->check(CLI::Range(0.0, 100.0));
  add_process->callback([&global, options, action] {
    *action = [&global, options] {
      return Mutate(
          global, options->state, "sim process add", [&](SimState& state, SimMachine& machine) {
            if (options->gpu < 0 || static_cast<size_t>(options->gpu) >= state.gpus.size()) {
              return "no GPU " + std::to_string(options->gpu) + " (the machine has " +
                     std::to_string(state.gpus.size()) + ")";
            }
            device::sim::SimProcess p{
                options->pid,        options->name.empty() ? "python" : options->name,
                options->memory_mib, options->gi,
                options->ci,         options->activity_pct};
            return CodeText(machine.AddProcess(options->gpu, p));
          });
    };
  });
  CLI::App* remove_process =
      process->add_subcommand("remove", "Detach a process (as if it exited)");
  AddStateFile(*remove_process, options->state);
  remove_process->add_option("PID", options->pid, "Process id")->required();
  remove_process->callback([&global, options, action] {
    *action = [&global, options] {
      return Mutate(global, options->state, "sim process remove",
                    [&](SimState&, SimMachine& machine) {
                      return CodeText(machine.RemoveProcess(options->pid));
                    });
    };
  });

  CLI::App* holder = sim->add_subcommand(
      "holder",
      "Add or remove a client that holds a GPU and blocks its reset (e.g. nvidia-persistenced)");
  holder->require_subcommand(1);
  for (const char* verb : {"add", "remove"}) {
    CLI::App* command = holder->add_subcommand(verb, std::string(verb) + " a holder");
    AddStateFile(*command, options->state);
    command->add_option("--gpu", options->gpu, "GPU index")->required();
    command->add_option("NAME", options->name, "Holder, e.g. nvidia-persistenced")->required();
    const bool add = std::string(verb) == "add";
    command->callback([&global, options, action, add] {
      *action = [&global, options, add] {
        return Mutate(global, options->state, add ? "sim holder add" : "sim holder remove",
                      [&](SimState&, SimMachine& machine) {
                        return CodeText(add ? machine.AddHolder(options->gpu, options->name)
                                            : machine.RemoveHolder(options->gpu, options->name));
                      });
      };
    });
  }

  CLI::App* fault = sim->add_subcommand("fault", "Inject failures into the simulated driver");
  fault->require_subcommand(1);
  CLI::App* add_fault = fault->add_subcommand(
      "add",
      "Make call N (counted from now) or calls whose name contains TEXT fail with an NVML "
      "code, or abort the process there");
  AddStateFile(*add_fault, options->state);
  add_fault->add_option("--call", options->at_call, "Fire on this call number (1 = the next call)");
  add_fault->add_option("--match", options->match,
                        "Fire on calls whose name contains this (e.g. CreateGpuInstance)");
  add_fault->add_option("--code", options->code,
                        "NVML code, e.g. IN_USE, INSUFFICIENT_RESOURCES, 999");
  add_fault->add_flag("--abort", options->abort_process, "Abort the calling process instead");
  add_fault->add_option("--times", options->times, "How often it fires (-1 = always; default 1)");
  add_fault->callback([&global, options, action] {
    *action = [&global, options] {
      std::optional<int> code = device::ParseNvmlCode(options->code);
      if (!code) {
        PrintError("unknown NVML code '" + options->code + "'");
        return kExitBadInput;
      }
      if (options->at_call == 0 && options->match.empty()) {
        PrintError("sim fault add: give --call N and/or --match TEXT");
        return kExitBadInput;
      }
      return Mutate(global, options->state, "sim fault add", [&](SimState& state, SimMachine&) {
        state.calls = 0;
        state.faults.push_back(
            {options->at_call, options->match, *code, options->abort_process, options->times});
        return std::string();
      });
    };
  });
  CLI::App* clear_fault = fault->add_subcommand("clear", "Remove every fault rule");
  AddStateFile(*clear_fault, options->state);
  clear_fault->callback([&global, options, action] {
    *action = [&global, options] {
      return Mutate(global, options->state, "sim fault clear", [&](SimState& state, SimMachine&) {
        state.faults.clear();
        state.calls = 0;
        return std::string();
      });
    };
  });

  CLI::App* passthrough = sim->add_subcommand(
      "passthrough",
      "Simulate a GPU passed through to a VM (it cannot be reset: a MIG mode change "
      "stays pending) or undo that");
  AddStateFile(*passthrough, options->state);
  passthrough->add_option("--gpu", options->gpu, "GPU index")->required();
  passthrough->add_option("MODE", options->on_off, "on or off")
      ->required()
      ->check(CLI::IsMember({"on", "off"}));
  passthrough->callback([&global, options, action] {
    *action = [&global, options] {
      return Mutate(global, options->state, "sim passthrough", [&](SimState& state, SimMachine&) {
        if (options->gpu < 0 || static_cast<size_t>(options->gpu) >= state.gpus.size()) {
          return std::string("no GPU ") + std::to_string(options->gpu);
        }
        state.gpus[static_cast<size_t>(options->gpu)].reset_supported = options->on_off == "off";
        return std::string();
      });
    };
  });

  CLI::App* telemetry = sim->add_subcommand(
      "telemetry",
      "Set a simulated GPU's health figures (temperature, power, throttling, ECC, remapped "
      "rows); figures not set follow the load of its processes");
  AddStateFile(*telemetry, options->state);
  telemetry->add_option("--gpu", options->gpu, "GPU index")->required();
  telemetry->add_option("--temperature", options->temperature_c, "GPU temperature, C")
      ->check(CLI::Range(-40, 150));
  telemetry->add_option("--power", options->power_w, "Power draw, W")
      ->check(CLI::Range(0.0, 5000.0));
  telemetry->add_option("--utilization", options->utilization_pct, "GPU utilisation, %")
      ->check(CLI::Range(0, 100));
  telemetry->add_option("--throttle", options->throttle,
                        "Throttle reasons: none, or a list of idle, app-clocks, sw-power-cap, "
                        "hw-slowdown, sync-boost, sw-thermal, hw-thermal, hw-power-brake");
  telemetry->add_option("--ecc-corrected", options->ecc_corrected, "Corrected ECC errors");
  telemetry->add_option("--ecc-uncorrected", options->ecc_uncorrected, "Uncorrected ECC errors");
  telemetry
      ->add_option("--remapped-correctable", options->remapped_correctable,
                   "Rows remapped for correctable errors")
      ->check(CLI::NonNegativeNumber);
  telemetry
      ->add_option("--remapped-uncorrectable", options->remapped_uncorrectable,
                   "Rows remapped for uncorrectable errors")
      ->check(CLI::NonNegativeNumber);
  telemetry->add_option("--remap-pending", options->remap_pending, "yes or no")
      ->check(CLI::IsMember({"yes", "no"}));
  telemetry->add_option("--remap-failure", options->remap_failure, "yes or no")
      ->check(CLI::IsMember({"yes", "no"}));
  telemetry->add_option("--unsupported", options->unsupported,
                        "Figures the GPU does not give, comma-separated (temperature, power, "
                        "clocks, utilization, throttle, ecc, remapped_rows, gpm), or none");
  telemetry->add_flag("--clear", options->clear,
                      "Forget every override and counter first (figures follow the load)");
  telemetry->callback([&global, options, action] {
    *action = [&global, options] {
      return Mutate(global, options->state, "sim telemetry", [&](SimState& state, SimMachine&) {
        if (options->gpu < 0 || static_cast<size_t>(options->gpu) >= state.gpus.size()) {
          return std::string("no GPU ") + std::to_string(options->gpu);
        }
        device::sim::SimTelemetry& t = state.gpus[static_cast<size_t>(options->gpu)].telemetry;
        if (options->clear) t = {};
        if (options->temperature_c) t.temperature_c = options->temperature_c;
        if (options->power_w) t.power_w = options->power_w;
        if (options->utilization_pct) t.utilization_pct = options->utilization_pct;
        if (!options->throttle.empty()) {
          std::string error;
          std::optional<std::uint64_t> bits = ParseThrottle(options->throttle, &error);
          if (!bits) return error;
          t.throttle_reasons = *bits;
        }
        if (options->ecc_corrected) t.ecc_corrected = *options->ecc_corrected;
        if (options->ecc_uncorrected) t.ecc_uncorrected = *options->ecc_uncorrected;
        if (options->remapped_correctable) {
          t.remapped_rows_correctable = *options->remapped_correctable;
        }
        if (options->remapped_uncorrectable) {
          t.remapped_rows_uncorrectable = *options->remapped_uncorrectable;
        }
        if (options->remap_pending) t.remap_pending = *options->remap_pending == "yes";
        if (options->remap_failure) t.remap_failure = *options->remap_failure == "yes";
        if (options->unsupported) {
          static const char* kFigures[] = {"temperature", "power", "clocks",        "utilization",
                                           "throttle",    "ecc",   "remapped_rows", "gpm"};
          t.unsupported.clear();
          std::size_t begin = 0;
          const std::string& text = *options->unsupported;
          while (text != "none" && begin <= text.size()) {
            const std::size_t end = std::min(text.find(',', begin), text.size());
            const std::string figure = text.substr(begin, end - begin);
            if (std::find_if(std::begin(kFigures), std::end(kFigures), [&](const char* known) {
                  return figure == known;
                }) == std::end(kFigures)) {
              return "unknown figure '" + figure +
                     "' (temperature, power, clocks, utilization, throttle, ecc, remapped_rows, "
                     "gpm)";
            }
            t.unsupported.push_back(figure);
            begin = end + 1;
          }
        }
        return std::string();
      });
    };
  });

  CLI::App* xid = sim->add_subcommand(
      "xid", "Make the simulated driver report a critical Xid error (e.g. 48: double-bit ECC)");
  AddStateFile(*xid, options->state);
  xid->add_option("--gpu", options->gpu, "GPU index")->required();
  xid->add_option("XID", options->xid, "The Xid number")->required()->check(CLI::PositiveNumber);
  xid->add_option("--gi", options->gi, "GPU instance it concerns (MIG)");
  xid->add_option("--ci", options->ci, "Compute instance it concerns (MIG)");
  xid->callback([&global, options, action] {
    *action = [&global, options] {
      return Mutate(global, options->state, "sim xid", [&](SimState&, SimMachine& machine) {
        return CodeText(machine.InjectXid(options->gpu, options->xid, options->gi, options->ci));
      });
    };
  });

  CLI::App* lost = sim->add_subcommand(
      "lost", "Make a simulated GPU fall off the bus (every query answers GPU_IS_LOST), or back");
  AddStateFile(*lost, options->state);
  lost->add_option("--gpu", options->gpu, "GPU index")->required();
  lost->add_option("MODE", options->on_off, "on (lost) or off (back)")
      ->required()
      ->check(CLI::IsMember({"on", "off"}));
  lost->callback([&global, options, action] {
    *action = [&global, options] {
      return Mutate(global, options->state, "sim lost", [&](SimState&, SimMachine& machine) {
        return CodeText(machine.SetLost(options->gpu, options->on_off == "on"));
      });
    };
  });
}

}  // namespace gpuslice::cli
