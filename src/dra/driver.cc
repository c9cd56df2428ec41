#include "gpuslice/dra/driver.h"

#include <set>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra {

// kubelet's calls, answered by the node logic; one claim's failure is that claim's error only.
class Driver::Handler : public ClaimHandler {
 public:
  Handler(NodeDriver& node, std::string pool, std::function<void()> changed)
      : node_(node), pool_(std::move(pool)), changed_(std::move(changed)) {}

  std::map<std::string, ClaimPrepareResult> Prepare(const std::vector<ClaimRef>& claims) override {
    std::map<std::string, ClaimPrepareResult> out;
    for (const ClaimRef& claim : claims) {
      absl::StatusOr<std::vector<PreparedOut>> prepared =
          node_.Prepare(claim.namespace_name, claim.uid, claim.name);
      ClaimPrepareResult& result = out[claim.uid];
      if (!prepared.ok()) {
        result.error = ErrorText(prepared.status());
        continue;
      }
      for (const PreparedOut& p : *prepared) {
        result.devices.push_back({{p.request}, pool_, p.device, {p.cdi_id}, p.share_id});
      }
    }
    changed_();
    return out;
  }

  std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims) override {
    std::map<std::string, std::string> out;
    for (const ClaimRef& claim : claims) {
      const absl::Status s = node_.Unprepare(claim.uid);
      out[claim.uid] = s.ok() ? "" : ErrorText(s);
    }
    changed_();
    return out;
  }

  std::vector<DeviceHealth> Health() override {
    std::vector<DeviceHealth> out;
    for (const DeviceHealthOut& h : node_.Health()) {
      out.push_back({pool_, h.device, h.healthy ? HealthStatus::kHealthy : HealthStatus::kUnhealthy,
                     h.message});
    }
    return out;
  }

 private:
  static std::string ErrorText(const absl::Status& s) {
    return absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message());
  }
  NodeDriver& node_;
  std::string pool_;
  std::function<void()> changed_;
};

Driver::Driver(device::Backend& backend, const hw::Catalog& catalog, DriverOptions options)
    : backend_(backend),
      catalog_(catalog),
      options_(std::move(options)),
      backoff_(options_.backoff) {}

Driver::~Driver() { Stop(); }

void Driver::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

std::string Driver::last_publish_error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return last_error_;
}

absl::Status Driver::Start() {
  absl::StatusOr<k8s::KubeApiOptions> api_options = k8s::InClusterOptions(options_.api);
  if (!api_options.ok()) return api_options.status();
  absl::StatusOr<k8s::KubeApiClient> client = k8s::KubeApiClient::Create(*api_options);
  if (!client.ok()) return client.status();
  api_ = std::make_unique<DraApi>(std::move(*client));
  const DraApi* api = api_.get();
  absl::StatusOr<std::unique_ptr<NodeDriver>> node = NodeDriver::Create(
      backend_, catalog_,
      [api](const std::string& ns, const std::string& name) { return api->GetClaim(ns, name); },
      options_.node);
  if (!node.ok()) return node.status();
  node_ = std::move(*node);
  handler_ = std::make_unique<Handler>(*node_, options_.node.node_name, [this] { Wake(); });
  KubeletPluginOptions kubelet = options_.kubelet;
  kubelet.driver_name = options_.node.driver_name;
  if (!kubelet.log) kubelet.log = options_.log;
  kubelet.on_registered = [this] { registered_again_ = true; };
  kubelet_ = std::make_unique<KubeletPlugin>(*handler_, kubelet);
  if (absl::Status s = kubelet_->Start(); !s.ok()) return s;
  publisher_ = std::make_unique<SlicePublisher>(api_.get(), options_.node.node_name,
                                                options_.node.driver_name);
  pending_ = true;
  return absl::OkStatus();
}

