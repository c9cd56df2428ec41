// gpuslice/agent/node_agent.h
//
// The node agent (`gpuslice agent`): the daemon on each GPU machine that carries out what the
// allocation service (gpuslice/api/server.h) decides for that machine, through the API's node
// endpoints and the device backend.
//
//   Report  PUT /v1/nodes/{host}: the machine's GPUs (listed again, their MIG modes may have
//           changed), CPUs and memory; builds the placement view the service has of it.
//   Sync    one round: GET .../assignments; the machine's fixed MIG layout carried out first
//           (agent/layout_runner.h: matching instances stay, busy ones are never destroyed);
//           each assigned lease's slice set up at its exact placement (alloc::DeviceBinder) and
//           its device UUIDs sent (POST .../bound); the devices of leases that ended torn down
//           (an instance with processes stays until they are gone); idle MIG instances no lease
//           holds removed, except those found at the first round (someone's layout), which are
//           kept and named in the log unless `remove_foreign_instances`; then one collection of
//           the machine for the usage history (POST .../usage), the alerts (POST .../alerts)
//           and the scrapes.
//   Scrape  the machine's metric families as text (for a listener on other threads): the
//           latest round's collection while it is at most one interval old, else a new one;
//           the leases held as of the latest round; the pods holding devices when kubelet's
//           pod-resources socket is given.
//
// Errors as values: Report and Sync fail only with a status the caller must act on. A refused
// credential (api::IsRefusedCredential) ends the agent; anything else from Report means "not
// reported yet, try again"; Sync logs and retries everything else itself. Log lines go to
// stderr, prefixed "gpuslice agent: ".
//
// Report and Sync run on one thread; Scrape may be called from others at the same time (the
// backend is shared under its lock, the held leases under the agent's own).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuslice/alloc/binder.h"
#include "gpuslice/alloc/usage.h"
#include "gpuslice/api/client.h"
#include "gpuslice/device/synchronized_backend.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/metrics/alert_runner.h"
#include "gpuslice/metrics/collector.h"
#include "gpuslice/place/cluster.h"
#include "nlohmann/json.hpp"

namespace gpuslice::agent {

struct NodeAgentOptions {
  std::string host;  // this machine's name in the service (its agent token is bound to it)
  int interval_s = 2;
  std::int64_t cpu_milli = 0;  // the machine's CPUs and memory, as reported
  std::int64_t memory_mib = 0;
  std::string pod_resources_socket;  // kubelet's pod-resources API; empty: no pod labels
  // MIG instances that were on the GPUs when the agent started (someone's layout, an earlier
  // agent's leftovers) are kept unless this is set; then the idle ones are removed.
  bool remove_foreign_instances = false;
};

class NodeAgent {
 public:
  // `gpus`: the machine's GPUs that the catalog knows (at least one).
  NodeAgent(NodeAgentOptions options, const hw::Catalog& catalog, api::Client client,
            std::shared_ptr<device::SynchronizedBackend> backend,
            std::vector<device::GpuInfo> gpus);

  absl::Status Report();
  absl::Status Sync();
  absl::StatusOr<std::string> Scrape();

 private:
  void BindAssigned(const nlohmann::json& assignments, std::set<std::int64_t>& assigned);
  void TearDownEnded(const std::set<std::int64_t>& assigned);
  void ReportUsage(const metrics::MachineFigures& machine);
  absl::Status CarryOutLayout(const nlohmann::json& wanted);
  void ReportAlerts(const metrics::MachineFigures& machine,
                    const std::vector<metrics::Holder>& holders);
  std::vector<metrics::Holder> PublishHolders(const metrics::MachineFigures& machine);
  void NoteForeign();
  bool HeldBy(int gpu, int gi) const;
  void CollectIdle();
  std::string NodePath(const std::string& rest) const;

  const NodeAgentOptions o_;
  const hw::Catalog& catalog_;
  const api::Client client_;
  std::shared_ptr<device::SynchronizedBackend> backend_;
  std::vector<device::GpuInfo> gpus_;
  std::unique_ptr<place::Cluster> cluster_;
  std::shared_ptr<alloc::DeviceBinder> binder_;
  alloc::IdleTracker idle_{nullptr};
  std::map<std::int64_t, std::vector<alloc::BoundDevice>> held_;
  std::set<int> fixed_;                    // GPUs (NVML indexes) with a fixed layout
  std::set<std::pair<int, int>> foreign_;  // (gpu, gi) found at the first round, no lease's
  bool foreign_noted_ = false;
  struct Owner {
    std::string tenant;
    std::string class_name;
    std::int64_t idle_timeout_s = 0;
  };
  std::map<std::int64_t, Owner> owners_;  // by lease, from the assignments
  metrics::AlertRunner alerts_;
  std::mutex holders_mutex_;  // guards the three below (the scrapes read them)
  std::vector<metrics::Holder> holders_;
  metrics::MachineFigures machine_;  // the latest round's collection
  std::optional<std::chrono::steady_clock::time_point> collected_at_;
};

// Runs `agent` until `stop` is set: reports until the service takes the report (it may not be up
// yet), then a round every interval, reporting again every 30 s (the service may have restarted
// on a fresh store). OK when stopped; a refused credential ends it with that status at once. With
// `once`: one report and one round, and the report's failure is returned.
absl::Status RunNodeAgent(NodeAgent& agent, int interval_s, bool once,
                          const std::atomic<bool>& stop);

}  // namespace gpuslice::agent
