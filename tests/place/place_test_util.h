// Shared helpers for the placement tests: node specs, requests and a field-by-field comparison of
// two cluster states.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gpuslice/hw/catalog.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/place/policy.h"

namespace gpuslice::place::testing {

inline const hw::GpuModel* CatalogModel(const std::string& id) {
  const hw::GpuModel* model = hw::Catalog::Builtin().Find(id);
  if (model == nullptr) {
    ADD_FAILURE() << "model '" << id << "' is not in the built-in catalog";
    std::abort();
  }
  return model;
}

inline NodeSpec SharedNode(const std::string& name, int gpus, std::int64_t cpu_milli = 64000,
                           std::int64_t memory_mib = 262144, const std::string& model = "G1") {
  NodeSpec spec;
  spec.name = name;
  spec.model = model;
  spec.cpu_milli = cpu_milli;
  spec.memory_mib = memory_mib;
  spec.gpus = gpus;
  spec.mode = GpuMode::kShared;
  return spec;
}

inline NodeSpec WholeNode(const std::string& name, int gpus, std::int64_t cpu_milli = 64000,
                          std::int64_t memory_mib = 262144, const std::string& model = "G1") {
  NodeSpec spec = SharedNode(name, gpus, cpu_milli, memory_mib, model);
  spec.mode = GpuMode::kWhole;
  return spec;
}

inline NodeSpec MigNode(const std::string& name, int gpus,
                        const std::string& hardware = "A100-80GB", std::int64_t cpu_milli = 64000,
                        std::int64_t memory_mib = 262144) {
  NodeSpec spec = SharedNode(name, gpus, cpu_milli, memory_mib, hardware);
  spec.mode = GpuMode::kMig;
  spec.hardware = CatalogModel(hardware);
  return spec;
}

// Aborts the test binary on a bad spec: every caller passes a valid one.
inline Cluster MakeCluster(std::vector<NodeSpec> nodes) {
  absl::StatusOr<Cluster> cluster = Cluster::Create(std::move(nodes));
  if (!cluster.ok()) {
    ADD_FAILURE() << "Cluster::Create: " << cluster.status();
    std::abort();
  }
  return *std::move(cluster);
}

inline Request CpuOnly(std::int64_t cpu_milli, std::int64_t memory_mib = 0) {
  Request request;
  request.cpu_milli = cpu_milli;
  request.memory_mib = memory_mib;
  return request;
}

inline Request Share(int milli, std::int64_t cpu_milli = 0) {
  Request request;
  request.cpu_milli = cpu_milli;
  request.num_gpu = 1;
  request.gpu_milli = milli;
  return request;
}

inline Request Whole(int gpus, std::int64_t cpu_milli = 0) {
  Request request;
  request.cpu_milli = cpu_milli;
  request.num_gpu = gpus;
  request.gpu_milli = kMilliPerGpu;
  return request;
}

inline Request MigRequest(const std::string& profile, std::int64_t cpu_milli = 0) {
  Request request;
  request.cpu_milli = cpu_milli;
  request.num_gpu = 1;
  request.mig_profile = profile;
  return request;
}

inline Allocation MakeAllocation(int node, const Request& request, std::vector<GpuClaim> claims) {
  Allocation allocation;
  allocation.node = node;
  allocation.request = request;
  allocation.gpus = std::move(claims);
  return allocation;
}

inline GpuClaim ShareClaimOf(int gpu, int milli, std::int64_t vram_mib = 0) {
  GpuClaim claim;
  claim.gpu = gpu;
  claim.milli = milli;
  claim.vram_mib = vram_mib;
  return claim;
}

inline std::unique_ptr<Policy> NewPolicy(const std::string& name,
                                         std::vector<TypicalRequest> typical = {},
                                         std::uint64_t seed = 42) {
  PolicyOptions options;
  options.typical = std::move(typical);
  options.seed = seed;
  absl::StatusOr<std::unique_ptr<Policy>> policy = MakePolicy(name, options);
  if (!policy.ok()) {
    ADD_FAILURE() << "MakePolicy(" << name << "): " << policy.status();
    std::abort();
  }
  return *std::move(policy);
}

inline bool SameOccupancy(const geometry::Occupancy& a, const geometry::Occupancy& b) {
  return a.used == b.used && a.count == b.count && a.jpeg == b.jpeg && a.ofa == b.ofa &&
         a.instances == b.instances && a.all_me == b.all_me && a.media_users == b.media_users &&
         a.four_slice == b.four_slice && a.three_slice == b.three_slice;
}

// Every difference in the allocatable state of two clusters built from the same specs (node
// versions are not compared: they count changes), "" if none.
inline std::string StateDiff(const Cluster& a, const Cluster& b) {
  std::ostringstream out;
  if (a.node_count() != b.node_count()) {
    out << "node count " << a.node_count() << " vs " << b.node_count() << "\n";
    return out.str();
  }
  if (a.allocated_milli() != b.allocated_milli()) {
    out << "allocated_milli " << a.allocated_milli() << " vs " << b.allocated_milli() << "\n";
  }
  if (a.total_gpus() != b.total_gpus()) out << "total_gpus differ\n";
  for (int n = 0; n < a.node_count(); ++n) {
    const std::string where = "node " + a.spec(n).name + ": ";
    if (a.cpu_free(n) != b.cpu_free(n)) {
      out << where << "cpu_free " << a.cpu_free(n) << " vs " << b.cpu_free(n) << "\n";
    }
    if (a.memory_free(n) != b.memory_free(n)) {
      out << where << "memory_free " << a.memory_free(n) << " vs " << b.memory_free(n) << "\n";
    }
    if (a.pods(n) != b.pods(n)) out << where << "pods " << a.pods(n) << " vs " << b.pods(n) << "\n";
    if (a.gpu_request_tags(n) != b.gpu_request_tags(n)) out << where << "tags differ\n";
    const std::vector<GpuState>& ga = a.gpus(n);
    const std::vector<GpuState>& gb = b.gpus(n);
    if (ga.size() != gb.size()) {
      out << where << "GPU count differs\n";
      continue;
    }
    for (size_t g = 0; g < ga.size(); ++g) {
      const std::string gpu = where + "GPU " + std::to_string(g) + ": ";
      if (ga[g].milli_free != gb[g].milli_free) {
        out << gpu << "milli_free " << ga[g].milli_free << " vs " << gb[g].milli_free << "\n";
      }
      if (ga[g].vram_free_mib != gb[g].vram_free_mib) {
        out << gpu << "vram_free_mib " << ga[g].vram_free_mib << " vs " << gb[g].vram_free_mib
            << "\n";
      }
      if (ga[g].holders != gb[g].holders) {
        out << gpu << "holders " << ga[g].holders << " vs " << gb[g].holders << "\n";
      }
      if (ga[g].taken_whole != gb[g].taken_whole) out << gpu << "taken_whole differs\n";
      if (!SameOccupancy(ga[g].occupancy, gb[g].occupancy)) out << gpu << "occupancy differs\n";
    }
  }
  return out.str();
}

}  // namespace gpuslice::place::testing
