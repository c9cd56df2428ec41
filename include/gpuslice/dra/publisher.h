// gpuslice/dra/publisher.h
//
// Publishes one node's pool of ResourceSlices through the API server as Kubernetes' Go helper does
// (../shared/reference/kubernetes-dra.md §6.3). One Publish call:
//   1. lists the slices of this node and driver (DraApi::ListSlices);
//   2. matches them to the desired slices by the index their generated name starts with
//      ("<index in hex>-<driver>-<node>-…", gpuslice/dra/resource_model.h ToJson). A slice is
//      obsolete when its name carries no index of a desired slice, when another slice of the same
//      index is kept (the one of the highest generation, then the first name), or when its
//      generation is below the pool's current one;
//   3. chooses the generation: current = the highest spec.pool.generation listed (0 if none). When
//      no slice must be created and at most one must change it stays; otherwise it is current + 1
//      (a new pool starts at 1), written into every slice. A desired slice's own generation wins
//      when larger. resourceSliceCount = the number of desired slices, in every slice;
//   4. deletes the obsolete slices (with uid and resourceVersion preconditions), then updates the
//      changed ones (PUT with the listed object's metadata), then creates the missing ones.
// A slice whose spec equals the desired one is not written. Specs are compared as the API server
// means them: quantities by value ("1024Mi" = "1Gi"), a taint's server-set timeAdded ignored (and
// kept on update), empty lists and maps as absent. A changed owner reference is also a change.
// After every create or update the spec returned is compared with the one sent: a field the API
// server dropped (a feature gate off there) is FailedPrecondition naming the field and the gate,
// and the call stops; callers should not retry it before their input or the cluster changes.
// A 409 conflict (or a slice deleted under an update) re-lists and retries once within the call;
// a second one is Aborted. Other errors are DraApi's (gpuslice/dra/kube_client.h), returned as
// they come: a Publish cut short leaves a pool the next call completes.
// An empty desired list publishes one slice without devices (index 0), so that the pool shows the
// driver is alive: the publisher does this itself (BuildPool, gpuslice/dra/pool.h, already returns
// such a slice for a node without GPUs).
// Stateless between calls: everything is read back from the API server, so slices wiped by the
// kubelet (at its start, §1.6) are created again by the next call. Not thread-safe for one node.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuslice/dra/gpu_devices.h"
#include "gpuslice/dra/kube_client.h"
#include "gpuslice/dra/resource_model.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra {

class SlicePublisher {
 public:
  // `api` must outlive the publisher.
  SlicePublisher(const DraApi* api, std::string node, std::string driver = kDriverName)
      : api_(api), node_(std::move(node)), driver_(std::move(driver)) {}

  // Makes the node's pool what `desired` says (each slice's driver and node_name must be this
  // publisher's, indices distinct: else InvalidArgument). `node_uid`: the Node's uid for the owner
  // reference ("" = none).
  absl::Status Publish(std::vector<ResourceSlice> desired, const std::string& node_uid);
  // Deletes every slice of this node and driver (a conflict re-lists once).
  absl::Status Wipe();

 private:
  absl::Status PublishOnce(const std::vector<ResourceSlice>& desired,
                           const std::string& node_uid) const;
  absl::Status WipeOnce() const;

  const DraApi* api_;
  std::string node_;
  std::string driver_;
};

// Whether two ResourceSlice specs mean the same (the comparison described above).
bool SameSliceSpec(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace gpuslice::dra
