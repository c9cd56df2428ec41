// gpuslice/dra/claim.h
//
// What a ResourceClaim asks of this driver, read from its `resource.k8s.io/v1` JSON as the API
// server returns it (../shared/reference/kubernetes-dra.md §4.5-§4.7, §6.4). Pure.
//
// ReadAllocation takes the claim's `status.allocation.devices.results[]` whose driver is ours and
// its opaque configuration for our driver, and checks them:
//   * the claim must be the one kubelet named (same uid: "got replaced" otherwise) and allocated;
//   * every result of ours must be in our pool (this node); there must be at least one;
//   * a shareID must be a lowercase RFC 4122 UUID; consumedCapacity values must parse;
//   * opaque parameters for our driver must be a SliceConfig (below); anything else is an error.
// Request names are given without their subrequest ("gpu/small" → "gpu", what pods name).
//
// SliceConfig, the driver's opaque parameters (JSON object, unknown keys rejected):
//   {"apiVersion": "gpu.gpuslice.io/v1alpha1", "kind": "SliceConfig",
//    "computeShareMilli": 1-1000,   // lower the compute share of a shared device
//    "vramLimitMiB": > 0}           // lower the memory cap of a shared device
// Entries apply in the order FromClass then FromClaim, each in list order, later ones winning;
// an entry that names requests applies only to them. A config may only lower what the allocation
// gave (checked when the claim is prepared, where the allocation's figures are known).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace gpuslice::dra {

inline constexpr char kConfigApiVersion[] = "gpu.gpuslice.io/v1alpha1";
inline constexpr char kConfigKind[] = "SliceConfig";

struct SliceConfig {
  std::optional<std::int64_t> compute_share_milli;
  std::optional<std::int64_t> vram_limit_mib;
  friend bool operator==(const SliceConfig&, const SliceConfig&) = default;
};

// One device of our pool allocated to the claim.
struct AllocatedDevice {
  std::string request;                        // base request name
  std::string device;                         // device name in the pool
  std::string share_id;                       // "" unless the device allows several allocations
  std::optional<std::int64_t> compute_milli;  // consumedCapacity["compute"], per mille
  std::optional<std::int64_t> memory_mib;     // consumedCapacity["memory"], whole MiB
  SliceConfig config;                         // the opaque configuration that applies
  friend bool operator==(const AllocatedDevice&, const AllocatedDevice&) = default;
};

// InvalidArgument (bad parameters, bad figures), FailedPrecondition (not allocated, replaced,
// another node's pool, nothing of ours), with a message naming the claim's field.
absl::StatusOr<std::vector<AllocatedDevice>> ReadAllocation(const nlohmann::json& claim,
                                                            const std::string& uid,
                                                            const std::string& driver,
                                                            const std::string& pool);

// Parses one opaque parameters object (exposed for tests and `--help` examples).
absl::StatusOr<SliceConfig> ParseSliceConfig(const nlohmann::json& parameters);

// Whether `id` is a lowercase RFC 4122 UUID (8-4-4-4-12 hex digits).
bool IsLowercaseUuid(const std::string& id);

}  // namespace gpuslice::dra
