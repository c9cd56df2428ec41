#include "gpuslice/alloc/wire.h"

namespace gpuslice::alloc {

using nlohmann::json;

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
    place::GpuClaim claim;
    claim.gpu = c.value("gpu", 0);
    claim.milli = c.value("milli", 0);
    claim.vram_mib = c.value("vram_mib", std::int64_t{0});
    claim.mig_profile = c.value("mig_profile", -1);
    claim.mig_start = c.value("mig_start", -1);
    claim.whole = c.value("whole", false);
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
    BoundDevice device;
    device.uuid = d.value("uuid", "");
    device.gpu_uuid = d.value("gpu_uuid", "");
    device.gpu_index = d.value("gpu_index", -1);
    device.gi = d.value("gi", -1);
    device.ci = d.value("ci", -1);
    device.vram_mib = d.value("vram_mib", std::int64_t{0});
    device.share_milli = d.value("share_milli", 0);
    bound.push_back(device);
  }
  return bound;
}

}  // namespace gpuslice::alloc
