#include "kubelet_standin.h"

#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "podresources_v1.grpc.pb.h"

namespace gpuslice::k8s::testing {

// One registered plugin: its channel and the ListAndWatch stream kubelet follows.
struct KubeletStandIn::Endpoint {
  std::string resource;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
  grpc::ClientContext stream_context;
  std::thread reader;
};

class KubeletStandIn::Registration final : public v1beta1::Registration::Service {
 public:
  explicit Registration(KubeletStandIn& kubelet) : kubelet_(kubelet) {}

  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request,
                        v1beta1::Empty*) override {
    auto reject = [&](const std::string& message) {
      std::lock_guard lock(kubelet_.mu_);
      kubelet_.rejected_.push_back(message);
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
    };
    // kubelet's checks (plugin/v1beta1/server.go): a supported version and an extended resource
    // name (a '/', not in kubernetes.io, not "requests.").
    if (request->version() != "v1beta1") {
      return reject(absl::StrCat("requested API version \"", request->version(),
                                 "\" is not supported by kubelet. Supported version is "
                                 "\"v1beta1\""));
    }
    const std::string& name = request->resource_name();
    if (name.find('/') == std::string::npos || name.find("kubernetes.io/") != std::string::npos ||
        name.starts_with("requests.") || name.size() > 63 + 1 + 253) {
      return reject(absl::StrCat("the ResourceName \"", name, "\" is invalid"));
    }
    if (request->endpoint().find('/') != std::string::npos) {
      return reject(absl::StrCat("endpoint \"", request->endpoint(), "\" is not a file name"));
    }
    if (absl::Status connected = kubelet_.Connect(name, request->endpoint()); !connected.ok()) {
      return reject(std::string(connected.message()));
    }
    return grpc::Status::OK;
  }

 private:
  KubeletStandIn& kubelet_;
};

class KubeletStandIn::PodResources final : public v1::PodResourcesLister::Service {
 public:
  explicit PodResources(KubeletStandIn& kubelet) : kubelet_(kubelet) {}

  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* response) override {
    std::lock_guard lock(kubelet_.mu_);
    std::map<std::pair<std::string, std::string>, v1::PodResources*> pods;
    for (const Assigned& assigned : kubelet_.assigned_) {
      v1::PodResources*& pod = pods[{assigned.pod_namespace, assigned.pod}];
      if (pod == nullptr) {
        pod = response->add_pod_resources();
        pod->set_name(assigned.pod);
        pod->set_namespace_(assigned.pod_namespace);
      }
      v1::ContainerResources* container = nullptr;
      for (v1::ContainerResources& c : *pod->mutable_containers()) {
        if (c.name() == assigned.container) container = &c;
      }
      if (container == nullptr) {
        container = pod->add_containers();
        container->set_name(assigned.container);
      }
      v1::ContainerDevices* devices = container->add_devices();
      devices->set_resource_name(assigned.resource);
      for (const std::string& id : assigned.ids) devices->add_device_ids(id);
    }
    // Something kubelet reports that the plugin must skip: another vendor's resource.
    v1::PodResources* other = response->add_pod_resources();
    other->set_name("nic-user");
    other->set_namespace_("net");
    v1::ContainerDevices* nic = other->add_containers()->add_devices();
    nic->set_resource_name("example.com/nic");
    nic->add_device_ids("nic-0");
    return grpc::Status::OK;
  }

 private:
  KubeletStandIn& kubelet_;
};

KubeletStandIn::KubeletStandIn(std::string dir, std::string pod_resources_socket)
    : dir_(std::move(dir)), pod_resources_socket_(std::move(pod_resources_socket)) {
  registration_ = std::make_unique<Registration>(*this);
  pod_resources_ = std::make_unique<PodResources>(*this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix:", pod_resources_socket_),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(pod_resources_.get());
  pod_resources_server_ = builder.BuildAndStart();
  Serve();
}

KubeletStandIn::~KubeletStandIn() {
  StopServing();
  pod_resources_server_->Shutdown(std::chrono::system_clock::now());
}

void KubeletStandIn::Serve() {
  const std::string socket = absl::StrCat(dir_, "/kubelet.sock");
  unlink(socket.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix:", socket), grpc::InsecureServerCredentials());
  builder.RegisterService(registration_.get());
  server_ = builder.BuildAndStart();
}

void KubeletStandIn::StopServing() {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_.reset();
  }
  std::vector<std::shared_ptr<Endpoint>> endpoints;
  {
    std::lock_guard lock(mu_);
    for (auto& [resource, endpoint] : endpoints_) endpoints.push_back(endpoint);
    endpoints_.clear();
    endpoints.insert(endpoints.end(), retired_.begin(), retired_.end());
    retired_.clear();
  }
  for (const auto& endpoint : endpoints) {
    endpoint->stream_context.TryCancel();
    if (endpoint->reader.joinable()) endpoint->reader.join();
  }
}

void KubeletStandIn::Restart() {
  StopServing();
  // kubelet's CleanupPluginDirectory: every socket file of the directory goes.
  if (DIR* dir = opendir(dir_.c_str()); dir != nullptr) {
    while (dirent* entry = readdir(dir)) {
      const std::string path = absl::StrCat(dir_, "/", entry->d_name);
      struct stat st {};
      if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path.c_str());
    }
    closedir(dir);
  }
  {
    std::lock_guard lock(mu_);
    latest_.clear();
  }
  Serve();
}

