// src/dra/node_offer.h (private to src/dra): what the node offers now, shared by node_driver.cc
// (slices, health) and node_prepare.cc (prepare, unprepare, recovery). Called under the
// NodeDriver's lock.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/dra/gpu_devices.h"
#include "gpuslice/dra/node_driver.h"
#include "gpuslice/dra/preference.h"
#include "gpuslice/k8s/devices.h"

namespace gpuslice::dra {

// A device of the pool resolved against the node.
struct NodeDriver::Target {
  DeviceKind kind = DeviceKind::kMig;
  int gpu = 0;
  const hw::GpuModel* model = nullptr;
  const hw::GiProfile* profile = nullptr;  // MIG kinds
  int start = -1;
  std::string uuid;                    // whole/shared: the GPU's; fixed: the MIG device's
  std::int64_t shared_memory_mib = 0;  // shared: the memory capacity it offers
};

// One GPU as the node shows it now.
struct GpuNow {
  k8s::NodeGpu node;
  const hw::GpuModel* model = nullptr;
  std::vector<device::GpuInstanceInfo> gis;  // MIG enabled only
};

struct Offer {
  std::string driver_version;
  int branch = 0;             // driver branch, 0 = unknown (newest rules)
  std::vector<GpuNow> now;    // every GPU of the node
  std::vector<GpuInfo> gpus;  // those offered (in the catalog)
  std::vector<GpuUse> use;    // one per offered GPU
};

class NodeDriverOps {
 public:
  static absl::StatusOr<Offer> OfferNow(NodeDriver& driver);
  // Every device offered now, by name.
  static std::map<std::string, NodeDriver::Target> Targets(const Offer& offer);
};

}  // namespace gpuslice::dra
