#include "gpuslice/k8s/plugin.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "deviceplugin_v1beta1.grpc.pb.h"

namespace gpuslice::k8s {
namespace {

grpc::StatusCode ToGrpc(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case absl::StatusCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case absl::StatusCode::kFailedPrecondition:
      return grpc::StatusCode::FAILED_PRECONDITION;
    case absl::StatusCode::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

void FillResponse(const ContainerAllocation& allocation, v1beta1::ContainerAllocateResponse* out) {
  for (const auto& [name, value] : allocation.envs) (*out->mutable_envs())[name] = value;
  for (const MountSpec& mount : allocation.mounts) {
    v1beta1::Mount* m = out->add_mounts();
    m->set_container_path(mount.container_path);
    m->set_host_path(mount.host_path);
    m->set_read_only(mount.read_only);
  }
  for (const DeviceNode& node : allocation.devices) {
    v1beta1::DeviceSpec* d = out->add_devices();
    d->set_container_path(node.container_path);
    d->set_host_path(node.host_path);
    d->set_permissions(node.permissions);
  }
  for (const auto& [name, value] : allocation.annotations) {
    (*out->mutable_annotations())[name] = value;
  }
}

// (inode, change time in ns) of a file, or nullopt when it is not there.
std::optional<std::pair<std::uint64_t, std::int64_t>> FileIdentity(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  return std::make_pair(
      static_cast<std::uint64_t>(st.st_ino),
      static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec);
}

}  // namespace

std::string PluginSocketName(const std::string& prefix, const std::string& resource) {
  const size_t slash = resource.find('/');
  return absl::StrCat(prefix, slash == std::string::npos ? resource : resource.substr(slash + 1),
                      ".sock");
}

struct DevicePlugin::Server {
  class Service;
  std::string resource;
  std::string socket_path;
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> grpc;
  std::atomic<bool> stopping{false};
};

class DevicePlugin::Server::Service final : public v1beta1::DevicePlugin::Service {
 public:
  Service(DevicePlugin& plugin, DevicePlugin::Server& server) : plugin_(plugin), server_(server) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* options) override {
    options->set_pre_start_required(false);
    options->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    std::unique_lock lock(plugin_.mu_);
    std::vector<PluginDevice> last;
    bool first = true;
    std::uint64_t seen = 0;
    while (!plugin_.stopping_ && !server_.stopping && !context->IsCancelled()) {
      if (first || plugin_.version_ != seen) {
        seen = plugin_.version_;
        const auto found = plugin_.resources_.find(server_.resource);
        std::vector<PluginDevice> current =
            found == plugin_.resources_.end() ? std::vector<PluginDevice>{} : found->second;
        if (first || current != last) {
          v1beta1::ListAndWatchResponse response;
          for (const PluginDevice& device : current) {
            v1beta1::Device* d = response.add_devices();
            d->set_id(device.id);
            d->set_health(std::string(device.healthy ? kHealthy : kUnhealthy));
            if (device.numa_node >= 0) d->mutable_topology()->add_nodes()->set_id(device.numa_node);
          }
          lock.unlock();
          const bool written = writer->Write(response);
          lock.lock();
          if (!written) break;
          plugin_.Log(absl::StrCat(server_.resource, ": sent ", current.size(), " devices"));
          last = std::move(current);
          first = false;
        }
      }
      plugin_.changed_.wait_for(lock, std::chrono::milliseconds(100));
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override {
    NodeSnapshot node;
    {
      std::lock_guard lock(plugin_.mu_);
      node = plugin_.snapshot_;
    }
    for (const v1beta1::ContainerPreferredAllocationRequest& container :
         request->container_requests()) {
      const std::vector<std::string> available(container.available_deviceids().begin(),
                                               container.available_deviceids().end());
      const std::vector<std::string> must(container.must_include_deviceids().begin(),
                                          container.must_include_deviceids().end());
      const std::vector<std::string> chosen =
          PreferredDevices(node, plugin_.options_.allocate.sharing, server_.resource, available,
                           must, container.allocation_size(), plugin_.options_.policy);
      v1beta1::ContainerPreferredAllocationResponse* out = response->add_container_responses();
      for (const std::string& id : chosen) out->add_deviceids(id);
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override {
    NodeSnapshot node;
    {
      std::lock_guard lock(plugin_.mu_);
      node = plugin_.snapshot_;
    }
    for (const v1beta1::ContainerAllocateRequest& container : request->container_requests()) {
      const std::vector<std::string> ids(container.devices_ids().begin(),
                                         container.devices_ids().end());
      absl::StatusOr<ContainerAllocation> allocation =
          AllocateContainer(node, server_.resource, ids, plugin_.options_.allocate);
      if (!allocation.ok()) {
        plugin_.Log(absl::StrCat(server_.resource, ": refused ", absl::StrJoin(ids, ","), ": ",
                                 allocation.status().message()));
        return grpc::Status(ToGrpc(allocation.status().code()),
                            std::string(allocation.status().message()));
      }
      FillResponse(*allocation, response->add_container_responses());
      plugin_.Log(absl::StrCat(server_.resource, ": allocated ", absl::StrJoin(ids, ",")));
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }

 private:
  DevicePlugin& plugin_;
  DevicePlugin::Server& server_;
};

DevicePlugin::DevicePlugin(SnapshotSource source, PluginOptions options)
    : source_(std::move(source)), options_(std::move(options)) {}

DevicePlugin::~DevicePlugin() { Stop(); }

void DevicePlugin::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

absl::Status DevicePlugin::Start() {
  if (absl::Status sharing = ValidateSharing(options_.allocate.sharing); !sharing.ok()) {
    return sharing;
  }
  struct stat st {};
  if (stat(options_.plugin_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the device-plugin directory ", options_.plugin_dir,
                     " is not there (is this a Kubernetes node? --plugin-dir)"));
  }
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  absl::StatusOr<NodeSnapshot> node = source_();
  if (!node.ok()) return node.status();
  NodeResources resources = ResourcesOf(*node, options_.allocate.sharing);
  for (const std::string& skipped : resources.skipped) Log(absl::StrCat("not offered: ", skipped));
  if (options_.on_change) options_.on_change(*node);
  {
    std::lock_guard lock(mu_);
    snapshot_ = std::move(*node);
    resources_ = std::move(resources.resources);
    ++version_;
  }
  for (const auto& [resource, devices] : this->resources()) {
    if (absl::Status started = StartServer(resource); !started.ok()) {
      StopServers();
      return started;
    }
  }
  RegisterPending();
  return absl::OkStatus();
}

absl::Status DevicePlugin::StartServer(const std::string& resource) {
  auto server = std::make_unique<Server>();
  server->resource = resource;
  server->socket_path =
      absl::StrCat(options_.plugin_dir, "/", PluginSocketName(options_.socket_prefix, resource));
  unlink(server->socket_path.c_str());
  server->service = std::make_unique<Server::Service>(*this, *server);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix:", server->socket_path),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(server->service.get());
  server->grpc = builder.BuildAndStart();
  if (server->grpc == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve ", resource, " on ", server->socket_path));
  }
  Log(absl::StrCat(resource, ": serving on ", server->socket_path));
  servers_[resource] = std::move(server);
  std::lock_guard lock(mu_);
  registered_[resource] = false;
  return absl::OkStatus();
}

void DevicePlugin::StopServers() {
  for (auto& [resource, server] : servers_) server->stopping = true;
  changed_.notify_all();
  for (auto& [resource, server] : servers_) {
    server->grpc->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server->grpc->Wait();
    unlink(server->socket_path.c_str());
  }
  servers_.clear();
  std::lock_guard lock(mu_);
  registered_.clear();
}

void DevicePlugin::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  StopServers();
}

void DevicePlugin::RegisterPending() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_retry_) return;
  const std::string kubelet = absl::StrCat(options_.plugin_dir, "/", options_.kubelet_socket);
  std::vector<std::string> pending;
  {
    std::lock_guard lock(mu_);
    for (const auto& [resource, done] : registered_) {
      if (!done) pending.push_back(resource);
    }
  }
  for (const std::string& resource : pending) {
    const auto identity = FileIdentity(kubelet);
    if (!identity) {
      Log(absl::StrCat(resource, ": kubelet is not there (", kubelet, "); will retry"));
      next_retry_ = now + options_.retry;
      return;
    }
    auto channel =
        grpc::CreateChannel(absl::StrCat("unix:", kubelet), grpc::InsecureChannelCredentials());
    auto stub = v1beta1::Registration::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1beta1::RegisterRequest request;
    request.set_version(std::string(kDevicePluginApiVersion));
    request.set_endpoint(PluginSocketName(options_.socket_prefix, resource));
    request.set_resource_name(resource);
    request.mutable_options()->set_get_preferred_allocation_available(true);
    request.mutable_options()->set_pre_start_required(false);
    v1beta1::Empty reply;
    const grpc::Status status = stub->Register(&context, request, &reply);
    if (!status.ok()) {
      Log(absl::StrCat(resource, ": registration with kubelet failed: ", status.error_message(),
                       "; will retry"));
      next_retry_ = now + options_.retry;
      return;
    }
    {
      std::lock_guard lock(mu_);
      registered_[resource] = true;
      ++registrations_;
    }
    kubelet_inode_ = identity->first;
    kubelet_ctime_ns_ = identity->second;
    Log(absl::StrCat(resource, ": registered with kubelet"));
  }
}

bool DevicePlugin::KubeletRestarted() {
  if (kubelet_inode_ == 0) return false;
  const auto identity =
      FileIdentity(absl::StrCat(options_.plugin_dir, "/", options_.kubelet_socket));
  if (!identity) return false;  // kubelet is down: wait until it is back
  if (identity->first != kubelet_inode_ || identity->second != kubelet_ctime_ns_) return true;
  for (const auto& [resource, server] : servers_) {
    if (!FileIdentity(server->socket_path)) return true;  // kubelet removed our sockets
  }
  return false;
}

absl::Status DevicePlugin::Poll() {
  absl::Status read = absl::OkStatus();
  absl::StatusOr<NodeSnapshot> node = source_();
  if (!node.ok()) {
    read = node.status();
  } else {
    NodeResources resources = ResourcesOf(*node, options_.allocate.sharing);
    std::unique_lock lock(mu_);
    if (*node != snapshot_) {
      snapshot_ = std::move(*node);
      if (resources.resources != resources_) {
        resources_ = std::move(resources.resources);
        Log(absl::StrCat("the node changed: ", resources_.size(), " resources"));
      }
      ++version_;
      changed_.notify_all();
      if (options_.on_change) {
        const NodeSnapshot changed = snapshot_;
        lock.unlock();
        options_.on_change(changed);
      }
    }
  }
  if (KubeletRestarted()) {
    Log("kubelet restarted: serving and registering again");
    StopServers();
    kubelet_inode_ = 0;
    next_retry_ = {};
    {
      std::lock_guard lock(mu_);
      stopping_ = false;
    }
  }
  for (const auto& [resource, devices] : this->resources()) {
    if (servers_.contains(resource)) continue;
    if (absl::Status started = StartServer(resource); !started.ok()) {
      Log(std::string(started.message()));
      if (read.ok()) read = started;
    }
  }
  RegisterPending();
  return read;
}

void DevicePlugin::Run(const std::atomic<bool>& stop) {
  while (!stop.load()) {
    if (absl::Status polled = Poll(); !polled.ok()) {
      Log(absl::StrCat("reading the node failed: ", polled.message()));
    }
    const auto until = std::chrono::steady_clock::now() + options_.poll;
    while (!stop.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

ResourceMap DevicePlugin::resources() const {
  std::lock_guard lock(mu_);
  return resources_;
}

std::vector<std::string> DevicePlugin::registered() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [resource, done] : registered_) {
    if (done) out.push_back(resource);
  }
  return out;
}

int DevicePlugin::registrations() const {
  std::lock_guard lock(mu_);
  return registrations_;
}

}  // namespace gpuslice::k8s
