// The plan as a mig-parted config and an assignment map (gpuslice/plan/report.h).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpuslice/geometry/shape.h"
#include "gpuslice/plan/report.h"
#include "report_detail.h"

namespace gpuslice::plan {
using namespace detail;

// -----------------------------------------------------------------------------------------------
// mig-parted config and assignment map.

spec::MigConfigFile ToMigPartedConfig(const PlanResult& plan, const Fleet& fleet,
                                      bool with_placements) {
  spec::MigConfigFile file;
  for (size_t node = 0; node < fleet.nodes.size(); ++node) {
    std::vector<spec::ConfigEntry> entries;
    for (const PlannedGpu& gpu : plan.gpus) {
      if (Index(gpu.node) != node) continue;
      spec::ConfigEntry entry;
      if (gpu.model != nullptr) {
        for (std::uint16_t id : gpu.model->pci_device_ids)
          entry.device_filter.push_back(spec::FullDeviceId(id));
      }
      entry.mig_enabled = gpu.mig_enabled && gpu.model != nullptr && gpu.model->mig_capable();
      if (entry.mig_enabled) {
        std::vector<spec::DesiredGi> gis;
        std::vector<PlannedInstance> instances = gpu.instances;
        std::sort(
            instances.begin(), instances.end(),
            [](const PlannedInstance& a, const PlannedInstance& b) { return a.start < b.start; });
        for (const PlannedInstance& instance : instances) {
          if (IsWhole(instance.profile)) continue;
          gis.push_back({instance.profile, {}, instance.start});
          if (with_placements) {
            entry.placements.push_back(ProfileName(*gpu.model, instance.profile) + "@" +
                                       std::to_string(instance.start));
          }
        }
        entry.mig_devices = spec::MigDevicesOf(*gpu.model, gis);
      }
      auto same = std::find_if(entries.begin(), entries.end(), [&](const spec::ConfigEntry& e) {
        return e.device_filter == entry.device_filter && e.mig_enabled == entry.mig_enabled &&
               e.mig_devices == entry.mig_devices && e.placements == entry.placements;
      });
      if (same != entries.end()) {
        same->devices.indices.push_back(gpu.index);
      } else {
        entry.devices.indices.push_back(gpu.index);
        entries.push_back(std::move(entry));
      }
    }
    file.configs.emplace_back(MigPartedConfigName(fleet.nodes[node]), std::move(entries));
  }
  return file;
}

nlohmann::json AssignmentJson(const PlanResult& plan, const WorkloadSet& workloads,
                              const Fleet& fleet) {
  const std::vector<Workload>& list = workloads.workloads;
  Shapes shapes;
  std::vector<nlohmann::json> per_workload(list.size(), nlohmann::json::array());
  nlohmann::json gpus = nlohmann::json::array();
  for (const PlannedGpu& gpu : plan.gpus) {
    const std::string node = gpu.node >= 0 && Index(gpu.node) < fleet.nodes.size()
                                 ? fleet.nodes[Index(gpu.node)].name
                                 : std::to_string(gpu.node);
    const std::string model = gpu.model != nullptr ? gpu.model->id : "";
    nlohmann::json instances = nlohmann::json::array();
    for (const PlannedInstance& instance : gpu.instances) {
      const std::string profile =
          gpu.model != nullptr ? ProfileName(*gpu.model, instance.profile) : "whole GPU";
      const int gi = GiId(shapes, gpu.model, instance);
      const nlohmann::json gi_id = gi >= 0 ? nlohmann::json(gi) : nlohmann::json(nullptr);
      const bool known = instance.workload >= 0 && Index(instance.workload) < list.size();
      instances.push_back(
          {{"profile", profile},
           {"start", IsWhole(instance.profile) ? 0 : instance.start},
           {"gi_id", gi_id},
           {"workload", known ? nlohmann::json(list[Index(instance.workload)].name) : nullptr},
           {"capacity", Round(instance.capacity, 4)},
           {"batch", instance.batch}});
      if (known) {
        per_workload[Index(instance.workload)].push_back(
            {{"node", node},
             {"gpu", gpu.index},
             {"model", model},
             {"profile", profile},
             {"start", IsWhole(instance.profile) ? 0 : instance.start},
             {"gi_id", gi_id},
             {"capacity", Round(instance.capacity, 4)},
             {"batch", instance.batch}});
      }
    }
    gpus.push_back({{"node", node},
                    {"gpu", gpu.index},
                    {"model", model},
                    {"mig_enabled", gpu.mig_enabled},
                    {"used", gpu.used},
                    {"instances", instances}});
  }
  nlohmann::json out_workloads = nlohmann::json::array();
  for (size_t w = 0; w < list.size(); ++w) {
    const bool by_throughput =
        w < plan.sizing.size() ? plan.sizing[w].by_throughput : list[w].throughput_rps > 0;
    const double demand = w < plan.sizing.size() ? plan.sizing[w].demand
                          : by_throughput        ? list[w].throughput_rps
                                                 : list[w].replicas;
    out_workloads.push_back({{"name", list[w].name},
                             {"tenant", list[w].tenant},
                             {"by_throughput", by_throughput},
                             {"demand", Round(demand, 4)},
                             {"instances", per_workload[w]}});
  }
  return {{"workloads", out_workloads}, {"gpus", gpus}};
}

}  // namespace gpuslice::plan
