#include "dra/kubelet_dra_standin.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dra_health_v1.grpc.pb.h"
#include "dra_health_v1alpha1.grpc.pb.h"
#include "dra_v1.grpc.pb.h"
#include "dra_v1beta1.grpc.pb.h"
#include "pluginregistration.grpc.pb.h"

namespace gpuslice::dra::kubelet_standin {
namespace {

namespace registration = ::pluginregistration;
using Clock = std::chrono::steady_clock;

constexpr auto kGetInfoTimeout = std::chrono::seconds(1);
constexpr auto kNotifyTimeout = std::chrono::seconds(5);
constexpr auto kConnectTimeout = std::chrono::seconds(5);
constexpr auto kCallTimeout = std::chrono::seconds(45);

struct DraV1 {
  using Service = ::k8s::io::kubelet::pkg::apis::dra::v1::DRAPlugin;
  using PrepareRequest = ::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesRequest;
  using PrepareResponse = ::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesResponse;
  using UnprepareRequest = ::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesRequest;
  using UnprepareResponse = ::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesResponse;
};
struct DraV1beta1 {
  using Service = ::k8s::io::kubelet::pkg::apis::dra::v1beta1::DRAPlugin;
  using PrepareRequest = ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodePrepareResourcesRequest;
  using PrepareResponse = ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodePrepareResourcesResponse;
  using UnprepareRequest =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodeUnprepareResourcesRequest;
  using UnprepareResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodeUnprepareResourcesResponse;
};
struct HealthV1 {
  using Service = ::v1::DRAResourceHealth;
  using Request = ::v1::NodeWatchResourcesRequest;
  using Response = ::v1::NodeWatchResourcesResponse;
};
struct HealthV1alpha1 {
  using Service = ::v1alpha1::DRAResourceHealth;
  using Request = ::v1alpha1::NodeWatchResourcesRequest;
  using Response = ::v1alpha1::NodeWatchResourcesResponse;
};

// A socket file as the watcher saw it; a file created again on the same path differs.
struct FileStamp {
  dev_t device = 0;
  ino_t inode = 0;
  std::int64_t changed_ns = 0;
  friend bool operator==(const FileStamp&, const FileStamp&) = default;
};

// Every socket file under `dir`, names starting with '.' left out (directories too).
std::map<std::string, FileStamp> SocketFiles(const std::string& dir) {
  std::map<std::string, FileStamp> out;
  std::error_code error;
  std::filesystem::recursive_directory_iterator it(dir, error), end;
  for (; !error && it != end; it.increment(error)) {
    if (it->path().filename().string().starts_with(".")) {
      it.disable_recursion_pending();
      continue;
    }
    struct stat st {};
    if (lstat(it->path().c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    out[it->path().string()] =
        FileStamp{st.st_dev, st.st_ino, st.st_ctim.tv_sec * 1'000'000'000LL + st.st_ctim.tv_nsec};
  }
  return out;
}

// A channel of its own (no subchannel shared with earlier channels), as a fresh kubelet has.
std::shared_ptr<grpc::Channel> Dial(const std::string& path) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(absl::StrCat("unix:", path), grpc::InsecureChannelCredentials(),
                                   args);
}

template <class Duration>
std::chrono::system_clock::time_point In(Duration duration) {
  return std::chrono::system_clock::now() + duration;
}

bool Contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

void Notify(registration::Registration::Stub& stub, bool registered, const std::string& error) {
  grpc::ClientContext context;
  context.set_deadline(In(kNotifyTimeout));
  registration::RegistrationStatus status;
  status.set_plugin_registered(registered);
  status.set_error(error);
  registration::RegistrationStatusResponse ignored;
  (void)stub.NotifyRegistrationStatus(&context, status, &ignored);  // kubelet only logs a failure
}

// Kubelet 1.34+'s checks of GetInfo's answer; chooses the services. "" = valid.
std::string Validate(const StandInOptions& options, SeenPlugin& seen) {
  if (seen.type != "DRAPlugin") {
    return absl::StrCat("no handler registered for plugin type: ", seen.type, " at socket ",
                        seen.socket);
  }
  if (seen.name.empty()) return "plugin name is empty";
  if (!seen.endpoint.empty() && !seen.endpoint.starts_with("/")) {
    return absl::StrCat("endpoint ", seen.endpoint, " is not an absolute path");
  }
  if (seen.supported_versions.empty()) {
    return "empty list of supported gRPC services (aka supported versions)";
  }
  for (const std::string& service : seen.supported_versions) {
    if (Contains(options.dra_services, service)) {
      seen.dra_service = service;
      break;
    }
  }
  if (seen.dra_service.empty()) {
    return absl::StrCat(
        "none of services supported by the plugin (", absl::StrJoin(seen.supported_versions, ","),
        ") are supported by the kubelet (", absl::StrJoin(options.dra_services, ","), ")");
  }
  for (const std::string& service : options.health_services) {
    if (Contains(seen.supported_versions, service)) {
      seen.health_service = service;
      break;
    }
  }
  return "";
}

// Kubelet's check of a response map: one entry per claim asked for, no other.
template <class Map>
absl::Status CheckEntries(const std::string& call, const std::vector<StandInClaim>& claims,
                          const Map& entries) {
  std::set<std::string> asked;
  for (const StandInClaim& claim : claims) asked.insert(claim.uid);
  for (const auto& [uid, entry] : entries) {
    if (!asked.contains(uid)) {
      return absl::InternalError(absl::StrCat(call, " returned result for unknown claim ", uid));
    }
  }
  if (entries.size() < asked.size()) {
    return absl::InternalError(
        absl::StrCat(call, " skipped ", asked.size() - entries.size(), " ResourceClaims"));
  }
  return absl::OkStatus();
}

template <class Request>
Request RequestFor(const std::vector<StandInClaim>& claims) {
  Request request;
  for (const StandInClaim& claim : claims) {
    auto* out = request.add_claims();
    out->set_namespace_(claim.namespace_name);
    out->set_uid(claim.uid);
    out->set_name(claim.name);
  }
  return request;
}

template <class WireDevice>
SeenDevice DeviceFromWire(const WireDevice& device) {
  SeenDevice out;
  out.request_names.assign(device.request_names().begin(), device.request_names().end());
  out.pool_name = device.pool_name();
  out.device_name = device.device_name();
  out.cdi_device_ids.assign(device.cdi_device_ids().begin(), device.cdi_device_ids().end());
  if constexpr (requires { device.has_share_id(); }) {
    if (device.has_share_id()) out.share_id = device.share_id();
  }
  return out;
}

template <class Api>
absl::StatusOr<std::map<std::string, SeenClaim>> CallPrepare(
    const std::shared_ptr<grpc::Channel>& channel, const std::vector<StandInClaim>& claims) {
  auto stub = Api::Service::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(In(kCallTimeout));
  typename Api::PrepareResponse response;
  const grpc::Status status = stub->NodePrepareResources(
      &context, RequestFor<typename Api::PrepareRequest>(claims), &response);
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("NodePrepareResources: ", status.error_message()));
  }
  if (absl::Status checked = CheckEntries("NodePrepareResources", claims, response.claims());
      !checked.ok()) {
    return checked;
  }
  std::map<std::string, SeenClaim> out;
  for (const auto& [uid, entry] : response.claims()) {
    SeenClaim& claim = out[uid];
    claim.error = entry.error();
    for (const auto& device : entry.devices()) claim.devices.push_back(DeviceFromWire(device));
  }
  return out;
}

template <class Api>
absl::StatusOr<std::map<std::string, std::string>> CallUnprepare(
    const std::shared_ptr<grpc::Channel>& channel, const std::vector<StandInClaim>& claims) {
  auto stub = Api::Service::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(In(kCallTimeout));
  typename Api::UnprepareResponse response;
  const grpc::Status status = stub->NodeUnprepareResources(
      &context, RequestFor<typename Api::UnprepareRequest>(claims), &response);
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("NodeUnprepareResources: ", status.error_message()));
  }
  if (absl::Status checked = CheckEntries("NodeUnprepareResources", claims, response.claims());
      !checked.ok()) {
    return checked;
  }
  std::map<std::string, std::string> out;
  for (const auto& [uid, entry] : response.claims()) out[uid] = entry.error();
  return out;
}

