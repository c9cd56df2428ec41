#include "gpuslice/plan/replan.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpuslice/util/parse_error.h"
#include "planner.h"
#include "yaml-cpp/yaml.h"

namespace gpuslice::plan {
namespace {

constexpr double kEps = 1e-6;
constexpr std::string_view kWholeName = "whole GPU";

// Reading: the assignment map is JSON, which yaml-cpp reads as YAML.
class StateReader {
 public:
  explicit StateReader(std::string_view origin) : origin_(origin) {}

  [[noreturn]] void Fail(const YAML::Node& at, const std::string& path,
                         const std::string& message) const {
    std::string where(origin_);
    if (at.IsDefined() && at.Mark().line >= 0) absl::StrAppend(&where, ":", at.Mark().line + 1);
    throw util::ParseError(absl::StrCat(where, ": ", path, ": ", message));
  }
  std::string String(const YAML::Node& map, const std::string& key, const std::string& path) const {
    const YAML::Node node = map[key];
    if (!node.IsDefined() || !node.IsScalar()) Fail(map, path + "." + key, "expected a string");
    return node.as<std::string>();
  }
  long long Int(const YAML::Node& map, const std::string& key, const std::string& path,
                long long min, long long max) const {
    const YAML::Node node = map[key];
    long long value = 0;
    if (!node.IsDefined() || !node.IsScalar() || !YAML::convert<long long>::decode(node, value)) {
      Fail(node.IsDefined() ? node : map, path + "." + key, "expected an integer");
    }
    if (value < min || value > max) {
      Fail(node, path + "." + key, absl::StrCat("must be between ", min, " and ", max));
    }
    return value;
  }
  double Double(const YAML::Node& map, const std::string& key, const std::string& path) const {
    const YAML::Node node = map[key];
    if (!node.IsDefined() || node.IsNull()) return 0;
    double value = 0;
    if (!node.IsScalar() || !YAML::convert<double>::decode(node, value) || !(value >= 0)) {
      Fail(node, path + "." + key, "expected a number >= 0");
    }
    return value;
  }

 private:
  std::string_view origin_;
};

CurrentState ParseState(const YAML::Node& root, const StateReader& reader) {
  if (!root.IsMap()) reader.Fail(root, "(top)", "expected a mapping with a 'gpus' list");
  const YAML::Node gpus = root["gpus"];
  if (!gpus.IsDefined() || !gpus.IsSequence()) reader.Fail(root, "gpus", "expected a list");
  CurrentState state;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const YAML::Node item = gpus[i];
    const std::string path = absl::StrCat("gpus[", i, "]");
    if (!item.IsMap()) reader.Fail(item, path, "expected a mapping");
    CurrentGpu gpu;
    gpu.node = reader.String(item, "node", path);
    gpu.gpu = static_cast<int>(reader.Int(item, "gpu", path, 0, 1023));
    gpu.model = reader.String(item, "model", path);
    const YAML::Node mig = item["mig_enabled"];
    gpu.mig_enabled = mig.IsDefined() && mig.IsScalar() && mig.as<std::string>() == "true";
    const YAML::Node instances = item["instances"];
    if (instances.IsDefined() && !instances.IsNull()) {
      if (!instances.IsSequence()) reader.Fail(instances, path + ".instances", "expected a list");
      for (size_t j = 0; j < instances.size(); ++j) {
        const YAML::Node entry = instances[j];
        const std::string entry_path = absl::StrCat(path, ".instances[", j, "]");
        if (!entry.IsMap()) reader.Fail(entry, entry_path, "expected a mapping");
        CurrentInstance instance;
        instance.profile = reader.String(entry, "profile", entry_path);
        instance.start = static_cast<int>(reader.Int(entry, "start", entry_path, 0, 63));
        const YAML::Node workload = entry["workload"];
        if (workload.IsDefined() && !workload.IsNull()) {
          instance.workload = reader.String(entry, "workload", entry_path);
        }
        instance.capacity = reader.Double(entry, "capacity", entry_path);
        const YAML::Node batch = entry["batch"];
        if (batch.IsDefined() && !batch.IsNull()) {
          instance.batch = static_cast<int>(reader.Int(entry, "batch", entry_path, 0, 1 << 20));
        }
        gpu.instances.push_back(instance);
      }
    }
    state.gpus.push_back(std::move(gpu));
  }
  return state;
}

struct FleetGpu {
  const GpuGroup* group = nullptr;
  std::string node;
  int index = 0;
};

std::string GpuText(const std::string& node, int gpu) { return absl::StrCat(node, "/gpu", gpu); }

}  // namespace

