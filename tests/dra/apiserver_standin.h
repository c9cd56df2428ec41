// A stand-in Kubernetes API server for the DRA driver's tests, written from
// ../shared/reference/kubernetes-dra.md (§4, §5, §6.2), not from gpuslice's code: it is the oracle
// for gpuslice/dra/kube_client.h and gpuslice/dra/publisher.h, so it validates with its own rules
// and shares nothing with gpuslice::dra's Validate or JSON.
//
// HTTP on 127.0.0.1 (an ephemeral port, kept across Stop/Start) with cpp-httplib. It serves:
//   GET /version; GET /api/v1/nodes/<node>;
//   GET|POST|DELETE(collection) /apis/resource.k8s.io/v1/resourceslices (fieldSelector on
//     spec.nodeName and spec.driver, "=" or "==", comma-separated);
//   GET|PUT|DELETE /apis/resource.k8s.io/v1/resourceslices/<name> (DELETE takes DeleteOptions
//     preconditions on uid and resourceVersion);
//   GET /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name>.
// Not served: watch (400), PATCH, claim status. Errors are v1.Status objects with the HTTP code.
// As a real API server it: requires "Authorization: Bearer <token>" when a token is set (401);
// names objects from generateName + 5 random characters; assigns uid, resourceVersion (one
// counter for everything), creationTimestamp, metadata.generation; checks resourceVersion on PUT
// (409, 422 if missing) and the immutable spec.driver, spec.pool.name, spec.nodeName (422);
// silently drops the fields of disabled feature gates (DRAPartitionableDevices,
// DRAConsumableCapacity, DRADeviceTaints) unless the stored object already uses them; stores
// quantities in canonical form ("1024Mi" -> "1Gi", "2000" -> "2k"); sets a taint's timeAdded
// when it is missing; and enforces the name rules and limits of §5.1/§5.2 and the one-of rules of
// §4.2 by the version's minor (before 1.35: counter sets beside the devices that use them, at most
// 32 counters in a slice; 1.35 and later: devices or counter sets, at most 8 sets, 64 devices
// when any device has taints or consumes counters), answering 422 with every problem found.
// Fault injection: the next N requests answered with a status (e.g. 503) or with text that is
// not JSON; Stop/Start (connections refused meanwhile); an action run before the next request of
// a method (another writer's change, e.g. TouchSlice for a conflict). Thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace gpuslice::dra::testing_standin {

struct ApiServerOptions {
  std::string git_version = "v1.35.0";
  std::string token;                         // required bearer token; "" = none required
  std::map<std::string, std::string> nodes;  // Node name -> uid
  std::set<std::string> disabled_gates;      // feature gates off: their fields are dropped
};

struct LoggedRequest {
  std::string method;
  std::string path;                          // without the query
  std::map<std::string, std::string> query;  // decoded parameters
  std::string authorization;
  nlohmann::json body;  // null without a body, the text as a string if not JSON
  int status = 0;       // the answer's
};

class ApiServerStandin {
 public:
  explicit ApiServerStandin(ApiServerOptions options = {});
  ~ApiServerStandin();
  ApiServerStandin(const ApiServerStandin&) = delete;
  ApiServerStandin& operator=(const ApiServerStandin&) = delete;

  std::string url() const;  // "http://127.0.0.1:<port>"

  // Settings; any time.
  void SetVersion(std::string git_version);
  void SetToken(std::string token);
  void SetDisabledGates(std::set<std::string> gates);
  void AddNode(const std::string& name, const std::string& uid);
  // Sets an annotation of a Node (served with GET /api/v1/nodes/<node>).
  void SetNodeAnnotation(const std::string& node, const std::string& key, const std::string& value);

  // Faults.
  void FailNext(int count, int status = 503);  // the next `count` requests get `status`
  void GarbageNext(int count);                 // ... get 200 with a body that is not JSON
  // Runs `action` just before the next request with this method is handled.
  void BeforeNext(const std::string& method, std::function<void()> action);
  void Stop();   // stops listening: connections are refused
  void Start();  // listens again on the same port

  // The store.
  std::vector<nlohmann::json> Slices() const;  // every ResourceSlice, by name
  std::optional<nlohmann::json> Slice(const std::string& name) const;
  // What the kubelet does at its start: deletes every slice of `node` (any driver); the count.
  int WipeSlices(const std::string& node);
  // Another writer's update of a slice: a new resourceVersion (and a label). False if absent.
  bool TouchSlice(const std::string& name);
  // Stores `slice` (metadata.name required) as it is, past every check: what a buggy or newer
  // writer might leave behind. A resourceVersion and uid are assigned.
  void PutSliceUnchecked(nlohmann::json slice);
  // Stores a ResourceClaim (metadata.namespace and name required); uid and resourceVersion are
  // assigned when absent. The stored object.
  nlohmann::json PutClaim(nlohmann::json claim);

  // Every request answered, in order.
  std::vector<LoggedRequest> log() const;
  void ClearLog();
  // How many logged requests had this method (and, if non-zero, this status).
  int Count(const std::string& method, int status = 0) const;

 private:
  struct Reply {
    int status = 200;
    nlohmann::json body;
  };
  void Listen();
  void Route(httplib::Server& server);
  bool Intercept(const httplib::Request& request, httplib::Response& response);
  void Log(const httplib::Request& request, const httplib::Response& response);
  Reply Get(const httplib::Request& request);
  Reply ListSlices(const httplib::Request& request);
  Reply CreateSlice(const httplib::Request& request);
  Reply UpdateSlice(const httplib::Request& request, const std::string& name);
  Reply DeleteSlice(const httplib::Request& request, const std::string& name);
  Reply DeleteSlices(const httplib::Request& request);
  // Drops disabled fields, canonicalises quantities, validates: the error reply, if any.
  std::optional<Reply> Admit(nlohmann::json& object, const nlohmann::json* old);
  std::string NextVersion();
  std::string RandomText(size_t length, const std::string& alphabet);

  mutable std::mutex mutex_;
  ApiServerOptions options_;
  std::map<std::string, nlohmann::json> slices_;
  std::map<std::string, nlohmann::json> claims_;  // "<ns>/<name>"
  std::map<std::string, std::map<std::string, std::string>> node_annotations_;
  std::vector<LoggedRequest> log_;
  int fail_count_ = 0;
  int fail_status_ = 503;
  int garbage_count_ = 0;
  std::deque<std::pair<std::string, std::function<void()>>> before_;
  std::int64_t version_ = 1000;
  std::mt19937_64 random_;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace gpuslice::dra::testing_standin
