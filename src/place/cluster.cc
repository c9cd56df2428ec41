#include "gpuslice/place/cluster.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"

namespace gpuslice::place {
namespace {

// "3g" -> 3; anything else -> 0.
int SlicesOfShortName(std::string_view name) {
  if (name.size() < 2 || name.back() != 'g') return 0;
  int value = 0;
  for (char c : name.substr(0, name.size() - 1)) {
    if (c < '0' || c > '9') return 0;
    value = value * 10 + (c - '0');
  }
  return value;
}

}  // namespace

std::string_view ToString(GpuMode mode) {
  switch (mode) {
    case GpuMode::kWhole:
      return "whole";
    case GpuMode::kShared:
      return "shared";
    case GpuMode::kMig:
      return "mig";
  }
  return "?";
}

absl::Status ValidateRequest(const Request& request) {
  if (request.cpu_milli < 0) return absl::InvalidArgumentError("cpu_milli: must not be negative");
  if (request.memory_mib < 0) {
    return absl::InvalidArgumentError("memory_mib: must not be negative");
  }
  if (request.num_gpu < 0) return absl::InvalidArgumentError("num_gpu: must not be negative");
  if (request.gpu_milli < 0 || request.gpu_milli > kMilliPerGpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_milli: ", request.gpu_milli, " is outside 0..1000"));
  }
  if (request.vram_mib < 0) return absl::InvalidArgumentError("vram_mib: must not be negative");
  if (request.num_gpu == 0 && (request.gpu_milli > 0 || request.vram_mib > 0 ||
                               !request.mig_profile.empty() || !request.mig_class.empty())) {
    return absl::InvalidArgumentError(
        "num_gpu: 0, but a GPU share, VRAM amount or MIG profile is asked");
  }
  if (request.share() && request.num_gpu != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_gpu: ", request.num_gpu,
        " with a partial GPU (gpu_milli, vram_mib or mig_profile): shares are for one GPU"));
  }
  if (request.mig() && (request.gpu_milli > 0 || request.vram_mib > 0)) {
    return absl::InvalidArgumentError(
        "mig_profile: given together with gpu_milli/vram_mib; ask for one or the other");
  }
  if (!request.mig_profile.empty() && !request.mig_class.empty()) {
    return absl::InvalidArgumentError("mig_class: given together with mig_profile; ask for one");
  }
  return absl::OkStatus();
}

absl::StatusOr<Cluster> Cluster::Create(std::vector<NodeSpec> nodes) {
  Cluster cluster;
  std::set<std::string> names;
  std::map<const hw::GpuModel*, std::shared_ptr<const geometry::Shape>> shapes;
  for (NodeSpec& spec : nodes) {
    const std::string where = absl::StrCat("node ", spec.name);
    if (spec.name.empty()) return absl::InvalidArgumentError("node: empty name");
    if (!names.insert(spec.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": duplicate name"));
    }
    if (spec.cpu_milli < 0 || spec.memory_mib < 0 || spec.gpus < 0 || spec.max_pods < 0 ||
        spec.gpu_memory_mib < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": negative capacity"));
    }
    Node node;
    if (spec.mode == GpuMode::kMig && spec.gpus > 0) {
      if (spec.hardware == nullptr || !spec.hardware->mig_capable()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": MIG mode needs a MIG-capable GPU model, got ",
                         spec.hardware == nullptr ? std::string("none") : spec.hardware->id));
      }
      auto& shape = shapes[spec.hardware];
      if (!shape) shape = std::make_shared<const geometry::Shape>(*spec.hardware);
      node.shape = shape;
      if (spec.gpu_memory_mib == 0) spec.gpu_memory_mib = spec.hardware->memory_mib;
    }
    if (!spec.fixed.empty()) {
      if (spec.mode != GpuMode::kMig || static_cast<int>(spec.fixed.size()) != spec.gpus) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": fixed layouts need MIG mode and one entry per GPU"));
      }
      for (size_t g = 0; g < spec.fixed.size(); ++g) {
        geometry::Occupancy occupancy{};
        for (const FixedInstance& instance : spec.fixed[g].instances) {
          if (instance.profile < 0 || instance.profile >= node.shape->profile_count() ||
              !node.shape->CanAdd(occupancy, instance.profile, instance.start, {}).ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat(where, ": GPU ", g, ": fixed instance ", instance.profile, "@",
                             instance.start, " is not a valid placement beside the others"));
          }
          node.shape->Add(occupancy, instance.profile, instance.start);
        }
      }
    }
    node.cpu_free = spec.cpu_milli;
    node.memory_free = spec.memory_mib;
    node.gpus.resize(static_cast<size_t>(spec.gpus));
    for (GpuState& gpu : node.gpus) gpu.vram_free_mib = spec.gpu_memory_mib;
    cluster.total_gpus_ += spec.gpus;
    node.spec = std::move(spec);
    cluster.nodes_.push_back(std::move(node));
  }
  return cluster;
}

