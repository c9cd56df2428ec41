// gpuslice/dra/resource_model.h
//
// The parts of Kubernetes' `resource.k8s.io/v1` ResourceSlice that the DRA driver publishes, as
// plain values, and their JSON exactly as the API server takes it
// (../shared/reference/kubernetes-dra.md §4.2-§4.4). Quantities are kept as integers with a unit
// (plain or Mi), the only forms the driver publishes, so they are compared numerically.
// Pure values; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace gpuslice::dra {

// A non-negative quantity: `value` units of 1 (plain) or of 1 MiB ("Mi").
struct Quantity {
  std::int64_t value = 0;
  bool mebibytes = false;
  std::string ToString() const;  // "7", "81920Mi"
  friend bool operator==(const Quantity&, const Quantity&) = default;
};
inline Quantity Count(std::int64_t n) { return {n, false}; }
inline Quantity Mebibytes(std::int64_t n) { return {n, true}; }

// The exact value of a Kubernetes quantity ("7", "81920Mi", "1.5Gi", "500m", "1e3", "-2k") in
// units of 10^-9, as a decimal integer string with a leading '-' when negative ("0" for zero);
// finer values are rounded up in magnitude, as the API server does. InvalidArgument for text
// that is not a quantity. Two quantities are equal exactly when these strings are.
absl::StatusOr<std::string> QuantityNanos(std::string_view text);
// A non-negative quantity as thousandths of its unit, rounded up, from QuantityNanos:
// InvalidArgument for text that is not a quantity, a negative value or one past 2^63 - 1.
absl::StatusOr<std::int64_t> ParseQuantityMilli(const std::string& text);

// A semantic version "MAJOR.MINOR.PATCH" attribute value.
struct Version {
  std::string text;
  friend bool operator==(const Version&, const Version&) = default;
};

// One attribute value: exactly one of int, bool, string (≤ 64 bytes) or version.
using AttributeValue = std::variant<std::int64_t, bool, std::string, Version>;

// A capacity's request policy (consumable capacity): a default and a range with a step.
struct RequestPolicy {
  Quantity default_value;
  Quantity min;
  Quantity max;
  Quantity step;
};

struct Capacity {
  Quantity value;
  std::optional<RequestPolicy> request_policy;  // only on devices allowing several allocations
};

// What one device takes from one counter set when allocated.
struct CounterConsumption {
  std::string counter_set;
  std::map<std::string, Quantity> counters;
};

struct DeviceTaint {
  std::string key;
  std::string value;
  std::string effect;  // "NoSchedule", "NoExecute" or "None"
};

struct Device {
  std::string name;  // DNS label, unique in the pool
  std::map<std::string, AttributeValue> attributes;
  std::map<std::string, Capacity> capacity;
  std::vector<CounterConsumption> consumes_counters;  // ≤ 2 entries
  bool allow_multiple_allocations = false;
  std::vector<DeviceTaint> taints;
};

struct CounterSet {
  std::string name;  // DNS label, unique in the pool
  std::map<std::string, Quantity> counters;
};

struct ResourceSlice {
  int index = 0;  // position in the pool: the scheduler reads slices in name order
  std::string driver;
  std::string node_name;  // also the pool's name
  std::int64_t generation = 0;
  std::int64_t slice_count = 1;
  std::vector<Device> devices;
  std::vector<CounterSet> shared_counters;
};

// The API server's limits the publisher honours (§5.1, 1.35+ unless noted).
inline constexpr int kMaxDevicesPerSlice = 128;
inline constexpr int kMaxDevicesPerSliceWithCounters = 64;  // counters or taints used
inline constexpr int kMaxCounterSetsPerSlice = 8;
inline constexpr int kMaxCountersPerSet = 32;
inline constexpr int kMaxConsumptionsPerDevice = 2;
inline constexpr int kMaxAttributesAndCapacities = 32;
inline constexpr int kMaxStringAttributeBytes = 64;

// The ResourceSlice object (apiVersion, kind, metadata with generateName
// "<index as 5+ hex digits>-<driver>-<node>-", so names sort in pool order, and the Node owner,
// spec). `node_uid` names the owner reference's uid; empty leaves the owner out.
nlohmann::json ToJson(const ResourceSlice& slice, const std::string& node_uid = "");
nlohmann::json ToJson(const Device& device);

// Checks what the API server checks on a slice (names, counts, value rules) and what it leaves to
// consumers within one slice (unique device and counter-set names). The first problem found.
// `kubernetes_134`: the 1.34 rules (counter sets beside the devices that use them, at most 32
// counters in all) instead of those of 1.35 and later (one or the other, at most 8 sets).
absl::Status Validate(const ResourceSlice& slice, bool kubernetes_134 = false);

// Whether `name` is a DNS-1123 label (≤ 63, [a-z0-9]([-a-z0-9]*[a-z0-9])?).
bool IsDnsLabel(const std::string& name);
// Lower-cases `text` and turns every run of characters outside [a-z0-9] into one '-', trimmed:
// "1g.10gb+me" -> "1g-10gb-me".
std::string DnsLabelOf(const std::string& text);

}  // namespace gpuslice::dra
