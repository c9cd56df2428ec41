// The plan report as text for a terminal (RenderText, gpuslice/plan/report.h).
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
// Text.

namespace {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : right_(header.size(), false) {
    rows_.push_back(std::move(header));
  }
  void Add(std::vector<std::string> row) {
    row.resize(rows_.front().size());
    rows_.push_back(std::move(row));
  }
  void RightAlign(size_t column) { right_.at(column) = true; }
  std::string Render(const std::string& indent) const {
    std::vector<size_t> widths(rows_.front().size(), 0);
    for (const auto& row : rows_) {
      for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], Width(row[c]));
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line = indent;
      for (size_t c = 0; c < row.size(); ++c) {
        const std::string pad(widths[c] - Width(row[c]), ' ');
        line += right_[c] ? pad + row[c] : row[c] + pad;
        if (c + 1 < row.size()) line += "  ";
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }

 private:
  // Display width of UTF-8 text: code points.
  static size_t Width(const std::string& text) {
    size_t width = 0;
    for (char c : text) {
      if ((static_cast<unsigned char>(c) & 0xC0U) != 0x80U) ++width;
    }
    return width;
  }
  std::vector<std::vector<std::string>> rows_;
  std::vector<bool> right_;
};

std::string Money(const Report& report, double value) {
  if (!report.costs_given) return Num(Round(value, 2));
  return Fixed(value, 2) + " " + report.currency;
}

std::string Demand(const ReportWorkload& workload) {
  if (workload.by_throughput) return Num(workload.demand) + " req/s";
  return Plural(static_cast<int>(std::lround(workload.demand)), "replica", "replicas");
}

std::string Capacity(bool by_throughput, double value) {
  return by_throughput ? Num(value) + " req/s" : Num(value);
}

// "unit 7", "units 1-3,6".
std::string UnitsText(const std::vector<int>& units) {
  std::string text;
  for (size_t i = 0; i < units.size();) {
    size_t j = i;
    while (j + 1 < units.size() && units[j + 1] == units[j] + 1) ++j;
    text += (text.empty() ? "" : ",") + std::to_string(units[i]);
    if (j > i) text += "-" + std::to_string(units[j]);
    i = j + 1;
  }
  return (units.size() == 1 ? "unit " : "units ") + text;
}

std::string LossText(const Report& report, const Loss& loss) {
  std::map<std::string, bool> by_throughput;
  for (const ReportWorkload& workload : report.workloads)
    by_throughput[workload.name] = workload.by_throughput;
  std::string text;
  for (const LossImpact& impact : loss.impacts) {
    const bool rps = by_throughput[impact.workload];
    text += "\n      " + impact.workload + ": loses " + Capacity(rps, impact.capacity_lost) + ", " +
            Capacity(rps, impact.capacity_left) + " left of " + Capacity(rps, impact.demand) +
            (impact.below_demand ? "  BELOW DEMAND" : "");
  }
  if (loss.impacts.empty()) text += " nothing";
  return text;
}

// The headline: what was planned on what, the GPUs used and their cost.
std::string HeadlineText(const Report& report) {
  std::string out;
  out += "gpuslice plan: " + Plural(Int(report.workloads.size()), "workload", "workloads") +
         " on " + Plural(report.gpus_in_fleet, "GPU", "GPUs") + " in " +
         Plural(report.nodes, "node", "nodes") + ".\n";
  out += "Uses " + Plural(report.gpus_used, "GPU", "GPUs") + " (" +
         std::to_string(report.mig_gpus) + " with MIG, " + std::to_string(report.whole_gpus) +
         " whole)";
  if (report.costs_given) {
    out += ": " + Money(report, report.cost_per_hour) + " per hour, " +
           Money(report, report.cost_per_month) + " per month";
  } else {
    out += ": " + Num(Round(report.cost_per_month, 2)) + " GPU-hours per month";
  }
  out += ".\n";
  if (!report.unplaced.empty()) {
    out += "NOT PLACED: " + Plural(Int(report.unplaced.size()), "workload", "workloads") +
           " (see Unplaced).\n";
  }
  return out;
}

std::string SizingText(const Report& report, const TextOptions& options) {
  std::string out = "\nSizing\n";
  TextTable table({"WORKLOAD", "TENANT", "KIND", "DEMAND", "MIN", "PLACED AS"});
  for (const ReportWorkload& workload : report.workloads) {
    std::string placed_as = workload.placed ? "" : "NOT PLACED";
    for (const std::string& kind : workload.placed_as)
      placed_as += (placed_as.empty() ? "" : ", ") + kind;
    table.Add({workload.name, workload.tenant, workload.kind, Demand(workload),
               std::to_string(workload.min_instances), placed_as});
  }
  out += table.Render("  ");
  if (options.explanations) {
    for (const ReportWorkload& workload : report.workloads) {
      if (workload.explanation.empty()) continue;
      out += "  " + workload.name + ":\n";
      for (const std::string& line : workload.explanation) out += "    " + line + "\n";
    }
  }
  return out;
}