template <class Response>
std::vector<SeenHealth> HealthFromWire(const Response& response) {
  std::vector<SeenHealth> out;
  for (const auto& device : response.devices()) {
    out.push_back(SeenHealth{device.device().pool_name(), device.device().device_name(),
                             static_cast<int>(device.health()), device.last_updated_time(),
                             device.health_check_timeout_seconds(), device.message()});
  }
  return out;
}

}  // namespace

struct KubeletDraStandIn::Socket {
  FileStamp stamp;
  bool settled = false;  // registered, or failed in a way kubelet does not retry
  Clock::time_point retry_at{};
};

struct KubeletDraStandIn::Plugin {
  SeenPlugin seen;
  std::uint64_t order = 0;
  std::shared_ptr<grpc::Channel> channel;
  std::thread health_thread;
  // Guarded by the stand-in's mu_.
  bool closing = false;
  std::shared_ptr<grpc::ClientContext> health_call;
  std::vector<SeenHealth> health;
  int health_messages = 0;
  std::vector<std::string> health_ends;
};

KubeletDraStandIn::KubeletDraStandIn(StandInOptions options) : options_(std::move(options)) {
  StartWatcher();
}

KubeletDraStandIn::~KubeletDraStandIn() {
  StopWatcher();
  std::vector<std::string> paths;
  {
    std::lock_guard lock(mu_);
    for (const auto& [path, plugin] : plugins_) paths.push_back(path);
  }
  for (const std::string& path : paths) Drop(path);
}

