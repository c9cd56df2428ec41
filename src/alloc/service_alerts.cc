// The allocation service's alerts (service.h, "alerts"): what machines' collectors report, kept
// in memory, audited, and passed on to a listener (serve's webhook).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpuslice/util/utf8.h"
#include "service_internal.h"

namespace gpuslice::alloc {

using internal::HostOf;
using internal::json;
using internal::kMaxTextBytes;

namespace {

// An alert as the service keeps it: the host is the reporting machine's, text fields clipped.
metrics::Alert Kept(const metrics::Alert& in, const std::string& host) {
  metrics::Alert out = in;
  out.host = host;
  out.key = util::Utf8Prefix(out.key, kMaxTextBytes);
  out.message = util::Utf8Prefix(out.message, kMaxTextBytes);
  out.kind = util::Utf8Prefix(out.kind, 64);
  return out;
}

}  // namespace

absl::Status Service::ReportAlerts(const Caller& caller, const std::string& host,
                                   const metrics::AlertChanges& changes) {
  std::vector<std::pair<metrics::Alert, bool>> told;
  std::function<void(const metrics::Alert&, bool)> listener;
  if (absl::Status s = CheckMachine(caller, host); !s.ok()) return s;
  absl::Status status = Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::Status {
    if (!remotes_.contains(host)) {
      return absl::NotFoundError(absl::StrCat("machine '", host, "' has not reported"));
    }
    std::map<std::string, metrics::Alert>& active = alerts_[host];
    // Whose an alert is comes from the service's own leases, never from the report: a machine
    // may name only a lease active on it, and the lease's tenant and class go with it.
    auto attribute = [&](metrics::Alert& alert) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      auto lease = active_.find(alert.lease);
      const bool ours = lease != active_.end() && HostOf(lease->second.lease.node) == host;
      alert.lease = ours ? lease->second.lease.id : 0;
      alert.tenant = ours ? lease->second.lease.tenant : "";
      alert.class_name = ours ? lease->second.lease.class_name : "";
    };
    for (const metrics::Alert& in : changes.fired) {
      metrics::Alert alert = Kept(in, host);
      attribute(alert);
      alert.cleared = 0;
      if (alert.since <= 0) alert.since = Now();
      if (active.contains(alert.key)) continue;
      Audited(caller, alert.tenant, "alert.fire", absl::StrCat(host, " ", alert.kind), "",
              metrics::AlertToJson(alert).dump());
      active.emplace(alert.key, alert);
      told.emplace_back(alert, true);
    }
    for (const metrics::Alert& in : changes.cleared) {
      metrics::Alert alert = Kept(in, host);
      auto it = active.find(alert.key);
      if (it == active.end()) continue;
      metrics::Alert ended = it->second;
      ended.cleared = alert.cleared > 0 ? alert.cleared : Now();
      active.erase(it);
      Audited(caller, ended.tenant, "alert.clear", absl::StrCat(host, " ", ended.kind), "",
              metrics::AlertToJson(ended).dump());
      recent_alerts_.push_front(ended);
      if (recent_alerts_.size() > kRecentAlerts) recent_alerts_.pop_back();
      told.emplace_back(ended, false);
    }
    listener = alert_listener_;
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  if (listener) {
    for (const auto& [alert, fired] : told) listener(alert, fired);
  }
  return absl::OkStatus();
}

absl::StatusOr<Service::AlertList> Service::Alerts(const Caller& caller) {
  util::MutexLock lock(mutex_);
  // Admins see every alert, an agent its machine's, a tenant's user those on its devices.
  auto visible = [&](const metrics::Alert& alert) {
    if (caller.role == Role::kAdmin) return true;
    if (caller.role == Role::kAgent) return !caller.machine.empty() && alert.host == caller.machine;
    return !caller.tenant.empty() && alert.tenant == caller.tenant;
  };
  AlertList list;
  for (const auto& [host, active] : alerts_) {
    for (const auto& [key, alert] : active) {
      if (visible(alert)) list.active.push_back(alert);
    }
  }
  for (const metrics::Alert& alert : recent_alerts_) {
    if (visible(alert)) list.recent.push_back(alert);
  }
  return list;
}

void Service::SetAlertListener(std::function<void(const metrics::Alert&, bool fired)> listener) {
  util::MutexLock lock(mutex_);
  alert_listener_ = std::move(listener);
}

}  // namespace gpuslice::alloc