bool Cluster::ModelAllowed(int node, const Request& request) const {
  if (request.models.empty()) return true;
  const std::string& model = spec(node).model;
  if (model.empty()) return false;
  return std::find(request.models.begin(), request.models.end(), model) != request.models.end();
}

int Cluster::MigProfileFor(int node, const Request& request) const {
  const geometry::Shape* s = shape(node);
  if (s == nullptr) return -1;
  return MigProfileFor(*s, request);
}

int Cluster::MigProfileFor(const geometry::Shape& shape, const Request& request) {
  const geometry::Shape* s = &shape;
  const hw::MigSpec& mig = s->mig();
  if (request.mig()) {
    std::string_view name = request.mig_profile;
    if (!request.mig_class.empty()) {
      auto it = request.mig_class.find(shape.model().id);
      if (it == request.mig_class.end()) return -1;
      name = it->second;
    }
    if (const hw::GiProfile* exact = mig.FindProfile(name)) return mig.IndexOf(*exact);
    const int slices = SlicesOfShortName(name);
    if (slices == 0) return -1;
    int best = -1;
    for (int p = 0; p < s->profile_count(); ++p) {
      const hw::GiProfile& profile = s->profile(p);
      if (profile.compute_slices != slices || profile.variant != hw::MediaVariant::kStandard) {
        continue;
      }
      if (best < 0 || profile.memory_mib < s->profile(best).memory_mib) best = p;
    }
    return best;
  }
  // A share: the smallest standard profile with enough compute and memory.
  const int milli = request.milli();
  int best = -1;
  for (int p = 0; p < s->profile_count(); ++p) {
    const hw::GiProfile& profile = s->profile(p);
    if (profile.variant != hw::MediaVariant::kStandard) continue;
    if (profile.compute_slices * kMilliPerGpu < milli * mig.compute_slices) continue;
    if (profile.memory_mib < request.vram_mib) continue;
    if (best < 0) {
      best = p;
      continue;
    }
    const hw::GiProfile& current = s->profile(best);
    if (std::pair(profile.compute_slices, profile.memory_mib) <
        std::pair(current.compute_slices, current.memory_mib)) {
      best = p;
    }
  }
  return best;
}

int Cluster::MigMilli(int node, int profile) const {
  const geometry::Shape* s = shape(node);
  return s->profile(profile).compute_slices * kMilliPerGpu / s->mig().compute_slices;
}

int Cluster::FreeMilli(int node, int gpu) const {
  const Node& n = at(node);
  const GpuState& state = n.gpus[static_cast<size_t>(gpu)];
  if (state.taken_whole) return 0;
  switch (n.spec.mode) {
    case GpuMode::kShared:
      return state.milli_free;
    case GpuMode::kWhole:
      return state.taken_whole ? 0 : kMilliPerGpu;
    case GpuMode::kMig:
      return MigFreeMilli(*n.shape, state.occupancy);
  }
  return 0;
}

int Cluster::MigFreeMilli(const geometry::Shape& shape, const geometry::Occupancy& occupancy) {
  const int total = shape.mig().compute_slices;
  int used = 0;
  for (int p = 0; p < shape.profile_count(); ++p) {
    used += occupancy.count[static_cast<size_t>(p)] * shape.compute_slices(p);
  }
  return std::max(0, total - used) * kMilliPerGpu / total;
}

bool Cluster::GpuFullyFree(int node, int gpu) const {
  const Node& n = at(node);
  const GpuState& state = n.gpus[static_cast<size_t>(gpu)];
  return state.holders == 0 && !state.taken_whole && !HasFixedLayout(node, gpu);
}

bool Cluster::HasFixedLayout(int node, int gpu) const {
  const Node& n = at(node);
  return !n.spec.fixed.empty() && n.spec.fixed[static_cast<size_t>(gpu)].fixed;
}

namespace {

// The first instance of `profile` in `layout` that is free on `occupancy`, or -1.
int FreeFixedStart(const geometry::Shape& shape, const FixedLayout& layout,
                   const geometry::Occupancy& occupancy, int profile) {
  for (const FixedInstance& instance : layout.instances) {
    if (instance.profile == profile && shape.CanAdd(occupancy, profile, instance.start, {}).ok()) {
      return instance.start;
    }
  }
  return -1;
}

}  // namespace

