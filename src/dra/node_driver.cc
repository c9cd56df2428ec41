#include "gpuslice/dra/node_driver.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpuslice/dra/cdi.h"
#include "gpuslice/dra/claim.h"
#include "gpuslice/dra/gpu_devices.h"
#include "gpuslice/geometry/compute_instances.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/k8s/devices.h"
#include "nlohmann/json.hpp"
#include "node_offer.h"

namespace gpuslice::dra {

namespace {

struct Inventory {
  std::string driver_version;
  int branch = 0;
  std::vector<GpuNow> gpus;
};

int BranchOf(const std::string& version) {
  int branch = 0;
  const std::vector<std::string> parts = absl::StrSplit(version, '.');
  if (parts.empty() || !absl::SimpleAtoi(parts[0], &branch)) return 0;
  return branch;
}

bool Listed(const std::vector<std::string>& list, const k8s::NodeGpu& gpu) {
  for (const std::string& entry : list) {
    if (entry == "all" || entry == gpu.uuid || entry == std::to_string(gpu.index)) return true;
  }
  return false;
}

absl::StatusOr<Inventory> ReadInventory(device::Backend& backend, k8s::NodeReader& reader,
                                        const hw::Catalog& catalog) {
  absl::StatusOr<k8s::NodeSnapshot> snapshot = reader.Read();
  if (!snapshot.ok()) return snapshot.status();
  Inventory inventory;
  if (absl::StatusOr<std::string> v = backend.DriverVersion(); v.ok()) {
    inventory.driver_version = *v;
    inventory.branch = BranchOf(*v);
  }
  for (const k8s::NodeGpu& gpu : snapshot->gpus) {
    GpuNow now{gpu, gpu.model.empty() ? nullptr : catalog.Find(gpu.model), {}};
    if (gpu.mig_enabled && gpu.healthy) {
      absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis =
          backend.ListGpuInstances(gpu.index);
      if (!gis.ok()) return gis.status();
      now.gis = *gis;
    }
    inventory.gpus.push_back(std::move(now));
  }
  return inventory;
}

// GIs the checkpoint records as the driver's own, as (gpu, gi id).
std::set<std::pair<int, int>> OwnedGis(const Checkpoint& checkpoint) {
  std::set<std::pair<int, int>> owned;
  for (const auto& [uid, claim] : checkpoint.claims) {
    for (const DeviceRecord& d : claim.devices) {
      if (d.kind == DeviceKind::kMig && d.gi >= 0) owned.insert({d.gpu, d.gi});
    }
  }
  return owned;
}

std::string ProfileName(const hw::GpuModel& model, int profile_id) {
  const hw::GiProfile* p =
      model.mig_capable() ? model.mig->FindProfileBySmiId(profile_id) : nullptr;
  return p != nullptr ? p->name : absl::StrCat("unknown-profile-", profile_id);
}

std::string MigUuidOf(const k8s::NodeGpu& gpu, int gi) {
  for (const k8s::MigDevice& m : gpu.mig_devices) {
    if (m.gi == gi) return m.uuid;
  }
  return "";
}

// A taint value: label characters only, at most 63.
std::string TaintValue(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    out.push_back(ok ? c : '-');
    if (out.size() == 63) break;
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.back()))) out.pop_back();
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.front()))) out.erase(0, 1);
  return out;
}

std::vector<DeviceTaint> TaintsOf(const GpuNow& gpu, bool drained) {
  std::vector<DeviceTaint> taints;
  if (!gpu.node.healthy) {
    const bool lost = gpu.node.unhealthy_reason.find("LOST") != std::string::npos ||
                      gpu.node.unhealthy_reason.find("lost") != std::string::npos;
    taints.push_back({kUnhealthyTaint, TaintValue(gpu.node.unhealthy_reason),
                      lost ? "NoExecute" : "NoSchedule"});
  }
  if (drained) taints.push_back({kDrainTaint, "", "NoSchedule"});
  return taints;
}

}  // namespace

namespace {

GpuInfo GpuOf(const NodeDriverOptions& options, const std::set<int>& drain,
              const Inventory& inventory, const GpuNow& g,
              const std::set<std::pair<int, int>>& owned) {
  GpuInfo info;
  info.index = g.node.index;
  info.uuid = g.node.uuid;
  info.model = g.model;
  info.driver_version = inventory.driver_version;
  info.driver_branch = inventory.branch;
  if (g.node.mig_enabled) {
    info.whole = false;
    info.fixed = Listed(options.fixed_gpus, g.node);
    info.mig_on_demand = !info.fixed;
    info.shared = info.fixed && Listed(options.shared_gpus, g.node);
    for (const device::GpuInstanceInfo& gi : g.gis) {
      if (!info.fixed && owned.contains({g.node.index, gi.id})) continue;
      info.foreign.push_back(
          {ProfileName(*g.model, gi.profile_id), gi.start, MigUuidOf(g.node, gi.id)});
    }
  } else {
    info.mig_on_demand = false;
    info.shared = Listed(options.shared_gpus, g.node);
    info.whole = !info.shared;
  }
  info.taints = TaintsOf(g, drain.contains(g.node.index));
  return info;
}

GpuUse UseOf(const Checkpoint& checkpoint, const GpuNow& g) {
  GpuUse use;
  if (g.model->mig_capable()) {
    for (const device::GpuInstanceInfo& gi : g.gis) {
      const hw::GiProfile* p = g.model->mig->FindProfileBySmiId(gi.profile_id);
      if (p == nullptr) continue;
      use.instances.push_back({static_cast<std::uint8_t>(g.model->mig->IndexOf(*p)),
                               static_cast<std::uint8_t>(gi.start)});
    }
  }
  for (const auto& [uid, claim] : checkpoint.claims) {
    for (const DeviceRecord& r : claim.devices) {
      if (r.kind == DeviceKind::kWhole && r.gpu == g.node.index) use.whole = true;
    }
  }
  return use;
}

}  // namespace

