// gpuslice gpus: the GPU models gpuslice knows.
#include <iostream>

#include "common.h"

namespace gpuslice::cli {
namespace {

struct GpusOptions {
  bool json = false;
  bool mig_only = false;
  bool no_mig_only = false;
};

std::string PciList(const hw::GpuModel& model) {
  std::string text;
  for (std::uint16_t id : model.pci_device_ids) text += (text.empty() ? "" : ",") + HexId(id);
  return WithMark(text, model.pci_confidence);
}

int Run(const GlobalOptions& global, const GpusOptions& options) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  if (options.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const hw::GpuModel& model : catalog->models()) {
      if (options.mig_only && !model.mig_capable()) continue;
      if (options.no_mig_only && model.mig_capable()) continue;
      list.push_back(ModelSummaryJson(model));
    }
    PrintJson({{"gpus", list}});
    return kExitOk;
  }
  if (!options.no_mig_only) {
    Table table({"MODEL", "NVML NAME", "MEMORY GiB", "SMs", "SLICES", "PROFILES", "MIG DRIVER",
                 "PCI IDs", "CONFIDENCE"});
    table.RightAlign(2);
    table.RightAlign(3);
    for (const hw::GpuModel& model : catalog->models()) {
      if (!model.mig_capable()) continue;
      table.Add({model.id, model.nvml_names.empty() ? model.display_name : model.nvml_names.front(),
                 WithMark(Gib(model.memory_mib), model.memory_confidence),
                 WithMark(std::to_string(model.sms), model.sms_confidence),
                 std::to_string(model.mig->compute_slices) + "g/" +
                     std::to_string(model.mig->placement_units) + "u",
                 std::to_string(model.mig->profiles.size()),
                 "R" + std::to_string(model.mig->min_driver_branch) + "+", PciList(model),
                 std::string(hw::ToString(model.confidence))});
    }
    std::cout << "MIG-capable GPUs (hardware slices; SLICES = compute slices / placement units):\n"
              << table.Render("  ");
  }
  if (!options.mig_only) {
    Table table({"MODEL", "NVML NAME", "MEMORY GiB", "SMs", "ARCH", "CC", "PCI IDs", "CONFIDENCE"});
    table.RightAlign(2);
    table.RightAlign(3);
    for (const hw::GpuModel& model : catalog->models()) {
      if (model.mig_capable()) continue;
      table.Add({model.id, model.nvml_names.empty() ? model.display_name : model.nvml_names.front(),
                 WithMark(Gib(model.memory_mib), model.memory_confidence),
                 WithMark(std::to_string(model.sms), model.sms_confidence), model.architecture,
                 model.compute_capability, PciList(model),
                 std::string(hw::ToString(model.confidence))});
    }
    if (!options.no_mig_only) std::cout << "\n";
    std::cout << "GPUs without MIG (shared by software slicing):\n" << table.Render("  ");
  }
  std::cout << "\n"
            << MarkLegend() << "\n"
            << "Next: `gpuslice profiles MODEL` for a model's MIG profiles, `gpuslice check MODEL "
               "LAYOUT` to check a layout.\n";
  return kExitOk;
}

}  // namespace

void AddGpusCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto options = std::make_shared<GpusOptions>();
  CLI::App* command = app.add_subcommand(
      "gpus",
      "List the GPU models gpuslice knows: MIG-capable ones with their slice geometry, and "
      "GPUs without MIG that are shared by software slicing.");
  command->add_flag("--json", options->json, "Print JSON instead of tables");
  command->add_flag("--mig", options->mig_only, "Only MIG-capable models");
  command->add_flag("--no-mig", options->no_mig_only, "Only models without MIG");
  command->callback([&global, options, action] {
    *action = [&global, options] { return Run(global, *options); };
  });
}

}  // namespace gpuslice::cli
