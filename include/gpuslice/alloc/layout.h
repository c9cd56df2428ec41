// gpuslice/alloc/layout.h
//
// Fixed MIG layouts that an admin applies to a machine through the allocation service (a
// mig-parted config, as `gpuslice plan -o` writes it or as an operator keeps it). The service
// resolves the config for the machine's reported GPUs into exact placements, checks it against
// the leases held there, and from then on hands out only the layout's instances on those GPUs;
// the machine's agent makes the GPUs match with the reconciler (gpuslice/agent/apply.h).
//
// Resolution, per GPU the config selects (mig-parted's rules: device filter and index):
//   * MIG off: the GPU is handed out whole. Leases with MIG instances on it, or holding it whole
//     while it is in MIG mode now, stand in the way.
//   * MIG on: each GPU instance gets an exact start: the config's gpuslice-placements where given;
//     an instance a lease holds keeps the lease's start when the layout has that profile there or
//     unplaced; the rest are placed by the layout engine around them. A lease whose instance is not
//     in the layout (another profile or start, or the GPU held whole) stands in the way, as do
//     leases whose starts leave the rest no room when moving them would.
//   * Split compute instances ("1c.3g.40gb") are refused: the service hands out whole GPU
//     instances, one compute instance each.
// GPUs no entry selects keep what they had (not part of the layout).
//
// Everything here is pure and deterministic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/spec/mig_parted.h"
#include "nlohmann/json.hpp"

namespace gpuslice::alloc {

// The desired state of one GPU of the machine.
struct GpuLayout {
  int index = 0;      // NVML index on the machine
  std::string model;  // catalog id
  bool mig = false;
  std::vector<place::FixedInstance> instances;  // MIG only; profile indices of the model, by start
  friend bool operator==(const GpuLayout&, const GpuLayout&) = default;
};

// A machine's layout and what its agent last said about it.
struct NodeLayout {
  std::string host;
  std::int64_t generation = 0;  // 1, 2, ... per host, each time an admin sets one
  std::string source;           // the file and config it came from
  std::string set_by;
  std::int64_t set_at = 0;
  std::vector<GpuLayout> gpus;           // the GPUs it covers, by index
  std::int64_t applied_generation = 0;   // the newest generation the agent has carried out
  std::int64_t reported_generation = 0;  // the generation the agent's last report was about
  std::string agent_message;  // why the agent could not carry out reported_generation; "" = it did
  std::int64_t reported_at = 0;
  bool applied() const { return applied_generation == generation && agent_message.empty(); }
};

// An instance (or whole GPU) a lease holds on the machine.
struct HeldDevice {
  std::int64_t lease = 0;
  int gpu_index = 0;
  bool whole = false;
  int profile = -1;  // MIG: profile index of the GPU's model
  int start = -1;
};

// A lease that stands in the way of a layout, and why.
struct LayoutConflict {
  std::int64_t lease = 0;
  int gpu_index = 0;
  std::string why;
};

struct ResolvedLayout {
  std::vector<GpuLayout> gpus;
  std::vector<LayoutConflict> conflicts;  // non-empty: the layout cannot be applied now
};

// Resolves config `config_name` of `file` for the machine's GPUs (`gpus`: index, model and
// current MIG mode set) around what `held` holds. Errors (InvalidArgument, NotFound,
// FailedPrecondition) are the config's own faults: an unknown config or profile, a layout that
// does not fit a GPU whatever the leases, MIG on a GPU that cannot, split compute instances, or a
// config that selects none of the machine's GPUs.
absl::StatusOr<ResolvedLayout> ResolveLayout(const spec::MigConfigFile& file,
                                             const std::string& config_name,
                                             const std::vector<device::GpuInfo>& gpus,
                                             const std::vector<HeldDevice>& held);

// The config of `file` meant for `host` when none is named: "<host>", else "gpuslice-<host>" (as
// `gpuslice plan -o` names them); empty (= the file's only config) when neither exists.
std::string DefaultLayoutConfig(const spec::MigConfigFile& file, const std::string& host);

// The layout as a mig-parted config named after the host, one entry per GPU (devices: [index]),
// with gpuslice-placements, for the agent's reconciler.
spec::MigConfigFile LayoutAsMigParted(const NodeLayout& layout);

// "1g.10gb@0 1g.10gb@1 3g.40gb@4", or "MIG off".
std::string DescribeGpuLayout(const GpuLayout& gpu);

// JSON form for the store and the API (profiles by name). FromJson fails on a malformed document
// or a profile the model does not have.
nlohmann::json LayoutToJson(const NodeLayout& layout);
absl::StatusOr<NodeLayout> LayoutFromJson(const std::string& host, const nlohmann::json& j);

}  // namespace gpuslice::alloc
