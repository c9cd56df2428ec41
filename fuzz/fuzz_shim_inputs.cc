// The interposer's inputs (docs/SHIM.md) on arbitrary bytes, in three parts split at NUL bytes:
// GPUSLICE_* environment lines (NAME=value), a GPUSLICE_LIMITS_FILE text, and the bytes of a
// slice's shared accounting file (gpuslice/shim/slice_region.h). The settings are read with the
// interposer's own LoadConfig (src/shim/config.h); the slice file, written to a scratch directory,
// is read with ReadSlice (gpuslice/shim/slices.h: the agent and `gpuslice measure`) and, when it
// is a region, opened with the interposer's Accounting (src/shim/accounting.h) to count and uncount
// an allocation. The first byte of the file part says whether to pad it to a region's size and to
// stamp a region's header on it; its robust mutex is always initialised as the interposer does
// (pthread's own state is not data that a reader could check).
// Beside the sanitizers: settings read without error are in their documented ranges and those
// with an error name the variable; the reader and the interposer agree on a slice's file name; a
// file shorter than a region or with another header is refused, one that is read is read as its
// bytes say, twice the same; the interposer opens every region the reader accepts, and a cap it
// enforces is never passed by an allocation it grants.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "accounting.h"
#include "config.h"
#include "fuzz_util.h"
#include "gpuslice/shim/slice_region.h"
#include "gpuslice/shim/slices.h"
#include "shared_file.h"

