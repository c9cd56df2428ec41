// gpuslice/dra/checkpoint.h
//
// The DRA driver's node-local record of what it prepared, so that a restart (or a crash between
// any two steps of prepare or unprepare) converges instead of leaking or forgetting instances.
// Written before every change to the device (intent first, then the result), atomically
// (temporary file, sync, rename; gpuslice/util/private_file.h), as JSON:
//   {"version": 1, "claims": {"<uid>": {"namespace", "name", "phase", "devices": [...]}}}
// A claim is kPreparing from before its first instance is created until its CDI spec is written,
// kPrepared then, and kUnpreparing from before its first instance is destroyed until the record
// is dropped. Each device records the instance the driver made (GI and CI ids, UUID) once made.
//
// Load: a missing file is an empty checkpoint; an unreadable or malformed one is DataLoss (the
// driver must not start forgetting what it created).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpuslice::dra {

enum class DeviceKind { kMig, kFixed, kWhole, kShared };
enum class ClaimPhase { kPreparing, kPrepared, kUnpreparing };

// One device of a claim and what the driver did for it.
struct DeviceRecord {
  std::string device;  // name in the pool
  std::string request;
  std::string share_id;
  DeviceKind kind = DeviceKind::kMig;
  int gpu = 0;
  int profile_id = -1;              // GI profile id (on-demand MIG)
  int start = -1;                   // GI placement start (MIG)
  int gi = -1;                      // the GI the driver created, -1 until created
  int ci = -1;                      // its CI, -1 until created
  std::string uuid;                 // MIG-… or GPU-… the container gets
  std::int64_t compute_milli = 0;   // shared devices: the enforced compute share
  std::int64_t vram_limit_mib = 0;  // shared devices: the enforced memory cap
  std::string cdi_id;               // fully-qualified CDI device name
  friend bool operator==(const DeviceRecord&, const DeviceRecord&) = default;
};

struct ClaimRecord {
  std::string namespace_name;
  std::string name;
  ClaimPhase phase = ClaimPhase::kPreparing;
  std::vector<DeviceRecord> devices;
  friend bool operator==(const ClaimRecord&, const ClaimRecord&) = default;
};

struct Checkpoint {
  std::map<std::string, ClaimRecord> claims;  // by claim uid
  friend bool operator==(const Checkpoint&, const Checkpoint&) = default;
};

absl::StatusOr<Checkpoint> LoadCheckpoint(const std::string& path);
absl::Status SaveCheckpoint(const std::string& path, const Checkpoint& checkpoint);

const char* PhaseName(ClaimPhase phase);
const char* KindName(DeviceKind kind);

}  // namespace gpuslice::dra
