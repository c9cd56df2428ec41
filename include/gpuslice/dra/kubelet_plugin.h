// gpuslice/dra/kubelet_plugin.h: the DRA driver's kubelet side (gRPC over Unix sockets; wire facts
// in ../shared/reference/kubernetes-dra.md §1-3 and the checklist in §9).
//
// One KubeletPlugin serves, on `<plugin_dir>/dra.sock`, the DRA services
// k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin and ...v1beta1.DRAPlugin and the health services
// v1.DRAResourceHealth and v1alpha1.DRAResourceHealth; then, on
// `<registry_dir>/<driver>-reg.sock`, pluginregistration.Registration, which kubelet's plugin
// watcher finds and calls. The DRA socket serves before the registration socket exists.
//
// Behaviour:
//   * GetInfo answers type "DRAPlugin", the driver name, the absolute path of dra.sock and the
//     services ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
//     "v1alpha1.DRAResourceHealth"]. NotifyRegistrationStatus always answers OK. `true` counts a
//     registration and makes the next Poll call `on_registered` (the driver republishes its
//     slices then: kubelet wipes them at its start); `false` is logged, kept as
//     last_registration_error(), and the registration socket is re-created after
//     kRefusedRetryPolls polls so that kubelet tries again.
//   * NodePrepareResources / NodeUnprepareResources (both versions) hand the claims to the
//     ClaimHandler and answer exactly one entry per requested claim UID: a claim the handler did
//     not answer gets the error kNoAnswerError, answers for UIDs not asked for are dropped, and a
//     claim with an empty namespace, uid or name gets a per-claim error without reaching the
//     handler (the RPC itself succeeds). v1beta1 has no share_id; it is left out there.
//   * NodeWatchResources (both versions) sends the handler's complete health list at once, then
//     after each HealthChanged() and at least every `health_resend`, until kubelet cancels the
//     stream or the server stops. Messages longer than 1024 bytes are cut to at most 1021 (at a
//     UTF-8 character boundary) + "...". last_updated_time is the send time;
//     health_check_timeout_seconds is left 0 (kubelet's default, 30 s).
//   * Poll notices that a socket file was deleted or replaced (kubelet's directory wiped, a
//     restart) and serves it again on a new file; a new dra.sock also gets a new registration
//     socket, so that kubelet registers the plugin again. A kubelet restart needs nothing from
//     the plugin: kubelet walks the directory and registers the socket that is there.
//
// Threads: Start, Poll, Run and Stop from one thread at a time (Run's loop calls Poll), never
// from inside a ClaimHandler call (Stop waits for those); on_registered is called from Poll. The
// gRPC handlers run on gRPC's threads, possibly concurrently, and call the ClaimHandler and `log`
// from there without holding the plugin's lock. HealthChanged, registrations and
// last_registration_error may be called from any thread, the handler's own calls included.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gpuslice/dra/gpu_devices.h"

namespace gpuslice::dra {

// A claim as kubelet names it in NodePrepareResources / NodeUnprepareResources.
struct ClaimRef {
  std::string namespace_name;
  std::string uid;
  std::string name;
  friend bool operator==(const ClaimRef&, const ClaimRef&) = default;
};

struct PreparedDevice {
  std::vector<std::string> request_names;  // empty: the device serves every request of the claim
  std::string pool_name;
  std::string device_name;
  std::vector<std::string> cdi_device_ids;  // fully qualified CDI device names
  std::string share_id;                     // "" = none (sent on v1 only)
  friend bool operator==(const PreparedDevice&, const PreparedDevice&) = default;
};

struct ClaimPrepareResult {
  std::vector<PreparedDevice> devices;
  std::string error;  // "" = prepared
};

enum class HealthStatus { kUnknown, kHealthy, kUnhealthy };

struct DeviceHealth {
  std::string pool_name;
  std::string device_name;
  HealthStatus health = HealthStatus::kUnknown;
  std::string message;
};

// Implemented by the node driver.
class ClaimHandler {
 public:
  virtual ~ClaimHandler() = default;
  // Results keyed by claim UID. Called on gRPC threads, possibly concurrently: implementations
  // serialise what needs it. Claims reach these calls with namespace, uid and name set and each
  // UID once.
  virtual std::map<std::string, ClaimPrepareResult> Prepare(
      const std::vector<ClaimRef>& claims) = 0;
  // UID -> error, "" = unprepared (unpreparing a claim that is not prepared is no error).
  virtual std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims) = 0;
  // The complete current list.
  virtual std::vector<DeviceHealth> Health() = 0;
};

