#include "gpuslice/dra/claim.h"

#include <cctype>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpuslice/dra/resource_model.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra {
namespace {

using nlohmann::json;

const json* Child(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string StringAt(const json& object, const char* key) {
  const json* v = Child(object, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

absl::StatusOr<std::int64_t> PositiveInt(const json& value, const char* key, std::int64_t max) {
  if (!value.is_number_integer() || value.get<std::int64_t>() < 1 ||
      value.get<std::int64_t>() > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("SliceConfig.", key, " must be an integer from 1 to ", max));
  }
  return value.get<std::int64_t>();
}

// Applies one opaque entry's parameters over `into`.
absl::Status Overlay(const SliceConfig& entry, SliceConfig& into) {
  if (entry.compute_share_milli) into.compute_share_milli = entry.compute_share_milli;
  if (entry.vram_limit_mib) into.vram_limit_mib = entry.vram_limit_mib;
  return absl::OkStatus();
}

struct ConfigEntry {
  std::vector<std::string> requests;  // empty = every request
  SliceConfig config;
};

// Our opaque entries in precedence order (FromClass first, then FromClaim).
absl::StatusOr<std::vector<ConfigEntry>> ConfigEntries(const json& allocation,
                                                       const std::string& driver) {
  std::vector<ConfigEntry> by_source[2];
  const json* devices = Child(allocation, "devices");
  const json* config = devices == nullptr ? nullptr : Child(*devices, "config");
  if (config == nullptr || !config->is_array()) return std::vector<ConfigEntry>{};
  for (size_t i = 0; i < config->size(); ++i) {
    const json& entry = (*config)[i];
    const json* opaque = Child(entry, "opaque");
    if (opaque == nullptr || StringAt(*opaque, "driver") != driver) continue;
    const json* parameters = Child(*opaque, "parameters");
    absl::StatusOr<SliceConfig> parsed =
        ParseSliceConfig(parameters == nullptr ? json(nullptr) : *parameters);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("status.allocation.devices.config[", i,
                       "].opaque.parameters: ", parsed.status().message()));
    }
    ConfigEntry out{{}, *parsed};
    if (const json* requests = Child(entry, "requests"); requests && requests->is_array()) {
      for (const json& r : *requests) {
        if (r.is_string()) out.requests.push_back(r.get<std::string>());
      }
    }
    by_source[StringAt(entry, "source") == "FromClaim" ? 1 : 0].push_back(std::move(out));
  }
  std::vector<ConfigEntry> ordered = std::move(by_source[0]);
  for (ConfigEntry& e : by_source[1]) ordered.push_back(std::move(e));
  return ordered;
}

absl::StatusOr<std::optional<std::int64_t>> Consumed(const json& result, const char* key,
                                                     std::int64_t unit_milli) {
  const json* consumed = Child(result, "consumedCapacity");
  const json* value = consumed == nullptr ? nullptr : Child(*consumed, key);
  if (value == nullptr) return std::optional<std::int64_t>();
  absl::StatusOr<std::int64_t> milli =
      value->is_string()           ? ParseQuantityMilli(value->get<std::string>())
      : value->is_number_integer() ? ParseQuantityMilli(std::to_string(value->get<std::int64_t>()))
                                   : absl::InvalidArgumentError("not a quantity");
  if (!milli.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("consumedCapacity.", key, ": ", milli.status().message()));
  }
  return std::optional<std::int64_t>(*milli / unit_milli);
}

