// NodeDriver: prepare, unprepare and recovery (the node's offer is in node_driver.cc).
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpuslice/dra/cdi.h"
#include "gpuslice/dra/claim.h"
#include "gpuslice/dra/node_driver.h"
#include "gpuslice/dra/resource_model.h"
#include "gpuslice/geometry/compute_instances.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/k8s/allocate.h"
#include "gpuslice/k8s/devices.h"
#include "nlohmann/json.hpp"
#include "node_offer.h"

namespace gpuslice::dra {
namespace {

std::string ClaimName(const ClaimRecord& c) { return absl::StrCat(c.namespace_name, "/", c.name); }

// The shares other claims hold of a shared device: (compute per mille, memory MiB).
std::pair<std::int64_t, std::int64_t> SharesHeld(const Checkpoint& cp, const std::string& uid,
                                                 const std::string& device) {
  std::int64_t compute = 0;
  std::int64_t memory = 0;
  for (const auto& [other, claim] : cp.claims) {
    if (other == uid) continue;
    for (const DeviceRecord& r : claim.devices) {
      if (r.kind == DeviceKind::kShared && r.device == device) {
        compute += r.compute_milli;
        memory += r.vram_limit_mib;
      }
    }
  }
  return {compute, memory};
}

// Another claim that holds `target` (or its whole GPU), or "".
std::string HeldBy(const Checkpoint& cp, const std::string& uid, const std::string& device,
                   const NodeDriver::Target& target) {
  for (const auto& [other, claim] : cp.claims) {
    if (other == uid) continue;
    for (const DeviceRecord& r : claim.devices) {
      const bool same = r.device == device && target.kind != DeviceKind::kShared;
      const bool whole = r.gpu == target.gpu &&
                         (r.kind == DeviceKind::kWhole || target.kind == DeviceKind::kWhole);
      if (same || whole) return ClaimName(claim);
    }
  }
  return "";
}

absl::Status CheckShare(const AllocatedDevice& wanted, const NodeDriver::Target& target,
                        const Checkpoint& cp, const std::string& uid,
                        const NodeDriverOptions& options, DeviceRecord& record) {
  if (options.allocate.interposer_host_path.empty()) {
    return absl::FailedPreconditionError(
        "shared GPUs are enforced by the CUDA interposer libgpuslice-cuda.so, which this node "
        "does not have (--interposer); refusing to hand out an unenforced share");
  }
  const std::int64_t memory_total = target.shared_memory_mib;
  record.compute_milli = wanted.compute_milli.value_or(100);
  record.vram_limit_mib = wanted.memory_mib.value_or(
      std::max(kMemoryStepMib, memory_total / 10 / kMemoryStepMib * kMemoryStepMib));
  if (record.compute_milli < 1 || record.compute_milli > kComputeMilli ||
      record.vram_limit_mib < 1 || record.vram_limit_mib > memory_total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", wanted.device, ": the allocation consumed compute ", record.compute_milli,
        " and memory ", record.vram_limit_mib, "Mi, outside what the device offers (1-",
        kComputeMilli, ", 1-", memory_total, "Mi)"));
  }
  if (const auto c = wanted.config.compute_share_milli) {
    if (*c > record.compute_milli) {
      return absl::InvalidArgumentError(
          absl::StrCat("SliceConfig.computeShareMilli ", *c, " is more than the ",
                       record.compute_milli, " the allocation consumed (it may only lower it)"));
    }
    record.compute_milli = *c;
  }
  if (const auto m = wanted.config.vram_limit_mib) {
    if (*m > record.vram_limit_mib) {
      return absl::InvalidArgumentError(absl::StrCat("SliceConfig.vramLimitMiB ", *m,
                                                     " is more than the ", record.vram_limit_mib,
                                                     " MiB the allocation consumed"));
    }
    record.vram_limit_mib = *m;
  }
  const auto [compute, memory] = SharesHeld(cp, uid, wanted.device);
  if (compute + record.compute_milli > kComputeMilli ||
      memory + record.vram_limit_mib > memory_total) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", wanted.device, " is already shared up to compute ", compute,
                     " and ", memory, "Mi by other claims; this allocation would overcommit it"));
  }
  return absl::OkStatus();
}

