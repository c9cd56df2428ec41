// gpuslice/alloc/binder.h
//
// The in-process agent of one machine: makes a granted slice real on the GPUs and names it for
// the programs that will use it.
//   * A MIG claim gets a GPU instance of its profile at its exact placement, with one compute
//     instance spanning it (created when none is there; an idle one left at that placement is
//     reused), and is named by that instance's MIG UUID.
//   * A whole GPU or a share of one is named by the GPU's UUID.
// When the lease ends, the instances are destroyed again unless processes still run on them, in
// which case they stay and Unbind says which processes hold them.
//
// Thread-safety: a DeviceBinder serialises its own backend calls.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/place/cluster.h"

namespace gpuslice::alloc {

// What a program needs to use one claimed device.
struct BoundDevice {
  std::string uuid;  // for CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES: "MIG-…" or "GPU-…"
  std::string gpu_uuid;  // the physical GPU
  int gpu_index = -1;    // its NVML index on the machine
  int gi = -1;           // MIG only: GPU and compute instance ids
  int ci = -1;
  std::int64_t vram_mib = 0;  // shares only: the VRAM cap the interposer enforces
  int share_milli = 0;        // shares only: the compute share
  friend bool operator==(const BoundDevice&, const BoundDevice&) = default;
};

class DeviceBinder {
 public:
  virtual ~DeviceBinder() = default;
  // Makes `claims` on placement node `node` usable and names them, one BoundDevice per claim.
  // Idempotent: binding an active lease's claims again (`again`, after a restart) finds what is
  // there. For a new lease, an instance found at the placement with processes on it (left by an
  // ended lease) is refused with FailedPrecondition. On failure nothing it created is left.
  virtual absl::StatusOr<std::vector<BoundDevice>> Bind(const place::Cluster& cluster, int node,
                                                        const std::vector<place::GpuClaim>& claims,
                                                        bool again) = 0;
  // Undoes Bind. FailedPrecondition (naming the processes) when an instance is still in use and
  // was left in place. Instances on GPUs with a fixed layout (SetFixedGpus) are left for the next
  // lease once idle.
  virtual absl::Status Unbind(const std::vector<BoundDevice>& devices) = 0;
  // The GPUs (NVML indexes) whose instances belong to a fixed layout an admin set: Unbind keeps
  // them. Replaces the previous set.
  virtual void SetFixedGpus(const std::set<int>& gpu_indexes) = 0;
  // The machine's GPUs as listed again (after MIG mode changes), grouped into placement nodes as
  // MakeBackendBinder does.
  virtual void SetGpus(const std::string& host, const std::vector<device::GpuInfo>& gpus,
                       bool mig_if_capable) = 0;
  // Whether placement node `node` is on this binder's machine.
  virtual bool Handles(const std::string& node) const = 0;
  // Whether any process runs on the devices (for MIG, on the lease's instances; for a whole GPU
  // or a share, on the GPU, so a shared GPU in use by anyone counts as busy). A process's memory
  // is its use; with no process, no memory is in use.
  virtual absl::StatusOr<bool> Busy(const std::vector<BoundDevice>& devices) = 0;
};

// How long each lease of this machine has been idle, for Service::Tick's idle reclaim: 0 while
// busy, the seconds since it was first seen idle otherwise, -1 when unknown (a lease of another
// machine, or a device query that failed). Not thread-safe: Tick calls it under the service's lock.
class IdleTracker {
 public:
  explicit IdleTracker(std::shared_ptr<DeviceBinder> binder) : binder_(std::move(binder)) {}
  std::int64_t IdleSeconds(std::int64_t lease, const std::string& node,
                           const std::vector<BoundDevice>& devices, std::int64_t now);
  // Asks another binder from now on (the machine's GPUs were listed again); what was seen idle
  // stays idle since then.
  void Rebind(std::shared_ptr<DeviceBinder> binder) { binder_ = std::move(binder); }

 private:
  std::shared_ptr<DeviceBinder> binder_;
  std::map<std::int64_t, std::int64_t> idle_since_;
};

// A binder over `backend` for an inventory built by InventoryFromGpus from `gpus`: GPU g of node
// "<host>/<model>[-mig]" is the g-th GPU of that group, in `gpus` order.
std::unique_ptr<DeviceBinder> MakeBackendBinder(std::shared_ptr<device::Backend> backend,
                                                const std::string& host,
                                                const std::vector<device::GpuInfo>& gpus,
                                                bool mig_if_capable);

}  // namespace gpuslice::alloc
