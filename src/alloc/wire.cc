#include "gpuslice/alloc/wire.h"

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace gpuslice::alloc {

using nlohmann::json;

namespace {

// `object[key]` when it is there with the type of `fallback` (an integer within T's range), else
// `fallback`: these lists come from the store and from the API, and nothing in them may throw.
template <typename T>
T Field(const json& object, const char* key, T fallback) {
  const auto it = object.find(key);
  if (it == object.end()) return fallback;
  if constexpr (std::is_same_v<T, bool>) {
    return it->is_boolean() ? it->template get<bool>() : fallback;
  } else if constexpr (std::is_integral_v<T>) {
    if (it->is_number_unsigned()) {
      const auto value = it->template get<std::uint64_t>();
      return value <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())
                 ? static_cast<T>(value)
                 : fallback;
    }
    if (!it->is_number_integer()) return fallback;
    const auto value = it->template get<std::int64_t>();
    return value >= std::numeric_limits<T>::min() && value <= std::numeric_limits<T>::max()
               ? static_cast<T>(value)
               : fallback;
  } else {
    return it->is_string() ? it->template get<std::string>() : fallback;
  }
}

}  // namespace

json ClaimsToJson(const std::vector<place::GpuClaim>& claims) {
  json out = json::array();
  for (const place::GpuClaim& c : claims) {
    out.push_back({{"gpu", c.gpu},
                   {"milli", c.milli},
                   {"vram_mib", c.vram_mib},
                   {"mig_profile", c.mig_profile},
                   {"mig_start", c.mig_start},
                   {"whole", c.whole}});
  }
  return out;
}

std::vector<place::GpuClaim> ClaimsFromJson(const json& j) {
  std::vector<place::GpuClaim> claims;
  if (!j.is_array()) return claims;
  for (const json& c : j) {
    if (!c.is_object()) continue;
    place::GpuClaim claim;
    claim.gpu = Field(c, "gpu", 0);
    claim.milli = Field(c, "milli", 0);
    claim.vram_mib = Field(c, "vram_mib", std::int64_t{0});
    claim.mig_profile = Field(c, "mig_profile", -1);
    claim.mig_start = Field(c, "mig_start", -1);
    claim.whole = Field(c, "whole", false);
    claims.push_back(claim);
  }
  return claims;
}

json BoundToJson(const std::vector<BoundDevice>& devices) {
  json out = json::array();
  for (const BoundDevice& d : devices) {
    out.push_back({{"uuid", d.uuid},
                   {"gpu_uuid", d.gpu_uuid},
                   {"gpu_index", d.gpu_index},
                   {"gi", d.gi},
                   {"ci", d.ci},
                   {"vram_mib", d.vram_mib},
                   {"share_milli", d.share_milli}});
  }
  return out;
}

std::vector<BoundDevice> BoundFromJson(const json& j) {
  std::vector<BoundDevice> bound;
  if (!j.is_array()) return bound;
  for (const json& d : j) {
    if (!d.is_object()) continue;
    BoundDevice device;
    device.uuid = Field(d, "uuid", std::string());
    device.gpu_uuid = Field(d, "gpu_uuid", std::string());
    device.gpu_index = Field(d, "gpu_index", -1);
    device.gi = Field(d, "gi", -1);
    device.ci = Field(d, "ci", -1);
    device.vram_mib = Field(d, "vram_mib", std::int64_t{0});
    device.share_milli = Field(d, "share_milli", 0);
    bound.push_back(device);
  }
  return bound;
}

}  // namespace gpuslice::alloc
