#include "gpuslice/dra/kubelet_plugin.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dra_health_v1.grpc.pb.h"
#include "dra_health_v1alpha1.grpc.pb.h"
#include "dra_v1.grpc.pb.h"
#include "dra_v1beta1.grpc.pb.h"
#include "pluginregistration.grpc.pb.h"

namespace gpuslice::dra {
namespace {

namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
namespace registration = ::pluginregistration;

// sun_path is 108 bytes including the terminating NUL.
constexpr std::size_t kMaxSocketPath = 107;
constexpr char kPluginType[] = "DRAPlugin";
constexpr const char* kSupportedServices[] = {"v1.DRAPlugin", "v1beta1.DRAPlugin",
                                              "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"};
constexpr auto kShutdownGrace = std::chrono::seconds(2);
// How often a waiting health stream looks whether kubelet cancelled it.
constexpr auto kCancelCheck = std::chrono::milliseconds(50);

// What identifies one socket file: a file deleted and created again differs in inode or ctime.
struct FileId {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::int64_t ctime_ns = 0;
  friend bool operator==(const FileId&, const FileId&) = default;
};

std::optional<FileId> IdentityOf(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
                static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec};
}

absl::Status CheckSocketPath(const std::string& path) {
  if (path.size() <= kMaxSocketPath) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the socket path ", path, " is ", path.size(),
                   " bytes long; a Unix socket path holds at most ", kMaxSocketPath,
                   " (sun_path is 108 bytes with its NUL): choose a shorter directory"));
}

