// gpuslice/dra/cdi.h
//
// The Container Device Interface spec the DRA driver writes for each prepared claim
// (../shared/reference/kubernetes-dra.md §7): one transient spec file per claim,
// `<dir>/gpu.gpuslice.io-claim_<claim uid>.json`, kind "gpu.gpuslice.io/claim", one CDI device
// per allocated device named "<claim uid>-<device name>" (a name never reused for other content:
// container runtimes may cache specs), cdiVersion 0.5.0 (the lowest with `hostPath`). Written
// atomically (temporary file, rename) before prepare answers; removed by unprepare.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json_fwd.hpp"

namespace gpuslice::dra {

inline constexpr char kCdiKind[] = "gpu.gpuslice.io/claim";
inline constexpr char kCdiVersion[] = "0.5.0";

struct CdiMount {
  std::string host_path;
  std::string container_path;
  bool read_only = false;
};

struct CdiDeviceNode {
  std::string path;       // in the container
  std::string host_path;  // on the host
  std::string permissions = "rw";
};

// What a container that gets one device sees.
struct CdiDevice {
  std::string device;  // the pool's device name
  std::map<std::string, std::string> env;
  std::vector<CdiDeviceNode> device_nodes;
  std::vector<CdiMount> mounts;
};

// "gpu.gpuslice.io/claim=<uid>-<device>".
std::string CdiDeviceId(const std::string& claim_uid, const std::string& device);
// "<dir>/gpu.gpuslice.io-claim_<uid>.json".
std::string CdiSpecPath(const std::string& dir, const std::string& claim_uid);

// The spec document (pure). REQUIRES: devices not empty.
nlohmann::json CdiSpec(const std::string& claim_uid, const std::vector<CdiDevice>& devices);

// Writes the spec atomically (creating `dir` if needed); Unavailable on an I/O error.
absl::Status WriteCdiSpec(const std::string& dir, const std::string& claim_uid,
                          const std::vector<CdiDevice>& devices);
// Removes the claim's spec; a missing file is fine.
absl::Status RemoveCdiSpec(const std::string& dir, const std::string& claim_uid);

}  // namespace gpuslice::dra
