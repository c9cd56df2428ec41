// gpuslice/place/cluster.h
//
// The state the online placement engine decides on: nodes with CPU, memory and GPUs, and what is
// allocated on each. A GPU is in one of three modes:
//   * whole  — handed out only as a whole device (MIG disabled, no sharing);
//   * shared — handed out in shares: milli-GPU of compute (1000 = the whole GPU) and MiB of VRAM,
//              enforced by the software slicer (issue 8) or, in a trace replay, just accounted;
//   * MIG    — handed out as GPU instances at exact placements, with the occupancy rules of the
//              layout engine (gpuslice/geometry/shape.h).
//
// A Request asks for CPU (milli-cores), memory (MiB) and zero or more GPUs of one kind:
//   * num_gpu == 0: CPU only;
//   * gpu_milli == 1000 (the default when num_gpu > 0): num_gpu whole, completely free GPUs (on a
//     MIG GPU: one with no instance, which is then taken whole);
//   * gpu_milli < 1000 and/or vram_mib: a share of one GPU (num_gpu must be 1). On a MIG GPU the
//     share is rounded up to the smallest GPU-instance profile with at least that fraction of the
//     compute slices and that much memory;
//   * mig_profile: one GPU instance of that profile ("3g.40gb", or "3g" = the smallest 3-slice
//     profile of the node's model), only on MIG GPUs;
//   * mig_class: one GPU instance of a class (small/medium/...) that the caller resolved to a
//     profile per GPU model (catalog id → profile name, as for mig_profile); only MIG GPUs of the
//     models listed qualify.
//   `models` restricts the GPU models (node labels) the GPUs may come from; empty = any.
//
// A MIG GPU may have a fixed layout (NodeSpec::fixed, set when an admin applies a layout to the
// machine): then only its listed instances are handed out, each at its own placement, and the GPU
// is never taken whole. A MIG GPU without one is partitioned on demand (any free placement).
//
// Everything here is pure and deterministic. The Cluster checks every claim it is given, so a
// policy bug can never overcommit a resource (Apply fails instead).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::place {

inline constexpr int kMilliPerGpu = 1000;

enum class GpuMode : std::uint8_t { kWhole, kShared, kMig };
std::string_view ToString(GpuMode mode);

// One GPU instance of a fixed layout: a profile index of the node's Shape and its start.
struct FixedInstance {
  int profile = 0;
  int start = 0;
  friend bool operator==(const FixedInstance&, const FixedInstance&) = default;
};

// The fixed layout of one MIG GPU; `fixed` false = partitioned on demand.
struct FixedLayout {
  bool fixed = false;
  std::vector<FixedInstance> instances;
  friend bool operator==(const FixedLayout&, const FixedLayout&) = default;
};

// One node as configured.
struct NodeSpec {
  std::string name;
  std::string model;  // GPU model label used by Request::models (e.g. "A100-80GB" or "G2")
  std::int64_t cpu_milli = 0;
  std::int64_t memory_mib = 0;
  int max_pods = 1001;
  int gpus = 0;
  GpuMode mode = GpuMode::kShared;
  std::int64_t gpu_memory_mib = 0;         // VRAM per GPU; 0 = not accounted
  const hw::GpuModel* hardware = nullptr;  // REQUIRED for kMig (a MIG-capable catalog model)
  // kMig only: empty, or one entry per GPU (instances valid and not overlapping).
  std::vector<FixedLayout> fixed;
};

struct Request {
  std::int64_t cpu_milli = 0;
  std::int64_t memory_mib = 0;
  int num_gpu = 0;
  int gpu_milli = 0;          // per GPU; 0 with num_gpu > 0 means whole GPUs
  std::int64_t vram_mib = 0;  // per GPU, for shares; 0 = no VRAM amount asked
  std::string mig_profile;
  std::map<std::string, std::string> mig_class;  // GPU model id → profile
  std::vector<std::string> models;

  bool mig() const { return num_gpu > 0 && (!mig_profile.empty() || !mig_class.empty()); }

  bool cpu_only() const { return num_gpu == 0; }
  bool whole() const { return num_gpu > 0 && !mig() && milli() >= kMilliPerGpu; }
  bool share() const { return num_gpu > 0 && !whole(); }
  int milli() const { return num_gpu == 0 ? 0 : (gpu_milli <= 0 ? kMilliPerGpu : gpu_milli); }
};

// Checks a request for contradictions (negative amounts, a share over several GPUs, milli above
// 1000, ...). The message names the field.
absl::Status ValidateRequest(const Request& request);

// State of one GPU.
struct GpuState {
  int milli_free = kMilliPerGpu;  // shared: free compute share; whole/MIG: 1000 free, 0 taken
  std::int64_t vram_free_mib = 0;
  int holders = 0;                  // claims on this GPU
  bool taken_whole = false;         // claimed as a whole GPU
  geometry::Occupancy occupancy{};  // MIG mode only
};

// What one request got on one GPU.
struct GpuClaim {
  int gpu = 0;                // index within the node
  int milli = 0;              // compute share taken (1000 for whole GPUs and MIG instances' 7g)
  std::int64_t vram_mib = 0;  // VRAM taken (shared mode)
  int mig_profile = -1;       // MIG: profile index of the node's Shape
  int mig_start = -1;         // MIG: placement start
  bool whole = false;
};