bool Cluster::ShareFitsGpu(int node, int gpu, const Request& request, int* mig_profile) const {
  const Node& n = at(node);
  const GpuState& state = n.gpus[static_cast<size_t>(gpu)];
  if (state.taken_whole) return false;
  switch (n.spec.mode) {
    case GpuMode::kWhole:
      return false;
    case GpuMode::kShared:
      if (request.mig()) return false;
      return state.milli_free >= request.milli() &&
             (request.vram_mib == 0 || n.spec.gpu_memory_mib == 0 ||
              state.vram_free_mib >= request.vram_mib);
    case GpuMode::kMig: {
      const int profile = MigProfileFor(node, request);
      if (profile < 0) return false;
      if (mig_profile != nullptr) *mig_profile = profile;
      if (HasFixedLayout(node, gpu)) {
        return FreeFixedStart(*n.shape, n.spec.fixed[static_cast<size_t>(gpu)], state.occupancy,
                              profile) >= 0;
      }
      return n.shape->FreeCount(state.occupancy, profile) > 0;
    }
  }
  return false;
}

std::optional<GpuClaim> Cluster::ShareClaim(int node, int gpu, const Request& request) const {
  int profile = -1;
  if (!ShareFitsGpu(node, gpu, request, &profile)) return std::nullopt;
  const Node& n = at(node);
  GpuClaim claim;
  claim.gpu = gpu;
  if (n.spec.mode == GpuMode::kShared) {
    claim.milli = request.milli();
    claim.vram_mib = request.vram_mib;
    return claim;
  }
  const geometry::Occupancy& occupancy = n.gpus[static_cast<size_t>(gpu)].occupancy;
  const int best_start =
      HasFixedLayout(node, gpu)
          ? FreeFixedStart(*n.shape, n.spec.fixed[static_cast<size_t>(gpu)], occupancy, profile)
          : BestMigStart(*n.shape, occupancy, profile);
  if (best_start < 0) return std::nullopt;
  claim.mig_profile = profile;
  claim.mig_start = best_start;
  claim.milli = MigMilli(node, profile);
  return claim;
}

int Cluster::BestMigStart(const geometry::Shape& shape, const geometry::Occupancy& occupancy,
                          int profile) {
  // Among the free starts, the one after which the most instances of every profile still fit
  // (sum over profiles of FreeCount); ties to the lowest start.
  int best_start = -1;
  int best_room = -1;
  for (int start = 0; start < shape.units(); ++start) {
    if (!shape.CanAdd(occupancy, profile, start, {}).ok()) continue;
    geometry::Occupancy after = occupancy;
    shape.Add(after, profile, start);
    int room = 0;
    for (int p = 0; p < shape.profile_count(); ++p) room += shape.FreeCount(after, p);
    if (room > best_room) {
      best_room = room;
      best_start = start;
    }
  }
  return best_start;
}

bool Cluster::Fits(int node, const Request& request) const {
  const Node& n = at(node);
  if (n.pods + 1 > n.spec.max_pods) return false;
  if (n.cpu_free < request.cpu_milli || n.memory_free < request.memory_mib) return false;
  if (request.cpu_only()) return true;
  if (n.spec.gpus == 0 || !ModelAllowed(node, request)) return false;
  if (request.whole()) {
    int free = 0;
    for (int g = 0; g < n.spec.gpus; ++g) free += GpuFullyFree(node, g) ? 1 : 0;
    return free >= request.num_gpu;
  }
  for (int g = 0; g < n.spec.gpus; ++g) {
    if (ShareFitsGpu(node, g, request)) return true;
  }
  return false;
}

