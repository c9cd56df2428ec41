// The plan report as JSON (ToJson, gpuslice/plan/report.h).
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
// JSON and YAML.

namespace {

nlohmann::json LossJson(const Loss& loss) {
  nlohmann::json impacts = nlohmann::json::array();
  for (const LossImpact& impact : loss.impacts) {
    impacts.push_back({{"workload", impact.workload},
                       {"capacity_lost", Round(impact.capacity_lost, 4)},
                       {"capacity_left", Round(impact.capacity_left, 4)},
                       {"demand", Round(impact.demand, 4)},
                       {"below_demand", impact.below_demand}});
  }
  return {{"node", loss.node},
          {"gpu", loss.gpu >= 0 ? nlohmann::json(loss.gpu) : nlohmann::json(nullptr)},
          {"workloads_below_demand", loss.workloads_below_demand},
          {"impacts", impacts}};
}

nlohmann::json PairsJson(const std::vector<std::pair<std::string, int>>& pairs) {
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [name, count] : pairs) json[name] = count;
  return json;
}

nlohmann::json LossesJson(const std::vector<Loss>& losses) {
  nlohmann::json json = nlohmann::json::array();
  for (const Loss& loss : losses) json.push_back(LossJson(loss));
  return json;
}

nlohmann::json InstancesJson(const ReportGpu& gpu) {
  nlohmann::json instances = nlohmann::json::array();
  for (const ReportInstance& i : gpu.instances) {
    instances.push_back({{"profile", i.profile},
                         {"start", i.start},
                         {"gi_id", i.gi_id >= 0 ? nlohmann::json(i.gi_id) : nullptr},
                         {"compute_slices", i.compute_slices},
                         {"memory_gib", Round(i.memory_gib, 2)},
                         {"workload", i.workload},
                         {"tenant", i.tenant},
                         {"capacity", Round(i.capacity, 4)},
                         {"batch", i.batch},
                         {"kept", i.kept}});
  }
  return instances;
}

nlohmann::json WorkloadsJson(const Report& report) {
  nlohmann::json workloads = nlohmann::json::array();
  for (const ReportWorkload& w : report.workloads) {
    workloads.push_back({{"name", w.name},
                         {"tenant", w.tenant},
                         {"kind", w.kind},
                         {"by_throughput", w.by_throughput},
                         {"demand", Round(w.demand, 4)},
                         {"min_instances", w.min_instances},
                         {"explanation", w.explanation},
                         {"placed", w.placed},
                         {"unplaced_reason", w.unplaced_reason},
                         {"placed_as", w.placed_as},
                         {"instances", w.instances},
                         {"capacity", Round(w.capacity, 4)},
                         {"gpus", w.gpus},
                         {"nodes", w.nodes},
                         {"single_point_of_failure", w.single_point_of_failure}});
  }
  return workloads;
}

nlohmann::json GpusJson(const Report& report) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const ReportGpu& gpu : report.gpus) {
    const nlohmann::json instances = InstancesJson(gpu);
    gpus.push_back({{"node", gpu.node},
                    {"gpu", gpu.index},
                    {"model", gpu.model},
                    {"cost_per_hour", Round(gpu.cost_per_hour, 2)},
                    {"mig_allowed", gpu.mig_allowed},
                    {"used", gpu.used},
                    {"mig_enabled", gpu.mig_enabled},
                    {"layout", gpu.layout},
                    {"instances", instances},
                    {"compute_slices_used", gpu.compute_slices_used},
                    {"compute_slices_total", gpu.compute_slices_total},
                    {"memory_needed_gib", Round(gpu.memory_needed_gib, 2)},
                    {"memory_total_gib", Round(gpu.memory_total_gib, 2)},
                    {"free_units", gpu.free_units},
                    {"free_profiles", PairsJson(gpu.free_profiles)},
                    {"unusable_units", gpu.unusable_units}});
  }
  return gpus;
}

