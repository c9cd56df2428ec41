#include "gpuslice/alloc/layout.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"
#include "service_internal.h"

namespace gpuslice::alloc {
namespace {

using json = nlohmann::json;

std::string InstanceName(const hw::GpuModel& model, const place::FixedInstance& instance) {
  return absl::StrCat(model.mig->profiles[static_cast<size_t>(instance.profile)].name, "@",
                      instance.start);
}

std::string GpuName(const device::GpuInfo& gpu) {
  return absl::StrCat("GPU ", gpu.index, " (", gpu.model != nullptr ? gpu.model->id : gpu.name,
                      ")");
}

// One GPU's GIs, some placed by the config, resolved around the leases held on it.
absl::StatusOr<GpuLayout> PlaceOnGpu(const device::GpuInfo& gpu,
                                     const std::vector<spec::DesiredGi>& gis,
                                     const std::vector<HeldDevice>& held,
                                     std::vector<LayoutConflict>* conflicts) {
  const hw::GpuModel& model = *gpu.model;
  const geometry::Shape shape(model);
  GpuLayout layout;
  layout.index = gpu.index;
  layout.model = model.id;
  layout.mig = true;
  std::vector<place::FixedInstance> placed;
  std::vector<int> unplaced;  // profiles
  geometry::Occupancy occupancy{};
  for (const spec::DesiredGi& gi : gis) {
    if (!gi.start.has_value()) {
      unplaced.push_back(gi.profile);
      continue;
    }
    const place::FixedInstance instance{gi.profile, *gi.start};
    if (geometry::Violation v = shape.CanAdd(occupancy, gi.profile, *gi.start, {}); !v.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(GpuName(gpu), ": placement ", InstanceName(model, instance),
                       " cannot be used beside the config's other placements"));
    }
    shape.Add(occupancy, gi.profile, *gi.start);
    placed.push_back(instance);
  }
  const geometry::Occupancy config_only = occupancy;
  std::vector<int> config_unplaced = unplaced;
  const size_t conflicts_before = conflicts->size();
  std::vector<std::int64_t> moved;  // leases whose instance took an unplaced GI's start
  std::vector<bool> matched(placed.size(), false);
  for (const HeldDevice& h : held) {
    if (h.whole) {
      conflicts->push_back(
          {h.lease, gpu.index, "holds the whole GPU; the layout creates MIG instances on it"});
      continue;
    }
    const place::FixedInstance instance{h.profile, h.start};
    auto exact = std::find_if(placed.begin(), placed.end(), [&](const place::FixedInstance& p) {
      return p == instance && !matched[static_cast<size_t>(&p - placed.data())];
    });
    if (exact != placed.end()) {
      matched[static_cast<size_t>(exact - placed.begin())] = true;
      continue;
    }
    auto free = std::find(unplaced.begin(), unplaced.end(), h.profile);
    if (free == unplaced.end() || !shape.CanAdd(occupancy, h.profile, h.start, {}).ok()) {
      conflicts->push_back(
          {h.lease, gpu.index,
           absl::StrCat("its instance ", InstanceName(model, instance), " is not in the layout")});
      continue;
    }
    unplaced.erase(free);
    shape.Add(occupancy, h.profile, h.start);
    placed.push_back(instance);
    matched.push_back(true);
    moved.push_back(h.lease);
  }
  geometry::Counts wanted{};
  for (int profile : unplaced) wanted[static_cast<size_t>(profile)] += 1;
  std::vector<place::FixedInstance> rest;
  std::vector<geometry::Placed> out;
  if (!shape.Place(occupancy, wanted, {}, &out)) {
    geometry::Counts all{};
    for (int profile : config_unplaced) all[static_cast<size_t>(profile)] += 1;
    std::vector<geometry::Placed> ignored;
    if (!shape.Place(config_only, all, {}, &ignored)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the layout does not fit on ", GpuName(gpu)));
    }
    for (std::int64_t lease : moved) {
      conflicts->push_back(
          {lease, gpu.index, "the rest of the layout fits only if its instance moves"});
    }
  }
  if (conflicts->size() != conflicts_before) return layout;
  for (const geometry::Placed& p : out) placed.push_back({p.profile, p.start});
  std::vector<geometry::Placed> all;
  for (const place::FixedInstance& p : placed) {
    all.push_back({static_cast<std::uint8_t>(p.profile), static_cast<std::uint8_t>(p.start)});
  }
  if (geometry::Violation v = shape.Validate(all); !v.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        GpuName(gpu), ": the layout breaks a MIG rule: ", geometry::Describe(shape, all, v)));
  }
  std::sort(placed.begin(), placed.end(), [](const auto& a, const auto& b) {
    return a.start != b.start ? a.start < b.start : a.profile < b.profile;
  });
  layout.instances = std::move(placed);
  return layout;
}

}  // namespace

