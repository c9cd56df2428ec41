// gpuslice profiles GPU: a model's GPU-instance profiles with placements, like
// `nvidia-smi mig -lgip` and `-lgipp`, plus the compute-instance profiles inside each.
#include <iostream>

#include "common.h"

namespace gpuslice::cli {
namespace {

struct ProfilesOptions {
  std::string gpu;
  bool json = false;
};

std::string Engines(const hw::GiProfile& profile) {
  const hw::EngineCounts& e = profile.engines;
  return std::to_string(e.copy) + "/" + std::to_string(e.decoder) + "/" +
         std::to_string(e.encoder) + "/" + std::to_string(e.jpeg) + "/" + std::to_string(e.ofa);
}

std::string CiSummary(const hw::MigSpec& mig, const hw::GiProfile& profile) {
  std::string text;
  for (const hw::CiProfile& ci : mig.CiProfilesFor(profile.compute_slices)) {
    if (!text.empty()) text += "  ";
    std::string starts = "{";
    for (size_t i = 0; i < ci.starts.size(); ++i)
      starts += (i ? "," : "") + std::to_string(ci.starts[i]);
    starts += "}:" + std::to_string(ci.slices);
    text += ci.name + (ci.is_default ? "*" : "") + " (ID " + std::to_string(ci.id) + ", max " +
            std::to_string(ci.max_instances) + ", " + starts + ")" + Mark(ci.confidence);
  }
  return text;
}

int Run(const GlobalOptions& global, const ProfilesOptions& options) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  const hw::GpuModel* model = ResolveMigGpu(*catalog, options.gpu);
  if (model == nullptr) return kExitBadInput;
  const hw::MigSpec& mig = *model->mig;
  if (options.json) {
    nlohmann::json profiles = nlohmann::json::array();
    for (const hw::GiProfile& profile : mig.profiles) profiles.push_back(ProfileJson(mig, profile));
    PrintJson({{"gpu", ModelSummaryJson(*model)}, {"profiles", profiles}});
    return kExitOk;
  }
  std::cout << model->id << " (" << model->display_name << "): " << mig.compute_slices
            << " compute slices, " << mig.placement_units << " placement units (memory slices), "
            << mig.sms << " SMs in MIG mode; MIG needs driver " << mig.min_driver << " or newer.\n"
            << "Catalog confidence: " << hw::ToString(model->confidence) << ".\n\n"
            << "GPU-instance profiles (as `nvidia-smi mig -lgip` and `-lgipp` show them):\n";
  Table table({"PROFILE", "ID", "NVML CONST", "MAX", "MEMORY GiB", "MiB", "SM",
               "CE/DEC/ENC/JPG/OFA", "PLACEMENTS", "DRIVER", "CONFIDENCE"});
  for (size_t c : {1u, 3u, 4u, 5u, 6u}) table.RightAlign(c);
  for (const hw::GiProfile& profile : mig.profiles) {
    std::string name = profile.name;
    for (const std::string& alias : profile.aliases) name += " (aka " + alias + ")";
    table.Add(
        {name, WithMark(std::to_string(profile.smi_id), profile.confidence.ids),
         profile.nvml_const_name.substr(std::string("NVML_GPU_INSTANCE_PROFILE_").size()),
         WithMark(std::to_string(profile.max_instances), profile.confidence.placements),
         WithMark(Gib(profile.memory_mib), profile.confidence.memory),
         std::to_string(profile.memory_mib),
         WithMark(std::to_string(profile.sms), profile.confidence.sms),
         WithMark(Engines(profile), profile.confidence.engines),
         WithMark(PlacementsText(profile), profile.confidence.placements),
         profile.min_driver_branch > 0 ? "R" + std::to_string(profile.min_driver_branch) + "+" : "",
         std::string(hw::ToString(profile.confidence.Overall()))});
  }
  std::cout << table.Render("  ");
  bool any_alt = false;
  for (const hw::GiProfile& profile : mig.profiles) {
    for (const hw::AlternateMemory& alt : profile.memory_alt) {
      if (!any_alt) std::cout << "\nMemory reported by other drivers:\n";
      any_alt = true;
      std::cout << "  " << profile.name << ": " << alt.mib << " MiB (" << Gib(alt.mib) << " GiB) "
                << alt.note << "\n";
    }
  }
  std::cout << "\nCompute-instance profiles inside each GPU instance (* = default, created by -C; "
               "placements in compute slices):\n";
  Table cis({"GPU INSTANCE", "COMPUTE INSTANCES"});
  for (const hw::GiProfile& profile : mig.profiles)
    cis.Add({profile.name, CiSummary(mig, profile)});
  std::cout << cis.Render("  ");
  std::cout << "\nWithout a placement the driver picks starts in this order";
  std::cout << " (" << hw::ToString(mig.default_placement_confidence) << "):\n";
  for (const hw::GiProfile& profile : mig.profiles) {
    std::string order;
    for (int start : profile.default_order)
      order += (order.empty() ? "" : ",") + std::to_string(start);
    std::cout << "  " << profile.name << ": " << order << "\n";
  }
  if (!mig.default_placement_note.empty())
    std::cout << "  (" << mig.default_placement_note << ")\n";
  for (const hw::GiProfile& profile : mig.profiles) {
    if (!profile.note.empty())
      std::cout << "Note on " << profile.name << ": " << profile.note << "\n";
  }
  std::cout << "\n" << MarkLegend() << "\n";
  return kExitOk;
}

}  // namespace

void AddProfilesCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto options = std::make_shared<ProfilesOptions>();
  CLI::App* command = app.add_subcommand(
      "profiles",
      "Show a GPU model's MIG profiles: nvidia-smi profile IDs, NVML constants, memory, SMs, "
      "engines, instance caps, allowed placements and compute-instance splits, each with how sure "
      "the catalog is of it.");
  command->add_option("GPU", options->gpu, "GPU model, e.g. H100-80GB, h100, 0x2330")->required();
  command->add_flag("--json", options->json, "Print JSON instead of tables");
  command->callback([&global, options, action] {
    *action = [&global, options] { return Run(global, *options); };
  });
}

}  // namespace gpuslice::cli
