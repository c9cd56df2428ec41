// gpuslice/k8s/node_reader.h: the device plugin's view of the machine, read through the device
// layer (gpuslice/device/backend.h), so the same code runs on NVML and on the simulator.
//
// Read() returns a NodeSnapshot (gpuslice/k8s/devices.h): every GPU with its UUID, product, catalog
// model, MIG mode and MIG devices (each GI with its compute instances, profile names as the driver
// reports them), and what the kernel says about it when the files are there:
//   * /dev/nvidia<minor>: "Device Minor:" of <proc>/driver/nvidia/gpus/<PCI bus id>/information;
//   * NUMA node: <sys>/bus/pci/devices/<PCI bus id>/numa_node;
//   * MIG capability minors: "DeviceFileMinor:" of
//     <proc>/driver/nvidia/capabilities/gpu<minor>/mig/gi<gi>/access and .../ci<ci>/access.
// Health: a GPU is unhealthy while its memory cannot be read (e.g. GPU_IS_LOST), and from the
// first critical Xid event on it (TakeXidEvents) until the reader is re-created, except the Xids
// that an application causes (13, 31, 43, 45, 68, 109), as NVIDIA's device plugin does. The
// reason is kept in NodeGpu::unhealthy_reason.
//
// Errors: only when the GPUs cannot be listed at all (the backend's status). Not thread-safe: one
// thread reads.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/k8s/devices.h"

namespace gpuslice::k8s {

struct NodeReaderOptions {
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
};

class NodeReader {
 public:
  // `backend` must outlive the reader.
  NodeReader(device::Backend& backend, NodeReaderOptions options = {});
  absl::StatusOr<NodeSnapshot> Read();

 private:
  device::Backend& backend_;
  NodeReaderOptions options_;
  std::map<int, std::string> xid_failures_;  // GPU index → first critical Xid, sticky
};

// Whether an Xid means the GPU itself is in trouble (not an application's fault).
bool XidMakesGpuUnhealthy(std::uint64_t xid);

}  // namespace gpuslice::k8s