absl::StatusOr<ResolvedLayout> ResolveLayout(const spec::MigConfigFile& file,
                                             const std::string& config_name,
                                             const std::vector<device::GpuInfo>& gpus,
                                             const std::vector<HeldDevice>& held) {
  absl::StatusOr<const std::vector<spec::ConfigEntry>*> entries =
      spec::SelectConfig(file, config_name);
  if (!entries.ok()) return entries.status();
  ResolvedLayout result;
  for (const device::GpuInfo& gpu : gpus) {
    if (gpu.model == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(GpuName(gpu), " is not in the catalog"));
    }
    const std::uint16_t pci = gpu.pci_device_id != 0 || gpu.model->pci_device_ids.empty()
                                  ? gpu.pci_device_id
                                  : gpu.model->pci_device_ids.front();
    absl::StatusOr<const spec::ConfigEntry*> entry = spec::EntryForGpu(**entries, gpu.index, pci);
    if (!entry.ok()) return entry.status();
    if (*entry == nullptr) continue;
    const spec::ConfigEntry& selected = **entry;
    std::vector<HeldDevice> here;
    for (const HeldDevice& h : held) {
      if (h.gpu_index == gpu.index) here.push_back(h);
    }
    const bool mig_now = gpu.mig_current == device::MigMode::kEnabled;
    if (selected.mig_enabled && !gpu.mig_capable) {
      if (selected.devices.all) continue;  // as mig-parted: "all" means the GPUs that can
      return absl::FailedPreconditionError(
          absl::StrCat(GpuName(gpu), " cannot run MIG (config line ", selected.line, ")"));
    }
    if (!selected.mig_enabled) {
      for (const HeldDevice& h : here) {
        if (!h.whole || mig_now) {
          result.conflicts.push_back({h.lease, gpu.index,
                                      h.whole ? "holds the GPU while the layout turns MIG off"
                                              : "holds a MIG instance; the layout turns MIG off"});
        }
      }
      result.gpus.push_back(GpuLayout{gpu.index, gpu.model->id, false, {}});
      continue;
    }
    absl::StatusOr<std::vector<spec::DesiredGi>> gis = spec::ResolveEntry(selected, *gpu.model);
    if (!gis.ok()) return gis.status();
    for (const spec::DesiredGi& gi : *gis) {
      if (!gi.cis.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config line ", selected.line,
            ": split compute instances are not handed out by the allocation service; list whole "
            "GPU instances (\"3g.40gb\", not \"1c.3g.40gb\")"));
      }
    }
    absl::StatusOr<GpuLayout> layout = PlaceOnGpu(gpu, *gis, here, &result.conflicts);
    if (!layout.ok()) return layout.status();
    result.gpus.push_back(*std::move(layout));
  }
  if (result.gpus.empty()) {
    return absl::InvalidArgumentError(
        "the config selects none of the machine's GPUs (check its devices and device-filter)");
  }
  return result;
}

std::string DefaultLayoutConfig(const spec::MigConfigFile& file, const std::string& host) {
  for (const std::string& name : {host, "gpuslice-" + host}) {
    for (const auto& [config, entries] : file.configs) {
      if (config == name) return name;
    }
  }
  return "";
}

spec::MigConfigFile LayoutAsMigParted(const NodeLayout& layout) {
  std::vector<spec::ConfigEntry> entries;
  for (const GpuLayout& gpu : layout.gpus) {
    spec::ConfigEntry entry;
    entry.devices.indices = {gpu.index};
    entry.mig_enabled = gpu.mig;
    const hw::GpuModel* model = hw::Catalog::Builtin().Find(gpu.model);
    if (gpu.mig && model != nullptr && model->mig) {
      for (const place::FixedInstance& instance : gpu.instances) {
        const std::string& name = model->mig->profiles[static_cast<size_t>(instance.profile)].name;
        auto it = std::find_if(entry.mig_devices.begin(), entry.mig_devices.end(),
                               [&](const spec::MigDevice& d) { return d.name == name; });
        if (it == entry.mig_devices.end()) {
          entry.mig_devices.push_back({name, 1});
        } else {
          ++it->count;
        }
        entry.placements.push_back(InstanceName(*model, instance));
      }
    }
    entries.push_back(std::move(entry));
  }
  spec::MigConfigFile file;
  file.configs.emplace_back(layout.host, std::move(entries));
  return file;
}

