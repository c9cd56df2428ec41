// gpuslice/alloc/wire.h
//
// The JSON forms of a lease's claims (place::GpuClaim) and bound devices (BoundDevice), one for the
// store's rows, the agents' API calls and `gpuslice agent`. Reading is lenient and never throws: a
// missing field, or one of another type or out of its range, takes its default (-1 for ids and
// indexes, 0 for amounts), an element that is not an object is left out, and a value that is not
// an array gives an empty list.
#pragma once

#include <vector>

#include "gpuslice/alloc/binder.h"
#include "gpuslice/place/cluster.h"
#include "nlohmann/json.hpp"

namespace gpuslice::alloc {

nlohmann::json ClaimsToJson(const std::vector<place::GpuClaim>& claims);
std::vector<place::GpuClaim> ClaimsFromJson(const nlohmann::json& json);

nlohmann::json BoundToJson(const std::vector<BoundDevice>& devices);
std::vector<BoundDevice> BoundFromJson(const nlohmann::json& json);

}  // namespace gpuslice::alloc
