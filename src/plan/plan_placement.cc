// Placement: the chosen configs on the fleet's GPUs (their exact layouts, nodes interleaved),
// instances handed to workloads so that replicas spread, the last repairs (completion of short
// workloads, trimming) and consolidation of lightly used GPUs.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "gpuslice/geometry/shape.h"
#include "planner_detail.h"

namespace gpuslice::plan::internal {

void Planner::PlaceKept(std::vector<double>& covered, std::vector<int>& instances) {
  if (pinned_ == nullptr) return;
  for (size_t g = 0; g < pinned_->size() && g < result_.gpus.size(); ++g) {
    for (PlannedInstance instance : (*pinned_)[g]) {
      instance.kept = true;
      result_.gpus[g].instances.push_back(instance);
      result_.gpus[g].mig_enabled |= instance.profile != kWholeGpu;
      covered[static_cast<size_t>(instance.workload)] += instance.capacity;
      ++instances[static_cast<size_t>(instance.workload)];
    }
  }
}

FreeSlots Planner::LayOutGpus(const ConfigCounts& gpus) {
  FreeSlots slots;
  for (size_t t = 0; t < types_.size(); ++t) {
    const GpuType& type = types_[t];
    size_t next = 0;
    for (size_t i = 0; i < type.configs.size(); ++i) {
      const Config& config = type.configs[i];
      for (int copy = 0; copy < gpus[t][i] && next < type.gpus.size(); ++copy) {
        const int g = type.gpus[next];
        PlannedGpu& gpu = result_.gpus[static_cast<size_t>(g)];
        std::map<int, int> rank;
        const size_t first_new = gpu.instances.size();
        if (config.whole) {
          gpu.instances.push_back(PlannedInstance{kWholeGpu, 0, -1, 0, 0});
        } else {
          gpu.mig_enabled = true;
          for (const geometry::Placed& placed : config.layout) {
            if (std::binary_search(type.pinned_layout.begin(), type.pinned_layout.end(), placed)) {
              continue;  // kept already
            }
            gpu.instances.push_back(PlannedInstance{placed.profile, placed.start, -1, 0, 0});
          }
        }
        for (size_t s = first_new; s < gpu.instances.size(); ++s) {
          const int profile = gpu.instances[s].profile;
          slots[{type.model, profile}].emplace_back(rank[profile]++, static_cast<int>(next), g,
                                                    static_cast<int>(s));
        }
        ++next;
      }
    }
  }
  for (auto& [slot, list] : slots) std::sort(list.begin(), list.end());
  return slots;
}

void Planner::AssignInstances(const InstanceCounts& counts, FreeSlots& slots,
                              std::vector<double>& covered, std::vector<int>& instances) {
  std::map<Slot, size_t> taken;
  for (size_t k = 0; k < classes_.size(); ++k) {
    const DemandClass& demand = classes_[k];
    // The class's instances in slot order, then handed to its workloads in turn.
    ClassInstances got;
    for (size_t o = 0; o < demand.options.size(); ++o) {
      const SizedOption& option = demand.options[o];
      const Slot slot{option.model, option.profile};
      auto& list = slots[slot];
      size_t& cursor = taken[slot];
      for (int i = 0; i < counts[k][o] && cursor < list.size(); ++i, ++cursor) {
        got.push_back({{std::get<2>(list[cursor]), std::get<3>(list[cursor])}, o});
      }
    }
    if (demand.by_throughput) {
      AssignThroughput(demand, got, covered, instances);
    } else {
      AssignReplicas(demand, got, covered, instances);
    }
  }
}

void Planner::AssignThroughput(const DemandClass& demand, const ClassInstances& got,
                               std::vector<double>& covered, std::vector<int>& instances) {
  const int w = demand.workloads.front();
  for (const auto& [where, o] : got) {
    PlannedInstance& instance =
        result_.gpus[static_cast<size_t>(where.first)].instances[static_cast<size_t>(where.second)];
    instance.workload = w;
    instance.capacity = demand.options[o].capacity;
    instance.batch = demand.options[o].batch;
    covered[static_cast<size_t>(w)] += instance.capacity;
    ++instances[static_cast<size_t>(w)];
  }
}

void Planner::AssignReplicas(const DemandClass& demand, const ClassInstances& got,
                             std::vector<double>& covered, std::vector<int>& instances) {
  // As many workloads as the instances hold (the smallest first, as the program leaves out the
  // fewest; the rest are left unplaced later), each taking its replicas in turn so that they
  // stay spread.
  auto wanted_by = [&](int w) {
    return static_cast<size_t>(std::llround(remaining_[static_cast<size_t>(w)]));
  };
  std::vector<int> smallest = demand.workloads;
  std::stable_sort(smallest.begin(), smallest.end(),
                   [&](int a, int b) { return wanted_by(a) < wanted_by(b); });
  std::set<int> placed;
  size_t room = got.size();
  for (int w : smallest) {
    if (wanted_by(w) > room) break;
    room -= wanted_by(w);
    placed.insert(w);
  }
  size_t cursor = 0;
  for (int w : demand.workloads) {
    if (placed.count(w) == 0) continue;
    const int wanted = static_cast<int>(wanted_by(w));
    for (int i = 0; i < wanted; ++i, ++cursor) {
      const auto& [where, o] = got[cursor];
      PlannedInstance& instance = result_.gpus[static_cast<size_t>(where.first)]
                                      .instances[static_cast<size_t>(where.second)];
      instance.workload = w;
      instance.capacity = 1;
      covered[static_cast<size_t>(w)] += 1;
      ++instances[static_cast<size_t>(w)];
    }
  }
}

void Planner::DropShortWorkloads(const std::vector<double>& covered,
                                 const std::vector<int>& instances) {
  std::set<int> short_workloads;
  for (const DemandClass& demand : classes_) {
    for (int w : demand.workloads) {
      const WorkloadSizing& sizing = result_.sizing[static_cast<size_t>(w)];
      if (covered[static_cast<size_t>(w)] + kEps < sizing.demand ||
          instances[static_cast<size_t>(w)] < sizing.min_instances) {
        short_workloads.insert(w);
        short_of_room_ = true;
        result_.unplaced.emplace_back(
            w, "the fleet has too little room for it (every GPU it can use is taken)");
      }
    }
  }
  // Drop spares and short workloads' instances.
  for (PlannedGpu& gpu : result_.gpus) {
    std::erase_if(gpu.instances, [&](const PlannedInstance& instance) {
      return instance.workload < 0 || short_workloads.count(instance.workload) > 0;
    });
  }
}

void Planner::FinishGpus() {
  for (PlannedGpu& gpu : result_.gpus) {
    std::sort(gpu.instances.begin(), gpu.instances.end(),
              [](const PlannedInstance& a, const PlannedInstance& b) { return a.start < b.start; });
    gpu.used = !gpu.instances.empty();
    if (!gpu.used) gpu.mig_enabled = false;
    if (gpu.used) {
      ++result_.gpus_used;
      result_.cost_per_hour += gpu.cost_per_hour;
    }
  }
  std::sort(result_.unplaced.begin(), result_.unplaced.end());
}

void Planner::Materialise(const InstanceCounts& counts, const ConfigCounts& gpus) {
  std::vector<double> covered(workloads_.workloads.size(), 0);
  std::vector<int> instances(workloads_.workloads.size(), 0);
  PlaceKept(covered, instances);
  FreeSlots slots = LayOutGpus(gpus);
  AssignInstances(counts, slots, covered, instances);
  CompleteShort(covered, instances);
  TrimSurplus(covered, instances);
  DropShortWorkloads(covered, instances);
  Consolidate();
  FinishGpus();
}

void Planner::CompleteShort(std::vector<double>& covered, std::vector<int>& instances) {
  std::map<const hw::GpuModel*, geometry::Shape> shapes;
  auto shape_of = [&](const hw::GpuModel* model) -> const geometry::Shape& {
    return shapes.try_emplace(model, *model).first->second;
  };
  auto occupancy_of = [&](const PlannedGpu& gpu) {
    geometry::Occupancy occupancy;
    for (const PlannedInstance& instance : gpu.instances) {
      shape_of(gpu.model).Add(occupancy, instance.profile, instance.start);
    }
    return occupancy;
  };
  for (const DemandClass& demand : classes_) {
    for (int w : demand.workloads) {
      const WorkloadSizing& sizing = result_.sizing[static_cast<size_t>(w)];
      auto is_short = [&] {
        return covered[static_cast<size_t>(w)] + kEps < sizing.demand ||
               instances[static_cast<size_t>(w)] < sizing.min_instances;
      };
      while (is_short()) {
        bool placed = false;
        for (const SizedOption& option : sizing.options) {
          const bool whole = option.profile == kWholeGpu;
          PlannedGpu* target = nullptr;
          int slot = -1;
          int start = 0;
          // A spare slot, then room on a used MIG GPU, then the cheapest unused GPU.
          for (PlannedGpu& gpu : result_.gpus) {
            if (gpu.model != option.model) continue;
            for (size_t i = 0; i < gpu.instances.size() && target == nullptr; ++i) {
              if (gpu.instances[i].workload < 0 && gpu.instances[i].profile == option.profile) {
                target = &gpu;
                slot = static_cast<int>(i);
              }
            }
            if (target != nullptr) break;
          }
          if (target == nullptr && !whole) {
            for (PlannedGpu& gpu : result_.gpus) {
              if (gpu.model != option.model || !gpu.mig_enabled || gpu.instances.empty()) continue;
              const int at = shape_of(gpu.model).DefaultStart(occupancy_of(gpu), option.profile);
              if (at >= 0) {
                target = &gpu;
                start = at;
                break;
              }
            }
          }
          if (target == nullptr) {
            for (PlannedGpu& gpu : result_.gpus) {
              if (gpu.model != option.model || !gpu.instances.empty()) continue;
              if (!whole && !gpu.mig_allowed) continue;
              if (target == nullptr || gpu.cost_per_hour < target->cost_per_hour) target = &gpu;
            }
            if (target != nullptr && !whole) {
              start = shape_of(target->model).DefaultStart(geometry::Occupancy{}, option.profile);
              if (start < 0) target = nullptr;
            }
          }
          if (target == nullptr) continue;
          if (slot < 0) {
            target->instances.push_back(
                PlannedInstance{option.profile, whole ? 0 : start, -1, 0, 0});
            target->mig_enabled = !whole;
            slot = static_cast<int>(target->instances.size()) - 1;
          }
          PlannedInstance& instance = target->instances[static_cast<size_t>(slot)];
          instance.workload = w;
          instance.capacity = option.capacity;
          instance.batch = option.batch;
          covered[static_cast<size_t>(w)] += option.capacity;
          ++instances[static_cast<size_t>(w)];
          placed = true;
          break;
        }
        if (!placed) break;
      }
    }
  }
}

void Planner::TrimSurplus(std::vector<double>& covered, std::vector<int>& instances) {
  for (size_t w = 0; w < workloads_.workloads.size(); ++w) {
    const WorkloadSizing& sizing = result_.sizing[w];
    if (!sizing.by_throughput || instances[w] == 0) continue;
    for (bool dropped = true; dropped;) {
      dropped = false;
      PlannedInstance* drop = nullptr;
      const hw::GpuModel* model = nullptr;
      for (PlannedGpu& gpu : result_.gpus) {
        for (PlannedInstance& instance : gpu.instances) {
          if (instance.workload != static_cast<int>(w) || instance.kept) continue;
          if (covered[w] - instance.capacity + kEps < sizing.demand) continue;
          if (instances[w] - 1 < sizing.min_instances) continue;
          if (drop == nullptr ||
              ShareOf(*gpu.model, instance.profile) > ShareOf(*model, drop->profile)) {
            drop = &instance;
            model = gpu.model;
          }
        }
      }
      if (drop != nullptr) {
        covered[w] -= drop->capacity;
        --instances[w];
        drop->workload = -1;  // a spare: dropped with the others
        dropped = true;
      }
    }
  }
}

void Planner::Consolidate() {
  // Used MIG GPUs by model, each with its occupancy.
  std::map<const hw::GpuModel*, std::vector<int>> by_model;
  std::vector<geometry::Occupancy> occupancy(result_.gpus.size());
  std::map<const hw::GpuModel*, geometry::Shape> shapes;
  for (size_t g = 0; g < result_.gpus.size(); ++g) {
    const PlannedGpu& gpu = result_.gpus[g];
    if (!gpu.mig_enabled || gpu.instances.empty()) continue;
    auto it = shapes.try_emplace(gpu.model, *gpu.model).first;
    for (const PlannedInstance& instance : gpu.instances) {
      it->second.Add(occupancy[g], instance.profile, instance.start);
    }
    by_model[gpu.model].push_back(static_cast<int>(g));
  }
  auto used_slices = [&](int g) {
    int slices = 0;
    for (const PlannedInstance& instance : result_.gpus[static_cast<size_t>(g)].instances) {
      slices += SlicesOf(*result_.gpus[static_cast<size_t>(g)].model, instance.profile);
    }
    return slices;
  };
  constexpr size_t kMaxSources = 256;
  for (auto& [model, gpus] : by_model) {
    const geometry::Shape& shape = shapes.at(model);
    std::vector<int> sources = gpus;
    std::stable_sort(sources.begin(), sources.end(),
                     [&](int a, int b) { return used_slices(a) < used_slices(b); });
    if (sources.size() > kMaxSources) sources.resize(kMaxSources);
    for (int source : sources) {
      PlannedGpu& from = result_.gpus[static_cast<size_t>(source)];
      if (from.instances.empty()) continue;
      if (std::any_of(from.instances.begin(), from.instances.end(),
                      [](const PlannedInstance& instance) { return instance.kept; })) {
        continue;  // moving a running instance would stop it
      }
      // Tentatively move every instance to another GPU with room, keeping replicas apart.
      std::vector<std::pair<int, PlannedInstance>> moves;
      std::map<int, geometry::Occupancy> trial;
      bool all_moved = true;
      for (const PlannedInstance& instance : from.instances) {
        bool moved = false;
        for (int target : gpus) {
          if (target == source || result_.gpus[static_cast<size_t>(target)].instances.empty()) {
            continue;
          }
          auto [slot, inserted] = trial.try_emplace(target, occupancy[static_cast<size_t>(target)]);
          if (occupancy[static_cast<size_t>(target)].used == shape.all_units()) continue;
          const int start = shape.DefaultStart(slot->second, instance.profile);
          if (start < 0) continue;
          bool same_workload = false;
          for (const PlannedInstance& there : result_.gpus[static_cast<size_t>(target)].instances) {
            same_workload |= there.workload == instance.workload;
          }
          for (const auto& [where, planned] : moves) {
            same_workload |= where == target && planned.workload == instance.workload;
          }
          if (same_workload &&
              workloads_.workloads[static_cast<size_t>(instance.workload)].spread) {
            continue;
          }
          shape.Add(slot->second, instance.profile, start);
          PlannedInstance placed = instance;
          placed.start = start;
          moves.emplace_back(target, placed);
          moved = true;
          break;
        }
        if (!moved) {
          all_moved = false;
          break;
        }
      }
      if (!all_moved) continue;
      for (auto& [target, placed] : moves) {
        result_.gpus[static_cast<size_t>(target)].instances.push_back(placed);
      }
      for (auto& [target, occ] : trial) occupancy[static_cast<size_t>(target)] = occ;
      from.instances.clear();
      occupancy[static_cast<size_t>(source)] = geometry::Occupancy{};
    }
  }
}

}  // namespace gpuslice::plan::internal
