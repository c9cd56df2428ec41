// gpuslice/k8s/allocate.h: the device plugin's answers to kubelet, as plain values (pure).
//
// AllocateContainer answers one ContainerAllocateRequest of one resource (gpuslice/k8s/devices.h):
//   * every container gets NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES with the UUIDs of its
//     devices (GPU UUIDs, MIG UUIDs; a share's GPU UUID), in the order kubelet gave them, and
//     the device nodes: /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia<minor>
//     of each GPU, and for MIG devices /dev/nvidia-caps/nvidia-cap<N> of the GI and of the CI
//     (when their minors are known), all "rw" below `dev_root`;
//   * share units (all on one GPU) also get the CUDA interposer and its limits: LD_PRELOAD of the
//     interposer mounted read-only at `interposer_container_path`, GPUSLICE_COMPUTE_SHARE_MILLI =
//     units × 1000 / units per GPU, GPUSLICE_VRAM_LIMIT_MIB = units × GPU memory / units per GPU,
//     GPUSLICE_SLICE = k8s-<GPU UUID>-<lowest unit> (one accounting per container, unique on the
//     node while the units are held), and the slice directory (GPUSLICE_SHM_DIR) mounted from the
//     host so that the node's agent sees the slice's accounting.
// Errors (InvalidArgument / NotFound / FailedPrecondition, naming the device): an ID the node
// does not have, an ID of another resource, share units from two GPUs or past the unit count, a
// share without an interposer on the host, an empty request.
//
// PreferredDevices answers GetPreferredAllocation with the placement engine
// (gpuslice/place/engine.h): the node's GPUs become a one-node cluster in the state the available
// IDs describe, the request becomes a place::Request, and the engine's policy chooses the GPUs
// (shares: the GPU the policy prefers, which wastes the least room for more requests of the
// same size and keeps empty GPUs empty; whole GPUs: on one NUMA node when one holds them;
// MIG: the instance on the GPU the policy prefers). The answer always holds the must-include IDs
// and at most `size` IDs, all from `available`; when the engine finds no fit (kubelet asks only
// for what it can give, so this means units scattered over GPUs), it falls back to the available
// IDs in node order.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/k8s/devices.h"

namespace gpuslice::k8s {

struct AllocateOptions {
  SharingConfig sharing;
  std::string interposer_host_path;  // "" = no interposer on this host: shares are refused
  std::string interposer_container_path = "/usr/lib/gpuslice/libgpuslice-cuda.so";
  std::string shm_host_dir = "/dev/shm/gpuslice";
  std::string shm_container_dir = "/dev/shm/gpuslice";
  std::string dev_root = "/dev";
  bool device_specs = true;  // pass /dev nodes (false: leave them to the NVIDIA container runtime)
};

struct MountSpec {
  std::string container_path;
  std::string host_path;
  bool read_only = false;
  friend bool operator==(const MountSpec&, const MountSpec&) = default;
};

struct DeviceNode {
  std::string container_path;
  std::string host_path;
  std::string permissions = "rw";
  friend bool operator==(const DeviceNode&, const DeviceNode&) = default;
};

struct ContainerAllocation {
  std::map<std::string, std::string> envs;
  std::vector<MountSpec> mounts;
  std::vector<DeviceNode> devices;
  std::map<std::string, std::string> annotations;
};

absl::StatusOr<ContainerAllocation> AllocateContainer(const NodeSnapshot& node,
                                                      std::string_view resource,
                                                      const std::vector<std::string>& ids,
                                                      const AllocateOptions& options);

// REQUIRES nothing of the inputs: unknown IDs are ignored, size <= 0 gives must_include only.
std::vector<std::string> PreferredDevices(const NodeSnapshot& node, const SharingConfig& sharing,
                                          std::string_view resource,
                                          const std::vector<std::string>& available,
                                          const std::vector<std::string>& must_include, int size,
                                          std::string_view policy = "gpuslice");

}  // namespace gpuslice::k8s
