// gpuslice/dra/node_driver.h
//
// The DRA driver's node logic, over the device layer (gpuslice/device/backend.h), so the same
// code runs on NVML and on the simulator. It knows what the node offers, prepares and unprepares
// claims, and reports health; the kubelet gRPC side (gpuslice/dra/kubelet_plugin.h) and the
// API-server side (gpuslice/dra/publisher.h) are wired to it by gpuslice/dra/driver.h.
//
// What each GPU offers (gpuslice/dra/gpu_devices.h):
//   * MIG enabled: MIG devices on demand, every profile × placement; instances the driver did not
//     create ("foreign": an admin's, another tool's) are taken out of the counters; a GPU listed
//     in `fixed_gpus` instead offers its existing instances as they are;
//   * MIG disabled: the whole GPU, or, for GPUs listed in `shared_gpus`, one shared device with
//     consumable `compute` and `memory` capacities enforced by the CUDA interposer;
//   * taints: `gpu.gpuslice.io/unhealthy` (NoSchedule; NoExecute when the GPU is lost) on an
//     unhealthy GPU's devices, `gpu.gpuslice.io/drain` (NoSchedule) on a GPU being drained.
// Devices come in preference order (gpuslice/dra/preference.h) for what is allocated now.
//
// Prepare(claim): reads the claim (ClaimFetcher, outside the lock), checks every allocated device
// of ours before touching anything (offered by this node, not held by another claim, placements
// valid beside what exists, shares within what the allocation consumed), records its intent in
// the checkpoint (gpuslice/dra/checkpoint.h), creates the GI and CI at exactly the allocated
// placement for on-demand MIG devices (recording each id as soon as it exists), writes the CDI
// spec (gpuslice/dra/cdi.h), marks the claim prepared and returns its devices. A failure undoes
// what this call created; an already prepared claim returns the same answer again. Errors are
// per claim: InvalidArgument / FailedPrecondition / NotFound with the reason.
//
// Unprepare(uid): destroys what Prepare created (never an instance that has processes: that is
// FailedPrecondition, retried by kubelet; never one whose id now holds another profile or
// placement) and removes the CDI spec; an unknown claim is fine.
//
// Relay(): re-lays the admin-fixed GPUs that are drained and that no claim uses any more to the
// mig-parted config `fixed_layout` names (gpuslice/agent/apply.h: exact placements, journaled,
// busy instances never destroyed, no GPU reset, no MIG mode change: an entry that turns MIG off
// is refused), so that an admin changes a fixed layout by editing the config and draining the GPU.
//
// Recover() (run by Create): an interrupted unprepare is finished; an interrupted prepare is
// undone (kubelet retries it). A GI recorded as "being created" but without its id is found by
// its profile and placement (the counters gave that placement to this claim only); nothing else
// that the checkpoint does not record is ever destroyed.
//
// Thread-safe: one lock serialises the device, the checkpoint and the CDI files.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/dra/checkpoint.h"
#include "gpuslice/dra/pool.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/k8s/allocate.h"
#include "gpuslice/k8s/node_reader.h"
#include "gpuslice/spec/mig_parted.h"
#include "nlohmann/json_fwd.hpp"

namespace gpuslice::dra {

inline constexpr char kUnhealthyTaint[] = "gpu.gpuslice.io/unhealthy";
inline constexpr char kDrainTaint[] = "gpu.gpuslice.io/drain";

struct NodeDriverOptions {
  std::string node_name;
  std::string driver_name = kDriverName;
  std::string checkpoint_path;  // required
  std::string cdi_dir = "/var/run/cdi";
  std::vector<std::string> shared_gpus;  // GPU index or UUID; "all" = every MIG-disabled GPU
  std::vector<std::string> fixed_gpus;   // GPU index or UUID; "all" = every MIG-enabled GPU
  // The layout of the fixed GPUs (a mig-parted config file and the config's name), applied by
  // Relay() to drained ones; none: Relay() does nothing.
  std::optional<spec::MigConfigFile> fixed_layout;
  std::string fixed_layout_name;
  std::string apply_journal;      // the journal of those applies; "" = beside the checkpoint
  k8s::AllocateOptions allocate;  // device nodes, interposer and shm paths
  k8s::NodeReaderOptions reader;
  std::function<void(const std::string&)> log;  // may be empty
  // Run Recover() in Create (false: only look; `dra-driver --once` changes nothing).
  bool recover = true;
  // Tests only: called after each step of prepare/unprepare ("gi-created", "ci-created", ...);
  // returning true stops the call there, as if the process died (nothing is undone).
  std::function<bool(std::string_view step)> crash_after;
};

// Reads a ResourceClaim from the API server: (namespace, name) → its JSON.
using ClaimFetcher =
    std::function<absl::StatusOr<nlohmann::json>(const std::string&, const std::string&)>;

// One device of a prepared claim, as kubelet is answered.
struct PreparedOut {
  std::string request;
  std::string device;
  std::string cdi_id;
  std::string share_id;
  friend bool operator==(const PreparedOut&, const PreparedOut&) = default;
};

struct DeviceHealthOut {
  std::string device;
  bool healthy = true;
  std::string message;
};

class NodeDriver {
 public:
  // Loads the checkpoint and runs Recover(). `backend` and `catalog` must outlive the driver.
  static absl::StatusOr<std::unique_ptr<NodeDriver>> Create(device::Backend& backend,
                                                            const hw::Catalog& catalog,
                                                            ClaimFetcher fetch,
                                                            NodeDriverOptions options);

  absl::Status Recover();
  // The pool's slices now (generation 1; the publisher sets the real one).
  absl::StatusOr<std::vector<ResourceSlice>> Slices(SliceLayout layout);
  absl::StatusOr<std::vector<PreparedOut>> Prepare(const std::string& namespace_name,
                                                   const std::string& uid, const std::string& name);
  absl::Status Unprepare(const std::string& uid);
  // Every device of the last Slices() with its GPU's health (reads the node).
  std::vector<DeviceHealthOut> Health();
  // GPUs (index) whose devices carry the drain taint; returns whether it changed.
  bool SetDrain(std::set<int> gpus);
  // GPUs being drained that no prepared claim uses any more.
  std::set<int> Drained();
  // Re-lays drained fixed GPUs whose layout differs from `fixed_layout`; the GPUs re-laid.
  absl::StatusOr<std::set<int>> Relay();

  // Bumped whenever what the node offers may have changed (prepare, unprepare, drain, health).
  std::uint64_t version() const { return version_.load(); }
  Checkpoint checkpoint() const;

  struct Target;  // a device of the pool resolved against the node (node_driver.cc)

 private:
  NodeDriver(device::Backend& backend, const hw::Catalog& catalog, ClaimFetcher fetch,
             NodeDriverOptions options);
  absl::Status Save();
  // Writes the claim's CDI spec from what the node shows now (under the lock).
  absl::Status WriteCdi(const std::string& uid);
  void Log(const std::string& line) const;

  device::Backend& backend_;
  const hw::Catalog& catalog_;
  ClaimFetcher fetch_;
  NodeDriverOptions options_;
  k8s::NodeReader reader_;

  mutable std::mutex mu_;
  Checkpoint checkpoint_;
  std::set<int> drain_;
  std::vector<std::pair<std::string, int>> published_;  // device name → GPU index
  std::set<int> unhealthy_seen_;
  std::atomic<std::uint64_t> version_{1};

  friend class NodeDriverOps;  // node_driver.cc's helpers
};

}  // namespace gpuslice::dra
