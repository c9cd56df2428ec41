// gpuslice/server/alert_webhook.h: `gpuslice serve --alert-webhook URL` posts every alert that
// fires or clears, as JSON, to a URL (a chat bridge, an incident tool, Alertmanager's webhook
// receivers):
//
//   POST URL   {"status": "firing" | "resolved", "alert": {key, kind, severity, host, gpu, gi,
//               device, lease, tenant, class, message, since, cleared}}
//
// Sending happens on its own thread, so a slow or dead receiver never holds the service up. Each
// alert is tried up to three times (1 s, then 2 s apart; a 2xx answer is success); the queue
// holds at most kMaxQueued alerts and drops the oldest beyond that. Failures are logged to
// stderr and counted.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "gpuslice/metrics/alerts.h"

namespace gpuslice::server {

class AlertWebhook {
 public:
  // InvalidArgument unless `url` is http://host[:port][/path] (or https:// where the HTTP library
  // was built with TLS).
  static absl::StatusOr<std::unique_ptr<AlertWebhook>> Start(const std::string& url);
  ~AlertWebhook();  // sends what is queued (each tried once more at most), then stops

  void Send(const metrics::Alert& alert, bool fired);

  std::int64_t delivered() const;
  std::int64_t failed() const;
  static constexpr std::size_t kMaxQueued = 1000;

 private:
  AlertWebhook(std::string origin, std::string path) : origin_(origin), path_(path) {}
  void Run();

  const std::string origin_;  // scheme://host:port
  const std::string path_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::string> queue_;  // JSON bodies
  bool stopping_ = false;
  std::int64_t delivered_ = 0;
  std::int64_t failed_ = 0;
  std::thread thread_;
};

}  // namespace gpuslice::server
