// gpuslice/metrics/alerts.h
//
// Health and usage alerts of one machine, found by comparing successive collections
// (gpuslice/metrics/collector.h). An AlertTracker is fed every collection and answers what fired
// and what cleared since the previous one. Kinds:
//
//   idle            warning   a lease's devices have had no process for at least its class's idle
//                             threshold (the same figure the control plane reclaims by)
//   memory_high     warning   a MIG instance, or a whole GPU, has 90% (policy) of its memory in use
//   out_of_memory   critical  a process ended while its device's memory was at 95% (policy) or
//                             more of the slice: most likely killed by an out-of-memory error
//   process_exited  warning   a process on a device a lease holds ended (NVML cannot tell a crash
//                             from a clean exit; this says only that it is gone)
//   xid             critical  the driver reported a critical Xid error
//   throttled       warning   clocks held back by heat or power (thermal, power cap, power brake,
//                             hardware slowdown), not by idling or a clock setting
//   memory_errors   critical  the count of uncorrected (volatile) ECC errors grew
//   row_remap_failure critical a memory row could not be remapped: the GPU needs service
//   gpu_lost        critical  a GPU answered GPU_IS_LOST, or a GPU seen before is gone from the
//   list
//
// State alerts (idle, memory_high, throttled, row_remap_failure, gpu_lost) stay active while
// their condition holds and clear when it ends. Event alerts (out_of_memory, process_exited, xid,
// memory_errors) fire once and clear after `event_hold_s`. Every alert has a stable key (kind and
// device), so a condition that holds fires once, not every collection.
//
// Pure and deterministic: no clock and no I/O; times are given.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpuslice/metrics/collector.h"
#include "gpuslice/metrics/exposition.h"
#include "nlohmann/json.hpp"

namespace gpuslice::metrics {

struct Alert {
  std::string key;       // kind "/" device (and pid or xid for events): stable identity
  std::string kind;      // see above
  std::string severity;  // "warning" or "critical"
  std::string host;
  int gpu = -1;
  std::optional<int> gi;
  std::string device_uuid;  // GPU or MIG UUID
  std::int64_t lease = 0;   // 0: no lease holds the device
  std::string tenant;
  std::string class_name;
  std::string message;       // one line for people
  std::int64_t since = 0;    // unix seconds when it fired
  std::int64_t cleared = 0;  // unix seconds when it cleared; 0 while active
  friend bool operator==(const Alert&, const Alert&) = default;
};

// Every kind with its severity, in a fixed order.
const std::vector<std::pair<std::string, std::string>>& AlertKinds();

nlohmann::json AlertToJson(const Alert& alert);
// InvalidArgument naming the field for a malformed alert.
absl::StatusOr<Alert> AlertFromJson(const nlohmann::json& json);

struct AlertPolicy {
  double memory_high_ratio = 0.9;   // memory_high at or above this share of the device's memory
  double oom_ratio = 0.95;          // a process ending at or above this share: out_of_memory
  std::int64_t event_hold_s = 300;  // event alerts clear after this long
};

struct AlertChanges {
  std::vector<Alert> fired;
  std::vector<Alert> cleared;
  bool empty() const { return fired.empty() && cleared.empty(); }
};

class AlertTracker {
 public:
  explicit AlertTracker(AlertPolicy policy = {}) : policy_(policy) {}

  // Feeds one collection made at `now_s`; `holders` are the leases on the machine (their
  // idle_s and idle_threshold_s drive the idle alert). Returns what fired and what cleared.
  AlertChanges Update(const MachineFigures& machine, const std::vector<Holder>& holders,
                      std::int64_t now_s);

  // Active alerts, by key.
  const std::map<std::string, Alert>& active() const { return active_; }

  // gpuslice_alerts{kind,severity,Hostname} (active alerts, 0 for kinds without any),
  // gpuslice_alerts_fired_total{kind,Hostname}, gpuslice_xid_errors_total{gpu,UUID,xid,...} and
  // DCGM_FI_DEV_XID_ERRORS (the last Xid per GPU, as dcgm-exporter gives it).
  std::vector<Family> Families(const std::string& host) const;

 private:
  struct DeviceMemory {
    std::int64_t used = 0;
    std::int64_t total = 0;
  };
  struct SeenProcess {
    std::string name;
    std::string device_uuid;  // the MIG or GPU device it ran on
    int gpu = -1;
    std::optional<int> gi;
  };
  struct GpuSeen {
    int index = -1;
    std::string name;
  };

  AlertPolicy policy_;
  std::map<std::string, Alert> active_;
  std::map<std::string, std::int64_t> fired_total_;  // by kind
  // From the previous collection.
  std::map<std::uint32_t, SeenProcess> processes_;        // by pid
  std::map<std::string, DeviceMemory> memory_;            // by device UUID
  std::map<std::string, GpuSeen> gpus_;                   // by GPU UUID
  std::map<std::string, std::uint64_t> ecc_uncorrected_;  // by GPU UUID
  // Xid counts by (GPU UUID, xid), and the last Xid per GPU UUID.
  std::map<std::pair<std::string, std::uint64_t>, std::int64_t> xid_total_;
  std::map<std::string, std::uint64_t> last_xid_;
  std::map<std::string, int> gpu_index_;  // GPU UUID -> index, for labels
};

}  // namespace gpuslice::metrics
