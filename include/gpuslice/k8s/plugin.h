// gpuslice/k8s/plugin.h: the Kubernetes device plugin (kubelet device-plugin API v1beta1 over gRPC
// on Unix sockets; wire facts in ../shared/reference/kubernetes-apis.md §1).
//
// One DevicePlugin serves every resource the node offers (gpuslice/k8s/devices.h): for each
// resource name it runs a gRPC server on `<plugin_dir>/<socket_prefix><name after '/'>.sock` and
// registers it with the kubelet (v1beta1.Registration/Register on `<plugin_dir>/kubelet.sock`,
// endpoint = the socket's file name, options: GetPreferredAllocation available, no PreStart).
// The server is serving before Register is sent, because kubelet calls GetDevicePluginOptions
// back before it answers.
//
// Behaviour:
//   * ListAndWatch sends the resource's whole device list first, then again each time it changes
//     (a MIG layout applied by the agent, a GPU turning unhealthy). The node is read every
//     `poll` (default 200 ms), so a change reaches kubelet within about that time; nothing is
//     restarted. A resource that appears (a new MIG profile) gets its server and registration then;
//     one that disappears stays registered with an empty list.
//   * Allocate answers with AllocateContainer (gpuslice/k8s/allocate.h) for each container;
//     an error fails the call (kubelet then fails the pod's admission) with the reason.
//   * GetPreferredAllocation answers with PreferredDevices, the placement engine's choice.
//   * Kubelet restarts (it deletes every socket of the directory and re-creates kubelet.sock):
//     the plugin notices within one poll that kubelet.sock is a new file or that one of its own
//     sockets is gone, stops its servers (ending their streams), starts them again and registers
//     again. A failed registration (kubelet not there yet) is retried every `retry`.
//
// Threads: Start() and Stop() from one thread; Poll() (called by Run's loop or by tests) from that
// thread too. The gRPC handlers run on gRPC's threads and only read the state under a mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuslice/k8s/allocate.h"
#include "gpuslice/k8s/devices.h"

namespace gpuslice::k8s {

inline constexpr std::string_view kDevicePluginApiVersion = "v1beta1";
inline constexpr std::string_view kDefaultPluginDir = "/var/lib/kubelet/device-plugins";

struct PluginOptions {
  std::string plugin_dir = std::string(kDefaultPluginDir);
  std::string kubelet_socket = "kubelet.sock";  // in plugin_dir
  std::string socket_prefix = "gpuslice-";
  std::chrono::milliseconds poll{200};
  std::chrono::milliseconds retry{2000};
  AllocateOptions allocate;  // includes the sharing settings
  std::string policy = "gpuslice";
  std::function<void(const std::string&)> log;  // one line per event; may be empty
  // Called on the polling thread with the node read at Start and after each change (e.g. to
  // rewrite the node's labels); may be empty.
  std::function<void(const NodeSnapshot&)> on_change;
};

// Reads the node (NodeReader::Read in the binary; a fake in tests).
using SnapshotSource = std::function<absl::StatusOr<NodeSnapshot>()>;

class DevicePlugin {
 public:
  DevicePlugin(SnapshotSource source, PluginOptions options);
  ~DevicePlugin();
  DevicePlugin(const DevicePlugin&) = delete;
  DevicePlugin& operator=(const DevicePlugin&) = delete;

  // Reads the node, starts a server per resource and registers them. Fails when the node cannot
  // be read, a socket cannot be served (directory missing, permissions), or the settings are bad;
  // a kubelet that is not there yet is not an error (registration is retried by Poll).
  absl::Status Start();
  // One round: re-reads the node and pushes changes, notices kubelet restarts, retries
  // registrations. Returns the node-reading error, if any (the previous state is kept).
  absl::Status Poll();
  // Polls every `poll` until `stop` is set.
  void Run(const std::atomic<bool>& stop);
  // Stops every server (streams end) and removes the sockets.
  void Stop();

  // For status output and tests.
  ResourceMap resources() const;
  std::vector<std::string> registered() const;  // resources registered with the current kubelet
  int registrations() const;                    // successful Register calls so far

  struct Server;  // one resource's gRPC server (plugin.cc)

 private:
  absl::Status StartServer(const std::string& resource);
  void StopServers();
  void RegisterPending();
  bool KubeletRestarted();
  void Log(const std::string& line) const;

  SnapshotSource source_;
  PluginOptions options_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  NodeSnapshot snapshot_;
  ResourceMap resources_;
  std::uint64_t version_ = 0;
  bool stopping_ = false;

  std::map<std::string, std::unique_ptr<Server>> servers_;  // by resource
  std::map<std::string, bool> registered_;
  std::chrono::steady_clock::time_point next_retry_{};
  int registrations_ = 0;
  // Identity of kubelet.sock when we last registered (inode, change time); 0 = not seen.
  std::uint64_t kubelet_inode_ = 0;
  std::int64_t kubelet_ctime_ns_ = 0;
};

// The socket file name for a resource: prefix + the part after '/' ("gpuslice-mig-1g.10gb.sock").
std::string PluginSocketName(const std::string& prefix, const std::string& resource);

}  // namespace gpuslice::k8s
