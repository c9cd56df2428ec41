// src/alloc/lease_rows.h (private to src/alloc): the one reader of the `leases` table's rows.
// Columns are found by name in the result (SELECT kLeaseColumns, in any order), and every JSON
// column must parse as what it holds (request: an object; claims, bound: arrays). A row that does
// not is DataLoss naming the lease and the column: a damaged store is reported, never read as
// defaults.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/store/database.h"

namespace gpuslice::alloc::internal {

inline constexpr char kLeaseColumns[] =
    "id, tenant, user_name, class, purpose, request, node, claims, memory_gib, granted_at, "
    "expires_at, ended_at, state, bound, from_queue";

struct StoredLease {
  Lease lease;  // devices not filled (they come from the inventory)
  AcquireRequest request;
};

absl::StatusOr<std::vector<StoredLease>> ReadLeases(const store::Result& result);

// The stored JSON of an acquire request, and back.
nlohmann::json RequestJson(const AcquireRequest& request);
AcquireRequest RequestFromJson(const nlohmann::json& j);

}  // namespace gpuslice::alloc::internal
