#include "gpuslice/alloc/binder.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpuslice/alloc/inventory.h"
#include "gpuslice/geometry/compute_instances.h"
#include "gpuslice/geometry/shape.h"

namespace gpuslice::alloc {
namespace {

// GPUs by placement node, in node order (GPU g of a node is its g-th).
std::map<std::string, std::vector<device::GpuInfo>> GroupByNode(
    const std::string& host, const std::vector<device::GpuInfo>& gpus, bool mig_if_capable) {
  std::map<std::string, std::vector<device::GpuInfo>> by_node;
  for (const device::GpuInfo& gpu : gpus) {
    if (gpu.model == nullptr) continue;
    by_node[NodeNameFor(host, gpu, mig_if_capable)].push_back(gpu);
  }
  return by_node;
}

class BackendBinder final : public DeviceBinder {
 public:
  BackendBinder(std::shared_ptr<device::Backend> backend,
                std::map<std::string, std::vector<device::GpuInfo>> gpus_by_node)
      : backend_(std::move(backend)), gpus_by_node_(std::move(gpus_by_node)) {}

  absl::StatusOr<std::vector<BoundDevice>> Bind(const place::Cluster& cluster, int node,
                                                const std::vector<place::GpuClaim>& claims,
                                                bool again) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string& name = cluster.spec(node).name;
    auto group = gpus_by_node_.find(name);
    if (group == gpus_by_node_.end()) {
      return absl::NotFoundError(absl::StrCat("node ", name, " is not on this machine"));
    }
    std::vector<BoundDevice> bound;
    std::vector<BoundDevice> created;      // undone when a later claim fails
    std::vector<BoundDevice> created_cis;  // likewise (CIs made in GPU instances found there)
    for (const place::GpuClaim& claim : claims) {
      if (claim.gpu < 0 || static_cast<size_t>(claim.gpu) >= group->second.size()) {
        return Undo(created, created_cis,
                    absl::OutOfRangeError(absl::StrCat("node ", name, " has no GPU ", claim.gpu)));
      }
      const device::GpuInfo& gpu = group->second[static_cast<size_t>(claim.gpu)];
      BoundDevice device;
      device.gpu_uuid = gpu.uuid;
      device.gpu_index = gpu.index;
      if (claim.mig_profile < 0 && claim.whole && gpu.mig_current == device::MigMode::kEnabled) {
        // A whole GPU in MIG mode is usable by CUDA only as a MIG device: the instance of the
        // profile that spans it (7g.80gb on an H100), never the bare GPU with no instance.
        const geometry::Shape* shape = cluster.shape(node);
        const int whole = shape == nullptr ? -1 : WholeGpuProfile(*shape);
        if (whole < 0) {
          return Undo(created, created_cis,
                      absl::FailedPreconditionError(
                          absl::StrCat("GPU ", gpu.index,
                                       " is in MIG mode and its model has no profile that "
                                       "spans it: a whole-GPU lease cannot be used there")));
        }
        bool made = false;
        bool made_ci = false;
        absl::Status status =
            BindMig(*shape, gpu.index, shape->profile(whole), 0, again, &device, &made, &made_ci);
        if (!status.ok()) return Undo(created, created_cis, status);
        if (made) created.push_back(device);
        if (!made && made_ci) created_cis.push_back(device);
        bound.push_back(device);
        continue;
      }
      if (claim.mig_profile < 0) {
        device.uuid = gpu.uuid;
        if (!claim.whole) {
          device.share_milli = claim.milli;
          device.vram_mib = claim.vram_mib;
        }
        bound.push_back(device);
        continue;
      }
      const geometry::Shape* shape = cluster.shape(node);
      if (shape == nullptr || claim.mig_profile >= shape->profile_count()) {
        return Undo(created, created_cis,
                    absl::InvalidArgumentError("MIG claim on a GPU without MIG"));
      }
      bool made = false;
      bool made_ci = false;
      absl::Status status = BindMig(*shape, gpu.index, shape->profile(claim.mig_profile),
                                    claim.mig_start, again, &device, &made, &made_ci);
      if (!status.ok()) return Undo(created, created_cis, status);
      if (made) {
        created.push_back(device);
      } else if (made_ci) {  // in an idle GPU instance that was there: only the CI is ours
        created_cis.push_back(device);
      }
      bound.push_back(device);
    }
    return bound;
  }

