// The DRA driver's parsers on arbitrary bytes (the first byte chooses): a ResourceClaim as the API
// server returns it (gpuslice/dra/claim.h ReadAllocation), a quantity (QuantityNanos,
// ParseQuantityMilli), the node-local checkpoint file (gpuslice/dra/checkpoint.h).
// Beside the sanitizers and no exception escaping: an accepted claim yields devices with a name and
// a request, a share ID that is a lowercase UUID or empty, no negative figure, and a SliceConfig
// inside its bounds; ParseQuantityMilli accepts only what QuantityNanos accepts, never a negative
// value, and agrees with it to the thousandth; a checkpoint is loaded or refused as damaged
// (DataLoss), and one that loads saves and loads back equal.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "fuzz_util.h"
#include "gpuslice/dra/checkpoint.h"
#include "gpuslice/dra/claim.h"
#include "gpuslice/dra/resource_model.h"
#include "nlohmann/json.hpp"

namespace {

using gpuslice::fuzz::Check;
namespace dra = gpuslice::dra;

void Claim(const std::string& text) {
  const nlohmann::json claim = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (claim.is_discarded()) return;
  absl::StatusOr<std::vector<dra::AllocatedDevice>> devices =
      dra::ReadAllocation(claim, "u1", "gpu.gpuslice.io", "node-a");
  if (!devices.ok()) {
    Check(!devices.status().message().empty());
    return;
  }
  Check(!devices->empty());
  for (const dra::AllocatedDevice& d : *devices) {
    Check(!d.device.empty() && !d.request.empty());
    Check(d.request.find('/') == std::string::npos);
    Check(d.share_id.empty() || dra::IsLowercaseUuid(d.share_id));
    Check(!d.compute_milli || *d.compute_milli >= 0);
    Check(!d.memory_mib || *d.memory_mib >= 0);
    if (d.config.compute_share_milli) {
      Check(*d.config.compute_share_milli >= 1 && *d.config.compute_share_milli <= 1000);
    }
    if (d.config.vram_limit_mib) Check(*d.config.vram_limit_mib >= 1);
  }
}

void Quantity(const std::string& text) {
  absl::StatusOr<std::string> nanos = dra::QuantityNanos(text);
  absl::StatusOr<std::int64_t> milli = dra::ParseQuantityMilli(text);
  if (!nanos.ok()) {
    Check(!milli.ok());
    return;
  }
  Check(!nanos->empty());
  if (!milli.ok()) return;  // negative or too large
  Check(*milli >= 0 && nanos->front() != '-');
  // milli = ceil(nanos / 10^6): its digits are the nanos' leading ones (plus one when rounded).
  const std::string as_text = std::to_string(*milli);
  if (nanos->size() > 6) {
    const std::string lead = nanos->substr(0, nanos->size() - 6);
    const bool exact = nanos->find_first_not_of('0', nanos->size() - 6) == std::string::npos;
    if (exact) Check(as_text == lead);
  } else {
    Check(*milli == (*nanos == "0" ? 0 : 1));
  }
}

void CheckpointFile(const std::string& text) {
  const std::string& dir = gpuslice::fuzz::Scratch("fuzz_dra");
  const std::string path = dir + "/checkpoint.json";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  absl::StatusOr<dra::Checkpoint> loaded = dra::LoadCheckpoint(path);
  if (!loaded.ok()) {
    Check(loaded.status().code() == absl::StatusCode::kDataLoss);
    return;
  }
  Check(dra::SaveCheckpoint(path, *loaded).ok());
  absl::StatusOr<dra::Checkpoint> again = dra::LoadCheckpoint(path);
  Check(again.ok() && *again == *loaded);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      Claim(text);
      break;
    case 1:
      Quantity(text);
      break;
    default:
      CheckpointFile(text);
      break;
  }
  return 0;
}
