// gpuslice/dra/kube_client.h
//
// The DRA driver's calls to the Kubernetes API server (../shared/reference/kubernetes-dra.md §6.2),
// over gpuslice/k8s/kube_api.h's KubeApiClient (in-cluster server, CA and a token re-read on every
// call). Objects travel as the API server's JSON (resource.k8s.io/v1).
//
// Errors, the same for every call:
//   Unavailable         no connection or no reply; HTTP 5xx or 429 (retry: gpuslice/dra/backoff.h)
//   PermissionDenied    HTTP 401/403
//   NotFound            HTTP 404 (DeleteSlice treats it as success: already gone)
//   Aborted             HTTP 409: a conflict (stale resourceVersion or uid); re-read and retry
//   InvalidArgument     HTTP 400/422, with the API server's message
//   Internal            any other status, or a 2xx reply that is not the JSON expected
//   FailedPrecondition  the token file cannot be read
// Each message names the verb and path. Lists are read in one page (no `limit`). Thread-safe:
// every call opens its own connection.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuslice/k8s/kube_api.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra {

inline constexpr char kResourceSlicesPath[] = "/apis/resource.k8s.io/v1/resourceslices";

class DraApi {
 public:
  explicit DraApi(k8s::KubeApiClient client) : client_(std::move(client)) {}

  // GET /version: "gitVersion", e.g. "v1.35.0" (gpuslice/dra/pool.h LayoutFor reads it).
  absl::StatusOr<std::string> GitVersion() const;
  // GET /api/v1/nodes/<node>: metadata.uid, for the slices' owner reference.
  absl::StatusOr<std::string> NodeUid(const std::string& node) const;
  // GET resourceslices?fieldSelector=spec.nodeName=<node>,spec.driver=<driver>: the items.
  absl::StatusOr<std::vector<nlohmann::json>> ListSlices(const std::string& node,
                                                         const std::string& driver) const;
  // POST resourceslices: the created object (name, uid, resourceVersion assigned).
  absl::StatusOr<nlohmann::json> CreateSlice(const nlohmann::json& slice) const;
  // PUT resourceslices/<metadata.name>; `slice` carries metadata.resourceVersion. The stored
  // object.
  absl::StatusOr<nlohmann::json> UpdateSlice(const nlohmann::json& slice) const;
  // DELETE resourceslices/<name> with preconditions on uid and resourceVersion (each only if
  // non-empty). A slice already gone (404) is success.
  absl::Status DeleteSlice(const std::string& name, const std::string& uid,
                           const std::string& resource_version) const;
  // GET namespaces/<namespace>/resourceclaims/<name>: the ResourceClaim.
  absl::StatusOr<nlohmann::json> GetClaim(const std::string& name_space,
                                          const std::string& name) const;

  const k8s::KubeApiClient& client() const { return client_; }

 private:
  // One call: a 2xx reply's JSON object, or the error of the table above.
  absl::StatusOr<nlohmann::json> Request(std::string_view method, const std::string& path,
                                         const nlohmann::json* body) const;
  k8s::KubeApiClient client_;
};

// The status for a non-2xx reply (the table above); `what` = "<verb> <path>".
absl::Status StatusOfReply(const std::string& what, const k8s::HttpReply& reply);

// `text` with every byte outside [A-Za-z0-9-_.~] written as %XX (a query parameter's value).
std::string UrlEncode(const std::string& text);

}  // namespace gpuslice::dra