// Removes a stale file on `path` (an old socket of ours, left by a crash).
absl::Status RemoveStale(const std::string& path) {
  if (unlink(path.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cannot remove the stale file ", path, ": ", std::strerror(errno)));
}

// At most kMaxHealthMessage bytes, as kubelet keeps them: 1021 + "...". The cut backs off to a
// UTF-8 character boundary (kubelet's protobuf rejects strings that are not UTF-8).
std::string Truncated(const std::string& message) {
  if (message.size() <= kMaxHealthMessage) return message;
  std::size_t cut = kMaxHealthMessage - 3;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return message.substr(0, cut) + "...";
}

// The wire values of the health enum (UNKNOWN = 0, HEALTHY = 1, UNHEALTHY = 2; same in v1 and
// v1alpha1).
int WireHealth(HealthStatus health) {
  switch (health) {
    case HealthStatus::kHealthy:
      return 1;
    case HealthStatus::kUnhealthy:
      return 2;
    case HealthStatus::kUnknown:
      break;
  }
  return 0;
}

// The message types of one DRAPlugin version.
struct DraV1 {
  static constexpr char kVersion[] = "v1";
  using Service = drav1::DRAPlugin::Service;
  using PrepareRequest = drav1::NodePrepareResourcesRequest;
  using PrepareResponse = drav1::NodePrepareResourcesResponse;
  using UnprepareRequest = drav1::NodeUnprepareResourcesRequest;
  using UnprepareResponse = drav1::NodeUnprepareResourcesResponse;
};
struct DraV1beta1 {
  static constexpr char kVersion[] = "v1beta1";
  using Service = drav1beta1::DRAPlugin::Service;
  using PrepareRequest = drav1beta1::NodePrepareResourcesRequest;
  using PrepareResponse = drav1beta1::NodePrepareResourcesResponse;
  using UnprepareRequest = drav1beta1::NodeUnprepareResourcesRequest;
  using UnprepareResponse = drav1beta1::NodeUnprepareResourcesResponse;
};
// The message types of one DRAResourceHealth version.
struct HealthV1 {
  static constexpr char kVersion[] = "v1";
  using Service = ::v1::DRAResourceHealth::Service;
  using Request = ::v1::NodeWatchResourcesRequest;
  using Response = ::v1::NodeWatchResourcesResponse;
};
struct HealthV1alpha1 {
  static constexpr char kVersion[] = "v1alpha1";
  using Service = ::v1alpha1::DRAResourceHealth::Service;
  using Request = ::v1alpha1::NodeWatchResourcesRequest;
  using Response = ::v1alpha1::NodeWatchResourcesResponse;
};

}  // namespace

struct KubeletPlugin::State {
  State(ClaimHandler& claim_handler, KubeletPluginOptions plugin_options)
      : handler(claim_handler), options(std::move(plugin_options)) {}

  void Log(const std::string& line) const {
    if (options.log) options.log(line);
  }
  void RegistrationStatus(bool registered, const std::string& error);

  ClaimHandler& handler;
  const KubeletPluginOptions options;

  mutable std::mutex mu;
  std::condition_variable changed;  // health_generation, stopping or an endpoint's closing
  std::uint64_t health_generation = 0;
  bool stopping = false;
  int registrations = 0;
  int unannounced = 0;  // registrations on_registered has not been called for
  std::string last_error;
  int refused_polls = -1;  // polls since kubelet's refusal; -1 = no refusal pending
};

void KubeletPlugin::State::RegistrationStatus(bool registered, const std::string& error) {
  {
    std::lock_guard lock(mu);
    if (registered) {
      ++registrations;
      ++unannounced;
      last_error.clear();
      refused_polls = -1;
    } else {
      last_error = error.empty() ? "kubelet refused the plugin without a reason" : error;
      refused_polls = 0;
    }
  }
  Log(registered ? "registered with kubelet"
                 : absl::StrCat("kubelet refused the registration: ", error));
}

struct KubeletPlugin::Endpoint {
  absl::Status Serve();
  bool Intact() const { return IdentityOf(path) == id; }
  void Close(State& state);

  std::string path;
  std::vector<std::unique_ptr<grpc::Service>> services;
  std::unique_ptr<grpc::Server> server;
  std::optional<FileId> id;
  bool closing = false;  // guarded by State::mu; this server's health streams end when set
};

absl::Status KubeletPlugin::Endpoint::Serve() {
  if (absl::Status removed = RemoveStale(path); !removed.ok()) return removed;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix:", path), grpc::InsecureServerCredentials());
  for (const auto& service : services) builder.RegisterService(service.get());
  server = builder.BuildAndStart();
  if (server == nullptr) return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", path));
  id = IdentityOf(path);
  if (!id) {
    server->Shutdown();
    server.reset();
    return absl::UnavailableError(absl::StrCat("the socket ", path, " vanished at once"));
  }
  return absl::OkStatus();
}

void KubeletPlugin::Endpoint::Close(State& state) {
  {
    std::lock_guard lock(state.mu);
    closing = true;
  }
  state.changed.notify_all();
  if (server != nullptr) {
    server->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
    server->Wait();
    server.reset();
  }
  if (Intact()) unlink(path.c_str());  // only our own file, not one that replaced it
}

namespace {

using State = KubeletPlugin::State;

// The claims of a request: those with namespace, uid and name (each UID once) for the handler,
// and per-claim errors for the others.
struct SortedClaims {
  std::vector<ClaimRef> complete;
  std::map<std::string, std::string> incomplete;  // uid -> error
};

template <class Request>
SortedClaims SortClaims(const Request& request) {
  SortedClaims out;
  std::set<std::string> seen;
  for (const auto& claim : request.claims()) {
    ClaimRef ref{claim.namespace_(), claim.uid(), claim.name()};
    if (ref.namespace_name.empty() || ref.uid.empty() || ref.name.empty()) {
      out.incomplete[ref.uid] = absl::StrCat(
          "incomplete claim reference (namespace \"", ref.namespace_name, "\", name \"", ref.name,
          "\", uid \"", ref.uid, "\"): namespace, uid and name are required");
    } else if (seen.insert(ref.uid).second) {
      out.complete.push_back(std::move(ref));
    }
  }
  for (const std::string& uid : seen) out.incomplete.erase(uid);
  return out;
}

// One line per call: how many claims, which failed and why, answers dropped.
void LogOutcome(const State& state, const std::string& call,
                const std::map<std::string, std::string>& errors, std::size_t foreign) {
  std::vector<std::string> failed;
  for (const auto& [uid, error] : errors) {
    if (!error.empty()) failed.push_back(absl::StrCat(uid, ": ", error));
  }
  std::string line = absl::StrCat(call, ": ", errors.size(), " claims, ", failed.size(), " failed");
  if (!failed.empty()) absl::StrAppend(&line, " (", absl::StrJoin(failed, "; "), ")");
  if (foreign > 0) absl::StrAppend(&line, "; dropped ", foreign, " answers for claims not asked");
  state.Log(line);
}

template <class ProtoDevice>
void FillDevice(const PreparedDevice& device, ProtoDevice* out) {
  for (const std::string& name : device.request_names) out->add_request_names(name);
  out->set_pool_name(device.pool_name);
  out->set_device_name(device.device_name);
  for (const std::string& id : device.cdi_device_ids) out->add_cdi_device_ids(id);
  if constexpr (requires { out->set_share_id(device.share_id); }) {
    if (!device.share_id.empty()) out->set_share_id(device.share_id);
  }
}

template <class Api>
void PrepareClaims(State& state, const typename Api::PrepareRequest& request,
                   typename Api::PrepareResponse* response) {
  SortedClaims claims = SortClaims(request);
  std::map<std::string, ClaimPrepareResult> answers;
  if (!claims.complete.empty()) answers = state.handler.Prepare(claims.complete);
  std::map<std::string, std::string> errors = claims.incomplete;
  auto& out = *response->mutable_claims();
  std::size_t answered = 0;
  for (const ClaimRef& claim : claims.complete) {
    auto& entry = out[claim.uid];
    const auto found = answers.find(claim.uid);
    if (found == answers.end()) {
      entry.set_error(kNoAnswerError);
    } else if (!found->second.error.empty()) {
      entry.set_error(found->second.error);
    } else {
      for (const PreparedDevice& device : found->second.devices) {
        FillDevice(device, entry.add_devices());
      }
    }
    if (found != answers.end()) ++answered;
    errors[claim.uid] = entry.error();
  }
  for (const auto& [uid, error] : claims.incomplete) out[uid].set_error(error);
  LogOutcome(state, absl::StrCat(Api::kVersion, " NodePrepareResources"), errors,
             answers.size() - answered);
}

template <class Api>
void UnprepareClaims(State& state, const typename Api::UnprepareRequest& request,
                     typename Api::UnprepareResponse* response) {
  SortedClaims claims = SortClaims(request);
  std::map<std::string, std::string> answers;
  if (!claims.complete.empty()) answers = state.handler.Unprepare(claims.complete);
  std::map<std::string, std::string> errors = claims.incomplete;
  auto& out = *response->mutable_claims();
  std::size_t answered = 0;
  for (const ClaimRef& claim : claims.complete) {
    const auto found = answers.find(claim.uid);
    const std::string error = found == answers.end() ? kNoAnswerError : found->second;
    if (found != answers.end()) ++answered;
    out[claim.uid].set_error(error);
    errors[claim.uid] = error;
  }
  for (const auto& [uid, error] : claims.incomplete) out[uid].set_error(error);
  LogOutcome(state, absl::StrCat(Api::kVersion, " NodeUnprepareResources"), errors,
             answers.size() - answered);
}

template <class Api>
class DraService final : public Api::Service {
 public:
  explicit DraService(State& state) : state_(state) {}

  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const typename Api::PrepareRequest* request,
                                    typename Api::PrepareResponse* response) override {
    PrepareClaims<Api>(state_, *request, response);
    return grpc::Status::OK;
  }
  grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                      const typename Api::UnprepareRequest* request,
                                      typename Api::UnprepareResponse* response) override {
    UnprepareClaims<Api>(state_, *request, response);
    return grpc::Status::OK;
  }

 private:
  State& state_;
};

