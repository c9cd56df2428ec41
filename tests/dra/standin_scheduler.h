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
};

}  // namespace gpuslice::dra::testing_standin
