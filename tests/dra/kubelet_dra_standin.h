// A kubelet stand-in for the DRA kubelet plugin's tests, written from the wire facts in
// ../shared/reference/kubernetes-dra.md §1-3 (kubelet 1.34+), sharing no code with the plugin:
//   * a watcher thread walks the registry directory (subdirectories too; names starting with '.'
//     skipped) every `poll`; a socket file that is new, or whose file changed (deleted and created
//     again), is registered: GetInfo with a 1 s deadline, validation as kubelet does (type
//     "DRAPlugin", a name, an absolute or empty endpoint, the first of the plugin's
//     supported_versions that the stand-in's `dra_services` lists), a dial of the endpoint, the
//     health stream (the first of the stand-in's `health_services` the plugin lists) on its own
//     thread, then NotifyRegistrationStatus(true). A validation failure is notified
//     (plugin_registered=false) and retried after `retry`; a refusal (SetRefusal) or an endpoint
//     that does not answer is notified and, as in kubelet, not retried until the socket file
//     changes. A socket file that disappears is deregistered (connection and stream dropped);
//   * the health stream keeps the latest list (each message replaces the previous one); when it
//     ends the list is cleared, as kubelet does, and the stream is opened again after
//     `health_retry`;
//   * Prepare / Unprepare call the newest registered plugin of the driver with the chosen
//     version and a 45 s deadline, and check that the response has exactly one entry per claim;
//   * Restart() models a kubelet restart: connections and streams dropped, registrations
//     forgotten, the directory walked again. It deletes no socket (unlike the device-plugin
//     kubelet).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace gpuslice::dra::kubelet_standin {

inline constexpr char kStandInDriver[] = "gpu.gpuslice.io";

struct StandInClaim {
  std::string namespace_name;
  std::string uid;
  std::string name;
};

struct SeenDevice {
  std::vector<std::string> request_names;
  std::string pool_name;
  std::string device_name;
  std::vector<std::string> cdi_device_ids;
  std::optional<std::string> share_id;  // nullopt: not set on the wire (always so on v1beta1)
};

struct SeenClaim {
  std::vector<SeenDevice> devices;
  std::string error;
};

struct SeenHealth {
  std::string pool_name;
  std::string device_name;
  int health = 0;  // wire value: 0 UNKNOWN, 1 HEALTHY, 2 UNHEALTHY
  std::int64_t last_updated_time = 0;
  std::int64_t health_check_timeout_seconds = 0;
  std::string message;
};

// What GetInfo answered, and what the stand-in chose from it.
struct SeenPlugin {
  std::string socket;  // registration socket path
  std::string type;
  std::string name;
  std::string endpoint;
  std::vector<std::string> supported_versions;
  std::string dra_service;     // "v1.DRAPlugin" or "v1beta1.DRAPlugin"
  std::string health_service;  // "" = no health stream
};

struct StandInOptions {
  std::string registry_dir;
  std::vector<std::string> dra_services = {"v1.DRAPlugin", "v1beta1.DRAPlugin"};
  // In the stand-in's order of preference; empty: no health stream (gate off).
  std::vector<std::string> health_services = {"v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"};
  std::chrono::milliseconds poll{20};
  std::chrono::milliseconds retry{200};         // after a failed validation
  std::chrono::milliseconds health_retry{100};  // kubelet: 5 s
};

class KubeletDraStandIn {
 public:
  explicit KubeletDraStandIn(StandInOptions options);
  ~KubeletDraStandIn();
  KubeletDraStandIn(const KubeletDraStandIn&) = delete;
  KubeletDraStandIn& operator=(const KubeletDraStandIn&) = delete;

  void Restart();
  // "" = accept; otherwise new registrations are refused with this reason.
  void SetRefusal(const std::string& reason);
  // Pauses / resumes the directory walk (a busy kubelet); registered plugins stay.
  void SetWatching(bool watching);
  // Test action: removes <registry_dir>/<name>.
  void DeleteSocketFile(const std::string& name);

  int registrations() const;  // NotifyRegistrationStatus(true) sent since construction
  std::vector<std::string> refusals() const;  // reasons sent with plugin_registered=false
  std::optional<SeenPlugin> plugin(const std::string& driver = kStandInDriver) const;
  std::vector<SeenHealth> health(const std::string& driver = kStandInDriver) const;
  int health_messages(const std::string& driver = kStandInDriver) const;  // on all its streams
  // How each of the plugin's health streams ended, in order: "OK" for a clean end, else
  // "<code>: <message>".
  std::vector<std::string> health_ends(const std::string& driver = kStandInDriver) const;

  absl::StatusOr<std::map<std::string, SeenClaim>> Prepare(
      const std::vector<StandInClaim>& claims, const std::string& driver = kStandInDriver);
  absl::StatusOr<std::map<std::string, std::string>> Unprepare(
      const std::vector<StandInClaim>& claims, const std::string& driver = kStandInDriver);

  struct Plugin;  // one registered plugin (kubelet_dra_standin.cc)

 private:
  struct Socket;
  void Watch();
  void Walk();
  void Register(const std::string& path, Socket& socket);
  absl::Status Connect(const std::string& path, SeenPlugin seen);
  void Drop(const std::string& path);
  void StartWatcher();
  void StopWatcher();
  std::shared_ptr<Plugin> Newest(const std::string& driver) const;
  template <class Api>
  void WatchHealth(std::shared_ptr<Plugin> plugin);

  const StandInOptions options_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_watcher_ = false;
  bool watching_ = true;
  std::string refusal_;
  int registrations_ = 0;
  std::uint64_t order_ = 0;
  std::vector<std::string> refusals_;
  std::map<std::string, std::shared_ptr<Plugin>> plugins_;  // by registration socket path
  std::map<std::string, std::shared_ptr<Socket>> sockets_;  // watcher thread only
  std::thread watcher_;
};

// Polls `done` every 10 ms until it holds or `timeout` passes; returns its last value.
bool WaitUntil(const std::function<bool()>& done,
               std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

}  // namespace gpuslice::dra::kubelet_standin
