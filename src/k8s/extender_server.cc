#include "extender_server.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gpuslice::k8s {

using nlohmann::json;

namespace {

constexpr const char* kJson = "application/json";

// Parses a body; on failure *error holds the message.
bool ParseBody(const std::string& body, json* out, std::string* error) {
  try {
    *out = json::parse(body);
    return true;
  } catch (const json::exception& e) {
    *error = absl::StrCat("malformed JSON: ", e.what());
    return false;
  }
}

json ErrorBody(std::string message) { return json{{"Error", std::move(message)}}; }

}  // namespace

ExtenderService::ExtenderService(Extender* extender, Binder binder, std::string prefix)
    : extender_(extender), binder_(std::move(binder)), prefix_(std::move(prefix)) {
  while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
  if (!prefix_.empty() && prefix_.front() != '/') prefix_.insert(prefix_.begin(), '/');
}

std::pair<int, std::string> ExtenderService::HandleFilter(const std::string& body) {
  json args;
  std::string error;
  if (!ParseBody(body, &args, &error)) {
    return {200, json{{"Nodes", nullptr},
                      {"NodeNames", nullptr},
                      {"FailedNodes", json::object()},
                      {"FailedAndUnresolvableNodes", json::object()},
                      {"Error", error}}
                     .dump()};
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return {200, extender_->Filter(args).dump()};
}

std::pair<int, std::string> ExtenderService::HandlePrioritize(const std::string& body) {
  json args;
  std::string error;
  if (!ParseBody(body, &args, &error)) return {400, ErrorBody(error).dump()};
  std::lock_guard<std::mutex> lock(mutex_);
  absl::StatusOr<json> list = extender_->Prioritize(args);
  if (!list.ok()) return {400, ErrorBody(std::string(list.status().message())).dump()};
  return {200, list->dump()};
}

std::pair<int, std::string> ExtenderService::HandleBind(const std::string& body) {
  json args;
  std::string error;
  if (!ParseBody(body, &args, &error)) return {200, ErrorBody(error).dump()};
  std::lock_guard<std::mutex> lock(mutex_);
  return {200, extender_->Bind(args, binder_).dump()};
}

absl::StatusOr<ResyncResult> ExtenderService::Resync(const nlohmann::json& pod_list) {
  std::lock_guard<std::mutex> lock(mutex_);
  return extender_->Resync(pod_list);
}

std::pair<int, std::string> ExtenderService::HandleRelease(const std::string& body) {
  json args;
  std::string error;
  if (!ParseBody(body, &args, &error)) return {400, ErrorBody(error).dump()};
  if (!args.is_object()) return {400, ErrorBody("arguments: not a JSON object").dump()};
  PodRequest pod;
  auto text = [&](const char* key) {
    auto it = args.find(key);
    return it != args.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  pod.uid = text("PodUID");
  pod.name = text("PodName");
  pod.namespace_ = text("PodNamespace");
  if (pod.namespace_.empty()) pod.namespace_ = "default";
  if (pod.uid.empty() && pod.name.empty()) {
    return {400, ErrorBody("PodUID or PodName is required").dump()};
  }
  std::lock_guard<std::mutex> lock(mutex_);
  absl::Status status = extender_->Release(pod.key());
  if (!status.ok()) return {404, ErrorBody(std::string(status.message())).dump()};
  return {200, ErrorBody("").dump()};
}

std::string ExtenderService::HandleState() {
  std::lock_guard<std::mutex> lock(mutex_);
  return extender_->State().dump(2);
}

void ExtenderService::Register(httplib::Server& server) {
  auto route = [this](std::pair<int, std::string> (ExtenderService::*handler)(const std::string&)) {
    return [this, handler](const httplib::Request& request, httplib::Response& response) {
      auto [status, body] = (this->*handler)(request.body);
      response.status = status;
      response.set_content(body, kJson);
    };
  };
  server.Post(prefix_ + "/filter", route(&ExtenderService::HandleFilter));
  server.Post(prefix_ + "/prioritize", route(&ExtenderService::HandlePrioritize));
  server.Post(prefix_ + "/bind", route(&ExtenderService::HandleBind));
  server.Post(prefix_ + "/release", route(&ExtenderService::HandleRelease));
  server.Get(prefix_ + "/state", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(HandleState(), kJson);
  });
}

}  // namespace gpuslice::k8s
