// gpuslice/k8s/pod_resources.h: which pod holds which device, from the kubelet's pod-resources API
// (v1.PodResourcesLister on /var/lib/kubelet/pod-resources/kubelet.sock; wire facts in
// ../shared/reference/kubernetes-apis.md §2). No guessing from annotations or timestamps: kubelet
// reports the device IDs it handed each container.
//
//   * ListPodDevices calls List (one unary call, `timeout`) and flattens the answer to one entry
//   per
//     (container, device ID) of the resources gpuslice offers (nvidia.com/gpu, nvidia.com/mig-*,
//     gpuslice.io/gpu-share); other resources are left out. Errors: Unavailable when the socket
//     cannot be reached, the gRPC status otherwise.
//   * Attribute (pure) ties those entries to what gpuslice's metrics name: a GPU or MIG UUID for
//     whole GPUs and MIG devices, and for share units the GPU UUID and the container's slice id
//     (k8s-<GPU UUID>-<lowest unit>, as AllocateContainer names it in gpuslice/k8s/allocate.h).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gpuslice::k8s {

inline constexpr std::string_view kDefaultPodResourcesSocket =
    "/var/lib/kubelet/pod-resources/kubelet.sock";

struct PodDevice {
  std::string pod_namespace;
  std::string pod;
  std::string container;
  std::string resource;
  std::string device_id;
  friend bool operator==(const PodDevice&, const PodDevice&) = default;
};

absl::StatusOr<std::vector<PodDevice>> ListPodDevices(
    const std::string& socket_path,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));

// The pod labels of a device, as dcgm-exporter names them (pod, namespace, container).
struct PodOwner {
  std::string pod_namespace;
  std::string pod;
  std::string container;
  friend bool operator==(const PodOwner&, const PodOwner&) = default;
};

struct Attribution {
  std::map<std::string, PodOwner> by_uuid;   // GPU UUID (whole) or MIG UUID → owner
  std::map<std::string, PodOwner> by_slice;  // software slice id (shares) → owner
};

Attribution Attribute(const std::vector<PodDevice>& devices);

}  // namespace gpuslice::k8s
