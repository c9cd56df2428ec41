// Helpers for the allocation service tests: a scratch directory, a clock the test moves by hand, a
// store that fails commits on demand, cluster specs, and a check that the active leases never
// overcommit the inventory.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/store/database.h"
#include "place/place_test_util.h"

namespace gpuslice::alloc::testing {

// A directory of the test's own, removed with it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "gpuslice_alloc_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed";
      std::abort();
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Epoch seconds that move only when the test says so.
class FakeClock {
 public:
  std::int64_t now() const { return now_.load(); }
  void Advance(std::int64_t seconds) { now_ += seconds; }
  std::function<std::int64_t()> Function() {
    return [this] { return now_.load(); };
  }

 private:
  std::atomic<std::int64_t> now_{1'700'000'000};
};

// What FaultyDatabase should get wrong; shared with the test, which arms it while the service
// owns the database.
struct Faults {
  int fail_commits = 0;  // the next N commits fail (and roll back, as after an I/O error)
  int commits = 0;       // commits that went through
  // Called at the start of every commit (on the committing thread), e.g. to hold it.
  std::function<void()> before_commit;
};

// A store::Database that forwards to another one and fails commits on demand.
class FaultyDatabase final : public store::Database {
 public:
  FaultyDatabase(std::unique_ptr<store::Database> inner, std::shared_ptr<Faults> faults)
      : inner_(std::move(inner)), faults_(std::move(faults)) {}
  std::string_view kind() const override { return inner_->kind(); }
  std::string where() const override { return inner_->where(); }
  absl::StatusOr<store::Result> Query(std::string_view sql,
                                      std::span<const store::Value> params) override {
    return inner_->Query(sql, params);
  }
  absl::Status Begin() override { return inner_->Begin(); }
  absl::Status Commit() override {
    if (faults_->before_commit) faults_->before_commit();
    if (faults_->fail_commits > 0) {
      --faults_->fail_commits;
      (void)inner_->Rollback();
      return absl::DataLossError("injected: commit failed");
    }
    absl::Status status = inner_->Commit();
    if (status.ok()) ++faults_->commits;
    return status;
  }
  absl::Status Rollback() override { return inner_->Rollback(); }

 private:
  std::unique_ptr<store::Database> inner_;
  std::shared_ptr<Faults> faults_;
};

// A GPU UUID as NVML writes it, the same for the same `tag` and `index` (a test's GPUs must
// carry real-looking UUIDs: the service refuses anything else).
inline std::string GpuUuid(std::string_view tag, int index) {
  std::uint32_t hash = 2166136261u;
  for (char c : tag) hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
  return absl::StrFormat("GPU-%08x-0000-4000-8000-%012x", hash, index);
}
// A MIG device UUID (R470 format), likewise.
inline std::string MigUuid(std::string_view tag, int index) {
  return "MIG-" + GpuUuid(tag, index).substr(4);
}

inline place::NodeSpec MigA100(const std::string& name, int gpus) {
  return place::testing::MigNode(name, gpus, "A100-80GB");
}

inline place::NodeSpec SharedGpus(const std::string& name, int gpus,
                                  std::int64_t gpu_memory_mib = 24576) {
  place::NodeSpec spec = place::testing::SharedNode(name, gpus, 64000, 262144, "L40S");
  spec.gpu_memory_mib = gpu_memory_mib;
  return spec;
}

// Replays the claims of `leases` on a fresh cluster built from `nodes`: "" when they all fit
// together, else what did not (two leases on the same MIG slots, a shared GPU over 1000 milli or
// its VRAM, a whole GPU handed out twice, a node that does not exist).
inline std::string Overcommit(const std::vector<place::NodeSpec>& nodes,
                              const std::vector<Lease>& leases) {
  absl::StatusOr<place::Cluster> cluster = place::Cluster::Create(nodes);
  if (!cluster.ok()) return absl::StrCat("cluster: ", cluster.status().message());
  std::map<std::string, int> index;
  for (int n = 0; n < cluster->node_count(); ++n) index[cluster->spec(n).name] = n;
  std::string problems;
  for (const Lease& lease : leases) {
    auto it = index.find(lease.node);
    if (it == index.end()) {
      absl::StrAppend(&problems, "lease ", lease.id, ": no node ", lease.node, "\n");
      continue;
    }
    place::Allocation allocation;
    allocation.node = it->second;
    allocation.gpus = lease.claims;
    allocation.request.num_gpu = static_cast<int>(lease.claims.size());
    if (!lease.claims.empty()) {
      const place::GpuClaim& claim = lease.claims.front();
      if (claim.whole) {
        allocation.request.gpu_milli = place::kMilliPerGpu;
      } else if (claim.mig_profile >= 0 && cluster->shape(it->second) != nullptr) {
        allocation.request.mig_profile =
            cluster->shape(it->second)->profile(claim.mig_profile).name;
      } else {
        allocation.request.gpu_milli = claim.milli;
        allocation.request.vram_mib = claim.vram_mib;
      }
    }
    if (absl::Status status = cluster->Apply(allocation); !status.ok()) {
      absl::StrAppend(&problems, "lease ", lease.id, ": ", std::string(status.message()), "\n");
    }
  }
  return problems;
}

}  // namespace gpuslice::alloc::testing