void KubeletDraStandIn::StartWatcher() {
  {
    std::lock_guard lock(mu_);
    stop_watcher_ = false;
  }
  watcher_ = std::thread([this] { Watch(); });
}

void KubeletDraStandIn::StopWatcher() {
  {
    std::lock_guard lock(mu_);
    stop_watcher_ = true;
  }
  wake_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

void KubeletDraStandIn::Watch() {
  while (true) {
    Walk();
    std::unique_lock lock(mu_);
    if (wake_.wait_for(lock, options_.poll, [&] { return stop_watcher_; })) return;
  }
}

void KubeletDraStandIn::Walk() {
  {
    std::lock_guard lock(mu_);
    if (!watching_) return;
  }
  const std::map<std::string, FileStamp> files = SocketFiles(options_.registry_dir);
  for (auto it = sockets_.begin(); it != sockets_.end();) {
    const auto found = files.find(it->first);
    if (found != files.end() && found->second == it->second->stamp) {
      ++it;
      continue;
    }
    Drop(it->first);  // removed, or created again (a new file on the same path)
    it = sockets_.erase(it);
  }
  for (const auto& [path, stamp] : files) {
    std::shared_ptr<Socket>& socket = sockets_[path];
    if (socket == nullptr) socket = std::make_shared<Socket>(Socket{stamp});
    if (!socket->settled && Clock::now() >= socket->retry_at) Register(path, *socket);
  }
}

void KubeletDraStandIn::Register(const std::string& path, Socket& socket) {
  auto stub = registration::Registration::NewStub(Dial(path));
  registration::PluginInfo info;
  grpc::ClientContext context;
  context.set_deadline(In(kGetInfoTimeout));
  if (!stub->GetInfo(&context, registration::InfoRequest(), &info).ok()) {
    socket.retry_at = Clock::now() + options_.retry;
    return;
  }
  SeenPlugin seen{
      path,
      info.type(),
      info.name(),
      info.endpoint(),
      std::vector<std::string>(info.supported_versions().begin(), info.supported_versions().end()),
      "",
      ""};
  std::string refusal = Validate(options_, seen);
  if (!refusal.empty()) {
    socket.retry_at = Clock::now() + options_.retry;  // not recorded: retried
  } else {
    socket.settled = true;  // from here on kubelet waits for a new socket file
    std::lock_guard lock(mu_);
    refusal = refusal_;
  }
  if (refusal.empty()) {
    if (absl::Status connected = Connect(path, seen); !connected.ok()) {
      refusal = absl::StrCat("plugin registration failed: ", connected.message());
    }
  }
  if (!refusal.empty()) {
    Notify(*stub, false, refusal);
    std::lock_guard lock(mu_);
    refusals_.push_back(refusal);
    return;
  }
  Notify(*stub, true, "");
  std::lock_guard lock(mu_);
  ++registrations_;
}

absl::Status KubeletDraStandIn::Connect(const std::string& path, SeenPlugin seen) {
  const std::string endpoint = seen.endpoint.empty() ? path : seen.endpoint;
  auto channel = Dial(endpoint);
  if (!channel->WaitForConnected(In(kConnectTimeout))) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", endpoint));
  }
  auto plugin = std::make_shared<Plugin>();
  plugin->seen = std::move(seen);
  plugin->channel = std::move(channel);
  {
    std::lock_guard lock(mu_);
    plugin->order = ++order_;
    plugins_[path] = plugin;
  }
  if (plugin->seen.health_service == "v1.DRAResourceHealth") {
    plugin->health_thread = std::thread([this, plugin] { WatchHealth<HealthV1>(plugin); });
  } else if (plugin->seen.health_service == "v1alpha1.DRAResourceHealth") {
    plugin->health_thread = std::thread([this, plugin] { WatchHealth<HealthV1alpha1>(plugin); });
  }
  return absl::OkStatus();
}