absl::StatusOr<Offer> NodeDriverOps::OfferNow(NodeDriver& d) {
  absl::StatusOr<Inventory> inventory = ReadInventory(d.backend_, d.reader_, d.catalog_);
  if (!inventory.ok()) return inventory.status();
  Offer offer;
  const std::set<std::pair<int, int>> owned = OwnedGis(d.checkpoint_);
  for (const GpuNow& g : inventory->gpus) {
    if (g.model == nullptr) {
      d.Log(absl::StrCat("GPU ", g.node.index, " (", g.node.product,
                         ") is not in the catalog: not offered"));
      continue;
    }
    offer.gpus.push_back(GpuOf(d.options_, d.drain_, *inventory, g, owned));
    offer.use.push_back(UseOf(d.checkpoint_, g));
  }
  offer.driver_version = inventory->driver_version;
  offer.branch = inventory->branch;
  offer.now = std::move(inventory->gpus);
  return offer;
}

std::map<std::string, NodeDriver::Target> NodeDriverOps::Targets(const Offer& offer) {
  std::map<std::string, NodeDriver::Target> targets;
  for (const GpuInfo& gpu : offer.gpus) {
    for (const Device& device : DevicesOf(gpu).devices) {
      NodeDriver::Target t;
      t.gpu = gpu.index;
      t.model = gpu.model;
      const auto& type = std::get<std::string>(device.attributes.at("type"));
      if (auto p = device.attributes.find("profile"); p != device.attributes.end()) {
        t.kind = type == "shared" ? DeviceKind::kShared
                 : gpu.fixed      ? DeviceKind::kFixed
                                  : DeviceKind::kMig;
        t.profile = gpu.model->mig->FindProfile(std::get<std::string>(p->second));
        t.start = static_cast<int>(std::get<std::int64_t>(device.attributes.at("placementStart")));
        if (auto it = device.attributes.find("uuid"); it != device.attributes.end())
          t.uuid = std::get<std::string>(it->second);
      } else {
        t.kind = type == "shared" ? DeviceKind::kShared : DeviceKind::kWhole;
        t.uuid = gpu.uuid;
      }
      if (auto m = device.capacity.find("memory"); m != device.capacity.end()) {
        t.shared_memory_mib = m->second.value.value;
      }
      targets[device.name] = t;
    }
  }
  return targets;
}

NodeDriver::NodeDriver(device::Backend& backend, const hw::Catalog& catalog, ClaimFetcher fetch,
                       NodeDriverOptions options)
    : backend_(backend),
      catalog_(catalog),
      fetch_(std::move(fetch)),
      options_(std::move(options)),
      reader_(backend, options_.reader) {}

void NodeDriver::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

absl::Status NodeDriver::Save() { return SaveCheckpoint(options_.checkpoint_path, checkpoint_); }

Checkpoint NodeDriver::checkpoint() const {
  std::lock_guard<std::mutex> lock(mu_);
  return checkpoint_;
}

absl::StatusOr<std::vector<ResourceSlice>> NodeDriver::Slices(SliceLayout layout) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<Offer> offer = NodeDriverOps::OfferNow(*this);
  if (!offer.ok()) return offer.status();
  PoolOptions pool;
  pool.node_name = options_.node_name;
  pool.layout = layout;
  pool.use = &offer->use;
  absl::StatusOr<std::vector<ResourceSlice>> slices = BuildPool(offer->gpus, pool);
  if (!slices.ok()) return slices.status();
  published_.clear();
  for (const ResourceSlice& slice : *slices) {
    for (const Device& device : slice.devices) {
      published_.emplace_back(
          device.name, static_cast<int>(std::get<std::int64_t>(device.attributes.at("index"))));
    }
  }
  for (ResourceSlice& slice : *slices) slice.driver = options_.driver_name;
  return slices;
}

bool NodeDriver::SetDrain(std::set<int> gpus) {
  std::lock_guard<std::mutex> lock(mu_);
  if (gpus == drain_) return false;
  drain_ = std::move(gpus);
  ++version_;
  return true;
}

std::set<int> NodeDriver::Drained() {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<int> drained = drain_;
  for (const auto& [uid, claim] : checkpoint_.claims) {
    for (const DeviceRecord& r : claim.devices) drained.erase(r.gpu);
  }
  return drained;
}

std::vector<DeviceHealthOut> NodeDriver::Health() {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<int, std::pair<bool, std::string>> by_gpu;
  if (absl::StatusOr<k8s::NodeSnapshot> node = reader_.Read(); node.ok()) {
    for (const k8s::NodeGpu& gpu : node->gpus)
      by_gpu[gpu.index] = {gpu.healthy, gpu.unhealthy_reason};
  }
  std::vector<DeviceHealthOut> out;
  std::set<int> unhealthy;
  for (const auto& [device, gpu] : published_) {
    auto it = by_gpu.find(gpu);
    const bool known = it != by_gpu.end();
    const bool healthy = known && it->second.first;
    if (!healthy) unhealthy.insert(gpu);
    out.push_back({device, healthy, !known ? "GPU not found" : healthy ? "" : it->second.second});
  }
  if (unhealthy != unhealthy_seen_) {
    unhealthy_seen_ = unhealthy;
    ++version_;  // the taints change: republish
  }
  return out;
}

}  // namespace gpuslice::dra
