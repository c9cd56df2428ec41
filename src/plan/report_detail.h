// src/plan/report_detail.h (private to src/plan): the small helpers the report's model, text,
// JSON and mig-parted export share (number formatting, names of GPUs and profiles, the fleet by
// model, layout engines per model).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpuslice/geometry/shape.h"
#include "gpuslice/plan/report.h"

namespace gpuslice::plan::detail {

constexpr double kEps = 1e-9;

// ---------------------------------------------------------------------------------------------
// Small helpers.

inline size_t Index(int i) { return static_cast<size_t>(i); }
inline int Int(size_t i) { return static_cast<int>(i); }

inline int CeilCount(double x) { return x <= kEps ? 0 : static_cast<int>(std::ceil(x - kEps)); }

inline std::string Fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  std::string text = buffer;
  if (text == "-0" || text == "-0.0" || text == "-0.00") text = text.substr(1);
  return text;
}

// A quantity without useless decimals: 3, 2.5, 829.4.
inline std::string Num(double value) {
  if (std::fabs(value - std::round(value)) < 1e-6) return Fixed(std::round(value), 0);
  if (std::fabs(value * 10 - std::round(value * 10)) < 1e-6) return Fixed(value, 1);
  return Fixed(value, 2);
}

inline std::string Percent(double fraction) { return Fixed(100.0 * fraction, 0) + "%"; }

inline double Round(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  const double rounded = std::round(value * scale) / scale;
  return rounded == 0 ? 0.0 : rounded;  // no -0
}

inline std::string Plural(int n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

inline std::string JoinNames(const std::vector<std::string>& names, size_t limit = 6) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < limit; ++i) text += (i > 0 ? ", " : "") + names[i];
  if (names.size() > limit) text += ", ... (" + std::to_string(names.size() - limit) + " more)";
  return text;
}

inline bool IsWhole(int profile) { return profile == kWholeGpu; }

inline std::string ProfileName(const hw::GpuModel& model, int profile) {
  if (IsWhole(profile) || !model.mig || profile < 0 ||
      Index(profile) >= model.mig->profiles.size()) {
    return "whole GPU";
  }
  return model.mig->profiles[Index(profile)].name;
}

inline int GpuComputeSlices(const hw::GpuModel& model) {
  return model.mig ? model.mig->compute_slices : 1;
}

inline int InstanceSlices(const hw::GpuModel& model, int profile) {
  if (IsWhole(profile) || !model.mig) return GpuComputeSlices(model);
  return model.mig->profiles[Index(profile)].compute_slices;
}

inline double MibToGib(std::int64_t mib) { return static_cast<double>(mib) / 1024.0; }

inline double InstanceMemoryGib(const hw::GpuModel& model, int profile) {
  if (IsWhole(profile) || !model.mig) return MibToGib(model.memory_mib);
  return MibToGib(model.mig->profiles[Index(profile)].memory_mib);
}

// The memory a workload instance needs: the peak with its headroom, or (throughput workloads, or
// an unknown peak) the whole instance.
inline double MemoryNeededGib(const Workload& workload, const SizingPolicy& policy,
                              bool by_throughput, double instance_gib) {
  if (by_throughput || workload.peak_memory_gib <= 0) return instance_gib;
  const double headroom =
      workload.kind == WorkloadKind::kFineTune ? policy.fine_tune_headroom : policy.memory_headroom;
  return std::min(instance_gib, workload.peak_memory_gib * (1.0 + headroom));
}

inline std::string GpuLabel(const std::string& node, int index) {
  return node + " GPU " + std::to_string(index);
}

// The fleet per GPU model: how many GPUs, and the cheapest hourly cost (any group, and among the
// groups that allow MIG).
struct ModelFleet {
  int count = 0;
  int mig_count = 0;
  double cheapest = std::numeric_limits<double>::infinity();
  double cheapest_mig = std::numeric_limits<double>::infinity();
};

inline double UnitCost(const Fleet& fleet, double cost) { return fleet.costs_given ? cost : 1.0; }

inline std::map<std::string, ModelFleet> FleetByModel(const Fleet& fleet) {
  std::map<std::string, ModelFleet> by_model;
  for (const Node& node : fleet.nodes) {
    for (const GpuGroup& group : node.gpus) {
      ModelFleet& entry = by_model[group.model];
      const double cost = UnitCost(fleet, group.cost_per_hour);
      entry.count += group.count;
      entry.cheapest = std::min(entry.cheapest, cost);
      if (group.mig_allowed) {
        entry.mig_count += group.count;
        entry.cheapest_mig = std::min(entry.cheapest_mig, cost);
      }
    }
  }
  return by_model;
}

// Layout engines per model, built once.
class Shapes {
 public:
  const geometry::Shape* For(const hw::GpuModel* model) {
    if (model == nullptr || !model->mig_capable()) return nullptr;
    auto it = shapes_.find(model);
    if (it == shapes_.end()) {
      it = shapes_.emplace(model, std::make_unique<geometry::Shape>(*model)).first;
    }
    return it->second.get();
  }

 private:
  std::map<const hw::GpuModel*, std::unique_ptr<geometry::Shape>> shapes_;
};

inline int GiId(Shapes& shapes, const hw::GpuModel* model, const PlannedInstance& instance) {
  const geometry::Shape* shape = shapes.For(model);
  if (shape == nullptr || IsWhole(instance.profile)) return -1;
  return shape->GpuInstanceId(instance.profile, instance.start);
}

}  // namespace gpuslice::plan::detail
