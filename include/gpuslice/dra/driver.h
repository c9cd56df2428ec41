// gpuslice/dra/driver.h
//
// `gpuslice dra-driver`: one node's Kubernetes DRA driver, wiring together
//   * the node logic (gpuslice/dra/node_driver.h): what the node offers, prepare and unprepare;
//   * the kubelet side (gpuslice/dra/kubelet_plugin.h): plugin registration, the DRA v1 and
//     v1beta1 services and the health streams on Unix sockets;
//   * the API-server side (gpuslice/dra/kube_client.h, gpuslice/dra/publisher.h): the node's
//     ResourceSlices and the claims prepare reads.
//
// Run's loop, every `poll`, and at once after a prepare or unprepare:
//   * kubelet: KubeletPlugin::Poll (sockets deleted or replaced, refused registrations);
//   * health: the node's health is read; a change wakes the health streams and republishes (the
//     taints change);
//   * publish: when what the node offers changed (prepare, unprepare, health, drain), kubelet
//     registered the plugin again (its start wipes the node's slices), or `resync` passed, the
//     pool is published. The node's uid and the API server's version (which picks the slice
//     layout, gpuslice/dra/pool.h) are read first. A failure is retried with backoff
//     (gpuslice/dra/backoff.h), while kubelet is still served: prepared claims are answered from
//     the checkpoint, new ones fail per claim until the API server answers;
//   * drain: every `drain_poll` the Node's annotation `gpu.gpuslice.io/drain` (GPU indices,
//     comma-separated) is read; those GPUs' devices get the drain taint, and drained admin-fixed
//     GPUs that no claim uses are re-laid to their configured layout (NodeDriver::Relay).
// Stop() stops the kubelet side (removing the registration socket; kubelet wipes the slices 30 s
// later unless a new driver registers). Start/Run/Stop from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/dra/backoff.h"
#include "gpuslice/dra/kube_client.h"
#include "gpuslice/dra/kubelet_plugin.h"
#include "gpuslice/dra/node_driver.h"
#include "gpuslice/dra/publisher.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/k8s/kube_api.h"

namespace gpuslice::dra {

inline constexpr char kDrainAnnotation[] = "gpu.gpuslice.io/drain";

struct DriverOptions {
  NodeDriverOptions node;        // node_name, checkpoint, CDI directory, GPU kinds, paths
  KubeletPluginOptions kubelet;  // sockets
  k8s::KubeApiOptions api;       // server, token file, CA
  std::chrono::milliseconds poll{200};
  std::chrono::milliseconds resync{30000};
  std::chrono::milliseconds drain_poll{10000};
  Backoff::Options backoff;
  std::function<void(const std::string&)> log;  // may be empty
};

class Driver {
 public:
  // `backend` and `catalog` must outlive the driver.
  Driver(device::Backend& backend, const hw::Catalog& catalog, DriverOptions options);
  ~Driver();
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // Loads the checkpoint (recovering interrupted work), then serves kubelet. Fails on bad
  // settings, a damaged checkpoint, or sockets that cannot be served; an API server that does not
  // answer is not an error (publishing is retried).
  absl::Status Start();
  // One round of the loop (tests call it directly).
  void Tick();
  void Run(const std::atomic<bool>& stop);
  void Stop();

  // For tests and status.
  int publishes() const { return publishes_.load(); }
  std::string last_publish_error() const;
  NodeDriver* node() { return node_.get(); }
  KubeletPlugin* kubelet() { return kubelet_.get(); }

  class Handler;  // ClaimHandler over the NodeDriver (driver.cc)

 private:
  void PublishIfNeeded();
  // Ends Run's wait early (after a prepare or unprepare: republish now, not at the next poll).
  void Wake();
  void ReadDrain();
  void Log(const std::string& line) const;

  device::Backend& backend_;
  const hw::Catalog& catalog_;
  DriverOptions options_;
  std::unique_ptr<DraApi> api_;
  std::unique_ptr<NodeDriver> node_;
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<KubeletPlugin> kubelet_;
  std::unique_ptr<SlicePublisher> publisher_;
  Backoff backoff_;

  std::atomic<bool> registered_again_{false};
  bool pending_ = true;  // a publish is due
  std::uint64_t published_version_ = 0;
  std::uint64_t health_version_ = 0;
  std::string node_uid_;
  std::string git_version_;
  std::chrono::steady_clock::time_point next_publish_{};
  std::chrono::steady_clock::time_point last_publish_{};
  std::chrono::steady_clock::time_point next_drain_{};
  std::atomic<int> publishes_{0};
  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool woken_ = false;
  mutable std::mutex error_mu_;
  std::string last_error_;
};

}  // namespace gpuslice::dra
