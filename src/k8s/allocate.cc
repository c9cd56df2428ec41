#include "gpuslice/k8s/allocate.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/place/engine.h"
#include "gpuslice/place/policy.h"

namespace gpuslice::k8s {
namespace {

enum class Kind { kWhole, kMig, kShare };

absl::StatusOr<Kind> KindOf(std::string_view resource) {
  if (resource == kWholeGpuResource) return Kind::kWhole;
  if (resource == kShareResource) return Kind::kShare;
  if (resource.starts_with(kMigResourcePrefix)) return Kind::kMig;
  return absl::InvalidArgumentError(
      absl::StrCat("resource '", std::string(resource), "' is not one gpuslice offers"));
}

std::string Device(const AllocateOptions& options, const std::string& name) {
  return absl::StrCat(options.dev_root, "/", name);
}

void AddNode(ContainerAllocation& out, const AllocateOptions& options, const std::string& name) {
  const std::string path = Device(options, name);
  for (const DeviceNode& node : out.devices) {
    if (node.host_path == path) return;
  }
  out.devices.push_back({absl::StrCat("/dev/", name), path, "rw"});
}

int Minor(const NodeGpu& gpu) { return gpu.device_minor >= 0 ? gpu.device_minor : gpu.index; }

}  // namespace

absl::StatusOr<ContainerAllocation> AllocateContainer(const NodeSnapshot& node,
                                                      std::string_view resource,
                                                      const std::vector<std::string>& ids,
                                                      const AllocateOptions& options) {
  absl::StatusOr<Kind> kind = KindOf(resource);
  if (!kind.ok()) return kind.status();
  if (ids.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("an allocation of ", std::string(resource), " with no devices"));
  }
  const std::string name(resource);
  ContainerAllocation out;
  std::vector<std::string> visible;
  std::vector<const NodeGpu*> gpus;
  std::set<int> units;
  const NodeGpu* share_gpu = nullptr;
  for (const std::string& id : ids) {
    absl::StatusOr<DeviceLocation> where = Locate(node, id);
    if (!where.ok()) return where.status();
    const NodeGpu& gpu = *where->gpu;
    switch (*kind) {
      case Kind::kWhole:
        if (where->mig != nullptr || where->unit >= 0 || gpu.mig_enabled ||
            options.sharing.Shares(gpu)) {
          return absl::InvalidArgumentError(
              absl::StrCat("device '", id, "' is not a whole GPU (", name, ")"));
        }
        visible.push_back(gpu.uuid);
        break;
      case Kind::kMig:
        if (where->mig == nullptr || MigResourceName(where->mig->profile) != name) {
          return absl::InvalidArgumentError(
              absl::StrCat("device '", id, "' is not a MIG device of ", name));
        }
        visible.push_back(where->mig->uuid);
        break;
      case Kind::kShare:
        if (where->unit < 0 || !options.sharing.Shares(gpu)) {
          return absl::InvalidArgumentError(
              absl::StrCat("device '", id, "' is not a share unit of a shared GPU"));
        }
        if (where->unit >= options.sharing.units) {
          return absl::InvalidArgumentError(absl::StrCat("device '", id, "': unit ", where->unit,
                                                         " is past the ", options.sharing.units,
                                                         " units of a GPU"));
        }
        if (share_gpu != nullptr && share_gpu != &gpu) {
          return absl::InvalidArgumentError(
              absl::StrCat("share units of two GPUs (", share_gpu->uuid, " and ", gpu.uuid,
                           ") in one container: a share must be on one GPU"));
        }
        if (!units.insert(where->unit).second) {
          return absl::InvalidArgumentError(absl::StrCat("device '", id, "' given twice"));
        }
        share_gpu = &gpu;
        break;
    }
    if (std::find(gpus.begin(), gpus.end(), &gpu) == gpus.end()) gpus.push_back(&gpu);
  }