template <class Response>
Response HealthResponse(const std::vector<DeviceHealth>& devices) {
  Response response;
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  for (const DeviceHealth& device : devices) {
    auto* out = response.add_devices();
    out->mutable_device()->set_pool_name(device.pool_name);
    out->mutable_device()->set_device_name(device.device_name);
    using Enum = std::remove_cvref_t<decltype(out->health())>;
    out->set_health(static_cast<Enum>(WireHealth(device.health)));
    out->set_last_updated_time(now);
    out->set_message(Truncated(device.message));
  }
  return response;
}

// Waits until the list is due again: after a HealthChanged() since `generation` (updated), or
// health_resend after the last send. False when the stream is to end.
bool AwaitHealthTurn(State& state, const bool& closing, grpc::ServerContext& context,
                     std::uint64_t& generation) {
  const auto due = std::chrono::steady_clock::now() + state.options.health_resend;
  std::unique_lock lock(state.mu);
  while (true) {
    if (state.stopping || closing || context.IsCancelled()) return false;
    if (state.health_generation != generation) {
      generation = state.health_generation;
      return true;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= due) return true;
    state.changed.wait_for(lock,
                           std::min<std::chrono::steady_clock::duration>(due - now, kCancelCheck));
  }
}

template <class Api>
class HealthService final : public Api::Service {
 public:
  HealthService(State& state, const bool& closing) : state_(state), closing_(closing) {}