std::string Cluster::WhyNot(int node, const Request& request) const {
  const Node& n = at(node);
  if (n.pods + 1 > n.spec.max_pods) return absl::StrCat("pods: ", n.pods, " of ", n.spec.max_pods);
  if (n.cpu_free < request.cpu_milli) {
    return absl::StrCat("cpu: ", n.cpu_free, "m free, ", request.cpu_milli, "m asked");
  }
  if (n.memory_free < request.memory_mib) {
    return absl::StrCat("memory: ", n.memory_free, " MiB free, ", request.memory_mib, " MiB asked");
  }
  if (request.cpu_only()) return "";
  if (n.spec.gpus == 0) return "no GPUs";
  if (!ModelAllowed(node, request)) {
    return absl::StrCat("GPU model ", n.spec.model, " not among those allowed");
  }
  if (request.whole()) {
    int free = 0;
    for (int g = 0; g < n.spec.gpus; ++g) free += GpuFullyFree(node, g) ? 1 : 0;
    if (free < request.num_gpu) {
      return absl::StrCat("GPUs: ", free, " completely free, ", request.num_gpu, " asked");
    }
    return "";
  }
  if (n.spec.mode == GpuMode::kMig && MigProfileFor(node, request) < 0) {
    return absl::StrCat("no MIG profile of ", n.spec.hardware->id, " holds the request");
  }
  if (n.spec.mode == GpuMode::kWhole) return "GPUs are handed out whole only";
  for (int g = 0; g < n.spec.gpus; ++g) {
    if (ShareFitsGpu(node, g, request)) return "";
  }
  if (n.spec.mode == GpuMode::kMig && !n.spec.fixed.empty()) {
    return absl::StrCat("no free ", n.shape->profile(MigProfileFor(node, request)).name,
                        " instance in the GPUs' layouts");
  }
  return "no GPU has room for the share";
}

absl::Status Cluster::CheckClaim(const Node& node, const GpuClaim& claim,
                                 const Request& request) const {
  if (claim.gpu < 0 || claim.gpu >= node.spec.gpus) {
    return absl::InvalidArgumentError(absl::StrCat("claim: no GPU ", claim.gpu));
  }
  const GpuState& state = node.gpus[static_cast<size_t>(claim.gpu)];
  const FixedLayout* fixed =
      node.spec.fixed.empty() || !node.spec.fixed[static_cast<size_t>(claim.gpu)].fixed
          ? nullptr
          : &node.spec.fixed[static_cast<size_t>(claim.gpu)];
  if (claim.whole) {
    if (fixed != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "GPU ", claim.gpu, " of ", node.spec.name, " has a fixed MIG layout; not taken whole"));
    }
    if (state.holders != 0 || state.taken_whole) {
      return absl::FailedPreconditionError(
          absl::StrCat("GPU ", claim.gpu, " of ", node.spec.name, " is not completely free"));
    }
    return absl::OkStatus();
  }
  if (state.taken_whole) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU ", claim.gpu, " of ", node.spec.name, " is taken whole"));
  }
  switch (node.spec.mode) {
    case GpuMode::kWhole:
      return absl::FailedPreconditionError(
          absl::StrCat("GPU ", claim.gpu, " of ", node.spec.name, " is handed out whole only"));
    case GpuMode::kShared:
      if (claim.milli <= 0 || claim.milli > state.milli_free ||
          (node.spec.gpu_memory_mib > 0 && claim.vram_mib > state.vram_free_mib)) {
        return absl::FailedPreconditionError(
            absl::StrCat("GPU ", claim.gpu, " of ", node.spec.name, ": ", state.milli_free,
                         " milli and ", state.vram_free_mib, " MiB free, claim ", claim.milli,
                         " milli and ", claim.vram_mib, " MiB"));
      }
      return absl::OkStatus();
    case GpuMode::kMig:
      if (claim.mig_profile < 0 || claim.mig_profile >= node.shape->profile_count() ||
          !node.shape->CanAdd(state.occupancy, claim.mig_profile, claim.mig_start, {}).ok()) {
        return absl::FailedPreconditionError(absl::StrCat("GPU ", claim.gpu, " of ", node.spec.name,
                                                          ": MIG instance ", claim.mig_profile, "@",
                                                          claim.mig_start, " cannot be placed"));
      }
      if (fixed != nullptr &&
          std::find(fixed->instances.begin(), fixed->instances.end(),
                    FixedInstance{claim.mig_profile, claim.mig_start}) == fixed->instances.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("GPU ", claim.gpu, " of ", node.spec.name, ": MIG instance ",
                         claim.mig_profile, "@", claim.mig_start, " is not in its fixed layout"));
      }
      (void)request;
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Cluster::Apply(const Allocation& allocation) {
  if (allocation.node < 0 || allocation.node >= node_count()) {
    return absl::InvalidArgumentError(absl::StrCat("allocation: no node ", allocation.node));
  }
  Node& n = nodes_[static_cast<size_t>(allocation.node)];
  const Request& request = allocation.request;
  if (n.pods + 1 > n.spec.max_pods || n.cpu_free < request.cpu_milli ||
      n.memory_free < request.memory_mib) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", n.spec.name, ": ", WhyNot(allocation.node, request)));
  }
  if (static_cast<int>(allocation.gpus.size()) != request.num_gpu) {
    return absl::InvalidArgumentError(absl::StrCat("allocation: ", allocation.gpus.size(),
                                                   " GPU claims for ", request.num_gpu, " GPUs"));
  }
  if (!request.cpu_only() && !ModelAllowed(allocation.node, request)) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", n.spec.name, ": GPU model not allowed"));
  }
  std::set<int> seen;
  for (const GpuClaim& claim : allocation.gpus) {
    if (!seen.insert(claim.gpu).second) {
      return absl::InvalidArgumentError(absl::StrCat("allocation: GPU ", claim.gpu, " twice"));
    }
    if (absl::Status status = CheckClaim(n, claim, request); !status.ok()) return status;
  }
  n.cpu_free -= request.cpu_milli;
  n.memory_free -= request.memory_mib;
  n.pods += 1;
  for (const GpuClaim& claim : allocation.gpus) {
    GpuState& state = n.gpus[static_cast<size_t>(claim.gpu)];
    state.holders += 1;
    if (claim.whole) {
      state.taken_whole = true;
      allocated_milli_ += kMilliPerGpu;
    } else if (n.spec.mode == GpuMode::kMig) {
      n.shape->Add(state.occupancy, claim.mig_profile, claim.mig_start);
      allocated_milli_ += claim.milli;
    } else {
      state.milli_free -= claim.milli;
      state.vram_free_mib -= claim.vram_mib;
      allocated_milli_ += claim.milli;
    }
  }
  CountTag(n, request, +1);
  n.version += 1;
  return absl::OkStatus();
}

