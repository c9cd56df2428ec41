// The scheduler extender's HTTP side (../shared/reference/kubernetes-apis.md §3): routes on a
// cpp-httplib server, over a gpuslice::k8s::Extender (gpuslice/k8s/extender.h).
//
//   POST <prefix>/filter      ExtenderArgs → ExtenderFilterResult, always HTTP 200; malformed JSON
//                             or arguments → 200 with `Error` set (kube-scheduler reads errors
//                             from there; a non-200 only says "failed filter").
//   POST <prefix>/prioritize  ExtenderArgs → HostPriorityList, HTTP 200; malformed → HTTP 400 with
//                             {"Error": ...} (kube-scheduler ignores prioritize errors anyway).
//   POST <prefix>/bind        ExtenderBindingArgs → ExtenderBindingResult, always HTTP 200; errors
//                             (malformed JSON too) in `Error`.
//   POST <prefix>/release     gpuslice's own: {"PodUID": ...} or {"PodNamespace", "PodName"} (when
//                             the pod was filed without a UID) → 200 {"Error": ""}, 404 with
//                             `Error` when not bound, 400 when malformed. For whatever watches pod
//                             deletions; `gpuslice extender` itself resyncs with the API server.
//   GET  <prefix>/state       Extender::State(), for debugging.
// <prefix> is "" or starts with '/' and has no trailing '/' ("/extender" → "/extender/filter").
// Calls are serialised by one mutex (the Binder runs under it, so a slow API server delays the
// other verbs by at most its timeout).
#pragma once

#include <httplib.h>

#include <mutex>
#include <string>

#include "gpuslice/k8s/extender.h"

namespace gpuslice::k8s {

class ExtenderService {
 public:
  // REQUIRES: extender outlives this object and every server it is registered on; binder set.
  ExtenderService(Extender* extender, Binder binder, std::string prefix = "");
  void Register(httplib::Server& server);

  // The verbs without HTTP, body text in, (status, body text) out; used by Register.
  std::pair<int, std::string> HandleFilter(const std::string& body);
  std::pair<int, std::string> HandlePrioritize(const std::string& body);
  std::pair<int, std::string> HandleBind(const std::string& body);
  std::pair<int, std::string> HandleRelease(const std::string& body);
  std::string HandleState();
  // Extender::Resync under the service's lock (for the resync loop of `gpuslice extender`).
  absl::StatusOr<ResyncResult> Resync(const nlohmann::json& pod_list);

 private:
  std::mutex mutex_;
  Extender* extender_;
  Binder binder_;
  std::string prefix_;
};

}  // namespace gpuslice::k8s