  if (*kind == Kind::kShare) {
    if (options.interposer_host_path.empty()) {
      return absl::FailedPreconditionError(
          "share units are enforced by the CUDA interposer libgpuslice-cuda.so, which this node "
          "does not have (--interposer); refusing to hand out an unenforced share");
    }
    const auto count = static_cast<std::int64_t>(units.size());
    visible.push_back(share_gpu->uuid);
    out.envs["GPUSLICE_COMPUTE_SHARE_MILLI"] = absl::StrCat(count * 1000 / options.sharing.units);
    out.envs["GPUSLICE_VRAM_LIMIT_MIB"] =
        absl::StrCat(count * share_gpu->memory_mib / options.sharing.units);
    out.envs["GPUSLICE_SLICE"] = absl::StrCat("k8s-", share_gpu->uuid, "-", *units.begin());
    out.envs["GPUSLICE_SHM_DIR"] = options.shm_container_dir;
    out.envs["LD_PRELOAD"] = options.interposer_container_path;
    out.mounts.push_back(
        {options.interposer_container_path, options.interposer_host_path, /*read_only=*/true});
    out.mounts.push_back({options.shm_container_dir, options.shm_host_dir, /*read_only=*/false});
    out.annotations["gpuslice.io/share"] =
        absl::StrCat(count, "/", options.sharing.units, " of ", share_gpu->uuid);
  }
  const std::string joined = absl::StrJoin(visible, ",");
  out.envs["NVIDIA_VISIBLE_DEVICES"] = joined;
  out.envs["CUDA_VISIBLE_DEVICES"] = joined;

  if (options.device_specs) {
    for (const char* common : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}) {
      AddNode(out, options, common);
    }
    for (const NodeGpu* gpu : gpus) AddNode(out, options, absl::StrCat("nvidia", Minor(*gpu)));
    for (const std::string& id : ids) {
      absl::StatusOr<DeviceLocation> where = Locate(node, id);
      if (!where.ok() || where->mig == nullptr) continue;
      for (const int minor : {where->mig->gi_cap_minor, where->mig->ci_cap_minor}) {
        if (minor >= 0) AddNode(out, options, absl::StrCat("nvidia-caps/nvidia-cap", minor));
      }
    }
  }
  return out;
}

namespace {

// The GPUs of one resource grouped into one-node clusters for the engine: the same kind, model
// (and for whole GPUs the same NUMA node), so that one placement never mixes them.
struct Group {
  std::string model;
  int numa = -1;
  std::vector<const NodeGpu*> gpus;
};

// The units (or the MIG device / GPU) an ID stands for, within its group.
struct Slot {
  int group = -1;
  int gpu = -1;  // within the group
  int unit = -1;
  int mig_profile = -1;
  int mig_start = -1;
};

std::vector<std::string> Fallback(const std::vector<std::string>& available,
                                  const std::vector<std::string>& must_include, int size) {
  std::vector<std::string> out = must_include;
  for (const std::string& id : available) {
    if (static_cast<int>(out.size()) >= size) break;
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

int ProfileIndex(const geometry::Shape& shape, const std::string& name) {
  for (int i = 0; i < shape.profile_count(); ++i) {
    if (shape.profile(i).name == name) return i;
  }
  return -1;
}

}  // namespace

std::vector<std::string> PreferredDevices(const NodeSnapshot& node, const SharingConfig& sharing,
                                          std::string_view resource,
                                          const std::vector<std::string>& available,
                                          const std::vector<std::string>& must_include, int size,
                                          std::string_view policy_name) {
  if (size <= static_cast<int>(must_include.size())) return must_include;
  absl::StatusOr<Kind> kind = KindOf(resource);
  if (!kind.ok()) return Fallback(available, must_include, size);
  const std::string name(resource);
  const hw::Catalog& catalog = hw::Catalog::Builtin();

  // The GPUs offering this resource, grouped.
  std::vector<Group> groups;
  std::string mig_profile;  // the GI profile name of a MIG resource
  for (const NodeGpu& gpu : node.gpus) {
    bool offers = false;
    switch (*kind) {
      case Kind::kWhole:
        offers = !gpu.mig_enabled && !sharing.Shares(gpu);
        break;
      case Kind::kShare:
        offers = sharing.Shares(gpu);
        break;
      case Kind::kMig:
        for (const MigDevice& mig : gpu.mig_devices) {
          if (MigResourceName(mig.profile) == name) {
            offers = true;
            mig_profile = mig.profile;
          }
        }
        break;
    }
    if (!offers) continue;
    const int numa = *kind == Kind::kWhole ? gpu.numa_node : -1;
    auto group = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.model == gpu.model && g.numa == numa;
    });
    if (group == groups.end()) group = groups.insert(groups.end(), Group{gpu.model, numa, {}});
    group->gpus.push_back(&gpu);
  }
  if (groups.empty()) return Fallback(available, must_include, size);

