#include "gpuslice/place/engine.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpuslice::place {

struct Engine::ClassCache {
  bool initialized = false;
  int ever_fits = -1;  // could any node hold the class when empty (-1 not known yet)
  std::uint64_t epoch = 0;
  std::size_t cursor = 0;  // global change number processed up to
  std::vector<std::uint64_t> seen_version;
  std::vector<Score> score;
  std::vector<std::uint8_t> feasible;
  std::size_t leaves = 1;
  std::vector<int> best;   // tournament tree: best node of each subtree, -1 if none feasible
  std::vector<int> count;  // feasible nodes in each subtree
};

Engine::Engine(Cluster cluster, std::unique_ptr<Policy> policy, std::vector<int> rank)
    : cluster_(std::move(cluster)), policy_(std::move(policy)), rank_(std::move(rank)) {
  if (rank_.size() != static_cast<size_t>(cluster_.node_count())) {
    rank_.resize(static_cast<size_t>(cluster_.node_count()));
    std::iota(rank_.begin(), rank_.end(), 0);
  }
}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

namespace {

std::string ClassKey(const Request& request) {
  return absl::StrCat(request.cpu_milli, "|", request.memory_mib, "|", request.num_gpu, "|",
                      request.gpu_milli, "|", request.vram_mib, "|", request.mig_profile, "|",
                      absl::StrJoin(request.mig_class, ",", absl::PairFormatter("=")), "|",
                      absl::StrJoin(request.models, ","));
}

}  // namespace

Engine::ClassCache& Engine::CacheFor(const Request& request) {
  std::unique_ptr<ClassCache>& cache = classes_[ClassKey(request)];
  if (!cache) {
    cache = std::make_unique<ClassCache>();
    const size_t n = static_cast<size_t>(cluster_.node_count());
    cache->seen_version.assign(n, ~0ULL);
    cache->score.assign(n, Score{});
    cache->feasible.assign(n, 0);
    while (cache->leaves < std::max<size_t>(n, 1)) cache->leaves *= 2;
    cache->best.assign(2 * cache->leaves, -1);
    cache->count.assign(2 * cache->leaves, 0);
  }
  return *cache;
}

void Engine::Rescore(ClassCache& cache, const Request& request, int node) {
  const size_t i = static_cast<size_t>(node);
  cache.seen_version[i] = cluster_.version(node);
  const bool feasible = cluster_.Fits(node, request);
  cache.feasible[i] = feasible ? 1 : 0;
  cache.score[i] = feasible && !policy_->picks_uniformly()
                       ? policy_->ScoreNode(cluster_, node, request)
                       : Score{};
  size_t pos = cache.leaves + i;
  cache.best[pos] = feasible ? node : -1;
  cache.count[pos] = feasible ? 1 : 0;
  for (pos /= 2; pos >= 1; pos /= 2) {
    const int a = cache.best[2 * pos];
    const int b = cache.best[2 * pos + 1];
    int winner = a;
    if (a < 0) {
      winner = b;
    } else if (b >= 0) {
      const Score& sa = cache.score[static_cast<size_t>(a)];
      const Score& sb = cache.score[static_cast<size_t>(b)];
      if (sb > sa || (sb == sa && rank_[static_cast<size_t>(b)] < rank_[static_cast<size_t>(a)])) {
        winner = b;
      }
    }
    cache.best[pos] = winner;
    cache.count[pos] = cache.count[2 * pos] + cache.count[2 * pos + 1];
  }
}

void Engine::Refresh(ClassCache& cache, const Request& request) {
  const size_t n = static_cast<size_t>(cluster_.node_count());
  const size_t end = log_base_ + change_log_.size();
  if (!cache.initialized || cache.epoch != policy_->epoch() || end - cache.cursor > n) {
    const bool all = !cache.initialized || cache.epoch != policy_->epoch();
    for (int node = 0; node < cluster_.node_count(); ++node) {
      if (all || cache.seen_version[static_cast<size_t>(node)] != cluster_.version(node)) {
        Rescore(cache, request, node);
      }
    }
    cache.initialized = true;
    cache.epoch = policy_->epoch();
  } else {
    for (size_t c = cache.cursor; c < end; ++c) {
      const int node = change_log_[c - log_base_];
      if (cache.seen_version[static_cast<size_t>(node)] != cluster_.version(node)) {
        Rescore(cache, request, node);
      }
    }
  }
  cache.cursor = end;
}

void Engine::LogChange(int node) {
  change_log_.push_back(node);
  const size_t n = static_cast<size_t>(std::max(cluster_.node_count(), 16));
  if (change_log_.size() > 8 * n) {
    const size_t drop = change_log_.size() - 4 * n;
    change_log_.erase(change_log_.begin(), change_log_.begin() + static_cast<long>(drop));
    log_base_ += drop;
  }
}