// The GIs on a GPU now, as a layout of the model's profiles.
std::vector<geometry::Placed> ExistingLayout(const Offer& offer, const hw::GpuModel& model,
                                             int gpu) {
  std::vector<geometry::Placed> layout;
  for (const GpuNow& g : offer.now) {
    if (g.node.index != gpu) continue;
    for (const device::GpuInstanceInfo& gi : g.gis) {
      const hw::GiProfile* p = model.mig->FindProfileBySmiId(gi.profile_id);
      if (p != nullptr) {
        layout.push_back({static_cast<std::uint8_t>(model.mig->IndexOf(*p)),
                          static_cast<std::uint8_t>(gi.start)});
      }
    }
  }
  return layout;
}

// Checks every wanted device and makes its record; nothing is touched.
absl::StatusOr<std::vector<DeviceRecord>> PlanDevices(const std::vector<AllocatedDevice>& wanted,
                                                      const Offer& offer, const Checkpoint& cp,
                                                      const std::string& uid,
                                                      const NodeDriverOptions& options) {
  const std::map<std::string, NodeDriver::Target> targets = NodeDriverOps::Targets(offer);
  std::map<int, std::vector<geometry::Placed>> layouts;  // GPU index → GIs now + planned
  std::vector<DeviceRecord> records;
  for (const AllocatedDevice& w : wanted) {
    auto it = targets.find(w.device);
    if (it == targets.end()) {
      return absl::NotFoundError(absl::StrCat(
          "device ", w.device.substr(0, 63), " is not offered by node ", options.node_name,
          " (unknown, or its place is taken by an instance the driver did not create)"));
    }
    const NodeDriver::Target& t = it->second;
    if (std::string holder = HeldBy(cp, uid, w.device, t); !holder.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("device ", w.device, " is already prepared for claim ", holder));
    }
    DeviceRecord r;
    r.device = w.device;
    r.request = w.request;
    r.share_id = w.share_id;
    r.kind = t.kind;
    r.gpu = t.gpu;
    r.uuid = t.uuid;
    r.start = t.start;
    for (const DeviceRecord& earlier : records) {
      if (earlier.device == w.device && t.kind != DeviceKind::kShared) {
        return absl::InvalidArgumentError(absl::StrCat("device ", w.device, " is allocated twice"));
      }
    }
    if (t.kind == DeviceKind::kMig) {
      const geometry::Shape shape(*t.model);
      auto [layout, fresh] = layouts.try_emplace(t.gpu);
      if (fresh) layout->second = ExistingLayout(offer, *t.model, t.gpu);
      layout->second.push_back({static_cast<std::uint8_t>(t.model->mig->IndexOf(*t.profile)),
                                static_cast<std::uint8_t>(t.start)});
      const geometry::Rules rules{offer.branch};
      if (geometry::Violation v = shape.Validate(layout->second, rules); !v.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("device ", w.device, ": ", t.profile->name, " at start ", t.start,
                         " on GPU ", t.gpu, " cannot be created beside what exists: ",
                         geometry::Describe(shape, layout->second, v, rules)));
      }
      r.profile_id = t.profile->smi_id;
    }
    if (t.kind == DeviceKind::kShared) {
      if (absl::Status s = CheckShare(w, t, cp, uid, options, r); !s.ok()) return s;
    } else if (w.compute_milli || w.memory_mib || w.config != SliceConfig{}) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device ", w.device, " is not shared: capacity requests and SliceConfig apply only to ",
          "shared devices"));
    }
    r.cdi_id = CdiDeviceId(uid, r.share_id.empty() ? r.device : r.device + "-" + r.share_id);
    records.push_back(std::move(r));
  }
  return records;
}

int DefaultCiProfile(const hw::GpuModel& model, int gi_profile_id) {
  const hw::GiProfile* gi = model.mig->FindProfileBySmiId(gi_profile_id);
  const geometry::CiShape shape(*model.mig, *gi);
  return shape.profiles()[static_cast<size_t>(shape.DefaultIndex())].id;
}

CdiDevice CdiOf(const std::string& uid, const DeviceRecord& r, const k8s::ContainerAllocation& a,
                const k8s::AllocateOptions& options) {
  CdiDevice d;
  d.device = r.share_id.empty() ? r.device : r.device + "-" + r.share_id;
  d.env = a.envs;
  for (const k8s::DeviceNode& n : a.devices)
    d.device_nodes.push_back({n.container_path, n.host_path, n.permissions});
  for (const k8s::MountSpec& m : a.mounts)
    d.mounts.push_back({m.host_path, m.container_path, m.read_only});
  if (r.kind == DeviceKind::kShared) {
    d.env["GPUSLICE_COMPUTE_SHARE_MILLI"] = absl::StrCat(r.compute_milli);
    d.env["GPUSLICE_VRAM_LIMIT_MIB"] = absl::StrCat(r.vram_limit_mib);
    d.env["GPUSLICE_SLICE"] = absl::StrCat("dra-", uid, "-", d.device);
    d.env["GPUSLICE_SHM_DIR"] = options.shm_container_dir;
    d.env["LD_PRELOAD"] = options.interposer_container_path;
    d.mounts.push_back({options.interposer_host_path, options.interposer_container_path, true});
    d.mounts.push_back({options.shm_host_dir, options.shm_container_dir, false});
  }
  return d;
}

