// A kubelet stand-in for the device plugin's tests: it speaks the real gRPC protocol as kubelet
// does (../shared/reference/kubernetes-apis.md §1.5-1.7 and §2):
//   * serves v1beta1.Registration on <dir>/kubelet.sock; Register checks the version and the
//     resource name as kubelet does, dials the plugin's endpoint in <dir>, calls
//     GetDevicePluginOptions before answering, then follows ListAndWatch on its own thread and
//     keeps every device list received (each replaces the previous one, as in kubelet);
//   * calls Allocate / GetPreferredAllocation with one container request each, as kubelet does;
//   * Restart() acts like a kubelet restart: the server and every stream stop, every socket file
//     of <dir> is removed, and kubelet.sock is created again;
//   * serves v1.PodResourcesLister on a second socket, answering List from the allocations made
//     through Allocate (pod, namespace and container given by the test).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "deviceplugin_v1beta1.grpc.pb.h"

namespace gpuslice::k8s::testing {

struct SeenDevice {
  std::string id;
  std::string health;
  std::vector<std::int64_t> numa;
  friend bool operator==(const SeenDevice&, const SeenDevice&) = default;
};

class KubeletStandIn {
 public:
  // Serves <dir>/kubelet.sock and the pod-resources API on <pod_resources_socket>.
  KubeletStandIn(std::string dir, std::string pod_resources_socket);
  ~KubeletStandIn();

  void Restart();

  // Waits until the latest device list of `resource` satisfies `accept`; returns the time it
  // took, or an error (with the last list seen) on timeout.
  absl::StatusOr<std::chrono::milliseconds> WaitFor(
      const std::string& resource,
      const std::function<bool(const std::vector<SeenDevice>&)>& accept,
      std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));
  std::vector<SeenDevice> Latest(const std::string& resource);
  // Successful registrations of `resource` since construction.
  int Registrations(const std::string& resource);
  // Options the plugin gave for `resource` at registration.
  v1beta1::DevicePluginOptions Options(const std::string& resource);
  std::vector<std::string> RejectedRegistrations();

  // Allocate for one container; on success the devices are recorded for pod-resources' List.
  absl::StatusOr<v1beta1::ContainerAllocateResponse> Allocate(
      const std::string& resource, const std::vector<std::string>& ids,
      const std::string& pod_namespace = "default", const std::string& pod = "pod",
      const std::string& container = "main");
  absl::StatusOr<std::vector<std::string>> Preferred(const std::string& resource,
                                                     const std::vector<std::string>& available,
                                                     const std::vector<std::string>& must_include,
                                                     int size);

  class Registration;
  class PodResources;
  struct Endpoint;

 private:
  void Serve();
  void StopServing();
  absl::Status Connect(const std::string& resource, const std::string& endpoint);

  const std::string dir_;
  const std::string pod_resources_socket_;
  std::unique_ptr<Registration> registration_;
  std::unique_ptr<PodResources> pod_resources_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> pod_resources_server_;

  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints_;  // by resource
  std::map<std::string, std::vector<SeenDevice>> latest_;
  std::map<std::string, int> registrations_;
  std::map<std::string, v1beta1::DevicePluginOptions> options_;
  std::vector<std::string> rejected_;
  std::vector<std::shared_ptr<Endpoint>> retired_;  // streams to join
  // pod → container → resource → device ids, for pod-resources.
  struct Assigned {
    std::string pod_namespace, pod, container, resource;
    std::vector<std::string> ids;
  };
  std::vector<Assigned> assigned_;
};

}  // namespace gpuslice::k8s::testing
