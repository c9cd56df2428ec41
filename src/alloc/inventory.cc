#include "gpuslice/alloc/inventory.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace gpuslice::alloc {

bool HandedOutAsMig(const device::GpuInfo& gpu, bool mig_if_capable) {
  return gpu.model->mig_capable() &&
         (gpu.mig_current == device::MigMode::kEnabled || mig_if_capable);
}

std::string NodeNameFor(const std::string& host, const device::GpuInfo& gpu, bool mig_if_capable) {
  return absl::StrCat(host, "/", gpu.model->id, HandedOutAsMig(gpu, mig_if_capable) ? "-mig" : "");
}

absl::StatusOr<place::Cluster> InventoryFromGpus(const std::string& host,
                                                 const std::vector<device::GpuInfo>& gpus,
                                                 std::int64_t cpu_milli, std::int64_t memory_mib,
                                                 bool mig_if_capable,
                                                 const std::map<int, place::FixedLayout>* fixed) {
  if (gpus.empty()) return absl::FailedPreconditionError("no GPUs to hand out");
  // (model id, MIG) -> count, in first-seen order.
  std::vector<std::pair<std::pair<std::string, bool>, int>> groups;
  std::map<std::pair<std::string, bool>, std::vector<place::FixedLayout>> layouts;
  bool any_fixed = false;
  std::map<std::pair<std::string, bool>, std::string> names;
  std::map<std::string, const hw::GpuModel*> models;
  for (const device::GpuInfo& gpu : gpus) {
    if (gpu.model == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "GPU ", gpu.index, " (", gpu.name, ") is not in the catalog; add it with --catalog"));
    }
    const bool mig = HandedOutAsMig(gpu, mig_if_capable);
    const std::pair<std::string, bool> key{gpu.model->id, mig};
    models[gpu.model->id] = gpu.model;
    place::FixedLayout layout;
    if (mig && fixed != nullptr) {
      if (auto it = fixed->find(gpu.index); it != fixed->end()) layout = it->second;
    }
    any_fixed = any_fixed || layout.fixed;
    layouts[key].push_back(std::move(layout));
    names[key] = NodeNameFor(host, gpu, mig_if_capable);
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& group) { return group.first == key; });
    if (it == groups.end()) {
      groups.push_back({key, 1});
    } else {
      ++it->second;
    }
  }
  const auto total = static_cast<std::int64_t>(gpus.size());
  std::vector<place::NodeSpec> nodes;
  for (const auto& [key, count] : groups) {
    place::NodeSpec node;
    node.name = names[key];
    node.model = key.first;
    node.gpus = count;
    node.cpu_milli = cpu_milli * count / total;
    node.memory_mib = memory_mib * count / total;
    node.mode = key.second ? place::GpuMode::kMig : place::GpuMode::kShared;
    node.hardware = models[key.first];
    node.gpu_memory_mib = models[key.first]->memory_mib;
    if (any_fixed && key.second) node.fixed = layouts[key];
    nodes.push_back(node);
  }
  return place::Cluster::Create(std::move(nodes));
}

}  // namespace gpuslice::alloc
