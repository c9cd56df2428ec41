#include "gpuslice/dra/checkpoint.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gpuslice/util/parse_error.h"
#include "gpuslice/util/private_file.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra {
namespace {

using nlohmann::json;

constexpr const char* kKinds[] = {"mig", "fixed", "gpu", "shared"};
constexpr const char* kPhases[] = {"preparing", "prepared", "unpreparing"};

template <typename Enum, size_t N>
bool Lookup(const std::string& text, const char* const (&names)[N], Enum* out) {
  for (size_t i = 0; i < N; ++i) {
    if (text == names[i]) {
      *out = static_cast<Enum>(i);
      return true;
    }
  }
  return false;
}

// A whole number of the JSON within [lo, hi]; anything else (a float, text, out of range) throws,
// and the loader reports the file as damaged.
std::int64_t IntAt(const json& j, const char* key, std::int64_t lo, std::int64_t hi) {
  const json& v = j.at(key);
  if (!v.is_number_integer()) throw util::ParseError(std::string(key) + " is not an integer");
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
    throw util::ParseError(std::string(key) + " is out of range");
  }
  const std::int64_t n = v.get<std::int64_t>();
  if (n < lo || n > hi) throw util::ParseError(std::string(key) + " is out of range");
  return n;
}

int SmallAt(const json& j, const char* key) { return static_cast<int>(IntAt(j, key, -1, 1 << 20)); }

json DeviceJson(const DeviceRecord& d) {
  return {{"device", d.device},
          {"request", d.request},
          {"share_id", d.share_id},
          {"kind", KindName(d.kind)},
          {"gpu", d.gpu},
          {"profile_id", d.profile_id},
          {"start", d.start},
          {"gi", d.gi},
          {"ci", d.ci},
          {"uuid", d.uuid},
          {"compute_milli", d.compute_milli},
          {"vram_limit_mib", d.vram_limit_mib},
          {"cdi_id", d.cdi_id}};
}

DeviceRecord DeviceOf(const json& j) {
  DeviceRecord d;
  d.device = j.at("device").get<std::string>();
  d.request = j.at("request").get<std::string>();
  d.share_id = j.at("share_id").get<std::string>();
  if (!Lookup(j.at("kind").get<std::string>(), kKinds, &d.kind)) {
    throw util::ParseError("unknown device kind");
  }
  d.gpu = SmallAt(j, "gpu");
  d.profile_id = SmallAt(j, "profile_id");
  d.start = SmallAt(j, "start");
  d.gi = SmallAt(j, "gi");
  d.ci = SmallAt(j, "ci");
  d.uuid = j.at("uuid").get<std::string>();
  d.compute_milli = IntAt(j, "compute_milli", 0, std::int64_t{1} << 40);
  d.vram_limit_mib = IntAt(j, "vram_limit_mib", 0, std::int64_t{1} << 40);
  d.cdi_id = j.at("cdi_id").get<std::string>();
  return d;
}

}  // namespace

const char* PhaseName(ClaimPhase phase) { return kPhases[static_cast<int>(phase)]; }
const char* KindName(DeviceKind kind) { return kKinds[static_cast<int>(kind)]; }

absl::StatusOr<Checkpoint> LoadCheckpoint(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return Checkpoint{};
    return absl::DataLossError(
        absl::StrCat("cannot read the DRA checkpoint ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  Checkpoint checkpoint;
  try {
    const json doc = json::parse(text.str());
    if (IntAt(doc, "version", 0, 1000) != 1) throw util::ParseError("unknown version");
    for (const auto& [uid, c] : doc.at("claims").items()) {
      ClaimRecord record;
      record.namespace_name = c.at("namespace").get<std::string>();
      record.name = c.at("name").get<std::string>();
      if (!Lookup(c.at("phase").get<std::string>(), kPhases, &record.phase)) {
        throw util::ParseError("unknown phase");
      }
      for (const json& d : c.at("devices")) record.devices.push_back(DeviceOf(d));
      checkpoint.claims[uid] = std::move(record);
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(
        "the DRA checkpoint ", path, " is damaged (", e.what(),
        "); the driver will not start without knowing what it created: inspect the file, destroy "
        "instances it no longer needs, then move the file away"));
  }
  return checkpoint;
}

absl::Status SaveCheckpoint(const std::string& path, const Checkpoint& checkpoint) {
  json claims = json::object();
  for (const auto& [uid, c] : checkpoint.claims) {
    json devices = json::array();
    for (const DeviceRecord& d : c.devices) devices.push_back(DeviceJson(d));
    claims[uid] = {{"namespace", c.namespace_name},
                   {"name", c.name},
                   {"phase", PhaseName(c.phase)},
                   {"devices", devices}};
  }
  const json doc = {{"version", 1}, {"claims", claims}};
  absl::Status written = util::WritePrivateFile(path, doc.dump(1) + "\n");
  if (!written.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot write the DRA checkpoint: ", written.message()));
  }
  return absl::OkStatus();
}

}  // namespace gpuslice::dra