absl::StatusOr<AllocatedDevice> ReadResult(const json& result, size_t i,
                                           const std::vector<ConfigEntry>& configs) {
  AllocatedDevice device;
  const std::string request = StringAt(result, "request");
  device.request = request.substr(0, request.find('/'));
  device.device = StringAt(result, "device");
  device.share_id = StringAt(result, "shareID");
  const std::string where = absl::StrCat("status.allocation.devices.results[", i, "]");
  if (device.device.empty() || device.request.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": no device or request name"));
  }
  if (!device.share_id.empty() && !IsLowercaseUuid(device.share_id)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".shareID is not a lowercase UUID"));
  }
  absl::StatusOr<std::optional<std::int64_t>> compute = Consumed(result, "compute", 1000);
  absl::StatusOr<std::optional<std::int64_t>> memory =
      Consumed(result, "memory", std::int64_t{1000} * 1024 * 1024);
  if (!compute.ok())
    return absl::InvalidArgumentError(absl::StrCat(where, ".", compute.status().message()));
  if (!memory.ok())
    return absl::InvalidArgumentError(absl::StrCat(where, ".", memory.status().message()));
  device.compute_milli = *compute;
  device.memory_mib = *memory;
  for (const ConfigEntry& entry : configs) {
    bool applies = entry.requests.empty();
    for (const std::string& r : entry.requests)
      applies = applies || r == request || r == device.request;
    if (applies) (void)Overlay(entry.config, device.config);
  }
  return device;
}

}  // namespace

bool IsLowercaseUuid(const std::string& id) {
  if (id.size() != 36) return false;
  for (size_t i = 0; i < id.size(); ++i) {
    const char c = id[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!std::isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<SliceConfig> ParseSliceConfig(const json& parameters) {
  if (!parameters.is_object()) return absl::InvalidArgumentError("must be a JSON object");
  if (StringAt(parameters, "apiVersion") != kConfigApiVersion ||
      StringAt(parameters, "kind") != kConfigKind) {
    return absl::InvalidArgumentError(absl::StrCat("expected apiVersion \"", kConfigApiVersion,
                                                   "\" and kind \"", kConfigKind, "\""));
  }
  SliceConfig config;
  for (const auto& [key, value] : parameters.items()) {
    if (key == "apiVersion" || key == "kind") continue;
    if (key == "computeShareMilli") {
      absl::StatusOr<std::int64_t> v = PositiveInt(value, "computeShareMilli", 1000);
      if (!v.ok()) return v.status();
      config.compute_share_milli = *v;
    } else if (key == "vramLimitMiB") {
      absl::StatusOr<std::int64_t> v = PositiveInt(value, "vramLimitMiB", std::int64_t{1} << 40);
      if (!v.ok()) return v.status();
      config.vram_limit_mib = *v;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown field \"", key.substr(0, 64), "\" (known: computeShareMilli, vramLimitMiB)"));
    }
  }
  return config;
}

absl::StatusOr<std::vector<AllocatedDevice>> ReadAllocation(const json& claim,
                                                            const std::string& uid,
                                                            const std::string& driver,
                                                            const std::string& pool) {
  const json* metadata = Child(claim, "metadata");
  if (metadata == nullptr || StringAt(*metadata, "uid") != uid) {
    return absl::FailedPreconditionError(
        "the claim got replaced: its uid is not the one kubelet asked for");
  }
  const json* status = Child(claim, "status");
  const json* allocation = status == nullptr ? nullptr : Child(*status, "allocation");
  const json* devices = allocation == nullptr ? nullptr : Child(*allocation, "devices");
  const json* results = devices == nullptr ? nullptr : Child(*devices, "results");
  if (results == nullptr || !results->is_array()) {
    return absl::FailedPreconditionError("the claim is not allocated");
  }
  absl::StatusOr<std::vector<ConfigEntry>> configs = ConfigEntries(*allocation, driver);
  if (!configs.ok()) return configs.status();
  std::vector<AllocatedDevice> out;
  for (size_t i = 0; i < results->size(); ++i) {
    const json& result = (*results)[i];
    if (StringAt(result, "driver") != driver) continue;
    if (StringAt(result, "pool") != pool) {
      return absl::FailedPreconditionError(absl::StrCat(
          "status.allocation.devices.results[", i, "] is in pool \"",
          StringAt(result, "pool").substr(0, 253), "\", not this node's \"", pool, "\""));
    }
    absl::StatusOr<AllocatedDevice> device = ReadResult(result, i, *configs);
    if (!device.ok()) return device.status();
    out.push_back(std::move(*device));
  }
  if (out.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the claim has no device of driver ", driver));
  }
  return out;
}

}  // namespace gpuslice::dra