inline constexpr char kDefaultRegistryDir[] = "/var/lib/kubelet/plugins_registry";
inline constexpr char kDefaultPluginsDir[] = "/var/lib/kubelet/plugins";
// The per-claim error for a claim the handler gave no answer for.
inline constexpr char kNoAnswerError[] = "driver gave no answer for this claim";
// Polls between kubelet's plugin_registered=false and the new registration socket.
inline constexpr int kRefusedRetryPolls = 5;
// The longest health message kubelet keeps.
inline constexpr std::size_t kMaxHealthMessage = 1024;

struct KubeletPluginOptions {
  std::string driver_name = kDriverName;
  std::string registry_dir = kDefaultRegistryDir;
  std::string plugin_dir;  // "" = <kDefaultPluginsDir>/<driver_name>; holds dra.sock
  std::chrono::milliseconds poll{200};
  std::chrono::milliseconds health_resend{10000};  // the full health list at least this often
  std::function<void(const std::string&)> log;  // one line per event, from any thread; may be empty
  std::function<void()> on_registered;  // from Poll, after plugin_registered=true; may be empty
};

class KubeletPlugin {
 public:
  KubeletPlugin(ClaimHandler& handler, KubeletPluginOptions options);
  ~KubeletPlugin();  // Stop()
  KubeletPlugin(const KubeletPlugin&) = delete;
  KubeletPlugin& operator=(const KubeletPlugin&) = delete;

  // Serves dra.sock, then the registration socket, each after removing a stale file there.
  // Fails on an empty driver name, a missing registry directory (kubelet creates it), a plugin
  // directory that cannot be created, a socket path over the Unix limit (107 bytes and the NUL of
  // sun_path's 108) or a socket that cannot be served, and when already started; a failed Start
  // leaves nothing served.
  absl::Status Start();
  // One round: re-creates a socket file that was deleted or replaced, re-creates the
  // registration socket kRefusedRetryPolls polls after a refusal, calls on_registered after a
  // registration. Returns the error of a socket that could not be served again (retried next
  // round); FailedPrecondition before Start and after Stop (nothing is served then).
  absl::Status Poll();
  // Polls every `poll` until `stop` is set (errors are logged); Stop() is the caller's.
  void Run(const std::atomic<bool>& stop);
  // Wakes the health streams to send the full list now.
  void HealthChanged();
  // Ends the health streams, stops both servers and removes both socket files. Idempotent.
  void Stop();

  int registrations() const;                    // plugin_registered=true notifications so far
  std::string last_registration_error() const;  // of the last refusal; "" after a registration
  std::string dra_socket_path() const;          // absolute; valid after Start
  std::string registration_socket_path() const;

  struct State;     // shared with the gRPC services (kubelet_plugin.cc)
  struct Endpoint;  // one gRPC server on one socket file (kubelet_plugin.cc)

 private:
  absl::Status ServeDra();
  absl::Status ServeRegistration();
  absl::Status RestoreSockets();
  void Log(const std::string& line) const;

  std::unique_ptr<State> state_;
  std::string dra_path_;
  std::string registration_path_;
  std::unique_ptr<Endpoint> dra_;
  std::unique_ptr<Endpoint> registration_;
};

}  // namespace gpuslice::dra