  grpc::Status NodeWatchResources(grpc::ServerContext* context, const typename Api::Request*,
                                  grpc::ServerWriter<typename Api::Response>* writer) override {
    std::uint64_t generation = 0;
    {
      std::lock_guard lock(state_.mu);
      generation = state_.health_generation;
    }
    state_.Log(absl::StrCat(Api::kVersion, " health stream opened"));
    do {
      const auto response = HealthResponse<typename Api::Response>(state_.handler.Health());
      if (!writer->Write(response)) break;
    } while (AwaitHealthTurn(state_, closing_, *context, generation));
    state_.Log(absl::StrCat(Api::kVersion, " health stream ended"));
    return grpc::Status::OK;
  }

 private:
  State& state_;
  const bool& closing_;
};

class RegistrationService final : public registration::Registration::Service {
 public:
  RegistrationService(State& state, std::string endpoint)
      : state_(state), endpoint_(std::move(endpoint)) {}

  grpc::Status GetInfo(grpc::ServerContext*, const registration::InfoRequest*,
                       registration::PluginInfo* info) override {
    info->set_type(kPluginType);
    info->set_name(state_.options.driver_name);
    info->set_endpoint(endpoint_);
    for (const char* service : kSupportedServices) info->add_supported_versions(service);
    return grpc::Status::OK;
  }
  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*,
                                        const registration::RegistrationStatus* status,
                                        registration::RegistrationStatusResponse*) override {
    state_.RegistrationStatus(status->plugin_registered(), status->error());
    return grpc::Status::OK;
  }

 private:
  State& state_;
  const std::string endpoint_;
};

}  // namespace

KubeletPlugin::KubeletPlugin(ClaimHandler& handler, KubeletPluginOptions options)
    : state_(std::make_unique<State>(handler, std::move(options))) {}

KubeletPlugin::~KubeletPlugin() { Stop(); }

void KubeletPlugin::Log(const std::string& line) const { state_->Log(line); }

absl::Status KubeletPlugin::Start() {
  const KubeletPluginOptions& options = state_->options;
  if (dra_ != nullptr || registration_ != nullptr) {
    return absl::FailedPreconditionError("the DRA kubelet plugin is already started");
  }
  if (options.driver_name.empty() || options.driver_name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad DRA driver name \"", options.driver_name, "\""));
  }
  std::error_code error;
  if (!std::filesystem::is_directory(options.registry_dir, error)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the plugin registry directory ", options.registry_dir,
                     " is not there (kubelet creates it: is this a node, is it mounted?)"));
  }
  const std::filesystem::path plugin_dir =
      options.plugin_dir.empty() ? std::filesystem::path(kDefaultPluginsDir) / options.driver_name
                                 : std::filesystem::path(options.plugin_dir);
  dra_path_ = std::filesystem::absolute(plugin_dir / "dra.sock").lexically_normal().string();
  registration_path_ = std::filesystem::absolute(std::filesystem::path(options.registry_dir) /
                                                 (options.driver_name + "-reg.sock"))
                           .lexically_normal()
                           .string();
  for (const std::string& path : {dra_path_, registration_path_}) {
    if (absl::Status fits = CheckSocketPath(path); !fits.ok()) return fits;
  }
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = false;
  }
  absl::Status served = ServeDra();
  if (served.ok()) served = ServeRegistration();
  if (!served.ok()) Stop();  // a later Poll serves nothing
  return served;
}

