// gpuslice/metrics/alert_runner.h: one machine's alert loop, shared by `gpuslice agent` (reports
// to the service over HTTP) and `gpuslice serve` (its own machine, in-process).
//
// Each Round takes one collection of the machine (metrics::Collect, plus the driver's Xid events
// from metrics::CollectXids), finds what fired and what cleared (metrics::AlertTracker) and hands
// those changes to `report`.
// Changes the service did not take (report failed) are kept and sent again, first, with the next
// round; an alert that fires and clears while the service is unreachable is sent both ways.
//
// Round runs on one thread; Families may be called from others (scrapes).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gpuslice/metrics/alerts.h"
#include "gpuslice/metrics/collector.h"

namespace gpuslice::metrics {

class AlertRunner {
 public:
  explicit AlertRunner(std::string host, metrics::AlertPolicy policy = {})
      : host_(std::move(host)), tracker_(policy) {}

  using Report = std::function<absl::Status(const metrics::AlertChanges&)>;

  // One collection at `now_s`: `machine` as metrics::Collect read it, with the Xid events
  // metrics::CollectXids took (only this loop may take them, so that scrapes do not steal them).
  // Returns the changes it found (without those still unreported from earlier rounds).
  metrics::AlertChanges Round(const metrics::MachineFigures& machine,
                              const std::vector<metrics::Holder>& holders, std::int64_t now_s,
                              const Report& report);

  // The tracker's families (active alerts, fired counts, Xid counts) for /metrics.
  std::vector<metrics::Family> Families() const;
  // Changes waiting for the service (at most kMaxUnreported fired and as many cleared; the oldest
  // are dropped first).
  std::size_t unreported() const;
  static constexpr std::size_t kMaxUnreported = 1000;

 private:
  std::string host_;
  mutable std::mutex mutex_;
  metrics::AlertTracker tracker_;
  metrics::AlertChanges unreported_;
};

}  // namespace gpuslice::metrics
