#include "gpuslice/k8s/pod_resources.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "gpuslice/k8s/devices.h"
#include "podresources_v1.grpc.pb.h"

namespace gpuslice::k8s {
namespace {

bool Offered(const std::string& resource) {
  return resource == kWholeGpuResource || resource == kShareResource ||
         resource.starts_with(kMigResourcePrefix);
}

}  // namespace

absl::StatusOr<std::vector<PodDevice>> ListPodDevices(const std::string& socket_path,
                                                      std::chrono::milliseconds timeout) {
  auto channel =
      grpc::CreateChannel(absl::StrCat("unix:", socket_path), grpc::InsecureChannelCredentials());
  auto stub = v1::PodResourcesLister::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::ListPodResourcesRequest request;
  v1::ListPodResourcesResponse response;
  const grpc::Status status = stub->List(&context, request, &response);
  if (!status.ok()) {
    const absl::StatusCode code = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                          status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                                      ? absl::StatusCode::kUnavailable
                                      : absl::StatusCode::kInternal;
    return absl::Status(code, absl::StrCat("kubelet pod-resources API at ", socket_path, ": ",
                                           status.error_message()));
  }
  std::vector<PodDevice> out;
  for (const v1::PodResources& pod : response.pod_resources()) {
    for (const v1::ContainerResources& container : pod.containers()) {
      for (const v1::ContainerDevices& devices : container.devices()) {
        if (!Offered(devices.resource_name())) continue;
        for (const std::string& id : devices.device_ids()) {
          out.push_back(
              {pod.namespace_(), pod.name(), container.name(), devices.resource_name(), id});
        }
      }
    }
  }
  return out;
}

Attribution Attribute(const std::vector<PodDevice>& devices) {
  Attribution out;
  // Share units: the lowest unit of each container on each GPU names its slice.
  std::map<std::tuple<std::string, std::string, std::string, std::string>, int> lowest;
  for (const PodDevice& device : devices) {
    const PodOwner owner{device.pod_namespace, device.pod, device.container};
    if (device.resource == kShareResource) {
      absl::StatusOr<ShareUnit> unit = ParseShareId(device.device_id);
      if (!unit.ok()) continue;
      const auto key =
          std::make_tuple(device.pod_namespace, device.pod, device.container, unit->gpu_uuid);
      const auto found = lowest.find(key);
      if (found == lowest.end() || unit->unit < found->second) lowest[key] = unit->unit;
      continue;
    }
    out.by_uuid[device.device_id] = owner;
  }
  for (const auto& [key, unit] : lowest) {
    const auto& [pod_namespace, pod, container, gpu] = key;
    out.by_slice[absl::StrCat("k8s-", gpu, "-", unit)] = PodOwner{pod_namespace, pod, container};
  }
  return out;
}

}  // namespace gpuslice::k8s