// What prepare and unprepare work on: the device, the checkpoint and its saving.
struct Steps {
  device::Backend& backend;
  Checkpoint& cp;
  const NodeDriverOptions& options;
  std::function<absl::Status()> save;

  // Stops here if a test injects a crash after `step`.
  absl::Status Crash(std::string_view step) const {
    if (options.crash_after && options.crash_after(step)) {
      return absl::AbortedError(absl::StrCat("injected crash after ", std::string(step)));
    }
    return absl::OkStatus();
  }
  // Saves, then Crash(step).
  absl::Status Saved(std::string_view step) {
    if (absl::Status s = save(); !s.ok()) return s;
    return Crash(step);
  }
};

bool IsInjectedCrash(const absl::Status& s) {
  return absl::IsAborted(s) && s.message().rfind("injected crash", 0) == 0;
}

absl::Status CreateInstances(Steps& steps, ClaimRecord& claim) {
  for (DeviceRecord& r : claim.devices) {
    if (r.kind != DeviceKind::kMig) continue;
    absl::StatusOr<device::GpuInstanceInfo> gi =
        steps.backend.CreateGpuInstance(r.gpu, r.profile_id, r.start);
    if (!gi.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("creating the GPU instance of ", r.device, ": ", gi.status().message()));
    }
    // A crash here leaves a GI the checkpoint does not name; recovery finds it by its placement.
    if (absl::Status s = steps.Crash("gi-created-unrecorded"); !s.ok()) return s;
    r.gi = gi->id;
    if (absl::Status s = steps.Saved("gi-created"); !s.ok()) return s;
    const hw::GpuModel* model = nullptr;
    if (absl::StatusOr<std::vector<device::GpuInfo>> gpus = steps.backend.ListGpus(); gpus.ok()) {
      for (const device::GpuInfo& g : *gpus) {
        if (g.index == r.gpu) model = g.model;
      }
    }
    if (model == nullptr || !model->mig_capable()) {
      return absl::FailedPreconditionError(absl::StrCat("GPU ", r.gpu, " has no MIG model"));
    }
    absl::StatusOr<device::ComputeInstanceInfo> ci =
        steps.backend.CreateComputeInstance(r.gpu, r.gi, DefaultCiProfile(*model, r.profile_id), 0);
    if (!ci.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("creating the compute instance of ", r.device, ": ", ci.status().message()));
    }
    r.ci = ci->id;
    r.uuid = ci->uuid;
    if (absl::Status s = steps.Saved("ci-created"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// The GI a record stands for now: its recorded id if it still holds the recorded profile and
// placement; for a GI recorded as being created (no id), the one at that placement that no other
// record owns.
std::optional<device::GpuInstanceInfo> FindOwnGi(Steps& steps, const DeviceRecord& r) {
  absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis = steps.backend.ListGpuInstances(r.gpu);
  if (!gis.ok()) return std::nullopt;
  std::set<int> owned;
  for (const auto& [uid, claim] : steps.cp.claims) {
    for (const DeviceRecord& other : claim.devices) {
      if (&other != &r && other.kind == DeviceKind::kMig && other.gpu == r.gpu && other.gi >= 0)
        owned.insert(other.gi);
    }
  }
  for (const device::GpuInstanceInfo& gi : *gis) {
    const bool same_place = gi.profile_id == r.profile_id && gi.start == r.start;
    if (same_place && (r.gi >= 0 ? gi.id == r.gi : !owned.contains(gi.id))) return gi;
  }
  return std::nullopt;
}

absl::Status DestroyInstance(Steps& steps, DeviceRecord& r) {
  const std::optional<device::GpuInstanceInfo> gi = FindOwnGi(steps, r);
  if (!gi) {
    r.gi = -1;
    r.ci = -1;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<device::ProcessInfo>> procs = steps.backend.ListProcesses(r.gpu);
  if (!procs.ok()) return procs.status();
  for (const device::ProcessInfo& p : *procs) {
    if (p.gi == gi->id) {
      return absl::FailedPreconditionError(
          absl::StrCat("process ", p.pid, " (", p.name.substr(0, 64), ") still runs on ", r.device,
                       " (GPU ", r.gpu, " GI ", gi->id, "): not destroyed; retried later"));
    }
  }
  absl::StatusOr<std::vector<device::ComputeInstanceInfo>> cis =
      steps.backend.ListComputeInstances(r.gpu, gi->id);
  if (!cis.ok()) return cis.status();
  for (const device::ComputeInstanceInfo& ci : *cis) {
    if (absl::Status s = steps.backend.DestroyComputeInstance(r.gpu, gi->id, ci.id); !s.ok())
      return s;
  }
  r.gi = gi->id;
  r.ci = -1;
  if (absl::Status s = steps.Saved("ci-destroyed"); !s.ok()) return s;
  if (absl::Status s = steps.backend.DestroyGpuInstance(r.gpu, gi->id); !s.ok()) return s;
  r.gi = -1;
  return steps.Saved("gi-destroyed");
}

// Undoes everything recorded for a claim, then forgets it.
absl::Status Teardown(Steps& steps, const std::string& uid) {
  ClaimRecord& claim = steps.cp.claims.at(uid);
  for (DeviceRecord& r : claim.devices) {
    if (r.kind != DeviceKind::kMig) continue;
    if (absl::Status s = DestroyInstance(steps, r); !s.ok()) return s;
  }
  if (absl::Status s = RemoveCdiSpec(steps.options.cdi_dir, uid); !s.ok()) return s;
  steps.cp.claims.erase(uid);
  return steps.Saved("forgotten");
}

std::vector<PreparedOut> Outs(const ClaimRecord& claim) {
  std::vector<PreparedOut> out;
  for (const DeviceRecord& r : claim.devices)
    out.push_back({r.request, r.device, r.cdi_id, r.share_id});
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeDriver>> NodeDriver::Create(device::Backend& backend,
                                                               const hw::Catalog& catalog,
                                                               ClaimFetcher fetch,
                                                               NodeDriverOptions options) {
  if (options.checkpoint_path.empty()) {
    return absl::InvalidArgumentError("the DRA driver needs a checkpoint file");
  }
  if (options.node_name.empty()) return absl::InvalidArgumentError("the node name is empty");
  // A driver that only looks (recover off: `dra-driver --once`) makes nothing.
  const std::filesystem::path dir = std::filesystem::path(options.checkpoint_path).parent_path();
  if (options.recover && !dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create the state directory ", dir.string(), ": ", error.message()));
    }
  }
  absl::StatusOr<Checkpoint> checkpoint = LoadCheckpoint(options.checkpoint_path);
  if (!checkpoint.ok()) return checkpoint.status();
  std::unique_ptr<NodeDriver> driver(
      new NodeDriver(backend, catalog, std::move(fetch), std::move(options)));
  driver->checkpoint_ = std::move(*checkpoint);
  if (!driver->options_.recover) return driver;
  if (absl::Status s = driver->Recover(); !s.ok()) {
    driver->Log(absl::StrCat("recovery left work for later: ", s.message()));
  }
  return driver;
}

absl::Status NodeDriver::Recover() {
  std::lock_guard<std::mutex> lock(mu_);
  Steps steps{backend_, checkpoint_, options_, [this] { return Save(); }};
  absl::Status first;
  std::vector<std::string> unfinished;
  for (const auto& [uid, claim] : checkpoint_.claims) {
    if (claim.phase != ClaimPhase::kPrepared) unfinished.push_back(uid);
  }
  for (const std::string& uid : unfinished) {
    const std::string what = absl::StrCat(PhaseName(checkpoint_.claims.at(uid).phase), " claim ",
                                          ClaimName(checkpoint_.claims.at(uid)));
    absl::Status s = Teardown(steps, uid);
    Log(s.ok() ? absl::StrCat("recovered: undid interrupted ", what)
               : absl::StrCat("recovering ", what, ": ", s.message()));
    if (!s.ok() && first.ok()) first = s;
  }
  if (!unfinished.empty()) ++version_;
  return first;
}

absl::StatusOr<std::vector<PreparedOut>> NodeDriver::Prepare(const std::string& namespace_name,
                                                             const std::string& uid,
                                                             const std::string& name) {
  // The uid names the claim's CDI spec file and CDI devices: a Kubernetes uid, nothing else.
  if (!IsDnsLabel(uid)) {
    return absl::InvalidArgumentError("the claim's uid is not a Kubernetes uid");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = checkpoint_.claims.find(uid);
    if (it != checkpoint_.claims.end() && it->second.phase == ClaimPhase::kPrepared)
      return Outs(it->second);
  }
  if (!fetch_) return absl::FailedPreconditionError("no API server to read the claim from");
  absl::StatusOr<nlohmann::json> claim = fetch_(namespace_name, name);
  if (!claim.ok()) {
    return absl::UnavailableError(absl::StrCat("reading ResourceClaim ", namespace_name, "/", name,
                                               ": ", claim.status().message()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  Steps steps{backend_, checkpoint_, options_, [this] { return Save(); }};
  if (auto it = checkpoint_.claims.find(uid); it != checkpoint_.claims.end()) {
    if (it->second.phase == ClaimPhase::kPrepared) return Outs(it->second);
    if (it->second.phase == ClaimPhase::kUnpreparing) {
      return absl::FailedPreconditionError("the claim is being unprepared");
    }
    if (absl::Status s = Teardown(steps, uid); !s.ok()) return s;  // an earlier try, undone
  }
  absl::StatusOr<std::vector<AllocatedDevice>> wanted =
      ReadAllocation(*claim, uid, options_.driver_name, options_.node_name);
  if (!wanted.ok()) return wanted.status();
  absl::StatusOr<Offer> offer = NodeDriverOps::OfferNow(*this);
  if (!offer.ok()) return offer.status();
  absl::StatusOr<std::vector<DeviceRecord>> records =
      PlanDevices(*wanted, *offer, checkpoint_, uid, options_);
  if (!records.ok()) return records.status();
  checkpoint_.claims[uid] = {namespace_name, name, ClaimPhase::kPreparing, std::move(*records)};
  absl::Status done = steps.Saved("intent");
  if (done.ok()) done = CreateInstances(steps, checkpoint_.claims.at(uid));
  if (done.ok()) done = WriteCdi(uid);
  if (done.ok()) done = steps.Saved("cdi-written");
  if (done.ok()) {
    checkpoint_.claims.at(uid).phase = ClaimPhase::kPrepared;
    done = steps.Saved("prepared");
  }
  ++version_;
  if (IsInjectedCrash(done)) return done;
  if (!done.ok()) {
    if (absl::Status undo = Teardown(steps, uid); !undo.ok()) {
      Log(absl::StrCat("undoing the failed prepare of ", namespace_name, "/", name, ": ",
                       undo.message()));
    }
    return done;
  }
  return Outs(checkpoint_.claims.at(uid));
}

absl::Status NodeDriver::WriteCdi(const std::string& uid) {
  const ClaimRecord& claim = checkpoint_.claims.at(uid);
  absl::StatusOr<k8s::NodeSnapshot> node = reader_.Read();
  if (!node.ok()) return node.status();
  k8s::AllocateOptions allocate = options_.allocate;
  allocate.sharing = {};
  std::vector<CdiDevice> devices;
  for (const DeviceRecord& r : claim.devices) {
    absl::StatusOr<k8s::DeviceLocation> where = k8s::Locate(*node, r.uuid);
    if (!where.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(r.device, ": ", r.uuid, " is not on the node: ", where.status().message()));
    }
    const std::string resource = where->mig != nullptr ? k8s::MigResourceName(where->mig->profile)
                                                       : std::string(k8s::kWholeGpuResource);
    absl::StatusOr<k8s::ContainerAllocation> edits =
        k8s::AllocateContainer(*node, resource, {r.uuid}, allocate);
    if (!edits.ok()) return edits.status();
    devices.push_back(CdiOf(uid, r, *edits, options_.allocate));
  }
  return WriteCdiSpec(options_.cdi_dir, uid, devices);
}

absl::Status NodeDriver::Unprepare(const std::string& uid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = checkpoint_.claims.find(uid);
  if (it == checkpoint_.claims.end()) return absl::OkStatus();
  Steps steps{backend_, checkpoint_, options_, [this] { return Save(); }};
  it->second.phase = ClaimPhase::kUnpreparing;
  absl::Status done = steps.Saved("unpreparing");
  if (done.ok()) done = Teardown(steps, uid);
  ++version_;
  return done;
}

}  // namespace gpuslice::dra