std::string DescribeGpuLayout(const GpuLayout& gpu) {
  if (!gpu.mig) return "MIG off";
  const hw::GpuModel* model = hw::Catalog::Builtin().Find(gpu.model);
  if (model == nullptr || !model->mig) return "MIG on";
  if (gpu.instances.empty()) return "MIG on, no instances";
  std::vector<std::string> names;
  for (const place::FixedInstance& instance : gpu.instances) {
    names.push_back(InstanceName(*model, instance));
  }
  return absl::StrJoin(names, " ");
}

json LayoutToJson(const NodeLayout& layout) {
  json gpus = json::array();
  for (const GpuLayout& gpu : layout.gpus) {
    json instances = json::array();
    const hw::GpuModel* model = hw::Catalog::Builtin().Find(gpu.model);
    for (const place::FixedInstance& instance : gpu.instances) {
      instances.push_back(
          {{"profile", model != nullptr && model->mig
                           ? model->mig->profiles[static_cast<size_t>(instance.profile)].name
                           : std::string()},
           {"start", instance.start}});
    }
    gpus.push_back(
        {{"index", gpu.index}, {"model", gpu.model}, {"mig", gpu.mig}, {"instances", instances}});
  }
  return {{"host", layout.host},
          {"generation", layout.generation},
          {"source", layout.source},
          {"set_by", layout.set_by},
          {"set_at", layout.set_at},
          {"gpus", gpus},
          {"applied_generation", layout.applied_generation},
          {"reported_generation", layout.reported_generation},
          {"agent_message", layout.agent_message},
          {"reported_at", layout.reported_at},
          {"applied", layout.applied()}};
}

absl::StatusOr<NodeLayout> LayoutFromJson(const std::string& host, const json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("layout: not a JSON object");
  try {
    NodeLayout layout;
    layout.host = host;
    layout.generation = internal::StoredInt(j, "generation", std::int64_t{0});
    layout.source = j.value("source", "");
    layout.set_by = j.value("set_by", "");
    layout.set_at = internal::StoredInt(j, "set_at", std::int64_t{0});
    layout.applied_generation = internal::StoredInt(j, "applied_generation", std::int64_t{0});
    layout.reported_generation = internal::StoredInt(j, "reported_generation", std::int64_t{0});
    layout.agent_message = j.value("agent_message", "");
    layout.reported_at = internal::StoredInt(j, "reported_at", std::int64_t{0});
    for (const json& g : j.value("gpus", json::array())) {
      GpuLayout gpu;
      gpu.index = internal::StoredInt(g, "index", -1);
      if (!g.contains("index")) throw std::out_of_range("index: missing");
      gpu.model = g.at("model").get<std::string>();
      gpu.mig = g.at("mig").get<bool>();
      const hw::GpuModel* model = hw::Catalog::Builtin().Find(gpu.model);
      if (model == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("layout: unknown model ", gpu.model));
      }
      for (const json& i : g.value("instances", json::array())) {
        const std::string name = i.at("profile").get<std::string>();
        const hw::GiProfile* profile = model->mig ? model->mig->FindProfile(name) : nullptr;
        if (profile == nullptr) {
          return absl::InvalidArgumentError(
              absl::StrCat("layout: ", model->id, " has no profile ", name));
        }
        const int index = model->mig->IndexOf(*profile);
        if (!i.contains("start")) throw std::out_of_range("start: missing");
        const int start = internal::StoredInt(i, "start", -1);
        if (!geometry::Shape(*model).StartAllowed(index, start)) {
          return absl::InvalidArgumentError(
              absl::StrCat("layout: ", name, " cannot start at ", start, " on ", model->id));
        }
        gpu.instances.push_back({index, start});
      }
      layout.gpus.push_back(std::move(gpu));
    }
    return layout;
  } catch (const std::exception& e) {  // json's, and StoredInt's out_of_range
    return absl::InvalidArgumentError(absl::StrCat("layout: ", e.what()));
  }
}

}  // namespace gpuslice::alloc
