// gpuslice layouts GPU: every layout the MIG rules allow on a model (or only the maximal ones), and
// the distinct profile multisets among them.
#include <iostream>
#include <sstream>

#include "common.h"
#include "gpuslice/geometry/enumerate.h"
#include "gpuslice/geometry/layout_text.h"
#include "rules_option.h"

namespace gpuslice::cli {
namespace {

struct LayoutsOptions {
  std::string gpu;
  bool maximal = false;
  bool base = false;
  bool placements = false;
  bool json = false;
  std::string profiles;
  std::string driver;
};

std::string MultisetText(const geometry::Shape& shape, const geometry::Counts& counts) {
  std::string text;
  // Largest profiles first, as people write layouts.
  std::vector<int> order;
  for (int p = 0; p < shape.profile_count(); ++p) order.push_back(p);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return shape.profile(a).memory_mib > shape.profile(b).memory_mib;
  });
  for (int p : order) {
    const int n = counts[static_cast<size_t>(p)];
    if (n == 0) continue;
    text += (text.empty() ? "" : " + ") + (n > 1 ? std::to_string(n) + "x" : "") +
            shape.profile(p).name;
  }
  return text;
}

nlohmann::json MultisetJson(const geometry::Shape& shape, const geometry::Counts& counts) {
  nlohmann::json json = nlohmann::json::object();
  for (int p = 0; p < shape.profile_count(); ++p) {
    if (counts[static_cast<size_t>(p)] > 0)
      json[shape.profile(p).name] = counts[static_cast<size_t>(p)];
  }
  return json;
}