namespace {

using gpuslice::fuzz::Check;
using gpuslice::fuzz::Scratch;

using gpuslice::shim::SliceRegion;
using gpuslice::shim::SliceSnapshot;

std::map<std::string, std::string> environment;

const char* Lookup(const char* name) {
  auto it = environment.find(name);
  return it == environment.end() ? nullptr : it->second.c_str();
}

bool IsSliceId(const std::string& id) {
  if (id.empty() || id.size() >= static_cast<std::size_t>(gpuslice::shim::kSliceIdSize)) {
    return false;
  }
  return gpuslice::shim::SanitizeSliceId(id) == id;
}

void CheckConfig(const gpuslice::shim::Config& config) {
  if (!config.error.empty()) {
    Check(config.error.rfind("GPUSLICE_", 0) == 0);
    return;
  }
  Check(config.cap_bytes % (1ull << 20) == 0 && config.cap_bytes <= (1ull << 50));
  Check(config.share_milli >= 0 && config.share_milli < 1000);
  Check(config.context_reserve_bytes % (1ull << 20) == 0 &&
        config.context_reserve_bytes <= (1ull << 40));
  Check(config.log_level >= 0 && config.log_level <= 2);
  Check(IsSliceId(config.slice_id));
  Check(!config.Enforcing() || config.mode == gpuslice::shim::Mode::kEnforce);
  Check(config.Active() == (config.mode == gpuslice::shim::Mode::kMeasure || config.Enforcing()));
}

std::string Bounded(const char* text, std::size_t size) {
  return std::string(text, strnlen(text, size));
}

// The snapshot says what the region's bytes say.
void CheckSnapshot(const SliceSnapshot& s, const SliceRegion& r) {
  Check(s.id == Bounded(r.slice_id, sizeof r.slice_id));
  Check(s.gpu_uuid == Bounded(r.gpu_uuid, sizeof r.gpu_uuid));
  Check(s.cap_bytes == r.cap_bytes && s.used_bytes == r.used_bytes);
  Check(s.share_milli == (r.share_milli < 1000 ? static_cast<int>(r.share_milli) : 0));
  Check(s.size_histogram.size() == static_cast<std::size_t>(gpuslice::shim::kSizeHistogramBuckets));
  std::size_t occupied = 0;
  for (const gpuslice::shim::ProcessSlot& slot : r.slots) occupied += slot.pid != 0 ? 1 : 0;
  Check(s.processes.size() == occupied);
  for (const gpuslice::shim::SliceProcess& p : s.processes) Check(p.pid != 0 && !p.alive);
}

// The interposer's mapping is unmapped only at exit; a run of millions of inputs must drop it.
void UnmapFile(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
  while (std::getline(maps, line)) {
    if (line.size() < path.size() || line.find(path) == std::string::npos) continue;
    ranges.emplace_back(std::strtoull(line.c_str(), nullptr, 16),
                        std::strtoull(line.c_str() + line.find('-') + 1, nullptr, 16));
  }
  for (const auto& [from, to] : ranges) munmap(reinterpret_cast<void*>(from), to - from);
}

void SliceFile(std::string_view bytes, const gpuslice::shim::Config& config) {
  if (bytes.empty()) return;
  const std::uint8_t flags = static_cast<std::uint8_t>(bytes[0]);
  std::string file(bytes.substr(1));
  if ((flags & 1) != 0) file.resize(sizeof(SliceRegion), '\0');
  if ((flags & 2) != 0 && file.size() >= 12) {
    const std::uint32_t header[3] = {gpuslice::shim::kRegionMagic, gpuslice::shim::kRegionVersion,
                                     static_cast<std::uint32_t>(sizeof(SliceRegion))};
    std::memcpy(file.data(), header, sizeof header);
  }
  SliceRegion region{};
  std::memcpy(static_cast<void*>(&region), file.data(), std::min(file.size(), sizeof region));
  if (file.size() >= sizeof(SliceRegion)) {
    gpuslice::shim::InitRobustMutex(&region.lock);
    std::memcpy(file.data(), static_cast<const void*>(&region), sizeof region);
  }
  const std::string path = Scratch("gpuslice_fuzz_shim") + "/slice-fuzz";
  unlink(path.c_str());
  {
    std::ofstream out(path, std::ios::binary);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
    if (!out) std::abort();
  }
  absl::StatusOr<SliceSnapshot> read = gpuslice::shim::ReadSlice(path);
  const bool region_ok =
      file.size() >= sizeof(SliceRegion) && region.magic == gpuslice::shim::kRegionMagic &&
      region.version == gpuslice::shim::kRegionVersion && region.size == sizeof(SliceRegion);
  Check(read.ok() == region_ok);
  if (!read.ok()) {
    Check(absl::IsFailedPrecondition(read.status()));
    return;
  }
  CheckSnapshot(*read, region);
  absl::StatusOr<SliceSnapshot> again = gpuslice::shim::ReadSlice(path);
  Check(again.ok());
  CheckSnapshot(*again, region);

  // The interposer's side: a process of this slice joins, allocates and leaves.
  gpuslice::shim::Config joining = config;
  joining.shm_dir = Scratch("gpuslice_fuzz_shim");
  joining.slice_id = "fuzz";
  gpuslice::shim::Accounting accounting;
  std::string error;
  Check(accounting.Open(joining, &error));
  Check(accounting.Cap() == region.cap_bytes);
  const std::uint64_t ask = region.slots[0].peak_bytes;  // any number the file holds
  if (accounting.Reserve(ask, false)) {
    Check(accounting.Cap() == 0 || accounting.Used() <= accounting.Cap());
    accounting.Commit(ask);
    accounting.Release(ask, false);
  }
  Check(accounting.LiveProcesses() == 1);
  accounting.Leave();
  UnmapFile(path);
  absl::StatusOr<SliceSnapshot> after = gpuslice::shim::ReadSlice(path);
  Check(after.ok());
  for (const gpuslice::shim::SliceProcess& p : after->processes) Check(!p.alive);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  std::size_t at = 0;
  while (parts.size() < 2) {
    const std::size_t nul = input.find('\0', at);
    if (nul == std::string_view::npos) break;
    parts.push_back(input.substr(at, nul - at));
    at = nul + 1;
  }
  parts.push_back(input.substr(std::min(at, input.size())));
  while (parts.size() < 3) parts.push_back({});

  environment.clear();
  std::size_t start = 0;
  while (start < parts[0].size()) {
    std::size_t end = parts[0].find('\n', start);
    if (end == std::string_view::npos) end = parts[0].size();
    const std::string_view line = parts[0].substr(start, end - start);
    const std::size_t eq = line.find('=');
    if (eq != std::string_view::npos) {
      environment[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
    start = end + 1;
  }
  // The limits file is the harness's own (a fuzzed path could name a file that never ends).
  environment.erase("GPUSLICE_LIMITS_FILE");
  if (!parts[1].empty()) {
    const std::string limits = Scratch("gpuslice_fuzz_shim") + "/limits";
    std::ofstream out(limits, std::ios::binary);
    out.write(parts[1].data(), static_cast<std::streamsize>(parts[1].size()));
    out.close();
    environment["GPUSLICE_LIMITS_FILE"] = limits;
  }
  const gpuslice::shim::Config config = gpuslice::shim::LoadConfig(&Lookup);
  CheckConfig(config);
  for (const char* name : {"GPUSLICE_SLICE", "GPUSLICE_LEASE"}) {
    if (const char* value = Lookup(name)) {
      const std::string id = gpuslice::shim::SanitizeSliceId(value);
      Check(gpuslice::shim::SanitizeSliceId(id) == id);
      Check(gpuslice::shim::SlicePath("/d", value) == "/d/slice-" + id);
    }
  }
  SliceFile(parts[2], config);
  return 0;
}
