#include "fragmentation.h"

#include "absl/container/inlined_vector.h"

namespace gpuslice::place::internal {

void Fragmentation::SetTypical(std::vector<TypicalRequest> typical) {
  typical_ = std::move(typical);
  cache_.clear();
  mig_profiles_.clear();
}

GpuAfter Fragmentation::Apply(const Cluster& cluster, int node, const GpuClaim& claim) {
  const GpuState& state = cluster.gpus(node)[static_cast<size_t>(claim.gpu)];
  GpuAfter after;
  after.gpu = claim.gpu;
  after.occupancy = state.occupancy;
  if (claim.whole) {
    after.taken_whole = true;
    after.free_milli = 0;
    return after;
  }
  if (claim.mig_profile >= 0) {
    const geometry::Shape& shape = *cluster.shape(node);
    shape.Add(after.occupancy, claim.mig_profile, claim.mig_start);
    after.free_milli = Cluster::MigFreeMilli(shape, after.occupancy);
    return after;
  }
  after.free_milli = state.milli_free - claim.milli;
  return after;
}

int Fragmentation::MigProfile(const Cluster& cluster, int node, size_t t) const {
  const geometry::Shape* shape = cluster.shape(node);
  std::vector<int>& profiles = mig_profiles_[shape];
  if (profiles.empty()) {
    profiles.resize(typical_.size());
    for (size_t i = 0; i < typical_.size(); ++i) {
      profiles[i] = cluster.MigProfileFor(node, typical_[i].request);
    }
  }
  return profiles[t];
}

bool Fragmentation::Hosts(const Cluster& cluster, int node, size_t t, const GpuAfter& gpu) const {
  const Request& request = typical_[t].request;
  if (gpu.taken_whole) return false;
  if (request.whole()) return gpu.fully_free;
  switch (cluster.spec(node).mode) {
    case GpuMode::kWhole:
      return false;
    case GpuMode::kShared:
      return gpu.free_milli >= request.milli();
    case GpuMode::kMig: {
      const int profile = MigProfile(cluster, node, t);
      return profile >= 0 && cluster.shape(node)->FreeCount(gpu.occupancy, profile) > 0;
    }
  }
  return false;
}

namespace {

GpuAfter Current(const Cluster& cluster, int node, int gpu) {
  const GpuState& state = cluster.gpus(node)[static_cast<size_t>(gpu)];
  GpuAfter view;
  view.gpu = gpu;
  view.free_milli = cluster.FreeMilli(node, gpu);
  view.fully_free = cluster.GpuFullyFree(node, gpu);
  view.taken_whole = state.taken_whole;
  view.occupancy = state.occupancy;
  return view;
}

}  // namespace

const Fragmentation::NodeFrag& Fragmentation::Of(const Cluster& cluster, int node) const {
  if (cache_.size() != static_cast<size_t>(cluster.node_count())) {
    cache_.assign(static_cast<size_t>(cluster.node_count()), NodeFrag{});
  }
  NodeFrag& frag = cache_[static_cast<size_t>(node)];
  if (frag.version == cluster.version(node) && frag.fit_count.size() == typical_.size()) {
    return frag;
  }
  frag.version = cluster.version(node);
  frag.fit_count.assign(typical_.size(), 0);
  frag.nofit_sum.assign(typical_.size(), 0);
  frag.idle = 0;
  const int gpus = cluster.spec(node).gpus;
  for (int g = 0; g < gpus; ++g) {
    const GpuAfter view = Current(cluster, node, g);
    frag.idle += view.free_milli;
    for (size_t t = 0; t < typical_.size(); ++t) {
      if (typical_[t].request.cpu_only()) continue;
      if (Hosts(cluster, node, t, view)) {
        frag.fit_count[t] += 1;
      } else {
        frag.nofit_sum[t] += view.free_milli;
      }
    }
  }
  frag.total = After(cluster, node, 0, {});
  return frag;
}

double Fragmentation::After(const Cluster& cluster, int node, std::int64_t cpu,
                            std::span<const GpuAfter> changes) const {
  const NodeFrag& base = Of(cluster, node);
  if (cluster.spec(node).gpus == 0) return 0;
  const std::int64_t cpu_free = cluster.cpu_free(node) - cpu;
  std::int64_t idle = base.idle;
  for (const GpuAfter& change : changes) {
    idle += change.free_milli - cluster.FreeMilli(node, change.gpu);
  }
  absl::InlinedVector<GpuAfter, 8> befores;
  for (const GpuAfter& change : changes) befores.push_back(Current(cluster, node, change.gpu));
  double total = 0;
  for (size_t t = 0; t < typical_.size(); ++t) {
    const TypicalRequest& typical = typical_[t];
    const Request& request = typical.request;
    double frag = static_cast<double>(idle);
    if (!request.cpu_only() && cluster.ModelAllowed(node, request) &&
        cpu_free >= request.cpu_milli) {
      int fit = base.fit_count[t];
      std::int64_t nofit = base.nofit_sum[t];
      for (size_t c = 0; c < changes.size(); ++c) {
        const GpuAfter& before = befores[c];
        const GpuAfter& change = changes[c];
        if (Hosts(cluster, node, t, before)) {
          fit -= 1;
        } else {
          nofit -= before.free_milli;
        }
        if (Hosts(cluster, node, t, change)) {
          fit += 1;
        } else {
          nofit += change.free_milli;
        }
      }
      if (fit >= request.num_gpu) frag = static_cast<double>(nofit);
    }
    total += typical.weight * frag;
  }
  return total;
}

}  // namespace gpuslice::place::internal
