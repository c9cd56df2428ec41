#include "gpuslice/dra/cdi.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "gpuslice/util/private_file.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra {

std::string CdiDeviceId(const std::string& claim_uid, const std::string& device) {
  return absl::StrCat(kCdiKind, "=", claim_uid, "-", device);
}

std::string CdiSpecPath(const std::string& dir, const std::string& claim_uid) {
  return absl::StrCat(dir, "/gpu.gpuslice.io-claim_", claim_uid, ".json");
}

nlohmann::json CdiSpec(const std::string& claim_uid, const std::vector<CdiDevice>& devices) {
  nlohmann::json list = nlohmann::json::array();
  for (const CdiDevice& d : devices) {
    nlohmann::json edits = nlohmann::json::object();
    nlohmann::json env = nlohmann::json::array();
    for (const auto& [name, value] : d.env) env.push_back(absl::StrCat(name, "=", value));
    if (!env.empty()) edits["env"] = env;
    nlohmann::json nodes = nlohmann::json::array();
    for (const CdiDeviceNode& n : d.device_nodes) {
      nodes.push_back(
          {{"path", n.path}, {"hostPath", n.host_path}, {"permissions", n.permissions}});
    }
    if (!nodes.empty()) edits["deviceNodes"] = nodes;
    nlohmann::json mounts = nlohmann::json::array();
    for (const CdiMount& m : d.mounts) {
      nlohmann::json options = {m.read_only ? "ro" : "rw", "nosuid", "nodev", "bind"};
      mounts.push_back(
          {{"hostPath", m.host_path}, {"containerPath", m.container_path}, {"options", options}});
    }
    if (!mounts.empty()) edits["mounts"] = mounts;
    list.push_back({{"name", absl::StrCat(claim_uid, "-", d.device)}, {"containerEdits", edits}});
  }
  return {{"cdiVersion", kCdiVersion}, {"kind", kCdiKind}, {"devices", list}};
}

absl::Status WriteCdiSpec(const std::string& dir, const std::string& claim_uid,
                          const std::vector<CdiDevice>& devices) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot create the CDI directory ", dir, ": ", error.message()));
  }
  const std::string path = CdiSpecPath(dir, claim_uid);
  absl::Status written = util::WritePrivateFile(path, CdiSpec(claim_uid, devices).dump(2) + "\n");
  if (!written.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot write the CDI spec: ", written.message()));
  }
  // Container runtimes read the spec as root; others may read it too (it holds no secret).
  ::chmod(path.c_str(), 0644);
  return absl::OkStatus();
}

absl::Status RemoveCdiSpec(const std::string& dir, const std::string& claim_uid) {
  const std::string path = CdiSpecPath(dir, claim_uid);
  if (std::remove(path.c_str()) != 0 && errno != ENOENT) {
    return absl::UnavailableError(
        absl::StrCat("cannot remove the CDI spec ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace gpuslice::dra
