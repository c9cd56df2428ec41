// gpuslice status: per GPU, the MIG mode, a drawing of its instances, every MIG device with its
// UUID, memory and processes.
#include <iostream>

#include "common.h"
#include "device_options.h"
#include "gpuslice/agent/reconciler.h"
#include "gpuslice/geometry/shape.h"
#include "layout_drawing.h"

namespace gpuslice::cli {
namespace {

struct StatusOptions {
  DeviceOptions device;
  bool json = false;
};

std::string Mode(device::MigMode mode) {
  return mode == device::MigMode::kEnabled ? "enabled" : "disabled";
}

std::string ProcessesOn(const agent::GpuSnapshot& snapshot, int gi, int ci) {
  std::string text;
  for (const device::ProcessInfo& p : snapshot.processes) {
    if (p.gi != gi || p.ci != ci) continue;
    text += (text.empty() ? "" : ", ") +
            ("pid " + std::to_string(p.pid) + " " + p.name + " " + Gib(p.used_memory_mib) + " GiB");
  }
  return text.empty() ? "-" : text;
}

int Run(const GlobalOptions& global, const StatusOptions& options) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  std::unique_ptr<device::Backend> backend = OpenBackend(options.device, *catalog);
  if (backend == nullptr) return kExitBadInput;
  absl::StatusOr<std::vector<device::GpuInfo>> gpus = backend->ListGpus();
  if (!gpus.ok()) {
    PrintError(std::string(gpus.status().message()));
    return kExitBadInput;
  }
  nlohmann::json json_gpus = nlohmann::json::array();
  if (!options.json) std::cout << backend->Describe() << ": " << gpus->size() << " GPU(s)\n";
  for (const device::GpuInfo& info : *gpus) {
    absl::StatusOr<agent::GpuSnapshot> snapshot = agent::TakeSnapshot(*backend, info.index);
    if (!snapshot.ok()) {
      PrintError(std::string(snapshot.status().message()));
      return kExitBadInput;
    }
    absl::StatusOr<device::MemoryInfo> memory = backend->GetMemory(info.index);
    const hw::GpuModel* model = info.model;
    nlohmann::json devices = nlohmann::json::array();
    std::vector<geometry::Placed> layout;
    std::vector<std::vector<geometry::CiPlaced>> cis;
    Table table({"GI", "CI", "MIG DEVICE", "PLACEMENT", "UUID", "MEMORY GiB", "PROCESSES"});
    for (size_t i = 0; i < snapshot->gis.size(); ++i) {
      const device::GpuInstanceInfo& gi = snapshot->gis[i];
      const hw::GiProfile* profile =
          model != nullptr && model->mig ? model->mig->FindProfileBySmiId(gi.profile_id) : nullptr;
      const std::string gi_name =
          profile != nullptr ? profile->name : "profile " + std::to_string(gi.profile_id);
      absl::StatusOr<device::MemoryInfo> gi_memory =
          backend->GetMemory(info.index, gi.id, std::nullopt);
      const std::string memory_text =
          gi_memory.ok() ? Gib(gi_memory->used_mib) + "/" + Gib(gi_memory->total_mib) : "?";
      std::vector<geometry::CiPlaced> gi_cis;
      if (profile != nullptr) {
        layout.push_back({static_cast<std::uint8_t>(model->mig->IndexOf(*profile)),
                          static_cast<std::uint8_t>(gi.start)});
      }
      if (snapshot->cis[i].empty()) {
        table.Add({std::to_string(gi.id), "-", gi_name + " (no compute instance)",
                   std::to_string(gi.start) + ":" + std::to_string(gi.size), "-", memory_text,
                   "-"});
      }
      for (const device::ComputeInstanceInfo& ci : snapshot->cis[i]) {
        std::string device_name = gi_name;
        if (profile != nullptr) {
          geometry::CiShape ci_shape(*model->mig, *profile);
          for (size_t k = 0; k < ci_shape.profiles().size(); ++k) {
            if (ci_shape.profiles()[k].id == ci.profile_id) {
              device_name = ci_shape.DeviceName(static_cast<int>(k));
              gi_cis.push_back({static_cast<std::uint8_t>(k), static_cast<std::uint8_t>(ci.start)});
            }
          }
        }
        table.Add({std::to_string(gi.id), std::to_string(ci.id), device_name,
                   std::to_string(gi.start) + ":" + std::to_string(gi.size), ci.uuid, memory_text,
                   ProcessesOn(*snapshot, gi.id, ci.id)});
        nlohmann::json processes = nlohmann::json::array();
        for (const device::ProcessInfo& p : snapshot->processes) {
          if (p.gi == gi.id && p.ci == ci.id) {
            processes.push_back(
                {{"pid", p.pid}, {"name", p.name}, {"used_memory_mib", p.used_memory_mib}});
          }
        }
        devices.push_back({{"gpu_instance", gi.id},
                           {"compute_instance", ci.id},
                           {"profile", device_name},
                           {"profile_id", gi.profile_id},
                           {"placement", {{"start", gi.start}, {"size", gi.size}}},
                           {"uuid", ci.uuid},
                           {"memory_used_mib", gi_memory.ok() ? gi_memory->used_mib : -1},
                           {"memory_total_mib", gi_memory.ok() ? gi_memory->total_mib : -1},
                           {"processes", processes}});
      }
      // Keep cis aligned with layout (one entry per drawn GI); only the split ones are listed.
      if (profile != nullptr) {
        geometry::CiShape ci_shape(*model->mig, *profile);
        const bool only_default = gi_cis.size() == 1 && gi_cis[0].ci == ci_shape.DefaultIndex();
        cis.push_back(only_default ? std::vector<geometry::CiPlaced>{} : gi_cis);
      }
    }
    if (options.json) {
      nlohmann::json processes = nlohmann::json::array();
      for (const device::ProcessInfo& p : snapshot->processes) {
        processes.push_back({{"pid", p.pid},
                             {"name", p.name},
                             {"used_memory_mib", p.used_memory_mib},
                             {"gpu_instance", p.gi},
                             {"compute_instance", p.ci}});
      }
      json_gpus.push_back(
          {{"index", info.index},
           {"uuid", info.uuid},
           {"name", info.name},
           {"model", model != nullptr ? nlohmann::json(model->id) : nlohmann::json(nullptr)},
           {"pci_bus_id", info.pci_bus_id},
           {"mig_capable", info.mig_capable},
           {"mig_current", Mode(info.mig_current)},
           {"mig_pending", Mode(info.mig_pending)},
           {"memory_total_mib", memory.ok() ? memory->total_mib : info.memory_total_mib},
           {"memory_used_mib", memory.ok() ? memory->used_mib : -1},
           {"mig_devices", devices},
           {"processes", processes},
           {"holders", snapshot->holders}});
      continue;
    }
    std::cout << "\nGPU " << info.index << ": " << info.name << " ("
              << (model != nullptr ? model->id : "not in the catalog") << "), " << info.uuid
              << ", bus " << info.pci_bus_id << "\n";
    std::cout << "  MIG " << (info.mig_capable ? Mode(info.mig_current) : "not supported");
    if (info.mig_capable && info.mig_pending != info.mig_current) {
      std::cout << " (pending: " << Mode(info.mig_pending) << " — needs a GPU reset)";
    }
    if (memory.ok()) {
      std::cout << "; memory used " << Gib(memory->used_mib) << " of " << Gib(memory->total_mib)
                << " GiB";
    }
    if (!snapshot->holders.empty()) {
      std::string holders;
      for (const std::string& holder : snapshot->holders)
        holders += (holders.empty() ? "" : ", ") + holder;
      std::cout << "; held by " << holders;
    }
    std::cout << "\n";
    if (info.mig_capable && info.mig_current == device::MigMode::kEnabled && model != nullptr &&
        model->mig) {
      const geometry::Shape shape(*model);
      if (shape.Validate(layout).ok()) std::cout << DrawLayout(shape, layout, cis, "  ");
      if (snapshot->gis.empty())
        std::cout << "  no GPU instances\n";
      else
        std::cout << table.Render("  ");
    } else {
      for (const device::ProcessInfo& p : snapshot->processes) {
        std::cout << "  pid " << p.pid << " " << p.name << " " << Gib(p.used_memory_mib)
                  << " GiB\n";
      }
    }
  }
  if (options.json) PrintJson({{"backend", backend->Describe()}, {"gpus", json_gpus}});
  return kExitOk;
}

}  // namespace

void AddStatusCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto options = std::make_shared<StatusOptions>();
  CLI::App* command = app.add_subcommand(
      "status",
      "Show each GPU: MIG mode, a drawing of its instances, MIG devices with UUIDs, "
      "memory and processes");
  AddDeviceOptions(*command, options->device);
  command->add_flag("--json", options->json, "Print JSON");
  command->callback([&global, options, action] {
    *action = [&global, options] { return Run(global, *options); };
  });
}

}  // namespace gpuslice::cli