int Run(const GlobalOptions& global, const LayoutsOptions& options) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  const hw::GpuModel* model = ResolveMigGpu(*catalog, options.gpu);
  if (model == nullptr) return kExitBadInput;
  std::optional<geometry::Rules> rules = ParseRulesOption(options.driver);
  if (!rules) return kExitBadInput;
  const geometry::Shape shape(*model);

  geometry::EnumerateOptions enumerate;
  enumerate.maximal_only = options.maximal;
  enumerate.rules = *rules;
  enumerate.profiles = options.base ? geometry::BaseProfiles(shape) : geometry::AllProfiles(shape);
  if (!options.profiles.empty()) {
    enumerate.profiles.reset();
    std::stringstream list(options.profiles);
    std::string name;
    while (std::getline(list, name, ',')) {
      const hw::GiProfile* profile = shape.mig().FindProfile(name);
      if (profile == nullptr && !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c));
          })) {
        profile = shape.mig().FindProfileBySmiId(std::stoi(name));
      }
      if (profile == nullptr) {
        PrintError("--profiles: '" + name + "' is not a profile of " + model->id +
                   " (see `gpuslice profiles " + model->id + "`)");
        return kExitBadInput;
      }
      enumerate.profiles.set(static_cast<size_t>(shape.mig().IndexOf(*profile)));
    }
  }
  const std::vector<std::vector<geometry::Placed>> layouts =
      geometry::EnumerateLayouts(shape, enumerate);
  const std::vector<geometry::Multiset> multisets = geometry::DistinctMultisets(shape, layouts);

  std::vector<std::string> considered;
  for (int p = 0; p < shape.profile_count(); ++p) {
    if (enumerate.profiles.test(static_cast<size_t>(p)))
      considered.push_back(shape.profile(p).name);
  }
  if (options.json) {
    nlohmann::json layout_list = nlohmann::json::array();
    for (const auto& layout : layouts) {
      nlohmann::json instances = nlohmann::json::array();
      for (const geometry::Placed& placed : layout) {
        instances.push_back(
            {{"profile", shape.profile(placed.profile).name},
             {"id", shape.profile(placed.profile).smi_id},
             {"start", placed.start},
             {"size", shape.placement_size(placed.profile)},
             {"gpu_instance_id", shape.GpuInstanceId(placed.profile, placed.start)}});
      }
      layout_list.push_back(
          {{"instances", instances}, {"multiset", MultisetJson(shape, shape.CountsOf(layout))}});
    }
    nlohmann::json multiset_list = nlohmann::json::array();
    for (const geometry::Multiset& multiset : multisets) {
      multiset_list.push_back({{"profiles", MultisetJson(shape, multiset.counts)},
                               {"placements", multiset.layouts},
                               {"example_layout", multiset.first_layout}});
    }
    PrintJson({{"gpu", model->id},
               {"maximal", options.maximal},
               {"profiles_considered", considered},
               {"driver", rules->driver_branch == 0
                              ? nlohmann::json("newest")
                              : nlohmann::json("R" + std::to_string(rules->driver_branch))},
               {"layout_count", layouts.size()},
               {"multiset_count", multisets.size()},
               {"layouts", layout_list},
               {"multisets", multiset_list}});
    return kExitOk;
  }
  std::string scope = options.base               ? "base profiles"
                      : options.profiles.empty() ? "all profiles"
                                                 : "selected profiles";
  std::cout << model->id << ": " << layouts.size() << (options.maximal ? " maximal" : " valid")
            << " layouts (placements), " << multisets.size() << " distinct profile multisets; "
            << scope << " (" << considered.size() << " of " << shape.profile_count() << ")"
            << (rules->driver_branch ? ", driver R" + std::to_string(rules->driver_branch) : "")
            << ".\n";
  if (options.maximal) {
    std::cout << "A layout is maximal when no further instance of the profiles considered fits.\n";
  }
  std::cout << "\n";
  if (options.maximal || options.placements) {
    Table table({"#", "LAYOUT (profile@start)", "MULTISET"});
    table.RightAlign(0);
    for (size_t i = 0; i < layouts.size(); ++i) {
      table.Add({std::to_string(i + 1), geometry::FormatLayout(shape, layouts[i]),
                 MultisetText(shape, shape.CountsOf(layouts[i]))});
    }
    std::cout << table.Render("  ");
  } else {
    Table table({"#", "MULTISET", "PLACEMENTS", "EXAMPLE"});
    table.RightAlign(0);
    table.RightAlign(2);
    for (size_t i = 0; i < multisets.size(); ++i) {
      table.Add({std::to_string(i + 1), MultisetText(shape, multisets[i].counts),
                 std::to_string(multisets[i].layouts),
                 geometry::FormatLayout(shape, layouts[multisets[i].first_layout])});
    }
    std::cout << table.Render("  ");
    std::cout << "\nEvery layout (placements): --placements. Only layouts nothing more fits into: "
                 "--maximal.\n";
  }
  return kExitOk;
}

}  // namespace

void AddLayoutsCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto options = std::make_shared<LayoutsOptions>();
  CLI::App* command = app.add_subcommand(
      "layouts",
      "Enumerate the MIG layouts a GPU model allows, exactly, from its placement rules. By default "
      "lists every distinct profile multiset that fits (with an example placement); --maximal "
      "lists "
      "every maximal layout (nothing more fits) with its placements.");
  command->add_option("GPU", options->gpu, "GPU model, e.g. A100-80GB")->required();
  command->add_flag("--maximal", options->maximal,
                    "Only maximal layouts (no further instance fits)");
  command->add_flag("--placements", options->placements, "List every layout with its placements");
  command->add_flag("--base", options->base,
                    "Only the base profiles (1g, 2g, 3g, 4g, 7g without +me/-me/+gfx or the "
                    "double-memory 1g)");
  command->add_option("--profiles", options->profiles,
                      "Only these profiles (comma-separated names or IDs)");
  command->add_option("--driver", options->driver,
                      "Enumerate for this driver branch (e.g. R470); default: newest driver");
  command->add_flag("--json", options->json, "Print JSON (both the layouts and the multisets)");
  command->callback([&global, options, action] {
    *action = [&global, options] { return Run(global, *options); };
  });
}

}  // namespace gpuslice::cli
