// A webhook receiver for tests: an HTTP server on a free loopback port that answers every
// POST /hook with a fixed status and keeps the bodies, in order (alert_webhook_test,
// alerts_cli_test).
#pragma once

#include <httplib.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gpuslice::cli::testing {

class WebhookReceiver {
 public:
  explicit WebhookReceiver(int status = 200) {
    server_.Post("/hook", [this, status](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        bodies_.push_back(req.body);
      }
      res.status = status;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~WebhookReceiver() {
    server_.stop();
    thread_.join();
  }
  WebhookReceiver(const WebhookReceiver&) = delete;
  WebhookReceiver& operator=(const WebhookReceiver&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hook"; }
  std::vector<std::string> bodies() {
    std::lock_guard<std::mutex> lock(mutex_);
    return bodies_;
  }
  // Waits (at most 20 s) until `n` bodies arrived.
  bool WaitFor(std::size_t n) {
    for (int i = 0; i < 200; ++i) {
      if (bodies().size() >= n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<std::string> bodies_;
};

}  // namespace gpuslice::cli::testing