  // One cluster node per group.
  std::vector<place::NodeSpec> specs;
  std::vector<std::unique_ptr<geometry::Shape>> shapes;
  for (size_t g = 0; g < groups.size(); ++g) {
    place::NodeSpec spec;
    spec.name = absl::StrCat("group-", g);
    spec.model = groups[g].model.empty() ? "unknown" : groups[g].model;
    spec.cpu_milli = std::numeric_limits<std::int32_t>::max();
    spec.memory_mib = std::numeric_limits<std::int32_t>::max();
    spec.max_pods = std::numeric_limits<std::int32_t>::max();
    spec.gpus = static_cast<int>(groups[g].gpus.size());
    spec.mode = *kind == Kind::kShare ? place::GpuMode::kShared
                : *kind == Kind::kMig ? place::GpuMode::kMig
                                      : place::GpuMode::kWhole;
    if (*kind == Kind::kMig) {
      spec.hardware = catalog.Find(groups[g].model);
      if (spec.hardware == nullptr || !spec.hardware->mig_capable()) {
        return Fallback(available, must_include, size);
      }
      shapes.push_back(std::make_unique<geometry::Shape>(*spec.hardware));
      const int profile = ProfileIndex(*shapes.back(), mig_profile);
      if (profile < 0) return Fallback(available, must_include, size);
      for (const NodeGpu* gpu : groups[g].gpus) {
        place::FixedLayout layout{true, {}};
        for (const MigDevice& mig : gpu->mig_devices) {
          const int index = ProfileIndex(*shapes.back(), mig.profile);
          if (index < 0) return Fallback(available, must_include, size);
          layout.instances.push_back({index, mig.start});
        }
        spec.fixed.push_back(std::move(layout));
      }
    }
    specs.push_back(std::move(spec));
  }
  absl::StatusOr<place::Cluster> cluster = place::Cluster::Create(std::move(specs));
  // The policy weighs choices by the requests it expects; the plugin sees one request at a time,
  // so it expects more of the same kind (a share of this size, this MIG profile, this many GPUs).
  const int wanted = size - static_cast<int>(must_include.size());
  const int milli_per_unit = place::kMilliPerGpu / sharing.units;
  place::Request request;
  request.num_gpu = *kind == Kind::kWhole ? wanted : 1;
  if (*kind == Kind::kShare) {
    request.gpu_milli = std::min(wanted * milli_per_unit, place::kMilliPerGpu);
  }
  if (*kind == Kind::kMig) request.mig_profile = mig_profile;
  place::PolicyOptions policy_options;
  policy_options.typical.push_back({request, 1.0});
  absl::StatusOr<std::unique_ptr<place::Policy>> policy =
      place::MakePolicy(policy_name, policy_options);
  if (!cluster.ok() || !policy.ok()) return Fallback(available, must_include, size);
  place::Engine engine(std::move(*cluster), std::move(*policy));

