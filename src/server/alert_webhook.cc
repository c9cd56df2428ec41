#include "gpuslice/server/alert_webhook.h"

#include <httplib.h>

#include <chrono>
#include <iostream>
#include <regex>

namespace gpuslice::server {

absl::StatusOr<std::unique_ptr<AlertWebhook>> AlertWebhook::Start(const std::string& url) {
  static const std::regex kUrl(
      R"(^(https?)://([A-Za-z0-9._-]+|\[[0-9A-Fa-f:]+\])(:[0-9]{1,5})?(/[^\s]*)?$)");
  std::smatch m;
  if (!std::regex_match(url, m, kUrl)) {
    return absl::InvalidArgumentError("--alert-webhook: '" + url +
                                      "' is not an http://host[:port][/path] URL");
  }
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
  if (m[1].str() == "https") {
    return absl::InvalidArgumentError(
        "--alert-webhook: this build of the HTTP library has no TLS; use an http:// receiver");
  }
#endif
  std::unique_ptr<AlertWebhook> hook(new AlertWebhook(m[1].str() + "://" + m[2].str() + m[3].str(),
                                                      m[4].matched ? m[4].str() : "/"));
  hook->thread_ = std::thread([raw = hook.get()] { raw->Run(); });
  return hook;
}

AlertWebhook::~AlertWebhook() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AlertWebhook::Send(const metrics::Alert& alert, bool fired) {
  const nlohmann::json body = {{"status", fired ? "firing" : "resolved"},
                               {"alert", metrics::AlertToJson(alert)}};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(body.dump());
    while (queue_.size() > kMaxQueued) {
      queue_.pop_front();
      ++failed_;
    }
  }
  wake_.notify_one();
}

std::int64_t AlertWebhook::delivered() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return delivered_;
}

std::int64_t AlertWebhook::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_;
}

void AlertWebhook::Run() {
  httplib::Client client(origin_);
  client.set_connection_timeout(std::chrono::seconds(3));
  client.set_read_timeout(std::chrono::seconds(5));
  client.set_write_timeout(std::chrono::seconds(5));
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    const std::string body = queue_.front();
    queue_.pop_front();
    const int attempts = stopping_ ? 1 : 3;
    lock.unlock();
    std::string why;
    bool sent = false;
    for (int attempt = 0; attempt < attempts && !sent; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::seconds(attempt));
      httplib::Result result = client.Post(path_, body, "application/json");
      if (result && result->status >= 200 && result->status < 300) {
        sent = true;
      } else {
        why =
            result ? "HTTP " + std::to_string(result->status) : httplib::to_string(result.error());
      }
    }
    if (!sent) {
      std::cerr << "gpuslice serve: alert webhook " << origin_ << path_ << " failed: " << why
                << "\n";
    }
    lock.lock();
    ++(sent ? delivered_ : failed_);
  }
}

}  // namespace gpuslice::server
