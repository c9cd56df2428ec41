#include "gpuslice/metrics/alert_runner.h"

namespace gpuslice::metrics {

metrics::AlertChanges AlertRunner::Round(const metrics::MachineFigures& machine,
                                         const std::vector<metrics::Holder>& holders,
                                         std::int64_t now_s, const Report& report) {
  metrics::AlertChanges changes;
  metrics::AlertChanges to_send;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    changes = tracker_.Update(machine, holders, now_s);
    to_send = unreported_;
    to_send.fired.insert(to_send.fired.end(), changes.fired.begin(), changes.fired.end());
    to_send.cleared.insert(to_send.cleared.end(), changes.cleared.begin(), changes.cleared.end());
  }
  if (to_send.empty()) return changes;
  const bool taken = report && report(to_send).ok();
  std::lock_guard<std::mutex> lock(mutex_);
  if (taken) {
    unreported_ = {};
  } else {
    // Bounded: while the service stays away, the oldest changes go first.
    auto trim = [](std::vector<metrics::Alert>& alerts) {
      if (alerts.size() > kMaxUnreported) {
        alerts.erase(alerts.begin(),
                     alerts.begin() + static_cast<std::ptrdiff_t>(alerts.size() - kMaxUnreported));
      }
    };
    trim(to_send.fired);
    trim(to_send.cleared);
    unreported_ = std::move(to_send);
  }
  return changes;
}

std::vector<metrics::Family> AlertRunner::Families() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tracker_.Families(host_);
}

std::size_t AlertRunner::unreported() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return unreported_.fired.size() + unreported_.cleared.size();
}

}  // namespace gpuslice::metrics