absl::Status KubeletPlugin::ServeDra() {
  std::error_code error;
  const std::filesystem::path dir = std::filesystem::path(dra_path_).parent_path();
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the plugin directory ", dir.string(), ": ", error.message()));
  }
  auto endpoint = std::make_unique<Endpoint>();
  endpoint->path = dra_path_;
  endpoint->services.push_back(std::make_unique<DraService<DraV1>>(*state_));
  endpoint->services.push_back(std::make_unique<DraService<DraV1beta1>>(*state_));
  endpoint->services.push_back(
      std::make_unique<HealthService<HealthV1>>(*state_, endpoint->closing));
  endpoint->services.push_back(
      std::make_unique<HealthService<HealthV1alpha1>>(*state_, endpoint->closing));
  if (absl::Status served = endpoint->Serve(); !served.ok()) return served;
  Log(absl::StrCat("serving the DRA services on ", dra_path_));
  dra_ = std::move(endpoint);
  return absl::OkStatus();
}

absl::Status KubeletPlugin::ServeRegistration() {
  auto endpoint = std::make_unique<Endpoint>();
  endpoint->path = registration_path_;
  endpoint->services.push_back(std::make_unique<RegistrationService>(*state_, dra_path_));
  if (absl::Status served = endpoint->Serve(); !served.ok()) return served;
  Log(absl::StrCat("serving the registration on ", registration_path_));
  registration_ = std::move(endpoint);
  return absl::OkStatus();
}

absl::Status KubeletPlugin::RestoreSockets() {
  const bool dra_lost = dra_ == nullptr || !dra_->Intact();
  if (dra_lost) {
    if (dra_ != nullptr) {
      Log(absl::StrCat(dra_path_, " is gone or replaced: serving it again"));
      dra_->Close(*state_);
      dra_.reset();
    }
    if (absl::Status served = ServeDra(); !served.ok()) return served;
  }
  bool refusal_due = false;
  {
    std::lock_guard lock(state_->mu);
    if (state_->refused_polls >= 0 && ++state_->refused_polls >= kRefusedRetryPolls) {
      state_->refused_polls = -1;
      refusal_due = true;
    }
  }
  if (refusal_due) {
    Log(absl::StrCat("kubelet refused the registration (", last_registration_error(),
                     "): re-creating ", registration_path_));
  }
  if (dra_lost || refusal_due || registration_ == nullptr || !registration_->Intact()) {
    if (registration_ != nullptr) {
      if (!dra_lost && !refusal_due) {
        Log(absl::StrCat(registration_path_, " is gone or replaced: serving it again"));
      }
      registration_->Close(*state_);
      registration_.reset();
    }
    return ServeRegistration();
  }
  return absl::OkStatus();
}

absl::Status KubeletPlugin::Poll() {
  if (dra_path_.empty()) return absl::FailedPreconditionError("the plugin was not started");
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopping) return absl::FailedPreconditionError("the plugin is stopped");
  }
  absl::Status restored = RestoreSockets();
  int unannounced = 0;
  {
    std::lock_guard lock(state_->mu);
    unannounced = std::exchange(state_->unannounced, 0);
  }
  if (unannounced > 0 && state_->options.on_registered) state_->options.on_registered();
  return restored;
}

void KubeletPlugin::Run(const std::atomic<bool>& stop) {
  while (!stop.load()) {
    if (absl::Status polled = Poll(); !polled.ok()) {
      Log(absl::StrCat("poll: ", polled.message()));
    }
    const auto until = std::chrono::steady_clock::now() + state_->options.poll;
    while (!stop.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

void KubeletPlugin::HealthChanged() {
  {
    std::lock_guard lock(state_->mu);
    ++state_->health_generation;
  }
  state_->changed.notify_all();
}

void KubeletPlugin::Stop() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->changed.notify_all();
  // The registration goes first: kubelet deregisters the plugin before its DRA socket closes.
  if (registration_ != nullptr) registration_->Close(*state_);
  registration_.reset();
  if (dra_ != nullptr) dra_->Close(*state_);
  dra_.reset();
}

int KubeletPlugin::registrations() const {
  std::lock_guard lock(state_->mu);
  return state_->registrations;
}

std::string KubeletPlugin::last_registration_error() const {
  std::lock_guard lock(state_->mu);
  return state_->last_error;
}

std::string KubeletPlugin::dra_socket_path() const { return dra_path_; }

std::string KubeletPlugin::registration_socket_path() const { return registration_path_; }

}  // namespace gpuslice::dra