void Driver::Tick() {
  if (kubelet_ == nullptr) return;
  if (absl::Status s = kubelet_->Poll(); !s.ok()) Log(absl::StrCat("kubelet: ", s.message()));
  (void)node_->Health();  // notices health changes (they bump the version)
  if (const std::uint64_t v = node_->version(); v != health_version_) {
    health_version_ = v;
    kubelet_->HealthChanged();
  }
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_drain_) {
    next_drain_ = now + options_.drain_poll;
    ReadDrain();
    if (absl::StatusOr<std::set<int>> relaid = node_->Relay(); !relaid.ok()) {
      Log(absl::StrCat("re-laying drained fixed GPUs: ", relaid.status().message()));
    }
  }
  PublishIfNeeded();
}

void Driver::ReadDrain() {
  if (api_ == nullptr) return;
  absl::StatusOr<k8s::HttpReply> reply =
      api_->client().Call("GET", "/api/v1/nodes/" + UrlEncode(options_.node.node_name), nullptr);
  // Publishing reports trouble with the API server; here a Node without the annotation is all.
  if (!reply.ok() || reply->status != 200 || !reply->body.is_object()) return;
  std::string text;
  const nlohmann::json* metadata =
      reply->body.contains("metadata") ? &reply->body["metadata"] : nullptr;
  if (metadata != nullptr && metadata->is_object() && metadata->contains("annotations") &&
      (*metadata)["annotations"].is_object()) {
    text = (*metadata)["annotations"].value(kDrainAnnotation, std::string());
  }
  std::set<int> gpus;
  for (const std::string& part :
       std::vector<std::string>(absl::StrSplit(text, ',', absl::SkipWhitespace()))) {
    int index = 0;
    if (absl::SimpleAtoi(part, &index) && index >= 0) {
      gpus.insert(index);
    } else {
      Log(absl::StrCat("annotation ", kDrainAnnotation, ": '", part.substr(0, 32),
                       "' is not a GPU index; ignored"));
    }
  }
  if (node_->SetDrain(gpus)) {
    Log(gpus.empty() ? std::string("no GPU drained")
                     : absl::StrCat("draining GPUs ", text.substr(0, 128)));
  }
}

void Driver::PublishIfNeeded() {
  const auto now = std::chrono::steady_clock::now();
  if (registered_again_.exchange(false)) pending_ = true;
  if (node_->version() != published_version_ || now - last_publish_ >= options_.resync) {
    pending_ = true;
  }
  if (!pending_ || now < next_publish_) return;
  const std::uint64_t version = node_->version();
  absl::Status status;
  if (node_uid_.empty()) {
    absl::StatusOr<std::string> uid = api_->NodeUid(options_.node.node_name);
    if (uid.ok()) node_uid_ = *uid;
    status = uid.status();
  }
  if (status.ok() && git_version_.empty()) {
    absl::StatusOr<std::string> version_text = api_->GitVersion();
    if (version_text.ok()) git_version_ = *version_text;
    status = version_text.status();
  }
  if (status.ok()) {
    absl::StatusOr<std::vector<ResourceSlice>> slices = node_->Slices(LayoutFor(git_version_));
    status = slices.ok() ? publisher_->Publish(std::move(*slices), node_uid_) : slices.status();
  }
  if (status.ok()) {
    published_version_ = version;
    pending_ = false;
    last_publish_ = now;
    ++publishes_;
    backoff_.Reset();
    std::lock_guard<std::mutex> lock(error_mu_);
    last_error_.clear();
    return;
  }
  const std::chrono::milliseconds wait = backoff_.Next();
  next_publish_ = now + wait;
  Log(absl::StrCat("publishing the ResourceSlices: ", status.message(), "; retrying in ",
                   wait.count(), " ms"));
  std::lock_guard<std::mutex> lock(error_mu_);
  last_error_ = std::string(status.message());
}

void Driver::Wake() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    woken_ = true;
  }
  wake_.notify_all();
}

void Driver::Run(const std::atomic<bool>& stop) {
  while (!stop.load()) {
    Tick();
    std::unique_lock<std::mutex> lock(wake_mu_);
    wake_.wait_for(lock, options_.poll, [this] { return woken_; });
    woken_ = false;
  }
}

void Driver::Stop() {
  if (kubelet_ != nullptr) kubelet_->Stop();
}

}  // namespace gpuslice::dra
