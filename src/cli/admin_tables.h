// How the admin commands print the service's configuration by default (`--json` prints the API's
// own JSON instead): tenants and classes as text tables. Pure: the API's JSON in, text out.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace gpuslice::cli {

// `tenants` is the API's list (GET /v1/tenants: name, priority, may_take_full, max_gib,
// max_slices). Columns TENANT, PRIORITY, WHOLE GPU, MAX GIB ("-": not limited) and QUOTAS
// ("small=4 medium=1"; "-": none). An empty list is the line "no tenants".
std::string TenantsTable(const nlohmann::json& tenants);

// `classes` is the API's list (GET /v1/classes). Columns CLASS, WHAT (the MIG profiles it maps to
// with how many GPU models, or past three profiles their sizes, "MIG 1g.* on 15 GPU models";
// "share 250/1000, 8192 MiB"; or "whole GPU"), MAX LEASE and IDLE
// RECLAIM (durations as the options take them: 8h, 1h30m; "never"). An empty list is the line
// "no classes".
std::string ClassesTable(const nlohmann::json& classes);

}  // namespace gpuslice::cli