std::string_view ToString(StepKind kind) {
  switch (kind) {
    case StepKind::kDrain:
      return "drain";
    case StepKind::kDestroy:
      return "destroy";
    case StepKind::kDisableMig:
      return "disable-mig";
    case StepKind::kEnableMig:
      return "enable-mig";
    case StepKind::kCreate:
      return "create";
    case StepKind::kStart:
      return "start";
  }
  return "?";
}

absl::StatusOr<CurrentState> ParseCurrentState(std::string_view text, std::string_view origin) {
  const StateReader reader(origin);
  try {
    return ParseState(YAML::Load(std::string(text)), reader);
  } catch (const YAML::Exception& error) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(origin), ":", error.mark.line + 1,
                                                   ": not valid JSON/YAML: ", error.msg));
  } catch (const util::ParseError& error) {
    return util::StatusOf(error);
  }
}

absl::StatusOr<CurrentState> ReadCurrentStateFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the current state"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseCurrentState(text.str(), path);
}

absl::StatusOr<ReplanResult> Replan(const CurrentState& current, const WorkloadSet& workloads,
                                    const Fleet& fleet, const hw::Catalog& catalog,
                                    const PlanOptions& options) {
  // The fleet's GPUs in plan order, and where each current GPU is among them.
  std::vector<FleetGpu> fleet_gpus;
  std::map<std::pair<std::string, int>, size_t> index_of;
  std::vector<const hw::GpuModel*> models;
  for (const Node& node : fleet.nodes) {
    int index = 0;
    for (const GpuGroup& group : node.gpus) {
      const hw::GpuModel* model = catalog.Find(group.model);
      if (model != nullptr && std::find(models.begin(), models.end(), model) == models.end()) {
        models.push_back(model);
      }
      for (int i = 0; i < group.count; ++i) {
        index_of[{node.name, index}] = fleet_gpus.size();
        fleet_gpus.push_back(FleetGpu{&group, node.name, index++});
      }
    }
  }
  std::vector<const CurrentGpu*> current_of(fleet_gpus.size(), nullptr);
  for (const CurrentGpu& gpu : current.gpus) {
    auto it = index_of.find({gpu.node, gpu.gpu});
    if (it == index_of.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the current state has ", GpuText(gpu.node, gpu.gpu), ", which the fleet does not"));
    }
    const hw::GpuModel* model = catalog.Find(gpu.model);
    if (model == nullptr || model->id != fleet_gpus[it->second].group->model) {
      return absl::InvalidArgumentError(
          absl::StrCat(GpuText(gpu.node, gpu.gpu), " is ", gpu.model, " in the current state but ",
                       fleet_gpus[it->second].group->model, " in the fleet"));
    }
    if (current_of[it->second] != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(GpuText(gpu.node, gpu.gpu), " appears twice in the current state"));
    }
    current_of[it->second] = &gpu;
  }
  std::map<std::string, int> workload_index;
  for (size_t w = 0; w < workloads.workloads.size(); ++w) {
    workload_index[workloads.workloads[w].name] = static_cast<int>(w);
  }
  std::vector<WorkloadSizing> sizing;
  for (const Workload& workload : workloads.workloads) {
    sizing.push_back(SizeWorkload(workload, models, workloads.policy));
  }

  ReplanResult result;
  std::map<std::string, std::string> disrupted;  // workload -> reason
  // Why each current instance that does not stay stops (keyed by fleet GPU and position).
  std::map<std::pair<size_t, size_t>, std::string> stop_reason;

  // 1. What stays.
  std::vector<std::vector<PlannedInstance>> kept(fleet_gpus.size());
  std::vector<std::vector<size_t>> kept_source(fleet_gpus.size());  // position in current list
  for (size_t g = 0; g < fleet_gpus.size(); ++g) {
    const CurrentGpu* gpu = current_of[g];
    if (gpu == nullptr) continue;
    const hw::GpuModel* model = catalog.Find(gpu->model);
    for (size_t i = 0; i < gpu->instances.size(); ++i) {
      const CurrentInstance& instance = gpu->instances[i];
      int profile = kWholeGpu;
      if (instance.profile != kWholeName) {
        const hw::GiProfile* gi = model->mig ? model->mig->FindProfile(instance.profile) : nullptr;
        if (gi == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(GpuText(gpu->node, gpu->gpu),
                                                         ": unknown profile '", instance.profile,
                                                         "' on ", model->id));
        }
        profile = model->mig->IndexOf(*gi);
      }
      if (instance.workload.empty()) {
        stop_reason[{g, i}] = "idle instance";
        continue;
      }
      auto w = workload_index.find(instance.workload);
      if (w == workload_index.end()) {
        stop_reason[{g, i}] = "its workload is no longer wanted";
        continue;
      }
      if (profile != kWholeGpu && !fleet_gpus[g].group->mig_allowed) {
        stop_reason[{g, i}] = "the GPU must stay whole now";
        disrupted.emplace(instance.workload, stop_reason[{g, i}]);
        continue;
      }
      const SizedOption* option = nullptr;
      for (const SizedOption& candidate : sizing[static_cast<size_t>(w->second)].options) {
        if (candidate.model == model && candidate.profile == profile) option = &candidate;
      }
      if (option == nullptr) {
        const std::string now =
            sizing[static_cast<size_t>(w->second)].explanation.empty()
                ? std::string("no instance fits it")
                : absl::StrJoin(sizing[static_cast<size_t>(w->second)].explanation, "; ");
        stop_reason[{g, i}] =
            absl::StrCat(instance.profile, " no longer suits it (now: ", now, ")");
        disrupted.emplace(instance.workload, stop_reason[{g, i}]);
        continue;
      }
      PlannedInstance planned;
      planned.profile = profile;
      planned.start = profile == kWholeGpu ? 0 : instance.start;
      planned.workload = w->second;
      planned.capacity = option->capacity;
      planned.batch = option->batch;
      kept[g].push_back(planned);
      kept_source[g].push_back(i);
    }
  }
  // Shrunk workloads release their surplus, from the least used GPUs first.
  for (size_t w = 0; w < workloads.workloads.size(); ++w) {
    std::vector<std::pair<size_t, size_t>> where;  // (gpu, position in kept)
    double capacity = 0;
    for (size_t g = 0; g < kept.size(); ++g) {
      for (size_t k = 0; k < kept[g].size(); ++k) {
        if (kept[g][k].workload == static_cast<int>(w)) {
          where.emplace_back(g, k);
          capacity += kept[g][k].capacity;
        }
      }
    }
    std::stable_sort(where.begin(), where.end(), [&](const auto& a, const auto& b) {
      return kept[a.first].size() < kept[b.first].size();
    });
    int count = static_cast<int>(where.size());
    std::set<std::pair<size_t, size_t>> released;
    for (const auto& [g, k] : where) {
      if (capacity - kept[g][k].capacity + kEps < sizing[w].demand) continue;
      if (count - 1 < sizing[w].min_instances) break;
      capacity -= kept[g][k].capacity;
      --count;
      released.insert({g, k});
    }
    for (auto it = released.rbegin(); it != released.rend(); ++it) {
      const auto [g, k] = *it;
      stop_reason[{g, kept_source[g][k]}] = "scaled down: the other instances cover the demand";
      kept[g].erase(kept[g].begin() + static_cast<std::ptrdiff_t>(k));
      kept_source[g].erase(kept_source[g].begin() + static_cast<std::ptrdiff_t>(k));
    }
  }

  // 2 and 3. Plan around what stays; release GPUs while something does not fit.
  auto short_of_room = [&](const PlanResult& plan) {
    std::vector<std::string> names;
    for (const auto& [w, reason] : plan.unplaced) {
      if (sizing[static_cast<size_t>(w)].unsatisfiable.empty()) {
        names.push_back(workloads.workloads[static_cast<size_t>(w)].name);
      }
    }
    return names;
  };
  absl::StatusOr<PlanResult> plan = internal::PlanKeeping(workloads, fleet, catalog, options, kept);
  if (!plan.ok()) return plan.status();
  // Releasing GPUs is worth it only if it places more: keep the first state that places the
  // most, so a fleet that is simply too small does not get re-laid for nothing.
  struct State {
    size_t missing = 0;
    PlanResult plan;
    std::vector<std::vector<size_t>> kept_source;
    std::map<std::string, std::string> disrupted;
    std::map<std::pair<size_t, size_t>, std::string> stop_reason;
    int gpus_released = 0;
  };
  State best_state{short_of_room(*plan).size(), *plan, kept_source, disrupted, stop_reason, 0};
  for (std::vector<std::string> missing = short_of_room(*plan); !missing.empty();
       missing = short_of_room(*plan)) {
    // The GPU whose kept instances stop the fewest not-yet-disrupted workloads.
    int best = -1;
    std::pair<int, int> best_score{0, 0};
    for (size_t g = 0; g < kept.size(); ++g) {
      if (kept[g].empty()) continue;
      std::set<int> stopped;
      for (const PlannedInstance& instance : kept[g]) {
        if (!disrupted.count(workloads.workloads[static_cast<size_t>(instance.workload)].name)) {
          stopped.insert(instance.workload);
        }
      }
      const std::pair<int, int> score{static_cast<int>(stopped.size()),
                                      static_cast<int>(kept[g].size())};
      if (best < 0 || score < best_score) {
        best = static_cast<int>(g);
        best_score = score;
      }
    }
    if (best < 0) break;  // nothing left to release: the fleet is too small
    const size_t g = static_cast<size_t>(best);
    const std::string reason =
        absl::StrCat(GpuText(fleet_gpus[g].node, fleet_gpus[g].index),
                     " is re-laid to make room for ", absl::StrJoin(missing, ", "));
    for (size_t k = 0; k < kept[g].size(); ++k) {
      stop_reason[{g, kept_source[g][k]}] = reason;
      disrupted.emplace(workloads.workloads[static_cast<size_t>(kept[g][k].workload)].name, reason);
    }
    kept[g].clear();
    kept_source[g].clear();
    ++result.gpus_released;
    plan = internal::PlanKeeping(workloads, fleet, catalog, options, kept);
    if (!plan.ok()) return plan.status();
    const size_t now_missing = short_of_room(*plan).size();
    if (now_missing < best_state.missing) {
      best_state =
          State{now_missing, *plan, kept_source, disrupted, stop_reason, result.gpus_released};
    }
  }
  result.plan = std::move(best_state.plan);
  kept_source = std::move(best_state.kept_source);
  disrupted = std::move(best_state.disrupted);
  stop_reason = std::move(best_state.stop_reason);
  result.gpus_released = best_state.gpus_released;

  // The steps: compare each GPU's current instances with its target.
  std::vector<ReplanStep> drains, destroys, mig_off, mig_on, creates, starts;
  for (size_t g = 0; g < fleet_gpus.size(); ++g) {
    const PlannedGpu& target = result.plan.gpus[g];
    const CurrentGpu* now = current_of[g];
    const std::string& node = fleet_gpus[g].node;
    const int index = fleet_gpus[g].index;
    auto profile_name = [&](int profile) {
      return profile == kWholeGpu ? std::string(kWholeName)
                                  : target.model->mig->profiles[static_cast<size_t>(profile)].name;
    };
    std::set<std::pair<std::string, int>> target_new;  // GIs the target creates
    for (const PlannedInstance& instance : target.instances) {
      if (!instance.kept) target_new.insert({profile_name(instance.profile), instance.start});
    }
    std::set<std::pair<std::string, int>> reused;  // current GIs a new instance can take over
    if (now != nullptr) {
      std::set<size_t> kept_positions(kept_source[g].begin(), kept_source[g].end());
      for (size_t i = 0; i < now->instances.size(); ++i) {
        if (kept_positions.count(i)) {
          ++result.kept_instances;
          continue;
        }
        const CurrentInstance& instance = now->instances[i];
        const std::string reason = stop_reason.count({g, i}) ? stop_reason[{g, i}] : "re-planned";
        if (!instance.workload.empty()) {
          drains.push_back({StepKind::kDrain, node, index, instance.profile, instance.start,
                            instance.workload, reason});
          ++result.stopped_instances;
        }
        const std::pair<std::string, int> gi{instance.profile, instance.start};
        if (target_new.count(gi) && !reused.count(gi)) {
          reused.insert(gi);  // the GI stays; only the workload on it changes
          continue;
        }
        if (instance.profile != kWholeName) {
          destroys.push_back(
              {StepKind::kDestroy, node, index, instance.profile, instance.start, "",
               instance.workload.empty() ? "idle, not in the target layout" : reason});
        }
      }
      const bool target_mig = target.mig_enabled;
      if (now->mig_enabled && !target_mig && target.used) {
        mig_off.push_back({StepKind::kDisableMig, node, index, "", 0, "",
                           "the target runs a whole-GPU workload here"});
      }
      if (!now->mig_enabled && target_mig) {
        mig_on.push_back(
            {StepKind::kEnableMig, node, index, "", 0, "", "the target layout uses MIG here"});
      }
    } else if (target.mig_enabled) {
      mig_on.push_back(
          {StepKind::kEnableMig, node, index, "", 0, "", "the target layout uses MIG here"});
    }
    for (const PlannedInstance& instance : target.instances) {
      if (instance.kept) continue;
      const std::string name = profile_name(instance.profile);
      const std::string& workload =
          workloads.workloads[static_cast<size_t>(instance.workload)].name;
      if (instance.profile != kWholeGpu && !reused.count({name, instance.start})) {
        creates.push_back(
            {StepKind::kCreate, node, index, name, instance.start, workload, "for " + workload});
        ++result.created_instances;
      }
      starts.push_back({StepKind::kStart, node, index, name, instance.start, workload,
                        disrupted.count(workload) ? "restart after the re-layout"
                                                  : "new instance for the new demand"});
    }
  }
  for (auto* list : {&drains, &destroys, &mig_off, &mig_on, &creates, &starts}) {
    result.steps.insert(result.steps.end(), list->begin(), list->end());
  }
  result.disrupted.assign(disrupted.begin(), disrupted.end());
  return result;
}

}  // namespace gpuslice::plan