absl::Status KubeletStandIn::Connect(const std::string& resource, const std::string& endpoint) {
  auto connection = std::make_shared<Endpoint>();
  connection->resource = resource;
  connection->channel = grpc::CreateChannel(absl::StrCat("unix:", dir_, "/", endpoint),
                                            grpc::InsecureChannelCredentials());
  if (!connection->channel->WaitForConnected(std::chrono::system_clock::now() +
                                             std::chrono::seconds(10))) {
    return absl::UnavailableError(absl::StrCat("failed to dial device plugin: ", endpoint));
  }
  connection->stub = v1beta1::DevicePlugin::NewStub(connection->channel);
  v1beta1::DevicePluginOptions options;
  {
    grpc::ClientContext context;
    v1beta1::Empty empty;
    const grpc::Status status = connection->stub->GetDevicePluginOptions(&context, empty, &options);
    if (!status.ok()) {
      return absl::UnavailableError(
          absl::StrCat("GetDevicePluginOptions failed: ", status.error_message()));
    }
  }
  {
    std::lock_guard lock(mu_);
    if (auto old = endpoints_.find(resource); old != endpoints_.end()) {
      old->second->stream_context.TryCancel();
      retired_.push_back(old->second);
    }
    endpoints_[resource] = connection;
    options_[resource] = options;
    ++registrations_[resource];
  }
  Endpoint* raw = connection.get();
  connection->reader = std::thread([this, raw] {
    v1beta1::Empty empty;
    std::unique_ptr<grpc::ClientReader<v1beta1::ListAndWatchResponse>> reader =
        raw->stub->ListAndWatch(&raw->stream_context, empty);
    v1beta1::ListAndWatchResponse response;
    while (reader->Read(&response)) {
      std::vector<SeenDevice> devices;
      for (const v1beta1::Device& device : response.devices()) {
        SeenDevice seen{device.id(), device.health(), {}};
        for (const v1beta1::NUMANode& node : device.topology().nodes()) {
          seen.numa.push_back(node.id());
        }
        devices.push_back(std::move(seen));
      }
      std::lock_guard lock(mu_);
      latest_[raw->resource] = std::move(devices);
      changed_.notify_all();
    }
    reader->Finish();
  });
  changed_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::chrono::milliseconds> KubeletStandIn::WaitFor(
    const std::string& resource, const std::function<bool(const std::vector<SeenDevice>&)>& accept,
    std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  const bool met = changed_.wait_for(lock, timeout, [&] {
    const auto found = latest_.find(resource);
    return found != latest_.end() && accept(found->second);
  });
  if (!met) {
    std::vector<std::string> ids;
    for (const SeenDevice& device : latest_[resource]) {
      ids.push_back(absl::StrCat(device.id, "(", device.health, ")"));
    }
    return absl::DeadlineExceededError(
        absl::StrCat(resource, ": last list seen: [", absl::StrJoin(ids, " "), "]"));
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start);
}

std::vector<SeenDevice> KubeletStandIn::Latest(const std::string& resource) {
  std::lock_guard lock(mu_);
  return latest_[resource];
}

int KubeletStandIn::Registrations(const std::string& resource) {
  std::lock_guard lock(mu_);
  return registrations_[resource];
}

v1beta1::DevicePluginOptions KubeletStandIn::Options(const std::string& resource) {
  std::lock_guard lock(mu_);
  return options_[resource];
}

std::vector<std::string> KubeletStandIn::RejectedRegistrations() {
  std::lock_guard lock(mu_);
  return rejected_;
}

absl::StatusOr<v1beta1::ContainerAllocateResponse> KubeletStandIn::Allocate(
    const std::string& resource, const std::vector<std::string>& ids,
    const std::string& pod_namespace, const std::string& pod, const std::string& container) {
  std::shared_ptr<Endpoint> endpoint;
  {
    std::lock_guard lock(mu_);
    const auto found = endpoints_.find(resource);
    if (found == endpoints_.end()) return absl::NotFoundError(resource + " is not registered");
    endpoint = found->second;
  }
  v1beta1::AllocateRequest request;
  v1beta1::ContainerAllocateRequest* one = request.add_container_requests();
  for (const std::string& id : ids) one->add_devices_ids(id);
  v1beta1::AllocateResponse response;
  grpc::ClientContext context;
  const grpc::Status status = endpoint->stub->Allocate(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  if (response.container_responses_size() == 0) {
    return absl::InternalError("no containers return in allocation response");
  }
  std::lock_guard lock(mu_);
  assigned_.push_back({pod_namespace, pod, container, resource, ids});
  return response.container_responses(0);
}

absl::StatusOr<std::vector<std::string>> KubeletStandIn::Preferred(
    const std::string& resource, const std::vector<std::string>& available,
    const std::vector<std::string>& must_include, int size) {
  std::shared_ptr<Endpoint> endpoint;
  {
    std::lock_guard lock(mu_);
    const auto found = endpoints_.find(resource);
    if (found == endpoints_.end()) return absl::NotFoundError(resource + " is not registered");
    endpoint = found->second;
  }
  v1beta1::PreferredAllocationRequest request;
  v1beta1::ContainerPreferredAllocationRequest* one = request.add_container_requests();
  for (const std::string& id : available) one->add_available_deviceids(id);
  for (const std::string& id : must_include) one->add_must_include_deviceids(id);
  one->set_allocation_size(size);
  v1beta1::PreferredAllocationResponse response;
  grpc::ClientContext context;
  const grpc::Status status = endpoint->stub->GetPreferredAllocation(&context, request, &response);
  if (!status.ok()) return absl::InternalError(status.error_message());
  if (response.container_responses_size() != 1) {
    return absl::InternalError("expected one container response");
  }
  return std::vector<std::string>(response.container_responses(0).deviceids().begin(),
                                  response.container_responses(0).deviceids().end());
}

}  // namespace gpuslice::k8s::testing
