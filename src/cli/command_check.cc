// gpuslice check GPU LAYOUT: is this layout possible, where does each instance go, what is left,
// and how to create it with nvidia-smi or mig-parted.
#include <iostream>

#include "common.h"
#include "gpuslice/geometry/layout_text.h"
#include "gpuslice/util/strings.h"
#include "layout_drawing.h"
#include "rules_option.h"

namespace gpuslice::cli {
namespace {

struct CheckOptions {
  std::string gpu;
  std::string layout;
  std::string driver;
  std::string config_name = "gpuslice-layout";
  int gpu_index = 0;
  bool json = false;
};

using geometry::Placed;

std::string MethodText(geometry::PlacementMethod method) {
  switch (method) {
    case geometry::PlacementMethod::kExplicit:
      return "explicit";
    case geometry::PlacementMethod::kDriverDefault:
      return "driver-default";
    case geometry::PlacementMethod::kExactSearch:
      return "exact-search";
  }
  return "explicit";
}

struct CreationCommands {
  std::vector<std::string> lines;     // shell commands
  std::vector<std::string> comments;  // one per line
};

// nvidia-smi commands that create `layout` at its placements.
CreationCommands NvidiaSmiCommands(const geometry::Shape& shape, std::span<const Placed> layout,
                                   const std::vector<std::vector<geometry::CiPlaced>>& cis,
                                   int gpu_index) {
  CreationCommands out;
  const std::string gpu = std::to_string(gpu_index);
  out.lines.push_back("nvidia-smi -i " + gpu + " -mig 1");
  out.comments.push_back(
      "enable MIG mode (a GPU reset may be needed; no process may hold the GPU)");
  if (layout.empty()) return out;
  bool split = false;
  for (const auto& entry : cis) split = split || !entry.empty();
  const std::string create_ci = split ? "" : " -C";
  if (std::optional<std::vector<size_t>> order = geometry::DriverCreationOrder(shape, layout)) {
    std::string ids;
    for (size_t i : *order)
      ids += (ids.empty() ? "" : ",") + std::to_string(shape.profile(layout[i].profile).smi_id);
    out.lines.push_back("nvidia-smi mig -i " + gpu + " -cgi " + ids + create_ci);
    out.comments.push_back(
        "in this order, the driver's own placement gives exactly this layout (default-placement "
        "data: " +
        std::string(hw::ToString(shape.mig().default_placement_confidence)) + ")");
  }
  std::string placed_ids;
  for (const Placed& placed : layout) {
    placed_ids += (placed_ids.empty() ? "" : ",") +
                  std::to_string(shape.profile(placed.profile).smi_id) + ":" +
                  std::to_string(placed.start);
  }
  out.lines.push_back("nvidia-smi mig -i " + gpu + " -cgi " + placed_ids + create_ci);
  out.comments.push_back(
      "explicit placements (ID:start; needs an nvidia-smi that takes placements)");
  if (split) {
    for (size_t i = 0; i < layout.size(); ++i) {
      geometry::CiShape ci_shape(shape.mig(), shape.profile(layout[i].profile));
      std::string ids;
      if (i < cis.size() && !cis[i].empty()) {
        for (const geometry::CiPlaced& ci : cis[i]) {
          ids += (ids.empty() ? "" : ",") + std::to_string(ci_shape.profiles()[ci.ci].id);
        }
      } else {
        ids = std::to_string(ci_shape.profiles()[static_cast<size_t>(ci_shape.DefaultIndex())].id);
      }
      const int gi_id = shape.GpuInstanceId(layout[i].profile, layout[i].start);
      out.lines.push_back("nvidia-smi mig -i " + gpu + " -gi " + std::to_string(gi_id) + " -cci " +
                          ids);
      out.comments.push_back("compute instances of " + shape.profile(layout[i].profile).name + "@" +
                             std::to_string(layout[i].start));
    }
  }
  return out;
}

// mig-devices counts as mig-parted writes them: "1g.10gb": 2, "1c.3g.40gb": 3.
std::vector<std::pair<std::string, int>> MigDevices(
    const geometry::Shape& shape, std::span<const Placed> layout,
    const std::vector<std::vector<geometry::CiPlaced>>& cis) {
  std::vector<std::pair<std::string, int>> devices;
  auto add = [&](const std::string& name) {
    for (auto& [existing, count] : devices) {
      if (existing == name) {
        ++count;
        return;
      }
    }
    devices.emplace_back(name, 1);
  };
  for (size_t i = 0; i < layout.size(); ++i) {
    const hw::GiProfile& profile = shape.profile(layout[i].profile);
    if (i < cis.size() && !cis[i].empty()) {
      geometry::CiShape ci_shape(shape.mig(), profile);
      for (const geometry::CiPlaced& ci : cis[i]) add(ci_shape.DeviceName(ci.ci));
    } else {
      add(profile.name);
    }
  }
  return devices;
}

std::string MigPartedConfig(const hw::GpuModel& model, const std::string& name,
                            const std::vector<std::pair<std::string, int>>& devices) {
  std::string filters;
  for (const std::string& filter : model.MigPartedDeviceFilters()) {
    filters += (filters.empty() ? "" : ", ") + ("\"" + filter + "\"");
  }
  std::string text = "version: v1\nmig-configs:\n  " + name + ":\n";
  text += "    - device-filter: [" + filters + "]\n";
  text += "      devices: all\n      mig-enabled: true\n";
  if (devices.empty()) {
    text += "      mig-devices: {}\n";
    return text;
  }
  text += "      mig-devices:\n";
  for (const auto& [device, count] : devices) {
    text += "        \"" + device + "\": " + std::to_string(count) + "\n";
  }
  return text;
}

nlohmann::json InstancesJson(const geometry::Shape& shape, std::span<const Placed> layout,
                             const std::vector<std::vector<geometry::CiPlaced>>& cis) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < layout.size(); ++i) {
    const hw::GiProfile& profile = shape.profile(layout[i].profile);
    geometry::CiShape ci_shape(shape.mig(), profile);
    nlohmann::json ci_list = nlohmann::json::array();
    if (i < cis.size() && !cis[i].empty()) {
      for (const geometry::CiPlaced& ci : cis[i]) {
        const hw::CiProfile& ci_profile = ci_shape.profiles()[ci.ci];
        ci_list.push_back({{"profile", ci_profile.name},
                           {"device_name", ci_shape.DeviceName(ci.ci)},
                           {"id", ci_profile.id},
                           {"start", ci.start},
                           {"size", ci_profile.slices}});
      }
    }
    list.push_back({{"profile", profile.name},
                    {"id", profile.smi_id},
                    {"start", layout[i].start},
                    {"size", profile.placement_size},
                    {"gpu_instance_id", shape.GpuInstanceId(layout[i].profile, layout[i].start)},
                    {"memory_mib", profile.memory_mib},
                    {"sms", profile.sms},
                    {"compute_slices", profile.compute_slices},
                    {"compute_instances", ci_list}});
  }
  return list;
}