nlohmann::json BaselinesJson(const Report& report) {
  nlohmann::json baselines = nlohmann::json::array();
  for (const Baseline& b : report.baselines) {
    baselines.push_back({{"name", b.name},
                         {"description", b.description},
                         {"gpus", b.gpus},
                         {"gpus_by_model", PairsJson(b.gpus_by_model)},
                         {"cost_per_hour", Round(b.cost_per_hour, 2)},
                         {"cost_per_month", Round(b.cost_per_month, 2)},
                         {"gpus_saved", b.gpus_saved},
                         {"saved_per_hour", Round(b.saved_per_hour, 2)},
                         {"saved_per_month", Round(b.saved_per_month, 2)},
                         {"exceeds_fleet", b.exceeds_fleet},
                         {"notes", b.notes}});
  }
  return baselines;
}

nlohmann::json ChecklistJson(const Report& report) {
  nlohmann::json checklist = nlohmann::json::array();
  for (const ChecklistItem& item : report.checklist) {
    checklist.push_back(
        {{"key", item.key},
         {"question", item.question},
         {"answer", item.answer},
         {"favours_mig", item.favours_mig ? nlohmann::json(*item.favours_mig) : nullptr}});
  }
  return checklist;
}

nlohmann::json UnplacedJson(const Report& report) {
  nlohmann::json unplaced = nlohmann::json::array();
  for (const auto& [name, reason] : report.unplaced)
    unplaced.push_back({{"workload", name}, {"reason", reason}});

  return unplaced;
}

}  // namespace

nlohmann::json ToJson(const Report& report) {
  return {
      {"summary",
       {{"currency", report.currency},
        {"costs_given", report.costs_given},
        {"hours_per_month", report.hours_per_month},
        {"nodes", report.nodes},
        {"gpus_in_fleet", report.gpus_in_fleet},
        {"gpus_used", report.gpus_used},
        {"mig_gpus", report.mig_gpus},
        {"whole_gpus", report.whole_gpus},
        {"cost_per_hour", Round(report.cost_per_hour, 2)},
        {"cost_per_month", Round(report.cost_per_month, 2)}}},
      {"workloads", WorkloadsJson(report)},
      {"gpus", GpusJson(report)},
      {"baselines", BaselinesJson(report)},
      {"utilisation",
       {{"compute_slices_used", report.compute_slices_used},
        {"compute_slices_total", report.compute_slices_total},
        {"compute", Round(report.compute_utilisation, 4)},
        {"memory_needed_gib", Round(report.memory_needed_gib, 2)},
        {"memory_total_gib", Round(report.memory_total_gib, 2)},
        {"memory", Round(report.memory_utilisation, 4)}}},
      {"stranded",
       {{"gpus_with_free_capacity", report.gpus_with_free_capacity},
        {"gpus_with_unusable_units", report.gpus_with_unusable_units}}},
      {"redundancy",
       {{"single_points_of_failure", report.single_points_of_failure},
        {"gpu_losses", LossesJson(report.gpu_losses)},
        {"node_losses", LossesJson(report.node_losses)},
        {"worst_gpu_loss",
         report.worst_gpu_loss ? LossJson(*report.worst_gpu_loss) : nlohmann::json(nullptr)},
        {"worst_node_loss",
         report.worst_node_loss ? LossJson(*report.worst_node_loss) : nlohmann::json(nullptr)}}},
      {"mig_pays_off", {{"checklist", ChecklistJson(report)}, {"verdict", report.verdict}}},
      {"unplaced", UnplacedJson(report)},
      {"solver",
       {{"name", report.solver},
        {"solve_seconds", Round(report.solve_seconds, 3)},
        {"proven_optimal", report.proven_optimal},
        {"lower_bound_cost_per_hour", Round(report.lower_bound_cost, 2)},
        {"lower_bound_gpus", report.lower_bound_gpus},
        {"gap", Round(report.gap, 4)}}},
      {"notes", report.notes},
  };
}

}  // namespace gpuslice::plan