template <class Api>
void KubeletDraStandIn::WatchHealth(std::shared_ptr<Plugin> plugin) {
  auto stub = Api::Service::NewStub(plugin->channel);
  while (true) {
    auto call = std::make_shared<grpc::ClientContext>();
    {
      std::lock_guard lock(mu_);
      if (plugin->closing) return;
      plugin->health_call = call;
    }
    auto reader = stub->NodeWatchResources(call.get(), typename Api::Request());
    typename Api::Response message;
    while (reader->Read(&message)) {
      std::vector<SeenHealth> list = HealthFromWire(message);
      std::lock_guard lock(mu_);
      plugin->health = std::move(list);
      ++plugin->health_messages;
    }
    const grpc::Status end = reader->Finish();
    std::unique_lock lock(mu_);
    plugin->health.clear();  // kubelet forgets the driver's health when the stream ends
    plugin->health_call.reset();
    plugin->health_ends.push_back(
        end.ok() ? "OK"
                 : absl::StrCat(static_cast<int>(end.error_code()), ": ", end.error_message()));
    if (wake_.wait_for(lock, options_.health_retry, [&] { return plugin->closing; })) return;
  }
}

void KubeletDraStandIn::Drop(const std::string& path) {
  std::shared_ptr<Plugin> plugin;
  {
    std::lock_guard lock(mu_);
    const auto found = plugins_.find(path);
    if (found == plugins_.end()) return;
    plugin = found->second;
    plugins_.erase(found);
    plugin->closing = true;
    if (plugin->health_call != nullptr) plugin->health_call->TryCancel();
  }
  wake_.notify_all();
  if (plugin->health_thread.joinable()) plugin->health_thread.join();
}

void KubeletDraStandIn::Restart() {
  StopWatcher();
  std::vector<std::string> paths;
  {
    std::lock_guard lock(mu_);
    for (const auto& [path, plugin] : plugins_) paths.push_back(path);
  }
  for (const std::string& path : paths) Drop(path);
  sockets_.clear();
  StartWatcher();
}

void KubeletDraStandIn::SetRefusal(const std::string& reason) {
  std::lock_guard lock(mu_);
  refusal_ = reason;
}

void KubeletDraStandIn::SetWatching(bool watching) {
  std::lock_guard lock(mu_);
  watching_ = watching;
}

void KubeletDraStandIn::DeleteSocketFile(const std::string& name) {
  std::error_code ignored;
  std::filesystem::remove(std::filesystem::path(options_.registry_dir) / name, ignored);
}

int KubeletDraStandIn::registrations() const {
  std::lock_guard lock(mu_);
  return registrations_;
}

std::vector<std::string> KubeletDraStandIn::refusals() const {
  std::lock_guard lock(mu_);
  return refusals_;
}

std::shared_ptr<KubeletDraStandIn::Plugin> KubeletDraStandIn::Newest(
    const std::string& driver) const {
  std::lock_guard lock(mu_);
  std::shared_ptr<Plugin> newest;
  for (const auto& [path, plugin] : plugins_) {
    if (plugin->seen.name == driver && (newest == nullptr || plugin->order > newest->order)) {
      newest = plugin;
    }
  }
  return newest;
}

std::optional<SeenPlugin> KubeletDraStandIn::plugin(const std::string& driver) const {
  const std::shared_ptr<Plugin> found = Newest(driver);
  if (found == nullptr) return std::nullopt;
  return found->seen;
}

std::vector<SeenHealth> KubeletDraStandIn::health(const std::string& driver) const {
  const std::shared_ptr<Plugin> found = Newest(driver);
  std::lock_guard lock(mu_);
  return found == nullptr ? std::vector<SeenHealth>{} : found->health;
}

int KubeletDraStandIn::health_messages(const std::string& driver) const {
  const std::shared_ptr<Plugin> found = Newest(driver);
  std::lock_guard lock(mu_);
  return found == nullptr ? 0 : found->health_messages;
}

std::vector<std::string> KubeletDraStandIn::health_ends(const std::string& driver) const {
  const std::shared_ptr<Plugin> found = Newest(driver);
  std::lock_guard lock(mu_);
  return found == nullptr ? std::vector<std::string>{} : found->health_ends;
}

absl::StatusOr<std::map<std::string, SeenClaim>> KubeletDraStandIn::Prepare(
    const std::vector<StandInClaim>& claims, const std::string& driver) {
  const std::shared_ptr<Plugin> plugin = Newest(driver);
  if (plugin == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("DRA driver ", driver, " is not registered"));
  }
  return plugin->seen.dra_service == "v1.DRAPlugin"
             ? CallPrepare<DraV1>(plugin->channel, claims)
             : CallPrepare<DraV1beta1>(plugin->channel, claims);
}

absl::StatusOr<std::map<std::string, std::string>> KubeletDraStandIn::Unprepare(
    const std::vector<StandInClaim>& claims, const std::string& driver) {
  const std::shared_ptr<Plugin> plugin = Newest(driver);
  if (plugin == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("DRA driver ", driver, " is not registered"));
  }
  return plugin->seen.dra_service == "v1.DRAPlugin"
             ? CallUnprepare<DraV1>(plugin->channel, claims)
             : CallUnprepare<DraV1beta1>(plugin->channel, claims);
}

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() >= until) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace gpuslice::dra::kubelet_standin