  // The standard profile that takes every placement unit from 0 (-1: none).
  static int WholeGpuProfile(const geometry::Shape& shape) {
    for (int p = 0; p < shape.profile_count(); ++p) {
      const hw::GiProfile& profile = shape.profile(p);
      if (profile.placement_size == shape.units() &&
          profile.variant == hw::MediaVariant::kStandard &&
          std::find(profile.starts.begin(), profile.starts.end(), 0) != profile.starts.end()) {
        return p;
      }
    }
    return -1;
  }

  bool Handles(const std::string& node) const override { return gpus_by_node_.contains(node); }

  absl::StatusOr<bool> Busy(const std::vector<BoundDevice>& devices) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const BoundDevice& device : devices) {
      absl::StatusOr<std::vector<device::ProcessInfo>> processes =
          backend_->ListProcesses(device.gpu_index);
      if (!processes.ok()) return processes.status();
      for (const device::ProcessInfo& p : *processes) {
        if (device.gi < 0 || p.gi == device.gi) return true;
      }
    }
    return false;
  }

  absl::Status Unbind(const std::vector<BoundDevice>& devices) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return UnbindLocked(devices);
  }

  void SetFixedGpus(const std::set<int>& gpu_indexes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    fixed_ = gpu_indexes;
  }

  void SetGpus(const std::string& host, const std::vector<device::GpuInfo>& gpus,
               bool mig_if_capable) override {
    std::lock_guard<std::mutex> lock(mutex_);
    gpus_by_node_ = GroupByNode(host, gpus, mig_if_capable);
  }

 private:
  // Finds or creates the GI of `profile` at `start` and a CI spanning it.
  absl::Status BindMig(const geometry::Shape& shape, int gpu, const hw::GiProfile& profile,
                       int start, bool again, BoundDevice* device, bool* made, bool* made_ci) {
    absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis = backend_->ListGpuInstances(gpu);
    if (!gis.ok()) return gis.status();
    std::optional<device::GpuInstanceInfo> gi;
    for (const device::GpuInstanceInfo& existing : *gis) {
      if (existing.profile_id == profile.smi_id && existing.start == start) gi = existing;
    }
    if (gi.has_value() && !again) {
      absl::StatusOr<std::vector<device::ProcessInfo>> processes = backend_->ListProcesses(gpu);
      if (!processes.ok()) return processes.status();
      for (const device::ProcessInfo& p : *processes) {
        if (p.gi == gi->id) {
          return absl::FailedPreconditionError(absl::StrCat(
              "MIG ", profile.name, " at ", start, " on GPU ", gpu, " is still used by process ",
              p.pid, " (", p.name, ") of an ended lease"));
        }
      }
    }
    if (!gi.has_value()) {
      absl::StatusOr<device::GpuInstanceInfo> created =
          backend_->CreateGpuInstance(gpu, profile.smi_id, start);
      if (!created.ok()) {
        return absl::Status(created.status().code(),
                            absl::StrCat("creating MIG ", profile.name, " at ", start, " on GPU ",
                                         gpu, ": ", created.status().message()));
      }
      gi = *created;
      *made = true;
    }
    device->gi = gi->id;
    absl::StatusOr<std::vector<device::ComputeInstanceInfo>> cis =
        backend_->ListComputeInstances(gpu, gi->id);
    if (!cis.ok()) return cis.status();
    const geometry::CiShape ci_shape(shape.mig(), profile);
    const int full = ci_shape.Find(absl::StrCat(profile.compute_slices, "c"));
    const int ci_profile =
        ci_shape.profiles()[static_cast<size_t>(full >= 0 ? full : ci_shape.DefaultIndex())].id;
    for (const device::ComputeInstanceInfo& ci : *cis) {
      if (ci.profile_id == ci_profile) {
        device->ci = ci.id;
        device->uuid = ci.uuid;
        return absl::OkStatus();
      }
    }
    absl::StatusOr<device::ComputeInstanceInfo> ci =
        backend_->CreateComputeInstance(gpu, gi->id, ci_profile, 0);
    if (!ci.ok()) {
      if (*made) (void)backend_->DestroyGpuInstance(gpu, gi->id);
      *made = false;
      return absl::Status(ci.status().code(),
                          absl::StrCat("creating the compute instance of MIG ", profile.name,
                                       " on GPU ", gpu, ": ", ci.status().message()));
    }
    device->ci = ci->id;
    device->uuid = ci->uuid;
    *made_ci = true;
    return absl::OkStatus();
  }

  // Destroys what a failed Bind created: compute instances it added to instances that were
  // there, and the instances it created.
  absl::Status Undo(const std::vector<BoundDevice>& created,
                    const std::vector<BoundDevice>& created_cis, absl::Status why) {
    for (const BoundDevice& d : created_cis) {
      (void)backend_->DestroyComputeInstance(d.gpu_index, d.gi, d.ci);
    }
    (void)UnbindLocked(created);
    return why;
  }

  absl::Status UnbindLocked(const std::vector<BoundDevice>& devices) {
    std::vector<std::string> busy;
    absl::Status first_error;
    for (const BoundDevice& device : devices) {
      if (device.gi < 0) continue;
      absl::StatusOr<std::vector<device::ProcessInfo>> processes =
          backend_->ListProcesses(device.gpu_index);
      if (processes.ok()) {
        std::vector<std::string> pids;
        for (const device::ProcessInfo& p : *processes) {
          if (p.gi == device.gi) pids.push_back(absl::StrCat(p.pid, " (", p.name, ")"));
        }
        if (!pids.empty()) {
          busy.push_back(absl::StrCat(device.uuid, " on GPU ", device.gpu_index, " used by ",
                                      absl::StrJoin(pids, ", ")));
          continue;
        }
      }
      if (fixed_.contains(device.gpu_index)) continue;  // the layout's instance stays
      absl::Status status =
          backend_->DestroyComputeInstance(device.gpu_index, device.gi, device.ci);
      if (status.ok()) status = backend_->DestroyGpuInstance(device.gpu_index, device.gi);
      if (!status.ok() && first_error.ok()) first_error = status;
    }
    if (!busy.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("left in place, still in use: ", absl::StrJoin(busy, "; ")));
    }
    return first_error;
  }

  std::mutex mutex_;
  std::set<int> fixed_;
  std::shared_ptr<device::Backend> backend_;
  std::map<std::string, std::vector<device::GpuInfo>> gpus_by_node_;
};

}  // namespace

std::int64_t IdleTracker::IdleSeconds(std::int64_t lease, const std::string& node,
                                      const std::vector<BoundDevice>& devices, std::int64_t now) {
  if (binder_ == nullptr || devices.empty() || !binder_->Handles(node)) return -1;
  absl::StatusOr<bool> busy = binder_->Busy(devices);
  if (!busy.ok()) return -1;
  if (*busy) {
    idle_since_.erase(lease);
    return 0;
  }
  const std::int64_t since = idle_since_.emplace(lease, now).first->second;
  // Forget leases that ended (their ids are never reused).
  if (idle_since_.size() > 100000) idle_since_.erase(idle_since_.begin());
  return now - since;
}

std::unique_ptr<DeviceBinder> MakeBackendBinder(std::shared_ptr<device::Backend> backend,
                                                const std::string& host,
                                                const std::vector<device::GpuInfo>& gpus,
                                                bool mig_if_capable) {
  return std::make_unique<BackendBinder>(std::move(backend),
                                         GroupByNode(host, gpus, mig_if_capable));
}

}  // namespace gpuslice::alloc
