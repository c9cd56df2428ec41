// gpuslice/server/local_machine.h
//
// serve's own machine: the GPUs `gpuslice serve` hands out itself, in-process, as an agent would
// for its machine (gpuslice/agent/node_agent.h), through the service's calls instead of HTTP.
//
//   Join        reports the machine (kept in the store with its layout, if an admin set one) and
//               carries out its layout;
//   Tick        one sweep: the machine's fixed layout carried out (reported again when MIG modes
//               changed), the service's expiry, idle reclaim and queue (alloc::Service::Tick,
//               with the idle seconds this machine's devices show), the usage history of the
//               leases on this machine, and its alerts;
//   Families    one scrape of GET /metrics: this machine's GPUs and MIG instances, its software
//               slices, the leases on them, its alert counters, the fleet's active alerts by
//               machine and kind, the leases by class and tenant and the queue by class.
//
// Tick runs on one thread; Families is called from the API's threads at the same time (the
// backend is shared under its lock, the idle tracker under its own).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuslice/alloc/binder.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/alloc/usage.h"
#include "gpuslice/device/synchronized_backend.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/metrics/alert_runner.h"
#include "gpuslice/metrics/exposition.h"

namespace gpuslice::server {

// The machine's GPUs (those the catalog knows) as an agent reports them.
alloc::NodeReport LocalReport(const std::vector<device::GpuInfo>& gpus);

class LocalMachine {
 public:
  // `binder` is the service's (alloc::ServiceOptions::binder) over `backend`; `idle` asks it.
  LocalMachine(alloc::Service& service, std::shared_ptr<device::SynchronizedBackend> backend,
               const hw::Catalog& catalog, std::shared_ptr<alloc::DeviceBinder> binder);

  // Reports the machine; the error when the service would not take it (its GPUs are still
  // handed out, only without fixed layouts). Carries out its layout either way.
  absl::Status Join(const std::vector<device::GpuInfo>& gpus);
  void Tick();
  absl::StatusOr<std::vector<metrics::Family>> Families();

  // The alert loop (the caller may route its changes elsewhere, e.g. a webhook, through the
  // service's alert listener).
  const metrics::AlertRunner& alerts() const { return alerts_; }

 private:
  void CarryOutLayout();
  std::vector<metrics::Holder> Holders(const std::vector<alloc::Lease>& leases, std::int64_t now);
  void RecordUsage();
  void RoundOfAlerts();

  alloc::Service& service_;
  std::shared_ptr<device::SynchronizedBackend> backend_;
  const hw::Catalog& catalog_;
  std::shared_ptr<alloc::DeviceBinder> binder_;
  const std::string host_;
  std::mutex idle_mutex_;  // guards idle_ (the tick and the scrapes ask it)
  alloc::IdleTracker idle_;
  metrics::AlertRunner alerts_;
};

}  // namespace gpuslice::server