bool AnyInstanceKept(const Report& report) {
  bool any_kept = false;
  for (const ReportGpu& gpu : report.gpus) {
    for (const ReportInstance& instance : gpu.instances) any_kept = any_kept || instance.kept;
  }
  return any_kept;
}

// One row per instance of a used GPU, the GPU's columns on its first row only.
void AddGpuRows(const ReportGpu& gpu, std::map<std::string, bool>& by_throughput,
                TextTable& table) {
  bool first = true;
  for (const ReportInstance& instance : gpu.instances) {
    std::string capacity = Capacity(by_throughput[instance.workload], instance.capacity);
    if (instance.batch > 0) capacity += " (batch " + std::to_string(instance.batch) + ")";
    table.Add({first ? gpu.node : "", first ? std::to_string(gpu.index) : "",
               first ? gpu.model : "", first ? (gpu.mig_enabled ? "MIG" : "whole") : "",
               instance.profile, instance.gi_id >= 0 ? std::to_string(instance.start) : "",
               instance.gi_id >= 0 ? std::to_string(instance.gi_id) : "", instance.workload,
               instance.tenant, capacity, instance.kept ? "kept" : "new"});
    first = false;
  }
}

std::string PlanText(const Report& report, const TextOptions& options) {
  std::string out = "\nPlan\n";
  std::vector<std::string> header = {"NODE",  "GPU", "MODEL",    "MODE",   "INSTANCE",
                                     "START", "GI",  "WORKLOAD", "TENANT", "CAPACITY"};
  if (AnyInstanceKept(report)) header.push_back("RE-PLAN");
  TextTable table(header);
  table.RightAlign(1);
  table.RightAlign(5);
  table.RightAlign(6);
  table.RightAlign(9);
  int unused = 0;
  std::map<std::string, bool> by_throughput;
  for (const ReportWorkload& workload : report.workloads)
    by_throughput[workload.name] = workload.by_throughput;
  for (const ReportGpu& gpu : report.gpus) {
    if (!gpu.used) {
      ++unused;
      if (options.unused_gpus) {
        table.Add(
            {gpu.node, std::to_string(gpu.index), gpu.model, "unused", "", "", "", "", "", ""});
      }
      continue;
    }
    AddGpuRows(gpu, by_throughput, table);
  }
  out += table.Render("  ");
  if (unused > 0 && !options.unused_gpus) {
    out += "  " + Plural(unused, "GPU is", "GPUs are") + " not used (MIG disabled, free).\n";
  }
  return out;
}

std::string CostText(const Report& report) {
  const std::string cost_unit =
      report.costs_given ? report.currency
                         : "no costs given: every GPU counts 1 per hour, so costs are GPU-hours";
  std::string out = "\nCost (" + cost_unit + ")\n";
  const std::string per_month = report.costs_given ? "PER MONTH" : "GPU-HOURS/MONTH";
  TextTable table({"", "GPUS", report.costs_given ? "PER HOUR" : "GPUS/HOUR", per_month,
                   report.costs_given ? "PLAN SAVES/MONTH" : "GPU-HOURS SAVED/MONTH",
                   "GPUS SAVED"});
  for (size_t c = 1; c < 6; ++c) table.RightAlign(c);
  table.Add({"this plan", std::to_string(report.gpus_used), Money(report, report.cost_per_hour),
             Money(report, report.cost_per_month), "", ""});
  for (const Baseline& baseline : report.baselines) {
    table.Add({baseline.name, std::to_string(baseline.gpus), Money(report, baseline.cost_per_hour),
               Money(report, baseline.cost_per_month), Money(report, baseline.saved_per_month),
               std::to_string(baseline.gpus_saved)});
  }
  out += table.Render("  ");
  for (const Baseline& baseline : report.baselines) {
    std::string by_model;
    for (const auto& [model, count] : baseline.gpus_by_model)
      by_model += (by_model.empty() ? "" : ", ") + std::to_string(count) + " x " + model;
    out += "  " + baseline.name + ": " + baseline.description + (by_model.empty() ? "" : ": ") +
           by_model + ".\n";
    for (const std::string& note : baseline.notes) out += "    note: " + note + "\n";
  }
  return out;
}

std::string UtilisationText(const Report& report) {
  std::string out = "\nUtilisation (of the used GPUs)\n";
  out += "  Compute: " + std::to_string(report.compute_slices_used) + " of " +
         std::to_string(report.compute_slices_total) + " compute slices (" +
         Percent(report.compute_utilisation) + ")\n";
  out += "  Memory:  " + Fixed(report.memory_needed_gib, 1) + " of " +
         Fixed(report.memory_total_gib, 1) + " GiB (" + Percent(report.memory_utilisation) +
         "): workload peaks with headroom, whole instances for throughput workloads\n";
  return out;
}

