// gpuslice/place/engine.h
//
// The online placement engine: decides, for one request at a time, the node, the GPUs and the MIG
// placements, or rejects the request with a reason; and releases allocations.
//
// Decisions are incremental. Requests are grouped into classes (equal CPU, memory, GPU count,
// share, VRAM, MIG profile and model list). For each class the engine keeps every node's
// feasibility and policy score in a tournament tree (best node at the root, feasible count per
// subtree). A decision re-scores only the nodes that changed since that class was last seen (a
// change log with per-node versions), so one decision on a large, busy cluster costs
// O(changed nodes × score + log nodes) instead of a scan of every node. A policy whose state
// changes (Policy::epoch) makes each class re-score every node once.
//
// Ties between equal scores go to the node of lowest rank (default: node index; a trace replay
// sets a random permutation, as the FGD artefact does).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/place/policy.h"

namespace gpuslice::place {

class Engine {
 public:
  // REQUIRES: policy != nullptr; rank empty or a permutation of the node indices.
  Engine(Cluster cluster, std::unique_ptr<Policy> policy, std::vector<int> rank = {});
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  const Cluster& cluster() const { return cluster_; }
  const Policy& policy() const { return *policy_; }

  // Places the request. Errors: InvalidArgument (a contradictory request), ResourceExhausted (no
  // node has room now; the message says why for the closest nodes), FailedPrecondition (no node
  // of the cluster could ever hold it).
  absl::StatusOr<Allocation> Place(const Request& request);
  // Takes over an allocation decided earlier (e.g. reloaded from a store): checks and applies it
  // as given, and gives it a new id. Errors as Cluster::Apply.
  absl::StatusOr<Allocation> Adopt(Allocation allocation);
  // Releases an allocation made by Place (matched by its id). NotFound if it is not live.
  absl::Status Release(const Allocation& allocation);
  // Allocations placed and not yet released.
  std::size_t live_allocations() const { return live_.size(); }

  // With false, a rejection's message does not list why each node refused (saves a scan of the
  // cluster per rejected request in trace replays).
  void set_explain_rejections(bool explain) { explain_rejections_ = explain; }

  // Number of nodes the request fits on now (for reports and tests).
  int FeasibleNodes(const Request& request);

 private:
  struct ClassCache;
  ClassCache& CacheFor(const Request& request);
  void Refresh(ClassCache& cache, const Request& request);
  void Rescore(ClassCache& cache, const Request& request, int node);
  bool EverFits(const Request& request) const;
  std::string RejectionReason(const Request& request) const;
  void LogChange(int node);

  Cluster cluster_;
  std::unique_ptr<Policy> policy_;
  std::vector<int> rank_;
  std::vector<int> change_log_;
  std::size_t log_base_ = 0;
  bool explain_rejections_ = true;
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, Allocation>
      live_;  // change_log_[0] is global change number log_base_
  std::unordered_map<std::string, std::unique_ptr<ClassCache>> classes_;
};

}  // namespace gpuslice::place