struct Allocation {
  std::uint64_t id = 0;  // set by the Engine: unique among its allocations
  int node = -1;
  std::vector<GpuClaim> gpus;
  Request request;
};

class Cluster {
 public:
  // Fails on a bad spec (duplicate name, negative capacity, MIG without a MIG-capable model).
  static absl::StatusOr<Cluster> Create(std::vector<NodeSpec> nodes);

  int node_count() const { return static_cast<int>(nodes_.size()); }
  const NodeSpec& spec(int node) const { return nodes_[static_cast<size_t>(node)].spec; }
  // The layout engine's view of a MIG node's GPU model, else nullptr.
  const geometry::Shape* shape(int node) const {
    return nodes_[static_cast<size_t>(node)].shape.get();
  }
  std::int64_t cpu_free(int node) const { return at(node).cpu_free; }
  std::int64_t memory_free(int node) const { return at(node).memory_free; }
  int pods(int node) const { return at(node).pods; }
  const std::vector<GpuState>& gpus(int node) const { return at(node).gpus; }
  // Bumped on every change of the node; lets caches know when a node's scores are stale.
  std::uint64_t version(int node) const { return at(node).version; }
  // GPU requests on the node by kind: tag 0 = shares, tag k = k whole GPUs, with their counts
  // (CPU-only requests are not counted). Sorted by tag.
  const std::vector<std::pair<int, int>>& gpu_request_tags(int node) const { return at(node).tags; }
  int total_gpus() const { return total_gpus_; }
  // Allocated GPU milli over the cluster: shares count their milli, whole GPUs 1000, MIG
  // instances their fraction of the compute slices.
  std::int64_t allocated_milli() const { return allocated_milli_; }

  // Whether the request's model restriction admits the node.
  bool ModelAllowed(int node, const Request& request) const;
  // Whether `request` fits on the node at all (CPU, memory, pods, model, GPUs). Cheap.
  bool Fits(int node, const Request& request) const;
  // Why it does not fit, for rejection messages ("cpu: 4000m free, 8000m asked").
  std::string WhyNot(int node, const Request& request) const;

  // GPU-level questions, used by policies to choose GPUs inside a node.
  // Whether a share / MIG request fits on GPU `gpu`; for MIG also the profile it would take.
  bool ShareFitsGpu(int node, int gpu, const Request& request, int* mig_profile = nullptr) const;
  bool GpuFullyFree(int node, int gpu) const;
  // Whether the GPU has a fixed layout (see above).
  bool HasFixedLayout(int node, int gpu) const;
  // The MIG profile a share or MIG request maps to on this node's model (-1: none fits).
  int MigProfileFor(int node, const Request& request) const;
  static int MigProfileFor(const geometry::Shape& shape, const Request& request);
  // The compute fraction (milli) a MIG profile represents: slices / the model's full slices.
  int MigMilli(int node, int profile) const;
  // Free milli of a GPU in any mode: shared = milli_free, whole = 1000 or 0, MIG = compute slices
  // not in any instance, as a fraction of the model's compute slices.
  int FreeMilli(int node, int gpu) const;
  static int MigFreeMilli(const geometry::Shape& shape, const geometry::Occupancy& occupancy);

  // Builds the claim for a share request on `gpu` (MIG: the lowest free start of its profile
  // that keeps the most capacity free for other profiles; on a fixed layout, the first free
  // instance of the profile).
  std::optional<GpuClaim> ShareClaim(int node, int gpu, const Request& request) const;
  // The start ShareClaim uses for `profile` on a MIG GPU: the one that leaves the most room for
  // every profile (sum of FreeCount), lowest on ties; -1 if none is free.
  static int BestMigStart(const geometry::Shape& shape, const geometry::Occupancy& occupancy,
                          int profile);
  static GpuClaim WholeClaim(int gpu) {
    GpuClaim claim;
    claim.gpu = gpu;
    claim.milli = kMilliPerGpu;
    claim.whole = true;
    return claim;
  }

  // Commits an allocation after checking every part of it; on failure nothing changes.
  absl::Status Apply(const Allocation& allocation);
  // Undoes an allocation previously applied.
  absl::Status Release(const Allocation& allocation);

 private:
  struct Node {
    NodeSpec spec;
    std::shared_ptr<const geometry::Shape> shape;  // MIG nodes
    std::int64_t cpu_free = 0;
    std::int64_t memory_free = 0;
    int pods = 0;
    std::vector<GpuState> gpus;
    std::vector<std::pair<int, int>> tags;
    std::uint64_t version = 0;
  };
  static void CountTag(Node& node, const Request& request, int delta);
  const Node& at(int node) const { return nodes_[static_cast<size_t>(node)]; }
  absl::Status CheckClaim(const Node& node, const GpuClaim& claim, const Request& request) const;

  std::vector<Node> nodes_;
  int total_gpus_ = 0;
  std::int64_t allocated_milli_ = 0;
};

}  // namespace gpuslice::place
