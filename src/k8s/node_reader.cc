#include "gpuslice/k8s/node_reader.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace gpuslice::k8s {
namespace {

// The number after `key` in a "Key: value" file, or -1.
int NumberAfter(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with(key)) continue;
    std::istringstream rest(line.substr(key.size()));
    int value = -1;
    if (rest >> value) return value;
  }
  return -1;
}

// NVML gives "00000000:36:00.0"; sysfs and procfs name the device "0000:36:00.0" (lower case).
std::string SysfsBusId(const std::string& nvml_bus_id) {
  std::string id = absl::AsciiStrToLower(nvml_bus_id);
  const size_t colon = id.find(':');
  if (colon != std::string::npos && colon > 4) id = id.substr(colon - 4);
  return id;
}

}  // namespace

bool XidMakesGpuUnhealthy(std::uint64_t xid) {
  switch (xid) {
    case 13:   // graphics engine exception (an application's bad kernel)
    case 31:   // GPU memory page fault (an application's bad address)
    case 43:   // GPU stopped processing (an application was stopped)
    case 45:   // preemptive cleanup (a process was killed)
    case 68:   // video processor exception
    case 109:  // context switch timeout
      return false;
    default:
      return true;
  }
}

NodeReader::NodeReader(device::Backend& backend, NodeReaderOptions options)
    : backend_(backend), options_(std::move(options)) {}

absl::StatusOr<NodeSnapshot> NodeReader::Read() {
  absl::StatusOr<std::vector<device::GpuInfo>> gpus = backend_.ListGpus();
  if (!gpus.ok()) return gpus.status();
  if (absl::StatusOr<std::vector<device::XidEvent>> xids = backend_.TakeXidEvents(); xids.ok()) {
    for (const device::XidEvent& event : *xids) {
      if (XidMakesGpuUnhealthy(event.xid) && !xid_failures_.contains(event.gpu)) {
        xid_failures_[event.gpu] = absl::StrCat("critical Xid ", event.xid);
      }
    }
  }
  NodeSnapshot node;
  for (const device::GpuInfo& info : *gpus) {
    NodeGpu gpu;
    gpu.index = info.index;
    gpu.uuid = info.uuid;
    gpu.product = info.name;
    gpu.model = info.model != nullptr ? info.model->id : "";
    gpu.pci_bus_id = info.pci_bus_id;
    gpu.memory_mib = info.memory_total_mib;
    gpu.mig_enabled = info.mig_current == device::MigMode::kEnabled;
    const std::string bus = SysfsBusId(info.pci_bus_id);
    if (!bus.empty()) {
      gpu.device_minor =
          NumberAfter(absl::StrCat(options_.proc_root, "/driver/nvidia/gpus/", bus, "/information"),
                      "Device Minor:");
      std::ifstream numa(absl::StrCat(options_.sys_root, "/bus/pci/devices/", bus, "/numa_node"));
      int value = -1;
      if (numa >> value && value >= 0) gpu.numa_node = value;
    }
    if (absl::StatusOr<device::MemoryInfo> memory = backend_.GetMemory(info.index); !memory.ok()) {
      gpu.healthy = false;
      gpu.unhealthy_reason = absl::StrCat("memory cannot be read: ", memory.status().message());
    } else if (auto failure = xid_failures_.find(info.index); failure != xid_failures_.end()) {
      gpu.healthy = false;
      gpu.unhealthy_reason = failure->second;
    }
    if (gpu.mig_enabled) {
      absl::StatusOr<std::vector<device::GpuInstanceProfileInfo>> profiles =
          backend_.ListGpuInstanceProfiles(info.index);
      absl::StatusOr<std::vector<device::GpuInstanceInfo>> instances =
          backend_.ListGpuInstances(info.index);
      if (!profiles.ok() || !instances.ok()) {
        gpu.healthy = false;
        gpu.unhealthy_reason =
            absl::StrCat("MIG instances cannot be read: ",
                         (!profiles.ok() ? profiles.status() : instances.status()).message());
      } else {
        const int minor = gpu.device_minor >= 0 ? gpu.device_minor : gpu.index;
        const std::string caps =
            absl::StrCat(options_.proc_root, "/driver/nvidia/capabilities/gpu", minor, "/mig");
        for (const device::GpuInstanceInfo& gi : *instances) {
          auto profile = std::find_if(profiles->begin(), profiles->end(),
                                      [&](const auto& p) { return p.id == gi.profile_id; });
          absl::StatusOr<std::vector<device::ComputeInstanceInfo>> cis =
              backend_.ListComputeInstances(info.index, gi.id);
          if (profile == profiles->end() || !cis.ok()) continue;
          for (const device::ComputeInstanceInfo& ci : *cis) {
            MigDevice mig;
            mig.gi = gi.id;
            mig.ci = ci.id;
            mig.profile = profile->name;
            mig.gi_slices = profile->slices;
            mig.ci_slices = ci.size;
            mig.start = gi.start;
            mig.memory_mib = profile->memory_mib;
            mig.uuid = ci.uuid;
            mig.gi_cap_minor =
                NumberAfter(absl::StrCat(caps, "/gi", gi.id, "/access"), "DeviceFileMinor:");
            mig.ci_cap_minor = NumberAfter(
                absl::StrCat(caps, "/gi", gi.id, "/ci", ci.id, "/access"), "DeviceFileMinor:");
            gpu.mig_devices.push_back(std::move(mig));
          }
        }
      }
    }
    node.gpus.push_back(std::move(gpu));
  }
  return node;
}

}  // namespace gpuslice::k8s