  // Every device of the resource, and which of them are free.
  std::map<std::string, Slot> slots;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].gpus.size(); ++i) {
      const NodeGpu& gpu = *groups[g].gpus[i];
      const auto group = static_cast<int>(g);
      const auto index = static_cast<int>(i);
      switch (*kind) {
        case Kind::kWhole:
          slots[gpu.uuid] = Slot{group, index, -1, -1, -1};
          break;
        case Kind::kShare:
          for (int unit = 0; unit < sharing.units; ++unit) {
            slots[ShareDeviceId(gpu.uuid, unit)] = Slot{group, index, unit, -1, -1};
          }
          break;
        case Kind::kMig:
          for (const MigDevice& mig : gpu.mig_devices) {
            if (MigResourceName(mig.profile) != name) continue;
            const int profile = ProfileIndex(*shapes[g], mig.profile);
            slots[mig.uuid] = Slot{group, index, -1, profile, mig.start};
          }
          break;
      }
    }
  }
  const std::set<std::string> free(available.begin(), available.end());
  std::set<std::string> chosen(must_include.begin(), must_include.end());
  // Taken = not available, plus the must-include devices (already part of the answer).
  std::map<std::pair<int, int>, int> taken_units;  // (group, gpu) → units taken
  for (const auto& [id, slot] : slots) {
    if (free.contains(id) && !chosen.contains(id)) continue;
    if (*kind == Kind::kShare) {
      ++taken_units[{slot.group, slot.gpu}];
      continue;
    }
    place::Allocation taken;
    taken.node = slot.group;
    if (*kind == Kind::kWhole) {
      taken.request.num_gpu = 1;
      taken.gpus.push_back(place::Cluster::WholeClaim(slot.gpu));
    } else {
      taken.request.num_gpu = 1;
      taken.request.mig_profile = mig_profile;
      place::GpuClaim claim;
      claim.gpu = slot.gpu;
      claim.mig_profile = slot.mig_profile;
      claim.mig_start = slot.mig_start;
      claim.milli = engine.cluster().MigMilli(slot.group, slot.mig_profile);
      taken.gpus.push_back(claim);
    }
    if (!engine.Adopt(std::move(taken)).ok()) return Fallback(available, must_include, size);
  }
  for (const auto& [gpu, count] : taken_units) {
    place::Allocation taken;
    taken.node = gpu.first;
    taken.request.num_gpu = 1;
    taken.request.gpu_milli = count * milli_per_unit;
    place::GpuClaim claim;
    claim.gpu = gpu.second;
    claim.milli = count * milli_per_unit;
    taken.gpus.push_back(claim);
    if (!engine.Adopt(std::move(taken)).ok()) return Fallback(available, must_include, size);
  }

  // What is still wanted, placed by the engine.
  std::vector<std::string> out = must_include;
  if (*kind == Kind::kShare) {
    // The units of a GPU the engine chose, lowest unit numbers first.
    auto take_units = [&](int group, int gpu) {
      std::vector<std::pair<int, std::string>> units;
      for (const auto& [id, slot] : slots) {
        if (slot.group == group && slot.gpu == gpu && free.contains(id) && !chosen.contains(id)) {
          units.emplace_back(slot.unit, id);
        }
      }
      std::sort(units.begin(), units.end());
      for (const auto& [unit, id] : units) {
        if (static_cast<int>(out.size()) >= size) break;
        out.push_back(id);
      }
    };
    if (!must_include.empty()) {
      // Units already chosen for this container sit on one GPU: the rest must join them.
      const auto first = slots.find(must_include.front());
      if (first == slots.end()) return Fallback(available, must_include, size);
      take_units(first->second.group, first->second.gpu);
    } else {
      absl::StatusOr<place::Allocation> placed = engine.Place(request);
      if (!placed.ok()) return Fallback(available, must_include, size);
      take_units(placed->node, placed->gpus.front().gpu);
    }
  } else {
    const int rounds = *kind == Kind::kMig ? wanted : 1;
    for (int round = 0; round < rounds; ++round) {
      absl::StatusOr<place::Allocation> placed = engine.Place(request);
      if (!placed.ok()) return Fallback(available, must_include, size);
      for (const place::GpuClaim& claim : placed->gpus) {
        for (const auto& [id, slot] : slots) {
          if (slot.group != placed->node || slot.gpu != claim.gpu) continue;
          if (!free.contains(id) || chosen.contains(id)) continue;
          if (*kind == Kind::kMig && slot.mig_start != claim.mig_start) continue;
          out.push_back(id);
          chosen.insert(id);
          break;
        }
      }
    }
  }
  if (static_cast<int>(out.size()) != size) return Fallback(available, must_include, size);
  return out;
}

}  // namespace gpuslice::k8s
