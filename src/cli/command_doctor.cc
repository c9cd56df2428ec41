// gpuslice doctor: the pre-deployment checklist for this node.
#include <iostream>

#include "common.h"
#include "device_options.h"
#include "gpuslice/agent/doctor.h"

namespace gpuslice::cli {
namespace {

struct DoctorOptions {
  DeviceOptions device;
  bool json = false;
};

int Run(const GlobalOptions& global, const DoctorOptions& options) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  std::unique_ptr<device::Backend> backend = OpenBackend(options.device, *catalog);
  if (backend == nullptr) {
    std::cout << "FAIL  node: no GPU backend (see the error above)\n";
    return kExitCheckFailed;
  }
  agent::DoctorOptions doctor;
  doctor.simulated = !SimPath(options.device).empty();
  const std::vector<agent::Check> checks = agent::RunDoctor(*backend, *catalog, doctor);
  bool failed = false;
  nlohmann::json list = nlohmann::json::array();
  for (const agent::Check& check : checks) {
    failed = failed || check.level == agent::CheckLevel::kFail;
    if (options.json) {
      list.push_back({{"level", agent::ToString(check.level)},
                      {"subject", check.subject},
                      {"what", check.what},
                      {"fix", check.fix}});
      continue;
    }
    std::cout << agent::ToString(check.level) << "  " << check.subject << ": " << check.what
              << "\n";
    if (!check.fix.empty()) std::cout << "      fix: " << check.fix << "\n";
  }
  if (options.json) PrintJson({{"checks", list}, {"ok", !failed}});
  return failed ? kExitCheckFailed : kExitOk;
}

}  // namespace

void AddDoctorCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto options = std::make_shared<DoctorOptions>();
  CLI::App* command = app.add_subcommand(
      "doctor",
      "Check this node before using MIG: driver and CUDA libraries, driver version per "
      "GPU model, MIG capability and mode, what holds each GPU, Kubernetes and "
      "monitoring agents. Exit 1 if a check fails.");
  AddDeviceOptions(*command, options->device);
  command->add_flag("--json", options->json, "Print JSON");
  command->callback([&global, options, action] {
    *action = [&global, options] { return Run(global, *options); };
  });
}

}  // namespace gpuslice::cli
