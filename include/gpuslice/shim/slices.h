// gpuslice/shim/slices.h: reading software slices' accounting from outside the interposer.
//
// The interposer (libgpuslice-cuda.so) keeps each slice's accounting in a shared file
// (gpuslice/shim/slice_region.h). The agent's collector, `gpuslice measure`, tests and benchmarks
// read it through this interface; they never change a slice's limits or counts, except that
// reading reclaims nothing and RemoveSlice deletes a finished slice's file.
//
// Contract:
//   * SliceDirectory() is $GPUSLICE_SHM_DIR, else /dev/shm/gpuslice.
//   * ReadSlice maps the file read-write (the mutex needs it), checks magic, version and size,
//     takes the robust mutex (marking it consistent if its holder died), copies the region, and
//     unlocks. Each slot is reported with `alive` from its OFD lock byte (F_OFD_GETLK): a dead
//     process's slot is reported with alive=false until the interposer reclaims it.
//     A missing file is NotFound; a file of another layout is FailedPrecondition.
//   * ListSlices reads every `slice-*` file of the directory; files it cannot read are skipped
//     and named in `errors`.
//   * FindHostPid maps a process seen in its own PID namespace to the PID in the namespace of
//     this process's /proc: it scans /proc/<pid>/status NSpid lines for one whose last entry is
//     `pid` and whose /proc/<pid>/ns/pid inode is `pid_ns`. No CUDA context is opened. Returns 0
//     when none matches (the process is gone, or lives in a namespace this /proc cannot see).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/shim/slice_region.h"

namespace gpuslice::shim {

struct SliceProcess {
  int pid = 0;       // in its own PID namespace
  int host_pid = 0;  // as the slot recorded it, else resolved with FindHostPid; 0 = unknown
  std::uint64_t pid_ns = 0;
  bool alive = false;
  std::uint64_t used_bytes = 0, peak_bytes = 0, context_bytes = 0;
  std::uint64_t allocations = 0, refused = 0, launches = 0, kernel_ns = 0, throttled_ns = 0;
};

struct SliceSnapshot {
  std::string path;
  std::string id;
  std::string gpu_uuid;  // "" until the slice's first context
  SliceMode mode = SliceMode::kEnforce;
  SharePolicy policy = SharePolicy::kStrict;
  std::uint64_t cap_bytes = 0;  // 0 = no cap
  int share_milli = 0;          // 0 = no compute limit
  std::uint64_t context_reserve_bytes = 0;
  std::uint64_t created_unix_s = 0;
  std::uint64_t used_bytes = 0, peak_bytes = 0;
  std::uint64_t allocations = 0, refused = 0;
  std::uint64_t reclaimed_processes = 0, reclaimed_bytes = 0;
  std::uint64_t processes_joined = 0;  // processes that ever took a slot
  std::uint64_t launches = 0, kernel_ns = 0, throttled_ns = 0;
  std::vector<std::uint64_t> size_histogram;  // kSizeHistogramBuckets entries
  std::vector<SliceProcess> processes;        // occupied slots only
};

struct SliceList {
  std::vector<SliceSnapshot> slices;
  std::vector<std::string> errors;
};

std::string SliceDirectory();
std::string SlicePath(const std::string& directory, const std::string& slice_id);
absl::StatusOr<SliceSnapshot> ReadSlice(const std::string& path);
SliceList ListSlices(const std::string& directory);
absl::Status RemoveSlice(const std::string& path);
int FindHostPid(std::uint64_t pid_ns, int pid);

}  // namespace gpuslice::shim
