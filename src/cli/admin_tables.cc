#include "admin_tables.h"

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common.h"
#include "gpuslice/util/duration.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

// A field of an API object, or `fallback` when it is absent or of another type.
template <typename T>
T FieldOr(const json& object, const char* key, T fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  if (it == object.end()) return fallback;
  if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->get<std::string>() : fallback;
  } else if constexpr (std::is_same_v<T, bool>) {
    return it->is_boolean() ? it->get<bool>() : fallback;
  } else {
    return it->is_number() ? it->get<T>() : fallback;
  }
}

std::string QuotasText(const json& tenant) {
  std::vector<std::string> quotas;
  auto it = tenant.find("max_slices");
  if (it != tenant.end() && it->is_object()) {
    for (const auto& [name, count] : it->items()) {
      quotas.push_back(absl::StrCat(name, "=", count.is_number() ? count.dump() : "?"));
    }
  }
  return quotas.empty() ? "-" : absl::StrJoin(quotas, " ");
}

std::string WhatText(const json& klass) {
  if (FieldOr(klass, "full", false)) return "whole GPU";
  if (const int share = FieldOr(klass, "share_milli", 0); share > 0) {
    const auto vram = FieldOr<std::int64_t>(klass, "vram_mib", 0);
    return absl::StrCat("share ", share, "/1000", vram > 0 ? absl::StrCat(", ", vram, " MiB") : "");
  }
  std::map<std::string, int> models_per_profile;
  auto it = klass.find("mig");
  if (it != klass.end() && it->is_object()) {
    for (const auto& [model, profile] : it->items()) {
      if (profile.is_string()) ++models_per_profile[profile.get<std::string>()];
    }
  }
  if (models_per_profile.empty()) return "-";
  std::vector<std::string> parts;
  if (models_per_profile.size() <= 3) {
    for (const auto& [profile, models] : models_per_profile) {
      parts.push_back(absl::StrCat(profile, " (", models, models == 1 ? " model)" : " models)"));
    }
    return "MIG " + absl::StrJoin(parts, ", ");
  }
  // More profiles than a line holds (the default classes map every MIG model): their sizes,
  // "1g.*", and how many models; --json lists each.
  std::set<std::string> sizes;
  int models = 0;
  for (const auto& [profile, count] : models_per_profile) {
    sizes.insert(profile.substr(0, profile.find('.')) + ".*");
    models += count;
  }
  return absl::StrCat("MIG ", absl::StrJoin(sizes, ", "), " on ", models, " GPU models");
}

std::string DurationOrNever(std::int64_t seconds) {
  return seconds > 0 ? util::DurationText(seconds) : "never";
}

}  // namespace

std::string TenantsTable(const json& tenants) {
  if (!tenants.is_array() || tenants.empty()) return "no tenants\n";
  Table table({"TENANT", "PRIORITY", "WHOLE GPU", "MAX GIB", "QUOTAS"});
  table.RightAlign(1);
  table.RightAlign(3);
  for (const json& tenant : tenants) {
    const double max_gib = FieldOr(tenant, "max_gib", 0.0);
    table.Add({FieldOr<std::string>(tenant, "name", "?"),
               std::to_string(FieldOr(tenant, "priority", 0)),
               FieldOr(tenant, "may_take_full", false) ? "yes" : "no",
               max_gib > 0 ? absl::StrFormat("%g", max_gib) : "-", QuotasText(tenant)});
  }
  return table.Render();
}

std::string ClassesTable(const json& classes) {
  if (!classes.is_array() || classes.empty()) return "no classes\n";
  Table table({"CLASS", "WHAT", "MAX LEASE", "IDLE RECLAIM"});
  for (const json& klass : classes) {
    table.Add({FieldOr<std::string>(klass, "name", "?"), WhatText(klass),
               DurationOrNever(FieldOr<std::int64_t>(klass, "max_lease_s", 0)),
               DurationOrNever(FieldOr<std::int64_t>(klass, "idle_timeout_s", 0))});
  }
  return table.Render();
}

}  // namespace gpuslice::cli