void Cluster::CountTag(Node& node, const Request& request, int delta) {
  if (request.cpu_only()) return;
  const int tag = request.whole() ? request.num_gpu : 0;
  auto it = std::lower_bound(node.tags.begin(), node.tags.end(), std::pair(tag, 0),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
  if (it == node.tags.end() || it->first != tag) it = node.tags.insert(it, {tag, 0});
  it->second += delta;
  if (it->second == 0) node.tags.erase(it);
}

absl::Status Cluster::Release(const Allocation& allocation) {
  if (allocation.node < 0 || allocation.node >= node_count()) {
    return absl::InvalidArgumentError(absl::StrCat("release: no node ", allocation.node));
  }
  Node& n = nodes_[static_cast<size_t>(allocation.node)];
  const Request& request = allocation.request;
  if (n.pods == 0 || n.cpu_free + request.cpu_milli > n.spec.cpu_milli ||
      n.memory_free + request.memory_mib > n.spec.memory_mib) {
    return absl::FailedPreconditionError(
        absl::StrCat("release on ", n.spec.name, ": not allocated here"));
  }
  for (const GpuClaim& claim : allocation.gpus) {
    if (claim.gpu < 0 || claim.gpu >= n.spec.gpus) {
      return absl::InvalidArgumentError(absl::StrCat("release: no GPU ", claim.gpu));
    }
    const GpuState& state = n.gpus[static_cast<size_t>(claim.gpu)];
    const bool held =
        claim.whole
            ? state.taken_whole
            : (n.spec.mode == GpuMode::kMig
                   ? (state.occupancy.used & n.shape->MaskOf(claim.mig_profile, claim.mig_start)) ==
                         n.shape->MaskOf(claim.mig_profile, claim.mig_start)
                   : state.milli_free + claim.milli <= kMilliPerGpu);
    if (state.holders == 0 || !held) {
      return absl::FailedPreconditionError(
          absl::StrCat("release on ", n.spec.name, ": GPU ", claim.gpu, " does not hold it"));
    }
  }
  n.cpu_free += request.cpu_milli;
  n.memory_free += request.memory_mib;
  n.pods -= 1;
  for (const GpuClaim& claim : allocation.gpus) {
    GpuState& state = n.gpus[static_cast<size_t>(claim.gpu)];
    state.holders -= 1;
    if (claim.whole) {
      state.taken_whole = false;
      allocated_milli_ -= kMilliPerGpu;
    } else if (n.spec.mode == GpuMode::kMig) {
      n.shape->Remove(state.occupancy, claim.mig_profile, claim.mig_start);
      allocated_milli_ -= claim.milli;
    } else {
      state.milli_free += claim.milli;
      state.vram_free_mib += claim.vram_mib;
      allocated_milli_ -= claim.milli;
    }
  }
  CountTag(n, request, -1);
  n.version += 1;
  return absl::OkStatus();
}

}  // namespace gpuslice::place
