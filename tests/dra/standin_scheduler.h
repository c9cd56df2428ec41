// A stand-in for the Kubernetes scheduler's DRA allocator, written from
// ../shared/reference/kubernetes-dra.md (§4.2-§4.4, §5.3), not from gpuslice's publisher: it reads
// a pool's ResourceSlices as the JSON the API server would store, and allocates devices the way
// the scheduler does, knowing nothing of MIG: a device can be allocated when it is not allocated
// yet and, for every counter it consumes, the consumption of the allocated devices plus its own
// stays within the counter's value in the pool's counter set of that name.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra::testing_standin {

// "7", "81920Mi", "80Gi", "1500m" (rounded up), "1k": the value in base units.
std::int64_t ParseQuantity(const std::string& text);

class StandinScheduler {
 public:
  // Reads every slice of one pool (the highest generation only, as consumers do). Fails when a
  // device names a counter set or counter the pool lacks, or a name repeats (§5.3).
  absl::Status Load(const std::vector<nlohmann::json>& slices);

  const std::vector<std::string>& devices() const { return order_; }
  const nlohmann::json& device(const std::string& name) const { return devices_.at(name); }

  bool CanAllocate(const std::string& name) const;
  // REQUIRES: CanAllocate(name).
  void Allocate(const std::string& name);
  void Release(const std::string& name);
  const std::set<std::string>& allocated() const { return allocated_; }

  // Consumable capacity (devices with allowMultipleAllocations; KEP 5075 as §4.4 and §4.6 of the
  // reference describe the fields): each capacity with a requestPolicy is consumed by what the
  // request asks (its policy's default when it asks nothing), raised to the policy's minimum and
  // rounded up to the next step of its validRange (or the next of its validValues); a request
  // past the policy's maximum cannot be met. The consumption of all allocations of a device stays
  // within each capacity's value. Returns the consumed amounts in base units, or an error saying
  // why the device cannot take the request.
  absl::StatusOr<std::map<std::string, std::int64_t>> Share(
      const std::string& name, const std::map<std::string, std::string>& requests) const;
  // REQUIRES: Share(name, requests) succeeded; records that consumption.
  void AllocateShare(const std::string& name, const std::map<std::string, std::int64_t>& consumed);
  void ReleaseShare(const std::string& name, const std::map<std::string, std::int64_t>& consumed);

  // The first device in publication order that `accept` likes and that can be allocated; "" if
  // none (the scheduler's first fit).
  template <typename Accept>
  std::string FirstFit(Accept accept) const {
    for (const std::string& name : order_) {
      if (accept(devices_.at(name)) && CanAllocate(name)) return name;
    }
    return "";
  }

 private:
  using Key = std::pair<std::string, std::string>;  // (counter set, counter)
  std::map<Key, std::int64_t> capacity_;
  std::map<Key, std::int64_t> used_;
  std::map<std::string, std::map<Key, std::int64_t>> consumes_;
  std::map<std::string, nlohmann::json> devices_;
  std::vector<std::string> order_;
  std::set<std::string> allocated_;
  std::map<std::string, std::map<std::string, std::int64_t>>
      shared_use_;  // device → capacity → sum
};

}  // namespace gpuslice::dra::testing_standin