int Run(const GlobalOptions& global, const CheckOptions& options) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  const hw::GpuModel* model = ResolveMigGpu(*catalog, options.gpu);
  if (model == nullptr) return kExitBadInput;
  std::optional<geometry::Rules> rules = ParseRulesOption(options.driver);
  if (!rules) return kExitBadInput;
  const geometry::Shape shape(*model);

  if (util::Trim(options.layout).empty()) {
    PrintError("the layout is empty: name at least one instance, e.g. 1g.10gb or 3g.40gb,4g.40gb");
    return kExitBadInput;
  }
  absl::StatusOr<geometry::ParsedLayout> parsed = geometry::ParseLayout(shape, options.layout);
  if (!parsed.ok()) {
    const bool unknown_profile = absl::IsNotFound(parsed.status());
    if (options.json) {
      PrintJson({{"gpu", model->id},
                 {"input", options.layout},
                 {"valid", false},
                 {"error", unknown_profile ? "unknown-profile" : "malformed-layout"},
                 {"reasons", {std::string(parsed.status().message())}}});
    } else {
      std::cout << model->id << ": layout '" << options.layout << "' is INVALID\n  ✗ "
                << parsed.status().message() << "\n";
    }
    return unknown_profile ? kExitCheckFailed : kExitBadInput;
  }
  const geometry::ResolvedLayout resolved = geometry::ResolveLayout(shape, *parsed, *rules);
  std::vector<std::string> reasons;
  for (const geometry::Violation& violation : resolved.violations) {
    reasons.push_back(geometry::Describe(shape, resolved.instances, violation, *rules));
  }
  reasons.insert(reasons.end(), resolved.ci_problems.begin(), resolved.ci_problems.end());
  const bool valid = reasons.empty();

  geometry::Occupancy occupancy;
  if (valid) occupancy = shape.OccupancyOf(resolved.instances);
  std::string default_failure;
  if (resolved.default_order_fails_at >= 0) {
    const auto& item = parsed->items[static_cast<size_t>(resolved.default_order_fails_at)];
    default_failure =
        "created in the order given without placements, the driver would fail at "
        "item " +
        std::to_string(resolved.default_order_fails_at + 1) + " ('" + item.text +
        "') with Insufficient Resources";
  }

  if (options.json) {
    nlohmann::json json = {
        {"gpu", model->id},
        {"input", options.layout},
        {"valid", valid},
        {"reasons", reasons},
        {"driver", rules->driver_branch == 0
                       ? nlohmann::json("newest")
                       : nlohmann::json("R" + std::to_string(rules->driver_branch))}};
    if (!default_failure.empty()) json["driver_default_order"] = default_failure;
    if (valid) {
      json["placement_method"] = MethodText(resolved.method);
      json["instances"] = InstancesJson(shape, resolved.instances, resolved.cis);
      nlohmann::json free = nlohmann::json::array();
      for (int p = 0; p < shape.profile_count(); ++p) {
        free.push_back({{"profile", shape.profile(p).name},
                        {"id", shape.profile(p).smi_id},
                        {"free", shape.FreeCount(occupancy, p, *rules)},
                        {"total", shape.profile(p).max_instances}});
      }
      json["capacity_left"] = free;
      const CreationCommands commands =
          NvidiaSmiCommands(shape, resolved.instances, resolved.cis, options.gpu_index);
      json["nvidia_smi"] = commands.lines;
      json["mig_parted"] = MigPartedConfig(*model, options.config_name,
                                           MigDevices(shape, resolved.instances, resolved.cis));
    }
    PrintJson(json);
    return valid ? kExitOk : kExitCheckFailed;
  }

  std::cout << model->id << " (" << model->display_name << "): layout '" << options.layout
            << "' is " << (valid ? "VALID" : "INVALID")
            << (rules->driver_branch ? " for driver R" + std::to_string(rules->driver_branch) : "")
            << "\n";
  if (!valid) {
    for (const std::string& reason : reasons) std::cout << "  ✗ " << reason << "\n";
    return kExitCheckFailed;
  }
  switch (resolved.method) {
    case geometry::PlacementMethod::kExplicit:
      std::cout << "  Placements as given.\n";
      break;
    case geometry::PlacementMethod::kDriverDefault:
      std::cout << "  Placements the driver chooses when the instances are created in this order "
                   "without placements (default-placement data: "
                << hw::ToString(shape.mig().default_placement_confidence) << ").\n";
      break;
    case geometry::PlacementMethod::kExactSearch:
      std::cout << "  Note: " << default_failure << ".\n"
                << "  The layout is possible: these placements were found by exact search; create "
                   "the instances at them (or in the order shown below).\n";
      break;
  }
  std::cout << "\n" << DrawLayout(shape, resolved.instances, resolved.cis);
  int compute = 0;
  std::int64_t memory = 0;
  for (const Placed& placed : resolved.instances) {
    compute += shape.profile(placed.profile).compute_slices;
    memory += shape.profile(placed.profile).memory_mib;
  }
  const std::int64_t full = shape.mig().profiles.empty() ? 0 : [&] {
    std::int64_t best = 0;
    for (const hw::GiProfile& profile : shape.mig().profiles)
      best = std::max(best, profile.memory_mib);
    return best;
  }();
  std::cout << "  Uses " << compute << " of " << shape.mig().compute_slices << " compute slices, "
            << std::popcount(occupancy.used) << " of " << shape.units() << " placement units, "
            << Gib(memory) << " of " << Gib(full) << " GiB.\n";

  std::cout << "\nCapacity left (Free/Total, as `nvidia-smi mig -lgip` would show):\n";
  Table free({"PROFILE", "ID", "FREE/TOTAL"});
  free.RightAlign(1);
  free.RightAlign(2);
  for (int p = 0; p < shape.profile_count(); ++p) {
    free.Add({shape.profile(p).name, std::to_string(shape.profile(p).smi_id),
              std::to_string(shape.FreeCount(occupancy, p, *rules)) + "/" +
                  std::to_string(shape.profile(p).max_instances)});
  }
  std::cout << free.Render("  ");

  const CreationCommands commands =
      NvidiaSmiCommands(shape, resolved.instances, resolved.cis, options.gpu_index);
  std::cout << "\nCreate it with nvidia-smi (as root, GPU " << options.gpu_index << "):\n";
  for (size_t i = 0; i < commands.lines.size(); ++i) {
    std::cout << "  " << commands.lines[i] << "\n      # " << commands.comments[i] << "\n";
  }
  std::cout << "\nmig-parted config entry (mig-parted chooses placements itself by trying "
               "creation orders):\n";
  const std::string config = MigPartedConfig(*model, options.config_name,
                                             MigDevices(shape, resolved.instances, resolved.cis));
  size_t begin = 0;
  while (begin < config.size()) {
    const size_t end = config.find('\n', begin);
    std::cout << "  " << config.substr(begin, end - begin) << "\n";
    begin = end + 1;
  }
  return kExitOk;
}

}  // namespace

void AddCheckCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* command = app.add_subcommand(
      "check",
      "Check a MIG layout on a GPU model: valid or the exact reason, a drawing of the card with "
      "each instance in its place, the capacity left per profile, the nvidia-smi commands that "
      "create it and the mig-parted config entry.\n\n"
      "LAYOUT forms: profile names (3g.40gb,1g.10gb,1g.10gb), nvidia-smi profile IDs (9,19,19), "
      "explicit placements (9@4,19@0,19@1), counts (2x1g.10gb), compute-instance splits "
      "(3g.40gb[1c,2c] or 1c.3g.40gb), 'none'. Exit status: 0 valid, 1 invalid, 2 bad input.");
  command->add_option("GPU", options->gpu, "GPU model, e.g. A100-40GB, h100, 0x2330")->required();
  command->add_option("LAYOUT", options->layout, "The layout, e.g. 9,19,19")->required();
  command->add_option("--driver", options->driver,
                      "Check for this driver branch (e.g. R470, 510, 525.85.12): profiles and "
                      "pairings newer than it are rejected. Default: newest driver");
  command
      ->add_option("--gpu-index", options->gpu_index,
                   "GPU index used in the printed nvidia-smi commands (default 0)")
      ->check(CLI::Range(0, 1023));
  command->add_option("-c,--selected-config", options->config_name,
                      "Name of the mig-parted config printed, as `apply -c` then selects it "
                      "(default gpuslice-layout)");
  // The spelling before one config option, kept for a release (hidden from --help).
  command->add_option("--config-name", options->config_name)->group("");
  command->add_flag("--json", options->json, "Print JSON");
  command->callback([&global, options, action] {
    *action = [&global, options] { return Run(global, *options); };
  });
}

}  // namespace gpuslice::cli