int Engine::FeasibleNodes(const Request& request) {
  if (!ValidateRequest(request).ok()) return 0;
  ClassCache& cache = CacheFor(request);
  Refresh(cache, request);
  return cache.count[1];
}

bool Engine::EverFits(const Request& request) const {
  for (int node = 0; node < cluster_.node_count(); ++node) {
    const NodeSpec& spec = cluster_.spec(node);
    if (spec.cpu_milli < request.cpu_milli || spec.memory_mib < request.memory_mib ||
        spec.max_pods < 1) {
      continue;
    }
    if (request.cpu_only()) return true;
    if (spec.gpus < request.num_gpu || !cluster_.ModelAllowed(node, request)) continue;
    if (request.whole()) return true;
    if (spec.mode == GpuMode::kShared && !request.mig() &&
        (spec.gpu_memory_mib == 0 || request.vram_mib <= spec.gpu_memory_mib)) {
      return true;
    }
    if (spec.mode == GpuMode::kMig && cluster_.MigProfileFor(node, request) >= 0) return true;
  }
  return false;
}

std::string Engine::RejectionReason(const Request& request) const {
  std::map<std::string, int> reasons;
  for (int node = 0; node < cluster_.node_count(); ++node) {
    std::string why = cluster_.WhyNot(node, request);
    // Group by the kind of reason (text before the first ':').
    const size_t colon = why.find(':');
    reasons[colon == std::string::npos ? why : why.substr(0, colon)] += 1;
  }
  std::vector<std::pair<int, std::string>> sorted;
  for (const auto& [why, count] : reasons) sorted.emplace_back(count, why);
  std::sort(sorted.rbegin(), sorted.rend());
  std::vector<std::string> parts;
  for (size_t i = 0; i < sorted.size() && i < 3; ++i) {
    parts.push_back(absl::StrCat(sorted[i].second, " on ", sorted[i].first, " node(s)"));
  }
  return absl::StrJoin(parts, "; ");
}

absl::StatusOr<Allocation> Engine::Place(const Request& request) {
  if (absl::Status status = ValidateRequest(request); !status.ok()) return status;
  ClassCache& cache = CacheFor(request);
  Refresh(cache, request);
  int node = -1;
  if (cache.count[1] > 0) {
    if (policy_->picks_uniformly()) {
      int k = policy_->Pick(cache.count[1]);
      size_t pos = 1;
      while (pos < cache.leaves) {
        if (cache.count[2 * pos] > k) {
          pos = 2 * pos;
        } else {
          k -= cache.count[2 * pos];
          pos = 2 * pos + 1;
        }
      }
      node = static_cast<int>(pos - cache.leaves);
    } else {
      node = cache.best[1];
    }
  }
  if (node < 0) {
    policy_->Observe(request, false);
    if (cache.ever_fits < 0) cache.ever_fits = EverFits(request) ? 1 : 0;
    if (cache.ever_fits == 0) {
      return absl::FailedPreconditionError(
          "no node of the cluster can ever hold this request (CPU, memory, GPU count, model or "
          "MIG profile)");
    }
    if (!explain_rejections_) return absl::ResourceExhaustedError("no node has room now");
    return absl::ResourceExhaustedError(
        absl::StrCat("no node has room now: ", RejectionReason(request)));
  }
  Allocation allocation;
  allocation.node = node;
  allocation.request = request;
  if (!request.cpu_only()) allocation.gpus = policy_->ChooseGpus(cluster_, node, request);
  if (absl::Status status = cluster_.Apply(allocation); !status.ok()) {
    return absl::InternalError(
        absl::StrCat("policy ", std::string(policy_->name()),
                     " chose an invalid placement: ", std::string(status.message())));
  }
  LogChange(node);
  policy_->Observe(request, true);
  allocation.id = next_id_++;
  live_.emplace(allocation.id, allocation);
  return allocation;
}

absl::StatusOr<Allocation> Engine::Adopt(Allocation allocation) {
  if (absl::Status status = ValidateRequest(allocation.request); !status.ok()) return status;
  if (absl::Status status = cluster_.Apply(allocation); !status.ok()) return status;
  LogChange(allocation.node);
  allocation.id = next_id_++;
  live_.emplace(allocation.id, allocation);
  return allocation;
}

absl::Status Engine::Release(const Allocation& allocation) {
  auto it = live_.find(allocation.id);
  if (it == live_.end()) {
    return absl::NotFoundError(absl::StrCat("allocation ", allocation.id, " is not live"));
  }
  // Release what was granted, whatever the caller's copy says.
  if (absl::Status status = cluster_.Release(it->second); !status.ok()) return status;
  LogChange(it->second.node);
  live_.erase(it);
  return absl::OkStatus();
}

}  // namespace gpuslice::place