// One used MIG GPU with free units: what is free, what still fits, what no profile can use.
std::string StrandedLine(const ReportGpu& gpu) {
  std::string line = "  " + GpuLabel(gpu.node, gpu.index) + " (" + gpu.model +
                     "): " + UnitsText(gpu.free_units) + " free";
  if (!gpu.free_profiles.empty()) {
    std::string profiles;
    for (const auto& [name, count] : gpu.free_profiles)
      profiles += (profiles.empty() ? "" : ", ") + std::to_string(count) + " x " + name;
    line += "; still fits (each alone) " + profiles;
  }
  if (!gpu.unusable_units.empty()) {
    line += "; " + UnitsText(gpu.unusable_units) + " unusable by any profile";
  }
  return line + "\n";
}

std::string StrandedText(const Report& report) {
  std::string out = "\nStranded capacity\n";
  bool any = false;
  for (const ReportGpu& gpu : report.gpus) {
    if (!gpu.used || !gpu.mig_enabled || gpu.free_units.empty()) continue;
    any = true;
    out += StrandedLine(gpu);
  }
  if (!any) out += "  none: every used MIG GPU is full\n";
  return out;
}

std::string RedundancyTable(const Report& report) {
  TextTable table({"WORKLOAD", "INSTANCES", "GPUS", "NODES", "CAPACITY", "DEMAND", ""});
  for (size_t c = 1; c < 6; ++c) table.RightAlign(c);
  for (const ReportWorkload& workload : report.workloads) {
    if (!workload.placed) continue;
    std::string flag;
    if (workload.single_point_of_failure)
      flag = "single point of failure (one GPU)";
    else if (workload.nodes == 1 && report.nodes > 1)
      flag = "one node";
    table.Add({workload.name, std::to_string(workload.instances), std::to_string(workload.gpus),
               std::to_string(workload.nodes), Capacity(workload.by_throughput, workload.capacity),
               Capacity(workload.by_throughput, workload.demand), flag});
  }
  return table.Render("  ");
}

std::string RedundancyText(const Report& report) {
  std::string out = "\nRedundancy\n";
  out += RedundancyTable(report);
  if (report.single_points_of_failure.empty()) {
    out += "  No workload has all its instances on one GPU.\n";
  } else {
    out += "  Single points of failure: " + JoinNames(report.single_points_of_failure, 20) + "\n";
  }
  if (report.worst_gpu_loss) {
    const Loss& loss = *report.worst_gpu_loss;
    out += "  Worst single GPU loss: " + GpuLabel(loss.node, loss.gpu) + " (" +
           Plural(loss.workloads_below_demand, "workload", "workloads") + " below demand)" +
           LossText(report, loss) + "\n";
  }
  if (report.worst_node_loss && report.nodes > 1) {
    const Loss& loss = *report.worst_node_loss;
    out += "  Worst node loss: " + loss.node + " (" +
           Plural(loss.workloads_below_demand, "workload", "workloads") + " below demand)" +
           LossText(report, loss) + "\n";
  }
  return out;
}

std::string ChecklistText(const Report& report) {
  std::string out = "\nDoes MIG pay off here?\n";
  for (const ChecklistItem& item : report.checklist) {
    const std::string mark = !item.favours_mig ? "[ ]" : (*item.favours_mig ? "[+]" : "[-]");
    out += "  " + mark + " " + item.question + ": " + item.answer + "\n";
  }
  out += "  ([+] argues for MIG, [-] against, [ ] for information)\n";
  out += "  Verdict: " + report.verdict + "\n";
  return out;
}

std::string UnplacedText(const Report& report) {
  if (report.unplaced.empty()) return "";
  std::string out = "\nUnplaced\n";
  for (const auto& [name, reason] : report.unplaced) out += "  " + name + ": " + reason + "\n";
  return out;
}

std::string NotesText(const Report& report) {
  std::string out = "\nNotes\n";
  out += "  Solver: " + (report.solver.empty() ? std::string("?") : report.solver) + " in " +
         Fixed(report.solve_seconds, 2) + " s; ";
  if (report.proven_optimal) {
    out += "proven optimal.\n";
  } else {
    out += "lower bound " + Money(report, report.lower_bound_cost) + " per hour";
    if (report.lower_bound_gpus > 0)
      out += " (" + Plural(report.lower_bound_gpus, "GPU", "GPUs") + ")";
    out += ", gap " + Fixed(100.0 * report.gap, 1) + "%; not proven optimal.\n";
  }
  for (const std::string& note : report.notes) out += "  " + note + "\n";
  return out;
}

}  // namespace

std::string RenderText(const Report& report, const TextOptions& options) {
  return HeadlineText(report) + SizingText(report, options) + PlanText(report, options) +
         CostText(report) + UtilisationText(report) + StrandedText(report) +
         RedundancyText(report) + ChecklistText(report) + UnplacedText(report) + NotesText(report);
}

}  // namespace gpuslice::plan
